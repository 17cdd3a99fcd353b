"""Live Pydantic AI runs recorded into a real tplog Store, and hand-built edge cases."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai import messages as pm
from pydantic_ai.models.function import AgentInfo, DeltaThinkingPart, FunctionModel
from pydantic_ai.models.test import TestModel

from tplog import InvalidInputError, Store
from tplog.events import AgentRegistered, AgentTurnInterrupted, LinkAdded, ThreadStarted
from tplog.integrations.pydantic_ai import (
    ThreadRecorder,
    events_from_messages,
    history_from_thread,
    message_from_tp,
    message_to_tp,
)
from tplog.integrations.vercel import (
    ChunkOrderError,
    MalformedChunkError,
    UnknownToolCallError,
    VercelStreamError,
    assemble_turn,
)
from tplog.projections.fold import fold
from tplog.protocol import model as m


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def thread_of(store: Store, tid: str) -> m.Thread:
    th = fold([r.event for r in store.read(tid)]).thread
    assert th is not None
    return th


def test_multi_run_conversation_in_store(tmp_path: Path) -> None:
    with Store(tmp_path / "db") as store:
        t1 = "0c4f7d36-0d6e-4c3a-9b9f-6a1e2f3d4c5b"  # thread ids are UUIDs
        rec = ThreadRecorder(lambda evs: store.append(t1, evs), t1)
        agent = Agent(TestModel(), system_prompt="sys")

        @agent.tool_plain
        def get_weather(city: str) -> str:
            return f"sunny in {city}"

        async def go() -> Any:
            await rec.start_thread(title="weather")
            await rec.register_agent("a1", "assistant")
            r1 = await rec.run(agent, "first", agent_id="a1")
            hist = history_from_thread(thread_of(store, t1))
            r2 = await rec.run(agent, "second", agent_id="a1", message_history=hist)
            return r1, r2

        _r1, r2 = run(go())
        th = thread_of(store, t1)
        assert [type(t).__name__ for t in th.turns] == ["UserTurn", "AgentTurn", "UserTurn", "AgentTurn"]
        # the second run saw the first: its history starts with the first prompt
        first_req = r2.result.all_messages()[0]
        assert any(getattr(p, "content", None) == "first" for p in first_req.parts)
        assert all(msg.agent_id == "a1" for t in th.turns if isinstance(t, m.AgentTurn) for msg in t.messages)
        assert isinstance(th.turns[3], m.AgentTurn) and th.turns[3].completion_status == "complete"


def test_multi_agent_handoff_and_viewing_agent() -> None:
    events: list[Any] = []
    rec = ThreadRecorder(events.extend, "t2")

    async def think(messages: list[Any], info: AgentInfo) -> Any:
        yield {0: DeltaThinkingPart(content="private reasoning", signature="sigA")}
        yield "Agent A's answer."

    a = Agent(FunctionModel(stream_function=think, model_name="model-a"))
    b = Agent(TestModel(custom_output_text="Agent B's answer."))

    async def go() -> None:
        await rec.start_thread()
        await rec.register_agent("A", "alpha")
        await rec.register_agent("B", "beta")
        await rec.run(a, "question", agent_id="A")
        th = fold(events).thread
        assert th is not None
        await rec.run(b, None, agent_id="B", handoff_from="A", message_history=history_from_thread(th, "B"))

    run(go())
    th = fold(events).thread
    assert th is not None
    turn_b = th.turns[-1]
    assert isinstance(turn_b, m.AgentTurn) and turn_b.agent_id == "B"
    handoff = turn_b.messages[0]
    assert isinstance(handoff, m.SystemMessage) and handoff.event_type == m.AGENT_HANDOFF
    assert handoff.event_data == {"from_agent": "A", "to_agent": "B"}
    assert handoff.source_agent == "A" and handoff.target_agents == ["B"]
    for msg in turn_b.messages[1:]:
        assert isinstance(msg, m.ResponseMessage | m.RequestMessage) and msg.agent_id == "B"
    # viewing as B drops A's thinking; viewing as A keeps it
    as_b = history_from_thread(th, viewing_agent_id="B")
    as_a = history_from_thread(th, viewing_agent_id="A")
    kinds_b = [p.part_kind for msg in as_b for p in msg.parts]
    kinds_a = [p.part_kind for msg in as_a for p in msg.parts]
    assert "thinking" not in kinds_b and "thinking" in kinds_a


def test_spawn_child_thread_from_a_tool() -> None:
    parent_events: list[Any] = []
    child_events: list[Any] = []
    rec = ThreadRecorder(parent_events.extend, "parent")
    spawned: list[str] = []
    agent = Agent(TestModel())

    @agent.tool
    async def delegate(ctx: RunContext[None], task: str) -> str:
        child = await rec.spawn(child_events.extend, agent_id="a1", title=f"child: {task}")
        spawned.append(child.thread_id)
        await child.register_agent("a2", "worker")
        await child.run(Agent(TestModel(custom_output_text="child done")), task, agent_id="a2")
        return "delegated"

    async def go() -> None:
        await rec.start_thread()
        await rec.run(agent, "delegate something", agent_id="a1")

    run(go())
    parent = fold(parent_events).thread
    child = fold(child_events).thread
    assert parent is not None and child is not None
    sys_msgs = [
        msg
        for t in parent.turns
        if isinstance(t, m.AgentTurn)
        for msg in t.messages
        if isinstance(msg, m.SystemMessage)
    ]
    assert [s.event_type for s in sys_msgs] == [m.THREAD_SPAWN]
    assert sys_msgs[0].event_data == {"spawned_thread_id": spawned[0]}
    assert child.thread_id == spawned[0]
    links = [e for e in child_events if isinstance(e, LinkAdded)]
    assert links[0].link.thread_id == "parent" and links[0].link.relation == "spawned_from"
    assert child.relationships.links[0].relation == "spawned_from"  # type: ignore[union-attr]
    assert isinstance(child.turns[-1], m.AgentTurn) and child.turns[-1].completion_status == "complete"


def test_external_task_cancellation_is_recorded_and_reraised() -> None:
    events: list[Any] = []
    rec = ThreadRecorder(events.extend, "t3")
    hang = asyncio.Event()

    async def stream(messages: list[Any], info: AgentInfo) -> Any:
        yield "partial"
        await hang.wait()

    agent = Agent(FunctionModel(stream_function=stream))

    async def go() -> None:
        await rec.start_thread()
        task = asyncio.create_task(rec.run(agent, "hi", agent_id="a1"))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(go())
    assert isinstance(events[-1], AgentTurnInterrupted)
    assert events[-1].interruption.reason == "user_cancelled"
    th = fold(events).thread
    assert th is not None and th.turns[-1].messages == []  # type: ignore[union-attr]


def _rich_history() -> list[pm.ModelMessage]:
    ts = "2025-01-02T03:04:05.000006Z"
    return pm.ModelMessagesTypeAdapter.validate_python(
        [
            {
                "kind": "request",
                "timestamp": ts,
                "run_id": "r1",
                "instructions": "be terse",
                "parts": [
                    {"part_kind": "system-prompt", "content": "sys", "timestamp": ts},
                    {
                        "part_kind": "user-prompt",
                        "timestamp": ts,
                        "content": [
                            "look",
                            {"kind": "image-url", "url": "https://x/a.png"},
                            {"kind": "audio-url", "url": "https://x/a.mp3", "force_download": "allow-local"},
                            {"kind": "video-url", "url": "https://x/v.mp4", "vendor_metadata": {"detail": "low"}},
                            {"kind": "document-url", "url": "https://x/d.pdf", "media_type": "application/pdf"},
                            {"kind": "binary", "data": "iVBORw0KGgo=", "media_type": "image/png", "identifier": "img1"},
                            {"kind": "text-content", "content": "note", "metadata": {"k": 1}},
                            {"kind": "cache-point"},
                        ],
                    },
                ],
            },
            {
                "kind": "response",
                "timestamp": ts,
                "run_id": "r1",
                "model_name": "m",
                "provider_name": "anthropic",
                "provider_response_id": "resp1",
                "finish_reason": "tool_call",
                "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_tokens": 3, "output_reasoning_tokens": 2},
                "parts": [
                    {
                        "part_kind": "thinking",
                        "content": "hmm",
                        "signature": "s",
                        "provider_name": "anthropic",
                        "id": "th1",
                    },
                    {"part_kind": "thinking", "content": "no provider"},
                    {"part_kind": "text", "content": "calling", "id": "tx1", "provider_details": {"a": 1}},
                    {"part_kind": "tool-call", "tool_name": "f", "args": '{"x": 1}', "tool_call_id": "c1"},
                    {"part_kind": "tool-call", "tool_name": "g", "args": {"y": 2}, "tool_call_id": "c2"},
                    {"part_kind": "tool-call", "tool_name": "h", "args": "not json", "tool_call_id": "c3"},
                    {"part_kind": "tool-call", "tool_name": "k", "args": '{"z": 1}', "tool_call_id": "c4"},
                    {"part_kind": "tool-call", "tool_name": "d", "tool_call_id": "c5"},
                    {
                        "part_kind": "builtin-tool-call",
                        "tool_name": "web_search",
                        "args": {"q": "x"},
                        "tool_call_id": "b1",
                        "provider_name": "anthropic",
                    },
                    {
                        "part_kind": "builtin-tool-return",
                        "tool_name": "web_search",
                        "content": {"hits": 1},
                        "tool_call_id": "b1",
                        "provider_name": "anthropic",
                        "timestamp": ts,
                    },
                    {"part_kind": "file", "content": {"kind": "binary", "data": "YWJj", "media_type": "image/png"}},
                ],
            },
            {
                "kind": "request",
                "timestamp": ts,
                "run_id": "r1",
                "parts": [
                    {
                        "part_kind": "tool-return",
                        "tool_name": "f",
                        "tool_call_id": "c1",
                        "content": {"ok": True},
                        "timestamp": ts,
                        "metadata": {"m": 1},
                    },
                    {
                        "part_kind": "tool-return",
                        "tool_name": "g",
                        "tool_call_id": "c2",
                        "content": "boom",
                        "outcome": "failed",
                        "timestamp": ts,
                    },
                    {
                        "part_kind": "tool-return",
                        "tool_name": "h",
                        "tool_call_id": "c3",
                        "content": "denied",
                        "outcome": "denied",
                        "timestamp": ts,
                    },
                    {
                        "part_kind": "tool-return",
                        "tool_name": "k",
                        "tool_call_id": "c4",
                        "content": "retry please",
                        "outcome": "retried",
                        "retry": {"cause": "model_retry", "attempt": 1},
                        "timestamp": ts,
                    },
                    {
                        "part_kind": "tool-return",
                        "tool_name": "d",
                        "tool_call_id": "c5",
                        "content": [{"type": "missing", "loc": ["x"], "msg": "Field required", "input": {}}],
                        "outcome": "retried",
                        "retry": {"cause": "validation_error"},
                        "timestamp": ts,
                    },
                    {
                        "part_kind": "retry-feedback",
                        "content": "try again",
                        "retry": {"cause": "model_retry"},
                        "timestamp": ts,
                    },
                ],
            },
            {"kind": "response", "timestamp": ts, "run_id": "r1", "parts": [{"part_kind": "text", "content": "done"}]},
        ]
    )


def test_events_from_messages_append_to_a_fresh_store(tmp_path: Path) -> None:
    """Only ``agent_id`` and ``thread_id``: the events register the agent, so the store takes them
    (rule v3.3-agent-ref) and the thread validates; ``agent_name`` names it when given."""
    from tplog import thread_id_for
    from tplog.protocol.validate import validate

    agent = Agent(TestModel(), name="weather")

    @agent.tool_plain
    def get_weather(city: str) -> str:
        return f"sunny in {city}"

    msgs = agent.run_sync("weather in Paris?").all_messages()
    with Store(tmp_path / "db") as store:
        for tid, name in (("imported-run", None), ("named-run", "Weather bot")):
            events = events_from_messages(msgs, agent_id="a1", thread_id=tid, agent_name=name)
            store.append(thread_id_for(tid), events)
            th = thread_of(store, thread_id_for(tid))
            assert validate(th).errors == []
            assert {k: (a.agent_id, a.agent_name) for k, a in th.agents.items()} == {"a1": ("a1", name or "a1")}
            assert [type(t).__name__ for t in th.turns] == ["UserTurn", "AgentTurn"]
            agent_turn = th.turns[1]
            assert isinstance(agent_turn, m.AgentTurn) and len(agent_turn.messages) == 3


def test_rich_history_round_trip() -> None:
    msgs = _rich_history()
    events = events_from_messages(msgs, agent_id="a", thread_id="t")
    th = fold(events).thread
    assert th is not None
    back = pm.ModelMessagesTypeAdapter.dump_python(history_from_thread(th), mode="json")
    exp = pm.ModelMessagesTypeAdapter.dump_python(msgs, mode="json")
    exp[0]["parts"] = exp[0]["parts"][1:]  # system prompt: excluded
    exp[0]["instructions"] = None  # instructions: excluded
    assert back == exp
    # and message by message
    for msg in msgs[1:]:
        tp = message_to_tp(msg, "a")
        assert pm.ModelMessagesTypeAdapter.dump_python(
            [message_from_tp(tp)], mode="json"
        ) == pm.ModelMessagesTypeAdapter.dump_python([msg], mode="json")


def test_rich_history_protocol_shape() -> None:
    msgs = _rich_history()
    resp = message_to_tp(msgs[1], "a")
    kinds = [type(p).__name__ for p in resp.parts]
    assert kinds == [
        "ThinkingPart",
        "ThinkingPart",
        "TextPart",
        "ToolCallPart",
        "ToolCallPart",
        "ToolCallPart",
        "ToolCallPart",
        "ToolCallPart",
        "ExtensionPart",
        "ExtensionPart",
        "FilePart",
    ]
    assert resp.parts[3].args == {"x": 1}  # type: ignore[union-attr]
    assert resp.parts[5].args == "not json"  # type: ignore[union-attr]
    assert resp.parts[8].part_kind_ == "custom:pai-builtin-tool-call"  # type: ignore[union-attr]
    assert resp.usage.thinking_tokens == 2 and resp.usage.extra["cache_read_tokens"] == 3  # type: ignore[union-attr]
    req = message_to_tp(msgs[2], "a")
    statuses = [(type(p).__name__, getattr(p, "status", None)) for p in req.parts]
    assert statuses == [
        ("ToolReturnPart", "success"),
        ("ToolReturnPart", "error"),
        ("ToolReturnPart", "error"),
        ("RetryPromptPart", None),
        ("RetryPromptPart", None),
        ("RetryPromptPart", None),
    ]
    user = events_from_messages(msgs[:1], agent_id="a")[0].turn  # type: ignore[attr-defined]
    content = user.parts[0].content
    assert [type(c).__name__ for c in content] == [
        "str",
        "ImageUrl",
        "AudioUrl",
        "VideoUrl",
        "DocumentUrl",
        "BinaryContent",
        "ExtensionContent",
        "ExtensionContent",
    ]


def test_foreign_protocol_parts_import() -> None:
    """Parts written by another producer (no pydantic_ai extras) still load into Pydantic AI."""
    from tplog.protocol.json import from_builtins

    msg = from_builtins(
        {
            "message_type": "request",
            "timestamp": "2025-01-01T00:00:00Z",
            "agent_id": "x",
            "parts": [
                {
                    "part_kind": "tool-return",
                    "tool_name": "f",
                    "tool_call_id": "c",
                    "status": "validation_error",
                    "content": "bad",
                },
                {"part_kind": "retry-prompt", "content": [{"type": "missing", "loc": ["a"], "msg": "m", "input": {}}]},
            ],
        },
        m.Message,
    )
    pai = message_from_tp(msg)  # type: ignore[arg-type]
    assert pai.parts[0].outcome == "retried"  # type: ignore[union-attr]
    assert pai.parts[1].part_kind == "retry-feedback"


# --------------------------------------------------------------------------- stream errors


def test_malformed_json_line() -> None:
    with pytest.raises(MalformedChunkError):
        assemble_turn('data: {"type":"start"}\n\ndata: {not json\n\n')
    with pytest.raises(MalformedChunkError):
        assemble_turn("data: [1, 2]\n\n")
    with pytest.raises(MalformedChunkError):
        assemble_turn([{"type": "start"}, {"type": "text-start"}])  # no id


def test_out_of_order_chunks() -> None:
    with pytest.raises(ChunkOrderError):
        assemble_turn([{"type": "start"}, {"type": "text-delta", "id": "x", "delta": "a"}])
    with pytest.raises(ChunkOrderError):
        assemble_turn([{"type": "start-step"}])
    with pytest.raises(ChunkOrderError):
        assemble_turn([{"type": "start"}, {"type": "finish"}, "[DONE]", {"type": "start-step"}])
    with pytest.raises(ChunkOrderError):
        assemble_turn([{"type": "start"}, {"type": "finish"}, {"type": "text-start", "id": "a"}])


def test_tool_output_for_unknown_call() -> None:
    with pytest.raises(UnknownToolCallError):
        assemble_turn([{"type": "start"}, {"type": "tool-output-available", "toolCallId": "nope", "output": 1}])
    assert issubclass(UnknownToolCallError, VercelStreamError)
    assert issubclass(VercelStreamError, InvalidInputError)


def test_incomplete_parts_are_discarded_and_broken_stream_interrupts() -> None:
    events = assemble_turn(
        [
            {"type": "start"},
            {"type": "start-step"},
            {"type": "text-start", "id": "t"},
            {"type": "text-delta", "id": "t", "delta": "done"},
            {"type": "text-end", "id": "t"},
            {"type": "tool-input-start", "toolCallId": "c", "toolName": "f"},
            {"type": "tool-input-delta", "toolCallId": "c", "inputTextDelta": '{"broken'},
            {"type": "reasoning-start", "id": "r"},
            {"type": "reasoning-delta", "id": "r", "delta": "half"},
        ],
        agent_id="a",
    )
    assert isinstance(events[-1], AgentTurnInterrupted)
    assert events[-1].interruption.reason == "network_failure"
    # the step never reached finish-step: not even its ended text part is a complete response
    assert [e for e in events if hasattr(e, "message")] == []
    finished = assemble_turn(
        [
            {"type": "start"},
            {"type": "start-step"},
            {"type": "text-start", "id": "t"},
            {"type": "text-delta", "id": "t", "delta": "done"},
            {"type": "text-end", "id": "t"},
            {"type": "tool-input-start", "toolCallId": "c", "toolName": "f"},
            {"type": "tool-input-delta", "toolCallId": "c", "inputTextDelta": '{"broken'},
            {"type": "finish-step"},
            {"type": "start-step"},
            {"type": "reasoning-start", "id": "r"},
        ],
        agent_id="a",
    )
    msgs = [e.message for e in finished if hasattr(e, "message")]
    assert len(msgs) == 1 and [type(p).__name__ for p in msgs[0].parts] == ["TextPart"]  # call never completed


def test_plain_stream_data_and_sources_become_system_messages() -> None:
    events = assemble_turn(
        [
            {"type": "start"},
            {"type": "start-step"},
            {"type": "source-url", "sourceId": "s1", "url": "https://x"},
            {"type": "data-app-feedback", "data": {"score": 1}},
            {"type": "finish-step"},
            {"type": "finish"},
            "[DONE]",
        ],
        agent_id="a",
    )
    sys_msgs = [e.message for e in events if hasattr(e, "message")]
    assert [s.event_type for s in sys_msgs] == ["source.url", "data-app-feedback"]


def test_bad_tp_notice_payload() -> None:
    with pytest.raises(MalformedChunkError):
        assemble_turn(
            [
                {"type": "start"},
                {"type": "data-tp-turn_end", "data": {}},
                {"type": "data-tp-message", "data": {"nomessage": 1}},
                {"type": "finish"},
            ]
        )


def test_closing_the_wrapper_stream_mid_run_is_clean(tmp_path: Path) -> None:
    """aclose() of the data-tp stream mid-run: the turn is recorded as interrupted, and no task
    fails behind the caller's back ("aclose(): asynchronous generator is already running")."""
    import gc

    from tplog.integrations.vercel import recorded_vercel_stream

    async def stream(messages: list[Any], info: AgentInfo) -> Any:
        yield "one "
        yield "two "
        yield "three"

    agent = Agent(FunctionModel(stream_function=stream))
    tid = "00000000-0000-4000-8000-0000000000a1"
    problems: list[Any] = []

    async def go() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: problems.append(ctx))
        with Store(tmp_path / "db") as store:
            rec = ThreadRecorder(lambda evs: store.append(tid, evs), tid)
            await rec.start_thread()
            await rec.register_agent("a1", "assistant")
            body = {
                "trigger": "submit-message",
                "id": "c",
                "messages": [{"id": "u", "role": "user", "parts": [{"type": "text", "text": "count"}]}],
            }
            gen = recorded_vercel_stream(rec, agent, body, agent_id="a1")
            n = 0
            async for _ in gen:
                n += 1
                if n == 3:
                    break
            await gen.aclose()
            gc.collect()
            await asyncio.sleep(0.05)
            last = thread_of(store, tid).turns[-1]
            assert isinstance(last, m.AgentTurn) and last.completion_status == "interrupted"

    run(go())
    assert problems == []


