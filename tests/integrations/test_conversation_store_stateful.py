"""``TplogConversationStore`` against Pydantic AI's own ``InMemoryConversationStore``.

A hypothesis state machine runs random sequences of the public API (agent runs with a tool and runs
that pause for an approval, approved or denied at once or steps later, save, load with and without
``limit``, branch and back, fork, scopes, list, delete, stale and concurrent saves) on the reference
store and on tplog's over memory, LMDB and PostgreSQL, and compares every observable after every
step: outcomes (or error types), loaded histories as JSON, records (scope, fork origin, left
branches, usage) and listings. Entry ids differ between stores, so a ``from_entry`` names the same
left branch by its index in each store.
More examples with ``--soak``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from pydantic_ai import Agent
from pydantic_ai import messages as pm
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationStore, InMemoryConversationStore
from pydantic_ai.messages import ModelMessagesTypeAdapter as TA
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults

from tplog.integrations.pydantic_ai import TplogConversationStore

IDS = ["a", "b", "c"]
SCOPES = [None, "u1", "u2"]


def _model(messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
    last = messages[-1]
    if any(isinstance(p, pm.ToolReturnPart) for p in last.parts):
        return pm.ModelResponse(parts=[pm.TextPart("sum done")])
    prompt = " ".join(str(p.content) for p in last.parts if isinstance(p, pm.UserPromptPart))
    if "tool" in prompt:
        return pm.ModelResponse(parts=[pm.ToolCallPart("add", {"a": 1, "b": len(messages)})])
    return pm.ModelResponse(parts=[pm.TextPart(f"echo {prompt}")])


AGENT: Agent[None, str] = Agent(FunctionModel(_model), instructions="be brief")


@AGENT.tool_plain
def add(a: int, b: int) -> int:
    return a + b


def _approval_model(messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
    last = messages[-1]
    if any(isinstance(p, pm.ToolReturnPart) for p in last.parts):
        return pm.ModelResponse(parts=[pm.TextPart("removal decided")])
    return pm.ModelResponse(parts=[pm.ToolCallPart("remove", {"path": f"/tmp/{len(messages)}"})])


#: Pauses for the user's approval: the conversation's record keeps the deferred requests.
APPROVER: Agent[None, str | DeferredToolRequests] = Agent(
    FunctionModel(_approval_model), instructions="be brief", output_type=[str, DeferredToolRequests])


@APPROVER.tool_plain(requires_approval=True)
def remove(path: str) -> str:
    return f"removed {path}"


def _pg_url() -> str:
    from backends.contract_helpers import pg_dsn  # the run's one server; a failure under CI=true when missing

    return f"{pg_dsn()}?schema=cs{os.getpid()}_{uuid.uuid4().hex[:10]}"


def _open(kind: str) -> TplogConversationStore:
    if kind == "memory":
        return TplogConversationStore("memory:")
    if kind == "lmdb":
        return TplogConversationStore(tempfile.mkdtemp(prefix="tplog-cs-"))
    return TplogConversationStore(_pg_url())


def _outcome(coro: Any) -> tuple[str, Any]:
    try:
        return "ok", asyncio.run(coro)
    except Exception as exc:  # the error *type* is the observable
        return type(exc).__name__, None


class Compare(RuleBasedStateMachine):
    kind = "memory"
    plant = False  # a deliberate difference, to see the machine catch one

    def __init__(self) -> None:
        super().__init__()
        self.stores: list[ConversationStore] = [InMemoryConversationStore(), _open(self.kind)]

    def teardown(self) -> None:
        for s in self.stores:
            if isinstance(s, TplogConversationStore):
                s.close()
                if self.kind == "lmdb":
                    shutil.rmtree(s.store.path, ignore_errors=True)

    def _all(self, call: Any, fresh: bool = False) -> list[tuple[str, Any]]:
        return [_outcome(call(self._fresh(s) if fresh else s)) for s in self.stores]

    @staticmethod
    def _fresh(s: ConversationStore) -> ConversationStore:
        """Another ``TplogConversationStore`` on the same tplog store: nothing remembered, as in
        another process."""
        return TplogConversationStore(s.store) if isinstance(s, TplogConversationStore) else s

    def _same(self, outs: list[tuple[str, Any]]) -> None:
        assert len({o[0] for o in outs}) == 1, outs

    @rule(cid=st.sampled_from(IDS), prompt=st.sampled_from(["hi", "use the tool", "more"]),
          scope=st.sampled_from(SCOPES))
    def run_and_save(self, cid: str, prompt: str, scope: str | None) -> None:
        self._run_all(cid, scope, lambda conv: AGENT.run(prompt, conversation=conv))

    @rule(cid=st.sampled_from(IDS), scope=st.sampled_from(SCOPES), then=st.sampled_from([None, True, False]))
    def ask_approval(self, cid: str, scope: str | None, then: bool | None) -> None:
        """A run that pauses for an approval (deferred tool requests in the record), answered at
        once or by a later step (``decide``), after whatever else the machine does in between."""
        self._run_all(cid, scope, lambda conv: APPROVER.run("remove it", conversation=conv))
        if then is not None:
            self.decide(cid, then, scope)

    @rule(cid=st.sampled_from(IDS), approve=st.booleans())
    def decide(self, cid: str, approve: bool, scope: str | None = None) -> None:
        """The user approves or denies every pending call; the run goes on from the loaded record."""
        def go(conv: Conversation) -> Any:
            pending = conv.deferred_tool_requests
            calls = [] if pending is None else pending.approvals
            event(f"decide: {len(calls)} pending, approve={approve}")
            results = DeferredToolResults(approvals={c.tool_call_id: approve for c in calls})
            return APPROVER.run(conversation=conv, deferred_tool_results=results)

        self._run_all(cid, scope, go)

    def _run_all(self, cid: str, scope: str | None, run: Any) -> None:
        """Load in every store, run once on the reference's copy, save that run's messages in each."""
        loaded = [_outcome(s.load(cid, scope=scope)) for s in self.stores]
        self._same(loaded)
        if loaded[0][0] != "ok":
            return
        convs = [c or Conversation(conversation_id=cid) for _, c in loaded]
        assert len({TA.dump_json(c.messages) for c in convs}) == 1
        assert len({repr(c.deferred_tool_requests) for c in convs}) == 1
        ran = _outcome(run(convs[0]))
        if ran[0] != "ok":
            return
        result = ran[1]
        new = result.new_messages()
        outs = [_outcome(self.stores[0].save(result, scope=scope))]
        for s, c in zip(self.stores[1:], convs[1:], strict=True):
            c.messages.extend(new)
            c.usage = result.usage
            c.deferred_tool_requests = result.conversation.deferred_tool_requests
            outs.append(_outcome(s.save(c, scope=scope)))
        self._same(outs)

    @rule(cid=st.sampled_from(IDS))
    def save_cut_off_run(self, cid: str) -> None:
        """What a cancelled run leaves: a prompt and a partial response (the same objects in each store)."""
        cut = [pm.ModelRequest.user_text_prompt("cut"),
               pm.ModelResponse(parts=[pm.TextPart("par"), pm.ToolCallPart("add", '{"a')], state="interrupted")]
        outs = []
        for s in self.stores:
            conv = asyncio.run(s.load(cid)) or Conversation(conversation_id=cid)
            conv.messages.extend(cut)
            outs.append(_outcome(s.save(conv)))
        self._same(outs)

    @rule(cid=st.sampled_from(IDS))
    def stale_save(self, cid: str) -> None:
        one, two = pm.ModelRequest.user_text_prompt("one"), pm.ModelRequest.user_text_prompt("two")
        for s in self.stores:
            first = asyncio.run(s.load(cid))
            if first is None:
                continue
            second = asyncio.run(s.load(cid))
            assert second is not None
            first.messages.append(one)
            second.messages.append(two)
            asyncio.run(s.save(first))
            assert _outcome(s.save(second))[0] == "ConversationConflict"

    @rule(cid=st.sampled_from(IDS))
    def concurrent_saves(self, cid: str) -> None:
        """Two saves of one conversation at once (``asyncio.gather``), each from its own loaded copy:
        exactly one wins, the other is a conflict (both append the same message, so the history
        does not depend on which). Two conversations saved at once would have no "newest-saved"
        order to compare listings by."""
        msg = pm.ModelRequest.user_text_prompt("at once")

        async def go(s: ConversationStore) -> list[str]:
            convs = [await s.load(cid) or Conversation(conversation_id=cid) for _ in range(2)]
            for c in convs:
                c.messages.append(msg)
            outs = await asyncio.gather(*(s.save(c) for c in convs), return_exceptions=True)
            return sorted("ok" if isinstance(o, list) else type(o).__name__ for o in outs)

        outs = self._all(go)
        self._same(outs)
        assert len({repr(o[1]) for o in outs}) == 1, outs

    @rule(cid=st.sampled_from(IDS), at=st.integers(0, 8), fresh=st.booleans())
    def branch_at(self, cid: str, at: int, fresh: bool) -> None:
        self._same(self._all(lambda s: self._branch(s, cid, at=at), fresh))

    @rule(cid=st.sampled_from(IDS), index=st.integers(0, 3), fresh=st.booleans())
    def branch_back(self, cid: str, index: int, fresh: bool) -> None:
        self._same(self._all(lambda s: self._branch(s, cid, index=index), fresh))

    @staticmethod
    async def _branch(s: ConversationStore, cid: str, *, at: int | None = None, index: int | None = None) -> Any:
        record = await s.read_record(cid)
        revision = record.revision if record is not None else None
        if index is None:
            return await s.branch(cid, at=at, expected_revision=revision)
        tip = record.branches[index] if record is not None and index < len(record.branches) else "none"
        return await s.branch(cid, from_entry=tip, expected_revision=revision)

    @rule(cid=st.sampled_from(IDS), new=st.sampled_from(IDS), at=st.none() | st.integers(0, 6),
          scope=st.sampled_from(SCOPES), fresh=st.booleans())
    def fork(self, cid: str, new: str, at: int | None, scope: str | None, fresh: bool) -> None:
        self._same(self._all(lambda s: s.fork(cid, at=at, new_conversation_id=new, scope=scope), fresh))

    @rule(cid=st.sampled_from(IDS), new=st.sampled_from(IDS), index=st.integers(0, 2), keep=st.integers(0, 3),
          fresh=st.booleans())
    def fork_from_left_branch(self, cid: str, new: str, index: int, keep: int, fresh: bool) -> None:
        async def go(s: ConversationStore) -> Any:
            record = await s.read_record(cid)
            if record is None or index >= len(record.branches):
                return None
            line = await s.read_history(record.branches[index])
            return await s.fork(cid, from_entry=line[min(keep, len(line) - 1)].id, new_conversation_id=new)

        self._same(self._all(go, fresh))

    @rule(cid=st.sampled_from(IDS), scope=st.sampled_from(SCOPES), fresh=st.booleans())
    def delete(self, cid: str, scope: str | None, fresh: bool) -> None:
        self._same(self._all(lambda s: s.delete(cid, scope=scope), fresh))

    @invariant()
    def same_observables(self) -> None:
        views = [asyncio.run(self._view(self._fresh(s))) for s in self.stores]
        if self.plant:
            views[1]["listed"] = views[1]["listed"][::-1]
        assert views[0] == views[1]

    @staticmethod
    async def _view(s: ConversationStore) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for cid in IDS:
            conv = await s.load(cid)
            window = await s.load(cid, limit=2)
            record = await s.read_record(cid)
            out[cid] = None if conv is None or window is None or record is None else (
                TA.dump_json(conv.messages), TA.dump_json(window.messages), conv.usage, record.scope,
                record.forked_from, len(record.branches), record.head_id is None, record.deferred_tool_requests)
        out["listed"] = [r.conversation_id for r in await s.list_conversations()]
        out["scoped"] = [[r.conversation_id for r in await s.list_conversations(scope=sc)] for sc in SCOPES[1:]]
        return out


def _settings(n: int) -> settings:
    return settings(max_examples=n, stateful_step_count=12, deadline=None,
                    suppress_health_check=list(HealthCheck))


class MemoryCompare(Compare):
    kind = "memory"


class LmdbCompare(Compare):
    kind = "lmdb"


class PostgresCompare(Compare):
    kind = "postgres"


TestMemory = MemoryCompare.TestCase
TestMemory.settings = _settings(25)
TestLmdb = LmdbCompare.TestCase
TestLmdb.settings = _settings(8)
TestPostgres = PostgresCompare.TestCase
TestPostgres.settings = _settings(4)


@pytest.mark.soak
@pytest.mark.parametrize("machine", [MemoryCompare, LmdbCompare, PostgresCompare])
def test_soak(machine: type[Compare]) -> None:
    case = machine.TestCase
    case.settings = settings(max_examples=300, stateful_step_count=25, deadline=None,
                             suppress_health_check=list(HealthCheck))
    case("runTest").runTest()


def test_a_planted_difference_is_caught() -> None:
    class Planted(Compare):
        plant = True

    with pytest.raises(AssertionError):
        case = Planted.TestCase
        case.settings = settings(max_examples=30, stateful_step_count=8, deadline=None,
                                 suppress_health_check=list(HealthCheck), database=None)
        case("runTest").runTest()
