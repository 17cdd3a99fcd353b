"""tplog.codec's pure helpers (tplog/value_format.py, tplog/limits.py), value by value: the header
facts the id-only folds read, the nesting-depth check, and the schema-check type mirrored from ``Event``.

Most of these run once and are cached in the store's process (``check_type``, the nested-field
table), so the store-level tests cannot tell a wrong table from a right one built the same way;
these tests call the builders themselves (tests/MUTANTS.md)."""

from __future__ import annotations

import typing
import zlib
from pathlib import Path
from typing import Any

import msgspec
import pytest
import zstandard
from conftest import T, agent_start, completed, link, response, spawn_message, started, user
from conftest import ToyStore as Store

from tplog import codec, limits
from tplog.backends.lmdb.keys import event_key, tkey
from tplog.codec import ABORTED, V3_SPAWN, Facts, TurnFacts, facts_of, turn_facts_of
from tplog.errors import CorruptionError, InvalidInputError
from tplog.events import (
    EVENT_TYPES,
    AgentTurnCompleted,
    AgentTurnInterrupted,
    AgentTurnStarted,
    Event,
    MessageRecorded,
    UserTurnSubmitted,
)
from tplog.protocol import model as m


def _ret(call_id: str, status: str = "success") -> m.ToolReturnPart:
    return m.ToolReturnPart(tool_name="f", tool_call_id=call_id, status=status, content=1)


def _msg(cls: type, parts: list[Any], **kw: Any) -> MessageRecorded:
    return MessageRecorded(message=cls(timestamp=T, agent_id="a1", parts=parts, **kw))


def _system(event_type: str, data: Any) -> MessageRecorded:
    return MessageRecorded(message=m.SystemMessage(timestamp=T, event_type=event_type, event_data=data))


# --------------------------------------------------------------------------- facts


def test_facts_of_a_user_turn_lists_its_tool_returns_and_retries_only() -> None:
    parts = [m.UserPromptPart(content="x"), _ret("c1"), _ret("c2", "error"),
             m.RetryPromptPart(content="again", tool_call_id="c3"), m.RetryPromptPart(content="no id")]
    ev = UserTurnSubmitted(turn=m.UserTurn(submitted_at=T, parts=parts))
    assert facts_of(ev) == Facts(message_type="user", returns=[("c1", "success"), ("c2", "error"), ("c3", "retry")])
    assert facts_of(user("plain")) is None


def test_facts_of_messages() -> None:
    call = m.ToolCallPart(tool_name="search", tool_call_id="c1", args={})
    assert facts_of(_msg(m.ResponseMessage, [m.TextPart(content="t"), call], finish_reason="tool_call")) == Facts(
        message_type="response", calls=[("c1", "search")], finish_reason="tool_call")
    assert facts_of(_msg(m.RequestMessage, [_ret("c1")])) == Facts(message_type="request", returns=[("c1", "success")])
    # an aborted response holds no call, but the folds still need its finish reason
    assert facts_of(_msg(m.ResponseMessage, [], finish_reason=ABORTED)) == Facts(
        message_type="response", finish_reason=ABORTED)
    assert facts_of(_msg(m.ResponseMessage, [], extra={"stop_reason": ABORTED})) == Facts(
        message_type="response", finish_reason=ABORTED)
    assert facts_of(_msg(m.ResponseMessage, [], extra={"stop_reason": 3})) is None
    assert facts_of(_msg(m.ResponseMessage, [], finish_reason="stop")) is None
    assert facts_of(_msg(m.RequestMessage, [], finish_reason=ABORTED)) is None  # only a response aborts
    assert facts_of(response("plain")) is None
    assert facts_of(agent_start()) is None and facts_of(link("x")) is None


def test_facts_of_spawn_events_name_the_spawned_thread() -> None:
    assert facts_of(spawn_message("kid")) == Facts(message_type="system", event_type=m.THREAD_SPAWN,
                                                   spawned=["kid"])
    assert facts_of(_system(V3_SPAWN, {"thread_id": "old"})) == Facts(
        message_type="system", event_type=V3_SPAWN, spawned=["old"])
    # spawned_thread_id wins over thread_id
    assert facts_of(_system(m.THREAD_SPAWN, {"spawned_thread_id": "a", "thread_id": "b"})) == Facts(
        message_type="system", event_type=m.THREAD_SPAWN, spawned=["a"])
    assert facts_of(_system(m.THREAD_SPAWN, {"spawned_thread_id": 7})) is None
    assert facts_of(_system(m.THREAD_SPAWN, ["kid"])) is None
    assert facts_of(_system(m.THREAD_END, {"thread_id": "kid"})) is None


