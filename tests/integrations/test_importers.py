"""``tplog.integrations.importers``: Pydantic AI histories and Vercel UI streams become threads.

Inputs come from real Pydantic AI runs (TestModel / FunctionModel, no network)
or from the fixture corpus (also real runs, see ``tools/gen_pai_fixtures.py``).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pydantic
import pytest
from integ_helpers import FIXTURE_FILES, load_fixture
from pydantic_ai import Agent, CancellationToken
from pydantic_ai.exceptions import RunCancelled
from pydantic_ai.messages import ModelMessagesTypeAdapter
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.ui.vercel_ai import VercelAIAdapter
from pydantic_ai.ui.vercel_ai.request_types import UIMessage

from tplog import InvalidInputError, Store, thread_hash, validate
from tplog.cli import main as cli
from tplog.errors import ValidationError
from tplog.events import AgentTurnCompleted
from tplog.integrations.importers import (
    FORMATS,
    ImportFormatError,
    PydanticAIImportError,
    UnknownFormatError,
    VercelImportError,
    load,
    load_events,
)
from tplog.integrations.pydantic_ai import ThreadRecorder, history_from_thread
from tplog.integrations.vercel import ChunkOrderError, MalformedChunkError, UnknownToolCallError, recorded_vercel_stream
from tplog.projections.fold import fold
from tplog.protocol import model as m
from tplog.protocol.json import to_builtins

FIXTURES = {p.stem: p for p in FIXTURE_FILES}


def weather_agent() -> Agent[None, str]:
    agent = Agent(TestModel(), system_prompt="be brief")

    @agent.tool_plain
    def get_weather(city: str) -> str:
        return f"sunny in {city}"

    return agent


def two_runs() -> list[Any]:
    agent = weather_agent()
    r1 = agent.run_sync("weather?")
    r2 = agent.run_sync("and tomorrow?", message_history=r1.all_messages())
    return r2.all_messages()


def expected_dump(messages: list[Any]) -> list[dict[str, Any]]:
    """Pydantic AI's dump minus the documented exclusions (system prompts, instructions)."""
    out = []
    for d in ModelMessagesTypeAdapter.dump_python(messages, mode="json"):
        d["parts"] = [p for p in d["parts"] if p["part_kind"] != "system-prompt"]
        if d["kind"] == "request":
            d["instructions"] = None
        out.append(d)
    return out


def kinds(thread: m.Thread) -> list[str]:
    return [
        "user" if isinstance(t, m.UserTurn) else f"agent:{t.completion_status}"  # type: ignore[union-attr]
        for t in thread.turns
    ]


def sse_to_json_lines(sse: str) -> str:
    return "".join(ln[5:].strip() + "\n" for ln in sse.splitlines() if ln.startswith("data:"))


def strip_tp(sse: str) -> str:
    return "".join(ln + "\n" for ln in sse.splitlines() if '"type":"data-tp-' not in ln)


# --------------------------------------------------------------------------- pydantic-ai


def test_pydantic_ai_history_becomes_one_thread() -> None:
    msgs = two_runs()
    [thread] = load("pydantic-ai", ModelMessagesTypeAdapter.dump_json(msgs))
    assert uuid.UUID(thread.thread_id)
    assert kinds(thread) == ["user", "agent:complete", "user", "agent:complete"]
    assert validate(thread).errors == []
    [(aid, agent)] = thread.agents.items()
    assert agent.agent_name == "assistant" and agent.model_name == "test"
    assert all(t.agent_id == aid for t in thread.turns if isinstance(t, m.AgentTurn))
    # exported back to Pydantic AI: the same history, minus the documented exclusions
    back = ModelMessagesTypeAdapter.dump_python(history_from_thread(thread), mode="json")
    assert back == expected_dump(msgs)


def test_pydantic_ai_given_ids_and_names() -> None:
    data = ModelMessagesTypeAdapter.dump_json(two_runs())
    tid = "550e8400-e29b-41d4-a716-446655440000"
    [thread] = load("pydantic-ai", data, thread_id=tid, agent_id="agent-x", agent_name="helper", title="t")
    assert thread.thread_id == tid and thread.title == "t"
    assert list(thread.agents) == ["agent-x"] and thread.agents["agent-x"].agent_name == "helper"
    # two imports without a thread id get two different ids
    assert load("pydantic-ai", data)[0].thread_id != load("pydantic-ai", data)[0].thread_id


