"""An agent for tests/server/test_server_races.py, loaded by the server subprocess (``TPLOG_SERVER_AGENTS``).

Its scripted model is called after the server read the thread's history and before the run's
first append (Pydantic AI calls the model before the recorder sees a complete message): for the
prompt ``race THREAD_ID`` another process appends to that thread right then, so the race
between the read and the first append happens every time, not by luck.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

_APPEND = """
import sys
from tplog import Store, ThreadStarted, UserPromptPart, UserTurn, UserTurnSubmitted
T = "2025-01-20T10:00:00Z"
path, tid = sys.argv[1], sys.argv[2]
with Store(path) as s:
    first = [] if s.exists(tid) else [ThreadStarted(thread_id=tid, created_at=T)]
    s.append(tid, [*first, UserTurnSubmitted(turn=UserTurn(submitted_at=T, parts=[UserPromptPart(content="racer")]))])
"""


def agents() -> dict[str, Any]:
    from pydantic_ai import Agent
    from pydantic_ai import messages as pm
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from tplog.integrations.server import ENV_STORE

    async def stream(messages: list[pm.ModelMessage], info: AgentInfo) -> Any:
        prompt = next((p.content for msg in reversed(messages) if isinstance(msg, pm.ModelRequest)
                       for p in reversed(msg.parts) if isinstance(p, pm.UserPromptPart) and isinstance(p.content, str)),
                      "")
        if prompt.startswith("race "):
            proc = await asyncio.create_subprocess_exec(sys.executable, "-c", _APPEND, os.environ[ENV_STORE],
                                                        prompt.split()[1])
            if await proc.wait() != 0:
                raise RuntimeError("the racing append failed")
        yield "ok"

    return {"racer": Agent(FunctionModel(stream_function=stream, model_name="racer"), name="racer")}
