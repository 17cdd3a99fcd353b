"""Concurrent saves of different conversations share LMDB's group commits: 16 saves at once
(``asyncio.gather``) take fewer write transactions than saves, as the store's own counters say."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pydantic_ai import messages as pm
from pydantic_ai.conversation import Conversation

from tplog import AsyncStore
from tplog.integrations.pydantic_ai import TplogConversationStore

N = 16


def test_concurrent_saves_share_group_commits(tmp_path: Path) -> None:
    async def go() -> tuple[int, int]:
        async with TplogConversationStore(AsyncStore(tmp_path / "store")) as cs:
            for i in range(N):  # each conversation exists, so a round is N appends of one save each
                await cs.save(Conversation(conversation_id=f"c{i}",
                                           messages=[pm.ModelRequest.user_text_prompt("start")]))
            before = cs.store.stats()["group_commit"]
            groups = appends = 0
            for _ in range(5):  # a few rounds: one round on a quiet machine may still go one by one
                convs = [await cs.load(f"c{i}") for i in range(N)]
                for c in convs:
                    assert c is not None
                    c.messages.append(pm.ModelRequest.user_text_prompt("more"))
                await asyncio.gather(*(cs.save(c) for c in convs if c is not None))
                after = cs.store.stats()["group_commit"]
                groups, appends = after["commits"] - before["commits"], after["appends"] - before["appends"]
            for i in range(N):
                loaded = await cs.load(f"c{i}")
                assert loaded is not None and len(loaded.messages) == 6
            return groups, appends

    groups, appends = asyncio.run(go())
    assert appends == 5 * N
    print(f"{appends} saves in {groups} write transactions")
    assert groups < appends, (groups, appends)