def test_turn_facts_of_the_agent_turn_boundaries() -> None:
    assert turn_facts_of(AgentTurnStarted(agent_id="a9", started_at=T)) == TurnFacts(agent_id="a9")
    assert turn_facts_of(AgentTurnCompleted(completed_at=T, deferred={"c1": "approval"})) == TurnFacts(
        deferred={"c1": "approval"})
    ev = AgentTurnInterrupted(interruption=m.Interruption(reason="user_cancel", interrupted_at="2026-01-02T00:00:00Z"))
    assert turn_facts_of(ev) == TurnFacts(reason="user_cancel", interrupted_at="2026-01-02T00:00:00Z")
    assert turn_facts_of(completed()) == TurnFacts()
    assert turn_facts_of(user()) is None


# --------------------------------------------------------------------------- nesting depth


class Box(msgspec.Struct):
    v: Any
    n: int  # not a container: never visited


def _nest(depth: int, make: Any) -> Any:
    v: Any = "leaf"
    for _ in range(depth - 1):
        v = make(v)
    return v


@pytest.mark.parametrize("make", [lambda v: [v], lambda v: {"k": v}, lambda v: (v,),
                                  lambda v: Box(v=v, n=1)],
                         ids=["list", "dict", "tuple", "struct"])
def test_depth_ok_is_exact_at_the_limit(make: Any) -> None:
    for depth in (2, 3, 5):
        obj = _nest(depth + 1, make)  # ``depth`` containers deep
        assert limits.depth_ok(obj, depth) is True
        assert limits.depth_ok(obj, depth - 1) is False
    assert limits.depth_ok("leaf", 0) is False and limits.depth_ok("leaf", 1) is True


def test_depth_ok_follows_container_subclasses_and_skips_leaves() -> None:
    class D(dict[str, Any]):
        pass

    class L(list[Any]):
        pass

    assert limits.depth_ok(D(a=L([L([1])])), 3) is True
    assert limits.depth_ok(D(a=L([L([1])])), 2) is False
    assert limits.depth_ok(L([D(a=D(b=1))]), 2) is False
    # leaves at the limit do not count as a level
    assert limits.depth_ok([1, "s", 2.0, True, None, b"x"], 1) is True
    assert limits.depth_ok([[1]], 1) is False


def test_nested_fields_lists_the_fields_that_can_hold_a_container() -> None:
    class S(msgspec.Struct):
        a: int
        b: str | None
        c: Any
        d: list[int]
        e: m.Opt[str]
        f: typing.Literal["x", "y"]
        g: int | dict[str, int]
        h: bytes = b""

    assert limits._nested_fields(S) == ("c", "d", "g")
    assert limits._NESTED_FIELDS[S] == ("c", "d", "g")
    limits._NESTED_FIELDS[S] = ("a",)  # read from the table once built
    assert limits._nested_fields(S) == ("a",)
    del limits._NESTED_FIELDS[S]
    assert limits._nested_fields(m.ToolCallPart) == ("extra", "args")


# --------------------------------------------------------------------------- the schema-check type


def _structs(tp: Any, seen: set[type]) -> set[type]:
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        if tp not in seen:
            seen.add(tp)
            for f in msgspec.structs.fields(tp):
                _structs(f.type, seen)
    else:
        for a in typing.get_args(tp):
            _structs(a, seen)
    return seen


def test_raw_mirror_mirrors_every_struct_of_event() -> None:
    made: dict[type, Any] = {}
    top = limits._raw_mirror(Event, made)
    structs = _structs(Event, set())
    assert set(made) == structs and len(structs) > 30
    assert typing.get_args(top) == tuple(made[t] for t in EVENT_TYPES)
    for tp in structs:
        mirror = made[tp]
        assert mirror.__name__ == tp.__name__
        for attr in ("tag", "tag_field", "array_like", "forbid_unknown_fields"):
            assert getattr(mirror.__struct_config__, attr) == getattr(tp.__struct_config__, attr), (tp, attr)
        want = [(f.name, f.encode_name, f.required, f.default, f.default_factory) for f in msgspec.structs.fields(tp)]
        got = [(f.name, f.encode_name, f.required, f.default, f.default_factory)
               for f in msgspec.structs.fields(mirror)]
        assert got == want, tp


