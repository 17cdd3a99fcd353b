"""Process CPU per append: one writer, one event per ``Store.append``, on tmpfs.

    python -m benchmarks.append_cpu [--quick] [--repeat N] [--threads T] [--dir D] [--json PATH]
                                    [--no-profile] [--callgrind] [--peers N [--writers W]]

On a loaded shared machine wall time is mostly other processes; the CPU time this
process spends per append is what decides the 16-writer rows (the writers are
CPU-bound under the GIL). Each repeat appends the first ``--threads`` threads of the
generated corpus, one event per call and thread after thread, to a fresh store on
``--dir`` (default ``/dev/shm`` when it exists: no device, so a durable commit's
flushes cost only their system calls), once with ``durability="relaxed"`` and once
``"durable"``, alternating; the table gives the best and median of the repeats in
µs of process CPU (user + system) per append. Then one relaxed pass runs under
cProfile and its time is split by phase (cumulative time of the functions named in
``PHASES``; the profiler's own overhead is in every share).

``--callgrind``: instead, run one relaxed pass of the appends of ``--threads`` threads
(default 5) and print only its CPU time; run it under
``valgrind --tool=callgrind python -m benchmarks.append_cpu --callgrind --threads N``
for N = 3 and 8 (93 and 333 appends): the difference of the two runs' instruction
totals ÷ 240 is the instructions per append (start-up and imports cancel out), which
do not depend on the machine's load (system calls' kernel time is not counted).

``--peers N``: instead, the CPU of ``benchmarks.peers``'s durable-append workload per
message — its first N conversations, each pydantic-ai message mapped to events
(``TplogSystem.events``) and appended in one call — by ``--writers`` threads (1 and
16 by default, alternating, ``--repeat`` each), split by phase (``breakdown``: the
thread CPU inside each wrapped function, summed over threads) beside the process CPU
of an unwrapped run. Process CPU minus the phases' sum is group commit's hand-over, lock
waits and thread switches under the GIL.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

from benchmarks._data import make_corpus

NAME = "append_cpu"
RESULTS_DIR = pathlib.Path(__file__).parent / "results"

#: phase name → the function whose cumulative time is that phase (first match in the profile)
PHASES: dict[str, str] = {
    "Store.append (all)": "store.py:*(append)",
    "Store._encode (checks, msgpack, zstd, CRC)": "store.py:*(_encode)",
    "Codec.encode": "codec.py:*(encode)",
    "zstd compress (append path)": "*'compress' of 'zstd.ZstdCompressor'*",
    "Request (per-event rule checks)": "commit.py:*(__init__)",
    "engine.run_write (transaction + commit)": "engine.py:*(run_write)",
    "LmdbRecorder._apply (rows, projections)": "recorder.py:*(_apply)",
    "chunks.compact (turn end)": "chunks.py:*(compact)",
    "finder.reindex": "finder.py:*(reindex)",
    "common.advance (order rules)": "common.py:*(advance)",
}


def _appends(threads: list[Any]) -> list[tuple[str, Any]]:
    return [(t.thread_id, e) for t in threads for e in t.events]


def _timed(store: Any, work: list[tuple[str, Any]]) -> float:
    """The process CPU seconds of appending ``work`` one event per call."""
    append = store.append
    t0 = time.process_time()
    for tid, ev in work:
        append(tid, [ev])
    return time.process_time() - t0


def _one(base: pathlib.Path, durability: str, work: list[tuple[str, Any]]) -> float:
    from tplog import Store

    d = pathlib.Path(tempfile.mkdtemp(prefix="tplog-append-cpu-", dir=base))
    try:
        store = Store(d / "s", durability=durability)
        try:
            return _timed(store, work)
        finally:
            store.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _profile(base: pathlib.Path, work: list[tuple[str, Any]]) -> dict[str, Any]:
    import cProfile
    import fnmatch
    import pstats

    from tplog import Store

    d = pathlib.Path(tempfile.mkdtemp(prefix="tplog-append-cpu-", dir=base))
    try:
        store = Store(d / "s", durability="relaxed")
        prof = cProfile.Profile()
        try:
            prof.runcall(_timed, store, work)
        finally:
            store.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    st: Any = pstats.Stats(prof)
    names = {(pathlib.Path(f).name + f":{ln}({fn})" if f != "~" else fn): v for (f, ln, fn), v in st.stats.items()}
    total = sum(v[2] for v in names.values())
    out: dict[str, Any] = {}
    for phase, pattern in PHASES.items():
        cum = [v[3] for n, v in names.items() if fnmatch.fnmatch(n, pattern)]
        out[phase] = round(max(cum) / len(work) * 1e6, 1) if cum else None
    out["profiled total"] = round(total / len(work) * 1e6, 1)
    return out


#: phase → (module, owner attribute or "", function attribute); nested phases follow their parent
BREAKDOWN: list[tuple[str, str, str, str]] = [
    ("mapping: pydantic-ai message → events", "benchmarks.peers", "TplogSystem", "events"),
    ("Store.append (all)", "tplog.store", "Store", "append"),
    ("  Store._encode (checks, msgpack, CRC)", "tplog.store", "Store", "_encode"),
    ("  Request (per-event rule checks)", "tplog.backends.lmdb.commit", "Request", "__init__"),
    ("  engine.run_write (txn build + commit)", "tplog.backends.lmdb.engine", "LmdbEngine", "run_write"),
    ("    LmdbRecorder._apply (one append's rows)", "tplog.backends.lmdb.recorder", "LmdbRecorder", "_apply"),
    ("      advance (order rules, state)", "tplog.backends.lmdb.recorder", "", "advance"),
    ("      chunks.compact (turn end)", "tplog.backends.lmdb.chunks", "", "compact"),
    ("      finder.reindex", "tplog.backends.lmdb.finder", "", "reindex"),
]


def _wrap_phases() -> tuple[dict[str, list[float]], Any]:
    """Wrap BREAKDOWN's functions to add their thread CPU to per-phase lists (one list
    element per thread, merged by the caller); returns (accumulators, undo)."""
    import importlib
    import threading

    tls = threading.local()
    acc: dict[str, list[float]] = {name: [] for name, *_ in BREAKDOWN}
    undo: list[tuple[Any, str, Any]] = []
    clock = time.thread_time

    def slot(name: str) -> list[float]:
        d = getattr(tls, "d", None)
        if d is None:
            d = tls.d = {}
        cell = d.get(name)
        if cell is None:
            cell = d[name] = [0.0]
            acc[name].append(cell)  # type: ignore[arg-type]
        return cell

    for name, mod, owner, attr in BREAKDOWN:
        m = importlib.import_module(mod)
        obj = getattr(m, owner) if owner else m
        fn = getattr(obj, attr)

        def wrapped(*a: Any, __fn: Any = fn, __name: str = name, **k: Any) -> Any:
            cell = slot(__name)
            t0 = clock()
            try:
                return __fn(*a, **k)
            finally:
                cell[0] += clock() - t0

        undo.append((obj, attr, fn))
        setattr(obj, attr, wrapped)

    def restore() -> None:
        for obj, attr, fn in reversed(undo):
            setattr(obj, attr, fn)

    return acc, restore


def _peers_run(base: pathlib.Path, per_writer: list[list[Any]], phases: bool) -> tuple[float, dict[str, float]]:
    """Process CPU seconds of one peers-style append run (and the phases' thread CPU if ``phases``)."""
    from benchmarks import _baselines as B
    from benchmarks.peers import TplogSystem

    d = pathlib.Path(tempfile.mkdtemp(prefix="tplog-append-cpu-", dir=base))
    acc, restore = _wrap_phases() if phases else ({}, lambda: None)
    try:
        sysm = TplogSystem(d)
        try:
            def go(convs: list[Any]) -> Any:
                def run() -> None:
                    app = sysm.append
                    for c in convs:
                        for i in range(len(c.msgs)):
                            app(c, i)
                return run

            t0 = time.process_time()
            if len(per_writer) == 1:
                go(per_writer[0])()
            else:
                B.run_threads([go(w) for w in per_writer])
            cpu = time.process_time() - t0
        finally:
            sysm.close()
    finally:
        restore()
        shutil.rmtree(d, ignore_errors=True)
    return cpu, {name: sum(c[0] for c in cells) for name, cells in acc.items()}  # type: ignore[index]


def peers_breakdown(base: pathlib.Path, n: int, writers: list[int], repeat: int, seed: int) -> dict[str, Any]:
    from benchmarks.peers import conversations, split

    convs = conversations(n, seed)
    msgs = sum(len(c.msgs) for c in convs)
    _peers_run(base, [convs[:10]], False)  # warm-up
    out: dict[str, Any] = {"conversations": len(convs), "messages": msgs, "writers": {}}
    runs: dict[int, list[float]] = {w: [] for w in writers}
    phased: dict[int, list[dict[str, float]]] = {w: [] for w in writers}
    for _ in range(repeat):
        for w in writers:
            per = split(convs, w)
            runs[w].append(_peers_run(base, per, False)[0] / msgs * 1e6)
            cpu, ph = _peers_run(base, per, True)
            phased[w].append({"process CPU (wrapped run)": cpu / msgs * 1e6,
                              **{k: v / msgs * 1e6 for k, v in ph.items()}})
    for w in writers:
        best = min(range(repeat), key=lambda i: phased[w][i]["process CPU (wrapped run)"])
        out["writers"][w] = {
            "process_cpu_us_per_msg": {"best": round(min(runs[w]), 1), "median": round(statistics.median(runs[w]), 1),
                                       "all": [round(x, 1) for x in runs[w]]},
            "phases_us_per_msg (wrapped run with the least CPU)": {k: round(v, 1) for k, v in phased[w][best].items()},
        }
    return out


def _print_breakdown(res: dict[str, Any], load: float) -> None:
    print(f"peers workload: {res['messages']} messages of {res['conversations']} conversations, one message "
          f"per append (load average {load:.1f}); µs of CPU per message")
    for w, r in res["writers"].items():
        pc = r["process_cpu_us_per_msg"]
        print(f"\n{w} writer(s): process CPU best {pc['best']:.1f}, median {pc['median']:.1f} (unwrapped runs)")
        ph = r["phases_us_per_msg (wrapped run with the least CPU)"]
        for k, v in ph.items():
            print(f"  {k:<52}{v:>8.1f}")
        top = ph["mapping: pydantic-ai message → events"] + ph["Store.append (all)"]
        print(f"  {'rest (hand-over, lock waits, thread switches)':<52}{ph['process CPU (wrapped run)'] - top:>8.1f}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.append_cpu", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="20 threads, 3 repeats")
    p.add_argument("--repeat", type=int, default=None, help="repeats per durability (default 3 quick, 7 full)")
    p.add_argument("--threads", type=int, default=None, help="corpus threads appended (default 20 quick, 40 full)")
    p.add_argument("--dir", default=None, help="where stores are created (default /dev/shm if present)")
    p.add_argument("--json", default=None, metavar="PATH",
                   help=f"results JSON (default benchmarks/results/{NAME}.json)")
    p.add_argument("--no-profile", action="store_true")
    p.add_argument("--callgrind", action="store_true", help="one relaxed pass only (run under valgrind)")
    p.add_argument("--peers", type=int, default=None, metavar="N",
                   help="the peers append workload's CPU breakdown over its first N conversations")
    p.add_argument("--writers", default="1,16", help="with --peers: writer thread counts (default 1,16)")
    p.add_argument("--seed", type=int, default=20250601)
    args = p.parse_args(argv)
    base = pathlib.Path(args.dir or ("/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()))
    if args.peers:
        res = peers_breakdown(base, args.peers, [int(w) for w in args.writers.split(",")], args.repeat or 3, args.seed)
        load = os.getloadavg()
        res.update(module=NAME, mode="peers", dir=str(base), loadavg=[round(x, 2) for x in load])
        _print_breakdown(res, load[0])
        out = pathlib.Path(args.json) if args.json else RESULTS_DIR / f"{NAME}_peers.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=1) + "\n")
        print(f"wrote {out}")
        return 0
    if args.callgrind:
        work = _appends(make_corpus(args.threads or 5).threads)
        cpu = _one(base, "relaxed", work)
        print(f"{len(work)} appends, {cpu / len(work) * 1e6:.1f} µs CPU each")
        return 0
    n_threads = args.threads or (20 if args.quick else 40)
    repeat = args.repeat or (3 if args.quick else 7)
    work = _appends(make_corpus(n_threads).threads)
    _one(base, "relaxed", work[:200])  # warm-up: imports, codec contexts
    runs: dict[str, list[float]] = {"relaxed": [], "durable": []}
    for _ in range(repeat):
        for mode in runs:
            runs[mode].append(_one(base, mode, work) / len(work) * 1e6)
    load = os.getloadavg()
    result: dict[str, Any] = {
        "module": NAME, "appends": len(work), "threads": n_threads, "repeat": repeat, "dir": str(base),
        "loadavg": [round(x, 2) for x in load], "python": sys.version.split()[0],
        "cpu_us_per_append": {m: {"best": round(min(v), 1), "median": round(statistics.median(v), 1),
                                  "all": [round(x, 1) for x in v]} for m, v in runs.items()},
    }
    if not args.no_profile:
        result["profile_us_per_append"] = _profile(base, work)
    print(f"process CPU per append, 1 writer, 1 event per call, {len(work)} appends on {base} "
          f"(load average {load[0]:.1f})")
    print(f"{'durability':<12}{'best µs':>10}{'median µs':>12}")
    for m, v in result["cpu_us_per_append"].items():
        print(f"{m:<12}{v['best']:>10.1f}{v['median']:>12.1f}")
    if "profile_us_per_append" in result:
        print("\ncProfile of one relaxed pass, cumulative µs per append (profiler overhead included):")
        for phase, us in result["profile_us_per_append"].items():
            print(f"  {phase:<48}{'—' if us is None else f'{us:.1f}':>8}")
    out = pathlib.Path(args.json) if args.json else RESULTS_DIR / f"{NAME}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
