"""The LMDB recorder's append paths seen from outside (tplog/backends/lmdb/recorder.py).

Written for the surviving mutants of tests/MUTANTS.md (recorder.py): the group-commit counters,
a handle after an engine failure, close() stopping the async leader and refusing appends while
pending ones drain, multi-thread appends (positions, rules), the idempotency errors' messages,
the writer cache after another writer's commit, and a fork's history read by the rules.

A group commit that fails outside the engine (tplog/backends/lmdb/recorder.py ``_lead``).

Found reviewing recorder.py's surviving mutants (tests/MUTANTS.md): the leader re-raised such a
failure, which ended the lead with async appends still queued behind the group (no thread took
it: they and every later append hung), in the async leader's thread ended that thread (every
later async append hung), and failed a leader whose own append had committed. The failure is
the error of the failed group's appends only.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from backends.contract_helpers import append, part
from protocol.documents import T0, _agent_turn, _new_thread_events, _user_answer, ts

from tplog.backends.contract import ANY, NO_STREAM
from tplog.backends.lmdb import LmdbRecorder
from tplog.backends.lmdb.keys import event_key, tkey
from tplog.errors import (
    CorruptionError,
    IdempotencyError,
    InvalidEventError,
    InvalidInputError,
    StorageFullError,
    StoreClosedError,
    WrongExpectedVersionError,
)
from tplog.events import AgentTurnCompleted, AgentTurnStarted, MessageRecorded, ThreadStarted, UserTurnSubmitted
from tplog.protocol import model as m
from tplog.store import Store


def _tid() -> str:
    return str(uuid.uuid4())


def _start(tid: str) -> ThreadStarted:
    return ThreadStarted(thread_id=tid, created_at=T0)


def _user(text: str) -> UserTurnSubmitted:
    return UserTurnSubmitted(turn=m.UserTurn(submitted_at=T0, parts=[m.UserPromptPart(content=text)]))


@pytest.fixture
def rec(tmp_path: Path) -> LmdbRecorder:
    r = LmdbRecorder(tmp_path / "s", auto_dictionary=0)
    yield r
    r.close()


# --------------------------------------------------------------------------- group commit


def test_stats_count_each_group_commit_and_its_appends(rec: LmdbRecorder) -> None:
    a, b, c = _tid(), _tid(), _tid()
    first = rec.submit([part(a, [_start(a)])])  # leads: nothing commits until its result() is asked
    second = rec.submit([part(b, [_start(b)])])
    assert not first.done() and not second.done()
    assert first.result(timeout=30)[0].last_position == 1
    assert second.result(timeout=30)[0].last_position == 2
    assert rec.stats()["group_commit"] == {"commits": 1, "appends": 2, "mean_group": 2.0}
    append(rec, part(c, [_start(c)]))
    assert rec.stats()["group_commit"] == {"commits": 2, "appends": 3, "mean_group": 1.5}


def test_an_append_the_engine_failed_is_done_and_raises(tmp_path: Path) -> None:
    rec = LmdbRecorder(tmp_path / "s", auto_dictionary=0, map_size=64 * 1024, max_map_size=128 * 1024)
    try:
        tid = _tid()
        append(rec, part(tid, [_start(tid)]))
        big = [_user(os.urandom(6000).hex()) for _ in range(8)]  # incompressible, over the map's room
        handle = rec.submit([part(tid, big)])
        with pytest.raises(StorageFullError):
            handle.result(timeout=30)
        assert handle.done()
        assert rec.head(tid).version == 1
        assert rec.stats()["group_commit"]["commits"] == 1  # the failed group is not counted
    finally:
        rec.close()


# --------------------------------------------------------------------------- close


def _async_leaders() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "tplog-async-leader"}


def test_close_stops_the_async_leader_thread(rec: LmdbRecorder) -> None:
    before = _async_leaders()
    tid = _tid()
    fut = rec.submit([part(tid, [_start(tid)])], lead=False)
    assert fut.result(timeout=30)[0].last_seq == 1
    (leader,) = _async_leaders() - before
    rec.close()
    assert not leader.is_alive()  # joined by close(), not left waiting for work
    with pytest.raises(StoreClosedError):
        rec.submit([part(_tid(), [_start(_tid())])], lead=False)


def test_closing_refuses_new_appends_while_the_pending_ones_finish(rec: LmdbRecorder) -> None:
    a, b = _tid(), _tid()
    pending = rec.submit([part(a, [_start(a)])])  # queued, its caller leads later
    closer = threading.Thread(target=rec.close)
    closer.start()
    try:
        deadline = time.monotonic() + 10
        while True:  # close() marks the store closed at once, then waits for the queue
            try:
                rec.head(a)
            except StoreClosedError:
                break
            assert time.monotonic() < deadline, "close() did not mark the store closed"
            time.sleep(0.01)
        assert closer.is_alive()  # still waiting for the pending append
        with pytest.raises(StoreClosedError, match="cannot use the store, as it has been closed"):
            rec.submit([part(b, [_start(b)])])
    finally:
        assert pending.result(timeout=30)[0].last_seq == 1  # pending appends finish first
        closer.join(30)
    assert not closer.is_alive()
    reopened = LmdbRecorder(rec.path, auto_dictionary=0)
    try:
        assert reopened.head(a).version == 1 and reopened.head(b) is None
    finally:
        reopened.close()


# --------------------------------------------------------------------------- several threads in one append


def test_a_two_thread_append_on_an_empty_store_starts_the_log_at_1(rec: LmdbRecorder) -> None:
    a, b = _tid(), _tid()
    res = append(rec, part(a, [_start(a)]), part(b, [_start(b), _user("x")]))
    assert [(r.thread_id, r.first_position, r.last_position) for r in res] == [(a, 1, 1), (b, 2, 3)]
    assert rec.last_position == 3


def test_a_two_thread_append_checks_the_rules_only_when_asked(rec: LmdbRecorder) -> None:
    a, b = _tid(), _tid()
    unregistered = AgentTurnStarted(agent_id="nobody", started_at=T0)  # breaks a validation rule only
    with pytest.raises(InvalidEventError) as ei:
        append(rec, part(a, [_start(a)]), part(b, [_start(b), unregistered], check_rules=True))
    assert (ei.value.thread_id, ei.value.seq) == (b, 2)
    assert rec.head(a) is None and rec.head(b) is None  # all or nothing
    res = append(rec, part(a, [_start(a)]), part(b, [_start(b), unregistered], check_rules=False))
    assert [r.last_seq for r in res] == [1, 2]


# --------------------------------------------------------------------------- idempotency errors


def test_a_retry_with_only_some_ids_stored_names_them(rec: LmdbRecorder) -> None:
    tid = _tid()
    append(rec, part(tid, [_start(tid), _user("a")], ids=["e1", "e2"]))
    with pytest.raises(IdempotencyError) as ei:
        append(rec, part(tid, [_user("a"), _user("b"), _user("c")], ids=["e2", "e3", "e1"]))
    assert str(ei.value) == (
        f"thread {tid}: event ids ['e2', 'e1'] are already stored but the others of this append are not; "
        "an idempotent retry must resend exactly the original events")


def test_a_retry_of_stored_ids_in_another_order_is_refused_with_the_ids(rec: LmdbRecorder) -> None:
    tid = _tid()
    append(rec, part(tid, [_start(tid), _user("a")], ids=["e1", "e2"]))
    with pytest.raises(IdempotencyError) as ei:
        append(rec, part(tid, [_start(tid), _user("a")][::-1], ids=["e2", "e1"]))
    assert str(ei.value) == (f"thread {tid}: event ids ['e2', 'e1'] are stored, "
                             "but not as one contiguous append in this order")
    res = append(rec, part(tid, [_start(tid), _user("a")], ids=["e1", "e2"]))
    assert (res[0].duplicate, res[0].first_seq, res[0].last_seq, res[0].first_position) == (True, 1, 2, 1)


# --------------------------------------------------------------------------- the writer cache


def test_a_commit_by_another_writer_in_between_is_not_hidden_by_the_writer_cache(tmp_path: Path) -> None:
    """The cache of this recorder's last commit holds only while the next write transaction
    directly follows it; another recorder's commit in between must be read."""
    one = LmdbRecorder(tmp_path / "s", auto_dictionary=0)
    two = LmdbRecorder(tmp_path / "s", auto_dictionary=0)
    try:
        tid = _tid()
        append(one, part(tid, [_start(tid)]))
        append(two, part(tid, [_user("from two")]))
        res = append(one, part(tid, [_user("from one")], expected=ANY))
        assert (res[0].first_seq, res[0].first_position) == (3, 3)
        assert [type(e).__name__ for e in one.thread_events(tid)[1]] == ["ThreadStarted", "UserTurnSubmitted",
                                                              "UserTurnSubmitted"]
    finally:
        two.close()
        one.close()


