"""Projection rebuilds: full folds vs id-only folds vs a full typed decode, and their peak memory.

    python -m benchmarks.rebuild [--quick] [--repeat N] [--seed S] [--dir D] [--json PATH] [--no-md] [--no-profile]

One corpus is stored in tplog, raw LMDB (tplog's own value bytes) and SQLite
before timing. Workloads:

1. full projection rebuild — every thread folded into its ThreadProtocol document:
   ``Store.load(tid)`` for every thread; vs the whole log scanned with a full typed
   decode and no fold (tplog's values through its codec), raw LMDB scan + typed
   decode (same bytes), SQLite ``ORDER BY id`` + ``orjson.loads`` into dicts.
2. id-only projection rebuild (links, pending tools, interrupts) — the whole
   ``events`` table scanned once reading value headers only (``codec.header``;
   message bodies are never decompressed or decoded, small non-message bodies
   are), each thread's items folded with ``pending`` / ``interrupts`` and its links
   collected; vs the per-thread public calls ``Store.pending`` + ``Store.interrupts``
   + ``Store.links``; vs ``Store.rebuild()`` when the store has one; vs the full
   typed decode of the same events (goal: id-only ≥ 5x). The full decode reads chunk
   rows by the store's fastest full path (``chunks.chunk_events``: one decompression and
   one decode per section), not one event at a time, so the ratio is not flattered.
3. peak memory (tracemalloc) of each rebuild at two log sizes (the larger ≈ 4x the
   events): a rebuild that streams the log stays flat (goal: ≤ 1.5x).

Every path verifies each value's CRC, as the store's reads do.
"""

from __future__ import annotations

import gc
import sys
import time
import tracemalloc
import uuid
from collections.abc import Callable
from typing import Any

from benchmarks import _baselines as B
from benchmarks._common import (
    freeze_heap,
    machine_info,
    run_interleaved,
    start,
    tplog_bulk_load,
    workdir,
)
from benchmarks._data import Corpus, make_corpus

NAME = "rebuild"
TITLE = "Rebuild projections: full folds, id-only folds, full typed decode, peak memory"

W1 = "full projection rebuild (every thread folded)"
W2 = "id-only projection rebuild (links, pending, interrupts)"

# (quick, full)
SIZES = {
    "threads": (110, 400),  # the timed log
    # The two log sizes of the memory comparison (threads): both above one chunk, the
    # events Store.rebuild() folds per read snapshot and write transaction (its default,
    # 20,000, in a full run; 5,000 with --quick, whose logs are smaller).
    "mem_small": (110, 440),
    "mem_large": (330, 1320),
}

FULL_DECODE = "tplog full typed decode, whole-log scan (no fold)"
HEADER_SCAN = "tplog id-only: header-only whole-log scan + folds"
PER_THREAD = "tplog id-only: Store.pending + interrupts + links per thread"
REBUILD = "tplog Store.rebuild()"
FULL_FOLD = "tplog Store.load every thread (full fold)"


# --------------------------------------------------------------------------- tplog paths


def _tplog() -> Any:
    """The pieces of tplog the scans use (imported late: the module must load without tplog)."""
    from tplog import LinkAdded
    from tplog.backends.lmdb.keys import TKEY_SIZE, from_u64
    from tplog.codec import MSG_KIND
    from tplog.projections.fold import Item, interrupts, pending

    return LinkAdded, MSG_KIND, Item, interrupts, pending, TKEY_SIZE, from_u64


def _rows(store: Any, txn: Any) -> Any:
    """The ``events`` table one event per row, chunk rows (format 4) expanded, as the store's own reads see it."""
    try:
        from tplog.backends.lmdb.chunks import EventRows
    except ImportError:  # before chunk rows: the table is one event per row
        return txn.range("events")
    return EventRows(txn, store.codec).range()