def test_pydantic_ai_cancelled_run_is_an_interrupted_turn() -> None:
    token = CancellationToken()

    async def stream(messages: list[Any], info: AgentInfo) -> Any:
        if not any(getattr(p, "part_kind", "") == "tool-return" for p in messages[-1].parts):
            yield {0: DeltaToolCall(name="get_weather", json_args='{"city": "Oslo"}', tool_call_id="t1")}
            return
        yield "Based on "
        token.cancel()
        await asyncio.sleep(10)

    agent = Agent(FunctionModel(stream_function=stream))

    @agent.tool_plain
    def get_weather(city: str) -> str:
        return "cold"

    async def go() -> RunCancelled:
        with pytest.raises(RunCancelled) as info:
            async with agent.run_stream("weather in Oslo?", cancellation_token=token) as res:
                async for _ in res.stream_text():
                    pass
        return info.value

    exc = asyncio.run(go())
    [thread] = load("pydantic-ai", exc.all_messages_json())
    assert kinds(thread) == ["user", "agent:interrupted"]
    last = thread.turns[-1]
    assert isinstance(last, m.AgentTurn) and last.interruption.reason == "interrupted"  # type: ignore[union-attr]
    # the complete tool cycle is kept, the cut-off response is not
    assert [type(x).__name__ for x in last.messages] == ["ResponseMessage", "RequestMessage"]


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_pydantic_ai_fixture_histories_import_valid(name: str) -> None:
    fx = load_fixture(FIXTURES[name])
    [thread] = load("pydantic-ai", json.dumps(fx["history"]).encode())
    assert validate(thread).errors == []
    assert isinstance(thread.turns[-1], m.AgentTurn)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"\xff\xfe", "not UTF-8"),
        (b"{not json", "not JSON"),
        (b'{"kind": "request"}', "JSON object"),
        (b'[{"kind": "bogus", "parts": []}]', "not a Pydantic AI message list"),
        (b'[{"kind": "request", "parts": [{"part_kind": "user-prompt"}]}]', r"\$\[0\]"),
    ],
)
def test_pydantic_ai_bad_input(data: bytes, match: str) -> None:
    with pytest.raises(PydanticAIImportError, match=match) as info:
        load("pydantic-ai", data)
    assert isinstance(info.value, InvalidInputError)


def test_pydantic_ai_path_and_empty_and_unknown_format() -> None:
    with pytest.raises(PydanticAIImportError) as info:
        load("pydantic-ai", b'[{"kind": "request", "parts": [{"part_kind": "user-prompt"}]}]')
    assert info.value.path is not None and info.value.path.startswith("$[0].parts[0]")
    with pytest.raises(ImportFormatError, match="no messages"):
        load("pydantic-ai", b"[]")
    with pytest.raises(PydanticAIImportError, match="request body"):
        load("pydantic-ai", b"[]", request=b"{}")
    with pytest.raises(UnknownFormatError):
        load("openai", b"[]")
    assert set(FORMATS) == {"pydantic-ai", "vercel-ui"}


def test_invalid_result_is_a_validation_error() -> None:
    """Pydantic AI accepts a return for a call never made; the protocol does not (v3.2)."""
    msgs = [
        {"kind": "request", "parts": [{"part_kind": "user-prompt", "content": "hi"}]},
        {"kind": "response", "parts": [{"part_kind": "text", "content": "calling"}]},
        {
            "kind": "request",
            "parts": [{"part_kind": "tool-return", "tool_name": "f", "tool_call_id": "ghost", "content": "x"}],
        },
        {"kind": "response", "parts": [{"part_kind": "text", "content": "ok"}]},
    ]
    with pytest.raises(ValidationError, match=r"v3\.2-tool-call-id") as info:
        load("pydantic-ai", json.dumps(msgs).encode())
    assert [f.rule for f in info.value.report.errors] == ["v3.2-tool-call-id"]


# --------------------------------------------------------------------------- vercel-ui streams


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_vercel_stream_with_tp_chunks_equals_server_recording(name: str) -> None:
    fx = load_fixture(FIXTURES[name])
    run = fx["runs"][0]
    server = fold(fx["events"][: run["end"]]).thread
    assert server is not None
    for data in (run["sse"], sse_to_json_lines(run["sse"])):
        [thread] = load("vercel-ui", data.encode(), request=json.dumps(run["body"]).encode())
        assert to_builtins(thread.turns) == to_builtins(server.turns)
        assert validate(thread).errors == []


