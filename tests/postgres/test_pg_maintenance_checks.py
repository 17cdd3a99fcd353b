"""The PostgreSQL backend's maintenance verbs (tplog/backends/postgres/maintenance.py and the verify
side of rebuild.py), against a real server: ``verify`` counting every stored event and naming a
thread whose stored seqs no longer match its head, the links and state comparisons each reporting
only their own projection, a backup written into a folder that already exists, the verbs refused
once the store is closed.

Written for the surviving mutants of maintenance.py and rebuild.py (tests/MUTANTS.md).
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "backends"))
from conftest import agent_start, link, started, user
from contract_helpers import append, part

from tplog.backends.postgres import PostgresRecorder
from tplog.backends.postgres.schema import TABLES
from tplog.errors import CorruptionError, InvalidInputError, RebuildInProgressError, StorageError, StoreClosedError


def tid() -> str:
    return str(uuid.uuid4())


def sql(pg_dsn: str, schema: str, query: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True, options=f"-c search_path={schema}") as c:
        c.execute(query.encode())


def test_verify_counts_every_event_and_thread(open_rec: Callable[..., PostgresRecorder]) -> None:
    rec = open_rec()
    a, b = tid(), tid()
    append(rec, part(a, [started(a), user(), link(b)]), part(b, [started(b), user()]))
    report = rec.verify()
    assert (report.events, report.threads, report.problems) == (5, 2, [])


def test_verify_names_a_thread_whose_seqs_do_not_match_its_head(open_rec: Callable[..., PostgresRecorder],
                                                                pg_dsn: str, schema: str) -> None:
    rec = open_rec()
    a, b = tid(), tid()
    append(rec, part(a, [started(a), *[user(f"u{i}") for i in range(7)]]), part(b, [started(b)]))
    sql(pg_dsn, schema, "DELETE FROM events WHERE seq = 8")  # a's last event lost: seqs 1..7, head says 8
    report = rec.verify(projections=False)
    assert report.events == 8 and report.threads == 2
    assert report.problems == [f"thread {a}: seqs [1, 2, 3, 4, 5]… do not match its head (version 8)"]


def test_verify_compares_each_projection_on_its_own(open_rec: Callable[..., PostgresRecorder], pg_dsn: str,
                                                    schema: str) -> None:
    rec = open_rec()
    a, b, c = tid(), tid(), tid()
    append(rec, part(b, [started(b)]), part(c, [started(c)]))
    append(rec, part(a, [started(a), user(), link(b), agent_start()]))  # a link row, an open turn's state
    assert rec.verify().problems == []
    sql(pg_dsn, schema, "DELETE FROM links")
    assert [r.differences for r in rec.rebuild(["links"], verify=True)] == [
        ["links: the live index differs from a rebuild"]]
    assert [r.differences for r in rec.rebuild(["state"], verify=True)] == [[]]
    assert rec.verify().problems == ["links: the live index differs from a rebuild"]  # projections by default
    rec.rebuild(["links"])
    sql(pg_dsn, schema, "DELETE FROM states")
    assert [r.differences for r in rec.rebuild(["links", "state"], verify=True)] == [
        [], ["state: the live rows differ from a rebuild"]]
    assert rec.verify(projections=False).problems == []


def test_a_backup_goes_into_a_folder_that_exists(open_rec: Callable[..., PostgresRecorder], tmp_path: Path) -> None:
    rec = open_rec()
    a = tid()
    append(rec, part(a, [started(a), user()]))
    dest = tmp_path / "bk"
    dest.mkdir()
    rec.backup(str(dest))  # an empty one
    first = {p.name: p.read_bytes() for p in dest.iterdir()}
    with pytest.raises(StorageError, match="not empty"):  # never over a backup: it stays as it was
        rec.backup(str(dest))
    assert sorted(first) == sorted(f"{t}.copy" for t in TABLES)
    assert all(first[f"{t}.copy"].startswith(b"PGCOPY\n") for t in TABLES)
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == first


def test_the_maintenance_verbs_refuse_a_closed_store(open_rec: Callable[..., PostgresRecorder]) -> None:
    rec = open_rec()
    assert rec.train_dictionary() == 0  # no shared dictionary here
    rec.sync()
    rec.close()
    for verb in (rec.train_dictionary, rec.sync, rec.check_open):
        with pytest.raises(StoreClosedError, match=f"schema {rec.schema}\\) has been closed"):
            verb()


def test_verify_reports_a_damaged_event_by_thread_and_seq(open_rec: Callable[..., PostgresRecorder], pg_dsn: str,
                                                          schema: str) -> None:
    rec = open_rec()
    a, b = tid(), tid()
    append(rec, part(a, [started(a), user("x" * 100), user()]), part(b, [started(b)]))
    sql(pg_dsn, schema, "UPDATE events SET value = set_byte(value, length(value) - 3, "
                        "get_byte(value, length(value) - 3) # 255) WHERE seq = 2")
    with pytest.raises(CorruptionError) as exc:
        rec.read_thread(a)
    assert (exc.value.thread_id, exc.value.seq) == (a, 2)
    report = rec.verify(projections=False)
    assert report.problems == [str(exc.value)]  # the same error, as read_thread raises it
    assert a in report.problems[0] and report.events == 4


def test_verify_reads_a_blob_stored_body(open_rec: Callable[..., PostgresRecorder], pg_dsn: str,
                                         schema: str) -> None:
    rec = open_rec(logs=4)
    a = tid()
    append(rec, part(a, [started(a), user(os.urandom(200_000).hex())]))  # past the codec's blob threshold
    with psycopg.connect(pg_dsn, autocommit=True, options=f"-c search_path={schema}") as c:
        assert c.execute("SELECT count(*) FROM blobs").fetchone() == (1,)
    report = rec.verify()
    assert (report.events, report.threads, report.problems) == (2, 1, [])


def test_the_rebuild_verb_checks_its_names_and_its_lock(open_rec: Callable[..., PostgresRecorder]) -> None:
    rec = open_rec()
    a, t = tid(), tid()
    append(rec, part(t, [started(t)]), part(a, [started(a), link(t)]))
    with pytest.raises(InvalidInputError) as bad:
        rec.rebuild(["links", "nope"])
    assert str(bad.value) == "unknown projection 'nope'; known: links, state"
    [rep] = rec.rebuild(["links"])
    assert (rep.projection, rep.verify, rep.events) == ("links", False, 3)  # a rebuild, not a verify
    # the rebuild's claim was let go: the lock can be taken (and a rebuild refused while it is held)
    held = rec.try_lock("rebuild-links")
    assert held is not None
    try:
        with pytest.raises(RebuildInProgressError) as busy:
            rec.rebuild(["state", "links"])
        assert str(busy.value) == f"PostgreSQL {rec.url}: a rebuild of links is in progress"
        [rep] = rec.rebuild(["links"], force=True)
        assert rep.differences == [] and rec.incoming(t) == [(a, "referenced")]
    finally:
        held.release()
    # the refused rebuild let go of the state claim it had taken, the forced one of nothing it lacked
    for name in ("rebuild-state", "rebuild-links"):
        h = rec.try_lock(name)
        assert h is not None
        h.release()


@pytest.mark.parametrize("name", [5, "", "a b", "é", None])
def test_a_lock_name_that_is_no_plain_ascii_word_is_refused(open_rec: Callable[..., PostgresRecorder],
                                                            name: Any) -> None:
    rec = open_rec()
    with pytest.raises(InvalidInputError) as exc:
        rec.try_lock(name)
    assert str(exc.value) == f"lock name must be ASCII letters, digits, '-' or '_', not {name!r}"
    h = rec.try_lock("ok-name_1")
    assert h is not None and rec.try_lock("ok-name_1") is None
    h.release()
