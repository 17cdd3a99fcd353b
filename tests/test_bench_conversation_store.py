"""The conversation-store benchmark's SQLite baseline is a correct ConversationStore (the same
histories as Pydantic AI's InMemoryConversationStore through save, load, load(limit=), branch,
fork and delete), and the benchmark runs end to end at a tiny size."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationConflict, InMemoryConversationStore
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelRequest, ModelResponse
from pydantic_ai.models.test import TestModel

from benchmarks._sqlite_conversation_store import SQLiteConversationStore


async def _script(store: Any) -> list[Any]:
    """One sequence of operations; returns everything a caller could observe."""
    agent = Agent(TestModel(), system_prompt="test")

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        return a + b

    seen: list[Any] = []
    conv = Conversation(conversation_id="c1")
    for prompt in ("one", "two", "three"):
        result = await agent.run(prompt, conversation=conv)
        seen.append(len(await store.save(result)))
        conv = await store.load("c1")
    assert conv is not None
    seen.append(conv.messages)
    seen.append((await store.load("c1", limit=3)).messages)
    seen.append(await store.load("missing"))
    stale = await store.load("c1")
    branched = await store.branch("c1", at=4, expected_revision=conv.revision)
    seen.append(branched.messages)
    with pytest.raises(ConversationConflict):
        await store.save(stale)
    result = await agent.run("after branch", conversation=branched)
    await store.save(result)
    seen.append((await store.load("c1")).messages)
    # back to the branch left: from_entry of the old tip
    rec = await store.read_record("c1")
    old_tip = (await store.read_history(rec.branches[-1]))[-1]
    back = await store.branch("c1", from_entry=old_tip.id, expected_revision=rec.revision)
    seen.append(back.messages)
    fork = await store.fork("c1", at=8, new_conversation_id="f1")
    seen.append(fork.messages)
    with pytest.raises(UserError):
        await store.fork("c1", at=99)
    await store.delete("c1")
    seen.append(await store.load("c1"))
    seen.append((await store.load("f1")).messages)  # its shared entries survive the delete
    seen.append([r.conversation_id for r in await store.list_conversations()])
    # a save's exact bytes come back (the clock-free comparison above hides nothing else)
    seen.append(ModelMessagesTypeAdapter.dump_json(fork.messages) == ModelMessagesTypeAdapter.dump_json(
        (await store.load("f1")).messages))
    return seen


_VOLATILE = {"timestamp", "run_id", "provider_response_id"}


def _plain(x: Any) -> Any:
    """Observations without what differs between two runs of the script (clock, run ids)."""
    if isinstance(x, list) and x and isinstance(x[0], (ModelRequest, ModelResponse)):
        x = ModelMessagesTypeAdapter.dump_python(x, mode="json")
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items() if k not in _VOLATILE}
    if isinstance(x, list):
        return [_plain(v) for v in x]
    return x


def test_sqlite_baseline_matches_in_memory(tmp_path: Path) -> None:
    expected = _plain(asyncio.run(_script(InMemoryConversationStore())))
    sqlite = SQLiteConversationStore(tmp_path / "c.db")
    try:
        assert _plain(asyncio.run(_script(sqlite))) == expected
        # the delete released c1's entries that f1 does not reach
        (n,) = sqlite._db.execute("SELECT count(*) FROM entries").fetchone()
    finally:
        sqlite.close()
    assert n == len(expected[-3])


def test_benchmark_runs_tiny(tmp_path: Path) -> None:
    from benchmarks import conversation_store as bench

    out = tmp_path / "r.json"
    assert bench.main(["--quick", "--tiny", "--no-md", "--no-profile", "--dir", str(tmp_path), "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    systems = {r["system"] for r in data["rows"]}
    assert {bench.TPLOG, bench.SQLITE, bench.MEMORY} <= systems
    assert len(data["goals"]) == 6
