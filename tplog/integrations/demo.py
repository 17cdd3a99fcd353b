"""The demo's recording: real Pydantic AI runs of a scripted model, recorded into a tplog store.

:func:`record` runs a weather assistant (a Pydantic AI ``Agent`` over a
scripted ``FunctionModel``: no API key, no network) four times, each run
recorded live by :class:`~tplog.integrations.pydantic_ai.ThreadRecorder`
into the given :class:`~tplog.Store`, each next run given the thread's
history (:func:`~tplog.integrations.pydantic_ai.history_from_thread`):

1. "What's the weather in Paris?" -- a tool call, its return, an answer;
2. "And Berlin? Research it in a sub-thread." -- a tool that spawns a child
   thread (``data-tp-thread_spawn`` system message in the root,
   ``spawned_from`` link in the child) and runs a worker agent there;
3. "Compare Paris and Berlin." -- a complete tool cycle, then the model
   streams part of its answer and the run is cancelled
   (``CancellationToken``): the turn is interrupted (``user_cancelled``),
   keeping the complete tool cycle and dropping the cut-off response;
4. "Book me a train to Berlin." -- the model calls a tool that requires
   approval; the run ends with ``DeferredToolRequests`` and the turn is
   complete with the call deferred (``"approval"``), pending.

``python tools/demo.py DIR`` prints what tplog derives from it.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, Final

from pydantic_ai import Agent, CancellationToken, DeferredToolRequests
from pydantic_ai import messages as pm
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

from tplog.integrations.pydantic_ai import ThreadRecorder, history_from_thread
from tplog.store import Store

__all__ = ["AGENT_ID", "PROMPTS", "WORKER_ID", "arecord", "record"]

AGENT_ID: Final = "7d9f3c2e-0000-4000-8000-000000000001"
WORKER_ID: Final = "7d9f3c2e-0000-4000-8000-000000000002"
MODEL: Final = "scripted-weather"
PROMPTS: Final = (
    "What's the weather in Paris?",
    "And Berlin? Research it in a sub-thread.",
    "Compare Paris and Berlin.",
    "Book me a train to Berlin.",
)
WEATHER: Final = {"Paris": {"temp_c": 21, "sky": "sunny"}, "Berlin": {"temp_c": 17, "sky": "cloudy"}}


def _last_prompt(messages: list[pm.ModelMessage]) -> str:
    for msg in reversed(messages):
        if isinstance(msg, pm.ModelRequest):
            for p in msg.parts:
                if isinstance(p, pm.UserPromptPart) and isinstance(p.content, str):
                    return p.content
    return ""


def _answered(messages: list[pm.ModelMessage]) -> bool:
    """The last request carries tool returns (the model's second step)."""
    last = messages[-1] if messages else None
    return isinstance(last, pm.ModelRequest) and any(isinstance(p, pm.ToolReturnPart) for p in last.parts)


class _Script:
    """The scripted model's behaviour, keyed by the user's latest prompt."""

    def __init__(self) -> None:
        self.token: CancellationToken | None = None

    async def stream(self, messages: list[pm.ModelMessage], info: AgentInfo) -> Any:
        prompt = _last_prompt(messages)
        second = _answered(messages)
        if prompt == PROMPTS[0]:
            if not second:
                yield {0: DeltaToolCall(name="get_weather", json_args='{"city": "Paris"}', tool_call_id="call_paris")}
                return
            yield "It is 21 °C "
            yield "and sunny in Paris."
        elif prompt == PROMPTS[1]:
            if not second:
                yield "I'll research Berlin in a sub-thread. "
                yield {
                    1: DeltaToolCall(
                        name="research_in_subthread", json_args='{"topic": "Berlin weather"}', tool_call_id="call_sub"
                    )
                }
                return
            yield "The sub-thread reports: Berlin is 17 °C and cloudy."
        elif prompt == PROMPTS[2]:
            if not second:
                yield {0: DeltaToolCall(name="get_weather", json_args='{"city": "Berlin"}', tool_call_id="call_berlin")}
                return
            yield "Paris is warmer "
            yield "than Ber"
            assert self.token is not None
            self.token.cancel()  # the user presses "stop" mid-stream
            await asyncio.sleep(10)  # never reached: the run is cancelled here
        elif prompt == PROMPTS[3]:
            yield "I need your approval to book this. "
            yield {1: DeltaToolCall(name="book_train", json_args='{"to": "Berlin"}', tool_call_id="call_train")}
        else:
            yield "I can only talk about the weather."


async def _worker_stream(messages: list[pm.ModelMessage], info: AgentInfo) -> Any:
    yield "Berlin: 17 °C, "
    yield "cloudy, light wind."


def record(store: Store) -> tuple[str, str]:
    """Record the demo runs into ``store``; returns ``(root_thread_id, child_thread_id)``."""
    return asyncio.run(arecord(store))


async def arecord(store: Store) -> tuple[str, str]:
    """:func:`record` for callers already inside an event loop."""
    root = str(uuid.uuid4())
    child_id = str(uuid.uuid4())
    script = _Script()
    rec = ThreadRecorder(lambda evs: store.append(root, evs), root)
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        FunctionModel(stream_function=script.stream, model_name=MODEL),
        system_prompt="You are a weather assistant.",
        output_type=[str, DeferredToolRequests],
    )

    @agent.tool_plain
    def get_weather(city: str) -> dict[str, Any]:
        return WEATHER.get(city, {"temp_c": None, "sky": "unknown"})

    @agent.tool_plain
    async def research_in_subthread(topic: str) -> str:
        child = await rec.spawn(
            lambda evs: store.append(child_id, evs),
            child_thread_id=child_id,
            agent_id=AGENT_ID,
            title=f"Research: {topic}",
            metadata={"topic": topic},
        )
        await child.register_agent(WORKER_ID, "researcher", model_name="scripted-worker")
        worker = Agent(FunctionModel(stream_function=_worker_stream, model_name="scripted-worker"))
        done = await child.run(worker, f"Research: {topic}", agent_id=WORKER_ID)
        return str(done.output)

    @agent.tool_plain(requires_approval=True)
    def book_train(to: str) -> str:  # pragma: no cover - the demo never approves it
        return f"booked a train to {to}"

    await rec.start_thread(title="Weather in Europe", created_at=None)
    await rec.register_agent(AGENT_ID, "weather-bot", model_name=MODEL, provider_name="function")
    for prompt in PROMPTS:
        history = history_from_thread(store.thread(root), AGENT_ID)
        kwargs: dict[str, Any] = {}
        if prompt == PROMPTS[2]:
            script.token = kwargs["cancellation_token"] = CancellationToken()
        await rec.run(agent, prompt, agent_id=AGENT_ID, message_history=history or None, **kwargs)
    return root, child_id
