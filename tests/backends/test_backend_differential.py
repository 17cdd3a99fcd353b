"""Differential test: every backend against the reference backend, step by step.

A hypothesis state machine drives the same random operations into the reference
(``memory``) and each other backend: appends (valid, out of order, with right and
wrong expected versions), idempotent and partial retries, appends touching several
threads, links and spawns between threads, deletions, scopes, rebuilds, each append
with or without the validation rules (``check_rules``: agents registered or not,
tool answers to known or unknown calls, a thread id and link targets that are not
UUIDs, checked appends after unchecked ones). After
every step every read of the contract must give the same answer on both (heads'
clock fields aside), and every operation the same result or the same error type.

Every backend runs with one log here, as the reference keeps (so positions compare
one to one); the contract suite covers backends with several logs. The default run
takes EXAMPLES examples; ``--soak`` runs SOAK_EXAMPLES.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import agent_start, completed, link, register, response, spawn_message, started, user
from contract_helpers import DIFF_EXAMPLES, DIFFERENTIAL, FACTORIES, encode, tombstone
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from tplog.backends.contract import Recorder, ThreadAppend
from tplog.errors import TplogError
from tplog.events import Event, MessageRecorded
from tplog.protocol import model as m

EXAMPLES_ENV = __import__("os").environ.get("TPLOG_DIFF_EXAMPLES")
EXAMPLES = int(EXAMPLES_ENV or "2000")
SOAK_EXAMPLES = 20_000
STEPS = 10

T = "2025-01-20T10:00:00Z"
THREADS = ["0a8e7bd0-6f33-4a3e-9f57-5c3f8a1b2c01", "7f000000-0000-4000-8000-000000000002", "plain-thread",
           "c0ffee00-0000-4000-8000-0000000000ff"]
SCOPES = [None, "tenant"]
RELATIONS = ["spawned_from", "referenced", "merged_from"]
#: Links a new thread declares in ``ThreadStarted.relationships`` (indexed like added ones).
DECLARED = st.lists(st.tuples(st.sampled_from(THREADS), st.sampled_from(RELATIONS)), max_size=2)
TMP = "/dev/shm" if Path("/dev/shm").is_dir() else None


def tool_call(call_id: str) -> MessageRecorded:
    return MessageRecorded(message=m.ResponseMessage(
        timestamp=T, agent_id="a1", parts=[m.ToolCallPart(tool_name="f", tool_call_id=call_id, args={})]))


def tool_return(call_id: str) -> MessageRecorded:
    part = m.ToolReturnPart(tool_name="f", tool_call_id=call_id, content="r", status="success")
    return MessageRecorded(message=m.RequestMessage(timestamp=T, agent_id="a1", parts=[part]))


def event_strategy() -> st.SearchStrategy[Event]:
    target = st.sampled_from(THREADS)
    return st.one_of(
        st.just(user()), st.just(agent_start()), st.just(response()), st.just(completed()), st.just(register()),
        st.builds(link, target, st.sampled_from(RELATIONS)),
        st.builds(spawn_message, target),
        st.builds(tool_call, st.sampled_from(["c1", "c2"])),
        st.builds(tool_return, st.sampled_from(["c1", "c2"])),
    )


def start(thread_id: str, declared: list[tuple[str, str]]) -> Event:
    """A ThreadStarted, declaring links in its relationships when ``declared`` names any."""
    if not declared:
        return started(thread_id)
    rel = m.ThreadRelationships(links=[m.ThreadLink(thread_id=t, relation=r) for t, r in declared])
    return started(thread_id, relationships=rel)


def valid_run(thread_id: str, events: list[Event], fresh: bool,
              declared: list[tuple[str, str]] | None = None) -> list[Event]:
    """Mostly well-ordered input: ThreadStarted first for a new thread, turns opened
    before messages. The backends still see plenty of out-of-order input."""
    out: list[Event] = [start(thread_id, declared or [])] if fresh else []
    for ev in events:
        if isinstance(ev, MessageRecorded) and not any(type(e).__name__ == "AgentTurnStarted" for e in out):
            out.append(agent_start())
        out.append(ev)
    return out


def head_view(h: Any) -> Any:
    return None if h is None else msgspec.structs.replace(h, created_ns=0, updated_ns=0)


class Differential(RuleBasedStateMachine):
    """The reference and one other backend, fed the same operations."""

    other_name = "lmdb"
    ids = itertools.count()

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="tplog-diff-", dir=TMP))
        clock = itertools.count(time.time_ns())
        self.ref = FACTORIES["memory"](self.dir, lambda: next(clock))
        self.other = FACTORIES[self.other_name](self.dir, lambda: next(clock))
        self.appends: list[list[ThreadAppend]] = []  # what was submitted, for retries

    appended = Bundle("appended")

    def teardown(self) -> None:
        self.ref.close()
        self.other.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------------ driving both

    def both(self, fn: Any) -> Any:
        outcomes = []
        for rec in (self.ref, self.other):
            try:
                outcomes.append(("ok", fn(rec)))
            except TplogError as exc:
                outcomes.append(("error", type(exc).__name__))
        ref, other = outcomes
        assert ref == other, f"reference: {ref!r}\n{self.other_name}: {other!r}"
        return ref

    def submit(self, parts: list[ThreadAppend]) -> None:
        self.appends.append(parts)
        self.both(lambda rec: rec.submit(parts).result(timeout=30))

    def new_ids(self, n: int) -> list[str]:
        return [f"ev-{next(self.ids)}" for _ in range(n)]

    def part(self, thread: str, scope: str | None, events: list[Event], expected: Any, own_ids: bool,
             checked: bool = False) -> ThreadAppend:
        ids = self.new_ids(len(events)) if own_ids else None
        return ThreadAppend(thread_id=thread, events=encode(events, ids), expected=expected, scope=scope,
                            fresh_ids=not own_ids, check_rules=checked)

    def expected_for(self, choice: str, thread: str, scope: str | None) -> Any:
        head = self.ref.head(thread, scope=scope)
        version = 0 if head is None else head.version
        return {"any": "any", "right": version, "wrong": version + 1, "no_stream": "no_stream",
                "exists": "exists"}[choice]

    # ------------------------------------------------------------------ rules

    @initialize()
    def seed(self) -> None:
        self.submit([self.part(THREADS[0], None, [started(THREADS[0])], "no_stream", own_ids=True)])

    @rule(thread=st.sampled_from(THREADS), scope=st.sampled_from(SCOPES),
          events=st.lists(event_strategy(), min_size=0, max_size=4), tidy=st.booleans(),
          expected=st.sampled_from(["any", "right", "right", "wrong", "no_stream", "exists"]),
          own_ids=st.booleans(), declared=DECLARED, checked=st.booleans())
    def append(self, thread: str, scope: str | None, events: list[Event], tidy: bool, expected: str,
               own_ids: bool, declared: list[tuple[str, str]], checked: bool) -> None:
        fresh = self.ref.head(thread, scope=scope) is None
        if tidy:
            evs = valid_run(thread, events, fresh, declared)
        else:
            evs = ([start(thread, declared)] if fresh else []) + events
        if not evs:
            evs = [user()]
        self.submit([self.part(thread, scope, evs, self.expected_for(expected, thread, scope), own_ids, checked)])

    @rule(threads=st.lists(st.sampled_from(THREADS), min_size=2, max_size=3, unique=True),
          scope=st.sampled_from(SCOPES), events=st.lists(event_strategy(), min_size=1, max_size=2),
          expected=st.sampled_from(["any", "right", "wrong"]), checked=st.booleans())
    def append_several(self, threads: list[str], scope: str | None, events: list[Event], expected: str,
                       checked: bool) -> None:
        parts = []
        for t in threads:
            fresh = self.ref.head(t, scope=scope) is None
            parts.append(self.part(t, scope, valid_run(t, events, fresh), self.expected_for(expected, t, scope),
                                   own_ids=True, checked=checked))
        self.submit(parts)

    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        """Resend an earlier append exactly (an idempotent retry when it had committed)."""
        if not self.appends:
            return
        parts = data.draw(st.sampled_from(self.appends))
        self.submit([msgspec.structs.replace(p, fresh_ids=False) for p in parts])

    @rule(data=st.data(), extra=st.lists(event_strategy(), min_size=1, max_size=2))
    def partial_retry(self, data: st.DataObject, extra: list[Event]) -> None:
        """Earlier ids followed by new ones: must be refused (or be new, if the first never committed)."""
        if not self.appends:
            return
        p = data.draw(st.sampled_from(self.appends))[0]
        more = encode(extra, self.new_ids(len(extra)))
        self.submit([ThreadAppend(thread_id=p.thread_id, events=p.events + more, scope=p.scope,
                                  check_rules=p.check_rules)])

    @rule(data=st.data())
    def foreign_id(self, data: st.DataObject) -> None:
        """An earlier id appended to another thread."""
        if not self.appends:
            return
        p = data.draw(st.sampled_from(self.appends))[0]
        other = data.draw(st.sampled_from([t for t in THREADS if t != p.thread_id]))
        ev = encode([user()], [p.events[0].event_id])
        self.submit([ThreadAppend(thread_id=other, events=ev, scope=p.scope, check_rules=p.check_rules)])

    @rule(thread=st.sampled_from(THREADS), scope=st.sampled_from(SCOPES))
    def delete(self, thread: str, scope: str | None) -> None:
        tomb = tombstone("test")
        self.both(lambda rec: rec.delete_thread(thread, tomb, scope=scope).result(timeout=30))

    @rule(names=st.sampled_from([["links"], ["state"], ["links", "state"]]), verify=st.booleans())
    def rebuild(self, names: list[str], verify: bool) -> None:
        self.both(lambda rec: [(r.projection, r.differences) for r in rec.rebuild(names, verify=verify)])

    # ------------------------------------------------------------------ every read, after every step

    @invariant()
    def same_reads(self) -> None:
        ref, other = self.reads(self.ref), self.reads(self.other)
        if ref != other:  # name the first read that differs
            for (what, a), (_, b) in zip(ref, other, strict=True):
                assert a == b, f"{what}:\nreference: {a!r}\n{self.other_name}: {b!r}"

    def reads(self, r: Recorder) -> list[tuple[str, Any]]:
        """Every read of the contract, each with its outcome (a value or an error type)."""
        out: list[tuple[str, Any]] = []

        def read(what: str, fn: Any, *args: Any, **kw: Any) -> None:
            try:
                out.append((what, fn(*args, **kw)))
            except TplogError as exc:
                out.append((what, type(exc).__name__))

        read("positions", r.positions)
        read("tracking", lambda: [(t.name, t.status, t.version, t.position) for t in r.tracking()])
        for scope in SCOPES:
            read(f"read_log {scope}", r.read_log, 0, scope=scope)
            read(f"read_log page {scope}", r.read_log, 0, after=2, limit=3, scope=scope)
            for include in (False, True):
                read(f"threads {scope} {include}", self.listing, r, scope, include)
            for t in THREADS:
                at = f"{t} {scope}"
                read(f"head {at}", lambda t, scope: head_view(r.head(t, scope=scope)), t, scope)
                read(f"read_thread {at}", r.read_thread, t, scope=scope)
                read(f"read_thread backward {at}", r.read_thread, t, scope=scope, direction="backward", after=3,
                     limit=2)
                read(f"read_thread page {at}", r.read_thread, t, scope=scope, after=1, limit=2)
                read(f"incoming {at}", r.incoming, t, scope=scope)
                read(f"incoming pages {at}", self.pages, r.incoming, t, scope)
                read(f"incoming spawned_from {at}", r.incoming, t, scope=scope, relation="spawned_from")
                read(f"children {at}", r.children, t, scope=scope)
                read(f"children pages {at}", self.pages, r.children, t, scope)
                read(f"thread_state {at}", r.thread_state, t, scope=scope)
                read(f"links {at}", r.links, t, scope=scope)
                read(f"descendants {at}", r.descendants, t, scope=scope)
        return out

    @staticmethod
    def listing(rec: Recorder, scope: str | None, include: bool) -> list[Any]:
        out: list[Any] = []
        after = None
        while True:
            page = rec.threads(scope=scope, after=after, limit=2, include_deleted=include)
            out += [head_view(h) for h in page.threads]
            if page.cursor is None:
                return out
            after = page.cursor

    @staticmethod
    def pages(verb: Any, thread: str, scope: str | None) -> list[Any]:
        """Every page of ``verb`` at one item per page, following ``after``."""
        out: list[Any] = []
        after = None
        for _ in range(50):
            page = verb(thread, scope=scope, after=after, limit=1)
            if not page:
                break
            out.append(page)
            after = page[-1]
        return out


def run(other: str, examples: int) -> None:
    machine = type(f"Differential_{other}", (Differential,), {"other_name": other})
    run_state_machine_as_test(machine, settings=settings(
        max_examples=examples, stateful_step_count=STEPS, deadline=None, derandomize=False,
        suppress_health_check=list(HealthCheck)))


@pytest.mark.parametrize("other", DIFFERENTIAL)
def test_backend_matches_reference(other: str, pytestconfig: pytest.Config) -> None:
    default = EXAMPLES if EXAMPLES_ENV else DIFF_EXAMPLES.get(other, EXAMPLES)
    run(other, SOAK_EXAMPLES if pytestconfig.getoption("--soak", default=False) else default)
