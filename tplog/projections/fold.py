"""Folds: a thread's events → what people ask about.

- :func:`fold` → the ThreadProtocol v0.0.4 document (canonical turns only) and
  the agent turn still in progress, kept apart.
- :func:`interrupts` → per-turn and thread-level interrupt state, from recorded
  facts only: ``AgentTurnInterrupted`` events, responses whose finish reason
  (or ``stop_reason`` extension) says ``aborted``, tool returns whose status
  says ``aborted``.
- :func:`pending` → tool calls without a return: ``deferred`` (the turn
  completed without them; ``kind`` says approval or external when recorded),
  ``executing`` (the turn is still in progress), and, apart from those,
  ``abandoned`` (calls the v0.0.4 rule drops from an interrupted turn).
- :func:`events_from_thread` → the inverse of :func:`fold` for import.

The id-only folds (:func:`interrupts`, :func:`pending`) take :class:`Item`s:
a message's ids and statuses come from its header ``facts``, so they never
decompress or decode message bodies.

v0.0.4 rule applied to interrupted turns (:func:`complete_cycles`): requests
are kept; a response is kept if it has parts and either no tool calls, or the
next request message returns every one of its calls (tool-return, or a
retry-prompt naming the call). A response dropped for unreturned calls takes
the request that partly answered it with it, so no return is left without
its call.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any, Final

import msgspec
from msgspec import UNSET

from tplog.codec import MSG_KIND, Facts, TurnFacts, facts_of
from tplog.events import (
    KIND_CODE,
    AgentRegistered,
    AgentTurnCompleted,
    AgentTurnInterrupted,
    AgentTurnStarted,
    Event,
    LinkAdded,
    MessageRecorded,
    ThreadDeleted,
    ThreadInfoChanged,
    ThreadStarted,
    UserTurnSubmitted,
)
from tplog.protocol import model as m

__all__ = [
    "FoldResult",
    "InterruptState",
    "Item",
    "PendingCall",
    "PendingState",
    "TurnInterrupt",
    "complete_cycles",
    "Folder",
    "events_from_thread",
    "fold",
    "interrupts",
    "item_of",
    "pending",
]

ABORTED: Final = "aborted"


class FoldResult(msgspec.Struct, frozen=True, kw_only=True):
    """``thread``: the canonical document (``None`` before ``ThreadStarted``).
    ``in_progress``: the open agent turn (never part of ``thread.turns``), with
    the messages recorded so far. ``deleted``: the thread was deleted.
    ``seq``: the last seq folded."""

    thread: m.Thread | None
    in_progress: m.AgentTurn | None = None
    deleted: bool = False
    seq: int = 0


def _tool_call_ids(msg: m.Message) -> list[str]:
    if isinstance(msg, m.SystemMessage):
        return []
    return [p.tool_call_id for p in msg.parts if isinstance(p, m.ToolCallPart)]


def _returned_ids(msg: m.Message) -> set[str]:
    if isinstance(msg, m.SystemMessage):
        return set()
    out: set[str] = set()
    for p in msg.parts:
        call_id = _answers(p)
        if call_id is not None:
            out.add(call_id)
    return out


def _answers(part: m.MessagePart) -> str | None:
    if isinstance(part, m.ToolReturnPart):
        return part.tool_call_id
    if isinstance(part, m.RetryPromptPart) and isinstance(part.tool_call_id, str):
        return part.tool_call_id
    return None


def complete_cycles(messages: list[m.Message]) -> list[m.Message]:
    """Keep only complete request/response cycles (the v0.0.4 rule; see module doc)."""
    out: list[m.Message] = []
    dropped_calls: set[str] = set()
    thread_msgs = [i for i, x in enumerate(messages) if not isinstance(x, m.SystemMessage)]
    next_of = dict(itertools.pairwise(thread_msgs))
    for i, msg in enumerate(messages):
        if isinstance(msg, m.SystemMessage):
            out.append(msg)
            continue
        if isinstance(msg, m.RequestMessage):
            if _returned_ids(msg) & dropped_calls:  # returns of a dropped response go with it
                parts = [p for p in msg.parts if _answers(p) not in dropped_calls]
                if not parts:
                    continue
                msg = msgspec.structs.replace(msg, parts=parts)
            calls = _tool_call_ids(msg)
            if calls:  # a call carried by a request (no Pydantic AI shape, but the schema allows it)
                j = next_of.get(i)
                nxt = messages[j] if j is not None else None
                answered = _returned_ids(nxt) if isinstance(nxt, m.RequestMessage) else set()
                unanswered = set(calls) - answered
                dropped_calls.difference_update(answered.intersection(calls))  # a re-used id names this kept call
                if unanswered:  # dropped as a response's would be, and their later returns with them
                    dropped_calls.update(unanswered)
                    parts = [p for p in msg.parts
                             if not (isinstance(p, m.ToolCallPart) and p.tool_call_id in unanswered)]
                    if not parts:
                        continue
                    msg = msgspec.structs.replace(msg, parts=parts)
            out.append(msg)
            continue
        if not msg.parts:
            continue
        calls = _tool_call_ids(msg)
        if not calls:
            out.append(msg)
            continue
        j = next_of.get(i)
        nxt = messages[j] if j is not None else None
        if isinstance(nxt, m.RequestMessage) and set(calls) <= _returned_ids(nxt):
            out.append(msg)
            dropped_calls.difference_update(calls)  # a re-used id now names this kept call
        else:
            dropped_calls.update(calls)
    return out


class _Open:
    __slots__ = ("agent_id", "extra", "messages", "started_at")

    def __init__(self, ev: AgentTurnStarted) -> None:
        self.agent_id = ev.agent_id
        self.started_at = ev.started_at
        self.extra = ev.extra
        self.messages: list[m.Message] = []


class Folder:
    """The turns fold, incrementally: :meth:`feed` events in seq order, ask for
    :meth:`result` at any point and keep feeding. ``Store.load`` keeps one per
    recently loaded thread, so a load reads and folds only the events appended
    since. A result's lists and dicts (turns, agents, the in-progress turn's
    messages) are its own copies; the completed turns in them are shared with
    the folder, which never changes them afterwards."""

    __slots__ = ("agents", "current", "deleted", "links", "metadata", "seq", "started", "title", "turns", "updated")

    def __init__(self) -> None:
        self.started: ThreadStarted | None = None
        self.title: Any = UNSET
        self.metadata: Any = UNSET
        self.agents: dict[str, m.AgentConfig] = {}
        self.turns: list[m.Turn] = []
        self.links: list[m.ThreadLink] = []
        self.updated: str | None = None
        self.current: _Open | None = None
        self.deleted = False
        self.seq = 0

    def feed_all(self, events: Iterable[Event]) -> None:
        """:meth:`feed` each of ``events``, in order. The common kinds are folded here, by
        exact type and with the folder's fields in locals (a cold load folds a whole
        thread; method calls and ``isinstance`` chains per event were a tenth of it);
        any other event goes through :meth:`feed`."""
        seq, updated, current, turns = self.seq, self.updated, self.current, self.turns
        ev: Any  # narrowed by the exact type checks below, which mypy does not follow
        for ev in events:
            cls = type(ev)
            if cls is MessageRecorded:
                seq += 1
                msg = ev.message
                if msg.timestamp is not None:
                    updated = msg.timestamp
                if current is not None:
                    current.messages.append(msg)
            elif cls is AgentTurnStarted:
                seq += 1
                if ev.started_at is not None:
                    updated = ev.started_at
                current = _Open(ev)
            elif cls is UserTurnSubmitted:
                seq += 1
                if ev.turn.submitted_at is not None:
                    updated = ev.turn.submitted_at
                turns.append(ev.turn)
            elif cls is AgentTurnCompleted and current is not None:
                seq += 1
                if isinstance(ev.completed_at, str):
                    updated = ev.completed_at
                turns.append(m.AgentTurn(agent_id=current.agent_id, started_at=current.started_at,
                                         completed_at=ev.completed_at,
                                         messages=current.messages, completion_status="complete",
                                         total_usage=ev.total_usage, extra=current.extra))
                current = None
            else:
                self.seq, self.updated, self.current = seq, updated, current
                self.feed(ev)
                seq, updated, current = self.seq, self.updated, self.current
        self.seq, self.updated, self.current = seq, updated, current

    def feed(self, ev: Event) -> None:
        self.seq += 1
        t = ev.time()
        if t is not None:
            self.updated = t
        current = self.current
        if isinstance(ev, MessageRecorded):
            if current is not None:
                current.messages.append(ev.message)
        elif isinstance(ev, AgentTurnStarted):
            self.current = _Open(ev)
        elif isinstance(ev, AgentTurnCompleted):
            if current is not None:
                self.turns.append(
                    m.AgentTurn(
                        agent_id=current.agent_id,
                        started_at=current.started_at,
                        completed_at=ev.completed_at,
                        messages=current.messages,
                        completion_status="complete",
                        total_usage=ev.total_usage,
                        extra=current.extra,
                    )
                )
            self.current = None
        elif isinstance(ev, AgentTurnInterrupted):
            if current is not None:
                self.turns.append(
                    m.AgentTurn(
                        agent_id=current.agent_id,
                        started_at=current.started_at,
                        messages=complete_cycles(current.messages),
                        completion_status="interrupted",
                        interruption=ev.interruption,
                        total_usage=ev.total_usage,
                        extra=current.extra,
                    )
                )
            self.current = None
        elif isinstance(ev, UserTurnSubmitted):
            self.turns.append(ev.turn)
        elif isinstance(ev, AgentRegistered):
            self.agents[ev.registry_key] = ev.agent
        elif isinstance(ev, LinkAdded):
            self.links.append(ev.link)
        elif isinstance(ev, ThreadInfoChanged):
            if ev.title is not UNSET:
                self.title = ev.title
            if ev.metadata is not UNSET:
                self.metadata = ev.metadata
        elif isinstance(ev, ThreadStarted):
            self.started = ev
            self.title, self.metadata = ev.title, ev.metadata
        elif isinstance(ev, ThreadDeleted):
            self.deleted = True

    def result(self) -> FoldResult:
        started = self.started
        if started is None:
            return FoldResult(thread=None, deleted=self.deleted, seq=self.seq)
        rel: Any = started.relationships
        if self.links:
            shell = rel if isinstance(rel, m.ThreadRelationships) else m.ThreadRelationships()
            prior = shell.links if isinstance(shell.links, list) else []
            rel = msgspec.structs.replace(shell, links=[*prior, *self.links])
        thread = m.Thread(
            version="0.0.4",
            thread_id=started.thread_id,
            created_at=started.created_at,
            updated_at=self.updated or started.created_at,
            title=self.title,
            metadata=self.metadata,
            agents=dict(self.agents),
            turns=list(self.turns),
            relationships=rel,
            extra=started.extra,
        )
        in_progress = None
        current = self.current
        if current is not None:
            in_progress = m.AgentTurn(
                agent_id=current.agent_id,
                started_at=current.started_at,
                messages=list(current.messages),
                extra=current.extra,
            )
        return FoldResult(thread=thread, in_progress=in_progress, deleted=self.deleted, seq=self.seq)


def fold(events: Iterable[Event]) -> FoldResult:
    """Fold a thread's events (in seq order) into its ThreadProtocol v0.0.4 document."""
    f = Folder()
    f.feed_all(events)
    return f.result()


