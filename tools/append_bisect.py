"""Run ``benchmarks.append_floor`` against the tplog of other commits, alternating.

    python tools/append_bisect.py REV [REV ...] [-- HARNESS ARGS]
    python tools/append_bisect.py --first-parent BASE..TIP --points 8 [-- HARNESS ARGS]

Each REV's ``tplog/`` is extracted with ``git archive`` into ``$TMPDIR/tplog-bisect/SHA``
(kept for the next call) and passed as ``--tplog-path``; the harness itself, and the
corpus it builds, are this checkout's. ``--first-parent A..B --points N`` picks N commits
evenly spaced along ``git log --first-parent A..B`` (both ends included).
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()


def extract(rev: str) -> pathlib.Path:
    """``rev``'s tplog package in a directory of its own (extracted once)."""
    sha = _git("rev-parse", "--short=9", f"{rev}^{{commit}}")
    d = pathlib.Path(tempfile.gettempdir()) / "tplog-bisect" / sha
    if not (d / "tplog" / "__init__.py").exists():
        d.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "archive", sha, "tplog"], cwd=REPO, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(d)], input=archive, check=True)
    return d


def spaced(span: str, points: int) -> list[str]:
    """``points`` commits evenly spaced over the first-parent history ``span`` (oldest first)."""
    base = span.split("..")[0]
    revs = [base, *reversed(_git("rev-list", "--first-parent", span).split())]
    step = (len(revs) - 1) / max(points - 1, 1)
    return list(dict.fromkeys(revs[round(i * step)] for i in range(points)))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    rest: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, rest = argv[:i], argv[i + 1 :]
    p = argparse.ArgumentParser(prog="python tools/append_bisect.py", description=__doc__.split("\n")[0])
    p.add_argument("revs", nargs="*")
    p.add_argument("--first-parent", default=None, metavar="BASE..TIP")
    p.add_argument("--points", type=int, default=8)
    args = p.parse_args(argv)
    revs = list(args.revs) + (spaced(args.first_parent, args.points) if args.first_parent else [])
    cmd = [sys.executable, "-m", "benchmarks.append_floor"]
    for rev in revs:
        d = extract(rev)
        cmd += ["--tplog-path", str(d), "--label", d.name]
    return subprocess.run([*cmd, *rest], cwd=REPO, check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main())
