"""What tplog is measured against: raw LMDB (the limit), SQLite and JSONL stores.

Every function sets up outside the timed region and returns ``(events, seconds)``
of the timed work only, so :func:`benchmarks._common.run_interleaved` can call
it directly. The baselines get their payload pre-encoded (tplog encodes inside
``append``), so ratios against them are conservative for tplog.

- **Raw LMDB**: the same pre-encoded value bytes tplog would write (see
  :func:`encode_values`: tplog's own codec when present), one put per event keyed ``thread uuid (16 B) + seq
  (4 B BE)``, with the same number of events per write transaction as the tplog
  run; durability modes ``durable`` (sync + metasync), ``metasync=False`` and
  ``nosync``. No index, no head, no checks: the ceiling of any LMDB store.
- **SQLite** (stdlib ``sqlite3``): WAL, ``synchronous=FULL`` or ``NORMAL``, a
  table ``(id INTEGER PRIMARY KEY AUTOINCREMENT, thread_id, seq, message_data
  TEXT, created_at)`` with a unique ``(thread_id, seq)`` index, the way SQLite
  session stores keep messages (OpenAI Agents ``SQLiteSession``). Concurrent
  writers use one connection per thread, ``BEGIN IMMEDIATE`` and a 60 s busy
  timeout. Reads: by index + ``orjson.loads`` into dicts (what such a store hands back).
- **JSONL**: one file per thread, one line per event, ``os.write`` on an
  ``O_APPEND`` descriptor, with or without ``os.fsync`` per event.
"""

from __future__ import annotations

import os
import pathlib
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import lmdb
import msgspec
import orjson
import zstandard

__all__ = [
    "LMDB_MODES",
    "SQLITE_SCHEMA",
    "ValueCodec",
    "encode_values",
    "jsonl_append",
    "jsonl_append_threads",
    "jsonl_load",
    "jsonl_read_threads",
    "lmdb_append",
    "lmdb_append_threads",
    "lmdb_key",
    "lmdb_load",
    "lmdb_read_threads",
    "lmdb_scan",
    "run_threads",
    "sqlite_append",
    "sqlite_append_threads",
    "sqlite_load",
    "sqlite_read_threads",
    "sqlite_scan",
    "value_decoder",
]

MAP_SIZE = 1 << 36  # 64 GiB of address space; the file grows only as used

LMDB_MODES: dict[str, dict[str, bool]] = {
    "durable": {"sync": True, "metasync": True},
    "metasync=False": {"sync": True, "metasync": False},
    "nosync": {"sync": False, "metasync": False},
}

Item = tuple[bytes, bytes]  # (key, value)


# --------------------------------------------------------------------------- value bytes


class ValueCodec:
    """Turns events into the value bytes the raw LMDB baseline writes, and back.

    Default: msgspec msgpack, then zstd level 3 (no dictionary) for values of
    128 B or more, with a one-byte header saying which. That is the
    "straightforward pipeline" of PERFORMANCE.md. When tplog exposes its own
    value encoder the benchmark should pass it here so the limit writes exactly
    tplog's bytes (see ``benchmarks.append``).
    """

    name = "msgpack + zstd L3"

    def __init__(self) -> None:
        from tplog.events import Event

        self._enc = msgspec.msgpack.Encoder()
        self._dec = msgspec.msgpack.Decoder(Event)
        self._cz = zstandard.ZstdCompressor(level=3)
        self._dz = zstandard.ZstdDecompressor()

    def encode(self, event: Any) -> bytes:
        raw = self._enc.encode(event)
        if len(raw) >= 128:
            return b"\x01" + self._cz.compress(raw)
        return b"\x00" + raw

    def decode(self, value: bytes | memoryview) -> Any:
        if value[0] == 1:
            return self._dec.decode(self._dz.decompress(value[1:]))
        return self._dec.decode(value[1:])


