"""Projections through a real store: pending tool calls and interrupts.

Hand-built scenarios (deferred approval/external calls, executing calls,
resolution by a later turn, abandonment on interruption; interrupt facts from
turn events, aborted responses and aborted tool returns), then hypothesis
properties over random event sequences that respect the order rules: the
store's id-only folds (message headers only) answer exactly as the same folds
over in-memory events, and as a reference model computed from full events.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import ToyStore as Store
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tplog.events import (
    AgentRegistered,
    AgentTurnCompleted,
    AgentTurnInterrupted,
    AgentTurnStarted,
    Event,
    LinkAdded,
    MessageRecorded,
    ThreadInfoChanged,
    ThreadStarted,
    UserTurnSubmitted,
)
from tplog.projections.fold import (
    InterruptState,
    PendingState,
    interrupts,
    items_from_events,
    pending,
)
from tplog.protocol import model as m

T0 = "2025-01-20T10:00:00Z"


def ts(sec: int) -> str:
    return f"2025-01-20T{10 + sec // 3600:02d}:{sec // 60 % 60:02d}:{sec % 60:02d}Z"


# --------------------------------------------------------------------------- builders


def req(*parts: m.MessagePart, t: int = 1, **kw: Any) -> MessageRecorded:
    return MessageRecorded(message=m.RequestMessage(timestamp=ts(t), agent_id="a1", parts=list(parts), **kw))


def resp(*parts: m.MessagePart, t: int = 2, **kw: Any) -> MessageRecorded:
    return MessageRecorded(message=m.ResponseMessage(timestamp=ts(t), agent_id="a1", parts=list(parts), **kw))


def call(cid: str, name: str = "tool") -> m.ToolCallPart:
    return m.ToolCallPart(tool_name=name, tool_call_id=cid, args={})


def ret(cid: str, name: str = "tool", status: str = "success", content: Any = "done") -> m.ToolReturnPart:
    return m.ToolReturnPart(tool_name=name, tool_call_id=cid, status=status, content=content)


def prompt(s: str = "q") -> m.UserPromptPart:
    return m.UserPromptPart(content=s)


def text(s: str = "ok") -> m.TextPart:
    return m.TextPart(content=s)


def user(*parts: m.MessagePart, t: int = 0) -> UserTurnSubmitted:
    return UserTurnSubmitted(turn=m.UserTurn(submitted_at=ts(t), parts=list(parts) or [prompt()]))


def start(t: int = 1, agent: str = "a1") -> AgentTurnStarted:
    return AgentTurnStarted(agent_id=agent, started_at=ts(t))


def done(t: int = 9, **kw: Any) -> AgentTurnCompleted:
    return AgentTurnCompleted(completed_at=ts(t), **kw)


def cut(t: int = 9, reason: str = "user_cancelled") -> AgentTurnInterrupted:
    return AgentTurnInterrupted(interruption=m.Interruption(reason=reason, interrupted_at=ts(t)))


def head_events(tid: str) -> list[Event]:
    return [
        ThreadStarted(thread_id=tid, created_at=T0),
        AgentRegistered(agent=m.AgentConfig(agent_id="a1", agent_name="A1", created_at=T0)),
    ]


@pytest.fixture
def put(tmp_path: Path) -> Iterator[Any]:
    """``put(*events) -> (store, thread_id, all_events)``: a fresh thread holding the events."""
    s = Store(tmp_path / "store", durability="relaxed")

    def f(*events: Event, split: bool = False) -> tuple[Store, str, list[Event]]:
        tid = str(uuid.uuid4())
        evs = [*head_events(tid), *events]
        if split:  # one append per event: the same answers however the log was written
            for e in evs:
                s.append(tid, [e])
        else:
            s.append(tid, evs)
        return s, tid, evs

    yield f
    s.close()


def ids(calls: list[Any]) -> list[tuple[str, str, str | None]]:
    return [(c.tool_call_id, c.state, c.kind) for c in calls]


def same_as_memory(store: Store, tid: str, events: list[Event]) -> tuple[PendingState, InterruptState]:
    """The store's answers, checked against the same folds over the in-memory events."""
    p, i = store.pending(tid), store.interrupts(tid)
    assert p == pending(items_from_events(events))
    assert i == interrupts(items_from_events(events))
    return p, i


