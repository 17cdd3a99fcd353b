"""The live table (:mod:`tplog.backends.live`) of a PostgreSQL store: the UNLOGGED table ``live`` in
the store's schema, created on first use, beside the versioned tables and not part of them.

UNLOGGED for the reason the LMDB one skips fsync: the rows are ephemeral (a crashed server ends
its streams anyway), so they need no WAL, and their writes do not add to the log's commit
traffic. Every server on the store reads and writes it: a stream runs on one host and resumes on
another. Rows: ``(thread_id, idx, data)``; idx 0 the header (msgpack), 1.. the batches. A write
locks its thread's header row (``FOR UPDATE``) so that a stop request from another server and the
writer's next batch are serialized.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec
import psycopg

from tplog.backends.live import LiveHeader, expired
from tplog.errors import StorageError

__all__ = ["PostgresLive"]

_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder(LiveHeader)
R = TypeVar("R")


class PostgresLive:
    """:class:`~tplog.backends.live.LiveStreams` in an UNLOGGED table of the store's schema."""

    def __init__(self, backend: Any) -> None:
        self._conninfo: str = backend._conninfo
        self._kwargs: dict[str, Any] = backend._kwargs  # autocommit, search_path = the store's schema
        self.schema: str = backend.schema
        self._lock = threading.Lock()  # one connection, one statement at a time
        self._conn: psycopg.Connection[Any] | None = None
        self._run(lambda c: c.execute(
            "CREATE UNLOGGED TABLE IF NOT EXISTS live (thread_id text NOT NULL, idx bigint NOT NULL, "
            "data bytea NOT NULL, PRIMARY KEY (thread_id, idx))"))

    def _run(self, fn: Callable[[psycopg.Connection[Any]], R]) -> R:
        with self._lock:
            for attempt in range(2):  # once more on a fresh connection if the old one broke
                try:
                    if self._conn is None or self._conn.closed:
                        self._conn = psycopg.connect(self._conninfo, **self._kwargs)
                    with self._conn.transaction():
                        return fn(self._conn)
                except psycopg.errors.UniqueViolation:  # two servers created the table at once
                    if attempt:
                        raise
                except psycopg.OperationalError as exc:
                    self._conn = None
                    if attempt:
                        raise StorageError(f"PostgreSQL schema {self.schema}: the live stream table failed: "
                                           f"{exc}") from exc
            raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _header(c: psycopg.Connection[Any], thread_id: str, *, lock: bool = False) -> LiveHeader | None:
        row = c.execute("SELECT data FROM live WHERE thread_id = %s AND idx = 0" + (" FOR UPDATE" if lock else ""),
                        (thread_id,)).fetchone()
        return None if row is None else _dec.decode(row[0])

    @staticmethod
    def _put_header(c: psycopg.Connection[Any], thread_id: str, hdr: LiveHeader) -> None:
        c.execute("INSERT INTO live VALUES (%s, 0, %s) ON CONFLICT (thread_id, idx) DO UPDATE SET data = "
                  "excluded.data", (thread_id, _enc.encode(hdr)))

    def write(self, thread_id: str, turn_seq: int, batches: list[bytes], *, done: bool = False,
              attached: bool = True, owner: str = "") -> LiveHeader:
        def fn(c: psycopg.Connection[Any]) -> LiveHeader:
            hdr = self._header(c, thread_id, lock=True)
            if hdr is None or hdr.turn_seq != turn_seq:
                c.execute("DELETE FROM live WHERE thread_id = %s", (thread_id,))
                hdr = LiveHeader(turn_seq=turn_seq, owner=owner)
            if batches:
                first = hdr.batches + 1
                with c.cursor() as cur:
                    cur.executemany("INSERT INTO live VALUES (%s, %s, %s)",
                                    [(thread_id, first + i, b) for i, b in enumerate(batches)])
                hdr.batches += len(batches)
            hdr.done = hdr.done or done
            hdr.attached = attached
            hdr.updated_ns = time.time_ns()
            self._put_header(c, thread_id, hdr)
            return hdr

        return self._run(fn)

    def read(self, thread_id: str, *, after: int = 0, limit: int | None = None) -> tuple[LiveHeader | None,
                                                                                          list[bytes]]:
        def fn(c: psycopg.Connection[Any]) -> tuple[LiveHeader | None, list[bytes]]:
            c.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")  # header and batches: one snapshot
            hdr = self._header(c, thread_id)
            if hdr is None or (limit is not None and limit <= 0):
                return hdr, []
            rows = c.execute("SELECT data FROM live WHERE thread_id = %s AND idx > %s ORDER BY idx LIMIT %s",
                             (thread_id, max(after, 0), limit)).fetchall()
            return hdr, [bytes(r[0]) for r in rows]

        return self._run(fn)

    def request_stop(self, thread_id: str, turn_seq: int) -> bool:
        def fn(c: psycopg.Connection[Any]) -> bool:
            hdr = self._header(c, thread_id, lock=True)
            if hdr is None or hdr.turn_seq != turn_seq or hdr.done:
                return False
            hdr.stop = True
            self._put_header(c, thread_id, hdr)
            return True

        return self._run(fn)

    def expire(self, thread_id: str, turn_seq: int) -> None:
        def fn(c: psycopg.Connection[Any]) -> None:
            hdr = self._header(c, thread_id, lock=True)
            if hdr is not None and hdr.turn_seq == turn_seq:
                c.execute("DELETE FROM live WHERE thread_id = %s", (thread_id,))

        self._run(fn)

    def sweep(self, *, done_before: int, stale_before: int) -> int:
        def fn(c: psycopg.Connection[Any]) -> int:
            n = 0
            for tid, data in c.execute("SELECT thread_id, data FROM live WHERE idx = 0 FOR UPDATE").fetchall():
                if expired(_dec.decode(data), done_before, stale_before):
                    c.execute("DELETE FROM live WHERE thread_id = %s", (tid,))
                    n += 1
            return n

        return self._run(fn)
