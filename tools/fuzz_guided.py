"""Coverage-guided fuzzing of every reader of outside bytes (atheris, libFuzzer's engine).

Run it::

    python tools/fuzz_guided.py --runs N [--target NAME ...] [--seed S] [--workdir DIR]

Each target of ``tools/fuzz_volume.py`` (thread documents, events, stored values, the
Pydantic AI and Vercel importers, the UI stream) runs in a child process for ``N``
inputs under atheris: tplog's modules are instrumented, and libFuzzer keeps every input
that reaches new branches in a corpus (``WORKDIR/corpus-NAME``, seeded with the target's
real inputs) to mutate further, unlike fuzz_volume.py's blind mutation. A typed error
(``tplog.TplogError``) is an answer; anything else is a crash: libFuzzer stops that target
and writes the input to ``WORKDIR/crash-NAME-*`` to become a regression test. Prints one
JSON line per target (runs, edges and features covered, corpus size, crash) and a total.
Exit 1 if any target crashed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve()
TARGETS = ["json-doc", "json-validate", "msgpack-event", "stored-value", "stored-value-crc-fixed",
           "import-pydantic-ai", "import-vercel-ui", "ui-stream", "stored-chunk", "stored-chunk-crc-fixed"]
# Only for the test that shows a crash is caught: raises an untyped error on inputs that start with "Z!".
PLANTED = "planted"


def _child(name: str, runs: int, seed: int, corpus: Path, artifacts: str, max_len: int) -> None:
    import atheris

    with atheris.instrument_imports(include=["tplog"]):
        sys.path.insert(0, str(HERE.parent))
        import fuzz_volume

        from tplog import TplogError

    if name == PLANTED:
        seeds, fn = [b"{}"], atheris.instrument_func(_planted)
    else:
        seeds, fn = fuzz_volume.targets()[name]
    if not any(corpus.iterdir()):
        for i, data in enumerate(seeds):
            (corpus / f"seed-{i:04d}").write_bytes(data)

    def one(data: bytes) -> None:
        try:  # noqa: SIM105  (a typed error is an answer; anything else propagates: libFuzzer keeps it)
            fn(data)
        except TplogError:
            pass

    atheris.Setup([sys.argv[0], f"-runs={runs}", f"-seed={seed}", f"-max_len={max_len}",
                   f"-artifact_prefix={artifacts}", "-rss_limit_mb=4096", "-timeout=60",
                   "-print_final_stats=1", "-len_control=0", str(corpus)], one)
    atheris.Fuzz()


def _planted(data: bytes) -> None:
    if data[:2] == b"Z!":
        raise IndexError("planted crash")


_DONE = re.compile(rb"Done (\d+) runs in (\d+) second")
_STAT = re.compile(rb"#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)")
_NEW = re.compile(rb"stat::new_units_added:\s+(\d+)")


def fuzz_target(name: str, runs: int, *, seed: int, workdir: Path, max_len: int = 1 << 16) -> dict[str, Any]:
    """Fuzz one target in a child process; its tally."""
    corpus = workdir / f"corpus-{name}"
    corpus.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_")}  # coverage's tracer vs atheris
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(HERE), "--child", name, "--runs", str(runs), "--seed", str(seed),
         "--workdir", str(workdir), "--max-len", str(max_len)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, check=False)
    out = proc.stdout
    (workdir / f"log-{name}.txt").write_bytes(out)
    stats = _STAT.findall(out)
    done = _DONE.search(out)
    crashes = sorted(str(p) for p in workdir.glob(f"crash-{name}-*"))
    last = stats[-1] if stats else (b"0", b"0", b"0", b"0")
    tally: dict[str, Any] = {
        "target": name, "runs": int(done.group(1)) if done else int(last[0]),
        "edges": int(last[1]), "features": int(last[2]), "corpus": int(last[3]),
        "seeds": sum(1 for p in corpus.iterdir() if p.name.startswith("seed-")),
        "new_units": int(m.group(1)) if (m := _NEW.search(out)) else 0,
        "crash": crashes[0] if crashes else None, "exit": proc.returncode,
        "seconds": round(time.monotonic() - t0, 1),
    }
    if proc.returncode and not crashes:  # the child failed before fuzzing: say why
        tally["error"] = out[-2000:].decode(errors="replace")
    if crashes:
        m = re.search(rb"=== Uncaught Python exception: ===\n(.*?)\n", out)
        tally["exception"] = m.group(1).decode(errors="replace") if m else None
    return tally


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--runs", type=int, default=10_000, help="inputs per target")
    ap.add_argument("--target", action="append", default=None, choices=[*TARGETS, PLANTED])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workdir", type=Path, default=Path("fuzz-guided"))
    ap.add_argument("--max-len", type=int, default=1 << 16)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _child(args.child, args.runs, args.seed, args.workdir / f"corpus-{args.child}",
               str(args.workdir / f"crash-{args.child}-"), args.max_len)
        return 0
    args.workdir.mkdir(parents=True, exist_ok=True)
    total, crashed, t0 = 0, 0, time.monotonic()
    for name in args.target or TARGETS:
        tally = fuzz_target(name, args.runs, seed=args.seed, workdir=args.workdir, max_len=args.max_len)
        total += tally["runs"]
        crashed += bool(tally["crash"] or tally["exit"])
        print(json.dumps(tally), flush=True)
    print(json.dumps({"seed": args.seed, "runs": total, "crashed_targets": crashed,
                      "seconds": round(time.monotonic() - t0, 1)}), flush=True)
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