# --------------------------------------------------------------------------- pending tools


def test_no_tools_nothing_pending(put: Any) -> None:
    s, tid, evs = put(user(), start(), req(prompt()), resp(text()), done())
    p, _ = same_as_memory(s, tid, evs)
    assert p.pending == [] and p.abandoned == []


def test_deferred_in_completed_turn_with_kinds(put: Any) -> None:
    s, tid, evs = put(
        user(),
        start(),
        req(prompt("delete and update")),
        resp(call("del", "delete_file"), call("upd", "update_file"), call("ext", "slow_job")),
        done(deferred={"del": "approval", "ext": "external"}),
    )
    p, _ = same_as_memory(s, tid, evs)
    assert ids(p.pending) == [("del", "deferred", "approval"), ("upd", "deferred", None),
                              ("ext", "deferred", "external")]
    c = p.pending[0]
    assert c.tool_name == "delete_file" and c.turn == 1 and c.seq == 6
    assert p.abandoned == []


def test_executing_in_in_progress_turn(put: Any) -> None:
    s, tid, evs = put(user(), start(), req(prompt()), resp(call("a"), call("b")), req(ret("a")))
    p, _ = same_as_memory(s, tid, evs)
    assert ids(p.pending) == [("b", "executing", None)]
    assert p.pending[0].turn == 1
    assert s.load(tid).in_progress is not None


def test_resolved_by_later_turn_approved_denied_external(put: Any) -> None:
    s, tid, evs = put(
        user(t=0),
        start(t=1),
        resp(call("del", "delete_file"), call("upd", "update_file"), call("ext", "slow_job"), t=2),
        done(t=3, deferred={"del": "approval", "upd": "approval", "ext": "external"}),
        user(prompt("approve update, deny delete"), t=4),
        start(t=5),
        req(
            ret("del", "delete_file", status="error", content="Deleting files is not allowed"),  # denied
            ret("upd", "update_file", content="File updated"),  # approved and executed
            t=6,
        ),
        resp(text("Updated; deletion denied."), t=7),
        done(t=8),
    )
    p, _ = same_as_memory(s, tid, evs)
    assert ids(p.pending) == [("ext", "deferred", "external")]
    assert p.pending[0].turn == 1  # the turn that made the call
    # The external result arrives in a third run.
    s.append(tid, [start(t=10), req(ret("ext", "slow_job", content={"job": "finished"}), t=11),
                   resp(text("all done"), t=12), done(t=13)])
    p2 = s.pending(tid)
    assert p2.pending == [] and p2.abandoned == []


def test_resolved_by_retry_prompt_naming_the_call(put: Any) -> None:
    s, tid, evs = put(start(), resp(call("a")), done(deferred={"a": "approval"}), start(t=10),
                      req(m.RetryPromptPart(content="denied by user", tool_name="tool", tool_call_id="a"), t=11),
                      resp(text(), t=12), done(t=13))
    p, _ = same_as_memory(s, tid, evs)
    assert p.pending == []


def test_resolved_by_a_user_turn_returning_the_call(put: Any) -> None:
    """A user turn may carry the deferred tool's result (it is a ModelRequest); the validator
    counts it as answering the call, so the call is no longer pending."""
    s, tid, evs = put(
        user(prompt("delete it"), t=0),
        start(t=1),
        resp(call("del", "delete_file"), t=2),
        done(t=3, deferred={"del": "approval"}),
        user(ret("del", "delete_file", status="error", content="Denied by the user"), t=4),
    )
    p = s.pending(tid)
    assert p == pending(items_from_events(evs))
    assert p.pending == [], f"denied by a user turn, still pending: {p.pending}"


