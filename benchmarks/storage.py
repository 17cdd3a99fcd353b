"""Storage: bytes per event and bytes on disk against the raw JSON, with and without a trained dictionary.

    python -m benchmarks.storage [--quick] [--seed S] [--dir D] [--json PATH] [--no-md] [--no-profile]

The same corpus goes into each system (untimed; sizes only):

- tplog, default: one append per thread, then ``sync``;
- tplog with a trained zstd dictionary: ``Store.train_dictionary()`` run on a store
  holding *other* threads of the same generator (held out, so the dictionary has
  not seen the measured events), the dictionary installed in a fresh store, then the
  corpus appended (every value compressed with it);
- raw LMDB: tplog's own value bytes (no dictionary), one put per event, no indexes;
- SQLite (WAL checkpointed: the ``.db`` file holds everything) with the
  ``thread_id, seq, JSON`` schema and its ``(thread_id, seq)`` index;
- JSONL, one file per thread.

For LMDB stores: ``used`` = pages in use x page size (what a compacting backup
would copy), ``file`` = blocks allocated to ``data.mdb``. Goal: tplog ≤ 0.50x the
raw JSON bytes (issue 24's decision; it was 0.40x).
"""

from __future__ import annotations

import sys
import time
from typing import Any

import lmdb

from benchmarks import _baselines as B
from benchmarks._common import dir_size, machine_info, start, tplog_bulk_load, workdir
from benchmarks._data import make_corpus

NAME = "storage"
TITLE = "Storage: bytes per event and on disk vs the raw JSON"

# (quick, full)
SIZES = {"threads": (100, 400), "train_threads": (30, 100)}
TRAIN_START = 500_000  # held-out threads for training the dictionary


def lmdb_used(path: Any) -> int:
    env = lmdb.open(str(path), readonly=True, lock=False)
    try:
        return int((env.info()["last_pgno"] + 1) * env.stat()["psize"])
    finally:
        env.close()


def tplog_sizes(Store: Any, path: Any) -> dict[str, Any]:
    with Store(path, durability="relaxed") as s:
        st = s.stats()
        value_bytes = 0
        with s.backend.engine.read() as txn:
            for _k, v in txn.range("events"):
                value_bytes += len(v)
            blob_bytes = sum(len(v) for _k, v in txn.range("blobs"))
    return {
        "used": st["used_bytes"],
        "file": dir_size(path / "data.mdb"),
        "value_bytes": value_bytes,
        "blob_bytes": blob_bytes,
        "page_size": st["page_size"],
        "tables": st["tables"],
    }


def install_dictionary(Store: Any, train_path: Any, path: Any, threads: list[Any]) -> tuple[int, int]:
    """Train on the held-out store; put the dictionary into a fresh store at ``path``. Returns (id, bytes)."""
    from tplog.backends.lmdb.keys import u64

    with Store(train_path, durability="relaxed") as t:
        dict_id = t.train_dictionary()
        if not dict_id:
            raise RuntimeError("train_dictionary found too few samples")
        with t.backend.engine.read() as txn:
            data = bytes(txn.get("dicts", u64(dict_id)))
    with Store(path, durability="relaxed") as s:
        s.backend.engine.run_write(lambda txn: txn.put("dicts", u64(1), data))
    # reopened by the bulk load: the store loads its dictionaries on open and compresses with the newest
    tplog_bulk_load(Store, path, threads, batch=50)
    return dict_id, len(data)