def test_raw_mirror_types() -> None:
    made: dict[type, Any] = {}
    limits._raw_mirror(Event, made)
    types = {f.name: f.type for f in msgspec.structs.fields(made[m.ToolCallPart])}
    assert types["args"] is msgspec.Raw and types["tool_name"] is str
    assert types["extra"] == dict[str, msgspec.Raw]
    link_types = {f.name: f.type for f in msgspec.structs.fields(made[m.ThreadLink])}
    assert link_types["metadata"] is msgspec.Raw  # Opt[Any]: a union with Any takes anything
    prompt = {f.name: f.type for f in msgspec.structs.fields(made[m.UserPromptPart])}["content"]
    assert prompt == typing.Union[str, list[typing.Union[
        str, made[m.ImageUrl], made[m.AudioUrl], made[m.VideoUrl], made[m.DocumentUrl], made[m.BinaryContent],
        made[m.ExtensionContent]]]]
    started = {f.name: f.type for f in msgspec.structs.fields(made[AgentTurnStarted])}
    assert started["agent_id"] is str
    assert limits._raw_mirror(typing.Annotated[Any, "meta"], {}) == typing.Annotated[msgspec.Raw, "meta"]
    assert limits._raw_mirror(tuple[int, ...], {}) == tuple[int, ...]
    assert limits._raw_mirror(typing.Literal["a"], {}) == typing.Literal["a"]


class Node(msgspec.Struct):
    child: list[Node]


def test_raw_mirror_refuses_a_struct_that_refers_to_itself() -> None:
    with pytest.raises(TypeError, match=r"^Node refers to itself$"):
        limits._raw_mirror(Node, {})


def test_the_check_type_decodes_like_event_but_leaves_any_undecoded() -> None:
    dec = msgspec.msgpack.Decoder(limits._raw_mirror(Event, {}))
    call = m.ToolCallPart(tool_name="f", tool_call_id="c1", args={"q": [1, 2]})
    body = msgspec.msgpack.encode(_msg(m.ResponseMessage, [call]))
    got = dec.decode(body)
    assert type(got).__name__ == "MessageRecorded"
    assert msgspec.msgpack.decode(got.message.parts[0].args) == {"q": [1, 2]}
    bad = msgspec.msgpack.encode({"type": "message", "message": {"message_type": "response", "timestamp": T,
                                                                 "agent_id": 5, "parts": []}})
    with pytest.raises(msgspec.ValidationError, match=r"agent_id"):
        dec.decode(bad)
    with pytest.raises(msgspec.ValidationError):
        msgspec.msgpack.decode(bad, type=Event)


# --------------------------------------------------------------------------- stored values

KEY = b"thread-key\x00\x00\x00\x00\x00\x00\x00\x02"
WHERE = ("t", 2)
TRUNCATED = r"^stored value is truncated or of an unknown format \(thread t, seq 2\)$"
CRC = r"^stored value failed its CRC-32 check \(thread t, seq 2\)$"
HEADER_CRC = r"^stored value failed its header CRC-32 check \(thread t, seq 2\)$"


def _calls(n: int) -> MessageRecorded:
    parts = [m.ToolCallPart(tool_name=f"tool_{i}", tool_call_id=f"call_{i:04d}", args={"i": i}) for i in range(n)]
    return _msg(m.ResponseMessage, parts)


def _value(event: Any) -> bytes:
    return codec.Codec().encode(event, "ev-1", 1234).finish(KEY)


def _format1(value: bytes) -> bytes:
    """The same header and body as a format-1 value (one CRC over value[10:] and the key)."""
    rest = value[10:-4]
    crc = zlib.crc32(KEY, zlib.crc32(rest))
    return b"\x01" + value[1:6] + crc.to_bytes(4, "big") + rest


