"""A Pydantic AI run that times out (``timeout=``: ``RunTimedOut``) is recorded as an interrupted turn
with reason ``timeout``, not ``user_cancelled`` (a real run, FunctionModel; until now only
tools/gen_pai_fixtures.py ran one, and no test runs it)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai import messages as pm
from pydantic_ai.exceptions import RunTimedOut
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tplog import Store
from tplog.events import AgentTurnInterrupted
from tplog.integrations.pydantic_ai import ThreadRecorder


def test_a_run_that_times_out_is_recorded_as_a_timeout(tmp_path: Path) -> None:
    async def stream(messages: list[pm.ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        yield "Slow "
        await asyncio.sleep(60)  # far past the run's timeout
        yield "never"

    t = str(uuid.uuid4())
    with Store(tmp_path / "store") as store:
        rec = ThreadRecorder(lambda evs: store.append(t, evs), t)
        agent = Agent(FunctionModel(stream_function=stream, model_name="slow"))

        async def go() -> Any:
            await rec.start_thread(title="slow")
            await rec.register_agent("a1", "assistant")
            return await rec.run(agent, "hi", agent_id="a1", timeout=0.3)

        run = asyncio.run(asyncio.wait_for(go(), 30))
        assert run.result is None and isinstance(run.error, RunTimedOut)
        assert run.interruption is not None and run.interruption.reason == "timeout"
        last = store.read(t)[-1].event
        assert isinstance(last, AgentTurnInterrupted) and last.interruption.reason == "timeout"
        assert store.head(t).open_turn_agent is None
