"""Appends and plain reads: tplog against raw LMDB, SQLite and JSONL, same events, same run.

    python -m benchmarks.append [--quick] [--repeat N] [--seed S] [--dir D] [--json PATH] [--no-md]

Workloads (each system gets a fresh store per repeat; only the work is timed):

1. durable append, 1 writer, 1 event per call — tplog ``Store.append(tid, [event])``
   vs raw LMDB one put per durable transaction, raw LMDB with
   ``metasync=False``, SQLite WAL FULL / NORMAL one commit per event, JSONL with fsync;
   and raw LMDB replaying tplog's own rows (every table's puts and deletes of each
   append, recorded from an untimed tplog run), one append per durable transaction:
   the layout's floor (goal: tplog ≥ 0.9x), so the gap splits into what the required
   indexes cost and what tplog's code costs.
2. durable append, 16 writer threads — each thread appends its own threads' events one
   per call to one shared ``Store`` (group commit) vs raw LMDB with the same batching:
   as many puts per durable transaction as tplog's groups held (the mean group of an
   untimed calibration run of tplog); for reference 100 and 16 puts per
   durable transaction (16 is the most a group of 16 one-event appends can hold), raw
   LMDB 16 threads one put per durable transaction, SQLite WAL FULL /
   NORMAL with 16 threads each committing each append, JSONL 16 threads with fsync;
   and, with tplog's group size, raw LMDB putting the writers' events in turn (as a
   group mixes writers, so its puts land in different threads) and raw LMDB replaying
   tplog's own rows of those appends (goal: tplog ≥ 0.6x, and for 16 asyncio writers).
3. durable append, 16 asyncio writers — ``AsyncStore`` with 16 tasks vs the same
   raw LMDB rows and SQLite WAL FULL behind ``asyncio.to_thread`` (16 tasks).
4. relaxed append — ``Store(durability="relaxed")`` (LMDB ``metasync=False``), 1 writer
   and 16 threads, vs raw LMDB metasync=False / nosync, SQLite WAL NORMAL, JSONL without fsync.
5. read one thread — every thread once, in a seeded order: ``Store.read(tid)`` (typed
   events, CRC checked) vs raw LMDB range read (bytes) and range read + typed decode,
   SQLite by index (bytes only, and + orjson into dicts), JSONL + orjson.
6. read the global log — ``Store.read_all`` in pages of 1,000 and ``Store.iter_all``
   (streamed, each event dropped once counted, as the baselines drop theirs) vs a raw
   LMDB zero-copy scan, a scan + typed decode, and SQLite ``ORDER BY id`` + orjson.

If ``tplog.Store`` is missing (the store not written yet) the tplog rows are skipped
and only the baselines run.
"""

from __future__ import annotations

import asyncio
import itertools
import pathlib
import random
import shutil
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from benchmarks import _baselines as B
from benchmarks._common import Report, freeze_heap, machine_info, parse_args, run_interleaved, tplog_store_api, workdir
from benchmarks._data import Corpus, make_corpus

NAME = "append"
TITLE = "Append and read: tplog vs raw LMDB, SQLite, JSONL"

W1 = "durable append, 1 writer, 1 event per call"
W2 = "durable append, 16 writer threads"
W3 = "durable append, 16 asyncio writers"
W4 = "relaxed append"
W5 = "read one thread (all threads, each once)"
W6 = "read the global log"

WRITERS = 16
ROWS1 = "raw LMDB replaying tplog's own rows (every table), 1 append per durable txn"

T = TypeVar("T")

# (quick, full)
SIZES = {
    "threads": (100, 400),  # corpus for the reads (≈ 50 events per thread)
    "w1_events": (300, 1500),
    "w2_per_writer": (60, 150),
    "w4_events": (600, 5000),
}


class Ev:
    """One event as every system sees it: thread, seq, the Struct, its JSON, the raw LMDB put."""

    __slots__ = ("item", "json", "obj", "seq", "text", "tid")

    def __init__(self, tid: str, seq: int, obj: Any, json: bytes, item: tuple[bytes, bytes]) -> None:
        self.tid, self.seq, self.obj, self.json, self.item = tid, seq, obj, json, item
        self.text = json.decode()


