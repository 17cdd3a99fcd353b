"""tplog.codec's pure helpers, value by value: the header facts the id-only folds read, the
nesting-depth check, and the schema-check type mirrored from ``Event``.

Most of these run once and are cached in the store's process (``_check_type``, the nested-field
table), so the store-level tests cannot tell a wrong table from a right one built the same way;
these tests call the builders themselves (tests/MUTANTS.md)."""

from __future__ import annotations

import typing
from typing import Any

import msgspec
import pytest
from conftest import T, agent_start, completed, link, response, spawn_message, user

from tplog import codec
from tplog.codec import ABORTED, V3_SPAWN, Facts, TurnFacts, facts_of, turn_facts_of
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
        assert codec._depth_ok(obj, depth) is True
        assert codec._depth_ok(obj, depth - 1) is False
    assert codec._depth_ok("leaf", 0) is False and codec._depth_ok("leaf", 1) is True


def test_depth_ok_follows_container_subclasses_and_skips_leaves() -> None:
    class D(dict[str, Any]):
        pass

    class L(list[Any]):
        pass

    assert codec._depth_ok(D(a=L([L([1])])), 3) is True
    assert codec._depth_ok(D(a=L([L([1])])), 2) is False
    assert codec._depth_ok(L([D(a=D(b=1))]), 2) is False
    # leaves at the limit do not count as a level
    assert codec._depth_ok([1, "s", 2.0, True, None, b"x"], 1) is True
    assert codec._depth_ok([[1]], 1) is False


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

    assert codec._nested_fields(S) == ("c", "d", "g")
    assert codec._NESTED_FIELDS[S] == ("c", "d", "g")
    codec._NESTED_FIELDS[S] = ("a",)  # read from the table once built
    assert codec._nested_fields(S) == ("a",)
    del codec._NESTED_FIELDS[S]
    assert codec._nested_fields(m.ToolCallPart) == ("extra", "args")


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
    top = codec._raw_mirror(Event, made)
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
    codec._raw_mirror(Event, made)
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
    assert codec._raw_mirror(typing.Annotated[Any, "meta"], {}) == typing.Annotated[msgspec.Raw, "meta"]
    assert codec._raw_mirror(tuple[int, ...], {}) == tuple[int, ...]
    assert codec._raw_mirror(typing.Literal["a"], {}) == typing.Literal["a"]


class Node(msgspec.Struct):
    child: list[Node]


def test_raw_mirror_refuses_a_struct_that_refers_to_itself() -> None:
    with pytest.raises(TypeError, match=r"^Node refers to itself$"):
        codec._raw_mirror(Node, {})


def test_the_check_type_decodes_like_event_but_leaves_any_undecoded() -> None:
    dec = msgspec.msgpack.Decoder(codec._raw_mirror(Event, {}))
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
