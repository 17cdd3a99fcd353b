"""Where a group commit's time goes with N writer threads: build, commit, hand-over.

    python tools/group_commit_probe.py [--threads 16] [--appends 60] [--dir /tmp]

Appends one benchmark event per call from N threads to a fresh durable store
and times every group the leader commits: *build* (the write transaction's
Python side: checks, rows, puts), *commit* (LMDB's commit: page writes and
fsyncs, plus getting the GIL back after them) and *gap* (from one group's end
to the next one's start: waking the callers and handing the lead over). It
also prints events/s and the process's user/sys CPU per event (``os.times``).

A diagnostic, not a benchmark: it wraps the LMDB backend's ``_commit`` and the engine's
``run_write`` to take timestamps, which costs a few µs per group.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._data import make_corpus
from tplog import Store


def append_loop(store: Any, mine: list[tuple[str, list[Any]]], appends: int, barrier: threading.Barrier) -> None:
    """One writer thread: after ``barrier``, ``appends`` one-event appends alternating
    between its two threads, cycling through their events after the first."""
    barrier.wait()
    for j in range(appends):
        tid, events = mine[j % 2]
        store.append(tid, [events[1 + (j // 2) % (len(events) - 1)]])


def start_writers(
    store: Any, own: list[tuple[str, list[Any]]], threads: int, appends: int
) -> tuple[threading.Barrier, list[threading.Thread]]:
    """``threads`` started writer threads (writer i owns threads 2i and 2i+1 of ``own``),
    waiting on the returned barrier, which the caller passes last."""
    barrier = threading.Barrier(threads + 1)
    workers = [
        threading.Thread(target=append_loop, args=(store, own[2 * i : 2 * i + 2], appends, barrier))
        for i in range(threads)
    ]
    for w in workers:
        w.start()
    return barrier, workers


def probe(path: str, threads: int, appends: int) -> dict[str, Any]:
    corpus = make_corpus(threads * 2)
    own = [(t.thread_id, t.events) for t in corpus.threads]
    store = Store(path, auto_dictionary=0, check_rules=False)  # replays messages cyclically: a raw log
    for tid, events in own:
        store.append(tid, events[:1])  # ThreadStarted: every append below is one message-sized event
    spans: list[tuple[float, float, float, float, float, int]] = []
    marks: dict[str, float] = {}
    engine, commit = store.backend.engine, store.backend._commit
    run_write = engine.run_write

    def timed_run_write(fn: Any, on_wait: Any = None) -> Any:
        def build(txn: Any) -> Any:
            out = fn(txn)
            marks["built"] = time.perf_counter()
            return out

        marks["start"] = time.perf_counter()
        out = run_write(build, on_wait)
        marks["committed"] = time.perf_counter()
        return out

    def timed_commit(batch: list[Any]) -> None:
        t0 = time.perf_counter()
        commit(batch)
        spans.append((t0, marks["start"], marks["built"], marks["committed"], time.perf_counter(), len(batch)))

    engine.run_write = timed_run_write  # type: ignore[method-assign]
    store.backend._commit = timed_commit  # type: ignore[method-assign]
    barrier, workers = start_writers(store, own, threads, appends)
    cpu0 = os.times()
    barrier.wait()
    t0 = time.perf_counter()
    for w in workers:
        w.join()
    wall = time.perf_counter() - t0
    cpu1 = os.times()
    store.close()
    n = threads * appends
    ms = lambda xs: round(statistics.median(xs) * 1e3, 3)  # noqa: E731
    return {
        "events_per_s": round(n / wall),
        "groups": len(spans),
        "mean_group": round(statistics.mean(s[5] for s in spans), 1),
        "build_ms_median": ms([b - a for _, a, b, _, _, _ in spans]),
        "commit_ms_median": ms([c - b for _, _, b, c, _, _ in spans]),
        "gap_ms_median": ms([spans[i + 1][0] - spans[i][4] for i in range(len(spans) - 1)]),
        "user_us_per_event": round((cpu1.user - cpu0.user) / n * 1e6),
        "sys_us_per_event": round((cpu1.system - cpu0.system) / n * 1e6),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=16)
    p.add_argument("--appends", type=int, default=60, help="appends per thread")
    p.add_argument("--dir", default=None, help="where the store is made (a real disk: fsync matters)")
    a = p.parse_args()
    root = tempfile.mkdtemp(prefix="tplog-probe-", dir=a.dir)
    try:
        for key, value in probe(os.path.join(root, "store"), a.threads, a.appends).items():
            print(f"{key:20s} {value}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
