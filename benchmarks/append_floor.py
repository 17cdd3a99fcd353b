"""The durable single-writer append, one message per ``Store.append``, on a real disk — for any checkout.

    python -m benchmarks.append_floor [--conversations N] [--repeat R] [--dir D]
                                      [--tplog-path DIR ...] [--profile] [--json PATH]

What a new user's first benchmark does: the events of N conversations of the
corpus (:mod:`benchmarks._data`: user prompts, tool calls, tool returns, text) are
built beforehand and grouped one message per call — a ``UserTurnSubmitted`` or a
``MessageRecorded`` with the lifecycle events beside it (:func:`calls`) — then appended conversation after
conversation by one writer to a fresh ``Store(path)`` (its default durability) on
``--dir`` (default ``$TMPDIR``: pass a directory on the disk under test, not a tmpfs).

Per run: messages/s (wall), µs of process CPU per message (user + system), and
what reached the block device per append — ``write_bytes`` of ``/proc/self/io``
(pages dirtied by this process, so each commit's pages once: a durable commit
leaves them clean) ÷ appends, also as 4 KiB pages — with the LMDB file's growth
per append (in pages) beside it.

``--tplog-path DIR`` (repeatable) measures the ``tplog`` package under DIR (e.g.
``git archive SHA tplog`` extracted there: ``tools/append_bisect.py`` does that)
instead of this checkout's; each run is a fresh process, and the checkouts'
runs alternate, repeat after repeat, so a load change hits them alike. Only the
API every version has is used: ``tplog.Store``, ``Store.append``, ``tplog.Event``
(the corpus is built once with this checkout's tplog and handed over as msgpack of
the tagged events). The table gives medians with min-max and each checkout's CPU
per message as a ratio to the first one's (median of the per-repeat ratios, with
their range; on a loaded machine the process CPU still moves by 20-40 %). ``--callgrind``:
the instructions per append, which do not move with the load — two runs per checkout
under ``valgrind --tool=callgrind`` (40 and 240 appends after the same warm-up),
differenced; the kernel's share (writes, flushes) is not counted. ``--profile``: one
more run of each checkout under cProfile, its top functions by cumulative time. Not part of the suite; writes
``benchmarks/results/append_floor.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

NAME = "append_floor"
REPO = pathlib.Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO / "benchmarks" / "results"
PAGE = 4096  # LMDB's page size on Linux x86-64 (env.stat()["psize"])
MESSAGES = ("user_turn", "message")
CALLGRIND_APPENDS = (40, 240)  # the event tags that are a message of their own


def calls(events: list[Any]) -> list[list[Any]]:
    """One conversation's events grouped one message per append: events before the first
    message join it, every later one joins the call before it (a turn's start its user
    prompt, a turn's end its last message)."""
    out: list[list[Any]] = []
    lead: list[Any] = []
    for ev in events:
        if ev.__struct_config__.tag in MESSAGES or not out:
            lead.append(ev)
            if ev.__struct_config__.tag in MESSAGES:
                out.append(lead)
                lead = []
        else:
            out[-1].append(ev)
    if lead:
        out.append(lead)
    return out


def corpus_file(n: int, seed: int | None) -> pathlib.Path:
    """The pre-built calls of ``n`` conversations as msgpack, made with this checkout's tplog (cached)."""
    import msgspec

    from benchmarks._data import SEED, make_corpus

    corpus = make_corpus(n, seed=SEED if seed is None else seed)
    rows = [(t.thread_id, calls(t.events)) for t in corpus.threads]
    data = msgspec.msgpack.encode(rows)
    d = pathlib.Path(tempfile.gettempdir()) / "tplog-bench-cache"
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"append-floor-{n}-{corpus.seed}-{len(data)}.msgpack"
    if not path.exists():
        path.write_bytes(data)
    return path


def _write_bytes() -> int:
    for line in pathlib.Path("/proc/self/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    return 0  # pragma: no cover - not Linux


def _mdb_bytes(root: pathlib.Path) -> int:
    """The size of the LMDB data files under ``root`` (LMDB grows a file page by page as it writes)."""
    return sum(f.stat().st_size for f in root.rglob("data.mdb"))


def child(path: str | None, corpus: pathlib.Path, base: pathlib.Path, profile: bool,
          limit: int | None = None) -> dict[str, Any]:
    """One run in this (fresh) process: the tplog under ``path`` appends ``corpus``'s calls."""
    import gc
    import shutil

    if path is not None:
        sys.path.insert(0, path)
    import msgspec

    import tplog
    import tplog.events

    if path is not None and not pathlib.Path(tplog.__file__).resolve().is_relative_to(pathlib.Path(path).resolve()):
        raise SystemExit(f"tplog imported from {tplog.__file__}, not {path}")
    rows = msgspec.msgpack.decode(corpus.read_bytes(), type=list[tuple[str, list[list[tplog.events.Event]]]])
    work = [(tid, evs) for tid, cs in rows for evs in cs]
    warmup, work = work[:60], work[:limit]  # the warm-up's store is another one
    d = pathlib.Path(tempfile.mkdtemp(prefix="tplog-append-floor-", dir=base))
    try:
        warm = tplog.Store(d / "warm")  # imports, codec contexts, lazily built tables
        for tid, evs in warmup:
            warm.append(tid, evs)
        warm.close()
        store = tplog.Store(d / "s")
        sz0 = _mdb_bytes(d / "s")
        append = store.append

        def run() -> None:
            for tid, evs in work:
                append(tid, evs)

        gc.collect()
        io0, r0, w0 = _write_bytes(), resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        prof = None
        if profile:
            import cProfile

            prof = cProfile.Profile()
            prof.runcall(run)
        else:
            run()
        wall, r1, wb = time.perf_counter() - w0, resource.getrusage(resource.RUSAGE_SELF), _write_bytes() - io0
        user, system = r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime
        store.close()
        growth = _mdb_bytes(d / "s") - sz0
        n = len(work)
        out: dict[str, Any] = {
            "tplog": str(pathlib.Path(tplog.__file__).parent), "appends": n,
            "events": sum(len(e) for _, e in work), "msg_per_s": n / wall,
            "cpu_us_per_msg": (user + system) / n * 1e6, "sys_us_per_msg": system / n * 1e6,
            "write_bytes_per_append": wb / n, "pages_per_append": wb / n / PAGE,
            "file_growth_pages_per_append": growth / n / PAGE,
        }
        if prof is not None:
            import pstats

            st: Any = pstats.Stats(prof)
            top = sorted(st.stats.items(), key=lambda kv: -kv[1][3])[:30]
            out["profile_cum_us_per_msg"] = [
                (f"{pathlib.Path(f).name}:{ln}({fn})", round(v[3] / n * 1e6, 1), round(v[2] / n * 1e6, 1))
                for (f, ln, fn), v in top
            ]
        return out
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _spawn(path: str | None, corpus: pathlib.Path, base: pathlib.Path, profile: bool,
           limit: int | None = None, valgrind: bool = False) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.append_floor", "--child", path or "", "--corpus", str(corpus),
           "--dir", str(base), *(["--profile"] if profile else []), *(["--appends", str(limit)] if limit else [])]
    if valgrind:
        cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *cmd]
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False)
    if p.returncode:
        raise SystemExit(f"run of {path or 'this checkout'} failed:\n{p.stderr}")
    out: dict[str, Any] = json.loads(p.stdout.strip().splitlines()[-1])
    if valgrind:
        out["instructions"] = int(re.findall(r"Collected : (\d+)", p.stderr)[-1])
    return out