def test_a_header_longer_than_255_bytes_is_read_back() -> None:
    ev = _calls(20)
    value = _value(ev)
    hlen = int.from_bytes(value[10:12], "big")
    assert value[10] > 0 and value[11] != hlen  # the high byte of the header length is in use
    c = codec.Codec()
    assert codec.header_end(value) == 12 + hlen
    assert codec.verified_header_end(KEY, value) == 12 + hlen
    c.check_header(KEY, value, where=WHERE)
    c.check(KEY, value, where=WHERE)
    assert c.header(value).facts == Facts(message_type="response",
                                          calls=[(f"call_{i:04d}", f"tool_{i}") for i in range(20)])
    assert c.decode_value(KEY, value, where=WHERE) == ev
    assert bytes(codec.stored_body(value)) == value[12 + hlen:-4]
    assert c.decode_event(c.body_bytes(value, where=WHERE)) == ev
    v1 = _format1(value)
    c.check_header(KEY, v1, where=WHERE)
    assert bytes(codec.stored_body(v1)) == v1[12 + hlen:]
    assert c.decode_value(KEY, v1, where=WHERE) == ev


def _with_hlen(value: bytes, hlen: int) -> bytes:
    return value[:10] + hlen.to_bytes(2, "big") + value[12:]


@pytest.mark.parametrize("name", ["check", "check_header", "decode_value"])
def test_damaged_values_name_what_is_wrong(name: str) -> None:
    c = codec.Codec()
    value = _value(response("hello there"))
    hlen = int.from_bytes(value[10:12], "big")
    call = getattr(c, name)
    header_crc = HEADER_CRC if name == "check_header" else CRC
    cases = {
        "empty after the prefix": (value[:11], TRUNCATED),
        "shorter than prefix and body CRC": (value[:15], TRUNCATED),
        "unknown format": (b"\x04" + value[1:], TRUNCATED),
        "unknown flag": (value[:1] + b"\x04" + value[2:], TRUNCATED),
        "header longer than the value": (_with_hlen(value, 0x100 + hlen), TRUNCATED),
        "header running into the body CRC": (_with_hlen(value, len(value) - 14), TRUNCATED),
        "header ending at the body CRC": (_with_hlen(value, len(value) - 16), header_crc),
        "a header byte flipped": (value[:14] + bytes([value[14] ^ 1]) + value[15:], header_crc),
    }
    for what, (bad, message) in cases.items():
        with pytest.raises(CorruptionError, match=message):
            call(KEY, bad, where=WHERE)
            pytest.fail(what)
    body_flipped = value[:-5] + bytes([value[-5] ^ 1]) + value[-4:]
    if name == "check_header":
        call(KEY, body_flipped, where=WHERE)  # the body is checked when it is read
    else:
        with pytest.raises(CorruptionError, match=CRC):
            call(KEY, body_flipped, where=WHERE)
    with pytest.raises(CorruptionError, match=header_crc):
        call(KEY.replace(b"\x02", b"\x03"), value, where=WHERE)  # moved to another key


def test_damaged_format1_values() -> None:
    c = codec.Codec()
    v1 = _format1(_value(response("hello there")))
    for name in ("check", "check_header", "decode_value"):
        getattr(c, name)(KEY, v1, where=WHERE)
        with pytest.raises(CorruptionError, match=CRC):
            getattr(c, name)(KEY, v1[:-1] + bytes([v1[-1] ^ 1]), where=WHERE)
        # a format-1 value has no body CRC: twelve bytes and an empty header are a whole (if wrong) value
        with pytest.raises(CorruptionError, match=CRC):
            getattr(c, name)(KEY, _with_hlen(v1[:12], 0), where=WHERE)
        with pytest.raises(CorruptionError, match=TRUNCATED):
            getattr(c, name)(KEY, _with_hlen(v1, len(v1) - 11), where=WHERE)


def test_blob_refcounts_use_all_32_bits() -> None:
    blob = (7).to_bytes(4, "big") + b"\x01" + bytes(8) + b"rest"
    assert codec.blob_refcount(blob) == 7
    assert codec.blob_with_refcount(blob, 2**31 + 5) == (2**31 + 5).to_bytes(4, "big") + blob[4:]
    assert codec.blob_refcount(codec.blob_with_refcount(blob, 2**32 - 1)) == 2**32 - 1


def test_train_refuses_too_few_samples_by_name() -> None:
    with pytest.raises(InvalidInputError, match=r"^cannot train a zstd dictionary from these 2 samples: "):
        codec.Codec.train([b"a", b"b"])


def _fmt(value: bytes, fmt: int, flags: int | None = None, hlen: int | None = None) -> bytes:
    """``value`` as format ``fmt`` (2 or 3) with its header CRC made right for the new prefix."""
    flags = value[1] if flags is None else flags
    hlen = int.from_bytes(value[10:12], "big") if hlen is None else hlen
    v = bytes([fmt, flags]) + value[2:10] + hlen.to_bytes(2, "big") + value[12:]
    end = min(12 + hlen, len(v))
    crc = zlib.crc32(KEY, zlib.crc32(v[10:end], codec.HEADER_CRC_SEED[fmt]))
    return v[:6] + crc.to_bytes(4, "big") + v[10:]


