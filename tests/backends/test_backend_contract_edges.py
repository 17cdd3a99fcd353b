"""Edges of the backend contract, on every backend in FACTORIES: what a retry's and a
deletion's results name, the bounds of every argument checked, the head after a deletion,
who is a child of whom, and the copies a read hands out.

Written for the survivors of the memory backend's mutation run (tests/MUTANTS.md): the
contract suite passed with each of these changed in the reference backend.
"""

from __future__ import annotations

import threading
import time

import pytest
from conftest import agent_start, completed, link, register, response, spawn_message, started, user
from contract_helpers import (
    append,
    part,
    rec_fixture,  # noqa: F401  (the `rec` fixture)
    tid,
    tombstone,
)

from tplog.backends.common import thread_key
from tplog.backends.contract import Recorder
from tplog.errors import (
    IdempotencyError,
    InvalidInputError,
    NotFoundError,
    ThreadDeletedError,
    WrongExpectedVersionError,
)
from tplog.events import MessageRecorded
from tplog.projections.fold import ThreadState, items_from_events
from tplog.protocol import model as m


def test_a_retry_answers_as_the_original_append_did(rec: Recorder) -> None:
    a, b, c = tid(), tid(), tid()
    append(rec, part(a, [started(a)], ids=["a1"]))
    [first] = append(rec, part(b, [started(b), user()], ids=["b1", "b2"]))
    assert (first.thread_id, first.event_ids) == (b, ["b1", "b2"])
    [again] = append(rec, part(b, [started(b), user()], ids=["b1", "b2"]))
    assert again.duplicate
    # seqs 1-2 of b, at positions 2-3 when the store keeps one log
    assert (again.thread_id, again.first_seq, again.last_seq, again.event_ids) == (b, 1, 2, ["b1", "b2"])
    assert (again.first_position, again.last_position) == (first.first_position, first.last_position)
    # A retried part and a new part in one append: both answered, the new one written.
    results = append(rec, part(b, [started(b), user()], ids=["b1", "b2"]), part(c, [started(c)], ids=["c1"]))
    assert [(r.thread_id, r.duplicate, r.event_ids) for r in results] == [(b, True, ["b1", "b2"]),
                                                                             (c, False, ["c1"])]
    assert [e.event_id for e in rec.read_thread(c)] == ["c1"]


def test_refusals_name_the_thread_and_what_was_expected(rec: Recorder) -> None:
    a = tid()
    append(rec, part(a, [started(a)]))
    with pytest.raises(WrongExpectedVersionError) as exc:
        append(rec, part(a, [user()], expected=5))
    assert (exc.value.thread_id, exc.value.expected, exc.value.actual) == (a, 5, 1)
    rec.delete_thread(a, tombstone()).result(timeout=30)
    with pytest.raises(ThreadDeletedError, match=a):
        append(rec, part(a, [user()]))
    with pytest.raises(ThreadDeletedError, match=a):
        rec.delete_thread(a, tombstone()).result(timeout=30)
    unknown = tid()
    for call in (lambda: rec.delete_thread(unknown, tombstone()).result(timeout=30),
                 lambda: rec.read_thread(unknown), lambda: rec.incoming(unknown), lambda: rec.children(unknown),
                 lambda: rec.descendants(unknown)):
        with pytest.raises(NotFoundError, match=unknown):
            call()


def test_an_unknown_thread_is_not_found_though_other_threads_have_children(rec: Recorder) -> None:
    p, k, spawned = tid(), tid(), tid()
    append(rec, part(p, [started(p), agent_start(), spawn_message(spawned), completed()]))
    append(rec, part(k, [started(k), link(p, "spawned_from")]))
    assert rec.children(p) == sorted([k, spawned], key=thread_key)
    assert rec.children(spawned) == []  # named as spawned: known, though never stored
    for verb in (rec.incoming, rec.children, rec.descendants):
        with pytest.raises(NotFoundError):
            verb(tid())


def test_a_deleted_thread_is_nobodys_child_even_when_spawned_after_its_deletion(rec: Recorder) -> None:
    p, c = tid(), tid()
    append(rec, part(c, [started(c)]))
    rec.delete_thread(c, tombstone()).result(timeout=30)
    append(rec, part(p, [started(p), agent_start(), spawn_message(c), completed()]))
    assert rec.children(p) == [] and rec.descendants(p) == []


def test_deleting_a_thread_with_an_open_turn_leaves_a_closed_head(rec: Recorder) -> None:
    a = tid()
    append(rec, part(a, [started(a), register(), user(), agent_start()]))
    head = rec.head(a)
    assert head is not None and (head.open_turn_agent, head.open_turn_seq) == ("a1", 4)
    stone = tombstone("bye")
    res = rec.delete_thread(a, stone).result(timeout=30)
    assert (res.thread_id, res.first_seq, res.last_seq, res.event_ids) == (a, 5, 5, [stone.event_id])
    assert res.first_position == res.last_position == rec.positions()[rec.log_of(a)]
    head = rec.head(a)
    assert head is not None
    assert (head.status, head.version, head.last_position) == ("deleted", 5, res.last_position)
    assert (head.open_turn_agent, head.open_turn_seq, head.stored_bytes) == (None, 0, 0)


