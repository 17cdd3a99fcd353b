"""``TplogConversationStore``: Pydantic AI's ConversationStore on tplog threads.

Real Pydantic AI runs (TestModel/FunctionModel) saved into real tplog stores; what a save
stores, a load gives back byte for byte, and the thread is an ordinary, valid ThreadProtocol
thread the projections and ``validate`` read.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from integ_helpers import FIXTURE_FILES
from pydantic_ai import Agent
from pydantic_ai import messages as pm
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationConflict
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelMessagesTypeAdapter as TA
from pydantic_ai.models.test import TestModel
from pydantic_ai.usage import RequestUsage

from tplog import AsyncStore, Store
from tplog.errors import ConflictError
from tplog.events import LinkAdded, MessageRecorded, ThreadInfoChanged, ThreadStarted, UserTurnSubmitted
from tplog.integrations.pydantic_ai import TplogConversationStore, events_from_messages, history_from_thread
from tplog.integrations.pydantic_ai.conversation_store import ENTRY_KEY
from tplog.protocol import model as m
from tplog.protocol.model import AgentTurn
from tplog.protocol.validate import thread_id_for, validate


def _agent() -> Agent[None, str]:
    agent = Agent(TestModel(), instructions="be brief", system_prompt="you are a test")

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        return a + b

    return agent


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_save_load_is_exact_and_the_thread_is_valid() -> None:
    async def go() -> None:
        store = TplogConversationStore("memory:")
        result = await _agent().run("hi", conversation=Conversation(conversation_id="c1"))
        entries = await store.save(result)
        loaded = await store.load("c1")
        assert loaded is not None
        assert loaded.messages == result.all_messages()
        assert TA.dump_json(loaded.messages) == TA.dump_json(result.all_messages())
        assert loaded.usage == result.usage
        tid = thread_id_for("c1")
        events = store.store.read(tid)
        # entry id = the id of the event holding the message
        holders = [e.event_id for e in events if isinstance(e.event, (UserTurnSubmitted, MessageRecorded))]
        assert holders == [e.id for e in entries]
        thread = store.store.export(tid)
        assert validate(thread).errors == []
        assert [type(t).__name__ for t in thread.turns] == ["UserTurn", "AgentTurn"]
        # the system prompt and instructions are extension data, not protocol parts
        first = next(e.event for e in events if isinstance(e.event, UserTurnSubmitted))
        assert "message" in first.turn.extra[ENTRY_KEY]
        assert {type(p).__name__ for p in first.turn.parts} == {"UserPromptPart"}

    run(go())


def test_every_fixture_history_round_trips_exactly() -> None:
    """Measured: the protocol mapping alone gives 11 of the 19 fixture histories back exactly
    (system prompts, instructions and partial responses are left out); the store gives all 19."""

    async def go() -> tuple[int, int, int]:
        store = TplogConversationStore("memory:")
        mapped = exact = total = 0
        for i, path in enumerate(FIXTURE_FILES):
            history = json.loads(path.read_text()).get("history")
            if history is None:
                continue
            msgs = TA.validate_json(history if isinstance(history, str) else json.dumps(history))
            total += 1
            plain = Store("memory:", check_rules=False)
            evs = events_from_messages(msgs, agent_id="a", thread_id=f"t{i}", agent_name="a")
            plain.append(evs[0].thread_id, evs)  # type: ignore[attr-defined]
            mapped += TA.dump_json(history_from_thread(plain.thread(evs[0].thread_id))) == TA.dump_json(msgs)  # type: ignore[attr-defined]
            await store.save(Conversation(conversation_id=f"c{i}", messages=msgs))
            loaded = await store.load(f"c{i}")
            assert loaded is not None
            assert loaded.messages == msgs, path.name
            exact += TA.dump_json(loaded.messages) == TA.dump_json(msgs)
            assert validate(store.store.export(thread_id_for(f"c{i}"))).errors == [], path.name
        return mapped, exact, total

    mapped, exact, total = run(go())
    assert exact == total == len(FIXTURE_FILES)
    assert mapped < total  # what the extension data is for


def test_partial_response_and_deferred_requests_round_trip() -> None:
    async def go() -> None:
        store = TplogConversationStore("memory:")
        partial = pm.ModelResponse(parts=[pm.TextPart("half"), pm.ToolCallPart("add", '{"a')], state="interrupted")
        msgs: list[pm.ModelMessage] = [pm.ModelRequest.user_text_prompt("hi"), partial]
        conv = Conversation(conversation_id="p", messages=msgs)
        await store.save(conv)
        loaded = await store.load("p")
        assert loaded is not None and TA.dump_json(loaded.messages) == TA.dump_json(msgs)
        assert validate(store.store.export(thread_id_for("p"))).errors == []
        interrupts = store.store.interrupts(thread_id_for("p"))
        assert interrupts is not None

    run(go())


def test_conflicts_write_nothing() -> None:
    async def go() -> None:
        store = TplogConversationStore("memory:")
        agent = _agent()
        first = await agent.run("one", conversation=Conversation(conversation_id="c"))
        await store.save(first)
        a = await store.load("c")
        b = await store.load("c")
        assert a is not None and b is not None
        await store.save(await agent.run("two", conversation=a))
        version = store.store.head(thread_id_for("c")).version
        with pytest.raises(ConversationConflict):  # stale revision
            await store.save(await agent.run("three", conversation=b))
        with pytest.raises(ConversationConflict):  # exists, none expected
            await store.save(await agent.run("x", conversation=Conversation(conversation_id="c")))
        with pytest.raises(ConversationConflict):  # stale branch
            await store.branch("c", at=1, expected_revision=b.revision)
        assert store.store.head(thread_id_for("c")).version == version

    run(go())


def test_branch_keeps_the_left_history_and_comes_back() -> None:
    async def go() -> None:
        store = TplogConversationStore("memory:")
        agent = _agent()
        r1 = await agent.run("one", conversation=Conversation(conversation_id="c"))
        await store.save(r1)
        loaded = await store.load("c")
        assert loaded is not None
        r2 = await agent.run("two", conversation=loaded)
        await store.save(r2)
        full = await store.load("c")
        assert full is not None
        branched = await store.branch("c", at=len(r1.all_messages()), expected_revision=full.revision)
        await store.save(await agent.run("other", conversation=branched))
        record = await store.read_record("c")
        assert record is not None and len(record.branches) == 1
        back = await store.branch("c", from_entry=record.branches[0], expected_revision=record.revision)
        assert TA.dump_json(back.messages) == TA.dump_json(full.messages)
        assert len((await store.load("c", limit=2) or back).messages) == 2
        assert validate(store.store.export(thread_id_for("c"))).errors == []

    run(go())


def test_fork_shares_entries_delete_keeps_what_a_fork_uses_and_a_new_one_gets_a_new_revision() -> None:
    async def go() -> None:
        store = TplogConversationStore("memory:")
        agent = _agent()
        r1 = await agent.run("one", conversation=Conversation(conversation_id="src"))
        await store.save(r1)
        src_entries = await store.load_entries("src")
        await store.fork("src", at=2, new_conversation_id="fk")
        fork_entries = await store.load_entries("fk")
        assert src_entries is not None and fork_entries is not None
        assert [e.id for e in fork_entries] == [e.id for e in src_entries[:2]]
        assert store.store.children(thread_id_for("src")) == [thread_id_for("fk")]
        with pytest.raises(ConversationConflict):
            await store.fork("src", new_conversation_id="fk")
        old = await store.read_record("src")
        await store.delete("src")
        assert await store.load("src") is None
        assert [r.conversation_id for r in await store.list_conversations()] == ["fk"]
        assert (await store.load("fk")) is not None  # its entries stay while the fork uses them
        again = await store.save(await agent.run("new", conversation=Conversation(conversation_id="src")))
        assert again
        new = await store.read_record("src")
        assert old is not None and new is not None and new.revision != old.revision
        await store.delete("fk")  # no fork reads from it: its thread is deleted
        assert store.store.head(thread_id_for("fk")).status == "deleted"

    run(go())


def test_scopes_and_listing_newest_first() -> None:
    async def go() -> None:
        store = TplogConversationStore("memory:")
        agent = _agent()
        for cid, scope in [("a", "u1"), ("b", "u2"), ("c", "u1")]:
            await store.save(await agent.run(cid, conversation=Conversation(conversation_id=cid)), scope=scope)
        assert [r.conversation_id for r in await store.list_conversations()] == ["c", "b", "a"]
        assert [r.conversation_id for r in await store.list_conversations(scope="u1", limit=1)] == ["c"]
        assert await store.load("b", scope="u1") is None
        await store.delete("b", scope="u1")
        assert await store.load("b") is not None
        with pytest.raises(UserError):
            await store.list_conversations(limit=-1)

    run(go())


def test_opens_paths_async_stores_and_refuses_other_things(tmp_path: Path) -> None:
    async def go() -> None:
        path = tmp_path / "store"
        async with TplogConversationStore(str(path)) as store:
            await store.save(Conversation(conversation_id="c", messages=[pm.ModelRequest.user_text_prompt("hi")]))
        with Store(path) as plain:
            wrapped = TplogConversationStore(AsyncStore(plain))
            assert wrapped.store is plain
            loaded = await wrapped.load("c")
            assert loaded is not None and len(loaded.messages) == 1
            await wrapped.aclose()
            assert plain.exists(thread_id_for("c"))  # not closed: not ours
        with pytest.raises(UserError):
            TplogConversationStore(42)  # type: ignore[arg-type]
        with pytest.raises(UserError):
            TplogConversationStore("postgresql://")
        with pytest.raises(LookupError):
            await TplogConversationStore("memory:").read_entry("nope")

    run(go())


def test_deferred_requests_generations_and_the_primitives_edges() -> None:
    from pydantic_ai import DeferredToolRequests
    from pydantic_ai.conversation_store import ConversationRecord

    async def go() -> None:
        store = TplogConversationStore("memory:")
        agent = Agent(TestModel(), output_type=[str, DeferredToolRequests])

        @agent.tool_plain(requires_approval=True)
        def wipe(path: str) -> str:
            return path

        result = await agent.run("wipe it", conversation=Conversation(conversation_id="d"))
        assert isinstance(result.output, DeferredToolRequests)
        await store.save(result)
        loaded = await store.load("d")
        assert loaded is not None and loaded.deferred_tool_requests == result.output
        tid = thread_id_for("d")
        assert [p.tool_call_id for p in store.store.pending(tid).pending] == [
            c.tool_call_id for c in result.output.approvals]
        record = await store.read_record("d")
        assert record is not None
        with pytest.raises(ConversationConflict):
            await store.delete_record("d", expected_revision="stale")
        with pytest.raises(ConversationConflict):  # a head the thread does not hold
            await store.write_record(ConversationRecord(conversation_id="d", head_id="gone"),
                                     expected_revision=record.revision)
        assert await store.read_history(None) == []
        for _ in range(3):  # each save after a delete takes the next generation thread
            await store.delete("d")
            await store.save(Conversation(conversation_id="d", messages=[pm.ModelRequest.user_text_prompt("x")]))
        again = await store.load_entries("d")
        assert again is not None and len(again) == 1
        await store.delete("d")
        with pytest.raises(LookupError):  # its thread is gone
            await store.read_history(again[0].id)

    run(go())


def _every_shape() -> list[pm.ModelMessage]:
    """One history holding each kind of message and part Pydantic AI produces."""
    from pydantic_ai.usage import RequestUsage

    png = pm.BinaryContent(data=b"\x89PNG\r\n\x1a\n", media_type="image/png")
    return [
        pm.ModelRequest(parts=[pm.SystemPromptPart("sys"), pm.UserPromptPart(
            ["look", png, pm.ImageUrl("https://example.com/a.png"), pm.DocumentUrl("https://example.com/d.pdf")])],
            instructions="be brief", metadata={"k": [1, 2]}, run_id="r1"),
        pm.ModelResponse(parts=[
            pm.ThinkingPart("hmm", id="t1", signature="sig==", provider_name="anthropic"),
            pm.TextPart("text", provider_details={"x": 1}),
            pm.NativeToolCallPart("web_search", {"q": "x"}, tool_call_id="n1", provider_name="openai"),
            pm.NativeToolReturnPart("web_search", {"hits": 2}, tool_call_id="n1", provider_name="openai"),
            pm.FilePart(content=png),
            pm.ToolCallPart("add", '{"a": 1, "b": 2}', tool_call_id="c1"),
            pm.ToolCallPart("add", {"a": "x"}, tool_call_id="c2"),
        ], usage=RequestUsage(input_tokens=5, output_tokens=7, details={"reasoning_tokens": 3}),
            model_name="m", provider_name="p", provider_details={"finish": "stop"}, finish_reason="tool_call",
            provider_response_id="resp1", run_id="r1", metadata={"m": True}),
        pm.ModelRequest(parts=[
            pm.ToolReturnPart("add", 3, tool_call_id="c1", metadata={"trace": "t"}),
            pm.ToolReturnPart("add", "a must be int", tool_call_id="c2", outcome="retried"),
            pm.RetryFeedbackPart("answer in JSON", retry=pm.RetryInfo("no_output", attempt=1, max_retries=2)),
        ], instructions="be brief", run_id="r1"),
        pm.ModelResponse(parts=[pm.TextPart("so 3")], run_id="r1"),
        pm.ModelRequest(parts=[pm.UserPromptPart("again")], timestamp=None),
        pm.ModelResponse(parts=[pm.TextPart("par")], state="interrupted", run_id="r2"),
    ]


def test_every_message_shape_round_trips_exactly() -> None:
    async def go() -> None:
        store = TplogConversationStore("memory:")
        msgs = _every_shape()
        await store.save(Conversation(conversation_id="x", messages=msgs))
        loaded = await store.load("x")
        assert loaded is not None
        assert TA.dump_json(loaded.messages) == TA.dump_json(msgs)
        # equal to what any serializing store gives back (a BinaryContent of an image loads as BinaryImage)
        assert loaded.messages == TA.validate_json(TA.dump_json(msgs))
        thread = store.store.export(thread_id_for("x"))
        assert validate(thread).errors == []
        # the protocol side holds no system prompt part
        kinds = {type(p).__name__ for t in thread.turns for msg in getattr(t, "messages", []) for p in msg.parts}
        assert "SystemPromptPart" not in kinds

    run(go())


def test_bad_ids_are_user_errors_and_tenants_are_apart() -> None:
    async def go() -> None:
        plain = Store("memory:")
        with pytest.raises(UserError):
            await TplogConversationStore(plain).load("")
        a, b = TplogConversationStore(plain.scoped("tenant-a")), TplogConversationStore(plain.scoped("tenant-b"))
        hi = [pm.ModelRequest.user_text_prompt("hi")]
        await a.save(Conversation(conversation_id="same", messages=hi))
        assert await b.load("same") is None  # another tenant's key space
        await b.save(Conversation(conversation_id="same", messages=hi + hi))
        la, lb = await a.load("same"), await b.load("same")
        assert la is not None and lb is not None and (len(la.messages), len(lb.messages)) == (1, 2)
        assert [r.conversation_id for r in await TplogConversationStore(plain).list_conversations()] == []

    run(go())


def test_a_message_the_store_refuses_is_a_user_error_and_nothing_is_written() -> None:
    from tplog.codec import Limits

    async def go() -> None:
        store = TplogConversationStore(Store("memory:", limits=Limits(max_event_bytes=4096)))
        big = [pm.ModelRequest.user_text_prompt("x" * 10_000)]
        with pytest.raises(UserError) as info:
            await store.save(Conversation(conversation_id="big", messages=big))
        assert not isinstance(info.value, ConversationConflict)
        assert await store.load("big") is None
        assert not store.store.exists(thread_id_for("big"))

    run(go())


def test_a_fork_continues_after_the_last_turn_it_kept() -> None:
    """Found by the state machine: a fork's next turn took the time of the source's save before
    the last one as its floor, and a request without a timestamp broke the turn-order rule."""

    async def go() -> None:
        store = TplogConversationStore("memory:")
        agent = _agent()
        await store.save(await agent.run("one", conversation=Conversation(conversation_id="c")))
        loaded = await store.load("c")
        assert loaded is not None
        await store.save(await agent.run("two", conversation=loaded))
        fork = await store.fork("c", new_conversation_id="f")
        fork.messages.append(pm.ModelRequest(parts=[pm.UserPromptPart("three")], timestamp=None))
        await store.save(fork)
        again = await store.load("f")
        assert again is not None and TA.dump_json(again.messages) == TA.dump_json(fork.messages)
        assert validate(store.store.export(thread_id_for("f"))).errors == []

    run(go())


def test_listing_pages_through_every_thread_and_skips_other_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    from tplog.integrations.pydantic_ai import conversation_store as cs

    monkeypatch.setattr(cs, "_PAGE", 2)

    async def go() -> None:
        store = TplogConversationStore("memory:")
        for cid in ["a", "b", "c", "d", "e"]:
            await store.save(Conversation(conversation_id=cid, messages=[pm.ModelRequest.user_text_prompt(cid)]))
        await store.delete("c")
        assert [r.conversation_id for r in await store.list_conversations()] == ["e", "d", "b", "a"]

    run(go())


def test_messages_with_nothing_for_the_protocol_are_kept_beside_it() -> None:
    """A request holding only a system prompt and a response without parts have no protocol
    message (``v4-message-has-parts``): they are kept in the write's ThreadInfoChanged."""

    async def go() -> None:
        store = TplogConversationStore("memory:")
        msgs: list[pm.ModelMessage] = [
            pm.ModelRequest(parts=[pm.SystemPromptPart("s")], instructions="i"),
            pm.ModelResponse(parts=[pm.TextPart("t")]),
            pm.ModelRequest(parts=[], instructions="i"),
            pm.ModelResponse(parts=[]),
        ]
        await store.save(Conversation(conversation_id="bare", messages=msgs))
        loaded = await store.load("bare")
        assert loaded is not None and TA.dump_json(loaded.messages) == TA.dump_json(msgs)
        assert validate(store.store.export(thread_id_for("bare"))).errors == []
        fork = await store.fork("bare", new_conversation_id="bare-fork")  # its head is such an entry
        assert TA.dump_json(fork.messages) == TA.dump_json(msgs)
        assert store.store.children(thread_id_for("bare")) == [thread_id_for("bare-fork")]

    run(go())


