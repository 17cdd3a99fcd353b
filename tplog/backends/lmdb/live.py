"""The live table (:mod:`tplog.backends.live`) of an LMDB store: its own small LMDB environment in
the store directory (``<store>/live/``), beside the log's and not part of the store's format
(``verify``, ``rebuild``, backups and read-only opens never look at it).

Why an environment of its own rather than a named table of the store's: its contents are
ephemeral (a crash ends the streams anyway), so its commits skip ``fsync`` (LMDB ``NOSYNC``), and
they do not queue behind the log's single writer. In a table of the store's environment every
batch was a durable commit serialized with the appends: on an append-heavy load (benchmarks.
server_load) it multiplied the store's write transactions by four. Any process can open it, as
any can open the store; LMDB allows one handle per process and path, hence the registry.

Keys: the thread key (16 bytes) + a big-endian u64: 0 the header (msgpack), 1.. the batches.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import lmdb
import msgspec

from tplog.backends.files import FILE_MODE, make_dir
from tplog.backends.live import LiveHeader, expired
from tplog.backends.lmdb.keys import TKEY_SIZE, tkey, u64
from tplog.errors import StorageError

__all__ = ["LIVE_DIR", "LmdbLive", "open_live"]

LIVE_DIR = "live"
_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder(LiveHeader)
_LAST = u64(2**64 - 1)
_OPEN: dict[tuple[int, str], LmdbLive] = {}  # (pid, path) -> the one handle of this process
_OPEN_LOCK = threading.Lock()
R = TypeVar("R")


def open_live(store_path: str) -> LmdbLive:
    """The live table of the LMDB store at ``store_path`` (one handle per process)."""
    path = os.path.join(os.path.abspath(store_path), LIVE_DIR)
    with _OPEN_LOCK:
        key = (os.getpid(), path)
        live = _OPEN.get(key)
        if live is None:
            live = _OPEN[key] = LmdbLive(path)
        return live


class LmdbLive:
    """:class:`~tplog.backends.live.LiveStreams` in an LMDB environment of its own (no fsync)."""

    def __init__(self, path: str, *, map_size: int = 1 << 30) -> None:
        self.path = path
        try:
            make_dir(path)
            self._env = lmdb.open(path, map_size=map_size, max_dbs=0, sync=False, metasync=False,
                                  readahead=False, subdir=True, lock=True, mode=FILE_MODE)
        except (lmdb.Error, OSError) as exc:
            raise StorageError(f"{path}: cannot open the live stream table: {exc}") from exc
        self._lock = threading.Lock()  # one write transaction at a time in this process

    @contextmanager
    def _read(self) -> Iterator[Any]:
        try:
            with self._env.begin(buffers=False) as txn:
                yield txn
        except lmdb.MapResizedError:  # another process grew the map: adopt it, the caller retries
            self._env.set_mapsize(0)
            raise

    def _write(self, fn: Callable[[Any], R]) -> R:
        with self._lock:
            for _attempt in range(20):
                try:
                    with self._env.begin(write=True) as txn:
                        return fn(txn)
                except lmdb.MapResizedError:
                    self._env.set_mapsize(0)
                except lmdb.MapFullError:
                    self._env.set_mapsize(self._env.info()["map_size"] * 2)
                except lmdb.Error as exc:
                    raise StorageError(f"{self.path}: the live stream table failed: {exc}") from exc
            raise StorageError(f"{self.path}: the live stream table kept being resized")

    @staticmethod
    def _header(txn: Any, tk: bytes) -> LiveHeader | None:
        raw = txn.get(tk + u64(0))
        return None if raw is None else _dec.decode(raw)

    @staticmethod
    def _drop(txn: Any, tk: bytes) -> None:
        cur = txn.cursor()
        if cur.set_range(tk):
            while cur.key()[:TKEY_SIZE] == tk:
                if not cur.delete():
                    break

    def write(self, thread_id: str, turn_seq: int, batches: list[bytes], *, done: bool = False,
              attached: bool = True, owner: str = "") -> LiveHeader:
        tk = tkey(thread_id)

        def fn(txn: Any) -> LiveHeader:
            hdr = self._header(txn, tk)
            if hdr is None or hdr.turn_seq != turn_seq:
                self._drop(txn, tk)
                hdr = LiveHeader(turn_seq=turn_seq, owner=owner)
            for b in batches:
                hdr.batches += 1
                txn.put(tk + u64(hdr.batches), b)
            hdr.done = hdr.done or done
            hdr.attached = attached
            hdr.updated_ns = time.time_ns()
            txn.put(tk + u64(0), _enc.encode(hdr))
            return hdr

        return self._write(fn)

    def read(self, thread_id: str, *, after: int = 0, limit: int | None = None) -> tuple[LiveHeader | None,
                                                                                          list[bytes]]:
        tk = tkey(thread_id)
        for _attempt in range(20):
            try:
                with self._read() as txn:
                    hdr = self._header(txn, tk)
                    out: list[bytes] = []
                    if hdr is None or (limit is not None and limit <= 0):
                        return hdr, out
                    cur = txn.cursor()
                    ok = cur.set_range(tk + u64(after + 1))
                    while ok and (limit is None or len(out) < limit):
                        k = cur.key()
                        if k >= tk + _LAST or k[:TKEY_SIZE] != tk:
                            break
                        out.append(bytes(cur.value()))
                        ok = cur.next()
                    return hdr, out
            except lmdb.MapResizedError:
                continue
            except lmdb.Error as exc:
                raise StorageError(f"{self.path}: the live stream table failed: {exc}") from exc
        raise StorageError(f"{self.path}: the live stream table kept being resized")

    def request_stop(self, thread_id: str, turn_seq: int) -> bool:
        tk = tkey(thread_id)

        def fn(txn: Any) -> bool:
            hdr = self._header(txn, tk)
            if hdr is None or hdr.turn_seq != turn_seq or hdr.done:
                return False
            hdr.stop = True
            txn.put(tk + u64(0), _enc.encode(hdr))
            return True

        return self._write(fn)

    def expire(self, thread_id: str, turn_seq: int) -> None:
        tk = tkey(thread_id)

        def fn(txn: Any) -> None:
            hdr = self._header(txn, tk)
            if hdr is not None and hdr.turn_seq == turn_seq:
                self._drop(txn, tk)

        self._write(fn)

    def sweep(self, *, done_before: int, stale_before: int) -> int:
        with self._read() as txn:  # most sweeps find nothing: no write transaction for them
            gone = [k[:TKEY_SIZE] for k, v in txn.cursor()
                    if k[TKEY_SIZE:] == u64(0) and expired(_dec.decode(v), done_before, stale_before)]
        if not gone:
            return 0

        def fn(txn: Any) -> int:
            n = 0
            for tk in gone:
                hdr = self._header(txn, tk)
                if hdr is not None and expired(hdr, done_before, stale_before):  # not rewritten since
                    self._drop(txn, tk)
                    n += 1
            return n

        return self._write(fn)
