"""Shared plumbing of the benchmark modules: arguments, timing, tables, results.

A module builds a :class:`Report`, adds :class:`Row` measurements (tplog and its
baselines, measured in the same run on the same events) and :class:`Goal` ratios,
then calls :meth:`Report.finish`: it prints the tables, writes
``benchmarks/results/NAME.json`` (rows, goals, data stats, machine and library
versions, the command line) and rewrites the module's own section of
``benchmarks/RESULTS.md`` between ``<!-- NAME:start -->`` / ``<!-- NAME:end -->``.

Figures on shared 2-core VMs move 10-40 % between runs; compare ratios within a run.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import gc
import json
import os
import pathlib
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "Goal",
    "Report",
    "Row",
    "dir_size",
    "freeze_heap",
    "fsync_latency_ms",
    "machine_info",
    "parse_args",
    "profile_top",
    "profile_top_threads",
    "run_interleaved",
    "tplog_bulk_load",
    "tplog_store_api",
    "workdir",
]

BENCH_DIR = pathlib.Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
RESULTS_MD = BENCH_DIR / "RESULTS.md"


# --------------------------------------------------------------------------- arguments


def parse_args(name: str, description: str, argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=f"python -m benchmarks.{name}", description=description)
    p.add_argument("--quick", action="store_true", help="small sizes, one repeat (< 2 minutes for all modules)")
    p.add_argument(
        "--repeat", type=int, default=None, help="repeats per measurement (median kept); default 1 quick, 5 full"
    )
    p.add_argument("--seed", type=int, default=None, help="data seed (default: benchmarks._data.SEED)")
    p.add_argument("--dir", default=None, help="where stores are created (default: a temp dir on $TMPDIR)")
    p.add_argument(
        "--json",
        nargs="?",
        const="-",
        default=None,
        metavar="PATH",
        help=f"results JSON path (always written; default benchmarks/results/{name}.json); "
        "without PATH also print the JSON to stdout",
    )
    p.add_argument("--no-md", action="store_true", help="do not rewrite this module's section of benchmarks/RESULTS.md")
    p.add_argument("--no-profile", action="store_true", help="do not cProfile the tplog side of goals that are missed")
    args = p.parse_args(argv)
    if args.repeat is None:
        args.repeat = 1 if args.quick else 5
    if args.seed is None:
        from benchmarks._data import SEED

        args.seed = SEED
    return args


# --------------------------------------------------------------------------- environment


@contextlib.contextmanager
def workdir(base: str | None, name: str) -> Iterator[pathlib.Path]:
    """A fresh directory for one benchmark's stores, removed afterwards."""
    d = pathlib.Path(tempfile.mkdtemp(prefix=f"tplog-bench-{name}-", dir=base))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def freeze_heap() -> None:
    """Move everything alive (the corpus) out of the cyclic GC's reach.

    Otherwise every full collection during a measurement rescans hundreds of MB
    of generated events, which charges the data generator to whatever runs then.
    """
    gc.collect()
    gc.freeze()


def dir_size(path: str | os.PathLike[str]) -> int:
    """Bytes allocated on disk (st_blocks, so sparse LMDB map files count only what is used)."""
    p = pathlib.Path(path)
    files = [p] if p.is_file() else [f for f in p.rglob("*") if f.is_file()]
    return sum(f.stat().st_blocks * 512 for f in files)


def fsync_latency_ms(directory: str | os.PathLike[str], n: int = 30) -> dict[str, float]:
    """Median latency (ms) of fsync after a 4 KiB overwrite, and after a 4 KiB append (file grows).

    The first is the floor of a commit that rewrites pages in place; the second
    also commits the file-size change to the filesystem journal, which is what a
    growing log (LMDB file, WAL, JSONL) pays while it grows.
    """
    path = os.path.join(directory, ".fsync-probe")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    out: dict[str, float] = {}
    try:
        for name, append in (("fsync_ms", False), ("append_fsync_ms", True)):
            samples = []
            for i in range(n):
                os.pwrite(fd, b"x" * 4096, (n + i if append else i % 4) * 4096)
                t = time.perf_counter()
                os.fsync(fd)
                samples.append(time.perf_counter() - t)
            out[name] = round(statistics.median(samples) * 1000, 3)
        return out
    finally:
        os.close(fd)
        os.unlink(path)