# --------------------------------------------------------------------------- id-only folds


class Item(msgspec.Struct, frozen=True):
    """One event as the id-only folds see it: ``event`` is ``None`` for messages
    (their ``facts`` carry what is needed); for an agent-turn boundary it is the
    event or, read from a format-3 header, its :class:`TurnFacts`."""

    seq: int
    kind: int
    facts: Facts | None
    event: Event | TurnFacts | None


def item_of(seq: int, kind: int, facts: Facts | None, event: Any) -> Item:
    """A stored event as the folds see it: a message's body is left out (its facts carry what they need)."""
    return Item(seq, kind, facts, None if kind == MSG_KIND else event)


def items_from_events(events: Iterable[Event]) -> Iterator[Item]:
    for i, ev in enumerate(events, 1):
        kind = KIND_CODE[type(ev)]
        yield Item(i, kind, facts_of(ev), None if isinstance(ev, MessageRecorded) else ev)


_K_MSG = KIND_CODE[MessageRecorded]
_K_START = KIND_CODE[AgentTurnStarted]
_K_DONE = KIND_CODE[AgentTurnCompleted]
_K_INT = KIND_CODE[AgentTurnInterrupted]
_K_USER = KIND_CODE[UserTurnSubmitted]


class TurnInterrupt(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One interruption fact. ``turn`` is the agent turn's index among the
    thread's turns; ``source``: ``"turn"`` (an AgentTurnInterrupted event),
    ``"response"`` (a response whose finish reason says aborted) or ``"tool"``
    (a tool return whose status says aborted). ``seq`` is the event stating it."""

    turn: int
    agent_id: str
    source: str
    reason: str
    interrupted_at: str | None
    seq: int
    tool_call_id: str | None = None


class InterruptState(msgspec.Struct, frozen=True, kw_only=True):
    """``interrupted``: the thread's last agent turn ended interrupted (or holds an
    aborted fact). ``last``: the most recent fact. ``facts``: all of them, in order."""

    interrupted: bool
    last: TurnInterrupt | None
    facts: list[TurnInterrupt]


class PendingCall(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A tool call without a return. ``state``: ``deferred`` | ``executing`` |
    ``abandoned``; ``kind``: ``approval`` | ``external`` when recorded."""

    tool_call_id: str
    tool_name: str
    state: str
    turn: int
    seq: int
    kind: str | None = None