def test_abandoned_on_interruption(put: Any) -> None:
    s, tid, evs = put(
        user(),
        start(),
        req(prompt("paris, berlin, tokyo")),
        resp(call("p"), call("b"), t=2),
        req(ret("p"), ret("b"), t=3),
        resp(call("t"), call("x"), t=4),
        req(ret("t"), t=5),  # x never returned
        cut(t=6),
    )
    p, _ = same_as_memory(s, tid, evs)
    assert p.pending == []
    assert ids(p.abandoned) == [("x", "abandoned", None)]
    assert p.abandoned[0].turn == 1 and p.abandoned[0].seq == 8
    # The fold's document drops the whole partial cycle (t and x) but keeps the first.
    doc_calls = [pt.tool_call_id for turn in s.thread(tid).turns if isinstance(turn, m.AgentTurn)
                 for msg in turn.messages if not isinstance(msg, m.SystemMessage)
                 for pt in msg.parts if isinstance(pt, m.ToolCallPart)]
    assert doc_calls == ["p", "b"]


def test_interruption_leaves_earlier_deferred_calls_pending(put: Any) -> None:
    s, tid, evs = put(start(), resp(call("d")), done(deferred={"d": "external"}),
                      start(t=10), resp(call("e"), t=11), cut(t=12))
    p, _ = same_as_memory(s, tid, evs)
    assert ids(p.pending) == [("d", "deferred", "external")]
    assert ids(p.abandoned) == [("e", "abandoned", None)]


def test_pending_is_the_same_for_split_appends(put: Any) -> None:
    body = [user(), start(), resp(call("a"), call("b")), req(ret("a")), done(deferred={"b": "approval"}),
            start(t=20), resp(call("c"), t=21), cut(t=22), start(t=30), resp(call("z"), t=31)]
    s1, t1, _ = put(*body)
    s2, t2, _ = put(*body, split=True)
    assert s1.pending(t1) == s2.pending(t2)
    assert s1.interrupts(t1) == s2.interrupts(t2)
    assert ids(s1.pending(t1).pending) == [("b", "deferred", "approval"), ("z", "executing", None)]


def test_pending_of_unknown_thread_is_not_found(put: Any) -> None:
    from tplog.errors import NotFoundError

    s, _, _ = put()
    with pytest.raises(NotFoundError):
        s.pending("no-such-thread")
    with pytest.raises(NotFoundError):
        s.interrupts("no-such-thread")


# --------------------------------------------------------------------------- interrupts


def test_not_interrupted(put: Any) -> None:
    s, tid, evs = put(user(), start(), resp(text()), done())
    _, i = same_as_memory(s, tid, evs)
    assert i == InterruptState(interrupted=False, last=None, facts=[])


def test_turn_event_interrupt_with_reason_and_time(put: Any) -> None:
    s, tid, evs = put(user(), start(t=1), resp(text(), t=2), cut(t=15, reason="timeout"))
    _, i = same_as_memory(s, tid, evs)
    assert i.interrupted
    assert i.last is not None and i.facts == [i.last]
    f = i.last
    assert (f.source, f.reason, f.interrupted_at, f.turn, f.agent_id, f.seq) == ("turn", "timeout", ts(15), 1, "a1", 6)
    assert f.tool_call_id is None


def test_response_finish_reason_aborted(put: Any) -> None:
    s, tid, evs = put(start(), req(prompt()), resp(text("partial"), finish_reason="aborted"), done())
    _, i = same_as_memory(s, tid, evs)
    assert i.interrupted
    assert [(f.source, f.reason, f.turn, f.seq, f.interrupted_at) for f in i.facts] == [
        ("response", "aborted", 0, 5, None)
    ]


def test_response_stop_reason_extension_aborted(put: Any) -> None:
    """The fold's doc: a response whose finish reason *or ``stop_reason`` extension* says aborted."""
    s, tid, evs = put(start(), req(prompt()),
                      MessageRecorded(message=m.ResponseMessage(timestamp=ts(2), agent_id="a1", parts=[text()],
                                                                extra={"stop_reason": "aborted"})),
                      done())
    i = s.interrupts(tid)
    assert i == interrupts(items_from_events(evs))
    assert [f.source for f in i.facts] == ["response"] and i.interrupted


