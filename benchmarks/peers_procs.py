"""Several worker processes appending to one store (issue #41): tplog and DIY SQLite, N x 8 against 1 x 16.

    python -m benchmarks.peers_procs [--quick] [--repeat N] [--procs N] [--ab] [--dir D] [--json PATH] [--no-md]

What ``tplog serve --workers N`` does to a store: N processes, each with 8 writer threads, append
the peers module's conversations (each conversation written by one thread of one process, one
message per call, durable defaults) to ONE store, against 1 process with 16 writer threads; and DIY
SQLite WAL ``synchronous=FULL`` (the peers module's writer) with the same processes and threads.
Every configuration runs in fresh child processes (forked, so the conversations are not rebuilt),
released together by a barrier; the rate is all messages ÷ (last process's end - first's start).
Repetitions alternate the four configurations; the ratios are per repetition (median, min-max).

For tplog each child also times LMDB's cross-process write lock (the ``writer.lck`` ``lockf`` the
engine queues on before ``env.begin(write=True)``, see ``tplog.backends.lmdb.engine``) by wrapping
the engine's lock/unlock and ``run_write`` in the child only (the library is not changed): per
process, how long its commits waited for the lock and held it (building the transaction, then the
commit's two fsyncs), its groups (appends per commit), how often the other process committed between
two of its commits, and its CPU time per message. ``--ab`` adds tplog as it flushed before issue #41
(the meta page inside the commit, under the lock: LMDB ``metasync``), in the same alternation.
``python -m benchmarks.peers`` runs these rows too.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pathlib
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchmarks import _baselines as B
from benchmarks._common import Report, machine_info, run_interleaved, start, workdir
from benchmarks._data import size_stats

NAME = "peers_procs"
TITLE = "Several processes, one store (issue #41): N processes x 8 writers against 1 x 16, tplog and DIY SQLite"

WRITERS = 8  # per process; the single process gets N x WRITERS
SIZES = {"conversations": (100, 600)}
TINY = 12  # conversations in the smoke test's size

W_PROCS = "durable append, several processes on one store, 1 message per call"


@dataclass
class LockStats:
    """One process's view of LMDB's write lock (seconds, from ``time.perf_counter``)."""

    wait: float = 0.0
    hold: float = 0.0
    build: float = 0.0  # the part of ``hold`` spent building the transaction (before ``txn.commit``)
    commits: int = 0
    appends: int = 0
    cpu: float = 0.0
    messages: int = 0
    spans: list[tuple[float, float]] = field(default_factory=list)  # (acquired, released)
    acquired: float = 0.0
    built: float = 0.0


def _instrument(st: LockStats) -> None:
    """Time the engine's writer lock in this (child) process: wraps three methods of the class."""
    from tplog.backends.lmdb.engine import LmdbEngine

    lock0, unlock0, run0 = LmdbEngine._lock_writers, LmdbEngine._unlock_writers, LmdbEngine.run_write
    clock = time.perf_counter

    def lock(self: Any, on_wait: Any = None) -> None:
        t = clock()
        lock0(self, on_wait)
        st.acquired = st.built = clock()
        st.wait += st.acquired - t

    def unlock(self: Any) -> None:
        t = clock()  # before the release: another process's hold may start right after it
        unlock0(self)
        st.hold += t - st.acquired
        st.build += st.built - st.acquired
        st.spans.append((st.acquired, t))

    def run_write(self: Any, fn: Callable[[Any], Any], on_wait: Any = None) -> Any:
        def timed(txn: Any) -> Any:
            out = fn(txn)
            st.built = clock()
            return out

        return run0(self, timed, on_wait)

    LmdbEngine._lock_writers = lock  # type: ignore[method-assign]
    LmdbEngine._unlock_writers = unlock  # type: ignore[method-assign]
    LmdbEngine.run_write = run_write  # type: ignore[method-assign,assignment]


