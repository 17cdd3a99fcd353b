"""The validation rules the store enforces at append: what it accepts, ``validate`` accepts.

:func:`check_event` runs, per event and in the appending thread (before the
group commit), every rule of :mod:`tplog.protocol.validate` that needs only the event
itself, with the very checker ``validate`` uses (timestamps, the thread id and
link ids being UUIDs, closed value sets, required fields, reserved names,
ContentRef URIs), and condenses what the rules that need the thread's history
will compare. :class:`Tracker` then checks those, in the write transaction,
against a few values the thread's head keeps (its agent registry, where the
last turn ended, when the open turn started and its last message), so they
cost a comparison or two per event:

- ``v3.3-agent-ref``: an agent turn's and a request/response's ``agent_id`` is
  registered (before it is used: the store is stricter than ``validate``,
  which accepts a registration after the use);
- ``v3.4-turn-overlap``, ``v3.4-turn-interval``, ``v3.5-message-order``;
- ``v3.2-tool-call-id``: an answer names a tool call the thread's document
  holds. The ``state`` projection's open calls and the open turn's calls
  answer the common case; anything else (a second answer to a call, a call of
  an interrupted turn whose cycle the fold drops, no ``state`` projection)
  is decided by folding the thread (rare; reads the thread in the write
  transaction).

Rules about the document as a whole that events cannot break (``version``,
completion status and interruption, complete turns only) hold by
construction of the fold; ``Store.import_thread`` and ``tplog import`` also
run the whole of ``validate`` on the document first. A v0.0.4 interrupted
turn's calls without a return are not refused: the fold keeps only complete
cycles of such a turn, so the document never shows them. Warnings are never
refused.

Errors are :class:`~tplog.InvalidEventError` with ``rule``, ``thread_id``,
``seq`` (the seq the event would have had) and ``path``, a JSON path inside
the event (``$.message.parts[0].status``).

Known gap: message order compares a message with the one before it in the
turn, as ``validate`` does; if a turn mixes zoned and zoneless timestamps and
is later interrupted, the fold can drop the zoneless message between two
zoned ones that are out of order.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

from tplog.errors import InvalidEventError
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
from tplog.projections.fold import fold
from tplog.protocol import model as m
from tplog.protocol.findings import RULES, Finding
from tplog.protocol.validate import Checker, is_uuid, parse_timestamp

__all__ = ["EventCheck", "Tracker", "advance_rules", "check_event", "exported_calls", "rules_from_log", "stamp"]

#: Rules that need the thread's history: checked by :class:`Tracker`, not per event.
_HISTORY_RULES: Final = frozenset({"v3.2-tool-call-id", "v3.3-agent-ref"})
_NO_SCHEMES: Final = frozenset[str]()
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_NAIVE: Final = datetime(1970, 1, 1)


def stamp(value: Any) -> int | None:
    """A protocol timestamp as one int: microseconds since the epoch, doubled, plus
    1 when zoneless. Two stamps compare as ``validate`` compares their times when
    they have the same parity (zoned with zoned, zoneless with zoneless)."""
    if not isinstance(value, str):
        return None
    dt = parse_timestamp(value)
    return None if dt is None else _stamp(dt)


def _stamp(dt: datetime) -> int:
    if dt.tzinfo is None:
        delta = dt - _EPOCH_NAIVE
        naive = 1
    else:
        delta = dt - _EPOCH
        naive = 0
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return micros * 2 + naive


def _earlier(a: int | None, b: int | None) -> bool:
    """``a < b`` when both are known and comparable (as ``_validate._earlier``)."""
    return a is not None and b is not None and (a & 1) == (b & 1) and a < b


class _EventChecker(Checker):
    """``validate``'s checker, keeping only the first error of a per-event rule."""

    def __init__(self) -> None:  # only what the per-event checks use (one per event: kept light)
        self.thread = None
        self.schemes = _NO_SCHEMES
        self.v4 = True
        self.calls: dict[str, tuple[str, str]] = {}
        self.answered: set[str] = set()
        self.first: Finding | None = None

    def add(self, rule: str, path: str, message: str) -> None:
        if self.first is None and rule not in _HISTORY_RULES and RULES[rule].severity == "error":
            self.first = Finding(rule=rule, path=path, message=message)

    def agent_ref(self, agent_id: str, path: str, rule: str = "v3.3-agent-ref") -> None:
        pass  # the registry is the thread's: Tracker checks it