class PendingState(msgspec.Struct, frozen=True, kw_only=True):
    pending: list[PendingCall]
    abandoned: list[PendingCall]


class ThreadState(msgspec.Struct, kw_only=True):
    """The id-only fold's running state for one thread; persisted by the
    ``state`` projection so answers never rescan the thread. Feed it
    :class:`Item`s in seq order with :func:`feed`. ``seq`` is the last seq that
    changed the state."""

    seq: int = 0
    turn: int = -1
    agent: str = ""
    turn_calls: list[str] = []
    open_calls: dict[str, PendingCall] = {}
    abandoned: list[PendingCall] = []
    facts: list[TurnInterrupt] = []
    interrupted: bool = False


def feed(st: ThreadState, it: Item) -> None:
    """Advance ``st`` by one event (mutates it). ``st.seq`` becomes the event's
    seq only when the event changes the state (so an unchanged state encodes to
    the same bytes, and the ``state`` projection skips the write)."""
    step(st, it.seq, it.kind, it.facts, it.event)


def step(st: ThreadState, seq: int, kind: int, f: Facts | None, ev: Event | TurnFacts | None) -> None:
    """:func:`feed` with the item's fields as arguments (a rebuild makes no Item per event)."""
    if kind == _K_MSG:
        if f is None or not (f.calls or f.returns or (f.message_type == "response" and f.finish_reason == ABORTED)):
            return
        st.seq = seq
        for call_id, name in f.calls:
            st.open_calls[call_id] = PendingCall(tool_call_id=call_id, tool_name=name, state="executing",
                                                 turn=st.turn, seq=seq)
            st.turn_calls.append(call_id)
        for call_id, status in f.returns:
            st.open_calls.pop(call_id, None)
            if status == ABORTED:
                st.facts.append(TurnInterrupt(turn=st.turn, agent_id=st.agent, source="tool", reason=ABORTED,
                                              interrupted_at=None, seq=seq, tool_call_id=call_id))
                st.interrupted = True
        if f.message_type == "response" and f.finish_reason == ABORTED:
            st.facts.append(TurnInterrupt(turn=st.turn, agent_id=st.agent, source="response", reason=ABORTED,
                                          interrupted_at=None, seq=seq))
            st.interrupted = True
    elif kind == _K_USER:
        st.seq = seq
        st.turn += 1
        if f is not None:  # a user turn may carry tool results (approvals, external results)
            for call_id, _status in f.returns:
                st.open_calls.pop(call_id, None)
    elif kind == _K_START:
        st.seq = seq
        assert isinstance(ev, (AgentTurnStarted, TurnFacts))
        st.turn += 1
        st.agent = ev.agent_id
        st.turn_calls = []
        st.interrupted = False
    elif kind == _K_DONE:
        st.seq = seq
        assert isinstance(ev, (AgentTurnCompleted, TurnFacts))
        deferred = ev.deferred
        for cid in st.turn_calls:
            c = st.open_calls.get(cid)
            if c is not None:
                st.open_calls[cid] = msgspec.structs.replace(c, state="deferred", kind=deferred.get(cid))
        st.turn_calls = []
    elif kind == _K_INT:
        st.seq = seq
        assert isinstance(ev, (AgentTurnInterrupted, TurnFacts))
        for cid in st.turn_calls:
            c = st.open_calls.pop(cid, None)
            if c is not None:
                st.abandoned.append(msgspec.structs.replace(c, state="abandoned"))
        st.turn_calls = []
        reason, at = ((ev.reason, ev.interrupted_at) if isinstance(ev, TurnFacts)
                      else (ev.interruption.reason, ev.interruption.interrupted_at))
        st.facts.append(TurnInterrupt(turn=st.turn, agent_id=st.agent, source="turn", reason=reason,
                                      interrupted_at=at, seq=seq))
        st.interrupted = True