def test_a_later_save_answers_the_calls_before_an_interrupted_request() -> None:
    """A run cut off while returning tool results: its complete messages stand as a completed
    turn, so the next save's tool returns answer calls the thread holds (v3.2-tool-call-id)."""

    async def go() -> None:
        store = TplogConversationStore("memory:")
        call = pm.ToolCallPart("add", {"a": 1}, tool_call_id="c1")
        cut = pm.ToolReturnPart("add", "interrupted", tool_call_id="c1", outcome="interrupted")
        msgs: list[pm.ModelMessage] = [pm.ModelRequest.user_text_prompt("hi"), pm.ModelResponse(parts=[call]),
                                       pm.ModelRequest(parts=[cut], state="interrupted")]
        await store.save(Conversation(conversation_id="x", messages=msgs))
        loaded = await store.load("x")
        assert loaded is not None
        loaded.messages += [pm.ModelRequest(parts=[pm.ToolReturnPart("add", 2, tool_call_id="c1")]),
                            pm.ModelResponse(parts=[pm.TextPart("2")])]
        await store.save(loaded)
        again = await store.load("x")
        assert again is not None and TA.dump_json(again.messages) == TA.dump_json(loaded.messages)
        assert validate(store.store.export(thread_id_for("x"))).errors == []

    run(go())


