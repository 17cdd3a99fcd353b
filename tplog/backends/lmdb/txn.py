"""The LMDB engine's transaction and lock types: the read/write contract the backend's modules
(chunks, commit, reads, projections, finder, maintenance) are written against, LMDB's
implementation of it, and the two locks the engine hands out or uses.

Split out of engine.py (which opens, grows, backs up and closes the environment) so that each reads
in one sitting; engine.py re-exports the contract types.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

import lmdb

__all__ = ["FileLock", "Held", "LmdbRead", "LmdbWrite", "RWLock", "ReadTxn", "WriteTxn"]

R = TypeVar("R")


class ReadTxn(Protocol):
    def get(self, table: str, key: bytes) -> bytes | None: ...

    def range(
        self, table: str, start: bytes = b"", end: bytes | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]: ...

    def last(self, table: str) -> tuple[bytes, bytes] | None: ...


class WriteTxn(ReadTxn, Protocol):
    def put(self, table: str, key: bytes, value: bytes) -> None: ...

    def id(self) -> int:
        """This transaction's id: one more than the last committed write
        transaction's (of any process); a retried transaction gets the same id."""
        ...

    def delete(self, table: str, key: bytes) -> bool: ...


class Held(Protocol):
    """An advisory lock taken with :meth:`~tplog.backends.lmdb.engine.LmdbEngine.try_lock`."""

    def release(self) -> None: ...


class FileLock:
    """``flock`` on a file of its own: per open file description, so a second
    ``try_lock`` in the same process conflicts with the first, and released by the
    kernel when the process exits or is killed."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # drops the flock


class RWLock:
    """Many readers or one resizer. Readers never wait for writers, only for a resize."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._resizing = False

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._resizing:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if self._readers == 0:
                    self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            while self._resizing:
                self._cond.wait()
            self._resizing = True
            while self._readers:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._resizing = False
                self._cond.notify_all()


class LmdbRead:
    __slots__ = ("_dbs", "_txn")

    def __init__(self, txn: lmdb.Transaction[bytes], dbs: dict[str, Any]) -> None:
        self._txn = txn
        self._dbs = dbs

    def get(self, table: str, key: bytes) -> bytes | None:
        return self._txn.get(key, db=self._dbs[table])

    def range(
        self, table: str, start: bytes = b"", end: bytes | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        cur = self._txn.cursor(db=self._dbs[table])
        if reverse:
            return self._backward(cur, start, end)
        if not cur.set_range(start):
            return iter(())
        if end is None:  # the cursor's own iterator (from its position): no generator per row
            return iter(cur)
        return self._forward(cur, end)

    @staticmethod
    def _forward(cur: Any, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        for k, v in cur:
            if k >= end:
                return
            yield k, v

    @staticmethod
    def _backward(cur: Any, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        # Position on the last key < end (or the last key), walk back to start.
        if end is None:
            ok = cur.last()
        else:
            ok = cur.set_range(end)
            ok = cur.prev() if ok else cur.last()
        while ok:
            k = cur.key()
            if k < start:
                return
            yield k, cur.value()
            ok = cur.prev()

    def last(self, table: str) -> tuple[bytes, bytes] | None:
        cur = self._txn.cursor(db=self._dbs[table])
        if cur.last():
            return cur.key(), cur.value()
        return None


class LmdbWrite(LmdbRead):
    __slots__ = ()

    def put(self, table: str, key: bytes, value: bytes) -> None:
        self._txn.put(key, value, db=self._dbs[table])

    def id(self) -> int:
        return self._txn.id()

    def delete(self, table: str, key: bytes) -> bool:
        return self._txn.delete(key, db=self._dbs[table])
