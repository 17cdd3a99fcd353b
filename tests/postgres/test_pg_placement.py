"""A store of four logs: a spawned child lives in its parent's log (its tree on one shard)."""

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

from tplog.backends.common import thread_key
from tplog.backends.postgres import PostgresRecorder
from tplog.errors import TplogError
from tplog.protocol import ThreadLink, ThreadRelationships

_names = itertools.count()
P = 4


@pytest.fixture
def url(pg_dsn: str) -> Iterator[str]:
    name = f"pl{os.getpid()}_{next(_names)}"
    yield pg_dsn + f"?schema={name}&logs={P}"
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        c.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE".encode())


def _hashed(t: str) -> int:
    return int.from_bytes(thread_key(t, None)[:4], "big") % P


def _elsewhere(log: int) -> str:
    """A new thread id that does not hash to ``log``."""
    while True:
        t = str(uuid.uuid4())
        if _hashed(t) != log:
            return t


def _declared(parent: str) -> ThreadRelationships:
    return ThreadRelationships(links=[ThreadLink(thread_id=parent, relation="spawned_from")])


def test_children_inherit_their_parents_log(url: str) -> None:
    rec = PostgresRecorder(url)
    try:
        root = str(uuid.uuid4())
        lr = _hashed(root)
        rec.submit([part(root, [started(root), user()])]).result(timeout=30)
        assert rec.log_of(root) == lr
        child = _elsewhere(lr)  # declared in ThreadStarted.relationships
        rec.submit([part(child, [started(child, relationships=_declared(root)), user()])]).result(timeout=30)
        grand = _elsewhere(lr)  # a LinkAdded in its creating append
        rec.submit([part(grand, [started(grand), link(child, "spawned_from")])]).result(timeout=30)
        other = _elsewhere(lr)  # a reference is no spawn: its own log
        rec.submit([part(other, [started(other), link(root)])]).result(timeout=30)
        late = _elsewhere(lr)  # spawned_from added after its creation: stays where it was created
        rec.submit([part(late, [started(late)])]).result(timeout=30)
        rec.submit([part(late, [link(root, "spawned_from")])]).result(timeout=30)
        for r in (rec, PostgresRecorder(url)):  # this process's cache, and a fresh one's lookups
            assert [r.log_of(t) for t in (root, child, grand)] == [lr, lr, lr]
            assert r.log_of(other) == _hashed(other) and r.log_of(late) == _hashed(late)
            tree = [(e.thread_id, e.seq) for e in r.read_log(lr)]
            assert {t for t, _ in tree} >= {root, child, grand}
            assert [e.seq for e in r.read_thread(child)] == [1, 2] and r.head(grand).version == 2
            assert sorted(r.children(root)) == sorted([child, late]) and r.children(child) == [grand]
            kids = sorted([child, late], key=lambda t: thread_key(t, None))
            assert [d for d, _ in r.descendants(root)] == [*kids, grand]
            assert r.incoming(root, relation="referenced") == [(other, "referenced")]
            if r is not rec:
                r.close()
        with psycopg.connect(rec._conninfo, autocommit=True) as c:
            rows = c.execute(f"SELECT log_id FROM {rec.schema}.heads WHERE thread_id = ANY(%s)".encode(),
                             ([child, grand],)).fetchall()
        assert rows == [(lr,), (lr,)]  # one head each, in the root's log
        assert rec.verify().problems == []  # a rebuild puts every row where the appends did
        rec.delete_thread(grand, tombstone()).result(timeout=30)
        assert rec.children(child) == [] and rec.head(grand).status == "deleted"
        assert rec.verify().problems == []
    finally:
        rec.close()


def test_links_written_before_a_thread_exists_follow_it_into_its_parents_log(url: str) -> None:
    rec = PostgresRecorder(url)
    try:
        root = str(uuid.uuid4())
        rec.submit([part(root, [started(root)])]).result(timeout=30)
        future = _elsewhere(rec.log_of(root))
        fan = str(uuid.uuid4())
        rec.submit([part(fan, [started(fan), link(future)])]).result(timeout=30)  # future does not exist yet
        assert rec.incoming(future) == [(fan, "referenced")]
        rec.submit([part(future, [started(future, relationships=_declared(root))])]).result(timeout=30)
        assert rec.log_of(future) == rec.log_of(root) != _hashed(future)
        assert rec.incoming(future) == [(fan, "referenced")]
        fresh = PostgresRecorder(url)
        try:
            assert fresh.incoming(future) == [(fan, "referenced")] and fresh.log_of(future) == rec.log_of(root)
        finally:
            fresh.close()
        assert rec.verify().problems == []
    finally:
        rec.close()


def test_two_writers_creating_one_thread_in_different_logs_store_it_once(url: str) -> None:
    a, b = PostgresRecorder(url), PostgresRecorder(url)
    try:
        root = str(uuid.uuid4())
        a.submit([part(root, [started(root)])]).result(timeout=30)
        for _ in range(10):
            t = _elsewhere(a.log_of(root))
            gate = threading.Barrier(2)
            out: list[object] = []
            jobs = [(a, part(t, [started(t, relationships=_declared(root))], expected="no_stream")),
                    (b, part(t, [started(t)], expected="no_stream"))]  # would go to its hashed log
            workers = [threading.Thread(target=_race, args=(r, p, gate, out)) for r, p in jobs]
            for w in workers:
                w.start()
            for w in workers:
                w.join(60)
            assert sum(isinstance(o, list) for o in out) == 1 and sum(isinstance(o, TplogError) for o in out) == 1
            with psycopg.connect(a._conninfo, autocommit=True) as c:
                n = c.execute(f"SELECT count(*) FROM {a.schema}.heads WHERE thread_id = %s".encode(), (t,)).fetchone()
            assert n == (1,)
            assert a.log_of(t) == b.log_of(t)
        assert a.verify().problems == []
    finally:
        a.close()
        b.close()


def _race(rec: PostgresRecorder, p: object, gate: threading.Barrier, out: list[object]) -> None:
    gate.wait(10)
    try:
        out.append(rec.submit([p]).result(timeout=60))  # type: ignore[list-item]
    except TplogError as exc:
        out.append(exc)
