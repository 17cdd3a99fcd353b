"""A decision is due for every deferred call the turn ended on: approving one of two pending calls is a
422 ``missing_decisions`` naming the other, and nothing is written (in process)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai import messages as pm
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

from server.inproc import in_process
from server.server_harness import chat_body
from tplog import Store


def _two_approvals_agent() -> Any:
    async def stream(messages: list[pm.ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        if any(isinstance(p, pm.ToolReturnPart) for p in messages[-1].parts):
            yield "done"
            return
        yield {i: DeltaToolCall(name="delete_file", json_args=json.dumps({"path": f"f{i}"}), tool_call_id=f"c{i}")
               for i in range(2)}

    agent: Any = Agent(FunctionModel(stream_function=stream, model_name="two"),
                       output_type=[str, DeferredToolRequests], name="two")

    @agent.tool_plain(requires_approval=True)  # type: ignore[untyped-decorator]
    def delete_file(path: str) -> str:
        return f"deleted {path}"

    return {"two": agent}


def test_approving_one_of_two_pending_calls_is_a_422_and_writes_nothing(tmp_path: Path) -> None:
    t = str(uuid.uuid4())
    with Store(tmp_path / "store") as store, in_process(store, _two_approvals_agent()) as c:
        assert c.post("/api/chat", json=chat_body(t, "delete both")).status_code == 200
        pending = c.get(f"/threads/{t}/pending").json()["pending"]
        assert sorted((p["tool_call_id"], p["kind"]) for p in pending) == [("c0", "approval"), ("c1", "approval")]
        v = store.head(t).version
        r = c.post(f"/threads/{t}/approvals", json={"approvals": {"c0": True}})
        assert r.status_code == 422, r.text
        err = r.json()["error"]
        assert err["code"] == "missing_decisions" and "c1" in err["message"]
        assert err["kinds"] == {"c0": "approval", "c1": "approval"}
        assert store.head(t).version == v
        assert len(c.get(f"/threads/{t}/pending").json()["pending"]) == 2
        # both decided: the run goes on
        r = c.post(f"/threads/{t}/approvals", json={"approvals": {"c0": True, "c1": False}})
        assert r.status_code == 200, r.text
        assert c.get(f"/threads/{t}/pending").json()["pending"] == []
