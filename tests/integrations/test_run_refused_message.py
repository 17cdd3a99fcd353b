"""A run whose message the store refuses (here an empty response: ``v4-message-has-parts``) ends
its agent turn as interrupted with reason ``error`` and raises the run's own error: the final sync
retried the refused message and raised its InvalidEventError instead, so the interruption was
never written and the thread stayed mid-turn."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai import messages as pm
from pydantic_ai.exceptions import UnexpectedModelBehavior
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tplog import Store
from tplog.events import AgentTurnInterrupted
from tplog.integrations.pydantic_ai import ThreadRecorder


def test_a_refused_message_still_closes_the_turn(tmp_path: Path) -> None:
    def empty(messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
        return pm.ModelResponse(parts=[])

    t = str(uuid.uuid4())
    with Store(tmp_path / "store") as store:
        rec = ThreadRecorder(lambda evs: store.append(t, evs), t)
        agent = Agent(FunctionModel(empty, model_name="empty"))

        async def go() -> Any:
            await rec.start_thread(title="empty")
            await rec.register_agent("a1", "assistant")
            return await rec.run(agent, "hi", agent_id="a1")

        with pytest.raises(UnexpectedModelBehavior):  # the run's own error, not the refused message's
            asyncio.run(asyncio.wait_for(go(), 30))
        last = store.read(t)[-1].event
        assert isinstance(last, AgentTurnInterrupted) and last.interruption.reason == "error"
        assert store.head(t).open_turn_agent is None
