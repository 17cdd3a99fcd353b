"""The README's Starlette app on Pydantic AI's UI adapter with tplog as its conversation store,
for the real AI SDK client (tests/aisdk/test_conversation_store_app.py): ``uvicorn cs_app:app``
with the store's directory in ``TPLOG_CS_STORE``. The user is the ``x-user`` header (the app's
authenticated user); each user sees only their own conversations."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

from pydantic_ai import Agent
from pydantic_ai import messages as pm
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.tools import DeferredToolRequests
from pydantic_ai.ui.vercel_ai import VercelAIAdapter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tplog.integrations.pydantic_ai import TplogConversationStore


def _reply(messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
    last = messages[-1]
    returns = [p for p in last.parts if isinstance(p, pm.ToolReturnPart)]
    if returns:
        return pm.ModelResponse(parts=[pm.TextPart(f"{r.tool_name}: {r.content}.") for r in returns])
    prompt = " ".join(str(p.content) for p in last.parts if isinstance(p, pm.UserPromptPart))
    if prompt.startswith("weather in "):
        return pm.ModelResponse(parts=[pm.ToolCallPart("get_weather", {"city": prompt[11:]})])
    if prompt.startswith("delete "):
        return pm.ModelResponse(parts=[pm.ToolCallPart("delete_file", {"path": prompt[7:]})])
    return pm.ModelResponse(parts=[pm.TextPart(f"You said: {prompt}")])


async def _stream(messages: list[pm.ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    for i, part in enumerate(_reply(messages, info).parts):
        if isinstance(part, pm.ToolCallPart):
            yield {i: DeltaToolCall(name=part.tool_name, json_args=part.args_as_json_str())}
        elif isinstance(part, pm.TextPart):
            yield part.content


agent: Agent[None, str | DeferredToolRequests] = Agent(
    FunctionModel(_reply, stream_function=_stream), instructions="Be brief.", output_type=[str, DeferredToolRequests])


@agent.tool_plain
def get_weather(city: str) -> str:
    return f"sunny in {city}"


@agent.tool_plain(requires_approval=True)
def delete_file(path: str) -> str:
    return f"deleted {path}"


store = TplogConversationStore(os.environ.get("TPLOG_CS_STORE", "./conversations"))


async def chat(request: Request) -> Response:
    user = request.headers["x-user"]  # your authenticated user
    return await VercelAIAdapter.dispatch_request(
        request, agent=agent, conversation_store=store, conversation_scope=user,
        sdk_version=6)  # AI SDK 6 and 7: tool approvals in the stream


async def messages(request: Request) -> Response:
    """A reloaded page's history: the user's own conversation, as AI SDK UI messages."""
    conversation = await store.load(request.path_params["chat_id"], scope=request.headers["x-user"])
    if conversation is None:
        return JSONResponse({"error": "not found"}, status_code=404)
    dumped: list[Any] = [m.model_dump(mode="json", by_alias=True, exclude_none=True)
                         for m in VercelAIAdapter.dump_messages(conversation.messages)]
    return JSONResponse(dumped)


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    yield
    await store.aclose()


app = Starlette(routes=[Route("/api/chat", chat, methods=["POST"]),
                        Route("/api/chat/{chat_id}/messages", messages, methods=["GET"])],
                lifespan=lifespan)