def encode_values(thread_id: str, events: Sequence[Any]) -> tuple[str, list[Item]]:
    """``(codec name, [(key, value)])`` for one thread's events: the raw LMDB baseline's puts.

    With ``tplog.codec`` present the values are exactly what tplog stores for
    these events (prefix, CRC over the key, msgpack header with the facts,
    zstd level 3 body, no trained dictionary; a body over the blob threshold is
    put as its blob value). Otherwise :class:`ValueCodec`.
    """
    keys = [lmdb_key(thread_id, i + 1) for i in range(len(events))]
    codec = _tplog_codec()
    if codec is None:
        vc = _value_codec()
        return vc.name, [(k, vc.encode(e)) for k, e in zip(keys, events, strict=True)]
    out: list[Item] = []
    for i, (k, e) in enumerate(zip(keys, events, strict=True)):
        enc = codec.encode(e, f"{thread_id}:{i + 1}", 1_750_000_000_000_000_000 + i)
        out.append((k, enc.blob[1] if enc.blob is not None else enc.finish(k)))
    return "tplog codec (same bytes)", out


def value_decoder() -> Callable[[Any], Any]:
    """Decode one raw LMDB baseline value into its typed event (the inverse of :func:`encode_values`)."""
    codec = _tplog_codec()
    if codec is None:
        return _value_codec().decode

    def decode(value: Any) -> Any:
        return codec.decode_event(codec.body_bytes(bytes(value)))

    return decode


_CODECS: dict[str, Any] = {}


def _tplog_codec() -> Any:
    if "tplog" not in _CODECS:
        try:
            from tplog.codec import Codec

            _CODECS["tplog"] = Codec()
        except ImportError:
            _CODECS["tplog"] = None
    return _CODECS["tplog"]


def _value_codec() -> ValueCodec:
    if "plain" not in _CODECS:
        _CODECS["plain"] = ValueCodec()
    return _CODECS["plain"]  # type: ignore[no-any-return]


def lmdb_key(thread_id: str, seq: int) -> bytes:
    return uuid.UUID(thread_id).bytes + seq.to_bytes(4, "big")


# --------------------------------------------------------------------------- threads helper


def run_threads(work: Sequence[Callable[[], None]]) -> float:
    """Start one thread per callable, release them together, return wall seconds until all finish."""
    go = threading.Barrier(len(work) + 1)
    errors: list[BaseException] = []

    def wrap(fn: Callable[[], None]) -> None:
        go.wait()
        try:
            fn()
        except BaseException as exc:  # re-raised in the caller
            errors.append(exc)

    ts = [threading.Thread(target=wrap, args=(fn,)) for fn in work]
    for t in ts:
        t.start()
    go.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    secs = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return secs


# --------------------------------------------------------------------------- raw LMDB


def _open_lmdb(path: pathlib.Path, mode: str, max_dbs: int = 0) -> lmdb.Environment:
    return lmdb.open(str(path), map_size=MAP_SIZE, max_dbs=max_dbs, max_readers=256, **LMDB_MODES[mode])


def lmdb_append(path: pathlib.Path, items: Sequence[Item], *, per_txn: int, mode: str) -> tuple[int, float]:
    """One writer, ``per_txn`` puts per write transaction."""
    env = _open_lmdb(path, mode)
    try:
        t0 = time.perf_counter()
        for i in range(0, len(items), per_txn):
            with env.begin(write=True) as txn:
                put = txn.put
                for k, v in items[i : i + per_txn]:
                    put(k, v)
        secs = time.perf_counter() - t0
    finally:
        env.close()
    return len(items), secs


#: One recorded row operation: (named database, key, value), value ``None`` for a delete.
Op = tuple[str, bytes, bytes | None]


def lmdb_replay(path: pathlib.Path, txns: Sequence[Sequence[Op]], events: int, *, mode: str) -> tuple[int, float]:
    """One writer replaying recorded row operations into named databases, one write
    transaction per entry of ``txns``; ``events``: how many events those rows hold."""
    names = sorted({table for ops in txns for table, _, _ in ops})
    env = _open_lmdb(path, mode, max_dbs=len(names))
    try:
        dbs = {n: env.open_db(n.encode()) for n in names}
        t0 = time.perf_counter()
        for ops in txns:
            with env.begin(write=True) as txn:
                for table, k, v in ops:
                    if v is None:
                        txn.delete(k, db=dbs[table])
                    else:
                        txn.put(k, v, db=dbs[table])
        secs = time.perf_counter() - t0
    finally:
        env.close()
    return events, secs


def lmdb_append_threads(path: pathlib.Path, per_writer: Sequence[Sequence[Item]], *, mode: str) -> tuple[int, float]:
    """One thread per writer, each committing one put per write transaction (they queue on LMDB's writer lock)."""
    env = _open_lmdb(path, mode)

    def writer(items: Sequence[Item]) -> Callable[[], None]:
        def run() -> None:
            for k, v in items:
                with env.begin(write=True) as txn:
                    txn.put(k, v)

        return run

    try:
        secs = run_threads([writer(w) for w in per_writer])
    finally:
        env.close()
    return sum(len(w) for w in per_writer), secs


