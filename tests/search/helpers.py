"""Threads with known text for the search tests (real events, checked by the store's rules)."""

from __future__ import annotations

import uuid
from typing import Any

from tplog import (
    AgentRegistered,
    AgentTurnCompleted,
    AgentTurnStarted,
    MessageRecorded,
    ThreadInfoChanged,
    ThreadStarted,
    UserTurnSubmitted,
)
from tplog.protocol import (
    AgentConfig,
    RequestMessage,
    ResponseMessage,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
    UserTurn,
)

T = "2025-01-20T10:00:00Z"


def new_id() -> str:
    return str(uuid.uuid4())


def conversation(
    tid: str,
    *,
    title: str = "a chat",
    prompt: str = "hello there",
    answer: str = "hi",
    tool: str | None = None,
    args: Any = None,
    returned: Any = None,
    thinking: str | None = None,
    metadata: dict[str, Any] | None = None,
    agent: str = "bot",
) -> list[Any]:
    """ThreadStarted, an agent, a user turn and an agent turn: a response (with thinking), and a
    tool call and its return when ``tool`` is given."""
    parts: list[Any] = [TextPart(content=answer)]
    if thinking is not None:
        parts.insert(0, ThinkingPart(content=thinking, provider_name="test"))
    msgs: list[Any] = []
    if tool is not None:
        msgs += [
            MessageRecorded(
                message=ResponseMessage(
                    timestamp=T, agent_id=agent, parts=[ToolCallPart(tool_name=tool, tool_call_id="c1", args=args)]
                )
            ),
            MessageRecorded(
                message=RequestMessage(
                    timestamp=T,
                    agent_id=agent,
                    parts=[ToolReturnPart(tool_name=tool, tool_call_id="c1", status="success", content=returned)],
                )
            ),
        ]
    msgs.append(MessageRecorded(message=ResponseMessage(timestamp=T, agent_id=agent, parts=parts)))
    started = ThreadStarted(
        thread_id=tid, created_at=T, title=title, **({"metadata": metadata} if metadata is not None else {})
    )
    return [
        started,
        AgentRegistered(agent=AgentConfig(agent_id=agent, agent_name=agent.upper(), created_at=T)),
        UserTurnSubmitted(turn=UserTurn(submitted_at=T, parts=[UserPromptPart(content=prompt)])),
        AgentTurnStarted(agent_id=agent, started_at=T),
        *msgs,
        AgentTurnCompleted(completed_at=T),
    ]


def more(prompt: str, answer: str, agent: str = "bot") -> list[Any]:
    """Another exchange for an existing thread."""
    return [
        UserTurnSubmitted(turn=UserTurn(submitted_at=T, parts=[UserPromptPart(content=prompt)])),
        AgentTurnStarted(agent_id=agent, started_at=T),
        MessageRecorded(message=ResponseMessage(timestamp=T, agent_id=agent, parts=[TextPart(content=answer)])),
        AgentTurnCompleted(completed_at=T),
    ]


def retitle(title: str) -> ThreadInfoChanged:
    return ThreadInfoChanged(title=title)