def test_header_checks_at_the_edges() -> None:
    c = codec.Codec()
    value = _value(response("hello there"))
    end = codec.header_end(value)
    empty = _fmt(bytes(16), 3, hlen=0)  # an empty header and body: the shortest whole format-3 value
    assert codec.verified_header_end(KEY, empty) == 12
    c.check_header(KEY, empty, where=WHERE)
    for flags in (0, 1, 2, 3):
        flagged = _fmt(value, 3, flags=flags)  # the header CRC does not cover the flags
        assert codec.verified_header_end(KEY, flagged) == end
        c.check_header(KEY, flagged, where=WHERE)
    v2 = _fmt(value, 2)
    c.check_header(KEY, v2, where=WHERE)
    assert codec.verified_header_end(KEY, v2) == 0  # format 2: check_header tells it from damage
    into_crc = _fmt(value, 3, hlen=len(value) - 14)  # a right header CRC, over a header running into the body CRC
    assert codec.verified_header_end(KEY, into_crc) == 0
    with pytest.raises(CorruptionError, match=TRUNCATED):
        c.check_header(KEY, into_crc, where=WHERE)
    flipped = value[:14] + bytes([value[14] ^ 1]) + value[15:]
    assert codec.verified_header_end(KEY, flipped) == 0
    assert codec.verified_header_end(KEY, _fmt(value, 3, flags=4)) == 0
    assert codec.verified_header_end(KEY, value[:15]) == 0
    assert codec.verified_header_end(KEY, value[:10]) == 0
    assert codec.verified_header_end(KEY, value[:5]) == 0


def test_peek_header_reads_kind_and_facts_off_the_bytes() -> None:
    kind = codec.MSG_KIND
    assert codec.peek_header(_value(response("no facts"))) == kind
    assert codec.peek_header(_value(_calls(1))) == kind | codec.PEEK_FACTS
    long = _value(_calls(20))
    assert long[10] > 0 and codec.peek_header(long) == kind | codec.PEEK_FACTS
    assert codec.peek_header(_value(user())) == codec.KIND_CODE[UserTurnSubmitted]
    assert codec.peek_header(_value(agent_start())) == -1  # a turn boundary's header has five elements


def test_depth_ok_visits_every_container_after_a_non_container() -> None:
    # a value that is neither a leaf type nor a container is passed over, not the end of the walk
    assert limits.depth_ok([[[["x"]]], object()], 2) is False
    assert limits.depth_ok([[[["x"]]], object()], 4) is True


class Renamed(msgspec.Struct, rename="camel", array_like=True, forbid_unknown_fields=True):
    first_field: int
    with_default: int = 5
    with_factory: list[int] = msgspec.field(default_factory=list)


class Strict(msgspec.Struct, forbid_unknown_fields=True):
    a: int


def test_raw_mirror_keeps_encoded_names_and_struct_options() -> None:
    made: dict[type, Any] = {}
    mirror = limits._raw_mirror(Renamed, made)
    assert [(f.name, f.encode_name) for f in msgspec.structs.fields(mirror)] == [
        ("first_field", "firstField"), ("with_default", "withDefault"), ("with_factory", "withFactory")]
    cfg = mirror.__struct_config__
    assert (cfg.array_like, cfg.forbid_unknown_fields) == (True, True)
    assert msgspec.msgpack.decode(msgspec.msgpack.encode([1]), type=mirror) == mirror(first_field=1)
    strict = limits._raw_mirror(Strict, {})
    assert strict.__struct_config__.forbid_unknown_fields is True
    with pytest.raises(msgspec.ValidationError, match=r"unknown field `b`"):
        msgspec.msgpack.decode(msgspec.msgpack.encode({"a": 1, "b": 2}), type=strict)
    annotated = limits._raw_mirror(typing.Annotated[Strict, "meta"], made)
    assert annotated == typing.Annotated[made[Strict], "meta"]


def _trained() -> bytes:
    bodies = [msgspec.msgpack.encode(_calls(i % 7 + 1)) + str(i).encode() for i in range(300)]
    return codec.Codec.train(bodies, size=4096)