def full_decode_scan(store: Any) -> int:
    """Every event of the log: CRC check, decompress, typed decode (what a full rebuild must at least do).
    A chunk row is decoded by the fastest full path the store has (``chunks.chunk_events``: one CRC
    check, one decompression and one decode per chunk), so the id-only ratio is not flattered."""
    codec = store.codec
    check, body_bytes, decode_event = codec.check, codec.body_bytes, codec.decode_event
    try:
        from tplog.backends.lmdb.chunks import chunk_events, is_chunk
    except ImportError:  # before chunk rows: the table is one event per row
        chunk_events = is_chunk = None
    n = 0
    with store.backend.engine.read() as txn:
        for k, v in txn.range("events"):
            if is_chunk is not None and is_chunk(v):
                n += len(chunk_events(codec, bytes(k), v, txn, None))
                continue
            check(k, v)
            decode_event(body_bytes(v, txn))
            n += 1
    return n


def header_scan(store: Any, sink: Callable[[Any], None] | None = None) -> int:
    """The id-only rebuild: one pass over ``events`` reading headers; per thread: pending, interrupts, links."""
    LinkAdded, MSG_KIND, Item, interrupts, pending, TKEY_SIZE, from_u64 = _tplog()
    codec = store.codec
    check, header, body_bytes, decode_event = codec.check, codec.header, codec.body_bytes, codec.decode_event
    check_header = getattr(codec, "check_header", check)  # format 2: the header has a CRC of its own
    n = 0

    def project(items: list[Any]) -> None:
        out = (pending(items), interrupts(items), [it.event.link for it in items if isinstance(it.event, LinkAdded)])
        if sink is not None:
            sink(out)

    with store.backend.engine.read() as txn:
        current = b""
        items: list[Any] = []
        for k, v in _rows(store, txn):
            tk = k[:TKEY_SIZE]
            if tk != current:
                if items:
                    project(items)
                items = []
                current = tk
            check_header(k, v)
            h = header(v)
            ev = None
            if h.kind != MSG_KIND:
                check(k, v)  # the body is read: verify it too
                ev = decode_event(body_bytes(v, txn))
            items.append(Item(from_u64(k, TKEY_SIZE), h.kind, h.facts, ev))
            n += 1
        if items:
            project(items)
    return n


def per_thread_api(store: Any, tids: list[str]) -> int:
    n = 0
    for tid in tids:
        store.pending(tid)
        store.interrupts(tid)
        store.links(tid)
        n += store.head(tid).version
    return n


def full_fold(store: Any, tids: list[str]) -> int:
    n = 0
    for tid in tids:
        n += store.load(tid).seq
    return n


QUICK_CHUNK = 5000  # Store.rebuild(chunk=) in the --quick memory comparison


def store_rebuild(store: Any, chunk: int | None = None) -> int:
    """``Store.rebuild()``; events processed = its return value when it is an int, else the log's events."""
    got = store.rebuild() if chunk is None else store.rebuild(chunk=chunk)
    return got if isinstance(got, int) else int(store.stats()["events"])


def _open(Store: Any, path: Any) -> Any:
    """A store without the in-memory fold cache: a rebuild folds each thread once, and
    the memory goal is about what the fold itself holds."""
    try:
        return Store(path, durability="relaxed", fold_cache=0)
    except TypeError:  # a checkout without the option
        return Store(path, durability="relaxed")


def timed(Store: Any, path: Any, work: Callable[[Any], int]) -> tuple[int, float]:
    store = _open(Store, path)
    try:
        t0 = time.perf_counter()
        n = work(store)
        secs = time.perf_counter() - t0
    finally:
        store.close()
    return n, secs