def test_assembled_turn_that_breaks_message_order_is_refused() -> None:
    """A data-tp stream whose messages go back in time: a typed error, no events to store."""
    from tplog.errors import ValidationError

    def msg(ts: str, text: str) -> dict[str, Any]:
        return {
            "type": "data-tp-message",
            "data": {
                "message": {
                    "message_type": "response",
                    "timestamp": ts,
                    "agent_id": "a",
                    "parts": [{"part_kind": "text", "content": text}],
                }
            },
        }

    chunks = [
        {"type": "start"},
        {"type": "data-tp-turn_start", "data": {"agent_id": "a", "started_at": "2026-01-01T00:00:00Z"}},
        msg("2026-01-01T00:00:05Z", "later"),
        msg("2026-01-01T00:00:01Z", "earlier"),
        {"type": "data-tp-turn_end", "data": {"deferred": {}, "completed_at": "2026-01-01T00:00:09Z"}},
        {"type": "finish"},
    ]
    with pytest.raises(ValidationError, match=r"v3\.5-message-order") as info:
        assemble_turn(chunks)
    assert info.value.report.errors[0].rule == "v3.5-message-order"
    chunks[3] = msg("2026-01-01T00:00:06Z", "in order")
    assert len(assemble_turn(chunks)) == 4