def test_vercel_live_stream_same_hash_as_server(tmp_path: Path) -> None:
    """A live recorded_vercel_stream run: importing what the client got gives the server's thread."""
    agent = weather_agent()
    body = {
        "trigger": "submit-message",
        "id": "c",
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "weather in Rome?"}]}],
    }
    tid = str(uuid.uuid4())
    aid = str(uuid.uuid4())
    with Store(tmp_path / "db") as store:
        rec = ThreadRecorder(lambda evs: store.append(tid, evs), tid)

        async def go() -> str:
            await rec.start_thread(created_at="2025-01-01T00:00:00Z")
            await rec.register_agent(aid, "assistant", model_name="test", created_at="2025-01-01T00:00:00Z")
            return "".join([c async for c in recorded_vercel_stream(rec, agent, body, agent_id=aid)])

        sse = asyncio.run(go())
        server = store.thread(tid)
    [client] = load("vercel-ui", sse.encode(), request=json.dumps(body).encode(), thread_id=tid)
    # same turns; the registry and creation time come from the input, so compare turns' hash too
    assert to_builtins(client.turns) == to_builtins(server.turns)
    same = m.Thread(**{**{f: getattr(server, f) for f in server.__struct_fields__}, "turns": client.turns})
    assert thread_hash(same) == thread_hash(server)


def test_vercel_plain_stream_is_best_effort() -> None:
    fx = load_fixture(FIXTURES["parallel_tools"])
    run = fx["runs"][0]
    [thread] = load(
        "vercel-ui",
        strip_tp(run["sse"]).encode(),
        request=json.dumps(run["body"]).encode(),
        agent_id="a1",
        clock=lambda: "2025-01-01T00:00:00Z",
    )
    assert kinds(thread) == ["user", "agent:complete"]
    assert list(thread.agents) == ["a1"]
    agent_turn = thread.turns[1]
    assert isinstance(agent_turn, m.AgentTurn)
    assert [type(x).__name__ for x in agent_turn.messages] == ["ResponseMessage", "RequestMessage", "ResponseMessage"]
    cancelled = load_fixture(FIXTURES["cancel_during_text"])["runs"][0]
    [thread] = load("vercel-ui", strip_tp(cancelled["sse"]).encode())
    assert kinds(thread) == ["agent:interrupted"]  # no body: no user turn


def test_vercel_stream_cut_off_is_network_failure() -> None:
    run = load_fixture(FIXTURES["text"])["runs"][0]
    lines = [ln for ln in run["sse"].splitlines() if ln.startswith("data:")]
    cut = "\n\n".join(lines[:4]) + "\n\n"
    [thread] = load("vercel-ui", cut.encode(), request=json.dumps(run["body"]).encode())
    last = thread.turns[-1]
    assert isinstance(last, m.AgentTurn) and last.interruption.reason == "network_failure"  # type: ignore[union-attr]


def live_stream(body: dict[str, Any], history: list[Any] | None = None) -> str:
    """SSE of a live recorded_vercel_stream run (TestModel) for a UI request body."""
    agent = weather_agent()
    rec = ThreadRecorder(lambda evs: None, str(uuid.uuid4()))

    async def go() -> str:
        return "".join(
            [c async for c in recorded_vercel_stream(rec, agent, body, agent_id="a1", message_history=history)]
        )

    return asyncio.run(go())


def ui_dump(msgs: list[Any]) -> list[dict[str, Any]]:
    ui = VercelAIAdapter.dump_messages(msgs, sdk_version=6)
    out: list[dict[str, Any]] = pydantic.TypeAdapter(list[UIMessage]).dump_python(ui, mode="json", by_alias=True)
    return out


@pytest.mark.parametrize("timed", [True, False])
def test_vercel_request_body_history_comes_first(timed: bool) -> None:
    """The body's earlier messages (the UI conversation so far) become the turns before the stream's turn."""
    earlier = two_runs()
    ui = ui_dump(earlier)
    if not timed:  # as a client that never got Pydantic AI's metadata sends them
        for msg in ui:
            msg.pop("metadata", None)
    new = {"id": "u9", "role": "user", "parts": [{"type": "text", "text": "and the day after?"}]}
    body = {"trigger": "submit-message", "id": "c", "messages": [*ui, new]}
    sse = live_stream(body, earlier)
    [thread] = load("vercel-ui", sse.encode(), request=json.dumps(body).encode(), agent_id="a1")
    assert kinds(thread) == ["user", "agent:complete"] * 3
    assert validate(thread).errors == []
    texts = [t.parts[0].content for t in thread.turns if isinstance(t, m.UserTurn)]  # type: ignore[union-attr]
    assert texts == ["weather?", "and tomorrow?", "and the day after?"]
    if not timed:  # untimed history is placed at the stream turn's start
        assert thread.turns[0].submitted_at == thread.turns[4].submitted_at  # type: ignore[union-attr]


def test_vercel_approval_continuation_resolves_deferred_calls() -> None:
    """Deferred fixture, run 2: its tool outputs answer calls the body's assistant message announced."""
    fx = load_fixture(FIXTURES["deferred"])
    first, second = fx["runs"]
    events = load_events("vercel-ui", first["sse"].encode(), request=json.dumps(first["body"]).encode())[0]
    done = [e for e in events if isinstance(e, AgentTurnCompleted)]
    assert done[-1].deferred == {"d1": "approval", "d2": "approval", "e1": "external"}
    # the continuation's stream refers to d1/d2/e1; with no body naming them they are unknown calls
    with pytest.raises(UnknownToolCallError):
        load("vercel-ui", strip_tp(second["sse"]).encode(), request=json.dumps(second["body"]).encode())


