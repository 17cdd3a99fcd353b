"""Generate the Pydantic AI / Vercel fixture corpus for tests/integrations.

Every scenario is a real Pydantic AI run (FunctionModel / TestModel, no
network) recorded by ``ThreadRecorder`` through ``recorded_vercel_stream``.
Each fixture file holds:

- ``events``: the events the server recorded (msgspec JSON of tplog events);
- ``runs``: per run, the UI request ``body``, the SSE ``sse`` text the client
  received (with the injected ``data-tp-*`` chunks) and ``[start, end)``, the
  slice of ``events`` the run appended;
- ``history``: the Pydantic AI ``all_messages_json()`` of the last run (or of
  the cancelled run's ``RunCancelled``), for the history round trip;
- ``pai_version``.

Usage: ``python tools/gen_pai_fixtures.py [outdir]`` (default
``tests/integrations/fixtures``).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import msgspec
from pydantic import BaseModel
from pydantic_ai import Agent, CancellationToken, DeferredToolRequests, DeferredToolResults, ModelRetry, ToolDenied
from pydantic_ai.exceptions import CallDeferred
from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelResponse
from pydantic_ai.models.function import AgentInfo, DeltaThinkingPart, DeltaToolCall, FunctionModel

from tplog.integrations.pydantic_ai import ThreadRecorder, history_from_thread
from tplog.integrations.vercel import CHAT_ID_KEY, recorded_vercel_stream, thread_id_for_chat
from tplog.projections.fold import fold

HANG: asyncio.Event | None = None


def ui_history(history: list[Any]) -> list[dict[str, Any]]:
    """The UI messages a ``useChat`` client holds for ``history`` (Pydantic AI's own dump, SDK v6)."""
    from pydantic_ai.ui.vercel_ai import VercelAIAdapter

    return [
        u.model_dump(mode="json", by_alias=True, exclude_none=True)
        for u in VercelAIAdapter.dump_messages(history, sdk_version=6)
    ]


def answered(decisions: dict[str, dict[str, Any]]) -> Any:
    """A request body builder: the client's UI history with the tool parts of ``decisions`` updated
    (``{"state": "approval-responded", "approval": ...}`` or ``{"state": "output-available", "output": ...}``),
    as AI SDK v6 sends it after ``addToolApprovalResponse`` / ``addToolOutput``."""

    def build(history: list[Any]) -> dict[str, Any]:
        msgs = ui_history(history)
        for part in msgs[-1]["parts"]:
            cid = part.get("toolCallId")
            if cid in decisions:
                part.pop("approval", None)
                part.update(decisions[cid])
        return {"trigger": "submit-message", "id": "chat", "messages": msgs}

    return build


def body(text: str | None, files: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    msgs: list[dict[str, Any]] = []
    if text is not None or files:
        parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text is not None else []
        parts += files or []
        msgs.append({"id": "u1", "role": "user", "parts": parts})
    return {"trigger": "submit-message", "id": "chat", "messages": msgs}


def n_responses(messages: list[Any]) -> int:
    return sum(1 for msg in messages if isinstance(msg, ModelResponse))


async def hang() -> None:
    assert HANG is not None
    await HANG.wait()


def weather_agent(stream: Any, **kw: Any) -> Agent[None, Any]:
    agent: Agent[None, Any] = Agent(FunctionModel(stream_function=stream, model_name="fn-model"), **kw)

    @agent.tool_plain
    def get_weather(city: str) -> str:
        return f"sunny in {city}"

    return agent


# --------------------------------------------------------------------------- scenarios


async def s_text(stream_only: Any) -> Any:
    async def stream(messages: list[Any], info: AgentInfo) -> Any:
        yield "Hello, "
        yield "world!"

    return {"agent": weather_agent(stream, system_prompt="be nice"), "runs": [{"body": body("hi")}]}


async def s_thinking(_: Any) -> Any:
    async def stream(messages: list[Any], info: AgentInfo) -> Any:
        yield {0: DeltaThinkingPart(content="Let me think", signature="sig-")}
        yield {0: DeltaThinkingPart(content=" hard.", signature="123")}
        yield "The answer is 42."

    return {"agent": weather_agent(stream), "runs": [{"body": body("meaning of life?")}]}


async def s_parallel_tools(_: Any) -> Any:
    async def stream(messages: list[Any], info: AgentInfo) -> Any:
        if n_responses(messages) == 0:
            yield "Checking both. "
            yield {1: DeltaToolCall(name="get_weather", json_args='{"city": "Paris"}', tool_call_id="c_paris")}
            yield {2: DeltaToolCall(name="get_weather", json_args='{"city"', tool_call_id="c_berlin")}
            yield {2: DeltaToolCall(json_args=': "Berlin"}')}
            return
        yield "Paris and Berlin are sunny."

    return {"agent": weather_agent(stream), "runs": [{"body": body("weather in Paris and Berlin?")}]}


async def s_retries(_: Any) -> Any:
    calls = {"n": 0}

    async def stream(messages: list[Any], info: AgentInfo) -> Any:
        n = n_responses(messages)
        if n == 0:
            yield {0: DeltaToolCall(name="flaky", json_args='{"x": "not-an-int"}', tool_call_id="r1")}
        elif n == 1:
            yield {0: DeltaToolCall(name="flaky", json_args='{"x": 1}', tool_call_id="r2")}
        elif n == 2:
            yield {0: DeltaToolCall(name="flaky", json_args='{"x": 2}', tool_call_id="r3")}
        else:
            yield "done"

    agent: Agent[None, Any] = Agent(FunctionModel(stream_function=stream, model_name="fn-model"))

    @agent.tool_plain(retries=3)
    def flaky(x: int) -> str:
        calls["n"] += 1
        if x == 1:
            raise ModelRetry("x=1 is unlucky, try 2")
        return f"ok {x}"

    return {"agent": agent, "runs": [{"body": body("call flaky")}]}


async def s_failed_tool(_: Any) -> Any:
    async def stream(messages: list[Any], info: AgentInfo) -> Any:
        if n_responses(messages) == 0:
            yield {0: DeltaToolCall(name="broken", json_args="{}", tool_call_id="b1")}
        else:
            yield "it failed"

    agent: Agent[None, Any] = Agent(FunctionModel(stream_function=stream, model_name="fn-model"))

    @agent.tool_plain
    def broken() -> str:
        from pydantic_ai.exceptions import ToolFailed

        raise ToolFailed("disk on fire")

    return {"agent": agent, "runs": [{"body": body("call broken")}]}


async def s_deferred(_: Any) -> Any:
    async def stream(messages: list[Any], info: AgentInfo) -> Any:
        n = n_responses(messages)
        if n == 0:
            yield {0: DeltaToolCall(name="delete_file", json_args='{"path": "a.txt"}', tool_call_id="d1")}
            yield {1: DeltaToolCall(name="delete_file", json_args='{"path": "b.txt"}', tool_call_id="d2")}
            yield {2: DeltaToolCall(name="run_remote", json_args='{"job": "build"}', tool_call_id="e1")}
            yield {3: DeltaToolCall(name="get_weather", json_args='{"city": "Rome"}', tool_call_id="w1")}
        else:
            yield "Deleted a.txt, kept b.txt, build finished."

    agent = weather_agent(stream, output_type=[str, DeferredToolRequests])

    @agent.tool_plain(requires_approval=True)
    def delete_file(path: str) -> str:
        return f"deleted {path}"

    @agent.tool_plain
    def run_remote(job: str) -> str:
        raise CallDeferred

    results = DeferredToolResults(approvals={"d1": True, "d2": ToolDenied("not that one")}, calls={"e1": "build ok"})
    return {
        "agent": agent,
        "runs": [{"body": body("clean up and build")}, {"body": body(None), "deferred_tool_results": results}],
    }


async def s_multimodal(_: Any) -> Any:
    async def stream(messages: list[Any], info: AgentInfo) -> Any:
        yield "Nice picture and document."

    files = [
        {"type": "file", "mediaType": "image/png", "url": "https://example.com/cat.png"},
        {"type": "file", "mediaType": "application/pdf", "url": "https://example.com/doc.pdf"},
        {"type": "file", "mediaType": "audio/mpeg", "url": "https://example.com/a.mp3"},
        {"type": "file", "mediaType": "video/mp4", "url": "https://example.com/v.mp4"},
        {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,iVBORw0KGgo="},
    ]
    return {"agent": weather_agent(stream), "runs": [{"body": body("what is this?", files)}]}


class City(BaseModel):
    name: str
    population: int


async def s_structured(_: Any) -> Any:
    async def stream(messages: list[Any], info: AgentInfo) -> Any:
        tool = info.output_tools[0].name
        yield {0: DeltaToolCall(name=tool, json_args='{"name": "Paris", ', tool_call_id="o1")}
        yield {0: DeltaToolCall(json_args='"population": 2100000}')}

    return {"agent": weather_agent(stream, output_type=City), "runs": [{"body": body("biggest city?")}]}


def _cancelling(kind: str) -> Any:
    token = CancellationToken()

    async def stream(messages: list[Any], info: AgentInfo) -> Any:
        n = n_responses(messages)
        if kind == "text":
            yield "Hello "
            yield "wor"
            token.cancel()
            await hang()
        elif kind == "toolargs":
            yield "Let me check. "
            yield {1: DeltaToolCall(name="get_weather", json_args='{"ci', tool_call_id="t1")}
            token.cancel()
            await hang()
        elif kind == "aftertool":
            if n == 0:
                yield {0: DeltaToolCall(name="get_weather", json_args='{"city": "Oslo"}', tool_call_id="t1")}
                return
            yield "Based on "
            token.cancel()
            await hang()
        elif kind == "timeout":
            yield "Slow "
            await hang()
        elif kind == "error":
            if n == 0:
                yield {0: DeltaToolCall(name="get_weather", json_args='{"city": "Lima"}', tool_call_id="t1")}
                return
            yield "Partial ans"
            raise RuntimeError("model exploded mid-stream")

    return token, stream


async def s_cancel(kind: str) -> Any:
    token, stream = _cancelling(kind)
    run: dict[str, Any] = {"body": body(f"cancel scenario {kind}")}
    if kind == "timeout":
        run["timeout"] = 0.3
    else:
        run["cancellation_token"] = token
    return {"agent": weather_agent(stream), "runs": [run]}


async def s_tool_raises(_: Any) -> Any:
    """A tool raises (not ModelRetry): the run errors after a complete response; the adapter closes
    the call with a synthetic "interrupted by an error" output that is no tool return."""

    async def stream(messages: list[Any], info: AgentInfo) -> Any:
        if n_responses(messages) == 0:
            yield "Let me look. "
            yield {1: DeltaToolCall(name="explode", json_args="{}", tool_call_id="x1")}
        else:
            yield "unreachable"

    agent: Agent[None, Any] = Agent(FunctionModel(stream_function=stream, model_name="fn-model"))

    @agent.tool_plain
    def explode() -> str:
        raise RuntimeError("tool blew up")

    return {"agent": agent, "runs": [{"body": body("call explode")}]}


async def s_cancel_during_tool(_: Any) -> Any:
    """Cancelled while a tool runs: the adapter closes the call with a synthetic 'interrupted' output."""
    token = CancellationToken()

    async def stream(messages: list[Any], info: AgentInfo) -> Any:
        if n_responses(messages) == 0:
            yield "Checking. "
            yield {1: DeltaToolCall(name="slow", json_args='{"n": 1}', tool_call_id="s1")}
        else:
            yield "unreachable"

    agent: Agent[None, Any] = Agent(FunctionModel(stream_function=stream, model_name="fn-model"))

    @agent.tool_plain
    async def slow(n: int) -> str:
        token.cancel()
        await hang()
        return "never"

    return {"agent": agent, "runs": [{"body": body("run slow"), "cancellation_token": token}]}


def _approval_agent() -> Any:
    async def stream(messages: list[Any], info: AgentInfo) -> Any:
        n = n_responses(messages)
        if n == 0:
            yield "I will delete both. "
            yield {1: DeltaToolCall(name="delete_file", json_args='{"path": "a.txt"}', tool_call_id="d1")}
            yield {2: DeltaToolCall(name="get_weather", json_args='{"city": "Rome"}', tool_call_id="w1")}
            yield {3: DeltaToolCall(name="delete_file", json_args='{"path": "b.txt"}', tool_call_id="d2")}
        else:
            yield "Deleted a.txt, kept b.txt."

    agent = weather_agent(stream, output_type=[str, DeferredToolRequests])

    @agent.tool_plain(requires_approval=True)
    def delete_file(path: str) -> str:
        return f"deleted {path}"

    return agent


async def s_approval_resume(_: Any) -> Any:
    """AI SDK v6 approval flow: the second request carries the approvals in the client's UI history;
    the resumed stream announces the approved call again before its output."""
    decisions = {
        "d1": {"state": "approval-responded", "approval": {"id": "d1", "approved": True}},
        "d2": {"state": "approval-responded", "approval": {"id": "d2", "approved": False, "reason": "keep it"}},
    }
    return {
        "agent": _approval_agent(),
        "runs": [{"body": body("delete a.txt and b.txt")}, {"body_from_history": answered(decisions)}],
    }


async def s_client_tool(_: Any) -> Any:
    """A client-side tool (AI SDK v6 ``addToolOutput``): the server defers the call, the browser runs
    it and sends the result as an ``output-available`` tool part; that result resumes the run."""

    async def stream(messages: list[Any], info: AgentInfo) -> Any:
        if n_responses(messages) == 0:
            yield {0: DeltaToolCall(name="get_location", json_args="{}", tool_call_id="loc1")}
        else:
            yield "You are in Lyon."

    agent: Agent[None, Any] = Agent(
        FunctionModel(stream_function=stream, model_name="fn-model"), output_type=[str, DeferredToolRequests]
    )

    @agent.tool_plain
    def get_location() -> str:
        raise CallDeferred  # runs in the browser

    decisions = {"loc1": {"state": "output-available", "output": {"city": "Lyon"}}}
    return {"agent": agent, "runs": [{"body": body("where am I?")}, {"body_from_history": answered(decisions)}]}


async def s_sources_data(_: Any) -> Any:
    """A tool whose return carries Vercel source/data chunks (Pydantic AI streams them after the output)."""
    from pydantic_ai import ToolReturn
    from pydantic_ai.ui.vercel_ai.response_types import DataChunk, SourceDocumentChunk, SourceUrlChunk

    async def stream(messages: list[Any], info: AgentInfo) -> Any:
        if n_responses(messages) == 0:
            yield {0: DeltaToolCall(name="search", json_args='{"q": "tplog"}', tool_call_id="q1")}
        else:
            yield "Found it."

    agent: Agent[None, Any] = Agent(FunctionModel(stream_function=stream, model_name="fn-model"))

    @agent.tool_plain
    def search(q: str) -> Any:
        return ToolReturn(
            return_value=f"results for {q}",
            metadata=[
                SourceUrlChunk(source_id="s1", url="https://example.com/tplog", title="tplog"),
                SourceDocumentChunk(source_id="s2", media_type="application/pdf", title="spec"),
                DataChunk(type="data-search-stats", data={"hits": 2}),
            ],
        )

    return {"agent": agent, "runs": [{"body": body("search tplog")}]}


async def s_output_retry(_: Any) -> Any:
    """An output validator rejects the first text answer: two model responses in one UI step, and
    the retry request between them emits no chunk."""

    async def stream(messages: list[Any], info: AgentInfo) -> Any:
        if n_responses(messages) == 0:
            yield "fourty-two"
        else:
            yield "42"

    agent: Agent[None, Any] = Agent(FunctionModel(stream_function=stream, model_name="fn-model"))

    @agent.output_validator
    def digits_only(out: str) -> str:
        if not out.isdigit():
            raise ModelRetry("answer with digits only")
        return out

    return {"agent": agent, "runs": [{"body": body("6 times 7?")}]}


SCENARIOS: dict[str, Any] = {
    "text": lambda: s_text(None),
    "thinking": lambda: s_thinking(None),
    "parallel_tools": lambda: s_parallel_tools(None),
    "retries": lambda: s_retries(None),
    "failed_tool": lambda: s_failed_tool(None),
    "deferred": lambda: s_deferred(None),
    "multimodal": lambda: s_multimodal(None),
    "structured_output": lambda: s_structured(None),
    "cancel_during_text": lambda: s_cancel("text"),
    "cancel_during_tool_args": lambda: s_cancel("toolargs"),
    "cancel_after_tool_cycle": lambda: s_cancel("aftertool"),
    "timeout": lambda: s_cancel("timeout"),
    "model_error": lambda: s_cancel("error"),
    "tool_raises": lambda: s_tool_raises(None),
    "cancel_during_tool": lambda: s_cancel_during_tool(None),
    "approval_resume": lambda: s_approval_resume(None),
    "client_tool": lambda: s_client_tool(None),
    "sources_data": lambda: s_sources_data(None),
    "output_retry": lambda: s_output_retry(None),
}


async def run_scenario(name: str) -> dict[str, Any]:
    global HANG
    HANG = asyncio.Event()
    spec = await SCENARIOS[name]()
    agent = spec["agent"]
    events: list[Any] = []
    chat_id = f"chat-{name}"  # an AI SDK chat id, not a UUID: the thread id is made from it
    rec = ThreadRecorder(events.extend, thread_id_for_chat(chat_id))
    await rec.start_thread(title=name, metadata={CHAT_ID_KEY: chat_id})
    await rec.register_agent("agent-1", "assistant", model_name="fn-model")
    runs_out: list[dict[str, Any]] = []
    history: list[Any] = []
    for run in spec["runs"]:
        kwargs = {k: v for k, v in run.items() if k not in ("body", "body_from_history")}
        if "body_from_history" in run:
            run["body"] = run["body_from_history"](history)
        run["body"]["id"] = chat_id
        start = len(events)
        sse: list[str] = []
        if True:
            try:
                async for line in recorded_vercel_stream(
                    rec, agent, run["body"], agent_id="agent-1", message_history=history or None, **kwargs
                ):
                    sse.append(line)
            except RuntimeError:
                pass  # model/tool error: the stream ends with an `error` chunk, the exception re-raised after
        thread = fold(events).thread
        assert thread is not None
        history = history_from_thread(thread)
        runs_out.append({"body": run["body"], "sse": "".join(sse), "start": start, "end": len(events)})
        full_history = list(rec.last_run_messages)
    return {
        "name": name,
        "events": json.loads(msgspec.json.encode(events)),
        "runs": runs_out,
        "history": json.loads(ModelMessagesTypeAdapter.dump_json(full_history)),
    }


async def main(outdir: Path) -> None:
    import pydantic_ai

    outdir.mkdir(parents=True, exist_ok=True)
    for name in SCENARIOS:
        data = await run_scenario(name)
        data["pai_version"] = pydantic_ai.__version__
        (outdir / f"{name}.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(f"wrote {name}")


if __name__ == "__main__":
    default = Path(__file__).resolve().parents[1] / "tests/integrations/fixtures"
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else default
    asyncio.run(main(out))
