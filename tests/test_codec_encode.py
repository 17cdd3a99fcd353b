"""Codec.encode and the stored value it makes: each limit at its edge, each refusal's exact message.

Every value here is encoded by the codec under test and read back with its own readers
(``Codec.header``, ``Codec.decode_value``); nothing is compared with a recorded byte string.
"""

from __future__ import annotations

import hashlib
import random
import string
from typing import Any

import msgspec
import pytest
import zstandard
from conftest import T, agent_start, response, spawn_message

from tplog import codec
from tplog.codec import Codec, Limits, turn_facts_of
from tplog.errors import CorruptionError, InvalidInputError, LimitExceededError
from tplog.events import AgentTurnInterrupted, AgentTurnStarted, MessageRecorded, UserTurnSubmitted
from tplog.protocol import model as m

KEY = b"k" * 16


def _call(args: Any) -> MessageRecorded:
    return MessageRecorded(message=m.ResponseMessage(
        timestamp=T, agent_id="a1", parts=[m.ToolCallPart(tool_name="f", tool_call_id="c", args=args)]))


def _chain(n: int, siblings: int = 0) -> list[Any]:
    """``n`` lists, each inside the one before; the outermost also holds ``siblings`` empty lists."""
    inner: list[Any] = []
    for _ in range(n - 2):
        inner = [inner]
    return [inner, *([] for _ in range(siblings))]


def _round_trip(c: Codec, event: Any, event_id: str = "ev-1") -> Any:
    value = c.encode(event, event_id, 7).finish(KEY)
    return c.decode_value(KEY, value)


# --------------------------------------------------------------------------- refusals


def test_an_object_that_is_not_an_event_is_refused_naming_its_type_and_the_event_types() -> None:
    with pytest.raises(InvalidInputError) as info:
        Codec().encode(m.TextPart(content="x"), "ev-1", 1)  # type: ignore[arg-type]
    names = [cls.__name__ for cls in codec.EVENT_TYPES]
    assert str(info.value) == f"unknown event type TextPart; expected one of {names}"
    assert "MessageRecorded" in names and "ThreadStarted" in names


def test_an_event_msgspec_cannot_encode_is_an_input_error_saying_so() -> None:
    with pytest.raises(InvalidInputError) as info:
        Codec().encode(_call({"x": object()}), "ev-1", 1)
    assert type(info.value) is InvalidInputError
    assert str(info.value) == ("event cannot be encoded: Encoding objects of type object is unsupported")
    with pytest.raises(InvalidInputError) as info:
        Codec().encode_body(_call({"x": object()}))
    assert str(info.value).startswith("event cannot be encoded: ")


def test_an_event_too_deep_for_the_encoder_is_a_limit_error_naming_the_limit() -> None:
    with pytest.raises(LimitExceededError) as info:
        Codec(Limits(max_depth=7)).encode_body(_call(_chain(5000)))
    assert str(info.value) == "event nests deeper than max_depth=7"
    assert isinstance(info.value.__cause__, RecursionError)


def test_a_wrongly_typed_field_names_the_event_type_and_the_path() -> None:
    bad = MessageRecorded(message=m.ResponseMessage(timestamp=T, agent_id="a1", parts=[m.TextPart(content=5)]))  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError) as info:
        Codec().encode(bad, "ev-1", 1)
    assert info.value.path == "$.message.parts[0].content"
    assert isinstance(info.value.__cause__, msgspec.ValidationError)  # its words kept between tplog's parts
    assert str(info.value).startswith("MessageRecorded does not match the event schema: ")
    assert str(info.value).endswith(" (at $.message.parts[0].content)")


def test_a_missing_required_field_is_named_at_the_root() -> None:
    bad = AgentTurnStarted(agent_id=m.UNSET, started_at=T)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError) as info:
        Codec().encode(bad, "ev-1", 1)
    assert info.value.path == "$"
    assert str(info.value) == ("AgentTurnStarted does not match the event schema: Object missing required "
                               "field `agent_id` (at $)")


# --------------------------------------------------------------------------- the depth limit at its edge
# The event, its message, the parts list and the part are 4 levels; a value may nest max_depth + 8
# deep in all, so ``args`` may hold a chain of max_depth + 4 lists and not one more.


@pytest.mark.parametrize("max_depth", [6, 20])
@pytest.mark.parametrize("siblings", [0, 30])
def test_the_depth_limit_is_exact_whether_or_not_the_value_is_wide(max_depth: int, siblings: int) -> None:
    c = Codec(Limits(max_depth=max_depth))
    deepest = _call(_chain(max_depth + 4, siblings))
    assert _round_trip(c, deepest) == deepest
    with pytest.raises(LimitExceededError) as info:
        c.encode(_call(_chain(max_depth + 5, siblings)), "ev-1", 1)
    assert str(info.value) == f"event nests deeper than max_depth={max_depth}"


def test_a_wide_shallow_event_is_not_taken_for_a_deep_one() -> None:
    c = Codec(Limits(max_depth=4))
    wide = _call([[1], [2], {"a": [3]}] * 20)
    assert _round_trip(c, wide) == wide


