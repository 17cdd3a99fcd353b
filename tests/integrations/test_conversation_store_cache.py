"""What a ``TplogConversationStore`` keeps between calls (the threads' states: record, entries)
changes nothing anyone can observe: a loaded conversation shares no object with the store or
with another load, and what another writer (another store object on the same tplog store, as
another process) saved, appended or deleted is what the next load, save or listing sees.
"""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
from typing import Any

import pytest
from pydantic_ai import messages as pm
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationConflict
from pydantic_ai.messages import ModelMessagesTypeAdapter as TA

from tplog import Store
from tplog.events import ThreadInfoChanged
from tplog.integrations.pydantic_ai import TplogConversationStore
from tplog.protocol.validate import thread_id_for, validate


@pytest.fixture(params=["memory", "lmdb"])
def store(request: pytest.FixtureRequest) -> Any:
    s = Store("memory:" if request.param == "memory" else tempfile.mkdtemp(prefix="tplog-csc-"))
    yield s
    s.close()


def _history(rounds: int = 1) -> list[pm.ModelMessage]:
    """Every place a loaded message holds a dict or list the store decoded, ``rounds`` times."""
    return [m for i in range(rounds) for m in _round(f"c{i}")]


def _round(call: str) -> list[pm.ModelMessage]:
    return [
        pm.ModelRequest.user_text_prompt("look it up"),
        pm.ModelResponse(
            parts=[
                pm.TextPart("calling", provider_details={"k": [1, 2]}),
                pm.ToolCallPart("find", {"q": {"terms": ["a", "b"]}}, tool_call_id=call, provider_details={"p": {}}),
            ],
            metadata={"m": [1]},
            provider_details={"d": {"x": 1}},
        ),
        pm.ModelRequest(
            parts=[pm.ToolReturnPart("find", {"hits": [{"id": 1}]}, tool_call_id=call, metadata={"n": [2]})],
            metadata={"r": {"y": [3]}},
        ),
        pm.ModelResponse(parts=[pm.ThinkingPart("hm", provider_details={"t": [4]}), pm.TextPart("done")]),
    ]


def _scribble(messages: list[pm.ModelMessage]) -> None:
    """Change every dict and list inside the messages in place."""

    def spoil(v: Any) -> None:
        if isinstance(v, dict):
            for x in list(v.values()):
                spoil(x)
            v["spoiled"] = True
        elif isinstance(v, list):
            for x in v:
                spoil(x)
            v.append("spoiled")

    for msg in messages:
        spoil(msg.metadata)
        spoil(getattr(msg, "provider_details", None))
        for p in msg.parts:
            for name in ("args", "content", "metadata", "provider_details"):
                spoil(getattr(p, name, None))


@pytest.mark.parametrize("rounds", [1, 20])  # a short thread is read whole with its record; a long one not
def test_a_loaded_conversation_shares_nothing_with_the_store(store: Store, rounds: int) -> None:
    async def go() -> None:
        cs = TplogConversationStore(store)
        history = _history(rounds)
        want = TA.dump_json(history)
        await cs.save(Conversation(conversation_id="c", messages=history))
        for _ in range(4):  # cold, again (a long thread's entries are kept from then on), from what is kept
            loaded = await cs.load("c")
            assert loaded is not None and TA.dump_json(loaded.messages) == want
            _scribble(loaded.messages)
            assert TA.dump_json(loaded.messages) != want  # the scribbling reached every object
        again = await TplogConversationStore(store).load("c")
        assert again is not None and TA.dump_json(again.messages) == want

    asyncio.run(go())


def test_what_another_writer_did_is_what_the_next_call_sees(store: Store) -> None:
    async def go() -> None:
        a, b = TplogConversationStore(store), TplogConversationStore(store)
        await a.save(Conversation(conversation_id="c", messages=[pm.ModelRequest.user_text_prompt("one")]))
        mine = await a.load("c")
        theirs = await b.load("c")
        assert mine is not None and theirs is not None
        theirs.messages.append(pm.ModelResponse(parts=[pm.TextPart("two")]))
        await b.save(theirs)

        seen = await a.load("c")  # b's save, though a kept the thread from its own
        assert seen is not None and TA.dump_json(seen.messages) == TA.dump_json(theirs.messages)
        mine.messages.append(pm.ModelResponse(parts=[pm.TextPart("stale")]))
        with pytest.raises(ConversationConflict):
            await a.save(mine)
        assert "stale" not in repr(store.read(thread_id_for("c")))

        # a title someone else appends is no new revision: a's next save goes through
        store.append(thread_id_for("c"), [ThreadInfoChanged(title="named")])
        seen.messages.append(pm.ModelRequest.user_text_prompt("three"))
        await a.save(seen)
        latest = await b.load("c")
        assert latest is not None and TA.dump_json(latest.messages) == TA.dump_json(seen.messages)

        await b.delete("c")
        assert await a.load("c") is None
        assert await a.list_conversations() == []
        seen.messages.append(pm.ModelRequest.user_text_prompt("after the delete"))
        with pytest.raises(ConversationConflict):
            await a.save(seen)
        fresh = Conversation(conversation_id="c", messages=[pm.ModelRequest.user_text_prompt("anew")])
        await a.save(fresh)  # the next generation
        reborn = await b.load("c")
        assert reborn is not None and TA.dump_json(reborn.messages) == TA.dump_json(fresh.messages)
        assert reborn.revision == fresh.revision
        for s in (a, b):
            assert [r.conversation_id for r in await s.list_conversations()] == ["c"]
        listed = store.threads().threads
        assert [h.thread_id for h in listed] != [thread_id_for("c")]  # the next generation's thread
        assert all(validate(store.export(h.thread_id)).errors == [] for h in listed)

    asyncio.run(go())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_can_use_the_store_after_its_parent_did() -> None:
    """The calls run on a pool of the module's own; a child forked after the parent used it
    must not wait on the parent's threads (it did: it hung)."""

    async def use() -> bool:
        cs = TplogConversationStore("memory:")
        await cs.save(Conversation(conversation_id="c", messages=[pm.ModelRequest.user_text_prompt("hi")]))
        return await cs.load("c") is not None

    assert asyncio.run(use())
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        signal.alarm(20)
        os._exit(0 if asyncio.run(use()) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
