"""The PostgreSQL backend under faults and contention, against a real server (fixture ``pg_dsn``).

Each test opens recorders on a schema of its own. Several recorders on one schema
stand for several processes: each has its own writer connection and group commit.
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "backends"))
from conftest import agent_start, completed, link, started, user
from contract_helpers import part, tombstone

from tplog.backends.postgres import (
    LockTimeoutError,
    PostgresRecorder,
    PostgresUnavailableError,
    SchemaError,
)
from tplog.backends.postgres.schema import DISTRIBUTED, SCHEMA_VERSION
from tplog.errors import InvalidInputError, WrongExpectedVersionError

from .pg_server import password_role
from .proxy import CommitLosingProxy


def tid() -> str:
    return str(uuid.uuid4())


def log_rows(rec: PostgresRecorder) -> list[tuple[str, int, int, str]]:
    return [(e.thread_id, e.seq, e.position, e.event_id) for e in rec.read_log(0)]


def test_concurrent_appends_with_the_same_expected_version_one_wins(open_rec: Callable[..., PostgresRecorder]) -> None:
    recs = [open_rec() for _ in range(4)]  # four "processes"
    a = tid()
    recs[0].submit([part(a, [started(a)])]).result(timeout=30)
    for round_ in range(5):
        expected = 1 + round_
        barrier = threading.Barrier(12)
        outcomes: list[object] = []

        def writer(rec: PostgresRecorder, expected: int = expected, barrier: threading.Barrier = barrier,
                   outcomes: list[object] = outcomes) -> None:
            barrier.wait()
            try:
                outcomes.append(rec.submit([part(a, [user()], expected=expected)]).result(timeout=60))
            except WrongExpectedVersionError as exc:
                outcomes.append(exc)

        ts = [threading.Thread(target=writer, args=(recs[i % 4],)) for i in range(12)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        wins = [o for o in outcomes if not isinstance(o, WrongExpectedVersionError)]
        assert len(wins) == 1 and len(outcomes) == 12
        assert all(o.actual == expected + 1 for o in outcomes if isinstance(o, WrongExpectedVersionError))
    assert [s for _, s, _, _ in log_rows(recs[0])] == [1, 2, 3, 4, 5, 6]


def test_two_writers_creating_the_same_thread_with_the_same_ids(open_rec: Callable[..., PostgresRecorder]) -> None:
    recs = [open_rec() for _ in range(4)]
    for _ in range(5):
        a = tid()
        ids = [f"{a}-1", f"{a}-2"]
        barrier = threading.Barrier(4)
        results: list[Any] = []

        def writer(rec: PostgresRecorder, a: str = a, ids: list[str] = ids, barrier: threading.Barrier = barrier,
                   results: list[Any] = results) -> None:
            barrier.wait()
            results.append(rec.submit([part(a, [started(a), user()], ids=ids, expected="no_stream")])
                           .result(timeout=60)[0])

        ts = [threading.Thread(target=writer, args=(r,)) for r in recs]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert len(results) == 4
        assert sum(not r.duplicate for r in results) == 1  # the others are idempotent retries of it
        assert len({(r.first_position, r.last_position) for r in results}) == 1
        assert [e.event_id for e in recs[0].read_thread(a)] == ids


@pytest.mark.parametrize("lose", ["request", "reply"])
@pytest.mark.parametrize("own_ids", [True, False])
def test_lost_commit_is_retried_once_and_recorded_once(pg_dsn: str, schema: str, lose: str, own_ids: bool) -> None:
    """The connection dies at COMMIT: before the server gets it (nothing committed) or after it
    committed but before the reply (the client cannot know). Either way the append is stored exactly
    once, its caller gets its result, and positions stay gap-free (a rolled-back allocation leaves no hole)."""
    u = urllib.parse.urlsplit(pg_dsn)
    assert u.hostname is not None and u.port is not None
    proxy = CommitLosingProxy(u.hostname, u.port)
    url = urllib.parse.urlunsplit(u._replace(netloc=f"{u.username}@127.0.0.1:{proxy.port}"))
    rec = PostgresRecorder(url, schema=schema)
    try:
        a = tid()
        rec.submit([part(a, [started(a)])]).result(timeout=30)
        for i in range(3):
            proxy.arm(lose)  # type: ignore[arg-type]
            ids = [f"{a}-{i}"] if own_ids else None
            [res] = rec.submit([part(a, [user()], ids=ids)]).result(timeout=60)
            assert proxy.fired.is_set()
            assert (res.first_seq, res.first_position) == (2 + i, 2 + i)
            # Own ids found on the retry are reported as stored; generated ones were this append's.
            assert res.duplicate == (own_ids and lose == "reply")
        rows = log_rows(rec)
        assert [(s, p) for _, s, p, _ in rows] == [(1, 1), (2, 2), (3, 3), (4, 4)]
        assert rec.verify().problems == []
    finally:
        rec.close()
        proxy.close()


def test_connections_killed_mid_load_lose_and_duplicate_nothing(pg_dsn: str,
                                                                open_rec: Callable[..., PostgresRecorder]) -> None:
    """Every tplog connection is terminated repeatedly while writers append: callers get the
    typed, retryable error at worst, retry with the same ids, and each append is stored once."""
    recs = [open_rec(), open_rec()]
    threads = [tid() for _ in range(6)]
    for i, t in enumerate(threads):
        recs[i % 2].submit([part(t, [started(t)])]).result(timeout=30)
    stop = threading.Event()
    errors: list[BaseException] = []
    retried = [0]
    killed = [0]
    written = dict.fromkeys(threads, 0)

    def writer(i: int, t: str) -> None:
        rec = recs[i % 2]
        try:
            # at least 25 appends each, and on until the killer has cut connections 5 times
            # (a fast machine finishes 25 before the killer's third round)
            for n in range(2000):
                if n >= 25 and killed[0] >= 5:
                    break
                ids = [f"{t}-{n}"]
                for _attempt in range(20):
                    try:
                        rec.submit([part(t, [user()], ids=ids)]).result(timeout=60)
                        break
                    except PostgresUnavailableError as exc:
                        assert exc.retryable
                        retried[0] += 1
                        time.sleep(0.05)
                else:
                    raise AssertionError(f"{t}: append {n} never got through")
                written[t] = n + 1
        except BaseException as exc:
            errors.append(exc)

    def killer() -> None:
        with psycopg.connect(pg_dsn, autocommit=True) as c:
            while not stop.is_set():
                time.sleep(0.15)
                killed[0] += c.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
                    "AND datname = current_database() AND backend_type = 'client backend' "
                    "AND query NOT LIKE '%%pg_terminate_backend%%'").rowcount

    k = threading.Thread(target=killer)
    k.start()
    ws = [threading.Thread(target=writer, args=(i, t)) for i, t in enumerate(threads)]
    for w in ws:
        w.start()
    for w in ws:
        w.join()
    stop.set()
    k.join()
    assert not errors, errors
    assert killed[0] >= 5
    rows = log_rows(recs[0])
    assert [p for _, _, p, _ in rows] == list(range(1, len(rows) + 1))
    for t in threads:
        assert [e.event_id for e in recs[1].read_thread(t)][1:] == [f"{t}-{n}" for n in range(written[t])]
    assert recs[0].verify().problems == []


def test_tailing_readers_see_exactly_the_final_log(open_rec: Callable[..., PostgresRecorder]) -> None:
    writers = [open_rec(), open_rec()]
    reader_rec = open_rec()
    done = threading.Event()
    histories: list[list[int]] = [[], []]
    errors: list[BaseException] = []

    def write(i: int) -> None:
        try:
            rng = random.Random(i)
            mine = [tid() for _ in range(3)]
            for t in mine:
                writers[i % 2].submit([part(t, [started(t)])]).result(timeout=60)
            for _ in range(40):
                t = rng.choice(mine)
                writers[i % 2].submit([part(t, [user()] * rng.randint(1, 3))]).result(timeout=60)
        except BaseException as exc:
            errors.append(exc)

    def tail(k: int) -> None:
        cursor = 0
        while True:
            finished = done.is_set()  # read before polling: the last poll then sees every commit
            for e in reader_rec.read_log(0, after=cursor):
                histories[k].append(e.position)
                cursor = e.position
            if finished:
                return
            reader_rec.wait((cursor,), timeout=0.05)

    tails = [threading.Thread(target=tail, args=(k,)) for k in range(2)]
    ws = [threading.Thread(target=write, args=(i,)) for i in range(6)]
    for t in tails + ws:
        t.start()
    for w in ws:
        w.join()
    done.set()
    for t in tails:
        t.join()
    assert not errors
    final = [p for _, _, p, _ in log_rows(reader_rec)]
    assert final == list(range(1, len(final) + 1))
    assert histories[0] == final and histories[1] == final


def test_stalled_log_lock_readers_do_not_pass_and_appends_time_out(pg_dsn: str, schema: str,
                                                                   open_rec: Callable[..., PostgresRecorder]) -> None:
    rec = open_rec(lock_timeout=0.3)
    patient = open_rec()
    a, b = tid(), tid()
    rec.submit([part(a, [started(a)])]).result(timeout=30)
    with psycopg.connect(pg_dsn, autocommit=True, options=f"-c search_path={schema}") as stall:
        with stall.transaction():
            # Another writer that took the log's counter and stalls before COMMIT.
            stall.execute("UPDATE logs SET position = position WHERE log_id = 0")
            with pytest.raises(LockTimeoutError, match=b):
                rec.submit([part(b, [started(b)])]).result(timeout=30)
            blocked = patient.submit([part(a, [user()])])
            time.sleep(0.5)
            assert not blocked.done()  # waits for the stalled writer
            assert rec.positions() == (1,)  # readers neither block nor pass it
            assert [p for _, _, p, _ in log_rows(rec)] == [1]
        [res] = blocked.result(timeout=30)
    assert res.first_position == 2
    assert rec.head(b) is None and [p for _, _, p, _ in log_rows(rec)] == [1, 2]


def test_multi_thread_appends_in_random_order_do_not_deadlock(pg_dsn: str,
                                                              open_rec: Callable[..., PostgresRecorder]) -> None:
    recs = [open_rec() for _ in range(3)]
    threads = [tid() for _ in range(6)]
    recs[0].submit([part(t, [started(t)]) for t in threads]).result(timeout=30)
    errors: list[BaseException] = []

    def writer(i: int) -> None:
        rng = random.Random(i)
        try:
            for _ in range(15):
                chosen = rng.sample(threads, 3)
                parts = [part(t, [link(rng.choice(threads), rng.choice(["referenced", "spawned_from"])),
                                  agent_start(), completed()]) for t in chosen]
                recs[i % 3].submit(parts).result(timeout=60)
        except BaseException as exc:
            errors.append(exc)

    ws = [threading.Thread(target=writer, args=(i,)) for i in range(6)]
    deadlocks = "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        before = c.execute(deadlocks).fetchone()
    for w in ws:
        w.start()
    for w in ws:
        w.join(timeout=120)
    assert not any(w.is_alive() for w in ws), "writers hung"
    assert not errors, errors
    time.sleep(0.6)  # the statistics collector's delay
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        assert c.execute(deadlocks).fetchone() == before  # none detected (and retried away) either
    assert len(log_rows(recs[0])) == 6 + 6 * 15 * 3 * 3
    assert recs[1].verify().problems == []  # links, children and states equal a replay of the log


def test_wrong_url_and_unreachable_server(pg_dsn: str) -> None:
    with pytest.raises(InvalidInputError, match="not a PostgreSQL URL"):
        PostgresRecorder("mysql://x@localhost/db")
    with pytest.raises(InvalidInputError, match="schema name"):
        PostgresRecorder(pg_dsn, schema="Robert'); DROP TABLE x")
    u = urllib.parse.urlsplit(pg_dsn)
    with pytest.raises(PostgresUnavailableError) as info:
        PostgresRecorder(urllib.parse.urlunsplit(u._replace(netloc="tplog:secret@127.0.0.1:1",
                                                            query="connect_timeout=2")))
    assert info.value.retryable and "secret" not in str(info.value) and "127.0.0.1" in str(info.value)


def test_wrong_password(pg_dsn: str) -> None:
    password_role(pg_dsn, "pwuser")
    u = urllib.parse.urlsplit(pg_dsn)
    bad = urllib.parse.urlunsplit(u._replace(netloc=f"pwuser:wrong@127.0.0.1:{u.port}"))
    with pytest.raises(PostgresUnavailableError) as info:  # a refused login: not worth retrying
        PostgresRecorder(bad)
    assert str(info.value).startswith(f"cannot connect to PostgreSQL at postgresql://pwuser:***@127.0.0.1:{u.port}")
    assert not info.value.retryable and "wrong" not in str(info.value).replace("password authentication", "")


def test_missing_older_and_newer_schema(pg_dsn: str, schema: str, open_rec: Callable[..., PostgresRecorder]) -> None:
    with pytest.raises(SchemaError, match=f"no tplog schema '{schema}'.*tplog migrate"):
        PostgresRecorder(pg_dsn, schema=schema, create=False)
    open_rec().close()
    with psycopg.connect(pg_dsn, autocommit=True, options=f"-c search_path={schema}") as c:
        c.execute("UPDATE meta SET value = '0' WHERE key = 'schema_version'")
        with pytest.raises(SchemaError, match=f"version 0, older than {SCHEMA_VERSION}; run `tplog migrate"):
            PostgresRecorder(pg_dsn, schema=schema)
        with pytest.raises(SchemaError, match="no upgrade"):
            PostgresRecorder(pg_dsn, schema=schema, migrate=True)
        c.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
        with pytest.raises(SchemaError, match="newer than this tplog understands"):
            PostgresRecorder(pg_dsn, schema=schema)
        c.execute("UPDATE meta SET value = %s WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
    with pytest.raises(SchemaError, match="keeps 1 logs, not 4"):
        PostgresRecorder(pg_dsn, schema=schema, logs=4)


def test_migrate_2_to_3_adds_the_finder_columns(pg_dsn: str, schema: str,
                                                open_rec: Callable[..., PostgresRecorder]) -> None:
    """A version 2 schema (no activity/agents columns) is upgraded by migrate=True; filtered listings then work."""
    from tplog import Store

    open_rec().close()
    with psycopg.connect(pg_dsn, autocommit=True, options=f"-c search_path={schema}") as c:
        c.execute("DROP INDEX heads_activity")
        c.execute("DROP INDEX heads_agents")
        c.execute("ALTER TABLE heads DROP COLUMN activity, DROP COLUMN agents")
        c.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    with pytest.raises(SchemaError, match=f"version 2, older than {SCHEMA_VERSION}"):
        PostgresRecorder(pg_dsn, schema=schema)
    PostgresRecorder(pg_dsn, schema=schema, migrate=True).close()
    with Store(f"{pg_dsn}?schema={schema}", check_rules=False) as s:
        s.append("t1", [started("t1"), user(), agent_start("x")])
        assert [h.thread_id for h in s.threads(activity="active", agent="x").threads] == ["t1"]


def test_catalog_is_ready_for_citus(pg_dsn: str, schema: str, open_rec: Callable[..., PostgresRecorder]) -> None:
    """What plain PostgreSQL can show about distributing by log_id: every key of a distributed table
    contains log_id, no column defaults to a sequence, and the guarded Citus DDL ran as a no-op."""
    open_rec(logs=4).close()
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        keys = c.execute(
            "SELECT t.relname, i.indexrelid::regclass::text, array_agg(a.attname::text) FROM pg_index i "
            "JOIN pg_class t ON t.oid = i.indrelid JOIN pg_namespace n ON n.oid = t.relnamespace "
            "JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = ANY(i.indkey) "
            "WHERE n.nspname = %s AND (i.indisunique OR i.indisprimary) GROUP BY 1, 2", (schema,)).fetchall()
        assert {k[0] for k in keys} >= set(DISTRIBUTED)
        for table, index, cols in keys:
            if table in DISTRIBUTED:
                assert "log_id" in cols, f"{index} on {table} lacks log_id"
        defaults = c.execute("SELECT table_name, column_name, column_default FROM information_schema.columns "
                             "WHERE table_schema = %s AND column_default LIKE 'nextval%%'", (schema,)).fetchall()
        assert defaults == []
        assert c.execute("SELECT count(*) FROM pg_extension WHERE extname = 'citus'").fetchone() == (0,)
        assert c.execute(f"SELECT count(*) FROM {schema}.logs".encode()).fetchone() == (4,)


def test_rebuild_online_while_appending(open_rec: Callable[..., PostgresRecorder]) -> None:
    """Rebuilds run while writers append links, spawns and deletions: afterwards the live rows
    equal a replay of the log, and no append failed or waited for a whole rebuild."""
    recs = [open_rec(), open_rec()]
    threads = [tid() for _ in range(8)]
    recs[0].submit([part(t, [started(t)]) for t in threads]).result(timeout=30)
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer(i: int) -> None:
        rng = random.Random(i)
        try:
            while not stop.is_set():
                t = rng.choice(threads[:6])
                recs[i % 2].submit([part(t, [link(rng.choice(threads), rng.choice(["referenced", "spawned_from"])),
                                             agent_start(), completed()])]).result(timeout=60)
        except BaseException as exc:
            errors.append(exc)

    ws = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for w in ws:
        w.start()
    try:
        for n in range(3):
            time.sleep(0.2)
            if n == 1:
                recs[1].delete_thread(threads[6], tombstone()).result(timeout=30)
            reports = recs[1].rebuild(["links", "state"])
            assert [r.projection for r in reports] == ["links", "state"]
    finally:
        stop.set()
        for w in ws:
            w.join()
    assert not errors, errors
    assert recs[0].verify().problems == []


def test_server_restart_mid_load(pg_dsn: str) -> None:
    """PostgreSQL restarts (fast shutdown) while writers append: callers get the typed, retryable
    error at worst, the pool and the writer reconnect, and every append is stored exactly once."""
    from .pg_server import PostgresServer

    with PostgresServer() as server:
        rec = PostgresRecorder(server.dsn, schema="restart")
        try:
            threads = [tid() for _ in range(4)]
            rec.submit([part(t, [started(t)]) for t in threads]).result(timeout=30)
            errors: list[BaseException] = []
            failures = [0]

            def writer(t: str) -> None:
                try:
                    for n in range(30):
                        for _attempt in range(200):
                            try:
                                rec.submit([part(t, [user()], ids=[f"{t}-{n}"])]).result(timeout=60)
                                break
                            except PostgresUnavailableError as exc:
                                assert exc.retryable
                                failures[0] += 1
                                time.sleep(0.05)
                        else:
                            raise AssertionError(f"{t}: append {n} never got through")
                        time.sleep(0.01)
                except BaseException as exc:
                    errors.append(exc)

            ws = [threading.Thread(target=writer, args=(t,)) for t in threads]
            for w in ws:
                w.start()
            time.sleep(0.3)
            # The restarted server keeps pg_ctl's stdout: not a pipe, or run() would wait for it.
            subprocess.run(server._cmd("pg_ctl", "-D", str(server.data), "-m", "fast", "-w", "restart"),
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for w in ws:
                w.join()
            assert not errors, errors
            assert failures[0] > 0  # the restart was seen
            for t in threads:
                assert [e.event_id for e in rec.read_thread(t)][1:] == [f"{t}-{n}" for n in range(30)]
            rows = log_rows(rec)
            assert [p for _, _, p, _ in rows] == list(range(1, len(rows) + 1))
            assert rec.verify().problems == []
        finally:
            rec.close()


_WRITER = """
import sys, uuid
sys.path[:0] = [sys.argv[3], sys.argv[3] + "/backends"]
from conftest import started, user
from contract_helpers import part
from tplog.backends.postgres import PostgresRecorder
rec = PostgresRecorder(sys.argv[1], schema=sys.argv[2])
shared = "shared-thread"
mine = str(uuid.uuid4())
rec.submit([part(mine, [started(mine)])]).result(timeout=60)
for n in range(20):
    rec.submit([part(mine, [user()], ids=[f"{mine}-{n}"])]).result(timeout=60)
    rec.submit([part(shared, [user()], ids=[f"{mine}-s{n}"])]).result(timeout=60)
rec.close()
print(mine)
"""


def test_processes_share_one_store(pg_dsn: str, schema: str, open_rec: Callable[..., PostgresRecorder]) -> None:
    """Writer processes that share no memory append to their own threads and to one shared
    thread: each append is recorded once, every log position once, each thread gap-free."""
    rec = open_rec()
    rec.submit([part("shared-thread", [started("shared-thread")])]).result(timeout=30)
    tests_dir = str(Path(__file__).resolve().parent.parent)
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, pg_dsn, schema, tests_dir], stdout=subprocess.PIPE,
                              text=True) for _ in range(3)]
    mine = []
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0
        mine.append(out.strip())
    rows = log_rows(rec)
    assert [p for _, _, p, _ in rows] == list(range(1, 1 + 1 + 3 * 41))
    shared = rec.read_thread("shared-thread")
    assert [e.seq for e in shared] == list(range(1, 62))
    assert sorted(e.event_id for e in shared[1:]) == sorted(f"{m}-s{n}" for m in mine for n in range(20))
    for m in mine:
        assert [e.event_id for e in rec.read_thread(m)][1:] == [f"{m}-{n}" for n in range(20)]
    assert rec.verify().problems == []
