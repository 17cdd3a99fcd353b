"""Why the PostgreSQL backend numbers a log with a counter row, not a sequence (issue: PostgreSQL backend).

A catch-up reader polls ``position > cursor`` and moves its cursor to the highest position it saw.
With positions from a sequence, a transaction can take position N, then commit after another
transaction took N+1: a reader that saw N+1 moves past N and never sees it. A counter row
updated in the appending transaction is locked until that transaction commits, so positions
commit in order and a reader never passes one that is still to come. The sequence variant is the
negative control: the same check must catch it, or the check proves nothing.
"""

from __future__ import annotations

import random
import threading
import time

import psycopg
import pytest

WRITERS = 8
APPENDS = 60  # per writer


def _setup(dsn: str, table: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"DROP TABLE IF EXISTS {table}")
        c.execute(f"DROP SEQUENCE IF EXISTS {table}_seq")
        c.execute(f"CREATE TABLE {table} (log_id int NOT NULL, position bigint NOT NULL, writer int NOT NULL, "
                  "PRIMARY KEY (log_id, position))")
        c.execute(f"CREATE SEQUENCE {table}_seq")
        c.execute("CREATE TABLE IF NOT EXISTS order_logs (log_id int PRIMARY KEY, position bigint NOT NULL)")
        c.execute("DELETE FROM order_logs")
        c.execute("INSERT INTO order_logs VALUES (0, 0)")


def _writer(dsn: str, table: str, mode: str, seed: int, errors: list[BaseException]) -> None:
    rng = random.Random(seed)
    try:
        with psycopg.connect(dsn) as c:
            for _ in range(APPENDS):
                with c.transaction():
                    if mode == "sequence":
                        pos = c.execute(f"SELECT nextval('{table}_seq')").fetchone()[0]  # type: ignore[index]
                        c.execute(f"INSERT INTO {table} VALUES (0, %s, %s)", (pos, seed))
                    else:  # the counter row is updated last and stays locked until commit
                        pos = c.execute("UPDATE order_logs SET position = position + 1 WHERE log_id = 0 "
                                        "RETURNING position").fetchone()[0]  # type: ignore[index]
                        c.execute(f"INSERT INTO {table} VALUES (0, %s, %s)", (pos, seed))
                    time.sleep(rng.random() * 0.003)  # work between taking a position and committing
    except BaseException as exc:  # reported by the test, not lost in the thread
        errors.append(exc)


def _tail(dsn: str, table: str, done: threading.Event, seen: list[int]) -> None:
    cursor = 0
    with psycopg.connect(dsn, autocommit=True) as c:
        while True:
            finished = done.is_set()  # read before polling: the last poll then sees every commit
            rows = c.execute(f"SELECT position FROM {table} WHERE log_id = 0 AND position > %s ORDER BY position",
                             (cursor,)).fetchall()
            for (pos,) in rows:
                seen.append(pos)
                cursor = pos
            if finished:
                return
            time.sleep(0.0005)


def _missed_by_a_tailing_reader(dsn: str, mode: str) -> list[int]:
    table = f"order_{mode}"
    _setup(dsn, table)
    done = threading.Event()
    seen: list[int] = []
    errors: list[BaseException] = []
    tail = threading.Thread(target=_tail, args=(dsn, table, done, seen))
    tail.start()
    writers = [threading.Thread(target=_writer, args=(dsn, table, mode, i, errors)) for i in range(WRITERS)]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    done.set()
    tail.join()
    assert not errors, errors
    with psycopg.connect(dsn) as c:
        final = [r[0] for r in c.execute(f"SELECT position FROM {table} ORDER BY position").fetchall()]
    assert len(final) == WRITERS * APPENDS
    assert seen == sorted(seen), "the reader saw positions out of order"
    return sorted(set(final) - set(seen))


def test_counter_row_positions_are_never_passed_by_a_tailing_reader(pg_dsn: str) -> None:
    missed = _missed_by_a_tailing_reader(pg_dsn, "counter")
    assert missed == []
    with psycopg.connect(pg_dsn) as c:  # gap-free: 1..N
        got = [r[0] for r in c.execute("SELECT position FROM order_counter ORDER BY position").fetchall()]
    assert got == list(range(1, WRITERS * APPENDS + 1))


def test_negative_control_sequence_positions_are_passed(pg_dsn: str) -> None:
    missed = _missed_by_a_tailing_reader(pg_dsn, "sequence")
    if not missed:  # commit order can happen to match the sequence: one more try before calling it
        missed = _missed_by_a_tailing_reader(pg_dsn, "sequence")
    assert missed, "the tailing-reader check did not catch sequence positions committing out of order"


@pytest.mark.parametrize("mode", ["counter"])
def test_rolled_back_position_leaves_no_hole(pg_dsn: str, mode: str) -> None:
    _setup(pg_dsn, "order_rb")
    with psycopg.connect(pg_dsn) as c:
        with pytest.raises(RuntimeError), c.transaction():
            c.execute("UPDATE order_logs SET position = position + 1 WHERE log_id = 0")
            raise RuntimeError("the append failed after its position was allocated")
        with c.transaction():
            pos = c.execute("UPDATE order_logs SET position = position + 1 WHERE log_id = 0 "
                            "RETURNING position").fetchone()[0]  # type: ignore[index]
    assert pos == 1