def _time(c: Checker, value: Any, path: str) -> int | None:
    """``c.ts`` (the timestamp rules) and the :func:`stamp`, parsing once."""
    if not isinstance(value, str):
        return None
    dt = parse_timestamp(value)
    if dt is None or dt.tzinfo is None:
        c.ts(value, path)  # the finding, worded as validate words it
    return None if dt is None else _stamp(dt)


class EventCheck:
    """What :func:`check_event` found in one event: its first per-event rule
    error (``finding``), its time as a :func:`stamp`, the agent it names
    (``agent``, ``agent_path``) and, in part order, its tool calls and answers
    (``refs``: ``(is_call, tool_call_id, path)``)."""

    __slots__ = ("agent", "agent_path", "finding", "refs", "time")

    def __init__(self) -> None:
        self.finding: Finding | None = None
        self.time: int | None = None
        self.agent: str | None = None
        self.agent_path = ""
        self.refs: list[tuple[bool, str, str]] = []


def _refs(parts: list[m.MessagePart], pp: str) -> list[tuple[bool, str, str]]:
    out: list[tuple[bool, str, str]] = []
    for k, p in enumerate(parts):
        if isinstance(p, m.ToolCallPart):
            out.append((True, p.tool_call_id, f"{pp}[{k}].tool_call_id"))
        elif isinstance(p, (m.ToolReturnPart, m.RetryPromptPart)) and isinstance(p.tool_call_id, str):
            out.append((False, p.tool_call_id, f"{pp}[{k}].tool_call_id"))
    return out


def check_event(ev: Event) -> EventCheck:
    """Run the per-event rules on ``ev`` (never raises; see :class:`EventCheck`)."""
    out = EventCheck()
    c = _EventChecker()
    if isinstance(ev, MessageRecorded):
        msg = ev.message
        out.time = _time(c, msg.timestamp, "$.message.timestamp")
        c.message(msg, "$.message", None)
        if not isinstance(msg, m.SystemMessage):
            out.agent, out.agent_path = msg.agent_id, "$.message.agent_id"
            out.refs = _refs(msg.parts, "$.message.parts")
    elif isinstance(ev, UserTurnSubmitted):
        out.time = _time(c, ev.turn.submitted_at, "$.turn.submitted_at")
        c.user_turn(ev.turn, "$.turn")
        out.refs = _refs(ev.turn.parts, "$.turn.parts")
    elif isinstance(ev, AgentTurnStarted):
        out.time = _time(c, ev.started_at, "$.started_at")
        out.agent, out.agent_path = ev.agent_id, "$.agent_id"
    elif isinstance(ev, AgentTurnCompleted):
        out.time = _time(c, ev.completed_at, "$.completed_at")
    elif isinstance(ev, AgentTurnInterrupted):
        out.time = _time(c, ev.interruption.interrupted_at, "$.interruption.interrupted_at")
    elif isinstance(ev, AgentRegistered):
        c.ts(ev.agent.created_at, "$.agent.created_at")
    elif isinstance(ev, ThreadStarted):
        if not is_uuid(ev.thread_id):
            c.add("thread-id-uuid", "$.thread_id",
                  f"thread_id {ev.thread_id!r} is not a UUID (map an outside id with tplog.thread_id_for)")
        c.ts(ev.created_at, "$.created_at")
        c.ts(ev.updated_at, "$.updated_at")
        rel = ev.relationships
        if isinstance(rel, m.ThreadRelationships) and isinstance(rel.links, list):
            for i, link in enumerate(rel.links):
                _link(c, link, f"$.relationships.links[{i}]")
    elif isinstance(ev, LinkAdded):
        _link(c, ev.link, "$.link")
        c.ts(ev.at, "$.at")  # the export's updated_at can come from it
    elif isinstance(ev, ThreadInfoChanged):
        c.ts(ev.updated_at, "$.updated_at")
    out.finding = c.first
    return out