def test_tool_return_status_aborted(put: Any) -> None:
    s, tid, evs = put(start(), resp(call("a"), call("b")), req(ret("a"), ret("b", status="aborted")), done())
    _, i = same_as_memory(s, tid, evs)
    assert i.interrupted
    assert [(f.source, f.tool_call_id, f.reason, f.seq) for f in i.facts] == [("tool", "b", "aborted", 5)]


def test_thread_interrupted_flag_clears_after_a_later_completed_turn(put: Any) -> None:
    s, tid, _ = put(user(), start(t=1), resp(text(), t=2), cut(t=3))
    assert s.interrupts(tid).interrupted
    s.append(tid, [user(t=4)])
    assert s.interrupts(tid).interrupted  # still: the last *agent* turn was interrupted
    s.append(tid, [start(t=5)])
    assert not s.interrupts(tid).interrupted  # a new agent turn began
    s.append(tid, [resp(text(), t=6), done(t=7)])
    i = s.interrupts(tid)
    assert not i.interrupted
    assert len(i.facts) == 1 and i.last is not None and i.last.turn == 1  # the history keeps the fact
    events = [e.event for e in s.read(tid)]
    assert i == interrupts(items_from_events(events))


def test_several_interrupt_facts_in_order(put: Any) -> None:
    s, tid, evs = put(
        start(t=1), resp(call("a"), t=2), req(ret("a", status="aborted"), t=3),
        resp(text("cut"), finish_reason="aborted", t=4), cut(t=5),
        user(t=6),
        start(t=7), resp(text("fine"), t=8), done(t=9),
        start(t=10), resp(text("again"), finish_reason="aborted", t=11), done(t=12),
    )
    _, i = same_as_memory(s, tid, evs)
    assert [(f.turn, f.source) for f in i.facts] == [(0, "tool"), (0, "response"), (0, "turn"), (3, "response")]
    assert i.interrupted and i.last == i.facts[-1]


# --------------------------------------------------------------------------- properties


@dataclass
class _Gen:
    """The state a generated log is in, to keep to the order rules."""

    open_turn: bool = False
    next_call: int = 0
    all_calls: list[str] = field(default_factory=list)
    turn_calls: list[str] = field(default_factory=list)
    t: int = 1


_STATUSES = st.sampled_from(["success", "error", "aborted", "retry"])