# --------------------------------------------------------------------------- vercel-ui stored messages


def test_vercel_stored_ui_messages() -> None:
    msgs = two_runs()
    ui = VercelAIAdapter.dump_messages(msgs, sdk_version=6)
    data = pydantic.TypeAdapter(list[UIMessage]).dump_json(ui, by_alias=True)
    [thread] = load("vercel-ui", data)
    assert kinds(thread) == ["user", "agent:complete", "user", "agent:complete"]
    assert validate(thread).errors == []
    # the conversation survives: prompts, tool cycle, answers
    back = ModelMessagesTypeAdapter.dump_python(history_from_thread(thread), mode="json")
    exp = expected_dump(msgs)
    assert [[(p["part_kind"], p.get("content"), p.get("tool_call_id")) for p in d["parts"]] for d in back] == [
        [(p["part_kind"], p.get("content"), p.get("tool_call_id")) for p in d["parts"]] for d in exp
    ]


@pytest.mark.parametrize(
    ("data", "request_body", "error", "match"),
    [
        (b"[1, 2]", None, VercelImportError, "UIMessage"),
        (b'[{"id": "x", "role": "robot", "parts": []}]', None, VercelImportError, "UIMessage"),
        (b"[{", None, VercelImportError, "not a JSON UIMessage array"),
        (b"[]", b"{}", VercelImportError, "request body only"),
        (b'{"type":"start"}\n', b"[1]", VercelImportError, "not an object"),
        (b'{"type":"start"}\n', b"{nope", VercelImportError, "not JSON"),
        (b'{"type":"start"}\n', b'{"messages": 3}', VercelImportError, "not a list"),
        (b'{"type":"start"}\n', b'{"messages": [{"role": "user"}]}', VercelImportError, "UIMessage"),
        (b"", None, VercelImportError, "no UI stream chunks"),
        (b"\xff", None, VercelImportError, "UTF-8"),
        (b'{"type":"start"}\n{oops\n', None, MalformedChunkError, "line 2"),
        (b'{"type":"start"}\n[1]\n', None, MalformedChunkError, "line 2"),
        (b'{"type":"text-delta","id":"t","delta":"x"}\n', None, ChunkOrderError, "before 'start'"),
        (b'data: {"type":"start"}\n\ndata: {"type":"text-end","id":"t"}\n\n', None, ChunkOrderError, "unknown"),
        (
            b'{"type":"start"}\n{"type":"tool-output-available","toolCallId":"c","output":1}\n',
            None,
            UnknownToolCallError,
            "unknown tool call",
        ),
        (b"[]", None, ImportFormatError, "no messages"),
    ],
)
def test_vercel_bad_input(data: bytes, request_body: bytes | None, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match) as info:
        load("vercel-ui", data, request=request_body)
    assert isinstance(info.value, InvalidInputError)


# --------------------------------------------------------------------------- CLI


def test_cli_import_pydantic_ai(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "history.json"
    f.write_bytes(ModelMessagesTypeAdapter.dump_json(two_runs()))
    store = str(tmp_path / "store")
    assert cli(["import", store, str(f), "--format", "pydantic-ai"]) == 0
    with Store(store, readonly=True) as s:
        [tid] = [h.thread_id for h in s.threads().threads]
        thread = s.export(tid)
    assert kinds(thread) == ["user", "agent:complete", "user", "agent:complete"]
    assert tid in capsys.readouterr().out


def test_cli_import_vercel_ui_with_request(tmp_path: Path) -> None:
    run = load_fixture(FIXTURES["parallel_tools"])["runs"][0]
    (tmp_path / "stream.sse").write_text(run["sse"])
    (tmp_path / "body.json").write_text(json.dumps(run["body"]))
    store = str(tmp_path / "store")
    argv = [
        "import",
        store,
        str(tmp_path / "stream.sse"),
        "--format",
        "vercel-ui",
        "--request",
        str(tmp_path / "body.json"),
    ]
    assert cli(argv) == 0
    with Store(store, readonly=True) as s:
        [tid] = [h.thread_id for h in s.threads().threads]
        assert kinds(s.export(tid)) == ["user", "agent:complete"]


def test_cli_import_bad_input_is_error_exit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "bad.json"
    f.write_text('{"not": "a list"}')
    assert cli(["import", str(tmp_path / "store"), str(f), "--format", "pydantic-ai"]) == 2
    assert "error:" in capsys.readouterr().err
