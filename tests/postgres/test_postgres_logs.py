"""A PostgreSQL store with several ordered logs (P = 4): what a catch-up reader and links see."""

from __future__ import annotations

import itertools
import os
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "backends"))
from conftest import link, started, user
from contract_helpers import part, tombstone

from tplog.backends.postgres import PostgresRecorder
from tplog.errors import InvalidInputError, WrongExpectedVersionError

_names = itertools.count()


@pytest.fixture
def rec(pg_dsn: str) -> Iterator[PostgresRecorder]:
    name = f"p{os.getpid()}_{next(_names)}"
    r = PostgresRecorder(pg_dsn + f"?schema={name}&logs=4")
    yield r
    r.close()
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        c.execute(f"DROP SCHEMA {name} CASCADE".encode())


def test_threads_spread_over_logs_each_gap_free(rec: PostgresRecorder) -> None:
    assert rec.logs == 4 and rec.positions() == (0, 0, 0, 0)
    threads = [str(uuid.uuid4()) for _ in range(24)]
    for t in threads:
        rec.submit([part(t, [started(t), user()])]).result(timeout=30)
    logs = {t: rec.log_of(t) for t in threads}
    assert len(set(logs.values())) >= 3  # 24 threads over 4 logs
    pos = rec.positions()
    assert sum(pos) == 48
    seen = []
    for log in range(4):
        evs = rec.read_log(log)
        assert [e.position for e in evs] == list(range(1, pos[log] + 1))  # every log is gap-free from 1
        assert all(logs[e.thread_id] == log for e in evs)
        seen += [(e.thread_id, e.seq) for e in evs]
    assert sorted(seen) == sorted((t, s) for t in threads for s in (1, 2))
    with pytest.raises(InvalidInputError):
        rec.read_log(4)


def test_append_across_logs_is_atomic_and_links_live_in_the_target_log(rec: PostgresRecorder) -> None:
    threads = [str(uuid.uuid4()) for _ in range(12)]
    by_log: dict[int, str] = {}
    for t in threads:
        by_log.setdefault(rec.log_of(t), t)
    a, b = list(by_log.values())[:2]
    assert rec.log_of(a) != rec.log_of(b)
    rec.submit([part(a, [started(a)]), part(b, [started(b), link(a, "spawned_from")])]).result(timeout=30)
    assert rec.incoming(a) == [(b, "spawned_from")] and rec.children(a) == [b]
    before = rec.positions()
    with pytest.raises(WrongExpectedVersionError):
        rec.submit([part(a, [user()], expected=1), part(b, [user()], expected=1)]).result(timeout=30)
    assert rec.positions() == before  # nothing of the failed append, in either log
    rec.delete_thread(b, tombstone()).result(timeout=30)
    assert rec.incoming(a) == [] and rec.children(a) == []
    assert rec.verify().problems == []


def test_wait_wakes_on_any_log(rec: PostgresRecorder) -> None:
    t = str(uuid.uuid4())
    cursor = rec.positions()
    timer = threading.Timer(0.2, lambda: rec.submit([part(t, [started(t)])]).result(timeout=30))
    timer.start()
    now = rec.wait(cursor, timeout=10)
    timer.join()
    assert now[rec.log_of(t)] == 1 and sum(now) == 1