def peak_memory(Store: Any, path: Any, work: Callable[[Any], int]) -> int:
    """Peak bytes allocated by Python while ``work`` runs (tracemalloc; LMDB's map is not counted)."""
    store = _open(Store, path)
    try:
        gc.collect()
        tracemalloc.start()
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        work(store)
        peak = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()
    finally:
        store.close()
    return peak


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    args, size, report, Store = start(NAME, TITLE, __doc__, SIZES, argv)
    has_rebuild = Store is not None and hasattr(Store, "rebuild")

    t0 = time.perf_counter()
    big = make_corpus(max(size["threads"], size["mem_large"]), seed=args.seed)
    corpus = Corpus(big.seed, big.threads[: size["threads"]])
    report.data = corpus.stats()
    freeze_heap()
    print(f"data: {report.data} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    tids = [t.thread_id for t in corpus.threads]
    decode = B.value_decoder()
    R = args.repeat

    with workdir(args.dir, NAME) as root:
        report.machine = machine_info(root)
        print("loading stores ...", file=sys.stderr, flush=True)
        items = [it for t in corpus.threads for it in B.encode_values(t.thread_id, t.events)[1]]
        B.lmdb_load(root / "lmdb", items)
        del items
        B.sqlite_load(
            root / "s.db", [(t.thread_id, i + 1, j.decode()) for t in corpus.threads for i, j in enumerate(t.json)]
        )
        tp = root / "tplog"
        if Store is not None:
            tplog_bulk_load(Store, tp, [(t.thread_id, t.events) for t in corpus.threads], batch=50)
            with Store(tp, durability="relaxed") as s:  # the id-only scan agrees with the store's own folds
                got: dict[int, Any] = {}
                header_scan(s, lambda out: got.__setitem__(len(got), out))
                for i, tid in enumerate(sorted(tids, key=lambda t: uuid.UUID(t).bytes)):
                    assert got[i][0] == s.pending(tid) and got[i][1] == s.interrupts(tid), tid
                    assert got[i][2] == s.links(tid), tid

            if has_rebuild:  # the store's own rebuild: run once first, so a broken one is reported, not fatal
                try:
                    with Store(tp, durability="relaxed") as s:
                        store_rebuild(s)
                except Exception as exc:
                    has_rebuild = False
                    msg = f"Store.rebuild() failed in this checkout, its rows were skipped: {type(exc).__name__}: {exc}"
                    print(msg, file=sys.stderr)
                    report.notes.append(msg)

        # 1 ------------------------------------------------------------ full rebuild
        systems: list[tuple[str, Callable[[], tuple[int, float]]]] = []
        if Store is not None:
            systems += [
                (FULL_FOLD, lambda: timed(Store, tp, lambda s: full_fold(s, tids))),
                (FULL_DECODE, lambda: timed(Store, tp, full_decode_scan)),
            ]
        systems += [
            ("raw LMDB scan + typed decode (same bytes)", lambda: B.lmdb_scan(root / "lmdb", decode=decode)),
            ("SQLite ORDER BY id + orjson into dicts", lambda: B.sqlite_scan(root / "s.db")),
        ]
        report.add(run_interleaved(W1, systems, R))

        # 2 ------------------------------------------------------------ id-only rebuild
        systems = []
        if Store is not None:
            systems += [
                (HEADER_SCAN, lambda: timed(Store, tp, header_scan)),
                (PER_THREAD, lambda: timed(Store, tp, lambda s: per_thread_api(s, tids))),
            ]
            if has_rebuild:
                systems.append((REBUILD, lambda: timed(Store, tp, store_rebuild)))
            systems.append((FULL_DECODE, lambda: timed(Store, tp, full_decode_scan)))
        systems.append(("raw LMDB scan, zero-copy (bytes only)", lambda: B.lmdb_scan(root / "lmdb")))
        report.add(run_interleaved(W2, systems, R))

        # The goal is the store's own rebuild; the header scan (this module's reimplementation
        # on the public engine and codec, one Item per event) stands in where there is none.
        g_id = g_rb = None
        if has_rebuild:
            g_rb = report.goal(
                "id-only rebuild (Store.rebuild) ÷ full typed decode", 5, (W2, REBUILD), (W2, FULL_DECODE)
            )
            report.notes.append(
                f"The id-only goal is `Store.rebuild()`'s; \"{HEADER_SCAN}\" is this module's own reimplementation "
                "on the public engine and codec (an `Item` per event, `pending`/`interrupts` per thread), kept as "
                "a reference row."
            )
        else:
            g_id = report.goal("id-only rebuild (header scan) ÷ full typed decode", 5, (W2, HEADER_SCAN),
                               (W2, FULL_DECODE))

        # 3 ------------------------------------------------------------ peak memory
        mem_goal = None
        if Store is not None:
            print("peak memory ...", file=sys.stderr, flush=True)
            sizes = {}
            for label, n_threads in (("small", size["mem_small"]), ("large", size["mem_large"])):
                c = Corpus(big.seed, big.threads[:n_threads])
                path = tp if n_threads == size["threads"] else root / f"mem-{label}"
                if path != tp:
                    tplog_bulk_load(Store, path, [(t.thread_id, t.events) for t in c.threads], batch=50)
                ids = [t.thread_id for t in c.threads]
                works: list[tuple[str, Callable[[Any], int]]] = [
                    (FULL_FOLD, lambda s, ids=ids: full_fold(s, ids)),
                    (HEADER_SCAN, header_scan),
                ]
                if has_rebuild:
                    works.append((REBUILD, lambda s: store_rebuild(s, QUICK_CHUNK if args.quick else None)))
                sizes[label] = (c.events, {name: peak_memory(Store, path, w) for name, w in works})
                print(f"  {label}: {sizes[label]}", file=sys.stderr, flush=True)
            (ev_s, small), (ev_l, large) = sizes["small"], sizes["large"]
            rows = [
                [
                    name,
                    f"{small[name] / 1e6:.1f} MB",
                    f"{large[name] / 1e6:.1f} MB",
                    f"{large[name] / small[name]:.2f}x",
                ]
                for name in small
            ]
            report.table(
                f"Peak Python memory of a rebuild (tracemalloc): {ev_s:,} vs {ev_l:,} events "
                f"({ev_l / ev_s:.1f}x the log)",
                ["rebuild", f"{ev_s:,} events", f"{ev_l:,} events", "growth"],
                rows,
            )
            mem_goal = report.goal_value(
                f"rebuild memory flat: full-fold rebuild peak at {ev_l / ev_s:.1f}x the log ÷ peak at 1x",
                large[FULL_FOLD] / small[FULL_FOLD],
                1.5,
                f"{FULL_FOLD}: peak at {ev_l:,} events",
                f"{FULL_FOLD}: peak at {ev_s:,} events",
                at_most=True,
            )
            report.goal_value(
                f"rebuild memory flat: id-only rebuild peak at {ev_l / ev_s:.1f}x the log ÷ peak at 1x",
                large[HEADER_SCAN] / small[HEADER_SCAN],
                1.5,
                f"{HEADER_SCAN}: peak at {ev_l:,} events",
                f"{HEADER_SCAN}: peak at {ev_s:,} events",
                at_most=True,
            )
            if has_rebuild:
                report.goal_value(
                    f"rebuild memory flat: Store.rebuild peak at {ev_l / ev_s:.1f}x the log ÷ peak at 1x",
                    large[REBUILD] / small[REBUILD],
                    1.5,
                    f"{REBUILD}: peak at {ev_l:,} events",
                    f"{REBUILD}: peak at {ev_s:,} events",
                    at_most=True,
                )

        # profiles ----------------------------------------------------- missed goals
        if Store is not None and not args.no_profile:
            with Store(tp, durability="relaxed") as s:
                if g_id is not None and g_id.status == "NOT met":
                    report.profile(f"{W2}, {HEADER_SCAN}", lambda: header_scan(s))
                    report.profile(f"{W2}, {FULL_DECODE} (the denominator)", lambda: full_decode_scan(s))
                if g_rb is not None and g_rb.status == "NOT met":
                    report.profile(f"{W2}, {REBUILD}", lambda: store_rebuild(s))
                if mem_goal is not None and mem_goal.status == "NOT met":
                    report.profile(f"{W1}, {FULL_FOLD}", lambda: full_fold(s, tids))

    report.notes.append(
        "The header-only scan and the full decode are written against the store's public engine and codec "
        "(`store.backend.engine.read()`, `store.codec.header/body_bytes/decode_event`), as a `Store.rebuild()` "
        "would run; "
        "both verify every value's CRC-32."
    )
    report.notes.append(
        "Peak memory counts Python allocations only (tracemalloc), not LMDB's memory map; the full-fold peak "
        "follows the largest thread in the log, so a larger corpus with a larger largest thread grows it a little. "
        + (f"With --quick, `Store.rebuild(chunk={QUICK_CHUNK:,})` (the default chunk is 20,000 events). "
           if args.quick else "")
        + "Both sizes are above one chunk, the events `Store.rebuild()` folds per read snapshot and write "
        "transaction (below one chunk its memory grows with the log by design)."
    )
    report.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
