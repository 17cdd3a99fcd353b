"""Several writer threads in one process (``writers`` / ``?writers=N``): their transactions
interleave like two processes' would, and the log stays gap-free in commit order."""

from __future__ import annotations

import itertools
import os
import sys
import threading
import uuid
from pathlib import Path

import psycopg
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "backends"))
from conftest import started, user
from contract_helpers import part

from tplog.backends.postgres import PostgresRecorder
from tplog.errors import InvalidInputError

_names = itertools.count()


@pytest.mark.parametrize("bad", ["?writers=0", "?writers=17", "?writers=two"])
def test_a_bad_writers_count_is_refused_before_connecting(bad: str) -> None:
    # Nothing listens on port 1: the check must come first for the error to name writers.
    with pytest.raises(InvalidInputError, match=r"writers must be an int in 1\.\.16"):
        PostgresRecorder("postgresql://nobody@127.0.0.1:1/none" + bad)
    with pytest.raises(InvalidInputError, match="writers"):
        PostgresRecorder("postgresql://nobody@127.0.0.1:1/none", writers=True)


@pytest.mark.parametrize("writers", [1, 3])
def test_many_callers_over_several_writer_threads_give_one_gap_free_log(pg_dsn: str, writers: int) -> None:
    name = f"w{os.getpid()}_{next(_names)}"
    rec = PostgresRecorder(pg_dsn + f"?schema={name}&writers={writers}")
    try:
        assert len(rec._writers) == writers
        threads = [str(uuid.uuid4()) for _ in range(12)]
        results: dict[str, list[int]] = {t: [] for t in threads}
        errors: list[BaseException] = []

        def caller(t: str) -> None:
            try:
                for i in range(8):
                    [res] = rec.submit([part(t, [started(t)] if i == 0 else [user(f"{t} {i}")])]).result(timeout=60)
                    results[t].append(res.last_position)
            except BaseException as exc:
                errors.append(exc)

        ts = [threading.Thread(target=caller, args=(t,)) for t in threads]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        assert not errors, errors[:3]
        log = rec.read_log(0)
        assert [e.position for e in log] == list(range(1, 12 * 8 + 1))  # gap-free, in commit order
        by_pos = {e.position: (e.thread_id, e.seq) for e in log}
        for t, positions in results.items():  # each acknowledged position holds that append's event
            assert [by_pos[p] for p in positions] == [(t, s) for s in range(1, 9)]
    finally:
        rec.close()
        with psycopg.connect(pg_dsn, autocommit=True) as c:
            c.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE".encode())