def flatten(corpus: Corpus) -> tuple[str, list[list[Ev]]]:
    codec_name = ""
    out: list[list[Ev]] = []
    for t in corpus.threads:
        codec_name, items = B.encode_values(t.thread_id, t.events)
        out.append(
            [Ev(t.thread_id, i + 1, e, j, it) for i, (e, j, it) in enumerate(zip(t.events, t.json, items, strict=True))]
        )
    return codec_name, out


def split_writers(threads: list[list[Ev]], per_writer: int, writers: int = WRITERS) -> list[list[Ev]]:
    """Writer ``w`` owns threads ``w, w + writers, ...`` and appends their events in order."""
    out = []
    for w in range(writers):
        evs = list(itertools.chain.from_iterable(threads[w::writers]))[:per_writer]
        out.append(evs)
    return out


class Dirs:
    """A fresh directory per measurement, removed after it."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.n = 0

    def fresh(self, fn: Callable[[pathlib.Path], tuple[int, float]]) -> Callable[[], tuple[int, float]]:
        return lambda: self.once(fn)

    def once(self, fn: Callable[[pathlib.Path], T]) -> T:
        """``fn`` in a fresh directory, removed after it."""
        self.n += 1
        d = self.root / f"m{self.n}"
        d.mkdir()
        try:
            return fn(d)
        finally:
            shutil.rmtree(d, ignore_errors=True)


# --------------------------------------------------------------------------- tplog rows


def tplog_append(Store: Any, path: pathlib.Path, evs: Sequence[Ev], durability: str) -> tuple[int, float]:
    store = Store(path / "tplog", durability=durability)
    try:
        append = store.append
        t0 = time.perf_counter()
        for e in evs:
            append(e.tid, [e.obj])
        secs = time.perf_counter() - t0
    finally:
        store.close()
    return len(evs), secs


#: Mean group size (appends per commit) of each tplog run, by label.
GROUPS: dict[str, list[float]] = {}


def _record_groups(label: str, store: Any) -> None:
    gc = store.stats().get("group_commit")
    if gc and gc["commits"]:
        GROUPS.setdefault(label, []).append(gc["appends"] / gc["commits"])


def tplog_append_threads(
    Store: Any, path: pathlib.Path, per_writer: list[list[Ev]], durability: str, label: str = ""
) -> tuple[int, float]:
    store = Store(path / "tplog", durability=durability)

    def writer(evs: list[Ev]) -> Callable[[], None]:
        def run() -> None:
            for e in evs:
                store.append(e.tid, [e.obj])

        return run

    try:
        secs = B.run_threads([writer(w) for w in per_writer])
        _record_groups(label, store)
    finally:
        store.close()
    return sum(map(len, per_writer)), secs


class _Recording:
    """A write transaction (the storage contract's ``WriteTxn``) that records every
    row tplog puts or deletes, in order."""

    def __init__(self, txn: Any, ops: list[B.Op]) -> None:
        self._txn, self._ops = txn, ops
        self.get, self.range, self.last, self.id = txn.get, txn.range, txn.last, txn.id

    def put(self, table: str, key: bytes, value: bytes) -> None:
        self._ops.append((table, bytes(key), bytes(value)))
        self._txn.put(table, key, value)

    def delete(self, table: str, key: bytes) -> bool:
        self._ops.append((table, bytes(key), None))
        return bool(self._txn.delete(table, key))


def tplog_rows(Store: Any, path: pathlib.Path, evs: Sequence[Ev]) -> list[list[B.Op]]:
    """The rows each ``append(tid, [event])`` of ``evs`` writes (every table: event,
    head, global position, event id, by-update index, projections), recorded from an
    untimed run of one writer; for the raw LMDB replay of tplog's own rows."""
    store = Store(path / "rows", durability="relaxed")
    me = threading.get_ident()
    out: list[list[B.Op]] = []
    run_write = store.backend.engine.run_write

    def recording(fn: Callable[[Any], Any], on_wait: Any = None) -> Any:
        if threading.get_ident() != me:  # e.g. the dictionary trainer: not an append's rows
            return run_write(fn, on_wait)
        ops: list[B.Op] = []

        def wrapped(txn: Any) -> Any:
            ops.clear()  # a retried transaction (map growth) records afresh
            return fn(_Recording(txn, ops))

        result = run_write(wrapped, on_wait)
        out.append(ops)
        return result

    store.backend.engine.run_write = recording
    try:
        for e in evs:
            store.append(e.tid, [e.obj])
    finally:
        store.backend.engine.run_write = run_write
        store.close()
    if len(out) != len(evs):
        raise RuntimeError(f"recorded {len(out)} write transactions for {len(evs)} appends")
    return out


def grouped(rows: list[list[B.Op]], per_txn: int) -> list[list[B.Op]]:
    """Appends' rows, ``per_txn`` appends per transaction."""
    return [list(itertools.chain.from_iterable(rows[i : i + per_txn])) for i in range(0, len(rows), per_txn)]


def mean_group(label: str) -> float:
    runs = GROUPS.get(label) or [1.0]
    return sum(runs) / len(runs)


def tplog_append_async(AsyncStore: Any, path: pathlib.Path, per_writer: list[list[Ev]]) -> tuple[int, float]:
    async def main() -> float:
        astore = await AsyncStore.open(path / "tplog", durability="durable")

        async def writer(evs: list[Ev]) -> None:
            for e in evs:
                await astore.append(e.tid, [e.obj])

        try:
            t0 = time.perf_counter()
            await asyncio.gather(*(writer(w) for w in per_writer))
            secs = time.perf_counter() - t0
            _record_groups("async", astore.store)
            return secs
        finally:
            await astore.close()

    return sum(map(len, per_writer)), asyncio.run(main())


def tplog_read_threads(Store: Any, path: pathlib.Path, tids: Sequence[str]) -> tuple[int, float]:
    store = Store(path, durability="relaxed")
    n = 0
    try:
        t0 = time.perf_counter()
        for tid in tids:
            n += len(store.read(tid))
        secs = time.perf_counter() - t0
    finally:
        store.close()
    return n, secs


def tplog_read_all(Store: Any, path: pathlib.Path, page: int = 1000) -> tuple[int, float]:
    store = Store(path, durability="relaxed")
    n = 0
    try:
        t0 = time.perf_counter()
        after = 0
        while True:
            got = store.read_all(after=after, limit=page)
            if not got:
                break
            n += len(got)
            after = got[-1].position
        secs = time.perf_counter() - t0
    finally:
        store.close()
    return n, secs


def tplog_iter_all(Store: Any, path: pathlib.Path) -> tuple[int, float]:
    """The global log streamed with ``Store.iter_all`` (its default chunk, each event dropped once seen)."""
    store = Store(path, durability="relaxed")
    try:
        t0 = time.perf_counter()
        n = sum(1 for _ in store.iter_all())
        secs = time.perf_counter() - t0
    finally:
        store.close()
    return n, secs


def tplog_load(Store: Any, path: pathlib.Path, threads: list[list[Ev]]) -> None:
    with Store(path, durability="relaxed") as store:
        for t in threads:
            store.append(t[0].tid, [e.obj for e in t])
        store.sync()


# --------------------------------------------------------------------------- SQLite via asyncio


def sqlite_append_async(path: pathlib.Path, per_writer: list[list[Ev]], synchronous: str) -> tuple[int, float]:
    """16 asyncio tasks, each with its own connection, each append ``await asyncio.to_thread(commit)``."""
    B._sqlite_create(path / "s.db", synchronous).close()
    conns = [B._sqlite(path / "s.db", synchronous) for _ in per_writer]

    def commit(conn: sqlite3.Connection, e: Ev) -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(B._INSERT, (e.tid, e.seq, e.text))
        conn.execute("COMMIT")

    async def main() -> float:
        async def writer(conn: sqlite3.Connection, evs: list[Ev]) -> None:
            for e in evs:
                await asyncio.to_thread(commit, conn, e)

        t0 = time.perf_counter()
        await asyncio.gather(*(writer(c, w) for c, w in zip(conns, per_writer, strict=True)))
        return time.perf_counter() - t0

    try:
        secs = asyncio.run(main())
    finally:
        for c in conns:
            c.close()
    return sum(map(len, per_writer)), secs


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    args = parse_args(NAME, __doc__.splitlines()[0], argv)
    q = 0 if args.quick else 1
    size = {k: v[q] for k, v in SIZES.items()}
    report = Report(NAME, TITLE, args)
    api = tplog_store_api()
    if api is None:
        msg = "tplog.Store is not available in this checkout: the tplog rows were skipped (baselines only)."
        print(msg, file=sys.stderr)
        report.notes.append(msg)
    Store, AsyncStore = api if api is not None else (None, None)

    t0 = time.perf_counter()
    corpus = make_corpus(size["threads"], seed=args.seed)
    codec_name, threads = flatten(corpus)
    report.data = corpus.stats()
    freeze_heap()
    print(f"data: {report.data} ({time.perf_counter() - t0:.1f} s); raw LMDB values: {codec_name}", file=sys.stderr)
    report.notes.append(
        f"Raw LMDB puts the {codec_name} value bytes for the same events; baselines get their payload "
        "pre-encoded (tplog encodes inside append), so ratios against them are conservative for tplog."
    )
    all_evs = list(itertools.chain.from_iterable(threads))
    R = args.repeat

    with workdir(args.dir, NAME) as root:
        report.machine = machine_info(root)
        dirs = Dirs(root)
        F = dirs.fresh

        # 1 ----------------------------------------------------------- durable, 1 writer
        evs = all_evs[: size["w1_events"]]
        items = [e.item for e in evs]
        rows = [(e.tid, e.seq, e.text) for e in evs]
        lines = [(e.tid, e.json) for e in evs]
        systems: list[tuple[str, Callable[[], tuple[int, float]]]] = []
        if Store is not None:
            rows1 = dirs.once(lambda d: tplog_rows(Store, d, evs))
            systems += [
                ("tplog, durable", F(lambda d: tplog_append(Store, d, evs, "durable"))),
                (ROWS1, F(lambda d: B.lmdb_replay(d, rows1, len(evs), mode="durable"))),
            ]
        systems += [
            ("raw LMDB, 1 put per durable txn", F(lambda d: B.lmdb_append(d, items, per_txn=1, mode="durable"))),
            (
                "raw LMDB, 1 put per txn, metasync=False",
                F(lambda d: B.lmdb_append(d, items, per_txn=1, mode="metasync=False")),
            ),
            (
                "SQLite WAL FULL, 1 commit per event",
                F(lambda d: B.sqlite_append(d / "s.db", rows, per_commit=1, synchronous="FULL")),
            ),
            (
                "SQLite WAL NORMAL, 1 commit per event",
                F(lambda d: B.sqlite_append(d / "s.db", rows, per_commit=1, synchronous="NORMAL")),
            ),
            ("JSONL per thread, fsync per event", F(lambda d: B.jsonl_append(d, lines, fsync=True))),
        ]
        report.add(run_interleaved(W1, systems, R))

        # 2 ----------------------------------------------------------- durable, 16 threads
        per = split_writers(threads, size["w2_per_writer"])
        flat = list(itertools.chain.from_iterable(per))
        items2 = [e.item for e in flat]
        # The writers' events taken in turn: the order in which concurrent appends reach
        # a group (each group mixes writers, so its puts land in different threads).
        turns = [w[j] for j in range(max(map(len, per))) for w in per if j < len(w)]
        items_turns = [e.item for e in turns]
        items_w = [[e.item for e in w] for w in per]
        rows_w = [[(e.tid, e.seq, e.text) for e in w] for w in per]
        lines_w = [[(e.tid, e.json) for e in w] for w in per]
        lmdb100 = (
            "raw LMDB, 100 puts per durable txn (1 writer)",
            F(lambda d: B.lmdb_append(d, items2, per_txn=100, mode="durable")),
        )
        sqlite16 = (
            "SQLite WAL FULL, 16 threads, commit per append",
            F(lambda d: B.sqlite_append_threads(d / "s.db", rows_w, synchronous="FULL")),
        )
        # The same batching: raw LMDB with as many puts per durable transaction as
        # tplog's groups held (measured by an untimed calibration run of tplog).
        if Store is not None:
            F(lambda d: tplog_append_threads(Store, d, per, "durable", "calibrate"))()
        g = max(1, round(mean_group("calibrate")))
        same = (
            f"raw LMDB, {g} puts per durable txn (tplog's mean group, 1 writer)",
            F(lambda d: B.lmdb_append(d, items2, per_txn=g, mode="durable")),
        )
        same_turns = (
            f"raw LMDB, {g} puts per durable txn, the writers' events in turn (1 writer)",
            F(lambda d: B.lmdb_append(d, items_turns, per_txn=g, mode="durable")),
        )
        own: list[tuple[str, Callable[[], tuple[int, float]]]] = []
        if Store is not None:
            # tplog's rows for those appends, g per transaction: the same batching and order with tplog's layout.
            rows2 = grouped(dirs.once(lambda d: tplog_rows(Store, d, turns)), g)
            own.append(
                (
                    f"raw LMDB replaying tplog's own rows, {g} appends per durable txn (1 writer)",
                    F(lambda d: B.lmdb_replay(d, rows2, len(turns), mode="durable")),
                )
            )
        systems = []
        if Store is not None:
            systems.append(
                ("tplog, durable, 16 threads", F(lambda d: tplog_append_threads(Store, d, per, "durable", "threads")))
            )
        systems += [
            same,
            same_turns,
            *own,
            lmdb100,
            (
                # 16 writers waiting on their acknowledgement can fill a group of at most 16
                "raw LMDB, 16 puts per durable txn (1 writer)",
                F(lambda d: B.lmdb_append(d, items2, per_txn=WRITERS, mode="durable")),
            ),
            (
                "raw LMDB, 16 threads, 1 put per durable txn",
                F(lambda d: B.lmdb_append_threads(d, items_w, mode="durable")),
            ),
            sqlite16,
            (
                "SQLite WAL NORMAL, 16 threads, commit per append",
                F(lambda d: B.sqlite_append_threads(d / "s.db", rows_w, synchronous="NORMAL")),
            ),
            (
                "JSONL per thread, 16 threads, fsync per event",
                F(lambda d: B.jsonl_append_threads(d, lines_w, fsync=True)),
            ),
        ]
        report.add(run_interleaved(W2, systems, R))

        # 3 ----------------------------------------------------------- durable, asyncio
        systems = []
        if AsyncStore is not None:
            systems.append(("tplog AsyncStore, durable, 16 tasks", F(lambda d: tplog_append_async(AsyncStore, d, per))))
        systems += [
            same,
            same_turns,
            *own,
            lmdb100,
            ("SQLite WAL FULL, 16 tasks via asyncio.to_thread", F(lambda d: sqlite_append_async(d, per, "FULL"))),
            sqlite16,
        ]
        report.add(run_interleaved(W3, systems, R))

        # 4 ----------------------------------------------------------- relaxed
        evs4 = all_evs[: size["w4_events"]]
        items4 = [e.item for e in evs4]
        rows4 = [(e.tid, e.seq, e.text) for e in evs4]
        lines4 = [(e.tid, e.json) for e in evs4]
        systems = []
        if Store is not None:
            systems += [
                ("tplog, relaxed, 1 writer", F(lambda d: tplog_append(Store, d, evs4, "relaxed"))),
                ("tplog, relaxed, 16 threads", F(lambda d: tplog_append_threads(Store, d, per, "relaxed"))),
            ]
        systems += [
            (
                "raw LMDB, 1 put per txn, metasync=False",
                F(lambda d: B.lmdb_append(d, items4, per_txn=1, mode="metasync=False")),
            ),
            (
                "raw LMDB, 100 puts per txn, metasync=False",
                F(lambda d: B.lmdb_append(d, items4, per_txn=100, mode="metasync=False")),
            ),
            ("raw LMDB, 1 put per txn, no sync", F(lambda d: B.lmdb_append(d, items4, per_txn=1, mode="nosync"))),
            (
                "SQLite WAL NORMAL, 1 commit per event",
                F(lambda d: B.sqlite_append(d / "s.db", rows4, per_commit=1, synchronous="NORMAL")),
            ),
            ("JSONL per thread, no fsync", F(lambda d: B.jsonl_append(d, lines4, fsync=False))),
        ]
        report.add(run_interleaved(W4, systems, R))

        # 5, 6 -------------------------------------------------------- reads
        print("loading read stores ...", file=sys.stderr, flush=True)
        rd = root / "read"
        rd.mkdir()
        B.lmdb_load(rd / "lmdb", [e.item for e in all_evs])
        B.sqlite_load(rd / "s.db", [(e.tid, e.seq, e.text) for e in all_evs])
        B.jsonl_load(rd / "jsonl", [(e.tid, e.json) for e in all_evs])
        if Store is not None:
            tplog_load(Store, rd / "tplog", threads)
        tids = [t[0].tid for t in threads]
        random.Random(f"{args.seed}:read-order").shuffle(tids)
        decode = B.value_decoder()
        systems = []
        if Store is not None:
            systems.append(("tplog Store.read (typed events)", lambda: tplog_read_threads(Store, rd / "tplog", tids)))
        systems += [
            ("raw LMDB range read (bytes)", lambda: B.lmdb_read_threads(rd / "lmdb", tids)),
            ("raw LMDB range read + typed decode", lambda: B.lmdb_read_threads(rd / "lmdb", tids, decode=decode)),
            ("SQLite by index (bytes only)", lambda: B.sqlite_read_threads(rd / "s.db", tids, parse=False)),
            ("SQLite by index + orjson into dicts", lambda: B.sqlite_read_threads(rd / "s.db", tids)),
            ("JSONL file + orjson into dicts", lambda: B.jsonl_read_threads(rd / "jsonl", tids)),
        ]
        report.add(run_interleaved(W5, systems, R))

        systems = []
        if Store is not None:
            systems.append(("tplog Store.read_all, pages of 1,000", lambda: tplog_read_all(Store, rd / "tplog")))
            systems.append(("tplog Store.iter_all, streamed", lambda: tplog_iter_all(Store, rd / "tplog")))
        systems += [
            ("raw LMDB scan, zero-copy (bytes)", lambda: B.lmdb_scan(rd / "lmdb")),
            ("raw LMDB scan + typed decode", lambda: B.lmdb_scan(rd / "lmdb", decode=decode)),
            ("SQLite ORDER BY id + orjson into dicts", lambda: B.sqlite_scan(rd / "s.db")),
        ]
        report.add(run_interleaved(W6, systems, R))

    # Issue 24's decided goals: against the floor of tplog's own layout (raw LMDB replaying its rows);
    # the one-put rows and SQLite stay in the tables as reference, no longer goals.
    tp = "tplog, durable"
    report.goal("durable append, 1 writer: tplog ÷ raw LMDB replaying tplog's own rows", 0.9, (W1, tp), (W1, ROWS1))
    own_name = own[0][0] if own else "raw LMDB replaying tplog's own rows"
    report.goal(
        "16 writer threads: tplog ÷ raw LMDB replaying tplog's own rows, same batching",
        0.6,
        (W2, "tplog, durable, 16 threads"),
        (W2, own_name),
    )
    report.goal(
        "16 asyncio writers: tplog ÷ raw LMDB replaying tplog's own rows, same batching",
        0.6,
        (W3, "tplog AsyncStore, durable, 16 tasks"),
        (W3, own_name),
    )
    report.notes.append(
        "Mean group (appends per commit) of tplog: 16 threads "
        + ", ".join(f"{x:.1f}" for x in GROUPS.get("threads", []))
        + "; 16 asyncio tasks "
        + ", ".join(f"{x:.1f}" for x in GROUPS.get("async", []))
        + f" (calibration run: {mean_group('calibrate'):.1f}, used for the raw LMDB 'same batching' row)."
    )
    if Store is not None and not args.no_profile:
        profile_missed(report, Store, all_evs, per, args.dir)
    report.finish()
    return 0


def profile_missed(report: Report, Store: Any, all_evs: list[Ev], per: list[list[Ev]], base: str | None) -> None:
    """cProfile the tplog side of each missed append goal (small runs; the profile is a share, not a rate)."""
    missed = {g.goal.split(":")[0] for g in report.goals if g.status == "NOT met"}
    with workdir(base, NAME + "-profile") as root:
        if any(m.startswith("durable append, 1 writer") for m in missed):
            store = Store(root / "p1", durability="durable")
            evs = all_evs[:200]
            try:
                report.profile(f"{W1}, tplog ({len(evs)} appends)", lambda: [store.append(e.tid, [e.obj]) for e in evs])
            finally:
                store.close()
        if any(m.startswith("16 writer threads") for m in missed):
            store = Store(root / "p16", durability="durable")
            try:

                def writer(evs: list[Ev]) -> Callable[[], None]:
                    return lambda: [store.append(e.tid, [e.obj]) for e in evs]

                report.profile(
                    f"{W2}, tplog (16 threads x {min(40, *map(len, per))} appends; time summed over threads)",
                    [writer(w[:40]) for w in per],
                )
            finally:
                store.close()


if __name__ == "__main__":
    sys.exit(main())
