"""A client-side tool result in a UI request body (issue 35 item 7): recorded, the call no longer pending.

The report: with an ``output-available`` tool part for a call the thread waits on,
``recorded_vercel_stream`` defers the call again and ``assemble_turn`` leaves it pending. A real
agent whose tool the browser runs (``CallDeferred``, and an ``ExternalToolset``), a real LMDB store,
the README's ``chat()`` followed literally: turn 1 ends waiting on the client's tool; turn 2's body
carries its result. Whichever history the caller passes (the thread's, as the README does, or the
body's, as Pydantic AI's own adapter would), the result is recorded and nothing is pending; the
client's ``assemble_turn`` of the same stream, with no ``known_tool_calls``, is what was recorded.
Without any ``message_history`` the run cannot resume the call (the calls are in the history): an
``InvalidInputError`` naming the message, before anything is written (it used to leave the turn
open, an error in the stream).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pydantic
import pytest

from tplog import InvalidInputError, Store
from tplog.integrations.pydantic_ai import ThreadRecorder, history_from_thread
from tplog.integrations.server.demo_agents import demo_agents
from tplog.integrations.vercel import (
    CHAT_ID_KEY,
    assemble_turn,
    recorded_vercel_stream,
    thread_id_for_chat,
    ui_request,
)
from tplog.protocol import model as m

AGENT = "7d9f3c2e-0000-4000-8000-000000000001"


def external_toolset_agent() -> Any:
    from pydantic_ai import Agent, DeferredToolRequests
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.tools import ToolDefinition
    from pydantic_ai.toolsets import ExternalToolset

    tool = ToolDefinition(name="get_location", parameters_json_schema={"type": "object", "properties": {}})
    return Agent(TestModel(), output_type=[str, DeferredToolRequests], toolsets=[ExternalToolset([tool])])


AGENTS = {"call_deferred": lambda: demo_agents()["demo"], "external_toolset": external_toolset_agent}


async def chat(store: Store, agent: Any, body: dict[str, Any], history: str) -> str:
    """The README's ``chat()``, with the history the caller passes: the thread's, the body's or none."""
    body = ui_request(body)
    tid = thread_id_for_chat(body["id"])
    rec = ThreadRecorder(lambda evs: store.append(tid, evs), tid)
    if not store.exists(tid):
        await rec.start_thread(metadata={CHAT_ID_KEY: body["id"]})
        await rec.register_agent(AGENT, "support-bot")
    kw: dict[str, Any] = {}
    if history == "thread":
        kw["message_history"] = history_from_thread(store.thread(tid), viewing_agent_id=AGENT) or None
    elif history == "body":
        from pydantic_ai.ui.vercel_ai import VercelAIAdapter
        from pydantic_ai.ui.vercel_ai.request_types import RequestData

        msgs = pydantic.TypeAdapter(RequestData).validate_python(body).messages
        kw["message_history"] = VercelAIAdapter.load_messages(msgs[:-1] if msgs[-1].role == "user" else msgs) or None
    stream = recorded_vercel_stream(rec, agent, body, agent_id=AGENT, **kw)
    return "".join([chunk async for chunk in stream])


def turn_one(store: Store, agent: Any, history: str) -> tuple[dict[str, Any], str]:
    ask = {"id": "chat-1", "trigger": "submit-message",
           "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "where am I?"}]}]}
    asyncio.run(chat(store, agent, ask, history))
    (call,) = store.pending(thread_id_for_chat("chat-1")).pending
    assert call.kind == "external"
    # what useChat sends after addToolOutput: the assistant message, its tool part now output-available
    answer = {"id": "chat-1", "trigger": "submit-message", "messages": [
        ask["messages"][0],
        {"id": "a1", "role": "assistant", "parts": [
            {"type": "step-start"},
            {"type": "tool-get_location", "toolCallId": call.tool_call_id, "state": "output-available",
             "input": {}, "output": {"city": "Lyon"}}]}]}
    return answer, call.tool_call_id


@pytest.mark.parametrize("history", ["thread", "body"])
@pytest.mark.parametrize("kind", list(AGENTS))
def test_the_clients_result_is_recorded_and_nothing_is_pending(tmp_path: Path, kind: str, history: str) -> None:
    agent = AGENTS[kind]()
    tid = thread_id_for_chat("chat-1")
    with Store(tmp_path / "store") as store:
        body, cid = turn_one(store, agent, history)
        sse = asyncio.run(chat(store, agent, body, history))
        assert store.pending(tid).pending == []
        last = store.thread(tid).turns[-1]
        assert isinstance(last, m.AgentTurn) and last.completion_status == "complete"
        first = last.messages[0]
        assert isinstance(first, m.RequestMessage) and isinstance(first.parts[0], m.ToolReturnPart)
        assert (first.parts[0].tool_call_id, first.parts[0].content) == (cid, {"city": "Lyon"})
        recorded = [r.event for r in store.read(tid)]
    # the client's copy, from the stream and its own body only (no known_tool_calls)
    events = assemble_turn(sse, body, agent_id=AGENT)
    assert events == recorded[-len(events):]
    assert events[-1].deferred == {}  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", list(AGENTS))
def test_a_result_without_the_history_is_refused_before_anything_is_written(tmp_path: Path, kind: str) -> None:
    agent = AGENTS[kind]()
    tid = thread_id_for_chat("chat-1")
    with Store(tmp_path / "store") as store:
        body, cid = turn_one(store, agent, "none")
        version = store.head(tid).version
        with pytest.raises(InvalidInputError) as err:
            asyncio.run(chat(store, agent, body, "none"))
        assert err.value.path == "$.messages[1]" and cid in str(err.value)
        assert store.head(tid).version == version
        assert [c.tool_call_id for c in store.pending(tid).pending] == [cid]