def test_a_thread_that_names_itself_its_parent_is_deleted(rec: Recorder) -> None:
    a = tid()
    append(rec, part(a, [started(a), link(a, "spawned_from")]))
    assert rec.children(a) == [a]
    rec.delete_thread(a, tombstone()).result(timeout=30)
    assert rec.children(a) == []


def test_read_log_takes_only_the_logs_it_keeps_and_stops_at_its_limit(rec: Recorder) -> None:
    a = tid()
    append(rec, part(a, [started(a), user(), user(), user()]))
    log = rec.log_of(a)
    assert [e.seq for e in rec.read_log(log, limit=2)] == [1, 2]
    assert [e.seq for e in rec.read_log(log, after=1, limit=1)] == [2]
    for bad in (-1, rec.logs, True, "0"):
        with pytest.raises(InvalidInputError, match="log"):
            rec.read_log(bad)  # type: ignore[arg-type]


def test_wait_without_a_timeout_is_woken_and_a_timeout_is_waited_out(rec: Recorder) -> None:
    zero = (0,) * rec.logs
    t0 = time.monotonic()
    assert rec.wait(zero, timeout=0.3) == zero
    assert time.monotonic() - t0 >= 0.3
    a = tid()
    timer = threading.Timer(0.05, lambda: append(rec, part(a, [started(a)])))
    timer.start()
    got = rec.wait(zero, timeout=None)
    timer.join()
    assert sum(got) == 1


def test_threads_takes_a_positive_int_limit_and_pages_by_fifty(rec: Recorder) -> None:
    for bad in (0, -1):  # (the memory backend also refuses a bool or a str: test_memory_recorder.py)
        with pytest.raises(InvalidInputError, match="limit"):
            rec.threads(limit=bad)
    ts = [tid() for _ in range(51)]
    for t in ts:
        append(rec, part(t, [started(t)]))
    page = rec.threads()
    assert len(page.threads) == 50 and page.cursor is not None
    one = rec.threads(limit=1)
    assert len(one.threads) == 1 and one.threads[0].thread_id == ts[-1]
    assert [h.thread_id for h in rec.threads(after=one.cursor, limit=1).threads] == [ts[-2]]


def test_descendants_visit_each_thread_once_through_a_cycle(rec: Recorder) -> None:
    a, b, c = tid(), tid(), tid()
    append(rec, part(a, [started(a), agent_start(), spawn_message(b), completed()]))
    append(rec, part(b, [started(b), agent_start(), spawn_message(c), completed()]))
    append(rec, part(c, [started(c), agent_start(), spawn_message(b), completed()]))
    assert rec.descendants(a, max_depth=10) == [(b, 1), (c, 2)]


def test_thread_events_after_the_end_or_by_default_give_every_event(rec: Recorder) -> None:
    a = tid()
    evs = [started(a), user(), agent_start(), response()]
    append(rec, part(a, evs))
    for kw in ({}, {"after": 99}, {"after": 0}):
        head, got = rec.thread_events(a, **kw)  # type: ignore[arg-type]
        assert head.version == 4 and got == evs, kw
    assert rec.thread_events(a, after=2)[1] == evs[2:]


def test_items_are_the_fold_items_of_the_events(rec: Recorder) -> None:
    a = tid()
    call = m.ToolCallPart(tool_name="f", tool_call_id="c1", args={})
    evs = [started(a), user(), agent_start(),
           MessageRecorded(message=m.ResponseMessage(timestamp="t", agent_id="a1", parts=[call])), completed()]
    append(rec, part(a, evs))
    # (an Item's event matters only at turn boundaries: backends may drop it elsewhere)
    assert [(i.seq, i.kind, i.facts) for i in rec.items(a)] == [
        (i.seq, i.kind, i.facts) for i in items_from_events(evs)]


def test_thread_state_hands_out_a_copy(rec: Recorder) -> None:
    a = tid()
    call = m.ToolCallPart(tool_name="f", tool_call_id="c1", args={})
    append(rec, part(a, [started(a), user(), agent_start(),
                         MessageRecorded(message=m.ResponseMessage(timestamp="t", agent_id="a1", parts=[call]))]))
    st = rec.thread_state(a)
    assert st is not None and list(st.open_calls) == ["c1"]
    st.open_calls.clear()
    st.turn_calls.append("x")
    again = rec.thread_state(a)
    assert again is not None and list(again.open_calls) == ["c1"] and "x" not in again.turn_calls


def test_the_state_of_a_deleted_thread_is_empty(rec: Recorder) -> None:
    a = tid()
    append(rec, part(a, [started(a), user(), agent_start()]))
    rec.delete_thread(a, tombstone()).result(timeout=30)
    assert rec.thread_state(a) == ThreadState()


def test_idempotency_refusals_name_the_ids(rec: Recorder) -> None:
    a, b = tid(), tid()
    append(rec, part(a, [started(a), user()], ids=["e1", "e2"]))
    append(rec, part(b, [started(b)], ids=["b1"]))
    with pytest.raises(IdempotencyError, match=r"e2"):
        append(rec, part(a, [user(), user()], ids=["e2", "e3"]))
    with pytest.raises(IdempotencyError, match=r"b1"):
        append(rec, part(a, [user()], ids=["b1"]))
    with pytest.raises(IdempotencyError, match=r"e2"):
        append(rec, part(a, [user(), started(a)], ids=["e2", "e1"]))