def test_the_newest_dictionary_in_use_compresses_and_names_itself_in_the_frame() -> None:
    data = _trained()
    dict_id = zstandard.ZstdCompressionDict(data).dict_id()
    c = codec.Codec()
    c.add_dictionary(5, data, use=False)
    assert c.current_dict == 0 and c.has_dictionary(5)
    c.add_dictionary(5, data)  # known already: now in use
    assert c.current_dict == 5
    c.add_dictionary(3, data)  # older than the one in use: known, not used
    c.add_dictionary(3, data)
    assert c.current_dict == 5 and c.has_dictionary(3) and not c.has_dictionary(4)
    ev = _calls(5)
    value = c.encode(ev, "ev-1", 1).finish(KEY)
    assert value[1] == codec.F_COMPRESSED and int.from_bytes(value[2:6], "big") == 5
    assert zstandard.get_frame_parameters(bytes(codec.stored_body(value))).dict_id == dict_id
    assert c.decode_value(KEY, value, where=WHERE) == ev
    other = codec.Codec()
    with pytest.raises(CorruptionError, match=r"^value needs zstd dictionary 5, which the store does not have"):
        other.decode_value(KEY, value, where=WHERE)


def test_damage_messages_of_the_other_layouts() -> None:
    c = codec.Codec()
    value = _value(response("hello there"))
    v2 = _fmt(value, 2)
    with pytest.raises(CorruptionError, match=HEADER_CRC):
        c.check_header(KEY, v2[:14] + bytes([v2[14] ^ 1]) + v2[15:], where=WHERE)
    with pytest.raises(CorruptionError, match=HEADER_CRC):
        c.check_header(KEY, bytes([3]) + bytes(15), where=WHERE)  # whole, if empty: its CRC is wrong
    long = _value(_calls(20))
    with pytest.raises(CorruptionError, match=CRC):
        c.check(KEY, long[:14] + bytes([long[14] ^ 1]) + long[15:], where=WHERE)
    # a format-1 value referencing a blob is told apart from format 2/3 by its format byte, not its flags
    v1 = _format1(_fmt(value, 3, flags=codec.F_BLOB))
    with pytest.raises(CorruptionError, match=r"^blob reference without a blob reader \(thread t, seq 2\)$"):
        c.decode_value(KEY, v1, where=WHERE)


def test_whole_values_whose_body_does_not_decode_say_so() -> None:
    c = codec.Codec()
    undecodable = r"^stored event does not decode: .* \(thread t, seq 2\)$"
    empty3 = _fmt(bytes(16), 3, hlen=0)
    empty3 = empty3[:12] + zlib.crc32(KEY, zlib.crc32(b"")).to_bytes(4, "big")  # both CRCs right, no body
    empty1 = _format1(empty3)
    assert len(empty1) == 12
    garbage1 = _format1(empty3[:12] + b"\xc1" + bytes(4))  # uncompressed; 0xc1 is never msgpack
    for value in (empty3, empty1, garbage1):
        with pytest.raises(CorruptionError, match=undecodable):
            c.decode_value(KEY, value, where=WHERE)


# --------------------------------------------------------------------------- through a store's tables


def test_a_missing_or_truncated_shared_blob_is_named(tmp_path: Path) -> None:
    with Store(tmp_path / "s", limits=codec.Limits(blob_threshold=4096)) as s:
        s.append("t", [started("t"), user("lorem ipsum " * 700)])
        with s.backend.engine.read() as txn:
            [(sha, blob)] = [(bytes(k), bytes(v)) for k, v in txn.range("blobs")]
        for stored, message in ((blob[:12], "the event's shared blob is truncated"),
                                (blob[:13], "shared blob failed its CRC-32 check"),  # a whole prefix, no data
                                (None, "the event's shared blob is missing")):
            if stored is None:
                s.backend.engine.run_write(lambda txn: txn.delete("blobs", sha))
            else:
                s.backend.engine.run_write(lambda txn, v=stored: txn.put("blobs", sha, v))
            with pytest.raises(CorruptionError, match=rf"^{message} \(thread t, seq 2\)$") as ei:
                s.read("t")
            assert (ei.value.thread_id, ei.value.seq) == ("t", 2)


