"""The PostgreSQL recorder's append rows, against a real server: an idempotent retry's exact result
(three events, alone or batched with the original), the exact IdempotencyError messages, a head's
stored bytes against the rows, the state projection carried across appends, a blob-stored body.

Written for the surviving mutants of tplog/backends/postgres/recorder.py's append path
(tests/MUTANTS.md). All in-process, so mutmut's mutants reach them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import psycopg
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "backends"))
from conftest import agent_start, completed, response, started, user
from contract_helpers import append, part
from protocol.documents import _agent_turn, _new_thread_events, _user_answer

from tplog.backends.postgres import PostgresRecorder
from tplog.errors import IdempotencyError, WrongExpectedVersionError

from .test_pg_append_plan import _names, batched, rec, rec1, rows, tid

__all__ = ["rec", "rec1"]  # the fixtures, shared with the plan's tests


def res_tuple(r: object) -> tuple[object, ...]:
    return tuple(getattr(r, k) for k in ("thread_id", "first_seq", "last_seq", "first_position", "last_position",
                                         "event_ids", "duplicate"))


def test_a_retry_of_three_events_returns_the_originals_seqs_and_positions(rec: PostgresRecorder) -> None:
    a, b = tid(), tid()
    append(rec, part(b, [started(b)]))
    ids = [f"{a}-{i}" for i in range(3)]
    [first] = append(rec, part(a, [started(a), user(), user()], ids=ids))
    before = rows(rec)
    [again] = append(rec, part(a, [started(a), user(), user()], ids=ids))
    assert res_tuple(first) == (a, 1, 3, 2, 4, ids, False)
    assert res_tuple(again) == (a, 1, 3, 2, 4, ids, True)
    assert rows(rec) == before


def test_a_retry_batched_with_its_original_returns_the_originals_result(pg_dsn: str, rec1: PostgresRecorder) -> None:
    """The second submission's ids are found among the batch's own rows, not in the table."""
    a = tid()
    ids = [f"{a}-{i}" for i in range(3)]
    [first], [again] = batched(pg_dsn, rec1, [part(a, [started(a), user(), user()], ids=ids)],
                               [part(a, [started(a), user(), user()], ids=ids)])
    assert res_tuple(first) == (a, 1, 3, 2, 4, ids, False)  # position 1: batched()'s own first append
    assert res_tuple(again) == (a, 1, 3, 2, 4, ids, True)
    assert [(t, s) for t, s, _ in rows(rec1) if t == a] == [(a, 1), (a, 2), (a, 3)]


def test_a_retry_with_some_ids_stored_is_refused_with_the_exact_message(rec: PostgresRecorder) -> None:
    a = tid()
    append(rec, part(a, [started(a), user()], ids=["e1", "e2"]))
    before = rows(rec)
    with pytest.raises(IdempotencyError) as info:
        append(rec, part(a, [user(), user()], ids=["e2", "e3"]))
    assert str(info.value) == (f"thread {a}: event ids ['e2'] are already stored but the others of this append are "
                               "not; an idempotent retry must resend exactly the original events")
    with pytest.raises(IdempotencyError) as info:
        append(rec, part(a, [user(), user()], ids=["e2", "e1"]))
    assert str(info.value) == (f"thread {a}: event ids ['e2', 'e1'] are stored, but not as one contiguous "
                               "append in this order")
    assert rows(rec) == before


def test_a_heads_stored_bytes_are_its_rows_value_bytes(pg_dsn: str, rec: PostgresRecorder) -> None:
    a = tid()
    append(rec, part(a, [started(a), user("x" * 300), user()]))
    append(rec, part(a, [user()]))
    head = rec.head(a)
    with psycopg.connect(pg_dsn) as c:
        [(total,)] = c.execute(f"SELECT sum(length(value)) FROM {rec.schema}.events".encode()).fetchall()
    assert head is not None and head.stored_bytes == total > 0


def test_the_state_projection_carries_over_from_one_append_to_the_next(rec: PostgresRecorder) -> None:
    """The state row read back and fed the next append's events equals the fold of all of them at once."""
    a, c = tid(), tid()
    evs = [started(a), user(), agent_start(), response(), completed(), user(), agent_start()]
    append(rec, part(a, evs[:4]))
    append(rec, part(a, evs[4:]))
    append(rec, part(c, [started(c), *evs[1:]]))
    state, whole = rec.thread_state(a), rec.thread_state(c)
    assert state is not None and state == whole and state.turn == whole.turn  # type: ignore[union-attr]
    assert state.seq == 7 and state.agent == "a1"


def test_a_blob_stored_body_is_written_and_read_back(pg_dsn: str, rec: PostgresRecorder) -> None:
    a = tid()
    text = os.urandom(150_000).hex()  # past the codec's blob threshold
    append(rec, part(a, [started(a), user(text)]))
    with psycopg.connect(pg_dsn) as c:
        [(n,)] = c.execute(f"SELECT count(*) FROM {rec.schema}.blobs".encode()).fetchall()
    assert n == 1
    [_, ev] = rec.read_thread(a)
    assert ev.event.turn.parts[0].content == text  # type: ignore[attr-defined]


def test_a_heads_created_time_is_its_first_appends_and_updated_its_last(pg_dsn: str) -> None:
    name = f"pb{os.getpid()}_{next(_names)}"
    now = iter(range(1000, 2000, 100))
    rec = PostgresRecorder(pg_dsn, schema=name, clock=lambda: next(now))
    try:
        a = tid()
        append(rec, part(a, [started(a)]))
        append(rec, part(a, [user()]))
        head = rec.head(a)
        assert head is not None and (head.created_ns, head.updated_ns) == (1000, 1100)
    finally:
        rec.close()
        with psycopg.connect(pg_dsn, autocommit=True) as c:
            c.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE".encode())


def test_a_checked_appends_state_carries_over_from_the_stored_state(rec: PostgresRecorder) -> None:
    """With the rules on, the state row is read for them, fed the append's events and written back."""
    a, c = tid(), tid()
    turn = _agent_turn(["c1"], [], at=2, end="complete")
    append(rec, part(a, _new_thread_events(a), check_rules=True))
    append(rec, part(a, turn, check_rules=True))
    append(rec, part(a, [_user_answer("c1", 5)], check_rules=True))
    append(rec, part(c, [*_new_thread_events(c), *turn, _user_answer("c1", 5)]))
    state, whole = rec.thread_state(a), rec.thread_state(c)
    assert state is not None and state == whole


def test_a_refused_append_to_a_new_thread_leaves_no_head_row(pg_dsn: str, rec: PostgresRecorder) -> None:
    """The batch locks a new thread by inserting an empty head row; a refused append removes it."""
    a, b = tid(), tid()
    append(rec, part(b, [started(b)]))
    with pytest.raises(WrongExpectedVersionError):
        append(rec, part(a, [started(a)], expected=3), part(b, [user()]))
    with pytest.raises(WrongExpectedVersionError):  # alone in its batch too
        append(rec, part(a, [started(a)], scope="s1", expected="exists"))
    with psycopg.connect(pg_dsn) as c:
        heads = c.execute(f"SELECT thread_id, scope, head IS NULL FROM {rec.schema}.heads".encode()).fetchall()
    assert heads == [(b, "", False)]