# --------------------------------------------------------------------------- the size limits at their edges


def test_max_event_bytes_is_the_largest_body_accepted() -> None:
    event = response("x" * 500)
    size = len(Codec().encode_body(event))
    assert _round_trip(Codec(Limits(max_event_bytes=size)), event) == event
    with pytest.raises(LimitExceededError) as info:
        Codec(Limits(max_event_bytes=size - 1)).encode(event, "ev-9", 1)
    assert str(info.value) == f"event ev-9 is {size} bytes encoded; the limit (max_event_bytes) is {size - 1}"


def _event_id_for_header(c: Codec, event: Any, length: int) -> str:
    """An event id that makes the event's msgpack header exactly ``length`` bytes."""
    base = len(c._enc.encode(codec._Header4(codec.MSG_KIND, "", 7, codec.facts_of(event))))
    # a str of 2^16 bytes or more has a 5-byte msgpack head, a shorter one (over 255) 3 bytes
    for head in (3, 5):
        n = length - base + 1 - head
        if (n >= 1 << 16) == (head == 5) and n > 255:
            return "e" * n
    raise AssertionError(length)


def test_the_longest_header_a_value_can_hold_is_65535_bytes() -> None:
    c = Codec()
    event = response("hi")
    event_id = _event_id_for_header(c, event, 0xFFFF)
    value = c.encode(event, event_id, 7).finish(KEY)
    assert int.from_bytes(value[10:12], "big") == 0xFFFF
    assert c.header(value).event_id == event_id
    assert c.decode_value(KEY, value) == event
    too_long = _event_id_for_header(c, event, 0x10000)
    with pytest.raises(LimitExceededError) as info:
        c.encode(event, too_long, 7)
    assert str(info.value) == f"event {too_long}: too many tool calls/returns in one message"


def test_a_header_over_32767_bytes_keeps_its_length_unsigned() -> None:
    c = Codec()
    event_id = _event_id_for_header(c, response("hi"), 40_000)
    value = c.encode(response("hi"), event_id, 7).finish(KEY)
    assert value[10:12] == (40_000).to_bytes(2, "big")
    assert c.header(value).event_id == event_id


# --------------------------------------------------------------------------- headers


def test_an_agent_turn_boundary_writes_its_turn_facts_into_the_header() -> None:
    c = Codec()
    for event in [agent_start("bot"), AgentTurnInterrupted(interruption=m.Interruption(reason="r", interrupted_at=T))]:
        header = c.header(c.encode(event, "ev-2", 9).finish(KEY))
        assert header.turn is not None
        assert header.turn == turn_facts_of(event)
        assert (header.kind, header.event_id, header.recorded_at, header.facts) == (
            codec.KIND_CODE[type(event)], "ev-2", 9, None)


def test_a_header_that_does_not_decode_names_the_event() -> None:
    c = Codec()
    value = bytearray(c.encode(response("x"), "ev-1", 1).finish(KEY))
    value[12] = 0xC1  # a byte msgpack never uses
    with pytest.raises(CorruptionError) as info:
        c.header(bytes(value), where=("th-7", 41))
    assert (info.value.thread_id, info.value.seq) == ("th-7", 41)
    assert str(info.value).startswith("event header does not decode: ")
    assert str(info.value).endswith(" (thread th-7, seq 41)")
    assert isinstance(info.value.__cause__, msgspec.DecodeError)
    with pytest.raises(CorruptionError) as info:
        c.header(bytes(value))
    assert (info.value.thread_id, info.value.seq) == (None, None)


# --------------------------------------------------------------------------- what encode reports and stores


def test_encoded_carries_the_facts_and_the_raw_body_size() -> None:
    c = Codec()
    event = spawn_message("child-1")
    enc = c.encode(event, "ev-3", 5)
    assert enc.facts is not None and enc.facts == codec.facts_of(event)
    assert enc.facts.spawned == ["child-1"]
    assert enc.size == len(c.encode_body(event))
    assert (enc.event, enc.event_id, enc.kind) == (event, "ev-3", codec.MSG_KIND)
    assert c.header(enc.finish(KEY)).facts == enc.facts


def _saving(body: bytes) -> int:
    return len(body) - len(zstandard.ZstdCompressor(level=Limits().level, write_content_size=True).compress(body))


def _events_saving(wanted: set[int]) -> dict[int, MessageRecorded]:
    """Events whose body zstd makes exactly 3, 4 or 5 bytes shorter: random letters, then a run of x."""
    found: dict[int, MessageRecorded] = {}
    c = Codec()
    for seed in range(40):
        rng = random.Random(seed)
        text = "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(120))
        for run in range(40):
            event = response(text + "x" * run)
            s = _saving(c.encode_body(event))
            if s in wanted and s not in found:
                found[s] = event
        if set(found) == wanted:
            return found
    raise AssertionError(f"no event found for savings {wanted - set(found)}")


