"""Process CPU per cold load of a ~20-message conversation as tplog objects (and DIY SQLite + orjson).

    python -m benchmarks.load_cpu build DIR [--quick]
    python -m benchmarks.load_cpu measure DIR [--system tplog|sqlite|tplog-long] [--passes N] [--profile]
    python -m benchmarks.load_cpu ab DIR --base CHECKOUT [--rounds R] [--passes N]
    python -m benchmarks.load_cpu callgrind DIR [--base CHECKOUT] [--system S]

On a loaded shared machine wall time is mostly other processes; the CPU time this process
spends per load is what a faster read path changes. ``build`` fills ``DIR`` as
``benchmarks.peers`` fills its load stores (the same conversations, each recorded by one
untimed append; the default store, a zstd dictionary trained after 1,000 events) with
tplog and DIY SQLite (WAL FULL, rows of pydantic ``dump_json``), and lists the short
conversations (15-25 messages, the first 60; 20 with ``--quick``) peers loads.
``measure`` opens the store (tplog: ``fold_cache=0``, so every load reads and folds the
log) and loads each short conversation once per pass (one untimed pass first), printing
the median of the passes' process CPU (user + system) per load in µs; ``--system
tplog-long`` loads the 2,000-message conversation instead. ``ab`` alternates ``measure``
subprocesses of the code in ``--base`` (a checkout, put first on ``PYTHONPATH``) and of
this checkout, ``--rounds`` times each, and prints both medians and their ratio.
``callgrind`` runs ``measure`` under ``valgrind --tool=callgrind`` twice (2 and 7 passes) for
this checkout (or ``--base``): the difference of the instruction totals ÷ the extra loads is
the instructions per load (start-up and imports cancel out), which the machine's load does
not change.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time
from typing import Any

from benchmarks import peers
from benchmarks._data import SEED


def build(root: pathlib.Path, quick: bool) -> None:
    size = {k: v[0 if quick else 1] for k, v in peers.SIZES.items()}
    convs = peers.conversations(size["conversations"], SEED)
    long = peers.long_conversation(size["long_messages"], SEED)
    short = [c for c in convs if 15 <= len(c.msgs) <= 25][: size["short_loads"]]
    root.mkdir(parents=True, exist_ok=False)
    for cls in (peers.TplogSystem, peers.DiySqlite):
        d = root / f"load-{cls.__name__}"
        d.mkdir()
        s = cls(d)
        for c in [*convs, long]:
            s.bulk(c)
        s.close()
    (root / "convs.json").write_text(json.dumps({"short": [c.tid for c in short], "long": long.tid,
                                                 "short_messages": [len(c.msgs) for c in short]}))
    print(f"built {root}: {len(convs)} conversations, {len(short)} short ones, long {len(long.msgs)} messages")


def _system(root: pathlib.Path, which: str) -> Any:
    if which == "sqlite":
        return peers.DiySqlite(root / "load-DiySqlite")
    return peers.TplogCold(root / "load-TplogSystem")


def measure(root: pathlib.Path, which: str, passes: int, profile: bool) -> dict[str, Any]:
    spec = json.loads((root / "convs.json").read_text())
    tids = [spec["long"]] if which == "tplog-long" else spec["short"]
    convs = [peers.Conv(t, []) for t in tids]
    s = _system(root, which)
    load = s.load_own
    for c in convs:  # untimed: imports, dictionaries, decompression contexts
        load(c)
    if profile:
        import cProfile
        import pstats

        prof = cProfile.Profile(time.process_time)
        prof.runcall(lambda: [load(c) for _ in range(passes) for c in convs])
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    per: list[float] = []
    clock = time.process_time
    for _ in range(passes):
        t0 = clock()
        for c in convs:
            load(c)
        per.append((clock() - t0) / len(convs) * 1e6)
    s.close()
    return {"system": which, "loads": len(convs), "passes": passes, "median_us": statistics.median(per),
            "best_us": min(per)}


def ab(root: pathlib.Path, base: str, rounds: int, passes: int, which: str) -> None:
    here = str(pathlib.Path(__file__).resolve().parent.parent)
    runs: dict[str, list[float]] = {"base": [], "new": []}
    cmd = [sys.executable, "-m", "benchmarks.load_cpu", "measure", str(root), "--system", which,
           "--passes", str(passes), "--json"]
    for _ in range(rounds):
        for label, path in (("base", base), ("new", here)):
            env = {**os.environ, "PYTHONPATH": path}
            out = subprocess.run(cmd, env=env, cwd=path, capture_output=True, text=True, check=True).stdout
            runs[label].append(json.loads(out.strip().splitlines()[-1])["median_us"])
    b, n = statistics.median(runs["base"]), statistics.median(runs["new"])
    print(json.dumps({"system": which, "rounds": rounds, "passes": passes, "loadavg": os.getloadavg()[0],
                      "base_us": [round(x, 1) for x in runs["base"]], "new_us": [round(x, 1) for x in runs["new"]],
                      "base_median_us": round(b, 1), "new_median_us": round(n, 1),
                      "new_vs_base": round(n / b, 3)}))


def callgrind(root: pathlib.Path, checkout: str, which: str) -> float:
    import re
    import tempfile

    totals = []
    n_loads = len(json.loads((root / "convs.json").read_text())["short"]) if which != "tplog-long" else 1
    with tempfile.TemporaryDirectory(prefix="tplog-load-cg-") as tmp:
        for passes in (2, 7):
            out = pathlib.Path(tmp) / f"cg{passes}.out"
            cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-m",
                   "benchmarks.load_cpu", "measure", str(root), "--system", which, "--passes", str(passes)]
            r = subprocess.run(cmd, env={**os.environ, "PYTHONPATH": checkout}, cwd=checkout, capture_output=True,
                               text=True, check=True)
            m = re.search(r"Collected : (\d+)", r.stderr)
            assert m is not None, r.stderr[-2000:]
            totals.append(int(m.group(1)))
    per = (totals[1] - totals[0]) / (5 * n_loads)
    print(json.dumps({"checkout": checkout, "system": which, "instructions_per_load": round(per)}))
    return per


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.load_cpu", description=__doc__.split("\n")[0])
    p.add_argument("cmd", choices=("build", "measure", "ab", "callgrind"))
    p.add_argument("dir")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--system", default="tplog", choices=("tplog", "sqlite", "tplog-long"))
    p.add_argument("--passes", type=int, default=30)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--base", default=None, help="ab: the checkout measured as 'base'")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--json", action="store_true", help="measure: print one JSON line")
    args = p.parse_args(argv)
    root = pathlib.Path(args.dir)
    if args.cmd == "build":
        build(root, args.quick)
    elif args.cmd == "measure":
        r = measure(root, args.system, args.passes, args.profile)
        print(json.dumps(r) if args.json else f"{r['system']}: {r['median_us']:.1f} µs CPU per load "
              f"(median of {r['passes']} passes of {r['loads']} loads; best {r['best_us']:.1f})")
    elif args.cmd == "callgrind":
        callgrind(root, args.base or str(pathlib.Path(__file__).resolve().parent.parent), args.system)
    else:
        if not args.base:
            p.error("ab needs --base")
        ab(root, args.base, args.rounds, args.passes, args.system)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
