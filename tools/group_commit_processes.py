"""How group commit behaves when the writers are spread over processes.

    python tools/group_commit_processes.py [--writers 16] [--appends 100] [--splits 1,2,4,16] [--dir /tmp]

For each split, ``writers`` writer threads in total, spread evenly over that many
processes (each with its own ``Store`` on one shared store directory), append one
benchmark event per call, ``appends`` each. Prints appends/s over all processes and
the mean group (appends per commit, summed over the processes' ``stats()``).
Groups form within one process only: appends of different processes queue on
LMDB's writer lock, one commit each. A diagnostic, not a benchmark (no baselines).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = str(Path(__file__).resolve().parent.parent)
sys.path.insert(0, ROOT)


def _worker(path: str, procs: int, p: int, threads: int, appends: int, go: Any, q: Any) -> None:
    sys.path.insert(0, ROOT)
    from benchmarks._data import make_corpus
    from tools.group_commit_probe import start_writers
    from tplog import Store

    corpus = make_corpus(procs * threads * 2)
    own = [(t.thread_id, t.events) for t in corpus.threads][p * threads * 2 : (p + 1) * threads * 2]
    store = Store(path, auto_dictionary=0, check_rules=False)  # as group_commit_probe: a raw log
    for tid, events in own:
        store.append(tid, events[:1])  # ThreadStarted: every timed append is one message-sized event
    before = store.stats()["group_commit"]
    barrier, workers = start_writers(store, own, threads, appends)
    q.put("ready")
    go.wait()
    t0 = time.time()
    barrier.wait()
    for w in workers:
        w.join()
    t1 = time.time()
    after = store.stats()["group_commit"]
    store.close()
    q.put((t0, t1, after["appends"] - before["appends"], after["commits"] - before["commits"]))


def run(root: str, writers: int, procs: int, appends: int) -> dict[str, Any]:
    from tplog import Store

    path = str(Path(root) / f"store-{procs}")
    Store(path).close()
    ctx = mp.get_context("spawn")
    go, q = ctx.Event(), ctx.Queue()
    threads = writers // procs
    ps = [ctx.Process(target=_worker, args=(path, procs, p, threads, appends, go, q)) for p in range(procs)]
    for p in ps:
        p.start()
    for _ in ps:
        if q.get(timeout=300) != "ready":
            raise RuntimeError("a worker failed to start")
    go.set()
    res = [q.get(timeout=600) for _ in ps]
    for p in ps:
        p.join()
    n = procs * threads * appends
    wall = max(r[1] for r in res) - min(r[0] for r in res)
    return {
        "processes": procs,
        "threads_each": threads,
        "appends_per_s": round(n / wall),
        "mean_group": round(sum(r[2] for r in res) / max(1, sum(r[3] for r in res)), 1),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--writers", type=int, default=16)
    p.add_argument("--appends", type=int, default=100, help="appends per writer thread")
    p.add_argument("--splits", default="1,2,4,16", help="process counts to try (each must divide --writers)")
    p.add_argument("--dir", default=None, help="where the stores are made (a real disk: fsync matters)")
    a = p.parse_args()
    splits = [int(x) for x in a.splits.split(",")]
    if any(a.writers % s for s in splits):
        p.error("every split must divide --writers")
    root = tempfile.mkdtemp(prefix="tplog-procs-", dir=a.dir)
    try:
        for s in splits:
            print(run(root, a.writers, s, a.appends), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