def _link(c: _EventChecker, link: m.ThreadLink, lp: str) -> None:
    if not is_uuid(link.thread_id):
        c.add("v3.8-link-uuid", f"{lp}.thread_id", f"linked thread_id {link.thread_id!r} is not a UUID")


class Tracker:
    """Checks an append's events against the thread's history, in order.

    ``head`` is the thread's head record (read, never changed: the caller
    writes the new values from :attr:`agents`, :attr:`prev_end`,
    :attr:`open_start`, :attr:`open_last` once every event passed).
    ``state`` is the ``state`` projection's row (``None`` when it is not
    live), ``exported_calls`` folds the stored thread plus the given earlier
    events of the append and returns the tool-call ids its document and open
    turn hold (the slow path)."""

    def __init__(self, thread_id: str, head: Any, state: Any,
                 exported_calls: Callable[[list[Event]], set[str]]) -> None:
        self.thread_id = thread_id
        self.agents: list[str] = list(head.agents)
        self.prev_end: int | None = head.turn_end
        self.open_start: int | None = head.open_turn_start
        self.open_last: int | None = head.open_turn_last
        self.state = state
        # the state projection's open turn (its turn_calls): "open", then "complete" or "interrupted"
        self.state_turn = "open" if head.open_turn_agent is not None else "none"
        self.batch_calls: set[str] = set()  # calls of this append's events, while known to be exported
        self.open_calls: set[str] = set()  # ... of them, those of the open turn
        self.exported_calls = exported_calls
        self.events: list[Event] = []
        self._slow: tuple[int, set[str]] | None = None  # (len(events) it was folded at, its call ids)

    def fail(self, finding: Finding, seq: int, i: int) -> InvalidEventError:
        return InvalidEventError(
            f"thread {self.thread_id}, events[{i}] (would be seq {seq}): {finding.message} [{finding.rule}]",
            path=finding.path, rule=finding.rule, thread_id=self.thread_id, seq=seq,
        )

    def step(self, ev: Event, chk: EventCheck, seq: int, i: int) -> None:
        """Check one event (raises :class:`InvalidEventError`) and advance."""
        if chk.finding is not None:
            raise self.fail(chk.finding, seq, i)
        if chk.agent is not None and chk.agent not in self.agents:
            known = ", ".join(sorted(self.agents)) or "none"
            raise self.fail(Finding(rule="v3.3-agent-ref", path=chk.agent_path,
                                    message=f"agent {chk.agent!r} is not in the thread's agent registry "
                                            f"(registered: {known}); append AgentRegistered first"), seq, i)
        if isinstance(ev, MessageRecorded):
            if _earlier(chk.time, self.open_last):
                raise self.fail(Finding(rule="v3.5-message-order", path="$.message.timestamp",
                                        message=f"{ev.message.timestamp!r} is earlier than the turn's message "
                                                "before it"), seq, i)
            if chk.time is not None:
                self.open_last = chk.time
            self._refs(chk, seq, i, self.open_calls)
        elif isinstance(ev, UserTurnSubmitted):
            self._turn_start(chk.time, "$.turn.submitted_at", seq, i)
            self._refs(chk, seq, i, self.batch_calls)
            if chk.time is not None:
                self.prev_end = chk.time
        elif isinstance(ev, AgentTurnStarted):
            self._turn_start(chk.time, "$.started_at", seq, i)
            self.open_start, self.open_last = chk.time, None
            self.open_calls = set()
        elif isinstance(ev, (AgentTurnCompleted, AgentTurnInterrupted)):
            path = "$.completed_at" if isinstance(ev, AgentTurnCompleted) else "$.interruption.interrupted_at"
            if _earlier(chk.time, self.open_start):
                raise self.fail(Finding(rule="v3.4-turn-interval", path=path,
                                        message="the agent turn ends before it started"), seq, i)
            end = chk.time if chk.time is not None else self.open_start
            if end is not None:
                self.prev_end = end
            self.open_start = self.open_last = None
            complete = isinstance(ev, AgentTurnCompleted)
            if complete:
                self.batch_calls |= self.open_calls  # a complete turn keeps every message
            self.open_calls = set()
            if self.state_turn == "open":
                self.state_turn = "complete" if complete else "interrupted"
        elif isinstance(ev, AgentRegistered) and ev.registry_key not in self.agents:
            self.agents.append(ev.registry_key)
        self.events.append(ev)

    def _turn_start(self, start: int | None, path: str, seq: int, i: int) -> None:
        if _earlier(start, self.prev_end):
            raise self.fail(Finding(rule="v3.4-turn-overlap", path=path,
                                    message="the turn starts before the previous turn ended"), seq, i)

    def _refs(self, chk: EventCheck, seq: int, i: int, calls: set[str]) -> None:
        for is_call, call_id, path in chk.refs:
            if is_call:
                calls.add(call_id)
            elif not self._known(call_id, calls):
                raise self.fail(Finding(rule="v3.2-tool-call-id", path=path,
                                        message=f"tool_call_id {call_id!r} matches no earlier tool-call the "
                                                "thread holds"), seq, i)

    def _known(self, call_id: str, calls: set[str]) -> bool:
        if call_id in calls or call_id in self.batch_calls or call_id in self.open_calls:
            return True
        st = self.state
        if st is not None:
            in_turn = call_id in st.turn_calls
            if in_turn and self.state_turn in ("open", "complete"):
                return True
            # an interrupted turn's cycles may be dropped by the fold: only the slow path knows
            if call_id in st.open_calls and not (in_turn and self.state_turn == "interrupted"):
                return True
        if self._slow is None or self._slow[0] != len(self.events):  # one fold per event at most
            self._slow = (len(self.events), self.exported_calls(self.events))
        return call_id in self._slow[1]