def lmdb_load(path: pathlib.Path, items: Sequence[Item]) -> None:
    """Untimed bulk load (1,000 per transaction, synced once at the end)."""
    env = _open_lmdb(path, "nosync")
    for i in range(0, len(items), 1000):
        with env.begin(write=True) as txn:
            for k, v in items[i : i + 1000]:
                txn.put(k, v)
    env.sync(True)
    env.close()


def lmdb_read_threads(
    path: pathlib.Path, thread_ids: Sequence[str], *, decode: Callable[[Any], Any] | None = None
) -> tuple[int, float]:
    """Range-read each thread (one read transaction per thread, values copied to ``bytes``; optionally decoded)."""
    env = _open_lmdb(path, "nosync")
    prefixes = [uuid.UUID(t).bytes for t in thread_ids]
    n = 0
    try:
        t0 = time.perf_counter()
        for p in prefixes:
            with env.begin() as txn:
                cur = txn.cursor()
                out: list[Any] = []
                if cur.set_range(p):
                    for k, v in cur:
                        if k[:16] != p:
                            break
                        out.append(v if decode is None else decode(v))
                n += len(out)
        secs = time.perf_counter() - t0
    finally:
        env.close()
    return n, secs


def lmdb_scan(path: pathlib.Path, *, decode: Callable[[Any], Any] | None = None) -> tuple[int, float]:
    """Scan the whole database in one read transaction; zero-copy (``buffers=True``) unless decoding."""
    env = _open_lmdb(path, "nosync")
    n = 0
    try:
        t0 = time.perf_counter()
        with env.begin(buffers=True) as txn:
            if decode is None:
                for _k, v in txn.cursor():
                    n += 1 if len(v) else 0
            else:
                for _k, v in txn.cursor():
                    decode(v)
                    n += 1
        secs = time.perf_counter() - t0
    finally:
        env.close()
    return n, secs


# --------------------------------------------------------------------------- SQLite

SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS thread_messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    thread_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    message_data TEXT NOT NULL,
    created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP
);
CREATE UNIQUE INDEX IF NOT EXISTS idx_thread_messages_thread_seq ON thread_messages (thread_id, seq);
"""
_INSERT = "INSERT INTO thread_messages (thread_id, seq, message_data) VALUES (?, ?, ?)"
Rows = Sequence[tuple[str, int, str]]  # (thread_id, seq, JSON text)


def _sqlite(path: pathlib.Path, synchronous: str) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=60)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("PRAGMA busy_timeout=60000")
    return conn


def _sqlite_create(path: pathlib.Path, synchronous: str) -> sqlite3.Connection:
    conn = _sqlite(path, synchronous)
    conn.executescript(SQLITE_SCHEMA)
    return conn


def sqlite_append(path: pathlib.Path, rows: Rows, *, per_commit: int, synchronous: str) -> tuple[int, float]:
    """One connection, ``per_commit`` inserts per transaction."""
    conn = _sqlite_create(path, synchronous)
    try:
        ex = conn.execute
        t0 = time.perf_counter()
        for i in range(0, len(rows), per_commit):
            ex("BEGIN IMMEDIATE")
            for r in rows[i : i + per_commit]:
                ex(_INSERT, r)
            ex("COMMIT")
        secs = time.perf_counter() - t0
    finally:
        conn.close()
    return len(rows), secs


def sqlite_append_threads(path: pathlib.Path, per_writer: Sequence[Rows], *, synchronous: str) -> tuple[int, float]:
    """One thread and connection per writer, each committing every insert."""
    _sqlite_create(path, synchronous).close()
    conns = [_sqlite(path, synchronous) for _ in per_writer]

    def writer(conn: sqlite3.Connection, rows: Rows) -> Callable[[], None]:
        def run() -> None:
            ex = conn.execute
            for r in rows:
                ex("BEGIN IMMEDIATE")
                ex(_INSERT, r)
                ex("COMMIT")

        return run

    try:
        secs = run_threads([writer(c, w) for c, w in zip(conns, per_writer, strict=True)])
    finally:
        for c in conns:
            c.close()
    return sum(len(w) for w in per_writer), secs


def sqlite_load(path: pathlib.Path, rows: Rows) -> None:
    conn = _sqlite_create(path, "NORMAL")
    conn.execute("BEGIN")
    conn.executemany(_INSERT, rows)
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def sqlite_read_threads(path: pathlib.Path, thread_ids: Sequence[str], *, parse: bool = True) -> tuple[int, float]:
    """Each thread by index, ordered by seq; ``orjson.loads`` each row into dicts (or bytes only)."""
    conn = _sqlite(path, "NORMAL")
    q = "SELECT message_data FROM thread_messages WHERE thread_id = ? ORDER BY seq"
    n = 0
    loads = orjson.loads
    try:
        t0 = time.perf_counter()
        for tid in thread_ids:
            rows = conn.execute(q, (tid,)).fetchall()
            out = [loads(r[0]) for r in rows] if parse else rows
            n += len(out)
        secs = time.perf_counter() - t0
    finally:
        conn.close()
    return n, secs


def sqlite_scan(path: pathlib.Path, *, parse: bool = True, page: int = 1000) -> tuple[int, float]:
    """The global log in insertion order (``ORDER BY id``), ``orjson.loads`` per row."""
    conn = _sqlite(path, "NORMAL")
    n = 0
    loads = orjson.loads
    try:
        t0 = time.perf_counter()
        cur = conn.execute("SELECT thread_id, seq, message_data FROM thread_messages ORDER BY id")
        while True:
            rows = cur.fetchmany(page)
            if not rows:
                break
            if parse:
                for r in rows:
                    loads(r[2])
            n += len(rows)
        secs = time.perf_counter() - t0
    finally:
        conn.close()
    return n, secs


# --------------------------------------------------------------------------- JSONL


class _Files:
    """Lazily opened ``O_APPEND`` descriptors, one per thread file (opening is part of the timed work)."""

    def __init__(self, directory: pathlib.Path) -> None:
        self.dir = directory
        self.fds: dict[str, int] = {}

    def fd(self, thread_id: str) -> int:
        fd = self.fds.get(thread_id)
        if fd is None:
            fd = self.fds[thread_id] = os.open(
                self.dir / f"{thread_id}.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644
            )
        return fd

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)


JsonlRows = Sequence[tuple[str, bytes]]  # (thread_id, JSON line without newline)


def jsonl_append(directory: pathlib.Path, rows: JsonlRows, *, fsync: bool) -> tuple[int, float]:
    directory.mkdir(parents=True, exist_ok=True)
    files = _Files(directory)
    try:
        t0 = time.perf_counter()
        for tid, line in rows:
            fd = files.fd(tid)
            os.write(fd, line + b"\n")
            if fsync:
                os.fsync(fd)
        secs = time.perf_counter() - t0
    finally:
        files.close()
    return len(rows), secs


def jsonl_append_threads(directory: pathlib.Path, per_writer: Sequence[JsonlRows], *, fsync: bool) -> tuple[int, float]:
    directory.mkdir(parents=True, exist_ok=True)
    files = [_Files(directory) for _ in per_writer]  # writers own distinct threads, hence distinct files

    def writer(f: _Files, rows: JsonlRows) -> Callable[[], None]:
        def run() -> None:
            for tid, line in rows:
                fd = f.fd(tid)
                os.write(fd, line + b"\n")
                if fsync:
                    os.fsync(fd)

        return run

    try:
        secs = run_threads([writer(f, w) for f, w in zip(files, per_writer, strict=True)])
    finally:
        for f in files:
            f.close()
    return sum(len(w) for w in per_writer), secs


def jsonl_load(directory: pathlib.Path, rows: JsonlRows) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    by: dict[str, list[bytes]] = {}
    for tid, line in rows:
        by.setdefault(tid, []).append(line)
    for tid, lines in by.items():
        (directory / f"{tid}.jsonl").write_bytes(b"\n".join(lines) + b"\n")


def jsonl_read_threads(directory: pathlib.Path, thread_ids: Sequence[str]) -> tuple[int, float]:
    """Read each thread's file and ``orjson.loads`` every line."""
    n = 0
    loads = orjson.loads
    t0 = time.perf_counter()
    for tid in thread_ids:
        with open(directory / f"{tid}.jsonl", "rb") as f:
            data = f.read()
        out = [loads(line) for line in data.splitlines()]
        n += len(out)
    return n, time.perf_counter() - t0