def test_a_saved_turn_carries_its_usage_as_the_recorder_does() -> None:
    """Each agent turn a save writes has the ``total_usage`` of its responses, so tplog's turns show
    what a run cost without reading the record."""
    async def go() -> None:
        store = TplogConversationStore("memory:")
        msgs: list[pm.ModelMessage] = [
            pm.ModelRequest.user_text_prompt("hi"),
            pm.ModelResponse(parts=[pm.ToolCallPart("add", {"a": 1}, tool_call_id="x")],
                             usage=RequestUsage(input_tokens=5, output_tokens=2)),
            pm.ModelRequest(parts=[pm.ToolReturnPart("add", 1, tool_call_id="x")]),
            pm.ModelResponse(parts=[pm.TextPart("1")], usage=RequestUsage(input_tokens=9, output_tokens=1)),
            pm.ModelRequest.user_text_prompt("again"),
            pm.ModelResponse(parts=[pm.TextPart("ok")]),
        ]
        await store.save(Conversation(conversation_id="u", messages=msgs))
        turns = [t for t in store.store.thread(thread_id_for("u")).turns if isinstance(t, AgentTurn)]
        assert [(t.total_usage.input_tokens, t.total_usage.output_tokens) if t.total_usage else None
                for t in turns] == [(14, 3), None]

    run(go())