def test_a_reader_without_the_dictionary_loads_it_from_the_store(tmp_path: Path) -> None:
    with Store(tmp_path / "s", auto_dictionary=0) as s:
        s.append("t", [started("t"), agent_start()] + [_calls(i % 5 + 1) for i in range(150)])
        assert s.train_dictionary() == 1
        ev = _calls(4)
        s.codec.compress_bodies = True  # a value compressed alone, as older LMDB stores and PostgreSQL hold them
        s.append("t", [ev])
        key = event_key(tkey("t"), 153)
        with s.backend.engine.read() as txn:
            value = bytes(txn.get("events", key))
            assert value[1] == codec.F_COMPRESSED and int.from_bytes(value[2:6], "big") == 1
            fresh = codec.Codec()
            assert fresh.decode_event(fresh.body_bytes(value, txn, where=WHERE)) == ev
            assert fresh.has_dictionary(1) and fresh.current_dict == 1
        with pytest.raises(CorruptionError, match=r"^value needs zstd dictionary 1, which the store does not have"):
            codec.Codec().body_bytes(value, where=WHERE)


def _stored(stored: bytes, flags: int) -> bytes:
    """A format-3 value of an empty-ish header and ``stored`` as its body, both CRCs right."""
    header = msgspec.msgpack.encode([codec.MSG_KIND, "ev-1", 1, None])
    head = len(header).to_bytes(2, "big") + header
    crc = zlib.crc32(KEY, zlib.crc32(head, codec.HEADER_CRC_SEED[3]))
    return (bytes([3, flags]) + bytes(4) + crc.to_bytes(4, "big") + head + stored
            + zlib.crc32(KEY, zlib.crc32(stored)).to_bytes(4, "big"))


def test_a_compressed_body_that_does_not_decode_names_the_event_on_the_fast_path_too() -> None:
    c = codec.Codec()
    good = _value(response("lorem ipsum " * 20))
    assert good[1] == codec.F_COMPRESSED
    bad = _stored(zstandard.ZstdCompressor(write_content_size=True).compress(b"\xc1" * 200), codec.F_COMPRESSED)
    with pytest.raises(CorruptionError, match=r"^stored event does not decode: .* \(thread t, seq 2\)$"):
        c.decode_value(KEY, bad, where=WHERE)  # no decompressor yet: the slow path
    c.decode_value(KEY, good, where=WHERE)  # the decompressor is made and kept: the next read takes the fast path
    for _ in range(2):
        with pytest.raises(CorruptionError, match=r"^stored event does not decode: .* \(thread t, seq 2\)$"):
            c.decode_value(KEY, bad, where=WHERE)


def test_more_edges_of_long_headers_and_empty_bodies() -> None:
    c = codec.Codec()
    long_id = codec.Codec().encode(response("x"), "e" * 300, 1).finish(KEY)  # a long header without facts
    assert long_id[10] > 0 and codec.peek_header(long_id) == codec.MSG_KIND
    long = _value(_calls(20))
    end = codec.header_end(long)
    no_body = long[:end] + long[-4:]  # header and its CRC whole, the body gone: a CRC error, not a truncation
    with pytest.raises(CorruptionError, match=CRC):
        c.check(KEY, no_body, where=WHERE)
    empty_body = _stored(b"", 0)  # both CRCs right, the body empty
    with pytest.raises(CorruptionError, match=r"^stored event does not decode: .* \(thread t, seq 2\)$"):
        c.decode_value(KEY, empty_body, where=WHERE)


def test_compressed_bodies_against_the_decompression_limit() -> None:
    body = msgspec.msgpack.encode(response("lorem ipsum " * 20))
    frame = zstandard.ZstdCompressor(write_content_size=True).compress(body)
    value = _stored(frame, codec.F_COMPRESSED)
    assert codec.Codec(codec.Limits(max_decompressed_bytes=len(body))).decode_value(KEY, value) == response(
        "lorem ipsum " * 20)
    small = codec.Codec(codec.Limits(max_decompressed_bytes=len(body) - 1))
    with pytest.raises(CorruptionError, match=rf"^stored body declares {len(body)} bytes, over "
                                              rf"max_decompressed_bytes={len(body) - 1} \(thread t, seq 2\)$"):
        small.decode_value(KEY, value, where=WHERE)
    with pytest.raises(CorruptionError, match=r"^stored body is not a zstd frame: .* \(thread t, seq 2\)$"):
        codec.Codec().decode_value(KEY, _stored(b"not a zstd frame", codec.F_COMPRESSED), where=WHERE)
