"""Run every benchmark module and summarize the goals in benchmarks/RESULTS.md.

    python -m benchmarks.suite [--quick] [--repeat N] [--seed S] [--dir D] [--only a,b] [--no-profile]

Each module runs in its own process (``python -m benchmarks.NAME``, the same
arguments), prints its tables, writes ``benchmarks/results/NAME.json`` and its
own section of ``RESULTS.md``. Then this writes the ``suite`` section at the top
of ``RESULTS.md``: every goal with its measured ratio, met / missed, and the
command line that measured it, the wall time, and the top of each profile taken
for a missed goal. ``--quick`` takes under 2 minutes, the default under 10, plus ``peers`` (see benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import time
from typing import Any

from benchmarks._common import RESULTS_DIR, RESULTS_MD, _table

MODULES = ["append", "turns", "rebuild", "links", "storage", "postgres", "peers"]


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(prog="python -m benchmarks.suite", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes, one repeat (< 2 minutes)")
    p.add_argument("--repeat", type=int, default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--dir", default=None)
    p.add_argument("--no-profile", action="store_true")
    p.add_argument("--only", default=None, help=f"comma-separated modules (default: all of {','.join(MODULES)})")
    args = p.parse_args(argv)
    passthrough: list[str] = []
    if args.quick:
        passthrough.append("--quick")
    for flag in ("repeat", "seed", "dir"):
        v = getattr(args, flag)
        if v is not None:
            passthrough += [f"--{flag}", str(v)]
    if args.no_profile:
        passthrough.append("--no-profile")
    return args, passthrough


def write_suite_section(lines: list[str]) -> None:
    """The ``suite`` section goes first, right after the file's introduction."""
    start, end = "<!-- suite:start -->", "<!-- suite:end -->"
    block = "\n".join([start, *lines, end])
    text = RESULTS_MD.read_text() if RESULTS_MD.exists() else "# Benchmark results\n"
    if start in text and end in text:
        before, rest = text.split(start, 1)
        _, after = rest.split(end, 1)
        text = before + block + after
    else:
        i = text.find("<!--")
        text = (text.rstrip("\n") + "\n\n" + block + "\n") if i < 0 else (text[:i] + block + "\n\n" + text[i:])
    RESULTS_MD.write_text(text)


def main(argv: list[str] | None = None) -> int:
    args, passthrough = parse(argv)
    modules = MODULES if args.only is None else [m.strip() for m in args.only.split(",") if m.strip()]
    unknown = set(modules) - set(MODULES)
    if unknown:
        print(f"unknown modules: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    t_all = time.perf_counter()
    ran: list[tuple[str, int, float]] = []
    for name in modules:
        cmd = [sys.executable, "-m", f"benchmarks.{name}", *passthrough]
        print(f"\n=== {' '.join(['python', *cmd[1:]])}", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.run(cmd, env={**os.environ, "PYTHONUNBUFFERED": "1"}).returncode
        ran.append((name, rc, time.perf_counter() - t0))
    wall = time.perf_counter() - t_all

    goals: list[list[str]] = []
    profiles: list[str] = []
    machine: dict[str, Any] = {}
    rcs = {name: rc for name, rc, _ in ran}
    for name in MODULES:  # modules not run now keep their last results (``--only``), marked as such
        rc = rcs.get(name, 0)
        path = RESULTS_DIR / f"{name}.json"
        if name not in rcs and not path.exists():
            continue
        if rc != 0 or not path.exists():
            goals.append([f"({name} failed: exit {rc})", "—", "—", "error", name, ""])
            continue
        data = json.loads(path.read_text())
        machine = data.get("machine") or machine
        cmd = (data.get("machine") or {}).get("command", f"python -m benchmarks.{name}")
        when = "" if name in rcs else f" (earlier run, {(data.get('machine') or {}).get('date', '?')})"
        for g in data.get("goals", []):
            target = f"{'≤' if g.get('at_most') else '≥'} {g['target']:g}x"
            ratio = "—" if g["ratio"] is None else f"{g['ratio']:.2f}x"
            goals.append([g["goal"], ratio, target, g["status"], name, f"`{g.get('command') or cmd}`{when}"])
        for p in data.get("profiles", []):
            top = "; ".join(f"`{r['function']}` {r['own']:.0%}" for r in p["top"][:6])
            profiles.append(f"- **{name}: {p['title']}** — own time: {top}")

    lines = [
        "## Summary: goals" + (" (--quick)" if args.quick else ""),
        "",
        f"`python -m benchmarks.suite{' ' + ' '.join(passthrough) if passthrough else ''}` — wall time "
        f"{wall:.0f} s ({', '.join(f'{n} {s:.0f} s' for n, _, s in ran)}); "
        f"{_dt.datetime.now(_dt.UTC).isoformat(timespec='seconds')}"
        + (f", load {machine.get('loadavg_1m')}" if machine else "")
        + ". Each ratio is measured within one module's run (tplog and its baselines on identical events).",
        "",
        *_table(["goal", "measured", "target", "status", "module", "command"], goals, {1, 2}),
        "",
    ]
    if profiles:
        lines += [
            "Profiles of the tplog side of missed goals (full tables in each module's section):",
            "",
            *profiles,
            "",
        ]
    write_suite_section(lines)
    print("\n" + "\n".join(lines))
    print(f"suite wall time {wall:.0f} s; updated {RESULTS_MD}")
    return 0 if all(rc == 0 for _, rc, _ in ran) else 1


if __name__ == "__main__":
    sys.exit(main())