def _child(kind: str, d: pathlib.Path, share: list[Any], writers: int, go: Any, out: Any) -> None:
    from benchmarks import peers

    st = LockStats()
    if kind == "tplog-metalock":  # as before issue #41: LMDB flushes the meta page inside the commit, locked
        import lmdb

        from tplog.backends.lmdb import engine as E

        lmdb_open, init = lmdb.open, E.LmdbEngine.__init__
        lmdb.open = lambda *a, **k: lmdb_open(*a, **{**k, "metasync": True})

        def locked_meta(self: Any, *a: Any, **k: Any) -> None:
            init(self, *a, **k)
            self._meta_sync = False

        E.LmdbEngine.__init__ = locked_meta  # type: ignore[method-assign]
        kind = "tplog"
    if kind == "tplog":
        _instrument(st)
        sysm: peers.System = peers.TplogSystem(d)
    else:
        sysm = peers.DiySqlite(d)
    per_writer = peers.split(share, writers)
    stamps: list[float] = []
    t0s: list[float] = []
    work = [peers._writer(sysm, w, stamps, t0s) for w in per_writer if w]
    go.wait()
    c0 = time.process_time()
    t0 = time.perf_counter()
    B.run_threads(work)
    t1 = time.perf_counter()
    st.cpu = time.process_time() - c0
    st.messages = len(stamps)
    if kind != "diy":
        gc = sysm.store.backend._gc  # type: ignore[attr-defined]
        st.commits, st.appends = gc.commits, gc.appends
        st.spans = [s for s in st.spans if s[0] >= t0]
    sysm.close()
    out.send((len(stamps), t0, t1, st))
    out.close()


def measure(
    kind: str, base: pathlib.Path, convs: list[Any], procs: int, writers: int, stats: dict[str, list[Any]], label: str
) -> Callable[[], tuple[int, float]]:
    """A measure function: a fresh store, ``procs`` forked processes x ``writers`` threads appending."""
    ctx = mp.get_context("fork")

    def run() -> tuple[int, float]:
        from benchmarks import peers

        d = base / f"{kind}-{procs}x{writers}-{uuid.uuid4().hex[:8]}"
        d.mkdir()
        (peers.TplogSystem(d) if kind != "diy" else peers.DiySqlite(d)).close()  # created once, before the race
        go = ctx.Barrier(procs)
        pipes, children = [], []
        for p in range(procs):
            r, w = ctx.Pipe(duplex=False)
            c = ctx.Process(target=_child, args=(kind, d, convs[p::procs], writers, go, w), daemon=True)
            c.start()
            w.close()
            pipes.append(r)
            children.append(c)
        results = [r.recv() for r in pipes]
        for c in children:
            c.join()
            if c.exitcode != 0:
                raise RuntimeError(f"{label}: a worker process exited with {c.exitcode}")
        import shutil

        shutil.rmtree(d, ignore_errors=True)
        n = sum(x[0] for x in results)
        secs = max(x[2] for x in results) - min(x[1] for x in results)
        stats.setdefault(label, []).append((secs, [x[3] for x in results]))
        return n, secs

    return run


def lock_rows(label: str, runs: list[tuple[float, list[LockStats]]]) -> list[list[str]]:
    """Per process of the last repetition: the lock's wait and hold, groups, CPU, interleaving."""
    secs, sts = runs[-1]
    owner = sorted((a, b, i) for i, s in enumerate(sts) for a, b in s.spans)
    busy = sum(b - a for a, b, _ in owner)
    rows = []
    for i, s in enumerate(sts):
        n = max(1, s.commits)
        mine = [j for j, (_, _, p) in enumerate(owner) if p == i]
        after_other = sum(1 for j in mine if j > 0 and owner[j - 1][2] != i)
        rows.append(
            [
                label,
                str(i + 1),
                f"{s.messages:,}",
                f"{s.commits:,}",
                f"{s.appends / n:.1f}",
                f"{s.wait / n * 1e3:.2f}",
                f"{s.hold / n * 1e3:.2f}",
                f"{s.build / n * 1e3:.2f}",
                f"{(s.hold - s.build) / n * 1e3:.2f}",
                f"{s.hold / max(1, s.messages) * 1e6:.0f}",
                f"{after_other / max(1, len(mine)):.2f}",
                f"{s.cpu / max(1, s.messages) * 1e6:.0f}",
                f"{busy / secs:.2f}",
            ]
        )
    return rows


LOCK_HEADERS = [
    "system",
    "process",
    "messages",
    "commits",
    "appends/commit",
    "wait ms/commit",
    "hold ms/commit",
    "build ms",
    "commit (fsync) ms",
    "hold µs/msg",
    "after other's commit",
    "CPU µs/msg",
    "lock busy ÷ wall",
]


METALOCK = "meta page flushed under the lock"


def configurations(procs: int, ab: bool = False) -> list[tuple[str, str, int, int]]:
    """(label, kind, processes, writers per process): one process first, then ``procs``; ``ab``:
    also tplog as it flushed before (the meta page inside the commit, under the writer lock)."""
    one, many = f"1 x {procs * WRITERS}", f"{procs} x {WRITERS}"
    return [
        (f"tplog {one}", "tplog", 1, procs * WRITERS),
        (f"tplog {many}", "tplog", procs, WRITERS),
        (f"DIY SQLite WAL FULL {one}", "diy", 1, procs * WRITERS),
        (f"DIY SQLite WAL FULL {many}", "diy", procs, WRITERS),
    ] + (
        [
            (f"tplog {one}, {METALOCK}", "tplog-metalock", 1, procs * WRITERS),
            (f"tplog {many}, {METALOCK}", "tplog-metalock", procs, WRITERS),
        ]
        if ab
        else []
    )


