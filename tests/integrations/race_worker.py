"""A process of tests/integrations/test_conversation_store_race.py (imported by name in a spawned
child): load a conversation, run an agent turn, wait for the other process, save, report."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic_ai import Agent
from pydantic_ai import messages as pm
from pydantic_ai.conversation_store import ConversationConflict
from pydantic_ai.messages import ModelMessagesTypeAdapter as TA
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tplog.integrations.pydantic_ai import TplogConversationStore


def _model(messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
    prompt = " ".join(str(p.content) for p in messages[-1].parts if isinstance(p, pm.UserPromptPart))
    return pm.ModelResponse(parts=[pm.TextPart(f"echo {prompt}")])


AGENT: Agent[None, str] = Agent(FunctionModel(_model), instructions="be brief")


def save_race(url: str, wid: int, cids: list[str], barrier: Any, out: Any) -> None:
    """For each conversation: load it, run a turn, meet the other process at ``barrier``, save;
    put ``(cid, wid, outcome, where, the history it saved as JSON)`` on ``out``."""

    async def go() -> None:
        store = TplogConversationStore(url)
        try:
            for cid in cids:
                conv = await store.load(cid)
                assert conv is not None, cid
                result = await AGENT.run(f"from {wid}", conversation=conv)
                await asyncio.to_thread(barrier.wait)
                try:
                    await store.save(result)
                    out.put((cid, wid, "won", "", TA.dump_json(result.all_messages()).decode()))
                except ConversationConflict as exc:
                    # where it lost: the record check before writing, or the append's expected version
                    where = type(exc.__cause__).__name__ if exc.__cause__ else "record check"
                    out.put((cid, wid, "conflict", where, ""))
        finally:
            store.close()

    asyncio.run(go())
