"""``tplog copy`` to and from PostgreSQL (round trip, killed and resumed, conflicts) and ``tplog migrate``."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from conftest import exchange, register, started
from copy_source import digests, fill, views

from tplog import Store
from tplog.backends.postgres import PostgresRecorder, SchemaError
from tplog.backends.postgres.schema import SCHEMA_VERSION

_names = itertools.count()


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tplog", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def schema(pg_dsn: str) -> Iterator[str]:
    """A fresh schema name (dropped afterwards)."""
    name = f"cp{os.getpid()}_{next(_names)}"
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        c.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE".encode())


def _count(dsn: str, schema: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as c:
        if c.execute("SELECT to_regclass(%s)", (f"{schema}.events",)).fetchone() == (None,):
            return 0
        row = c.execute(f"SELECT count(*) FROM {schema}.events".encode()).fetchone()
        return int(row[0]) if row else 0


@pytest.mark.parametrize("logs", [1, 4])
def test_lmdb_to_postgres_to_lmdb_round_trip_hash_equal(tmp_path: Path, pg_dsn: str, schema: str, logs: int) -> None:
    with Store(tmp_path / "a", check_rules=False) as a:
        info = fill(a)
        want, seen = digests(a), views(a, info)
    url = f"{pg_dsn}?schema={schema}&logs={logs}"
    there = _cli("copy", str(tmp_path / "a"), url)
    assert there.returncode == 0, there.stderr
    back = _cli("copy", url, f"lmdb://{tmp_path / 'b'}")
    assert back.returncode == 0, back.stderr
    for rep in (json.loads(there.stdout), json.loads(back.stdout)):
        assert rep["verified"] and rep["mismatches"] == [] and rep["threads"] == len(want) and rep["tombstones"] == 1
    with Store(url) as pg:
        assert pg.backend.logs == logs
        assert digests(pg) == want and views(pg, info) == seen
        assert pg.verify().problems == []
    with Store(tmp_path / "b", readonly=True) as b:
        assert digests(b) == want and views(b, info) == seen
    # the CLI reads a PostgreSQL store like a directory one
    out = _cli("children", url, info["root"])
    assert out.returncode == 0 and json.loads(out.stdout) == seen["children"]
    bk = _cli("backup", url, str(tmp_path / "bk"))
    assert bk.returncode == 0, bk.stderr
    assert json.loads(bk.stdout)["bytes"] == sum(p.stat().st_size for p in (tmp_path / "bk").iterdir()) > 0


def test_killed_copy_resumes_without_duplicates(tmp_path: Path, pg_dsn: str, schema: str) -> None:
    with Store(tmp_path / "a", check_rules=False) as a:
        for _ in range(60):
            t = str(uuid.uuid4())
            a.append(t, [started(t), register(), *exchange(), *exchange()])
        info = fill(a, extra=4)
        total = a.stats()["events"]
        want = digests(a)
    url = f"{pg_dsn}?schema={schema}"
    proc = subprocess.Popen([sys.executable, "-m", "tplog", "copy", str(tmp_path / "a"), url, "--chunk", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    at_kill = 0
    while time.monotonic() < deadline and proc.poll() is None:
        at_kill = _count(pg_dsn, schema)
        if at_kill >= 5:
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    written = _count(pg_dsn, schema)
    assert 5 <= at_kill <= written < total  # killed midway: one event per transaction, hundreds to go
    out = _cli("copy", str(tmp_path / "a"), url)
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout)
    assert rep["mismatches"] == [] and rep["skipped"] == written
    with Store(url) as pg:
        assert digests(pg) == want
        assert pg.stats()["events"] == total  # each event once
        assert pg.head(info["root"]).version == len(pg.read(info["root"]))
        assert pg.verify().problems == []


def test_copy_into_postgres_with_conflicting_threads(tmp_path: Path, pg_dsn: str, schema: str) -> None:
    url = f"{pg_dsn}?schema={schema}"
    with Store(tmp_path / "a", check_rules=False) as a:
        info = fill(a, extra=3)
    t = info["threads"][0]
    with Store(url, check_rules=False) as pg:
        pg.append(t, [started(t, title="someone else's")])
    before = _count(pg_dsn, schema)
    out = _cli("copy", str(tmp_path / "a"), url)
    assert out.returncode == 2
    assert f"thread {t}: seq 1 holds another event in the destination" in out.stderr
    assert "nothing was copied" in out.stderr
    assert _count(pg_dsn, schema) == before


def test_older_schema_names_tplog_migrate_which_upgrades_it(pg_dsn: str, schema: str) -> None:
    url = f"{pg_dsn}?schema={schema}"
    t = str(uuid.uuid4())
    with Store(url, check_rules=False) as s:
        s.append(t, [started(t), *exchange()])
    # version 1 of the schema: the same tables without the heads_tk index (2) and the finder columns (3)
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        c.execute(f"DROP INDEX {schema}.heads_tk".encode())
        c.execute(f"DROP INDEX {schema}.heads_activity, {schema}.heads_agents".encode())
        c.execute(f"ALTER TABLE {schema}.heads DROP COLUMN activity, DROP COLUMN agents".encode())
        c.execute(f"UPDATE {schema}.meta SET value = '1' WHERE key = 'schema_version'".encode())
    with pytest.raises(SchemaError, match=rf"version 1, older than {SCHEMA_VERSION}; run `tplog migrate "):
        Store(url)
    out = _cli("stat", url)
    assert out.returncode == 2 and "tplog migrate" in out.stderr
    mig = _cli("migrate", url)
    assert mig.returncode == 0, mig.stderr
    assert json.loads(mig.stdout) | {"url": None} == {"url": None, "schema": schema, "logs": 1, "created": False,
                                                      "from_version": 1, "version": SCHEMA_VERSION}
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        assert c.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{schema}.heads_tk",)).fetchone() == (True,)
        assert c.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{schema}.heads_activity",)).fetchone() == (True,)
    with Store(url) as s:
        assert [e.seq for e in s.read(t)] == [1, 2, 3, 4, 5]
        assert s.stats()["schema_version"] == SCHEMA_VERSION
    again = _cli("migrate", url)  # nothing left to do
    assert again.returncode == 0 and json.loads(again.stdout)["from_version"] == SCHEMA_VERSION


def test_migrate_creates_a_missing_schema_and_refuses_other_urls(pg_dsn: str, schema: str) -> None:
    url = f"{pg_dsn}?schema={schema}&logs=4"
    with pytest.raises(SchemaError, match="tplog migrate"):
        PostgresRecorder(url, create=False)
    out = _cli("migrate", url)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["created"] is True and json.loads(out.stdout)["logs"] == 4
    PostgresRecorder(url, create=False).close()
    bad = _cli("migrate", "/some/dir")
    assert bad.returncode == 2 and "PostgreSQL URL" in bad.stderr


def test_a_deleted_source_thread_never_tombstones_a_live_postgres_thread(tmp_path: Path, pg_dsn: str,
                                                                         schema: str) -> None:
    """The source holds only a tombstone, PostgreSQL a live thread of its own under that id: a conflict,
    nothing written (the thread stays live), not a deletion of someone else's thread."""
    url = f"{pg_dsn}?schema={schema}"
    with Store(tmp_path / "a", check_rules=False) as a:
        gone = fill(a, extra=3)["deleted"]
    with Store(url, check_rules=False) as pg:
        pg.append(gone, [started(gone, title="someone else's"), register(), *exchange()])
    before = _count(pg_dsn, schema)
    out = _cli("copy", str(tmp_path / "a"), url)
    assert out.returncode == 2, out.stdout
    assert f"thread {gone}: deleted in the source" in out.stderr and "nothing was copied" in out.stderr
    assert _count(pg_dsn, schema) == before
    with Store(url) as pg:
        assert pg.head(gone).status == "active" and pg.head(gone).version == 2 + len(exchange())
