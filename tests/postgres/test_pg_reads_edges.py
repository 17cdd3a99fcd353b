"""The PostgreSQL backend's reads on less common rows (tplog/backends/postgres/reads.py), against a
real server: bodies stored as shared blobs (read directly, and from a fork's parent prefix by a
links rebuild), a damaged stored value named by thread and seq, a stale links projection refusing
link reads with the command that repairs it.

Written for the surviving mutants of reads.py (tests/MUTANTS.md).
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "backends"))
from conftest import link, started, user
from contract_helpers import append, part
from test_backend_contract import fork_part

from tplog.backends.postgres import PostgresRecorder
from tplog.errors import CorruptionError, RebuildRequiredError


def tid() -> str:
    return str(uuid.uuid4())


BIG = os.urandom(200_000).hex()  # 400 kB of text: past the codec's 256 KiB blob threshold


@pytest.mark.parametrize("logs", [1, 4])
def test_a_blob_stored_body_reads_back_through_every_read(open_rec: Callable[..., PostgresRecorder],
                                                          pg_dsn: str, schema: str, logs: int) -> None:
    rec = open_rec(logs=logs)
    p, f, target = tid(), tid(), tid()
    [res] = append(rec, part(p, [started(p), user(BIG), link(target)]))
    with psycopg.connect(pg_dsn, autocommit=True, options=f"-c search_path={schema}") as c:
        assert c.execute("SELECT count(*) FROM blobs").fetchone() == (1,)  # the body is a shared blob
    assert [e.event for e in rec.read_thread(p)][1] == user(BIG)
    log = rec.log_of(p)
    assert [(e.thread_id, e.seq) for e in rec.read_log(log)] == [(p, 1), (p, 2), (p, 3)]
    assert rec.read_log(log)[1].event == user(BIG)
    append(rec, fork_part(f, p, 3))
    # the links rebuild reads the fork's prefix (the blob among it) from its parent
    rec.rebuild(["links"])
    assert sorted(s for s, _ in rec.incoming(target)) == sorted([p, f])
    assert res.last_seq == 3


def test_a_damaged_value_is_named_by_thread_and_seq(open_rec: Callable[..., PostgresRecorder], pg_dsn: str,
                                                    schema: str) -> None:
    rec = open_rec()
    a = tid()
    append(rec, part(a, [started(a), user("x" * 100), user()]))
    with psycopg.connect(pg_dsn, autocommit=True, options=f"-c search_path={schema}") as c:
        # every bit of one byte of the body's CRC flipped (setting it to 0xff left it unchanged when it already
        # was: 1 run in 256, the CRC covering the random thread id's key)
        c.execute("UPDATE events SET value = set_byte(value, length(value) - 3, "
                  "get_byte(value, length(value) - 3) # 255) WHERE seq = 2")
    with pytest.raises(CorruptionError) as exc:
        rec.read_thread(a)
    assert (exc.value.thread_id, exc.value.seq) == (a, 2)


def test_a_stale_links_projection_refuses_link_reads(open_rec: Callable[..., PostgresRecorder], pg_dsn: str,
                                                     schema: str) -> None:
    open_rec().close()  # creates the schema
    with psycopg.connect(pg_dsn, autocommit=True, options=f"-c search_path={schema}") as c:
        c.execute("UPDATE tracking SET status = 'stale' WHERE name = 'links'")
    rec = open_rec()
    a = tid()
    append(rec, part(a, [started(a)]))
    message = f"PostgreSQL {rec.url}: the links projection is stale; run rebuild(['links'])"
    for read in (lambda: rec.incoming(a), lambda: rec.children(a), lambda: rec.has_spawned(a),
                 lambda: rec.descendants(a)):
        with pytest.raises(RebuildRequiredError) as exc:
            read()
        assert str(exc.value) == message
    rec.rebuild(["links"])
    assert rec.children(a) == [] and rec.incoming(a) == []
