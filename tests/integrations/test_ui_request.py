"""A chat endpoint built with the library (the README's Starlette example): a body without ``trigger``
is run as ``tplog serve`` runs it; a body that is not a UI request is a 400 before anything is written."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from tplog import AgentTurnCompleted, InvalidInputError, NotFoundError, Store
from tplog.integrations.pydantic_ai import ThreadRecorder, history_from_thread
from tplog.integrations.vercel import CHAT_ID_KEY, recorded_vercel_stream, thread_id_for_chat, ui_request

AGENT = "7d9f3c2e-0000-4000-8000-000000000001"


def _app(store: Store) -> Starlette:
    """The README's endpoint, as written there."""
    agent = Agent(TestModel(custom_output_text="Hello back"))

    async def chat(request: Request) -> Response:
        try:
            body = ui_request(await request.json())
        except InvalidInputError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        tid = thread_id_for_chat(body["id"])
        rec = ThreadRecorder(lambda evs: store.append(tid, evs), tid)
        if not store.exists(tid):
            await rec.start_thread(metadata={CHAT_ID_KEY: body["id"]})
            await rec.register_agent(AGENT, "support-bot")
        history = history_from_thread(store.thread(tid), viewing_agent_id=AGENT)
        stream = recorded_vercel_stream(rec, agent, body, agent_id=AGENT, message_history=history or None)
        return StreamingResponse(stream, media_type="text/event-stream",
                                 headers={"x-vercel-ai-ui-message-stream": "v1"})

    return Starlette(routes=[Route("/api/chat", chat, methods=["POST"])])


def _user(text: str) -> dict[str, Any]:
    return {"id": "m1", "role": "user", "parts": [{"type": "text", "text": text}]}


def test_body_without_trigger_runs_like_tplog_serve(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as store, TestClient(_app(store)) as client:
        r = client.post("/api/chat", json={"id": "chat-1", "messages": [_user("Hi")]})
        assert r.status_code == 200, r.text
        assert '"text-delta"' in r.text and r.text.rstrip().endswith("data: [DONE]")
        events = [e.event for e in store.read(thread_id_for_chat("chat-1"))]
        assert isinstance(events[-1], AgentTurnCompleted)


def test_a_body_that_is_not_a_ui_request_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    bad_bodies = {
        "messages": {"id": "chat-2", "messages": "hello"},
        "part": {"id": "chat-3", "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text"}]}]},
        "trigger": {"id": "chat-4", "trigger": "send", "messages": [_user("Hi")]},
        "id": {"messages": [_user("Hi")]},
    }
    with Store(tmp_path / "s") as store, TestClient(_app(store)) as client:
        for name, body in bad_bodies.items():
            r = client.post("/api/chat", json=body)
            assert r.status_code == 400, (name, r.text)
            assert r.json()["error"].startswith("not a Vercel AI UI request"), r.text
        for tid in ("chat-2", "chat-3", "chat-4"):
            with pytest.raises(NotFoundError):
                store.head(tid)
        assert store.threads().threads == []


def test_ui_request_names_the_field() -> None:
    with pytest.raises(InvalidInputError) as exc:
        ui_request({"id": "c", "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text"}]}]})
    assert exc.value.path is not None and exc.value.path.startswith("$.messages[0].parts[0]")
    with pytest.raises(InvalidInputError, match="must be a JSON object, not list"):
        ui_request([1])
    body = {"id": "c", "messages": [_user("Hi")]}
    assert ui_request(body) == {"trigger": "submit-message", **body} and "trigger" not in body


def test_recorded_vercel_stream_fills_in_the_trigger(tmp_path: Path) -> None:
    """Called directly (no ui_request first), a body without ``trigger`` runs; a bad body is a typed error."""
    agent = Agent(TestModel(custom_output_text="ok"))

    async def go(body: dict[str, Any]) -> str:
        with Store(tmp_path / "d") as store:
            tid = thread_id_for_chat(body.get("id", "x"))
            rec = ThreadRecorder(lambda evs: store.append(tid, evs), tid)
            if not store.exists(tid):
                await rec.start_thread()
                await rec.register_agent(AGENT, "bot")
            return "".join([c async for c in recorded_vercel_stream(rec, agent, body, agent_id=AGENT)])

    assert "data: [DONE]" in asyncio.run(go({"id": "t1", "messages": [_user("Hi")]}))
    with pytest.raises(InvalidInputError, match="not a Vercel AI UI request"):
        asyncio.run(go({"id": "t2", "messages": 5}))