def test_plain_assembly_orders_messages_even_with_a_clock_going_back() -> None:
    """Messages (system messages from source/data chunks included) never get a time earlier than the
    messages recorded before them, whatever the clock says."""
    from tplog.protocol.validate import validate

    ticks = iter(f"2026-01-01T00:00:{s:02d}Z" for s in (30, 29, 20, 10, 5, 4, 3, 2, 1, 0))
    events = assemble_turn(
        [
            {"type": "start"},
            {"type": "start-step"},
            {"type": "text-start", "id": "t"},
            {"type": "text-delta", "id": "t", "delta": "see"},
            {"type": "text-end", "id": "t"},
            {"type": "source-url", "sourceId": "s", "url": "https://example.com"},
            {"type": "data-x-note", "data": {"n": 1}},
            {"type": "finish-step"},
            {"type": "start-step"},
            {"type": "text-start", "id": "u"},
            {"type": "text-delta", "id": "u", "delta": "more"},
            {"type": "text-end", "id": "u"},
            {"type": "finish-step"},
            {"type": "finish"},
        ],
        agent_id="a",
        clock=lambda: next(ticks),
    )
    stamps = [e.message.timestamp for e in events if hasattr(e, "message")]
    assert stamps == sorted(stamps) and len(stamps) == 4
    th = fold(
        [
            ThreadStarted(thread_id="00000000-0000-4000-8000-0000000000b1", created_at="2026-01-01T00:00:00Z"),
            AgentRegistered(agent=m.AgentConfig(agent_id="a", agent_name="a", created_at="2026-01-01T00:00:00Z")),
            *events,
        ]
    ).thread
    assert th is not None and validate(th).ok, validate(th).errors
