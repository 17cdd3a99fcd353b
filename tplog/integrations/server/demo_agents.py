"""The demo agent the server runs when no agents are named (:func:`demo_agents`).
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

__all__ = ["demo_agents"]

_MAX_WORDS = 2_000  # `slow N MS`'s bounds
_MAX_MS = 1_000


# --------------------------------------------------------------------------- demo agent


def demo_agents() -> dict[str, Any]:
    """A scripted Pydantic AI agent (``FunctionModel``, no API key), for ``tplog serve`` and the tests.

    What it does, by the user's message:

    - ``weather in CITY`` -> calls the ``get_weather`` tool, then answers with its result;
    - ``delete PATH`` -> calls ``delete_file``, which **requires approval**: the turn ends
      deferred; approve/deny it (``POST /threads/{id}/approvals``) and it goes on;
    - ``where am i`` -> calls ``get_location``, a client-side tool: the turn ends deferred; the
      browser's result (AI SDK v6 ``addToolOutput``, or ``results`` of ``/approvals``) resumes it;
    - ``slow N [MS]`` -> streams N words, one per MS milliseconds (default 20 x 50 ms; at most
      2,000 words and 1,000 ms: larger values are capped, so one message cannot keep a run going
      for days);
    - ``fail`` -> streams a little, then the model raises (recorded as an ``error`` interruption);
    - anything else -> ``You said: ...``.
    """
    from pydantic_ai import Agent, CallDeferred, DeferredToolRequests
    from pydantic_ai import messages as pm
    from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

    async def stream(messages: list[pm.ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        last = messages[-1]
        returns = (
            [p for p in last.parts if isinstance(p, pm.ToolReturnPart)] if isinstance(last, pm.ModelRequest) else []
        )
        if returns:
            yield " ".join(f"{p.tool_name}: {p.content}." for p in returns)
            return
        prompt = ""
        for p in last.parts:
            if isinstance(p, pm.UserPromptPart):
                prompt = (
                    p.content if isinstance(p.content, str) else " ".join(c for c in p.content if isinstance(c, str))
                )
        low = prompt.lower().strip()
        if mt := re.search(r"weather in ([\w \-]+)", low):
            city = mt.group(1).strip().title()
            yield {
                0: DeltaToolCall(
                    name="get_weather",
                    json_args=json.dumps({"city": city}),
                    tool_call_id=f"call_{uuid.uuid4().hex[:12]}",
                )
            }
        elif "where am i" in low:
            yield {0: DeltaToolCall(name="get_location", json_args="{}", tool_call_id=f"call_{uuid.uuid4().hex[:12]}")}
        elif mt := re.search(r"delete (\S+)", low):
            yield {
                0: DeltaToolCall(
                    name="delete_file",
                    json_args=json.dumps({"path": mt.group(1)}),
                    tool_call_id=f"call_{uuid.uuid4().hex[:12]}",
                )
            }
        elif mt := re.match(r"slow(?: (\d+))?(?: (\d+))?", low):
            n, ms = min(int(mt.group(1) or 20), _MAX_WORDS), min(int(mt.group(2) or 50), _MAX_MS)
            for i in range(n):
                yield f"word{i} "
                await asyncio.sleep(ms / 1000)
        elif low.startswith("fail"):
            yield "Something is "
            raise RuntimeError("the demo model failed on purpose")
        else:
            yield f"You said: {prompt}"

    agent: Any = Agent(
        FunctionModel(stream_function=stream, model_name="tplog-demo"),
        output_type=[str, DeferredToolRequests],
        name="demo",
    )

    @agent.tool_plain  # type: ignore[untyped-decorator]
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny and {len(city) + 15} °C in {city}"

    @agent.tool_plain(requires_approval=True)  # type: ignore[untyped-decorator]
    def delete_file(path: str) -> str:
        """Delete a file (needs the user's approval)."""
        return f"deleted {path}"

    @agent.tool_plain  # type: ignore[untyped-decorator]
    def get_location() -> str:
        """Where the user is (a client-side tool: the browser runs it and sends the result)."""
        raise CallDeferred

    return {"demo": agent}