@st.composite
def event_logs(draw: st.DrawFn, *, user_returns: bool = False) -> list[Event]:
    """Random thread bodies (after ThreadStarted) that respect the order rules."""
    g = _Gen()
    out: list[Event] = []

    def tick() -> str:
        g.t += 1
        return ts(g.t)

    for _ in range(draw(st.integers(0, 25))):
        if not g.open_turn:
            action = draw(st.sampled_from(["user", "start", "start", "link", "info"]))
            if action == "user":
                parts: list[m.MessagePart] = [prompt()]
                if user_returns and g.all_calls and draw(st.booleans()):
                    cid = draw(st.sampled_from(g.all_calls))
                    parts.append(ret(cid, status=draw(st.sampled_from(["success", "error"]))))
                out.append(UserTurnSubmitted(turn=m.UserTurn(submitted_at=tick(), parts=parts)))
            elif action == "start":
                out.append(AgentTurnStarted(agent_id=draw(st.sampled_from(["a1", "a2"])), started_at=tick()))
                g.open_turn, g.turn_calls = True, []
            elif action == "link":
                out.append(LinkAdded(link=m.ThreadLink(thread_id=str(uuid.uuid4()), relation="referenced")))
            else:
                out.append(ThreadInfoChanged(title=draw(st.text(max_size=3))))
            continue
        action = draw(st.sampled_from(["response", "response", "request", "request", "system", "done", "cut"]))
        if action == "response":
            parts = [text()] if draw(st.booleans()) else []
            for _ in range(draw(st.integers(0, 3))):
                g.next_call += 1
                cid = f"c{g.next_call}"
                g.all_calls.append(cid)
                g.turn_calls.append(cid)
                parts.append(call(cid, draw(st.sampled_from(["search", "delete"]))))
            fr = draw(st.sampled_from([None, "stop", "tool_call", "aborted"]))
            msg = m.ResponseMessage(timestamp=tick(), agent_id="a1", parts=parts,
                                    **({} if fr is None else {"finish_reason": fr}))
            out.append(MessageRecorded(message=msg))
        elif action == "request":
            rparts: list[m.MessagePart] = []
            if g.all_calls:
                for cid in draw(st.lists(st.sampled_from(g.all_calls), max_size=3, unique=True)):
                    status = draw(_STATUSES)
                    if status == "retry":
                        rparts.append(m.RetryPromptPart(content="again", tool_name="search", tool_call_id=cid))
                    else:
                        rparts.append(ret(cid, "search", status=status))
            if draw(st.booleans()) or not rparts:
                rparts.append(prompt())
            out.append(MessageRecorded(message=m.RequestMessage(timestamp=tick(), agent_id="a1", parts=rparts)))
        elif action == "system":
            out.append(MessageRecorded(message=m.SystemMessage(timestamp=tick(), event_type="data-app-x",
                                                               event_data={})))
        elif action == "done":
            deferred = {}
            if g.turn_calls:
                for cid in draw(st.lists(st.sampled_from(g.turn_calls), max_size=3, unique=True)):
                    deferred[cid] = draw(st.sampled_from(["approval", "external"]))
            out.append(AgentTurnCompleted(completed_at=tick(), deferred=deferred))
            g.open_turn = False
        else:
            out.append(AgentTurnInterrupted(
                interruption=m.Interruption(reason=draw(st.sampled_from(["user_cancelled", "timeout"])),
                                            interrupted_at=tick())))
            g.open_turn = False
            # Calls an interruption abandoned are out of the document: no later return names them.
            g.all_calls = [c for c in g.all_calls if c not in g.turn_calls]
    return out