def test_a_body_is_stored_compressed_only_when_that_saves_more_than_4_bytes() -> None:
    c = Codec()
    for saving, event in sorted(_events_saving({3, 4, 5}).items()):
        enc = c.encode(event, "ev-1", 1)
        value = enc.finish(KEY)
        body = c.encode_body(event)
        assert len(body) >= Limits().compress_min_bytes
        compressed = saving > 4
        assert (enc.prefix_flags, value[1]) == ((codec.F_COMPRESSED,) * 2 if compressed else (0, 0)), saving
        assert int.from_bytes(value[2:6], "big") == 0 == enc.dict_id
        assert len(codec.stored_body(value)) == len(body) - (saving if compressed else 0)
        assert c.decode_value(KEY, value) == event


def test_compress_min_bytes_is_the_smallest_body_compressed() -> None:
    event = response("lorem ipsum " * 20)
    size = len(Codec().encode_body(event))
    at = Codec(Limits(compress_min_bytes=size)).encode(event, "ev-1", 1)
    assert at.prefix_flags == codec.F_COMPRESSED
    above = Codec(Limits(compress_min_bytes=size + 1)).encode(event, "ev-1", 1)
    assert (above.prefix_flags, above.head_and_body[-size:]) == (0, Codec().encode_body(event))


def test_blob_threshold_is_the_largest_body_stored_inline() -> None:
    event = response("lorem ipsum " * 20)
    body = Codec().encode_body(event)
    inline = Codec(Limits(blob_threshold=len(body))).encode(event, "ev-1", 1)
    assert inline.blob is None and not inline.prefix_flags & codec.F_BLOB
    c = Codec(Limits(blob_threshold=len(body) - 1))
    enc = c.encode(event, "ev-1", 1)
    value = enc.finish(KEY)
    assert enc.blob is not None and enc.blob[0] == hashlib.sha256(body).digest()
    assert (value[1], int.from_bytes(value[2:6], "big"), enc.dict_id) == (codec.F_BLOB, 0, 0)
    assert bytes(codec.stored_body(value)) == enc.blob[0]
    assert c.decode_value(KEY, value, _Blobs(enc.blob)) == event


class _Blobs:
    """A read transaction holding one blob (``get(table, key)``, as the codec reads it)."""

    def __init__(self, blob: tuple[bytes, bytes]) -> None:
        self.blob = blob

    def get(self, table: str, key: bytes) -> bytes | None:
        return self.blob[1] if (table, key) == ("blobs", self.blob[0]) else None


# --------------------------------------------------------------------------- max_parts


def test_max_parts_counts_the_parts_of_a_message_and_of_a_user_turn() -> None:
    c = Codec(Limits(max_parts=3))

    def message(n: int) -> MessageRecorded:
        return MessageRecorded(message=m.ResponseMessage(
            timestamp=T, agent_id="a1", parts=[m.TextPart(content=str(i)) for i in range(n)]))

    def turn(n: int) -> UserTurnSubmitted:
        return UserTurnSubmitted(turn=m.UserTurn(submitted_at=T, parts=[m.UserPromptPart(content=str(i))
                                                                        for i in range(n)]))

    for make in (message, turn):
        assert _round_trip(c, make(3)) == make(3)
        with pytest.raises(LimitExceededError) as info:
            c.encode(make(4), "ev-1", 1)
        assert str(info.value) == "4 parts in one message; the limit (max_parts) is 3"
    assert _round_trip(Codec(Limits(max_parts=0)), agent_start()) == agent_start()


# --------------------------------------------------------------------------- Codec.pack (the chunk rows' compression)


def test_pack_compresses_exactly_as_a_body_is_stored() -> None:
    c = Codec()
    for saving, event in sorted(_events_saving({3, 4, 5}).items()):
        body = c.encode_body(event)
        flags, dict_id, stored = c.pack(body)
        assert (flags, dict_id) == ((codec.F_COMPRESSED, 0) if saving > 4 else (0, 0)), saving
        assert len(stored) == len(body) - (saving if saving > 4 else 0)
    body = c.encode_body(response("lorem ipsum " * 20))
    at = Codec(Limits(compress_min_bytes=len(body)))
    assert at.pack(body)[:2] == (codec.F_COMPRESSED, 0)
    assert Codec(Limits(compress_min_bytes=len(body) + 1)).pack(body) == (0, 0, body)


def test_pack_uses_the_dictionary_it_is_given_or_else_the_current_one() -> None:
    def samples(word: str) -> list[bytes]:
        return [msgspec.msgpack.encode(response(f"{word} {i} " + f"{word} lorem ipsum " * (i % 5 + 1)))
                for i in range(200)]

    c = Codec()
    first, second = Codec.train(samples("alpha"), 4096), Codec.train(samples("omega"), 4096)
    c.add_dictionary(1, first)
    c.add_dictionary(2, second)
    assert c.current_dict == 2
    data = msgspec.msgpack.encode(response("alpha beta " * 30))
    for given, dictionary in [(None, second), (1, first), (2, second)]:
        flags, dict_id, stored = c.pack(data, given)
        assert (flags, dict_id) == (codec.F_COMPRESSED, 2 if given is None else given)
        frame_dict = zstandard.get_frame_parameters(stored).dict_id
        assert frame_dict == zstandard.ZstdCompressionDict(dictionary).dict_id() != 0
        assert bytes(c.unpack(dict_id, stored)) == data