def main(argv: list[str] | None = None) -> int:
    args, size, report, Store = start(NAME, TITLE, __doc__, SIZES, argv)

    t0 = time.perf_counter()
    corpus = make_corpus(size["threads"], seed=args.seed)
    report.data = corpus.stats()
    n = corpus.events
    raw = report.data["json_bytes"]
    threads = [(t.thread_id, t.events) for t in corpus.threads]
    print(f"data: {report.data} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)

    rows: list[list[str]] = []
    ratios: dict[str, float] = {}

    def row(system: str, nbytes: int, note: str = "") -> None:
        ratios[system] = nbytes / raw
        rows.append([system, f"{nbytes:,}", f"{nbytes / n:,.0f}", f"{nbytes / raw:.3f}x", note])

    with workdir(args.dir, NAME) as root:
        report.machine = machine_info(root)
        row("raw JSON (compact, per event)", raw, "what the events are as JSON")
        detail: dict[str, Any] = {}
        if Store is not None:
            tplog_bulk_load(Store, root / "tplog", threads, batch=50)
            a = detail["default"] = tplog_sizes(Store, root / "tplog")
            row("**tplog, default**", a["used"], f"data.mdb file: {a['file']:,} B")
            row("tplog, default: value bytes only", a["value_bytes"] + a["blob_bytes"], "events + blobs, no pages")

            train = make_corpus(size["train_threads"], seed=args.seed, start=TRAIN_START)
            tplog_bulk_load(Store, root / "train", [(t.thread_id, t.events) for t in train.threads], batch=50)
            dict_id, dict_bytes = install_dictionary(Store, root / "train", root / "tplog-dict", threads)
            b = detail["dictionary"] = tplog_sizes(Store, root / "tplog-dict")
            row("**tplog, trained dictionary**", b["used"], f"{dict_bytes:,} B dictionary included")
            row("tplog, trained dictionary: value bytes only", b["value_bytes"] + b["blob_bytes"], "events + blobs")
        items = [it for t in corpus.threads for it in B.encode_values(t.thread_id, t.events)[1]]
        value_total = sum(len(v) for _k, v in items)
        B.lmdb_load(root / "lmdb", items)
        del items
        row("raw LMDB, tplog's value bytes, no indexes", lmdb_used(root / "lmdb"), f"values: {value_total:,} B")
        B.sqlite_load(
            root / "s.db", [(t.thread_id, i + 1, j.decode()) for t in corpus.threads for i, j in enumerate(t.json)]
        )
        row("SQLite (thread_id, seq, JSON) + index", dir_size(root / "s.db"))
        B.jsonl_load(root / "jsonl", [(t.thread_id, j) for t in corpus.threads for j in t.json])
        jsonl_apparent = sum(f.stat().st_size for f in (root / "jsonl").iterdir())
        row("JSONL per thread", dir_size(root / "jsonl"), f"apparent size {jsonl_apparent:,} B")

    report.table(
        f"Bytes for {n:,} events ({raw / 1e6:.1f} MB of JSON)",
        ["system", "bytes", "bytes/event", "÷ raw JSON", "note"],
        rows,
        {1, 2, 3},
    )
    if Store is not None:
        psize = detail["default"]["page_size"]
        names = list(detail["default"]["tables"])
        report.table(
            "tplog tables: pages in use (entries; overflow pages hold values over ~2 KB)",
            ["table", "default: entries", "pages", "overflow", "MB", "dictionary: pages", "MB"],
            [
                [
                    t,
                    f"{detail['default']['tables'][t]['entries']:,}",
                    f"{detail['default']['tables'][t]['pages']:,}",
                    f"{detail['default']['tables'][t]['overflow_pages']:,}",
                    f"{detail['default']['tables'][t]['pages'] * psize / 1e6:.2f}",
                    f"{detail['dictionary']['tables'][t]['pages']:,}",
                    f"{detail['dictionary']['tables'][t]['pages'] * psize / 1e6:.2f}",
                ]
                for t in names
                if detail["default"]["tables"][t]["entries"]
            ],
        )
        ev = detail["default"]["tables"]["events"]
        waste = ev["pages"] * psize - detail["default"]["value_bytes"]
        report.notes.append(
            f"Default store: event values are {detail['default']['value_bytes']:,} B in {ev['pages']:,} pages "
            f"({ev['overflow_pages']:,} overflow) = {ev['pages'] * psize:,} B: {waste:,} B "
            f"({waste / max(1, ev['pages'] * psize):.0%}) of the events table is page slack and keys."
        )
        report.notes.append(
            f"The dictionary was trained (Store.train_dictionary, id {dict_id}) on {size['train_threads']} held-out "
            "threads of the same generator, never on the measured events."
        )
    report.goal_value(
        "storage, default: tplog used bytes ÷ raw JSON",
        ratios.get("**tplog, default**"),
        0.50,
        "tplog, default: pages in use",
        "raw JSON bytes",
        at_most=True,
    )
    report.goal_value(
        "storage, trained dictionary: tplog used bytes ÷ raw JSON",
        ratios.get("**tplog, trained dictionary**"),
        0.50,
        "tplog with a trained dictionary: pages in use",
        "raw JSON bytes",
        at_most=True,
    )
    report.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
