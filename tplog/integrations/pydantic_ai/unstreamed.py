"""Runs of models that cannot stream (``FunctionModel(fn)`` without a ``stream_function``, a model
implementing only ``request``): :func:`can_stream` tells them apart, :func:`node_events` runs them
node by node and gives the event stream a streamed run would give, minus the deltas.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from pydantic_ai import messages as pm
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.run import AgentRunResultEvent

__all__ = ["can_stream", "node_events", "run_model"]


def can_stream(model: Any) -> bool:
    """Whether ``model`` streams (``run_stream_events`` needs it); a model name is a provider's: they all do."""
    from pydantic_ai.models import Model
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.models.wrapper import WrapperModel

    while isinstance(model, WrapperModel):
        model = model.wrapped
    if isinstance(model, FunctionModel):
        return model.stream_function is not None
    return not isinstance(model, Model) or type(model).request_stream is not Model.request_stream


def run_model(agent: AbstractAgent[Any, Any], model: Any) -> Any:
    """The model a run of ``agent`` uses, as Pydantic AI picks it: ``Agent.override(model=)``, then the
    run's ``model=``, then the agent's. (``Agent`` keeps its override in a context variable.)"""
    override = getattr(agent, "_override_model", None)
    some = override.get() if override is not None else None
    if some is not None:
        return some.value
    return model if model is not None else getattr(agent, "model", None)


def _part_events(response: pm.ModelResponse) -> list[Any]:
    """The start and end events a streamed response gives for its parts, all at once."""
    parts = response.parts
    out: list[Any] = []
    for i, part in enumerate(parts):
        before = parts[i - 1].part_kind if i else None
        after = parts[i + 1].part_kind if i + 1 < len(parts) else None
        out.append(pm.PartStartEvent(index=i, part=part, previous_part_kind=before))
        out.append(pm.PartEndEvent(index=i, part=part, next_part_kind=after))
    return out


@asynccontextmanager
async def node_events(agent: AbstractAgent[Any, Any], user_prompt: Any, **kwargs: Any) -> AsyncIterator[Any]:
    """``agent.iter`` (model requests not streamed) as ``run_stream_events``' context and stream: each
    response's parts once it is complete, the tool calls' events as they run, the run's result."""
    async with agent.iter(user_prompt, **kwargs) as run:

        async def events() -> AsyncGenerator[Any, None]:
            async for node in run:
                if agent.is_call_tools_node(node):
                    for ev in _part_events(node.model_response):
                        yield ev
                    async with node.stream(run.ctx) as tool_events:
                        async for ev in tool_events:
                            yield ev
            assert run.result is not None  # the graph ended
            yield AgentRunResultEvent(result=run.result)

        gen = events()
        try:
            yield gen
        finally:
            await gen.aclose()
