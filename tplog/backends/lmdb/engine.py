"""The LMDB backend's key/value engine.

This module (with :mod:`~tplog.backends.lmdb.failures`, which turns LMDB's errors into tplog's)
is where :mod:`lmdb` is used. Everything above it sees a
small contract: named, ordered key/value tables, read transactions that see a
consistent snapshot, and write transactions run as a function that may be
retried (:meth:`LmdbEngine.run_write`); ``tests/test_storage_contract.py`` is
written against that.

LMDB hazards handled here (see README "Operating tplog"):

- **map full**: a write that does not fit grows the map (doubling, up to
  ``max_map_size``) and is retried; readers in this process are held off while
  the map is resized (LMDB requires no active transaction in the process).
  Another process's growth is adopted the same way (``MDB_MAP_RESIZED``).
- **disk full**: ``ENOSPC`` becomes :class:`StorageFullError`; the transaction is
  aborted so nothing of it is written.
- **write transactions are bound to a thread**: ``run_write`` opens, runs and
  commits in the calling thread; only one runs at a time in a process (a lock),
  and LMDB's own lock serialises processes.
- **fork**: a handle used in a child process raises :class:`StoreClosedError`.
- **stale reader slots** left by killed processes are cleared on open
  (``reader_check``).
- **a writer killed while it waits**: LMDB's write lock is a robust process-shared
  mutex, and when a waiter woken by its release is SIGKILLed before it takes it
  while a third process takes it meanwhile, the other waiters are never woken
  (the futex's "waiters" bit is lost with the killed waiter): they hang, the
  lock free. So processes queue on an ``fcntl`` lock of their own
  (``writer.lck``, which the kernel hands over and releases on death) around
  every write transaction, and LMDB's mutex never has a waiter. (LMDB's reader-table mutex has the
  same weakness: an engine's open clears dead readers' slots and takes its reader slot queued there.)
- **a power cut while a new store is created** could keep its first commit's
  data page but not the two meta pages LMDB writes unflushed when it creates
  the file: a file LMDB refuses. A new store's file is built under a temporary
  name, flushed, then renamed into place (:func:`_create`).
- **damage**: LMDB's errors for a damaged file (and the ``MDB_BAD_TXN`` that
  follows them in the same transaction) become :class:`CorruptionError`
  naming the store, on open and on every read.

Besides the tables, an engine offers named advisory locks (:meth:`LmdbEngine.try_lock`)
that the kernel releases when their holder dies, however it dies: a projection
rebuild holds one for as long as it runs, so that whether a rebuild still runs
never depends on process ids (which get reused, and differ between containers
sharing the store's directory).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import lmdb
import msgspec

from tplog.backends.files import FILE_MODE, backup_dir, make_dir
from tplog.backends.lmdb.failures import errno_of as _errno_of
from tplog.backends.lmdb.failures import translate as _translate
from tplog.backends.lmdb.failures import undecodable as _undecodable
from tplog.backends.lmdb.txn import FileLock, Held, LmdbRead, LmdbWrite, ReadTxn, RWLock, WriteTxn
from tplog.errors import (
    InvalidInputError,
    ReadOnlyError,
    StorageError,
    StorageFullError,
    StoreClosedError,
)

__all__ = ["TABLES", "Held", "LmdbEngine", "ReadTxn", "WriteTxn", "open_engine"]

R = TypeVar("R")

#: Every named table tplog keeps (tplog/FORMAT.md documents each).
TABLES = (
    "meta",  # store-wide settings and counters
    "dicts",  # zstd dictionaries by id
    "events",  # thread key + seq -> event value
    "heads",  # thread key -> head record
    "global",  # position -> thread key + seq (commit order)
    "eventids",  # event id -> thread key + seq + position
    "updated",  # updated ns + thread key -> b"" (threads by last update)
    "blobs",  # sha256 -> large payload, shared
    "links_in",  # target key + relation + 0 + source key + seq -> ids
    "children",  # parent key + child key -> child id + how it is known
    "proj",  # projection name + key -> projection rows
    "finder",  # threads by activity / by agent, then last update (tplog.backends.lmdb.finder)
)
#: Tables a store written by an older tplog may lack (a read-only open goes on without them).
OPTIONAL_TABLES = ("finder",)


class LmdbEngine:
    """One LMDB environment holding every table.

    ``durability``: ``"durable"`` (default) fsyncs data and meta pages at every
    commit; an acknowledged write survives power loss. ``"relaxed"`` skips the
    meta-page fsync (LMDB ``MDB_NOMETASYNC``): integrity is kept, but an OS
    crash or power loss may undo the last committed transaction(s) until the
    next durable commit or :meth:`sync`. A process crash loses nothing in
    either mode (writes are in the OS page cache).

    Both open LMDB with ``MDB_NOMETASYNC``; a durable write transaction flushes its meta page
    itself (``mdb_env_sync``) after releasing the cross-process writer lock and before it returns,
    so another process commits (its data pages flushed under the lock) during this one's second
    flush instead of waiting for it. Integrity is LMDB's ``MDB_NOMETASYNC`` guarantee (the meta
    page names only flushed pages); a reader may see a durable commit during its meta flush.
    """

    def __init__(
        self,
        path: str,
        *,
        readonly: bool = False,
        durability: str = "durable",
        map_size: int = 64 << 20,
        max_map_size: int = 1 << 40,
        max_readers: int = 1024,
    ) -> None:
        if durability not in ("durable", "relaxed"):
            raise InvalidInputError(f"durability must be 'durable' or 'relaxed', not {durability!r}")
        self.path = os.path.abspath(path)
        self.readonly = readonly
        self.durability = durability
        self._meta_sync = durability == "durable" and not readonly
        self.max_map_size = max_map_size
        self._pid = os.getpid()
        self._closed = False
        self._users = 1  # Stores sharing this engine (open_engine); the last close closes it
        self._rw = RWLock()
        self._write_lock = threading.Lock()
        self._wfd: int | None = None  # writer.lck (writable stores): queues the processes' write transactions
        try:
            if not readonly:
                _create(self.path, map_size)
            for attempt in range(5):
                try:
                    self._env = lmdb.open(
                        self.path,
                        map_size=map_size,
                        max_dbs=len(TABLES) + 4,
                        max_readers=max_readers,
                        readonly=readonly,
                        metasync=False,  # durable: flushed by run_write, outside the writer lock
                        sync=True,
                        lock=True,
                        readahead=False,
                        create=not readonly,
                        subdir=True,
                        mode=FILE_MODE,  # lock.mdb (data.mdb: _create)
                    )
                    break
                except lmdb.MapResizedError:  # another process grew the map while this one opened
                    if attempt == 4:
                        raise
        except lmdb.Error as exc:
            if readonly and isinstance(exc, lmdb.Error) and "No such file" in str(exc):
                raise StorageError(f"{self.path}: no store here (opened read-only, so none was created)") from exc
            if readonly and _errno_of(exc) == errno.EACCES:  # "open it read-only" would not help
                raise ReadOnlyError(
                    f"{self.path}: cannot open the store, even read-only ({exc}): readers register in its lock "
                    "file lock.mdb, which this user may not write; give it write access to lock.mdb, or read a "
                    "copy of the store"
                ) from exc
            raise _translate(exc, self.path) from exc
        except OSError as exc:
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise ReadOnlyError(
                    f"{self.path}: cannot create the store ({exc}); open it with readonly=True"
                ) from exc
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise StorageFullError(exc.errno, f"{self.path}: the disk is full; cannot create the store ({exc})") \
                    from exc
            raise StorageError(f"{self.path}: cannot create the store: {exc}") from exc
        if not readonly:
            try:
                self._wfd = os.open(os.path.join(self.path, "writer.lck"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                                    FILE_MODE)
            except OSError as exc:
                # a directory LMDB's files can be written in but not created in: write as before,
                # on LMDB's lock alone
                if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
                    self._env.close()
                    raise StorageError(f"{self.path}: cannot open writer.lck: {exc}") from exc
        if self._wfd is None:
            with contextlib.suppress(lmdb.Error):  # best effort
                self._env.reader_check()
        else:
            # LMDB's reader-table mutex has the write mutex's weakness, and processes started
            # together all take it at once: clearing dead readers' slots and taking the slot this
            # process's reads reuse (py-lmdb keeps one reset transaction) is done queued here.
            self._lock_writers()
            try:
                with contextlib.suppress(lmdb.Error):  # best effort
                    self._env.reader_check()
                    self._env.begin(buffers=False).abort()
            finally:
                self._unlock_writers()
        self._dbs: dict[str, Any] = {}
        for _attempt in range(5):
            try:
                self._open_tables(readonly)
                break
            except lmdb.MapResizedError:  # another process grew the map meanwhile: adopt it and retry
                self._env.set_mapsize(0)
        else:  # pragma: no cover
            self._close_files()
            raise StorageError(f"{self.path}: the map kept being resized by another process while opening")
        if readonly and any(db is None for n, db in self._dbs.items() if n not in OPTIONAL_TABLES):
            self._close_files()
            raise StorageError(f"{self.path}: not a tplog store (tables missing)")

    def _close_files(self) -> None:
        self._env.close()
        if self._wfd is not None:
            fd, self._wfd = self._wfd, None
            os.close(fd)

    def _lock_writers(self, on_wait: Callable[[], object] | None = None) -> None:
        """Queue behind other processes' write transactions (see the module's docstring).
        Callers hold ``_write_lock``: an fcntl lock belongs to the process, not the thread.
        ``on_wait`` runs first if another process holds the lock (before this one blocks)."""
        if self._wfd is not None:
            try:
                if on_wait is not None:
                    try:
                        fcntl.lockf(self._wfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        return
                    except OSError as exc:
                        if exc.errno not in (errno.EACCES, errno.EAGAIN):
                            raise
                    on_wait()
                fcntl.lockf(self._wfd, fcntl.LOCK_EX)
            except OSError as exc:  # pragma: no cover - EDEADLK/ENOLCK
                raise StorageError(f"{self.path}: cannot lock writer.lck: {exc}") from exc

    def _unlock_writers(self) -> None:
        if self._wfd is not None:
            fcntl.lockf(self._wfd, fcntl.LOCK_UN)

    def _open_tables(self, readonly: bool) -> None:
        try:
            if readonly:
                for name in TABLES:
                    try:
                        self._dbs[name] = self._env.open_db(name.encode(), create=False)
                    except lmdb.NotFoundError:
                        self._dbs[name] = None
            else:
                self._lock_writers()
                try:
                    with self._env.begin(write=True) as txn:
                        for name in TABLES:
                            self._dbs[name] = self._env.open_db(name.encode(), txn=txn)
                finally:
                    self._unlock_writers()
                if self._meta_sync:
                    self._env.sync(True)
        except lmdb.MapResizedError:
            raise
        except lmdb.Error as exc:
            self._close_files()
            raise _translate(exc, self.path) from exc
        except BaseException:
            self._close_files()
            raise

    # ------------------------------------------------------------------ lifecycle

    def _check(self) -> None:
        if self._closed:
            raise StoreClosedError(f"{self.path}: the store has been closed")
        if os.getpid() != self._pid:
            raise StoreClosedError(
                f"{self.path}: this store handle was opened in process {self._pid} and cannot be used "
                "after fork(); open the store again in the child process"
            )

    def close(self) -> None:
        with _OPEN_LOCK:
            self._users -= 1
            if self._users > 0 or self._closed:
                return
            for key, engine in list(_OPEN.items()):
                if engine is self:
                    del _OPEN[key]
        with self._write_lock, self._rw.exclusive():
            self._closed = True
            if os.getpid() == self._pid:
                self._close_files()

    # ------------------------------------------------------------------ transactions

    def _begin(self) -> lmdb.Transaction[bytes] | None:
        """A read transaction, or None when another process grew the map (adopt it, then retry)."""
        try:
            return self._env.begin(buffers=False)
        except lmdb.MapResizedError:
            return None
        except lmdb.Error as exc:
            raise _translate(exc, self.path) from exc

    @contextmanager
    def read(self) -> Iterator[LmdbRead]:
        """A read transaction: a consistent snapshot; never blocked by writers."""
        self._check()
        while True:
            with self._rw.shared():
                txn = self._begin()
                if txn is not None:
                    try:
                        yield LmdbRead(txn, self._dbs)
                    except lmdb.Error as exc:  # a read of a damaged page, in the caller's block
                        raise _translate(exc, self.path) from exc
                    except msgspec.DecodeError as exc:  # a row without a CRC of its own (heads, indexes)
                        raise _undecodable(exc, self.path) from exc
                    finally:
                        txn.abort()
                    return
            self._adopt_size()  # another process grew the map; adopt it, then retry

    def snapshot(self, fn: Callable[[LmdbRead], R]) -> R:
        """``fn(txn)`` in a read transaction of its own, as ``with read() as txn: return fn(txn)``
        (same snapshot, hold-off of map resizes, retry after another process grew the map, error
        translation) without the two generator-based context managers, which cost a cold load of a
        short thread more than its LMDB work does."""
        self._check()
        rw = self._rw
        cond = rw._cond
        while True:
            cond.acquire()  # RWLock.shared(), inline: wait out a resize, then count as a reader
            try:
                while rw._resizing:
                    cond.wait()
                rw._readers += 1
            finally:
                cond.release()
            try:
                raw = self._begin()
                if raw is not None:
                    try:
                        return fn(LmdbRead(raw, self._dbs))
                    except lmdb.Error as exc:  # a read of a damaged page
                        raise _translate(exc, self.path) from exc
                    except msgspec.DecodeError as exc:  # a row without a CRC of its own (heads, indexes)
                        raise _undecodable(exc, self.path) from exc
                    finally:
                        raw.abort()
            finally:  # the release half of RWLock.shared(): the last reader out wakes a resizer
                cond.acquire()
                try:
                    rw._readers -= 1
                    if rw._readers == 0:
                        cond.notify_all()
                finally:
                    cond.release()
            self._adopt_size()  # another process grew the map; adopt it, then retry

    def run_write(self, fn: Callable[[WriteTxn], R], on_wait: Callable[[], object] | None = None) -> R:
        """Run ``fn`` in one write transaction and commit; retried after map growth.

        ``fn`` must not have effects outside the transaction (it may run again). ``on_wait``
        runs (once per attempt) when another process's write transaction holds the lock.
        """
        self._check()
        if self.readonly:
            raise ReadOnlyError(f"{self.path}: the store was opened read-only")
        with self._write_lock:
            while True:
                txn = None
                try:
                    with self._rw.shared():
                        self._lock_writers(on_wait)
                        try:
                            txn = self._env.begin(write=True)
                            try:
                                result = fn(LmdbWrite(txn, self._dbs))
                                txn.commit()
                            except BaseException:
                                txn.abort()  # before another process may go for LMDB's lock
                                raise
                        finally:
                            self._unlock_writers()
                        if self._meta_sync:  # the commit's meta page, with no other process waiting on it
                            self._env.sync(True)
                        return result
                except lmdb.MapFullError:
                    if txn is not None:
                        txn.abort()
                    self._grow()
                except lmdb.MapResizedError:
                    if txn is not None:
                        txn.abort()
                    self._adopt_size()
                except lmdb.Error as exc:
                    if txn is not None:
                        txn.abort()
                    raise _translate(exc, self.path) from exc
                except msgspec.DecodeError as exc:
                    raise _undecodable(exc, self.path) from exc
                except BaseException:
                    if txn is not None:
                        txn.abort()
                    raise

    def _grow(self) -> None:
        current = self._env.info()["map_size"]
        if current >= self.max_map_size:
            raise StorageFullError(
                errno.ENOSPC,
                f"{self.path}: the map reached max_map_size ({self.max_map_size} bytes); raise max_map_size",
            )
        new = min(current * 2, self.max_map_size)
        with self._rw.exclusive():
            try:
                self._env.set_mapsize(new)
            except lmdb.Error as exc:
                raise _translate(exc, self.path) from exc

    def _adopt_size(self) -> None:
        with self._rw.exclusive():
            self._env.set_mapsize(0)

    # ------------------------------------------------------------------ maintenance

    def sync(self) -> None:
        self._check()
        if not self.readonly:
            try:
                self._env.sync(True)
            except lmdb.Error as exc:
                raise _translate(exc, self.path) from exc

    def backup(self, dest: str, *, compact: bool = True) -> None:
        """A consistent hot copy into the empty directory ``dest`` (compacting by default);
        on disk (flushed, with its directory entries) when it returns."""
        self._check()
        backup_dir(dest)
        for attempt in range(5):
            try:
                # as a reader: a map resize in this process (remapping the file) waits for the copy
                with self._rw.shared():
                    self._env.copy(dest, compact=compact)
                break
            except lmdb.MapResizedError as exc:  # another process grew the map: adopt it, copy again
                if attempt == 4:
                    raise _translate(exc, dest) from exc
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(dest, "data.mdb"))
                self._adopt_size()
            except lmdb.Error as exc:
                raise _translate(exc, dest) from exc
        _fsync_tree(dest)

    def info(self) -> dict[str, Any]:
        tables: dict[str, dict[str, int]] = {}
        # In read()'s transaction: it adopts a map another process grew (MDB_MAP_RESIZED) as every
        # read does, and translates LMDB's errors.
        with self.read() as rtxn:
            info: dict[str, Any] = dict(self._env.info())
            stat: dict[str, Any] = dict(self._env.stat())
            for name in TABLES:
                s = rtxn._txn.stat(self._dbs[name])
                tables[name] = {
                    "entries": s["entries"],
                    "pages": s["branch_pages"] + s["leaf_pages"] + s["overflow_pages"],
                    "overflow_pages": s["overflow_pages"],
                }
        file = os.path.join(self.path, "data.mdb")
        return {
            "path": self.path,
            "map_size": info["map_size"],
            "last_pgno": info["last_pgno"],
            "page_size": stat["psize"],
            "file_bytes": os.path.getsize(file) if os.path.exists(file) else 0,
            "used_bytes": (info["last_pgno"] + 1) * stat["psize"],
            "max_readers": info["max_readers"],
            "num_readers": info["num_readers"],
            "tables": tables,
        }

    def try_lock(self, name: str) -> FileLock | None:
        """``flock`` on ``<store>/<name>.lock`` (created if missing), not blocking."""
        self._check()
        if not name or not all(c.isascii() and (c.isalnum() or c in "-_") for c in name):
            raise InvalidInputError(f"lock name must be ASCII letters, digits, '-' or '_', not {name!r}")
        if self.readonly:
            raise ReadOnlyError(f"{self.path}: the store was opened read-only")
        try:
            fd = os.open(os.path.join(self.path, name + ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
        except OSError as exc:
            raise StorageError(f"{self.path}: cannot open the lock file {name}.lock: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except OSError as exc:
            os.close(fd)
            raise StorageError(f"{self.path}: cannot lock {name}.lock: {exc}") from exc
        return FileLock(fd)

    # ------------------------------------------------------------------ short scans (links queries)

    def scan(
        self,
        table: str,
        start: bytes,
        end: bytes,
        *,
        limit: int | None = None,
        check: Callable[[LmdbRead], object] | None = None,
        txn: LmdbRead | None = None,
    ) -> list[tuple[bytes, bytes]]:
        """The rows of ``table`` with ``start <= key < end``, in key order, at most ``limit``.

        ``check(txn)``, if given, runs first in the same transaction (e.g. "is this
        projection live?"). In ``txn`` (from :meth:`read`) if given, else in a read
        transaction of its own: the same snapshot, the same hold-off of map resizes
        (the read side of ``RWLock``) and the same retry after another process grew
        the map as :meth:`read`, but without a generator-based context manager or a
        row generator. For short scans done once per query (children, incoming
        links) that machinery cost several times the LMDB work itself.
        """
        self._check()
        rw = self._rw
        cond = rw._cond
        own = txn is None
        raw: Any
        while True:
            if own:  # RWLock.shared(), inline: wait out a resize, then count as a reader
                cond.acquire()
                try:
                    while rw._resizing:
                        cond.wait()
                    rw._readers += 1
                finally:
                    cond.release()
            try:
                if own:
                    try:
                        raw = self._env.begin(buffers=False)
                    except lmdb.MapResizedError:
                        raw = None
                else:
                    raw = txn._txn  # type: ignore[union-attr]
                if raw is not None:
                    try:
                        if check is not None:
                            check(LmdbRead(raw, self._dbs) if own else txn)  # type: ignore[arg-type]
                        cur = raw.cursor(db=self._dbs[table])
                        out: list[tuple[bytes, bytes]] = []
                        if cur.set_range(start):
                            for k, v in cur:
                                if k >= end or (limit is not None and len(out) >= limit):
                                    break
                                out.append((k, v))
                        return out
                    finally:
                        if own:
                            raw.abort()
            except lmdb.MapResizedError:
                raise
            except lmdb.Error as exc:
                raise _translate(exc, self.path) from exc
            except msgspec.DecodeError as exc:
                raise _undecodable(exc, self.path) from exc
            finally:
                if own:  # the release half of RWLock.shared(): the last reader out wakes a resizer
                    cond.acquire()
                    try:
                        rw._readers -= 1
                        if rw._readers == 0:
                            cond.notify_all()
                    finally:
                        cond.release()
            self._adopt_size()  # another process grew the map; adopt it, then retry


# LMDB forbids opening one environment twice in a process: closing either copy drops the
# flock()-based locks of both, and lmdb >= 3 refuses the second open. Stores opened on one
# directory in one process therefore share its engine.
_OPEN: dict[tuple[int, int, int], LmdbEngine] = {}
_OPEN_LOCK = threading.Lock()


def open_engine(
    path: str,
    *,
    readonly: bool = False,
    durability: str = "durable",
    map_size: int = 64 << 20,
    max_map_size: int = 1 << 40,
) -> LmdbEngine:
    """This process's engine for the store at ``path``, opened on first use and shared after."""
    with _OPEN_LOCK:
        try:
            st = os.stat(path)
        except OSError:
            st = None
        if st is not None:
            engine = _OPEN.get((os.getpid(), st.st_dev, st.st_ino))
            if engine is not None and not engine._closed:
                if (engine.readonly, engine.durability) != (readonly, durability):
                    raise InvalidInputError(
                        f"{engine.path}: already open in this process with readonly={engine.readonly}, "
                        f"durability={engine.durability!r}; a second Store on it must use the same options "
                        "(or close the first)"
                    )
                engine._users += 1
                return engine
        engine = LmdbEngine(path, readonly=readonly, durability=durability, map_size=map_size,
                            max_map_size=max_map_size)
        st = os.stat(engine.path)
        _OPEN[(os.getpid(), st.st_dev, st.st_ino)] = engine
        return engine


def _create(path: str, map_size: int) -> None:
    """Make ``path`` a store directory holding an LMDB file, on disk before anything
    is written to it. LMDB writes a new file's two meta pages unflushed, so a power
    cut during the first commit could keep its data page but not them: a file LMDB
    refuses (``MDB_INVALID``). So the file, with its empty tables, is built under a
    temporary name, flushed, and renamed into place, under ``writer.lck`` (so that
    two processes creating the same store at once do not both rename)."""
    data = os.path.join(path, "data.mdb")
    if os.path.exists(data):
        return
    parent = os.path.dirname(path) or "."
    made = make_dir(path)
    fd = os.open(os.path.join(path, "writer.lck"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX)
        if os.path.exists(data):  # another process created it meanwhile
            return
        tmp = data + ".new"  # one creator at a time: a leftover of a crashed one is rebuilt
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        env = lmdb.open(tmp, subdir=False, lock=False, map_size=map_size, max_dbs=len(TABLES) + 4,
                        readahead=False, mode=FILE_MODE)
        try:
            with env.begin(write=True) as txn:
                for name in TABLES:
                    env.open_db(name.encode(), txn=txn)
        finally:
            env.close()
        _fsync(tmp)
        os.rename(tmp, data)
        _fsync(path)
        if made:
            _fsync(parent)
    finally:
        os.close(fd)  # drops the lock


def _fsync(name: str) -> None:
    fd = os.open(name, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(dest: str) -> None:
    """Flush a finished backup: LMDB's copy only write()s it, so a power cut right
    after ``backup`` returned could leave an empty or partial copy. ``os.listdir``,
    not ``os.walk``: the walk passes over a directory it fails to read (an I/O
    error), and ``backup`` then returned with nothing flushed. The new directory's
    entry in its parent is flushed too."""
    try:
        for name in sorted(os.listdir(dest)):
            os.chmod(os.path.join(dest, name), FILE_MODE)  # LMDB's copy makes data.mdb 0666 less the umask
            _fsync(os.path.join(dest, name))
        _fsync(dest)
        _fsync(os.path.dirname(os.path.abspath(dest)))
    except OSError as exc:
        raise StorageError(f"backup {dest}: flushing the copy failed: {exc}") from exc