# --------------------------------------------------------------------------- shared by the backends
# Pure functions of a thread's events: each backend passes its own stored events, so every
# backend keeps the same head values (and refuses the same appends).


def exported_calls(events: list[Event]) -> set[str]:
    """The tool-call ids the document and open turn of a thread with ``events`` hold:
    the slow path of the ``v3.2-tool-call-id`` check (:class:`Tracker`'s ``exported_calls``)."""
    res = fold(events)
    out: set[str] = set()
    turns: list[m.Turn] = list(res.thread.turns) if res.thread is not None else []
    if res.in_progress is not None:
        turns.append(res.in_progress)
    for turn in turns:
        msgs: list[Any] = [turn] if isinstance(turn, m.UserTurn) else turn.messages
        for msg in msgs:
            if not isinstance(msg, m.SystemMessage):
                out.update(p.tool_call_id for p in msg.parts if isinstance(p, m.ToolCallPart))
    return out


def rules_from_log(h: Any, events: list[Event]) -> None:
    """Fill the rules' values of a head written before they were kept (``rules == 0``)
    from the thread's stored ``events`` (once: the next checked append keeps them)."""
    res = fold(events)
    th = res.thread
    h.agents = list(th.agents) if th is not None else []
    h.turn_end = None
    for turn in th.turns if th is not None else []:
        if isinstance(turn, m.UserTurn):
            end = stamp(turn.submitted_at)
        else:
            at = turn.interruption.interrupted_at if isinstance(turn.interruption, m.Interruption) else None
            end = stamp(at if turn.completion_status == "interrupted" else turn.completed_at)
            end = end if end is not None else stamp(turn.started_at)
        if end is not None:
            h.turn_end = end
    cur = res.in_progress
    h.open_turn_start = stamp(cur.started_at) if cur is not None else None
    h.open_turn_last = None
    for msg in cur.messages if cur is not None else []:
        t = stamp(msg.timestamp)
        if t is not None:
            h.open_turn_last = t


def advance_rules(h: Any, tracker: Tracker | None) -> None:
    """Write what ``tracker`` learned into the new head ``h`` once every event passed;
    no tracker (an append with ``check_rules=False``): the values are not kept, and a
    later checked append folds them from the log (``rules = 0``)."""
    if tracker is None:
        h.agents, h.turn_end, h.open_turn_start, h.open_turn_last, h.rules = [], None, None, None, 0
    else:
        h.agents, h.turn_end = tracker.agents, tracker.prev_end
        h.open_turn_start, h.open_turn_last = tracker.open_start, tracker.open_last
        h.rules = 1