def state_of(items: Iterable[Item]) -> ThreadState:
    st = ThreadState()
    for it in items:
        feed(st, it)
    return st


def pending_of(st: ThreadState) -> PendingState:
    return PendingState(pending=sorted(st.open_calls.values(), key=lambda c: c.seq), abandoned=list(st.abandoned))


def interrupts_of(st: ThreadState) -> InterruptState:
    return InterruptState(interrupted=st.interrupted, last=st.facts[-1] if st.facts else None, facts=list(st.facts))


def pending(items: Iterable[Item]) -> PendingState:
    """Tool calls without a return (see module doc)."""
    return pending_of(state_of(items))


def interrupts(items: Iterable[Item]) -> InterruptState:
    """Interrupt facts, per turn and for the thread (see module doc)."""
    return interrupts_of(state_of(items))


# --------------------------------------------------------------------------- import


def events_from_thread(thread: m.Thread) -> list[Event]:
    """The history events that fold back into ``thread`` (a v0.0.4 document).

    ``fold(events_from_thread(t)).thread`` equals ``t`` for any v0.0.4 thread
    whose interrupted turns already hold only complete cycles (upgrade v0.0.3
    documents first).
    """
    rel = thread.relationships
    shell: Any = rel
    links: list[m.ThreadLink] = []
    if isinstance(rel, m.ThreadRelationships) and isinstance(rel.links, list):
        links = rel.links
        shell = msgspec.structs.replace(rel, links=[])
    events: list[Event] = [
        ThreadStarted(
            thread_id=thread.thread_id,
            created_at=thread.created_at,
            version=thread.version,
            title=thread.title,
            metadata=thread.metadata,
            relationships=shell,
            extra=thread.extra,
        )
    ]
    for key, agent in thread.agents.items():
        events.append(AgentRegistered(agent=agent, key=UNSET if key == agent.agent_id else key))
    events.extend(LinkAdded(link=link) for link in links)
    for turn in thread.turns:
        if isinstance(turn, m.UserTurn):
            events.append(UserTurnSubmitted(turn=turn))
            continue
        events.append(AgentTurnStarted(agent_id=turn.agent_id, started_at=turn.started_at, extra=turn.extra))
        events.extend(MessageRecorded(message=msg) for msg in turn.messages)
        if turn.completion_status == "interrupted" and isinstance(turn.interruption, m.Interruption):
            events.append(AgentTurnInterrupted(interruption=turn.interruption, total_usage=turn.total_usage))
        else:
            events.append(AgentTurnCompleted(completed_at=turn.completed_at, total_usage=turn.total_usage))
    if fold(events).thread is None or _updated(events) != thread.updated_at:
        events.append(ThreadInfoChanged(updated_at=thread.updated_at))
    return events


def _updated(events: list[Event]) -> str | None:
    out = None
    for ev in events:
        t = ev.time()
        if t is not None:
            out = t
    return out
