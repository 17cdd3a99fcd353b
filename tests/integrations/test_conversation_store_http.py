"""``VercelAIAdapter.dispatch_request(..., conversation_store=TplogConversationStore(...))`` over real HTTP.

A Starlette app served by uvicorn on 127.0.0.1; an httpx client sends AI SDK v6 chat requests.
The server holds the history: the second request carries only the new user message, and the
model sees the first exchange because the store loaded it; scopes keep two users apart.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from pydantic_ai import Agent
from pydantic_ai import messages as pm
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.ui.vercel_ai import VercelAIAdapter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tplog.integrations.pydantic_ai import TplogConversationStore
from tplog.protocol.validate import thread_id_for, validate


async def _count(messages: list[pm.ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    prompts = [p.content for m in messages for p in m.parts if isinstance(p, pm.UserPromptPart)]
    yield f"{len(prompts)} prompts: {' / '.join(map(str, prompts))}"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, TplogConversationStore]]:
    store = TplogConversationStore(str(tmp_path / "store"))
    agent = Agent(FunctionModel(stream_function=_count))

    async def chat(request: Request) -> Response:
        user = request.headers["x-user"]  # stands in for the authenticated user
        return await VercelAIAdapter.dispatch_request(
            request, agent=agent, conversation_store=store, conversation_scope=user)

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(Starlette(routes=[Route("/chat", chat, methods=["POST"])]),
                                           host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", store
    finally:
        server.should_exit = True
        thread.join(10)
        store.close()


def _body(chat_id: str, msg_id: str, text: str) -> dict[str, object]:
    return {"trigger": "submit-message", "id": chat_id,
            "messages": [{"id": msg_id, "role": "user", "parts": [{"type": "text", "text": text}]}]}


def _text(sse: str) -> str:
    out = []
    for line in sse.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            chunk = json.loads(line[6:])
            if chunk.get("type") == "text-delta":
                out.append(chunk["delta"])
    return "".join(out)


def test_the_server_holds_the_history_per_user(served: tuple[str, TplogConversationStore]) -> None:
    url, store = served
    with httpx.Client(base_url=url, timeout=30) as client:
        first = client.post("/chat", json=_body("chat-1", "m1", "hello"), headers={"x-user": "alice"})
        assert first.status_code == 200
        assert _text(first.text) == "1 prompts: hello"
        second = client.post("/chat", json=_body("chat-1", "m2", "again"), headers={"x-user": "alice"})
        assert _text(second.text) == "2 prompts: hello / again"
        other = client.post("/chat", json=_body("chat-1", "m3", "mine?"), headers={"x-user": "bob"})
        assert other.status_code >= 400  # another user's conversation is not bob's to continue
    thread = store.store.export(thread_id_for("chat-1"))
    assert validate(thread).errors == []
    assert len(thread.turns) == 4  # two user turns, two agent turns