def _instructions(path: str | None, corpus: pathlib.Path, base: pathlib.Path, k: tuple[int, int]) -> float:
    """Instructions per append under callgrind: two runs of ``k`` appends, differenced (start-up cancels)."""
    a, b = (_spawn(path, corpus, base, False, n, valgrind=True)["instructions"] for n in k)
    return (b - a) / (k[1] - k[0])


def _span(xs: list[float], fmt: str) -> str:
    return f"{statistics.median(xs):{fmt}} ({min(xs):{fmt}}-{max(xs):{fmt}})"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.append_floor", description=__doc__.split("\n")[0])
    p.add_argument("--conversations", type=int, default=40, help="corpus conversations appended (default 40)")
    p.add_argument("--repeat", type=int, default=3, help="alternating runs per checkout (default 3)")
    p.add_argument("--dir", default=None, help="where stores are created (default $TMPDIR): a real disk")
    p.add_argument("--tplog-path", action="append", default=None, metavar="DIR",
                   help="measure the tplog package under DIR (repeatable; default this checkout)")
    p.add_argument("--label", action="append", default=None, help="a name per --tplog-path (default its dir name)")
    p.add_argument("--profile", action="store_true", help="one more run per checkout under cProfile")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--json", default=None, metavar="PATH", help=f"default benchmarks/results/{NAME}.json")
    p.add_argument("--callgrind", action="store_true",
                   help="also the instructions per append under valgrind's callgrind (runs of 40 and 240 appends)")
    p.add_argument("--appends", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--corpus", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    base = pathlib.Path(args.dir or tempfile.gettempdir())
    if args.child is not None:
        print(json.dumps(child(args.child or None, pathlib.Path(args.corpus), base, args.profile, args.appends)))
        return 0
    from benchmarks._common import machine_info

    paths: list[str | None] = list(args.tplog_path or [None])
    labels = args.label or [pathlib.Path(x).name if x else "this checkout" for x in paths]
    corpus = corpus_file(args.conversations, args.seed)
    info = machine_info(base)
    runs: dict[str, list[dict[str, Any]]] = {lab: [] for lab in labels}
    for _ in range(args.repeat):
        for lab, path in zip(labels, paths, strict=True):
            runs[lab].append(_spawn(path, corpus, base, False))
    first = runs[labels[0]]
    n = first[0]["appends"]
    print(f"durable append, 1 writer, one message per call: {n} appends ({first[0]['events']} events) of "
          f"{args.conversations} conversations on {base} (fsync {info.get('fsync_ms')} ms, "
          f"load {os.getloadavg()[0]:.1f}); medians (min-max) of {args.repeat} alternating runs")
    head = ["checkout", "msg/s", "CPU µs/msg", "of it system", "CPU ÷ first", "bytes written/append",
            "pages/append", "growth pg"]
    print("  ".join(f"{h:>22}" for h in head))
    summary: dict[str, Any] = {}
    for lab in labels:
        rs = runs[lab]
        ratios = [r["cpu_us_per_msg"] / f["cpu_us_per_msg"] for r, f in zip(rs, first, strict=True)]
        summary[lab] = {
            "tplog": rs[0]["tplog"],
            **{k: {"median": statistics.median(r[k] for r in rs), "all": [r[k] for r in rs]}
               for k in ("msg_per_s", "cpu_us_per_msg", "sys_us_per_msg", "write_bytes_per_append", "pages_per_append",
                         "file_growth_pages_per_append")},
            "cpu_ratio_to_first": {"median": statistics.median(ratios), "all": ratios},
        }
        cells = [lab, _span([r["msg_per_s"] for r in rs], ".0f"), _span([r["cpu_us_per_msg"] for r in rs], ".0f"),
                 _span([r["sys_us_per_msg"] for r in rs], ".0f"), _span(ratios, ".2f"),
                 _span([r["write_bytes_per_append"] for r in rs], ".0f"),
                 _span([r["pages_per_append"] for r in rs], ".1f"),
                 f"{statistics.median(r['file_growth_pages_per_append'] for r in rs):.2f}"]
        print("  ".join(f"{c:>22}" for c in cells))
    if args.callgrind:
        print("\ninstructions per append (callgrind, user space only: the kernel's writes and flushes are not in it)")
        for lab, path in zip(labels, paths, strict=True):
            ins = summary[lab]["instructions_per_append"] = _instructions(path, corpus, base, CALLGRIND_APPENDS)
            print(f"{lab:>22}  {ins / 1e6:8.3f} M  ({ins / summary[labels[0]]['instructions_per_append']:.3f}x first)")
    if args.profile:
        for lab, path in zip(labels, paths, strict=True):
            prof = _spawn(path, corpus, base, True)
            summary[lab]["profile"] = prof
            print(f"\ncProfile of {lab} (CPU {prof['cpu_us_per_msg']:.0f} µs/msg profiled): cumulative, own µs per msg")
            for fn, cum, own in prof["profile_cum_us_per_msg"]:
                print(f"  {fn[:70]:<70}{cum:>9.1f}{own:>9.1f}")
    out = pathlib.Path(args.json) if args.json else RESULTS_DIR / f"{NAME}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"module": NAME, "machine": info, "conversations": args.conversations,
                               "repeat": args.repeat, "dir": str(base), "checkouts": summary}, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
