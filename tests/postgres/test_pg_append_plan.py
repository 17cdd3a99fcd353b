"""The PostgreSQL recorder's append planning, against a real server: what one submission is checked
against (a scoped thread's head, a fork whose parent
is scoped or is written by the same submission), the exact refusal, and nothing written on refusal.

Written for the surviving mutants of tplog/backends/postgres/recorder.py's append path
(tests/MUTANTS.md). All in-process, so mutmut's mutants reach them.
"""

from __future__ import annotations

import itertools
import os
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "backends"))
from conftest import started, user
from contract_helpers import append, encode, part
from test_backend_contract import fork_part

from tplog.backends.contract import ForkSeed, ThreadAppend, ThreadHead
from tplog.backends.postgres import PostgresRecorder
from tplog.errors import InvalidInputError, NotFoundError, TplogError
from tplog.protocol import model as m

_names = itertools.count()


@pytest.fixture
def rec(pg_dsn: str) -> Iterator[PostgresRecorder]:
    name = f"pa{os.getpid()}_{next(_names)}"
    r = PostgresRecorder(pg_dsn, schema=name)
    yield r
    r.close()
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        c.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE".encode())


def tid() -> str:
    return str(uuid.uuid4())


def rows(rec: PostgresRecorder) -> list[tuple[str, int, int]]:
    return [(e.thread_id, e.seq, e.position) for e in rec.read_log(0)]


def scoped_fork(fork_id: str, parent: str, at: int, scope: str) -> ThreadAppend:
    ts = started(fork_id, relationships=m.ThreadRelationships(
        links=[m.ThreadLink(thread_id=parent, relation="spawned_from", metadata={"seq": at})]))
    seed = ForkSeed(parent=parent, at=at, head=ThreadHead(thread_id="", user_turns=1, parent=parent))
    return ThreadAppend(thread_id=fork_id, events=encode([ts]), expected="no_stream", fork=seed, scope=scope)


def test_a_new_scoped_threads_head_keeps_its_scope(rec: PostgresRecorder) -> None:
    a = tid()
    append(rec, part(a, [started(a)], scope="s1"))
    head = rec.head(a, scope="s1")
    assert head is not None and (head.thread_id, head.scope, head.version) == (a, "s1", 1)
    assert rec.head(a) is None


def test_a_scoped_fork_finds_its_parent_in_its_own_scope_only(rec: PostgresRecorder) -> None:
    p, f, g = tid(), tid(), tid()
    append(rec, part(p, [started(p), user(), user()], scope="s1"))
    [res] = append(rec, scoped_fork(f, p, 2, "s1"))
    assert (res.thread_id, res.first_seq, res.last_seq) == (f, 1, 2)
    head = rec.head(f, scope="s1")
    assert head is not None and (head.fork_of, head.fork_at, head.scope) == (p, 2, "s1")
    before = rows(rec)
    with pytest.raises(NotFoundError, match=rf"^thread {p} does not exist$"):  # not in the unscoped threads
        append(rec, fork_part(g, p, 2))
    assert rows(rec) == before and rec.head(g) is None


@pytest.fixture
def rec1(pg_dsn: str) -> Iterator[PostgresRecorder]:
    """One writer thread: submissions queued while it waits are committed as one batch."""
    name = f"pa{os.getpid()}_{next(_names)}"
    r = PostgresRecorder(pg_dsn, schema=name, writers=1)
    yield r
    r.close()
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        c.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE".encode())


def batched(pg_dsn: str, rec: PostgresRecorder, *submissions: list[ThreadAppend]) -> list[Any]:
    """Commit the submissions as one batch: the writer is held on a table lock by a first append
    while they are queued behind it. Returns each submission's result or error."""
    x = tid()
    with psycopg.connect(pg_dsn, autocommit=True) as blocker, psycopg.connect(pg_dsn, autocommit=True) as watch:
        blocker.execute("BEGIN")
        blocker.execute(f"LOCK TABLE {rec.schema}.heads IN EXCLUSIVE MODE".encode())
        first = rec.submit([part(x, [started(x)])])
        deadline = time.monotonic() + 20
        # (watched from another connection: a transaction sees pg_stat_activity as of its first read)
        while not watch.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                "AND query LIKE 'INSERT INTO heads%'").fetchone()[0]:  # type: ignore[index]
            assert time.monotonic() < deadline, "the writer never waited on the lock"
            time.sleep(0.02)
        handles = [rec.submit(s) for s in submissions]
        blocker.execute("COMMIT")
    first.result(timeout=30)
    out: list[Any] = []
    for h in handles:
        try:
            out.append(h.result(timeout=30))
        except TplogError as exc:
            out.append(exc)
    return out


def test_a_fork_of_a_parent_written_earlier_in_the_same_batch(pg_dsn: str, rec1: PostgresRecorder) -> None:
    """The parent's head is the batch's, not yet stored: the fork point is checked against it."""
    p, f, g = tid(), tid(), tid()
    commits = rec1.commits
    [pres], ok, past = batched(pg_dsn, rec1, [part(p, [started(p), user(), user()])], [fork_part(f, p, 3)],
                       [fork_part(g, p, 4)])
    assert rec1.commits == commits + 2  # the first append, then the three submissions together
    assert (pres.thread_id, pres.first_seq, pres.last_seq, pres.first_position) == (p, 1, 3, 2)
    assert [(r.thread_id, r.first_seq, r.last_seq, r.first_position) for r in ok] == [(f, 1, 3, 5)]
    head = rec1.head(f)
    assert head is not None and (head.fork_of, head.fork_at, head.version) == (p, 3, 3)
    assert isinstance(past, InvalidInputError) and str(past) == f"fork of thread {p}: at=4 is past its last seq 3"
    assert rec1.head(g) is None


def test_a_fork_of_a_parent_in_the_same_submission_is_refused_and_nothing_written(rec: PostgresRecorder) -> None:
    """A submission's parts are checked before any is applied: its own parent is not there yet."""
    p, f = tid(), tid()
    with pytest.raises(NotFoundError, match=rf"^thread {p} does not exist$"):
        append(rec, part(p, [started(p), user()]), fork_part(f, p, 1))
    assert rows(rec) == [] and rec.head(p) is None and rec.head(f) is None