def reference_pending(events: list[Event]) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Pending/abandoned calls computed from full events, independently of the id-only fold:
    (tool_call_id, tool_name, state, turn, seq, kind)."""
    turn = -1
    calls: dict[str, list[Any]] = {}  # id -> [name, turn, seq, closed_as, kind]
    returned: set[str] = set()
    for seq, ev in enumerate(events, 1):
        if isinstance(ev, (UserTurnSubmitted, AgentTurnStarted)):
            turn += 1
            if isinstance(ev, UserTurnSubmitted):
                for p in ev.turn.parts:
                    if isinstance(p, (m.ToolReturnPart, m.RetryPromptPart)) and isinstance(p.tool_call_id, str):
                        returned.add(p.tool_call_id)
        elif isinstance(ev, MessageRecorded) and not isinstance(ev.message, m.SystemMessage):
            for p in ev.message.parts:
                if isinstance(p, m.ToolCallPart):
                    calls[p.tool_call_id] = [p.tool_name, turn, seq, None, None]
                    returned.discard(p.tool_call_id)
                elif isinstance(p, (m.ToolReturnPart, m.RetryPromptPart)) and isinstance(p.tool_call_id, str):
                    returned.add(p.tool_call_id)
        elif isinstance(ev, (AgentTurnCompleted, AgentTurnInterrupted)):
            for cid, c in calls.items():
                if c[1] == turn and c[3] is None and cid not in returned:
                    if isinstance(ev, AgentTurnCompleted):
                        c[3], c[4] = "deferred", ev.deferred.get(cid)
                    else:
                        c[3] = "abandoned"
    pend, aband = [], []
    for cid, (name, t, seq, closed, kind) in calls.items():
        if cid in returned:
            continue
        row = (cid, name, closed or "executing", t, seq, kind)
        (aband if closed == "abandoned" else pend).append(row)
    return sorted(pend, key=lambda r: r[4]), sorted(aband, key=lambda r: r[4])


def reference_interrupts(events: list[Event]) -> tuple[bool, list[tuple[Any, ...]]]:
    turn, agent, last_interrupted = -1, "", False
    facts: list[tuple[Any, ...]] = []
    for seq, ev in enumerate(events, 1):
        if isinstance(ev, UserTurnSubmitted):
            turn += 1
        elif isinstance(ev, AgentTurnStarted):
            turn, agent, last_interrupted = turn + 1, ev.agent_id, False
        elif isinstance(ev, MessageRecorded):
            msg = ev.message
            if isinstance(msg, m.ResponseMessage) and msg.finish_reason == "aborted":
                facts.append((turn, agent, "response", "aborted", None, seq, None))
                last_interrupted = True
            if not isinstance(msg, m.SystemMessage):
                for p in msg.parts:
                    if isinstance(p, m.ToolReturnPart) and p.status == "aborted":
                        facts.append((turn, agent, "tool", "aborted", None, seq, p.tool_call_id))
                        last_interrupted = True
        elif isinstance(ev, AgentTurnInterrupted):
            i = ev.interruption
            facts.append((turn, agent, "turn", i.reason, i.interrupted_at, seq, None))
            last_interrupted = True
    return last_interrupted, facts


def _as_rows(p: PendingState) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    def row(c: Any) -> tuple[Any, ...]:
        return (c.tool_call_id, c.tool_name, c.state, c.turn, c.seq, c.kind)

    return [row(c) for c in p.pending], sorted((row(c) for c in p.abandoned), key=lambda r: r[4])


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    s = Store(tmp_path_factory.mktemp("proj") / "store", durability="relaxed")
    yield s
    s.close()


_PROP = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                         HealthCheck.too_slow])


@_PROP
@given(event_logs(user_returns=True), st.integers(1, 4))
def test_store_id_only_folds_equal_in_memory_folds(shared_store: Store, body: list[Event], chunks: int) -> None:
    tid = str(uuid.uuid4())
    events = [*head_events(tid), *body]
    step = max(1, len(events) // chunks)
    for i in range(0, len(events), step):
        shared_store.append(tid, events[i:i + step])
    stored = [e.event for e in shared_store.read(tid)]
    assert stored == events
    assert shared_store.pending(tid) == pending(items_from_events(events))
    assert shared_store.interrupts(tid) == interrupts(items_from_events(events))


@_PROP
@given(event_logs(user_returns=False))
def test_id_only_folds_equal_reference_from_full_events(shared_store: Store, body: list[Event]) -> None:
    tid = str(uuid.uuid4())
    events = [*head_events(tid), *body]
    shared_store.append(tid, events)
    p = shared_store.pending(tid)
    assert _as_rows(p) == reference_pending(events)
    i = shared_store.interrupts(tid)
    flag, facts = reference_interrupts(events)
    assert i.interrupted == flag
    assert [(f.turn, f.agent_id, f.source, f.reason, f.interrupted_at, f.seq, f.tool_call_id) for f in i.facts] == facts
    assert i.last == (i.facts[-1] if i.facts else None)
    # Every executing call belongs to the turn in progress; deferred ones to completed turns.
    res = shared_store.load(tid)
    assert res.thread is not None
    n_turns = len(res.thread.turns)
    for c in p.pending:
        if c.state == "executing":
            assert res.in_progress is not None and c.turn == n_turns
        else:
            assert c.state == "deferred" and c.turn < n_turns


@_PROP
@given(event_logs(user_returns=True))
def test_user_turn_returns_resolve_like_the_reference(shared_store: Store, body: list[Event]) -> None:
    tid = str(uuid.uuid4())
    events = [*head_events(tid), *body]
    shared_store.append(tid, events)
    assert _as_rows(shared_store.pending(tid)) == reference_pending(events)