def test_other_events_on_the_thread_keep_the_conversation() -> None:
    """A title or a link appended to a conversation's thread by someone else (the CLI, another
    app) does not hide the conversation, and is no new revision: a copy loaded before it still
    saves, as with Pydantic AI's own store. (A save between another's load and save is a
    conflict at the append: tests/integrations/test_conversation_store_race.py.)"""
    async def go() -> None:
        store = TplogConversationStore("memory:")
        await store.save(Conversation(conversation_id="x", messages=[pm.ModelRequest.user_text_prompt("hi")]))
        before = await store.load("x")
        assert before is not None
        tid = thread_id_for("x")
        store.store.append(tid, [ThreadInfoChanged(title="named")])
        other = str(uuid.uuid4())
        store.store.append(other, [ThreadStarted(thread_id=other, created_at="2026-01-01T00:00:00Z")])
        store.store.append(tid, [LinkAdded(link=m.ThreadLink(thread_id=other, relation="referenced"))])
        loaded = await store.load("x")
        assert loaded is not None and TA.dump_json(loaded.messages) == TA.dump_json(before.messages)
        assert loaded.revision == before.revision
        assert [r.conversation_id for r in await store.list_conversations()] == ["x"]
        before.messages.append(pm.ModelRequest.user_text_prompt("more"))
        await store.save(before)
        again = await store.load("x")
        assert again is not None and TA.dump_json(again.messages) == TA.dump_json(before.messages)
        assert validate(store.store.export(tid)).errors == []
        await store.delete("x")
        assert await store.load("x") is None

    run(go())


def test_a_fork_left_without_its_record_is_ended_so_one_creating_save_wins() -> None:
    """``fork`` is two appends (the thread's fork, then the record). A save that finds the fork
    without its record (its writer crashed, or is about to record) ends that generation with a
    deletion marker and takes the next: the other writer's record append is then a conflict, so
    its save cannot be acknowledged and hidden behind this one."""
    async def go() -> None:
        store = TplogConversationStore("memory:")
        await store.save(Conversation(conversation_id="src", messages=[pm.ModelRequest.user_text_prompt("hi")]))
        tid = thread_id_for("n")
        forked = store.store.fork(thread_id_for("src"), 1, new_thread_id=tid)  # A's first append only
        await store.save(Conversation(conversation_id="n", messages=[pm.ModelRequest.user_text_prompt("b")]))
        loaded = await store.load("n")
        assert loaded is not None and [p.content for m_ in loaded.messages for p in m_.parts] == ["b"]
        with pytest.raises(ConflictError):  # A's record, appended after the fork it made
            store.store.append(tid, [ThreadInfoChanged(title="A's record")], expected_version=forked.last_seq)
        assert [r.conversation_id for r in await store.list_conversations()] == ["n", "src"]

    run(go())