def add_rows(report: Report, root: pathlib.Path, convs: list[Any], repeat: int, procs: int, ab: bool = False) -> None:
    """The multi-process rows, their per-repetition ratios, goals and the lock table, into ``report``."""
    stats: dict[str, list[Any]] = {}
    confs = configurations(procs, ab)
    systems = [(label, measure(kind, root, convs, p, w, stats, label)) for label, kind, p, w in confs]
    rows = report.add(run_interleaved(W_PROCS, systems, repeat))
    by = {r.system: r for r in rows}
    t1, tn, d1, dn = (by[c[0]] for c in confs[:4])
    extra = []
    if ab:
        m1, mn = (by[c[0]] for c in confs[4:])
        extra = [
            (f"tplog {procs} processes ÷ the same, {METALOCK}", tn, mn, None),
            (f"tplog 1 process ÷ the same, {METALOCK}", t1, m1, None),
            (f"tplog {procs} processes, {METALOCK} ÷ 1 process, {METALOCK}", mn, m1, None),
        ]

    def spread(num: Any, den: Any) -> tuple[float, str]:
        ratios = [b / a for a, b in zip(num.samples, den.samples, strict=True)]  # seconds: den ÷ num = rate ratio
        return statistics.median(ratios), f"{min(ratios):.2f}-{max(ratios):.2f}"

    table = []
    for what, num, den, target in (
        (f"tplog {procs} processes ÷ tplog 1 process", tn, t1, 1.6),
        (f"tplog {procs} processes ÷ DIY SQLite {procs} processes", tn, dn, 1.5),
        (f"DIY SQLite {procs} processes ÷ DIY SQLite 1 process", dn, d1, None),
        ("tplog 1 process ÷ DIY SQLite 1 process", t1, d1, None),
        *extra,
    ):
        med, rng = spread(num, den)
        table.append(
            [
                what,
                f"{num.rate:,.0f}",
                f"{den.rate:,.0f}",
                f"{med:.2f}x",
                rng,
                "" if target is None else f"≥ {target:g}x",
            ]
        )
        if target is not None:
            report.goal_value(what, med, target, f"{W_PROCS}: {num.system}", f"{W_PROCS}: {den.system}")
    report.table(
        f"{procs} processes x {WRITERS} writers against 1 x {procs * WRITERS}, one store each (msg/s: median of "
        f"{repeat} alternating repetitions; ratio: median of the per-repetition ratios, and their range)",
        ["ratio", "numerator msg/s", "denominator msg/s", "ratio", "range", "goal"],
        table,
    )
    report.table(
        "LMDB's cross-process write lock, per process (tplog rows, last repetition): waiting for it and holding it "
        "per commit; a commit's hold = building its transaction + the commit (fsyncs); 'after other's commit' = "
        "share of this process's commits that followed another process's; 'lock busy ÷ wall' = the lock held by "
        "any process over the run",
        LOCK_HEADERS,
        [row for label, _, _, _ in confs if label.startswith("tplog") for row in lock_rows(label, stats[label])],
    )


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    tiny = "--tiny" in argv  # the smoke test's size: a few seconds
    ab = "--ab" in argv  # also tplog flushing the meta page under the lock (as before issue #41)
    procs = 2
    if "--procs" in argv:
        i = argv.index("--procs")
        procs = int(argv[i + 1])
        del argv[i : i + 2]
    argv = [a for a in argv if a not in ("--tiny", "--ab")]
    args, size, report, Store = start(NAME, TITLE, __doc__, SIZES, argv)
    if Store is None:
        report.finish()
        return 0
    from benchmarks import peers

    n = TINY if tiny else size["conversations"]
    convs = peers.conversations(n, args.seed)
    ta, _ = peers._pai()
    sizes = [len(ta.dump_json(m)) for c in convs for m in c.msgs]
    report.data = {
        "seed": args.seed,
        "threads": len(convs),
        **size_stats(sizes),
        "processes": procs,
        "writers_per_process": WRITERS,
        "cpus": os.cpu_count(),
    }
    with workdir(args.dir, NAME) as root:
        report.machine = machine_info(root)
        add_rows(report, root, convs, args.repeat, procs, ab)
    report.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
