"""tplog/integrations/vercel/assembly.py: the events assembled from a UI message stream, pinned
whole (times from a stepping clock), for the parts, tool calls, ends and notices a stream can carry
(issue #38's mutants)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest

from tplog.integrations.vercel import (
    TP_MESSAGE,
    TP_TURN_END,
    TP_TURN_START,
    TP_USER_TURN,
    StreamAssembler,
    assemble_turn,
)
from tplog.integrations.vercel.chunks import MalformedChunkError
from tplog.protocol.json import to_builtins

START = [{"type": "start"}, {"type": "start-step"}]
END = [{"type": "finish-step"}, {"type": "finish"}, "[DONE]"]


def _t(s: int) -> str:
    return f"2026-01-01T00:00:{s:02d}Z"


def _clock() -> Callable[[], str]:
    ticks = itertools.count()
    return lambda: _t(next(ticks))


def _events(chunks: list[Any], **kw: Any) -> list[dict[str, Any]]:
    return [to_builtins(ev) for ev in assemble_turn(chunks, clock=_clock(), **kw)]


def _text(tid: str, text: str) -> list[dict[str, Any]]:
    return [{"type": "text-start", "id": tid}, {"type": "text-delta", "id": tid, "delta": text},
            {"type": "text-end", "id": tid}]


def _call(cid: str, name: str, args: Any, **extra: Any) -> list[dict[str, Any]]:
    return [{"type": "tool-input-start", "toolCallId": cid, "toolName": name, **extra},
            {"type": "tool-input-available", "toolCallId": cid, "toolName": name, "input": args, **extra}]


def _resp(t: int, *parts: dict[str, Any], agent: str = "a1") -> dict[str, Any]:
    return {"type": "message", "message": {"message_type": "response", "timestamp": _t(t), "parts": list(parts),
                                           "agent_id": agent}}


def _req(t: int, *parts: dict[str, Any], agent: str = "a1") -> dict[str, Any]:
    return {"type": "message", "message": {"message_type": "request", "timestamp": _t(t), "parts": list(parts),
                                           "agent_id": agent}}


def _ret(cid: str, name: str, status: str, content: Any) -> dict[str, Any]:
    return {"part_kind": "tool-return", "tool_name": name, "tool_call_id": cid, "status": status, "content": content}


def test_one_step_of_every_part_kind_assembles_to_its_messages() -> None:
    meta = {"pydantic_ai": {"provider_name": "anthropic", "signature": "sig", "id": "th1"}}
    chunks = [
        *START,
        {"type": "reasoning-start", "id": "r1"}, {"type": "reasoning-delta", "id": "r1", "delta": "hmm"},
        {"type": "reasoning-end", "id": "r1", "providerMetadata": meta},
        *_text("t1", "hi"),
        {"type": "file", "url": "data:image/png;base64,AAAA", "mediaType": "image/png"},
        *_call("b1", "web_search", {"q": "x"}, providerExecuted=True),
        {"type": "tool-output-available", "toolCallId": "b1", "output": {"r": 1}, "providerExecuted": True},
        {"type": "tool-input-start", "toolCallId": "never", "toolName": "cut"},  # its input never completes
        *_call("c1", "slow", {}), *_call("c2", "fast", {"a": 1}),
        {"type": "tool-output-error", "toolCallId": "c2", "errorText": "boom"},  # answered first, made second
        {"type": "tool-output-available", "toolCallId": "c1", "output": "ok"},
        {"type": "source-url", "sourceId": "s1", "url": "https://e.com", "title": "E"},
        {"type": "source-document", "sourceId": "s2", "mediaType": "text/plain", "title": "D"},
        {"type": "data-weather", "data": {"t": 1}},
        *END,
    ]
    assert _events(chunks, agent_id="a1") == [
        {"type": "agent_turn_started", "agent_id": "a1", "started_at": _t(0)},
        _resp(1, {"part_kind": "thinking", "content": "hmm", "signature": "sig", "provider_name": "anthropic",
                  "thinking_id": "th1"},
              {"part_kind": "text", "content": "hi"},
              {"part_kind": "file", "content": {"kind": "binary", "data": "AAAA", "media_type": "image/png"}},
              {"part_kind": "custom:pai-builtin-tool-call", "tool_name": "web_search", "tool_call_id": "b1",
               "args": {"q": "x"}},
              {"part_kind": "custom:pai-builtin-tool-return", "tool_name": "web_search", "tool_call_id": "b1",
               "content": {"r": 1}},
              {"part_kind": "tool-call", "tool_name": "slow", "tool_call_id": "c1", "args": {}},
              {"part_kind": "tool-call", "tool_name": "fast", "tool_call_id": "c2", "args": {"a": 1}}),
        _req(1, _ret("c1", "slow", "success", "ok"), _ret("c2", "fast", "error", "boom")),
        {"type": "message", "message": {"message_type": "system", "timestamp": _t(1), "event_type": "source.url",
                                        "event_data": {"sourceId": "s1", "url": "https://e.com", "title": "E"}}},
        {"type": "message", "message": {"message_type": "system", "timestamp": _t(1),
                                        "event_type": "source.document",
                                        "event_data": {"sourceId": "s2", "mediaType": "text/plain", "title": "D"}}},
        {"type": "message", "message": {"message_type": "system", "timestamp": _t(1), "event_type": "data-weather",
                                        "event_data": {"t": 1}}},
        {"type": "agent_turn_completed", "completed_at": _t(2), "deferred": {}},
    ]


@pytest.mark.parametrize("pmeta", [None, "not an object", {}, {"pydantic_ai": {}}, {"other": 1}])
def test_reasoning_without_pydantic_ai_metadata_has_no_provider_name(pmeta: Any) -> None:
    chunks = [*START, {"type": "reasoning-start", "id": "r"}, {"type": "reasoning-delta", "id": "r", "delta": "x"},
              {"type": "reasoning-end", "id": "r", "providerMetadata": pmeta}, *END]
    assert _events(chunks, agent_id="a1")[1] == _resp(1, {"part_kind": "thinking", "content": "x",
                                                          "provider_name": ""})


def test_text_parts_with_reasoning_or_a_file_between_are_one_response() -> None:
    f = {"type": "file", "url": "https://e.com/a.png", "mediaType": "image/png"}
    chunks = [*START, *_text("a", "one"), {"type": "reasoning-start", "id": "r"}, {"type": "reasoning-end", "id": "r"},
              *_text("b", "two"), f, *_text("c", "three"), *_text("d", "four"), *END]
    out = _events(chunks, agent_id="a1")
    file_part = {"part_kind": "file", "content": {"kind": "binary", "data": "https://e.com/a.png",
                                                  "media_type": "image/png"}}
    assert out[1:3] == [
        _resp(1, {"part_kind": "text", "content": "one"}, {"part_kind": "thinking", "content": "", "provider_name": ""},
              {"part_kind": "text", "content": "two"}, file_part, {"part_kind": "text", "content": "three"}),
        _resp(1, {"part_kind": "text", "content": "four"}),  # text right after text: the next response
    ]


def test_calls_left_waiting_are_deferred_as_approvals_or_external() -> None:
    chunks = [*START, *_call("c1", "delete", {}),
              {"type": "tool-approval-request", "toolCallId": "c1", "approvalId": "ap1"},
              {"type": "tool-input-available", "toolCallId": "c2", "toolName": "ask_user", "input": {}},
              {"type": "tool-input-available", "toolCallId": "b1", "toolName": "web", "input": {},
               "providerExecuted": True},
              {"type": "tool-input-error", "toolCallId": "c3", "toolName": "calc", "input": "x",
               "errorText": "bad args"},
              *_call("c4", "done", {}), {"type": "tool-output-available", "toolCallId": "c4", "output": 1},
              *END]
    out = _events(chunks)
    assert out[2] == _req(1, {"part_kind": "retry-prompt", "content": "bad args", "tool_name": "calc",
                              "tool_call_id": "c3"}, _ret("c4", "done", "success", 1), agent="agent")
    assert out[-1] == {"type": "agent_turn_completed", "completed_at": _t(2),
                       "deferred": {"c1": "approval", "c2": "external"}}


def test_a_denied_call_of_an_earlier_turn_is_answered_as_denied() -> None:
    chunks = [*START, {"type": "tool-output-denied", "toolCallId": "k1"}, *END]
    assert _events(chunks, known_tool_calls={"k1": "rm"})[1] == _req(
        1, _ret("k1", "rm", "error", "The tool call was denied."), agent="agent")


@pytest.mark.parametrize(("end", "reason"), [
    ([{"type": "abort", "reason": "the run timed out"}], "timeout"),
    ([{"type": "abort"}], "user_cancelled"),
    ([{"type": "error", "errorText": "x"}], "error"),
    ([], "network_failure"),
])
def test_a_step_cut_off_keeps_only_what_a_tool_output_proves_complete(end: list[Any], reason: str) -> None:
    chunks = [*START, {"type": "reasoning-start", "id": "r"}, {"type": "reasoning-end", "id": "r"},
              *_text("t", "partial"), {"type": "file", "url": "https://e.com/f", "mediaType": "text/plain"},
              {"type": "tool-input-available", "toolCallId": "c1", "toolName": "f", "input": {}},
              {"type": "data-note", "data": 1}, *end]
    assert _events(chunks) == [
        {"type": "agent_turn_started", "agent_id": "agent", "started_at": _t(0)},
        {"type": "message", "message": {"message_type": "system", "timestamp": _t(1), "event_type": "data-note",
                                        "event_data": 1}},
        {"type": "agent_turn_interrupted", "interruption": {"reason": reason, "interrupted_at": _t(2)}},
    ]


def test_a_closeout_output_is_no_tool_return_and_what_follows_it_stays() -> None:
    chunks = [*START, *_call("c1", "f", {}),
              {"type": "tool-output-available", "toolCallId": "c1",
               "output": "The tool call was interrupted before a result was produced."},
              {"type": "data-note", "data": 2}, {"type": "abort"}]
    out = _events(chunks)
    assert out[1] == _resp(1, {"part_kind": "tool-call", "tool_name": "f", "tool_call_id": "c1", "args": {}},
                           agent="agent")
    assert out[2]["message"]["event_type"] == "data-note" and out[3]["type"] == "agent_turn_interrupted"


def test_the_turn_starts_when_its_first_chunk_came() -> None:
    now = [_t(5)]
    asm = StreamAssembler(clock=lambda: now[0])
    asm.feed({"type": "start"})
    now[0] = _t(9)
    asm.feed({"type": "finish"})
    assert [to_builtins(ev) for ev in asm.events()] == [
        {"type": "agent_turn_started", "agent_id": "agent", "started_at": _t(5)},
        {"type": "agent_turn_completed", "completed_at": _t(9), "deferred": {}},
    ]


def test_a_request_body_that_is_no_object_is_named_by_its_type() -> None:
    with pytest.raises(MalformedChunkError) as err:
        StreamAssembler([{"role": "user"}])  # type: ignore[arg-type]
    assert "list" in str(err.value)


# -- exact mode: the data-tp-* notices

def _notices(*notices: tuple[str, Any]) -> list[Any]:
    return [{"type": "start"}, *({"type": k, "data": d} for k, d in notices), {"type": "finish"}]


def _msg(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"message": {"message_type": "response", "timestamp": _t(1), "parts": parts, "agent_id": "a1"}}


def test_notices_keep_the_turn_start_s_extra_and_leave_completed_at_unset() -> None:
    out = _events(_notices((TP_TURN_START, {"agent_id": "a1", "started_at": _t(0), "extra": {"k": "v"}}),
                           (TP_MESSAGE, _msg([{"part_kind": "text", "content": "hi"}])),
                           (TP_TURN_END, {"deferred": {}})))
    assert out[0] == {"type": "agent_turn_started", "agent_id": "a1", "started_at": _t(0), "k": "v"}  # extra, inline
    assert out[2] == {"type": "agent_turn_completed", "deferred": {}}


def test_a_message_the_stream_lacks_is_dropped_with_what_follows_but_the_turn_still_ends() -> None:
    ref = {"part_kind": "text", "$from": "stream", "$len": 2}
    out = _events(_notices((TP_TURN_START, {"agent_id": "a1", "started_at": _t(0)}),
                           (TP_MESSAGE, _msg([ref])), (TP_MESSAGE, _msg([{"part_kind": "text", "content": "x"}])),
                           (TP_TURN_END, {"interruption": {"reason": "network_failure", "interrupted_at": _t(2)}})))
    assert [ev["type"] for ev in out] == ["agent_turn_started", "agent_turn_interrupted"]


def test_a_message_part_may_reference_the_request_body() -> None:
    body = {"messages": [{"id": "u", "role": "user", "parts": [{"type": "text", "text": "hello"}]}]}
    ref = {"part_kind": "text", "$from": "body", "$index": 0}
    out = _events(_notices((TP_TURN_START, {"agent_id": "a1", "started_at": _t(0)}), (TP_MESSAGE, _msg([ref])),
                           (TP_TURN_END, {"deferred": {}})), request_body=body)
    assert out[1]["message"]["parts"] == [{"part_kind": "text", "content": "hello"}]


@pytest.mark.parametrize("kind", [TP_TURN_START, TP_USER_TURN, TP_MESSAGE])
def test_a_notice_that_is_no_object_or_lacks_a_field_is_named(kind: str) -> None:
    for data in ("x", {}):
        with pytest.raises(MalformedChunkError) as err:
            _events(_notices((kind, data), (TP_TURN_END, {"deferred": {}})))
        assert kind in str(err.value)
