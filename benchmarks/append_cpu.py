"""Process CPU per append: one writer, one event per ``Store.append``, on tmpfs.

    python -m benchmarks.append_cpu [--quick] [--repeat N] [--threads T] [--dir D] [--json PATH]
                                    [--no-profile] [--callgrind]

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
    "_Request (per-event rule checks)": "commit.py:*(__init__)",
    "engine.run_write (transaction + commit)": "engine.py:*(run_write)",
    "LmdbRecorder._apply (rows, projections)": "recorder.py:*(_apply)",
    "chunks.compact (turn end)": "chunks.py:*(compact)",
    "finder.reindex": "finder.py:*(reindex)",
    "contract.advance (order rules)": "contract.py:*(advance)",
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
    args = p.parse_args(argv)
    base = pathlib.Path(args.dir or ("/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()))
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
