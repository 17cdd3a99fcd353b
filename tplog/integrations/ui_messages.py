"""A thread as the AI SDK's UI messages, with the ids the chat showed (``GET /api/chat/{id}/messages``).

What a reloaded ``useChat`` page starts from (``useChat({id, messages})``): one user message per
user turn, one assistant message per agent turn -- or per run of agent turns that continued one
message (a run resumed after tool approvals or client-side tool results keeps its message's id,
see :data:`~tplog.integrations.vercel.MESSAGE_ID_KEY`). The ids are the ones the turns keep, so
the reloaded chat, ``/turns`` and a resumed stream agree; a turn recorded without one (by another
program) gets a stable id made from the thread id and the turn's index.

The parts are Pydantic AI's own mapping (``VercelAIAdapter.dump_messages``) of the turns'
messages (system messages, which the protocol keeps and the UI does not, are left out), so a tool
call and its result are one tool part, as the stream showed them.
"""

from __future__ import annotations

from typing import Any

import msgspec

from tplog.integrations.vercel import MESSAGE_ID_KEY
from tplog.protocol import model as m

__all__ = ["ui_messages"]


def _turn_id(thread: m.Thread, index: int, turn: m.UserTurn | m.AgentTurn) -> str:
    got = turn.extra.get(MESSAGE_ID_KEY)
    return got if isinstance(got, str) and got else f"tp-{thread.thread_id}-{index}"


def ui_messages(thread: m.Thread) -> list[dict[str, Any]]:
    """The thread's turns as UI messages (JSON objects), ids as the chat showed them."""
    from pydantic_ai.ui.vercel_ai import VercelAIAdapter

    from tplog.integrations.pydantic_ai import history_from_thread

    groups: list[tuple[str, str, list[m.UserTurn | m.AgentTurn]]] = []  # (id, role, turns)
    for i, turn in enumerate(thread.turns):
        mid = _turn_id(thread, i, turn)
        role = "user" if isinstance(turn, m.UserTurn) else "assistant"
        if groups and groups[-1][:2] == (mid, role):
            groups[-1][2].append(turn)  # a run that continued the previous one's message
        else:
            groups.append((mid, role, [turn]))
    out: list[dict[str, Any]] = []
    for mid, role, turns in groups:
        # dumped together, so that a call deferred in one run and answered in the next is one part
        part_of = msgspec.structs.replace(thread, turns=turns, relationships=m.UNSET)
        parts = [
            p.model_dump(mode="json", by_alias=True, exclude_none=True)
            for ui in VercelAIAdapter.dump_messages(history_from_thread(part_of))
            if ui.role == role
            for p in ui.parts
        ]
        if parts or role == "user":
            out.append({"id": mid, "role": role, "parts": parts})
    return out