# --------------------------------------------------------------------------- a fork's history for the rules


def _fork_with_calls(store: Store) -> tuple[str, str]:
    """A parent whose agent turn left call ``d1`` open, and a fork of it that has since
    left call ``d2`` open in a turn of its own."""
    parent = _tid()
    store.append(parent, _new_thread_events(parent))
    store.append(parent, _agent_turn(["d1"], [], at=10))
    fork = store.fork(parent, store.head(parent).version).thread_id
    store.append(fork, _agent_turn(["d2"], [], at=20))
    return parent, fork


def test_a_fork_answers_calls_of_its_own_and_of_its_parents_prefix(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as store:
        _parent, fork = _fork_with_calls(store)
        store.append(fork, [_user_answer("d2", 30)])  # its own call, appended after the fork
        store.append(fork, [_user_answer("d1", 31)])  # its parent's call, in the prefix
        with pytest.raises(InvalidEventError) as ei:
            store.append(fork, [_user_answer("d9", 32)])
        assert (ei.value.rule, ei.value.thread_id) == ("v3.2-tool-call-id", fork)


def test_a_fork_does_not_answer_the_calls_of_threads_stored_after_it(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as store:
        _parent, fork = _fork_with_calls(store)
        after = None
        while after is None:  # a thread whose rows sort after the fork's
            other = _tid()
            store.append(other, _new_thread_events(other))
            store.append(other, _agent_turn(["x1"], [], at=40))
            if tkey(other, None) > tkey(fork, None):
                after = other
        with pytest.raises(InvalidEventError) as ei:
            store.append(fork, [_user_answer("x1", 50)])
        assert (ei.value.rule, ei.value.thread_id) == ("v3.2-tool-call-id", fork)


def test_a_fork_reads_its_large_events_for_the_rules(tmp_path: Path) -> None:
    """Bodies over the blob threshold are stored apart: the rules' read of the fork's
    history must fetch them in the write transaction."""
    with Store(tmp_path / "s") as store:
        parent = _tid()
        store.append(parent, _new_thread_events(parent))
        fork = store.fork(parent, store.head(parent).version).thread_id
        big = "y" * (300 << 10)  # over the 256 KiB blob threshold
        store.append(fork, [AgentTurnStarted(agent_id=_new_thread_events(parent)[1].agent.agent_id,
                                             started_at=ts(20)),
                            MessageRecorded(message=m.ResponseMessage(
                                timestamp=ts(21), agent_id=_new_thread_events(parent)[1].agent.agent_id,
                                parts=[m.TextPart(content=big), m.ToolCallPart(tool_name="f", tool_call_id="b1",
                                                                              args={})]))])
        store.append(fork, _agent_turn([], [], at=30)[-1:])  # completes the turn
        store.append(fork, [_user_answer("b1", 40)])
        assert store.head(fork).version == 6


# --------------------------------------------------------------------------- one group, several appends


class _QueuesDuringCommit(LmdbRecorder):
    """Runs ``during`` at the start of its next group's commit (the group already taken from the queue)."""

    during: Any = None

    def _commit(self, batch: list[Any]) -> None:
        during, self.during = self.during, None
        if during is not None:
            during(self)
        super()._commit(batch)


def test_an_async_append_queued_during_a_commit_is_committed_by_that_leader(tmp_path: Path) -> None:
    rec = _QueuesDuringCommit(tmp_path / "s", auto_dictionary=0)
    try:
        a, b = _tid(), _tid()
        later: list[Any] = []
        rec.during = lambda r: later.append(r.submit([part(b, [_start(b)])], lead=False))
        assert append(rec, part(a, [_start(a)]))[0].last_position == 1
        assert later[0].result(timeout=30)[0].last_position == 2
    finally:
        rec.close()


def test_two_appends_to_one_thread_in_one_group_after_a_commit_of_it(rec: LmdbRecorder) -> None:
    tid = _tid()
    append(rec, part(tid, [_start(tid)]))  # the writer cache now holds its head
    first = rec.submit([part(tid, [_user("a")])])
    second = rec.submit([part(tid, [_user("b")])])
    assert [r.first_seq for r in first.result(timeout=30)] == [2]
    assert [r.first_seq for r in second.result(timeout=30)] == [3]
    assert rec.stats()["group_commit"]["commits"] == 2  # the two went in one group
    head, events = rec.thread_events(tid)
    assert head.version == 3 and [e.turn.parts[0].content for e in events[1:]] == ["a", "b"]


# --------------------------------------------------------------------------- thread ids that share a key


def test_a_thread_id_whose_key_collides_with_a_stored_one_is_refused(rec: LmdbRecorder) -> None:
    other = "not-a-uuid"  # keyed by a hash: the UUID with those 16 bytes has the same key
    same_key = str(uuid.UUID(bytes=tkey(other, None)))
    assert tkey(same_key, None) == tkey(other, None)
    append(rec, part(other, [_start(other)]))
    with pytest.raises(InvalidInputError) as ei:
        append(rec, part(same_key, [_user("x")]))
    assert str(ei.value) == f"thread id {same_key!r} collides with stored thread {other!r}"
    assert rec.head(other).version == 1


def test_a_uuid_spelled_in_another_case_is_the_same_thread(rec: LmdbRecorder) -> None:
    tid = _tid()
    append(rec, part(tid, [_start(tid)]))
    res = append(rec, part(tid.upper(), [_user("x")]))
    assert (res[0].thread_id, res[0].first_seq) == (tid.upper(), 2)
    assert rec.head(tid).version == 2 and rec.head(tid).thread_id == tid


# --------------------------------------------------------------------------- rows kept beside the events


def _entries(rec: LmdbRecorder, table: str) -> int:
    return int(rec.stats()["tables"][table]["entries"])


def test_a_head_rewrite_replaces_its_finder_entries(rec: LmdbRecorder) -> None:
    tid = _tid()
    append(rec, part(tid, [_start(tid)]))
    entries = _entries(rec, "finder")
    assert entries > 0
    for i in range(3):
        time.sleep(0.001)  # another update time: other keys
        append(rec, part(tid, [_user(str(i))]))
        assert _entries(rec, "finder") == entries  # the old head's entries went
    assert _entries(rec, "updated") == 1


def test_stored_bytes_add_up_the_values_whatever_the_appends(rec: LmdbRecorder) -> None:
    """One thread gets three events in one append, another the same three one by one:
    equal sizes (ids of one length, one recorded_at), so equal ``stored_bytes``."""
    a, b = _tid(), _tid()
    events = [_user("one"), _user("two"), _user("three")]
    append(rec, part(a, [_start(a)], now=1))
    append(rec, part(b, [_start(b)], now=1))
    single = rec.head(a).stored_bytes
    assert single == rec.head(b).stored_bytes and single > 0
    append(rec, part(a, events, now=1))
    for ev in events:
        append(rec, part(b, [ev], now=1))
    head_a, head_b = rec.head(a), rec.head(b)
    assert head_a.stored_bytes == head_b.stored_bytes
    assert head_a.stored_bytes > single + 3 * 20  # each value counted, at least its id and body


def test_the_state_row_folds_on_from_the_stored_one(tmp_path: Path) -> None:
    """A reopened recorder (no writer cache) and one group holding two appends of the
    thread both go on from the stored state row (here: a call left open), as one recorder
    appending alone does."""
    tid = _tid()
    first = [*_new_thread_events(tid), *_agent_turn(["d1"], [], at=10)]
    then = [[_user("b")], [_user("x")], [_user("c")], [_user("y")]]

    straight = LmdbRecorder(tmp_path / "straight", auto_dictionary=0)
    try:
        for events in [first, *then]:
            append(straight, part(tid, events, now=1))
        expected = straight.thread_state(tid)
    finally:
        straight.close()

    rec = LmdbRecorder(tmp_path / "reopened", auto_dictionary=0)
    append(rec, part(tid, first, now=1))
    rec.close()
    rec = LmdbRecorder(tmp_path / "reopened", auto_dictionary=0)
    try:
        append(rec, part(tid, then[0], now=1))  # the state row read from the table
        append(rec, part(tid, then[1], now=1))  # now in the writer cache...
        one = rec.submit([part(tid, then[2], now=1)])  # ...and a group of two appends of it
        two = rec.submit([part(tid, then[3], now=1)])
        assert [one.result(timeout=30)[0].last_seq, two.result(timeout=30)[0].last_seq] == [8, 9]
        state = rec.thread_state(tid)
    finally:
        rec.close()
    assert expected is not None and "d1" in expected.open_calls
    assert state == expected


def test_a_long_open_turn_is_compacted_every_32_events(rec: LmdbRecorder) -> None:
    """Bodies are appended raw: an open turn's events become chunks each time the thread
    crosses a multiple of 32 events, before the turn closes."""
    tid = _tid()
    agent = _new_thread_events(tid)[1].agent.agent_id
    append(rec, part(tid, [*_new_thread_events(tid), AgentTurnStarted(agent_id=agent, started_at=ts(1))]))
    for i in range(29):  # seqs 4..32: the 32nd crosses
        msg = m.ResponseMessage(timestamp=ts(2), agent_id=agent, parts=[m.TextPart(content=f"m{i}")])
        append(rec, part(tid, [MessageRecorded(message=msg)]))
    assert rec.head(tid).version == 32 and rec.head(tid).open_turn_agent == agent
    assert _entries(rec, "global") == 32
    assert _entries(rec, "events") < 32  # compacted although the turn is open


def test_a_damaged_event_read_for_the_rules_is_named_by_thread_and_seq(rec: LmdbRecorder) -> None:
    """A head written without the rules' values gets them from the thread's events at the
    next checked append: a damaged event met there names its thread and seq."""
    tid = _tid()
    append(rec, part(tid, [_start(tid), _user("hello")], check_rules=False))
    key = event_key(tkey(tid, None), 2)
    with rec.engine.read() as txn:
        value = bytearray(txn.get("events", key))
    value[-6] ^= 0xFF  # a body byte: only its CRC tells
    rec.engine.run_write(lambda txn: txn.put("events", key, bytes(value)))
    with pytest.raises(CorruptionError) as ei:
        append(rec, part(tid, [_user("again")], check_rules=True))
    assert (ei.value.thread_id, ei.value.seq) == (tid, 2)
    assert rec.head(tid).version == 2


# --------------------------------------------------------------------------- async appends (a background leader)


def test_an_async_append_keeps_its_scope_expected_version_and_rules(rec: LmdbRecorder) -> None:
    tid = _tid()

    def submit(*events: Any, **kw: Any) -> list[Any]:
        return list(rec.submit([part(tid, list(events), **kw)], lead=False).result(timeout=30))

    res = submit(_start(tid), scope="acme", expected=NO_STREAM)
    assert (res[0].thread_id, res[0].first_seq, res[0].last_position) == (tid, 1, 1)
    assert rec.head(tid, scope="acme").version == 1 and rec.head(tid) is None
    with pytest.raises(WrongExpectedVersionError):
        submit(_user("x"), scope="acme", expected=5)
    unregistered = AgentTurnStarted(agent_id="nobody", started_at=T0)  # breaks a validation rule only
    with pytest.raises(InvalidEventError) as ei:
        submit(unregistered, scope="acme", check_rules=True)
    assert (ei.value.thread_id, ei.value.seq) == (tid, 2)
    assert submit(unregistered, scope="acme", check_rules=False)[0].last_seq == 2
    done = AgentTurnCompleted(completed_at=T0)
    assert submit(done, scope="acme", ids=["e-1"])[0].duplicate is False
    again = submit(done, scope="acme", ids=["e-1"])[0]
    assert (again.duplicate, again.first_seq) == (True, 3)
    assert rec.head(tid, scope="acme").version == 3


@pytest.mark.parametrize("value", [-1, True, 2.0, "5"])
def test_auto_dictionary_must_be_an_int_of_at_least_zero(tmp_path: Path, value: Any) -> None:
    with pytest.raises(InvalidInputError) as ei:
        LmdbRecorder(tmp_path / "s", auto_dictionary=value)
    assert str(ei.value) == f"auto_dictionary must be an int ≥ 0 (events), not {value!r}"
    assert not (tmp_path / "s").exists()  # refused before the store is opened
    LmdbRecorder(tmp_path / "s", auto_dictionary=0).close()


# ------------------------------------------------------------------------- a group commit that fails outside the engine


class _FailsOnce(LmdbRecorder):
    """The first group's commit raises outside the engine; ``during`` runs just before."""

    during: Any = None
    failed = False

    def _commit(self, batch: list[Any]) -> None:
        if not self.failed:
            self.failed = True
            if self.during is not None:
                self.during(self)
            raise RuntimeError("boom")
        super()._commit(batch)


def _close(rec: LmdbRecorder) -> None:
    """Close in a thread of its own: on the old code the lead was never released and close() waited forever."""
    t = threading.Thread(target=rec.close, daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive(), "close() waits for a lead no thread holds"


def test_async_appends_queued_behind_a_failed_group_are_committed(tmp_path: Path) -> None:
    later: list[Any] = []
    rec = _FailsOnce(tmp_path / "s", auto_dictionary=0)
    rec.during = lambda r: later.append(r.submit([part(b, [_start(b)])], lead=False))
    try:
        a, b, c = _tid(), _tid(), _tid()
        handle = rec.submit([part(a, [_start(a)])])
        with pytest.raises(RuntimeError, match="boom"):
            handle.result(timeout=30)
        assert handle.done()
        assert later[0].result(timeout=30)[0].last_position == 1  # queued during the failed commit
        done: list[Any] = []
        t = threading.Thread(target=lambda: done.append(rec.submit([part(c, [_start(c)])]).result(timeout=30)))
        t.start()
        t.join(30)
        assert done and done[0][0].last_position == 2  # the lead was released
        assert rec.head(a) is None and rec.head(b).version == 1
    finally:
        _close(rec)


def test_the_async_leader_lives_on_after_a_failed_group(tmp_path: Path) -> None:
    rec = _FailsOnce(tmp_path / "s", auto_dictionary=0)
    try:
        a, b = _tid(), _tid()
        with pytest.raises(RuntimeError, match="boom"):
            rec.submit([part(a, [_start(a)])], lead=False).result(timeout=30)
        assert rec.submit([part(b, [_start(b)])], lead=False).result(timeout=30)[0].last_position == 1
        assert rec.head(a) is None
    finally:
        _close(rec)


class _SecondFails(LmdbRecorder):
    """The first group queues an async append during its (good) commit; the next group fails."""

    later: Any = None
    commits = 0

    def _commit(self, batch: list[Any]) -> None:
        self.commits += 1
        if self.commits == 1:
            b = _tid()
            self.later = self.submit([part(b, [_start(b)])], lead=False)
        elif self.commits == 2:
            raise RuntimeError("boom")
        super()._commit(batch)


def test_a_leader_whose_append_committed_is_not_failed_by_the_next_group(tmp_path: Path) -> None:
    rec = _SecondFails(tmp_path / "s", auto_dictionary=0)
    try:
        a = _tid()
        assert rec.submit([part(a, [_start(a)])]).result(timeout=30)[0].last_position == 1
        with pytest.raises(RuntimeError, match="boom"):
            rec.later.result(timeout=30)  # only the failed group's append has its error
        assert rec.head(a).version == 1
    finally:
        _close(rec)
