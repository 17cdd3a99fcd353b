"""The append benchmark's layout floor: raw LMDB replaying tplog's recorded rows must
write exactly what tplog wrote, or the floor it reports would be another workload's."""

from __future__ import annotations

import types
from pathlib import Path

import lmdb

from benchmarks import _baselines as B
from benchmarks._data import make_corpus
from benchmarks.append import grouped, tplog_rows
from tplog import Store

#: Tables only appends write (others also hold rows written when a store is created).
APPEND_ONLY = ("events", "global", "eventids", "heads", "updated")


def _tables(path: Path, names: list[str]) -> dict[str, dict[bytes, bytes]]:
    env = lmdb.open(str(path), readonly=True, lock=False, max_dbs=32)
    try:
        out = {}
        with env.begin() as txn:
            for name in names:
                db = env.open_db(name.encode(), txn=txn, create=False)
                out[name] = dict(txn.cursor(db=db))
        return out
    finally:
        env.close()


def test_the_replay_writes_the_rows_tplog_wrote(tmp_path: Path) -> None:
    corpus = make_corpus(3, cache=False)
    evs = [types.SimpleNamespace(tid=t.thread_id, obj=e) for t in corpus.threads for e in t.events]
    rows = tplog_rows(Store, tmp_path, evs)
    assert len(rows) == len(evs)
    assert all(any(table == "events" for table, _, _ in ops) for ops in rows)  # every append wrote its event
    assert any(value is None for ops in rows for _, _, value in ops)  # the by-update index's deletes are kept

    for per_txn in (1, 4):
        dest = tmp_path / f"replay-{per_txn}"
        dest.mkdir()
        n, secs = B.lmdb_replay(dest, grouped(rows, per_txn), len(evs), mode="durable")
        assert n == len(evs) and secs > 0
        names = sorted({table for ops in rows for table, _, _ in ops})
        assert set(APPEND_ONLY) <= set(names)
        replayed = _tables(dest, names)
        stored = _tables(tmp_path / "rows", names)
        for name in names:
            if name in APPEND_ONLY:
                assert replayed[name] == stored[name], name
            else:  # tplog's table may also hold rows from creating the store
                assert replayed[name].items() <= stored[name].items(), name
        assert len(replayed["global"]) == len(evs)
        # closed turns were re-stored as chunk rows (tplog/backends/lmdb/chunks.py), and replayed as such
        assert len(replayed["events"]) < len(evs)
