"""Event ids are unique per scope, whatever the log (contract: an id stored elsewhere is an
``IdempotencyError``): two appends racing to store one id in threads of two logs (P = 4)."""

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
from conftest import started, user
from contract_helpers import part

from tplog.backends.postgres import PostgresRecorder
from tplog.errors import IdempotencyError

_names = itertools.count()


@pytest.fixture
def two(pg_dsn: str) -> Iterator[tuple[PostgresRecorder, PostgresRecorder]]:
    """Two recorders (two writer connections, as two processes have) on one store of 4 logs."""
    name = f"ids{os.getpid()}_{next(_names)}"
    url = pg_dsn + f"?schema={name}&logs=4"
    a, b = PostgresRecorder(url), PostgresRecorder(url)
    yield a, b
    a.close()
    b.close()
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        c.execute(f"DROP SCHEMA {name} CASCADE".encode())


def _pair_in_two_logs(rec: PostgresRecorder) -> tuple[str, str]:
    by_log: dict[int, str] = {}
    while len(by_log) < 2:
        t = str(uuid.uuid4())
        by_log.setdefault(rec.log_of(t), t)
    x, y = by_log.values()
    return x, y


def _append(rec: PostgresRecorder, t: str, eid: str, gate: threading.Barrier, out: dict[str, object]) -> None:
    p = part(t, [started(t), user()], ids=[eid, f"{eid}-{t}"])
    gate.wait(10)
    try:
        out[t] = rec.submit([p]).result(timeout=60)
    except IdempotencyError as exc:
        out[t] = exc


def test_one_event_id_racing_into_two_logs_is_stored_once(two: tuple[PostgresRecorder, PostgresRecorder]) -> None:
    a, b = two
    rounds = 25
    for r in range(rounds):
        x, y = _pair_in_two_logs(a)
        assert a.log_of(x) != a.log_of(y)
        eid = f"shared-{r}-{uuid.uuid4()}"
        gate = threading.Barrier(2)
        out: dict[str, object] = {}

        workers = [threading.Thread(target=_append, args=(rec, t, eid, gate, out)) for rec, t in ((a, x), (b, y))]
        for w in workers:
            w.start()
        for w in workers:
            w.join(90)
        won = [t for t in (x, y) if isinstance(out.get(t), list)]
        lost = [t for t in (x, y) if isinstance(out.get(t), IdempotencyError)]
        assert len(won) == 1 and len(lost) == 1, (r, out)
        assert "already stored" in str(out[lost[0]])
        with psycopg.connect(a._conninfo, autocommit=True) as c:
            rows = c.execute(f"SELECT count(*) FROM {a.schema}.events WHERE event_id = %s".encode(), (eid,)
                             ).fetchone()
        assert rows == (1,)
        assert a.head(lost[0]) is None  # nothing of the losing append
