"""tplog/integrations/importers.py on the inputs its mutants left untested (issue #38): the clock
and agent id defaults, the registered agent's names, error paths and wording that names the input,
SSE detection, JSON lines, and the request body's history."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pydantic
import pytest

from tplog.integrations.importers import (
    PydanticAIImportError,
    UnknownFormatError,
    VercelImportError,
    load,
    load_events,
)
from tplog.integrations.vercel import ChunkOrderError, MalformedChunkError
from tplog.protocol import model as m
from tplog.protocol.json import to_builtins

NOON = "2026-02-02T12:00:00Z"
PLAIN = [{"type": "start"}, {"type": "start-step"}, {"type": "text-start", "id": "t"},
         {"type": "text-delta", "id": "t", "delta": "hi"}, {"type": "text-end", "id": "t"},
         {"type": "finish-step"}, {"type": "finish"}]


def _jsonl(chunks: list[Any]) -> bytes:
    return "\n".join(json.dumps(c) for c in chunks).encode()


def _pai(*msgs: dict[str, Any]) -> bytes:
    return json.dumps(list(msgs)).encode()


USER = {"kind": "request", "parts": [{"part_kind": "user-prompt", "content": "x", "timestamp": "2026-01-01T00:00:03Z"}]}


def test_a_stream_without_times_takes_them_from_the_clock_given() -> None:
    [thread] = load("vercel-ui", _jsonl(PLAIN), clock=lambda: NOON)
    assert thread.created_at == NOON
    assert [t.started_at for t in thread.turns] == [NOON]  # type: ignore[union-attr]


def test_the_agent_of_unattributed_turns_is_a_new_uuid_unless_given() -> None:
    [thread] = load("vercel-ui", _jsonl(PLAIN))
    [aid] = thread.agents
    assert uuid.UUID(aid).version == 4
    [thread] = load("vercel-ui", _jsonl(PLAIN), agent_id="a1")
    assert list(thread.agents) == ["a1"]


def test_the_thread_starts_at_the_input_s_first_time_and_the_agent_carries_its_model() -> None:
    resp = {"kind": "response", "parts": [{"part_kind": "text", "content": "y"}], "model_name": "m1",
            "provider_name": "p1", "timestamp": "2026-01-01T00:00:05Z"}
    [events] = load_events("pydantic-ai", _pai(USER, resp), agent_id="a1", clock=lambda: NOON)
    head = [to_builtins(ev) for ev in events[:2]]
    assert head[0]["created_at"] == "2026-01-01T00:00:05Z" and "title" not in head[0]
    assert head[1]["agent"] == {"agent_id": "a1", "agent_name": "assistant", "model_name": "m1",
                                "provider_name": "p1", "created_at": "2026-01-01T00:00:05Z"}


def test_an_agent_without_model_or_provider_names_registers_none() -> None:
    resp = {"kind": "response", "parts": [{"part_kind": "text", "content": "y"}],
            "timestamp": "2026-01-01T00:00:05Z"}
    [thread] = load("pydantic-ai", _pai(USER, resp), agent_name="bot", title="T")
    [agent] = thread.agents.values()
    assert (agent.agent_name, agent.model_name, agent.provider_name, thread.title) == ("bot", m.UNSET, m.UNSET, "T")


def test_an_unknown_format_names_itself_and_the_known_ones() -> None:
    with pytest.raises(UnknownFormatError) as err:
        load("csv", b"")
    assert "'csv'" in str(err.value) and "pydantic-ai, vercel-ui" in str(err.value)


def test_input_that_is_not_bytes_is_named_by_its_type() -> None:
    with pytest.raises(PydanticAIImportError) as err:
        load("pydantic-ai", "[]")  # type: ignore[arg-type]
    assert "str" in str(err.value)


@pytest.mark.parametrize(("data", "jtype"), [(b"{}", "object"), (b'"s"', "string"), (b"true", "boolean"),
                                             (b"null", "null"), (b"1.5", "number")])
def test_a_json_value_that_is_no_message_list_is_named_by_its_json_type(data: bytes, jtype: str) -> None:
    with pytest.raises(PydanticAIImportError) as err:
        load("pydantic-ai", data)
    assert f"a JSON {jtype}" in str(err.value)
    if jtype != "object":  # an object is a request body
        with pytest.raises(VercelImportError) as err:
            load("vercel-ui", _jsonl(PLAIN), request=data)
        assert f"a JSON {jtype}" in str(err.value)


def _pydantic_msg(adapter: pydantic.TypeAdapter[Any], raw: Any) -> str:
    try:
        adapter.validate_python(raw)
    except pydantic.ValidationError as exc:
        return str(exc.errors()[0]["msg"])
    raise AssertionError("valid")


@pytest.mark.parametrize(("part", "path"), [
    ({"part_kind": "user-prompt"}, "$[0].parts[0].content"),
    ({"part_kind": "user-prompt", "content": "x", "timestamp": "bad"}, "$[0].parts[0].timestamp"),
])
def test_a_bad_message_is_named_by_its_path_and_pydantic_s_first_error(part: dict[str, Any], path: str) -> None:
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    raw = [{"kind": "request", "parts": [part]}]
    with pytest.raises(PydanticAIImportError) as err:
        load("pydantic-ai", _pai(*raw))
    assert err.value.path == path
    assert _pydantic_msg(ModelMessagesTypeAdapter, raw) in str(err.value)


def test_a_bad_ui_message_is_named_by_its_path_in_the_array_and_in_the_request_body() -> None:
    bad = [{"id": "u", "role": "user", "parts": [{"type": "text"}]}]
    with pytest.raises(VercelImportError) as err:
        load("vercel-ui", json.dumps(bad).encode())
    assert err.value.path is not None and err.value.path.startswith("$[0].parts[0].") and "text" in err.value.path
    with pytest.raises(VercelImportError) as err:
        load("vercel-ui", _jsonl(PLAIN), request=json.dumps({"messages": bad}).encode())
    assert err.value.path is not None and err.value.path.startswith("$.messages[0].parts[0].")


def test_ui_messages_pydantic_ai_cannot_load_are_named() -> None:
    tool_in_user = [{"id": "u", "role": "user", "parts": [
        {"type": "tool-x", "toolCallId": "c", "state": "output-available", "input": {}, "output": 1}]}]
    with pytest.raises(VercelImportError) as err:
        load("vercel-ui", json.dumps(tool_in_user).encode())
    assert err.value.path == "$" and "Pydantic AI cannot load" in str(err.value)


@pytest.mark.parametrize("request_body", [b"\xff", b'{"messages": 3}'])
def test_a_bad_request_body_is_a_vercel_import_error(request_body: bytes) -> None:
    with pytest.raises(VercelImportError) as err:
        load("vercel-ui", _jsonl(PLAIN), request=request_body)
    if request_body.startswith(b"{"):
        assert err.value.path == "$.messages"


def test_a_request_body_without_messages_is_no_history() -> None:
    [thread] = load("vercel-ui", _jsonl(PLAIN), request=b'{"trigger": "submit-message"}')
    assert [type(t).__name__ for t in thread.turns] == ["AgentTurn"]


@pytest.mark.parametrize("first", ["event: message", "id: 1", "retry: 100", ": keep-alive"])
def test_sse_is_told_by_its_first_line_s_field(first: str) -> None:
    sse = "\n".join([first, *(f"data: {json.dumps(c)}" for c in PLAIN)])
    [thread] = load("vercel-ui", sse.encode())
    assert [type(t).__name__ for t in thread.turns] == ["AgentTurn"]


def test_json_lines_take_only_json_lines_and_both_spellings_of_done() -> None:
    for done in ("[DONE]", '"[DONE]"'):
        [thread] = load("vercel-ui", _jsonl(PLAIN) + f"\n{done}\n".encode())
        assert [type(t).__name__ for t in thread.turns] == ["AgentTurn"]
    with pytest.raises(ChunkOrderError):  # [DONE] ends the stream: a chunk after it is out of order
        load("vercel-ui", _jsonl(PLAIN[:-1]) + b"\n[DONE]\n" + _jsonl(PLAIN[-1:]))
    with pytest.raises(MalformedChunkError) as err:  # an SSE line among JSON lines
        load("vercel-ui", _jsonl(PLAIN[:1]) + b'\ndata: {"type":"finish"}\n')
    assert "line 2" in str(err.value)


@pytest.mark.parametrize("line", ["{" + "x" * 100, "[" + "1," * 60 + "1]"])
def test_a_bad_json_line_is_named_by_its_first_80_characters(line: str) -> None:
    with pytest.raises(MalformedChunkError) as err:
        load("vercel-ui", _jsonl(PLAIN[:1]) + b"\n" + line.encode())
    assert repr(line[:80]) in str(err.value) and repr(line[:81]) not in str(err.value)


def test_an_input_of_no_chunks_is_refused() -> None:
    with pytest.raises(VercelImportError):
        load("vercel-ui", b"event: ping\n\n")


def _ui(mid: str, role: str, *parts: dict[str, Any], at: str | None = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"id": mid, "role": role, "parts": list(parts)}
    if at is not None:
        msg["metadata"] = {"pydantic_ai": {"timestamp": at}}
    return msg


def test_a_client_tool_result_in_a_long_history_is_recorded_once_as_the_stream_s_tool_return() -> None:
    t1, t2 = "2026-01-01T00:00:01Z", "2026-01-01T00:00:02Z"
    call = {"type": "tool-ask", "toolCallId": "c1", "state": "output-available", "input": {}, "output": "yes"}
    body = {"messages": [
        _ui("u1", "user", {"type": "text", "text": "one"}, at=t1),
        _ui("a1", "assistant", {"type": "text", "text": "first answer"}, at=t1),
        _ui("u2", "user", {"type": "text", "text": "two"}, at=t2),
        _ui("a2", "assistant", {"type": "text", "text": "asking"}, call, at=t2),
    ]}
    stream = [{"type": "start"}, {"type": "start-step"},
              {"type": "tool-output-available", "toolCallId": "c1", "output": "yes"}, *PLAIN[2:]]
    [thread] = load("vercel-ui", _jsonl(stream), request=json.dumps(body).encode(), clock=lambda: NOON)
    users = [t for t in thread.turns if isinstance(t, m.UserTurn)]
    assert [(u.parts[0].content, u.submitted_at) for u in users] == [("one", t1), ("two", t2)]  # type: ignore[union-attr]
    texts = [p.content for t in thread.turns if isinstance(t, m.AgentTurn) for msg in t.messages
             for p in getattr(msg, "parts", []) if isinstance(p, m.TextPart)]
    assert texts == ["first answer", "asking", "hi"]
    returns = [p.tool_call_id for t in thread.turns if isinstance(t, m.AgentTurn) for msg in t.messages
               for p in getattr(msg, "parts", []) if isinstance(p, m.ToolReturnPart)]
    assert returns == ["c1"]