def _cpu_model() -> str:
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info(directory: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Where and with what the figures were measured (also warns on stderr when the machine is busy)."""
    import sqlite3

    import lmdb
    import msgspec
    import zstandard

    info: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.executable), "-m", _module_name(), *sys.argv[1:]]),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "lmdb": f"{lmdb.__version__} (liblmdb {'.'.join(map(str, lmdb.version()[:3]))})",
        "msgspec": msgspec.__version__,
        "zstandard": f"{zstandard.__version__} (libzstd {'.'.join(map(str, zstandard.ZSTD_VERSION))})",
        "sqlite": sqlite3.sqlite_version,
    }
    try:
        import orjson

        info["orjson"] = orjson.__version__
    except ImportError:  # pragma: no cover
        pass
    with contextlib.suppress(Exception):
        import tplog

        info["tplog"] = tplog.__version__
    with contextlib.suppress(Exception):
        info["git"] = subprocess.run(
            ["git", "describe", "--always", "--dirty"], cwd=BENCH_DIR, capture_output=True, text=True, timeout=5
        ).stdout.strip()
    if directory is not None:
        info.update(fsync_latency_ms(directory))
    try:
        info["loadavg_1m"] = round(os.getloadavg()[0], 2)
        if info["loadavg_1m"] > 0.5 * (os.cpu_count() or 1):
            print(
                f"warning: load average {info['loadavg_1m']} — something else is running; figures will be noisy",
                file=sys.stderr,
            )
    except OSError:  # pragma: no cover
        pass
    return info


def _module_name() -> str:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return spec.name if spec is not None else sys.argv[0]


def tplog_store_api() -> tuple[Any, Any] | None:
    """``(Store, AsyncStore)`` if this checkout has them, else None (tplog rows are skipped).

    ``TPLOG_BENCH_BASELINES_ONLY=1`` forces None (to run or test the baselines alone).
    """
    if os.environ.get("TPLOG_BENCH_BASELINES_ONLY") == "1":
        return None
    try:
        import tplog

        return tplog.Store, getattr(tplog, "AsyncStore", None)
    except (ImportError, AttributeError):
        return None


def start(
    name: str, title: str, doc: str, sizes: dict[str, tuple[Any, Any]], argv: list[str] | None
) -> tuple[Any, dict[str, Any], Report, Any]:
    """A module's opening: its arguments, its sizes (quick or full), its report, and
    ``tplog.Store`` (``None``, with a note in the report, in a checkout without it)."""
    args = parse_args(name, doc.splitlines()[0], argv)
    q = 0 if args.quick else 1
    size = {k: v[q] for k, v in sizes.items()}
    report = Report(name, title, args)
    api = tplog_store_api()
    store_cls = api[0] if api is not None else None
    if store_cls is None:
        report.notes.append("tplog.Store is not available in this checkout: the tplog rows were skipped.")
    return args, size, report, store_cls


def tplog_bulk_load(
    Store: Any, path: str | os.PathLike[str], threads: Any, *, batch: int = 5000, durability: str = "relaxed"
) -> float:
    """Untimed setup: append ``(thread_id, events)`` pairs, ``batch`` appends per write transaction.

    A single caller's appends each commit alone (one fsync each), which would make
    a 1,000,000-thread store take an hour; so up to ``batch`` appends are handed
    to one group commit at once. Uses the store's group-commit internals when
    they are there, else ``AsyncStore`` with ``batch`` concurrent appends (the
    public way to fill one group). Returns seconds taken.
    """
    t0 = time.perf_counter()
    threads = list(threads)
    store = Store(path, durability=durability)
    try:
        try:
            from tplog.backends.lmdb.recorder import _Request
            from tplog.store import ANY

            encode, commit = store._encode, store.backend._commit  # type: ignore[attr-defined]
        except (ImportError, AttributeError):
            encode = None
        if encode is not None:
            for i in range(0, len(threads), batch):
                reqs = [_Request(tid, encode(tid, evs, None), ANY) for tid, evs in threads[i : i + batch]]
                commit(reqs)
                for r in reqs:
                    if r.error is not None:
                        raise r.error
        else:  # pragma: no cover - only if the internals change
            import asyncio

            from tplog import AsyncStore

            async def main() -> None:
                astore = AsyncStore(store)
                try:
                    for i in range(0, len(threads), batch):
                        await asyncio.gather(*(astore.append(tid, evs) for tid, evs in threads[i : i + batch]))
                finally:
                    pass  # the store (and its leader thread) is closed below

            asyncio.run(main())
        store.sync()
    finally:
        store.close()
    return time.perf_counter() - t0


# --------------------------------------------------------------------------- measuring


@dataclass
class Row:
    """One measurement: ``events`` done in ``seconds`` (median of the repeats)."""

    workload: str
    system: str
    events: int
    seconds: float
    samples: list[float] = field(default_factory=list)
    note: str = ""
    is_tplog: bool = False

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else float("inf")


@dataclass
class Goal:
    """A ratio (``tplog ÷ baseline`` of events/s unless the goal says otherwise) and its target.

    ``at_most``: the ratio must stay at or below ``target`` (bytes, latency,
    memory growth) instead of reaching it.
    """

    goal: str
    ratio: float | None
    target: float
    numerator: str
    denominator: str
    at_most: bool = False

    @property
    def status(self) -> str:
        if self.ratio is None:
            return "skipped"
        ok = self.ratio <= self.target if self.at_most else self.ratio >= self.target
        return "met" if ok else "NOT met"

    @property
    def target_text(self) -> str:
        return f"{'≤' if self.at_most else '≥'} {self.target:g}x"


Measure = Callable[[], "tuple[int, float]"]


def run_interleaved(
    workload: str, systems: list[tuple[str, Measure]], repeat: int, *, tplog_prefix: str = "tplog"
) -> list[Row]:
    """Run each system's measurement ``repeat`` times, round-robin, and keep the median.

    Each measure function sets up its own fresh state, times only the work and
    returns ``(events, seconds)``. Interleaving spreads a noisy neighbour's
    bursts over all systems instead of one.
    """
    samples: dict[str, list[float]] = {name: [] for name, _ in systems}
    events: dict[str, int] = {}
    for _ in range(repeat):
        for name, fn in systems:
            n, secs = fn()
            events[name] = n
            samples[name].append(secs)
            print(f"  {workload:<38} {name:<52} {n / secs:>12,.0f} ev/s", file=sys.stderr, flush=True)
    return [
        Row(
            workload,
            name,
            events[name],
            statistics.median(samples[name]),
            samples[name],
            is_tplog=name.startswith(tplog_prefix),
        )
        for name, _ in systems
    ]


# --------------------------------------------------------------------------- output


def _fmt_rate(r: float) -> str:
    if r >= 1e6:
        return f"{r / 1e6:.2f}M"
    if r >= 1e4:
        return f"{r / 1e3:.0f}k"
    if r >= 1e3:
        return f"{r / 1e3:.1f}k"
    return f"{r:.0f}"


def _table(headers: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return (
            "| "
            + " | ".join(
                c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
            )
            + " |"
        )

    sep = "|" + "|".join(("-" * (w + 1) + ":") if i in right else ("-" * (w + 2)) for i, w in enumerate(widths)) + "|"
    return [line(headers), sep, *(line(r) for r in rows)]


@dataclass
class Report:
    name: str
    title: str
    args: argparse.Namespace
    data: dict[str, Any] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    goals: list[Goal] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    machine: dict[str, Any] = field(default_factory=dict)
    #: free-form tables (bytes, memory, latency): ``{"title", "headers", "rows", "right"}``
    tables: list[dict[str, Any]] = field(default_factory=list)
    #: cProfile summaries of the tplog side: ``{"title", "total_s", "top": [...]}``
    profiles: list[dict[str, Any]] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)

    def add(self, rows: list[Row]) -> list[Row]:
        self.rows += rows
        return rows

    def find(self, workload: str, system: str) -> Row | None:
        for r in self.rows:
            if r.workload == workload and r.system == system:
                return r
        return None

    def goal(self, goal: str, target: float, num: tuple[str, str], den: tuple[str, str]) -> Goal:
        """Record ``rate(num) ÷ rate(den)`` against ``target``; skipped if either row is missing."""
        a, b = self.find(*num), self.find(*den)
        ratio = round(a.rate / b.rate, 2) if a is not None and b is not None else None
        g = Goal(goal, ratio, target, f"{num[0]}: {num[1]}", f"{den[0]}: {den[1]}")
        self.goals.append(g)
        return g

    def goal_value(
        self, goal: str, ratio: float | None, target: float, num: str, den: str, *, at_most: bool = False
    ) -> Goal:
        """Record a ratio computed by the module (bytes, latency, memory) against ``target``."""
        g = Goal(goal, None if ratio is None else round(ratio, 2), target, num, den, at_most)
        self.goals.append(g)
        return g

    def table(self, title: str, headers: list[str], rows: list[list[str]], right: set[int] | None = None) -> None:
        """A free-form table (rendered after the rate tables); ``right``: right-aligned columns (default all but 0)."""
        self.tables.append(
            {
                "title": title,
                "headers": headers,
                "rows": rows,
                "right": sorted(right if right is not None else set(range(1, len(headers)))),
            }
        )

    def profile(self, title: str, fn: Callable[[], Any] | list[Callable[[], Any]], limit: int = 12) -> dict[str, Any]:
        """cProfile ``fn`` once (a list: each in its own thread) and keep its top functions by own time."""
        print(f"  profiling: {title}", file=sys.stderr, flush=True)
        p = profile_top_threads(fn, limit) if isinstance(fn, list) else profile_top(fn, limit)
        p["title"] = title
        self.profiles.append(p)
        return p

    def markdown(self) -> list[str]:
        out: list[str] = []
        d = self.data
        if d:
            out.append(
                f"Data: {d.get('events', 0):,} events in {d.get('threads', 0):,} threads, "
                f"{d.get('json_bytes', 0) / 1e6:.1f} MB of JSON; "
                f"event size mean {d.get('mean_event_bytes', 0):,.0f} B, "
                f"median {d.get('median_event_bytes', 0):,.0f} B, "
                f"p99 {d.get('p99_event_bytes', 0):,} B (seed {d.get('seed')})."
            )
            out.append("")
        workloads: list[str] = []
        for r in self.rows:
            if r.workload not in workloads:
                workloads.append(r.workload)
        for w in workloads:
            rows = [r for r in self.rows if r.workload == w]
            ref = next((r for r in rows if r.is_tplog), None)
            headers = ["system", "events", "events/s", "µs/event"] + (["tplog ÷ this"] if ref else [])
            cells = []
            for r in rows:
                c = [
                    ("**" + r.system + "**") if r.is_tplog else r.system,
                    f"{r.events:,}",
                    _fmt_rate(r.rate),
                    f"{1e6 / r.rate:,.1f}",
                ]
                if ref:
                    c.append(f"{ref.rate / r.rate:.2f}x")
                cells.append(c)
            out.append(f"**{w}**")
            out.append("")
            out += _table(headers, cells, {1, 2, 3, 4})
            out.append("")
        for t in self.tables:
            out.append(f"**{t['title']}**")
            out.append("")
            out += _table(t["headers"], t["rows"], set(t["right"]))
            out.append("")
        if self.goals:
            cells = [
                [g.goal, "—" if g.ratio is None else f"{g.ratio:.2f}x", g.target_text, g.status] for g in self.goals
            ]
            out.append("**Goals** (tplog ÷ baseline, same run; events/s unless the goal names another measure)")
            out.append("")
            out += _table(["goal", "ratio", "target", "status"], cells, {1, 2})
            out.append("")
        for n in self.notes:
            out.append(f"- {n}")
        if self.notes:
            out.append("")
        for p in self.profiles:
            out.append(
                f"**Profile: {p['title']}** (cProfile, {p['total_s']:.2f} s profiled; share of the profiled time)"
            )
            out.append("")
            out += _table(
                ["function", "own time", "with callees", "calls"],
                [[f"`{r['function']}`", f"{r['own']:.0%}", f"{r['cum']:.0%}", f"{r['calls']:,}"] for r in p["top"]],
                {1, 2, 3},
            )
            out.append("")
        m = self.machine
        if m:
            out.append(
                f"Machine: {m.get('cpu')} x {m.get('cores')} cores, fsync {m.get('fsync_ms', '?')} ms "
                f"(appending: {m.get('append_fsync_ms', '?')} ms), load {m.get('loadavg_1m', '?')}; "
                f"Python {m.get('python')}, lmdb {m.get('lmdb')}, msgspec {m.get('msgspec')}, "
                f"zstandard {m.get('zstandard')}, SQLite {m.get('sqlite')}"
                f"{', orjson ' + m['orjson'] if 'orjson' in m else ''}; {m.get('date')}; `{m.get('command')}`"
                f"{' at ' + m['git'] if m.get('git') else ''}."
            )
        return out

    def finish(self) -> None:
        elapsed = time.perf_counter() - self.started
        md = self.markdown()
        print()
        print(f"## {self.title}")
        print()
        print("\n".join(md))
        print(f"({elapsed:.0f} s)")
        payload = {
            "benchmark": self.name,
            "quick": bool(self.args.quick),
            "repeat": self.args.repeat,
            "seconds": round(elapsed, 1),
            "machine": self.machine,
            "data": self.data,
            "rows": [{**asdict(r), "rate": round(r.rate, 1)} for r in self.rows],
            "goals": [{**asdict(g), "status": g.status, "command": self.machine.get("command")} for g in self.goals],
            "tables": self.tables,
            "profiles": self.profiles,
            "notes": self.notes,
        }
        text = json.dumps(payload, indent=2, ensure_ascii=False) + "\n"
        path = pathlib.Path(self.args.json) if self.args.json not in (None, "-") else RESULTS_DIR / f"{self.name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if self.args.json == "-":
            print(text)
        print(f"wrote {path}")
        if not self.args.no_md:
            write_results_section(self.name, [f"## {self.title}" + (" (--quick)" if self.args.quick else ""), "", *md])
            print(f"updated {RESULTS_MD} section {self.name!r}")


def profile_top(fn: Callable[[], Any], limit: int = 12) -> dict[str, Any]:
    """Run ``fn`` under cProfile; the ``limit`` functions with the most own time, as shares of the total.

    Each entry: ``function`` (``file:line(name)`` shortened to the package path),
    ``own`` (share of own time), ``cum`` (share with callees), ``calls``.
    """
    import cProfile
    import pstats

    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.runcall(fn)
    total = time.perf_counter() - t0
    return _summarize(pstats.Stats(prof), total, limit)


def profile_top_threads(work: list[Callable[[], Any]], limit: int = 12) -> dict[str, Any]:
    """Like :func:`profile_top` for callables run in parallel threads: one profiler per thread, stats merged.

    Shares are of the summed time of all threads (so waiting on a lock or an fsync shows up as such).
    """
    import cProfile
    import pstats

    from benchmarks._baselines import run_threads

    profs = [cProfile.Profile() for _ in work]

    def wrap(prof: Any, fn: Callable[[], Any]) -> Callable[[], None]:
        return lambda: prof.runcall(fn)

    total = run_threads([wrap(p, f) for p, f in zip(profs, work, strict=True)])
    st = pstats.Stats(profs[0])
    for p in profs[1:]:
        st.add(p)
    return _summarize(st, total, limit)


def _summarize(st: Any, total: float, limit: int) -> dict[str, Any]:
    entries = []
    for (file, line, name), (_cc, nc, tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        entries.append((tt, ct, nc, _short(file, line, name)))
    entries.sort(reverse=True)
    prof_total = sum(e[0] for e in entries) or 1.0  # with threads: the sum over threads
    top = [
        {"function": f, "own": round(tt / prof_total, 3), "cum": round(min(ct / prof_total, 1.0), 3), "calls": nc}
        for tt, ct, nc, f in entries[:limit]
    ]
    return {"total_s": round(total, 3), "top": top}


def _short(file: str, line: int, name: str) -> str:
    if file == "~":
        return name  # a builtin: "<method 'decode' of 'msgspec...' objects>"
    parts = pathlib.Path(file).parts
    for anchor in ("tplog", "benchmarks", "site-packages", "lib"):
        if anchor in parts:
            i = len(parts) - 1 - parts[::-1].index(anchor)
            rel = "/".join(parts[i + (1 if anchor in ("site-packages", "lib") else 0) :])
            return f"{rel}:{line}({name})"
    return f"{pathlib.Path(file).name}:{line}({name})"


def write_results_section(name: str, lines: list[str], path: pathlib.Path = RESULTS_MD) -> None:
    """Replace (or append) the section between ``<!-- name:start -->`` and ``<!-- name:end -->``."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    text = (
        path.read_text()
        if path.exists()
        else (
            "# Benchmark results\n\n"
            "Written by `python -m benchmarks.NAME` (each module rewrites only its own section). Rates are "
            "medians of the repeats; compare ratios within one section, not absolute figures across machines.\n"
        )
    )
    block = "\n".join([start, *lines, end])
    if start in text and end in text:
        before, rest = text.split(start, 1)
        _, after = rest.split(end, 1)
        text = before + block + after
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)
