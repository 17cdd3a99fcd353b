"""Models that cannot stream (``FunctionModel(fn)`` without a ``stream_function``, a model without
``request_stream``): the recorder runs them node by node and records what a streamed run records."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai import messages as pm
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.models.instrumented import InstrumentedModel
from pydantic_ai.models.test import TestModel

from tplog import Store
from tplog.events import Event
from tplog.integrations.pydantic_ai import ThreadRecorder, can_stream
from tplog.integrations.vercel import assemble_turn, parse_sse, recorded_vercel_stream
from tplog.projections.fold import fold
from tplog.protocol import model as m
from tplog.protocol.canonical import thread_hash

TID = "00000000-0000-4000-8000-0000000000b1"


def _answered(messages: list[pm.ModelMessage]) -> bool:
    return any(isinstance(p, pm.ToolReturnPart) for msg in messages for p in msg.parts)


def answer(messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
    """A tool call first, then a plain text answer."""
    if not _answered(messages):
        return pm.ModelResponse(parts=[pm.ToolCallPart("get_weather", {"city": "Paris"}, tool_call_id="w1")])
    return pm.ModelResponse(parts=[pm.TextPart("Sunny in Paris.")])


async def stream_answer(messages: list[pm.ModelMessage], info: AgentInfo) -> Any:
    """The same answers, streamed."""
    if not _answered(messages):
        yield {0: DeltaToolCall(name="get_weather", json_args='{"city": "Paris"}', tool_call_id="w1")}
    else:
        yield "Sunny in "
        yield "Paris."


def weather_agent(model: Any, seen: list[int] | None = None, store: Store | None = None) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(model)

    @agent.tool_plain
    def get_weather(city: str) -> str:
        if seen is not None and store is not None:  # what the thread holds while the tool runs
            seen.append(len(list(store.read(TID))))
        return f"sunny in {city}"

    return agent


def shape(thread: m.Thread) -> list[Any]:
    """The thread without times, ids of the run and usage: what the two ways of running must share."""
    out: list[Any] = []
    for turn in thread.turns:
        if isinstance(turn, m.UserTurn):
            out.append(("user", [getattr(p, "content", None) for p in turn.parts]))
            continue
        assert isinstance(turn, m.AgentTurn)
        msgs = []
        for msg in turn.messages:
            assert isinstance(msg, m.RequestMessage | m.ResponseMessage)
            parts = [
                (type(p).__name__, getattr(p, "content", None), getattr(p, "args", None), getattr(p, "tool_name", None),
                 getattr(p, "status", None))
                for p in msg.parts
            ]
            msgs.append((type(msg).__name__, msg.agent_id, parts))
        out.append(("agent", turn.agent_id, turn.completion_status, msgs))
    return out


async def _record(agent: Agent[None, str], store: Store) -> Any:
    rec = ThreadRecorder(lambda evs: store.append(TID, evs), TID)
    await rec.start_thread()
    await rec.register_agent("a1", "assistant")
    return await rec.run(agent, "weather in Paris?", agent_id="a1")


def _thread(store: Store) -> m.Thread:
    th = fold([r.event for r in store.read(TID)]).thread
    assert th is not None
    return th


def test_run_records_a_model_that_cannot_stream_like_a_streamed_run(tmp_path: Path) -> None:
    seen: list[int] = []
    with Store(tmp_path / "plain") as plain, Store(tmp_path / "streamed") as streamed:
        r1 = asyncio.run(_record(weather_agent(FunctionModel(answer), seen, plain), plain))
        r2 = asyncio.run(_record(weather_agent(FunctionModel(stream_function=stream_answer)), streamed))
        assert r1.output == r2.output == "Sunny in Paris."
        assert r1.interruption is None and r1.error is None
        kinds = [[type(r.event).__name__ for r in s.read(TID)] for s in (plain, streamed)]
        assert kinds[0] == kinds[1]
        assert kinds[0][2:] == ["UserTurnSubmitted", "AgentTurnStarted", "MessageRecorded", "MessageRecorded",
                                "MessageRecorded", "AgentTurnCompleted"]
        # recorded as the run goes: the tool call's response was in the thread when the tool ran
        assert seen == [5]
        assert shape(_thread(plain)) == shape(_thread(streamed))
        last = _thread(plain).turns[-1]
        assert isinstance(last, m.AgentTurn) and last.completion_status == "complete"


class _RequestOnly(Model):
    """A model that implements only ``request`` (as many custom models do)."""

    async def request(self, messages: list[pm.ModelMessage], model_settings: Any, params: Any) -> pm.ModelResponse:
        return answer(messages, None)  # type: ignore[arg-type]

    @property
    def model_name(self) -> str:
        return "request-only"

    @property
    def system(self) -> str:
        return "test"


def test_can_stream() -> None:
    assert can_stream(FunctionModel(stream_function=stream_answer)) and can_stream(TestModel())
    assert not can_stream(FunctionModel(answer)) and not can_stream(_RequestOnly())
    assert not can_stream(InstrumentedModel(FunctionModel(answer)))  # a wrapper streams as what it wraps
    assert can_stream("openai:gpt-5.2")  # a named model is a provider's: they all stream


def test_model_given_to_the_run_or_by_override(tmp_path: Path) -> None:
    """The model the run uses decides: ``model=`` of the run, ``Agent.override(model=...)``."""

    async def go(store: Store, how: str) -> Any:
        agent = weather_agent(FunctionModel(stream_function=stream_answer) if how == "override" else None)
        rec = ThreadRecorder(lambda evs: store.append(TID, evs), TID)
        await rec.start_thread()
        await rec.register_agent("a1", "assistant")
        if how == "override":
            with agent.override(model=_RequestOnly()):
                return await rec.run(agent, "weather?", agent_id="a1")
        return await rec.run(agent, "weather?", agent_id="a1", model=InstrumentedModel(FunctionModel(answer)))

    for how in ("override", "run"):
        with Store(tmp_path / how) as store:
            assert asyncio.run(go(store, how)).output == "Sunny in Paris."
            last = _thread(store).turns[-1]
            assert isinstance(last, m.AgentTurn) and last.completion_status == "complete" and len(last.messages) == 3


async def _vercel(agent: Agent[None, str]) -> tuple[list[Event], str]:
    events: list[Event] = []
    rec = ThreadRecorder(events.extend, TID)
    await rec.start_thread()
    await rec.register_agent("a1", "assistant")
    body = {"trigger": "submit-message", "id": "c",
            "messages": [{"id": "u", "role": "user", "parts": [{"type": "text", "text": "weather in Paris?"}]}]}
    sse = "".join([line async for line in recorded_vercel_stream(rec, agent, body, agent_id="a1")])
    return events, sse


def test_vercel_stream_of_a_model_that_cannot_stream() -> None:
    """The UI stream of a run whose model cannot stream: the client assembles the server's thread,
    from the data-tp chunks and from the plain stream alike, and it is the streamed run's thread."""
    events, sse = asyncio.run(_vercel(weather_agent(FunctionModel(answer))))
    s_events, s_sse = asyncio.run(_vercel(weather_agent(FunctionModel(stream_function=stream_answer))))
    server = fold(events).thread
    assert server is not None
    assert shape(server) == shape(fold(s_events).thread)  # type: ignore[arg-type]
    body = {"messages": [{"id": "u", "role": "user", "parts": [{"type": "text", "text": "weather in Paris?"}]}]}
    client = fold(events[:2] + assemble_turn(sse, body, agent_id="a1")).thread
    assert client is not None and thread_hash(client) == thread_hash(server)
    plain = "".join(ln + "\n" for ln in sse.splitlines() if '"type":"data-tp-' not in ln)
    assert shape(fold(events[:2] + assemble_turn(plain, body, agent_id="a1")).thread) == shape(server)  # type: ignore[arg-type]
    types = [c["type"] for c in parse_sse(sse) if isinstance(c, dict) and not c["type"].startswith("data-tp-")]
    s_types = [c["type"] for c in parse_sse(s_sse) if isinstance(c, dict) and not c["type"].startswith("data-tp-")]
    assert [t for t in types if t != "text-delta"] == [t for t in s_types if t != "text-delta"]


def test_cancelling_a_run_of_a_model_that_cannot_stream() -> None:
    """A cancel while a tool runs: recorded ``user_cancelled``, as for a streamed run."""
    from pydantic_ai import CancellationToken

    events: list[Event] = []
    token = CancellationToken()
    agent: Agent[None, str] = Agent(FunctionModel(answer))

    @agent.tool_plain
    async def get_weather(city: str) -> str:
        token.cancel()
        await asyncio.sleep(30)
        return "never"

    async def go() -> Any:
        rec = ThreadRecorder(events.extend, TID)
        await rec.start_thread()
        await rec.register_agent("a1", "assistant")
        return await rec.run(agent, "weather?", agent_id="a1", cancellation_token=token)

    result = asyncio.run(go())
    assert result.interruption is not None and result.interruption.reason == "user_cancelled"
    last = fold(events).thread.turns[-1]  # type: ignore[union-attr]
    assert isinstance(last, m.AgentTurn) and last.completion_status == "interrupted"
