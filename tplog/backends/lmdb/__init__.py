"""The LMDB backend behind the contract: one ordered log in an LMDB environment.

For now this adapts the store's LMDB implementation (``tplog._store``,
``tplog._storage``, ``tplog._projections``) to the contract, so that the contract
suite and the differential test hold LMDB to the same rules as the reference
backend. Single-thread appends join the store's group commit (a background
thread leads, as for async appends); an append touching several threads takes
the lead itself and writes every part in one transaction.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from tplog import _projections as proj
from tplog._codec import Encoded
from tplog._errors import InvalidInputError, NotFoundError
from tplog._events import RecordedEvent
from tplog._fold import ThreadState
from tplog._keys import from_u64
from tplog._storage import WriteTxn
from tplog._store import Store, _AsyncLeader, _Request
from tplog._verify import verify_store
from tplog.backends.contract import (
    Append,
    AppendResult,
    Cursor,
    Direction,
    Handle,
    Held,
    ThreadHead,
    ThreadPage,
    Tracking,
    check_append,
    thread_key,
)

__all__ = ["LmdbRecorder"]


class _Resolver:
    """Stands in for an event loop in a queued request: the group commit hands
    the finished request here, and its concurrent future gets the outcome."""

    def call_soon_threadsafe(self, fn: object, fut: Future[list[AppendResult]], req: _Request) -> None:
        if fut.done():
            return
        if req.error is not None:
            fut.set_exception(req.error)
        else:
            assert req.result is not None
            fut.set_result([req.result])


_RESOLVER = _Resolver()


class LmdbRecorder:
    """The contract over an LMDB store directory (``Store`` options pass through)."""

    logs = 1

    def __init__(self, path: str | os.PathLike[str], **options: Any) -> None:
        self.store = Store(path, **options)
        self._leader = _AsyncLeader(self.store)
        self._views: dict[str, Store] = {}

    def _at(self, scope: str | None) -> Store:
        if scope is None:
            return self.store
        view = self._views.get(scope)
        if view is None:
            view = self._views[scope] = self.store.scoped(scope)
        return view

    # ------------------------------------------------------------------ writes

    def submit(self, append: Append) -> Handle[list[AppendResult]]:
        check_append(append)
        fut: Future[list[AppendResult]] = Future()
        if len(append) > 1:
            try:
                fut.set_result(self._several(append))
            except BaseException as exc:
                fut.set_exception(exc)
            return fut
        part = append[0]
        s = self.store
        req = _Request(part.thread_id, list(part.events), part.expected, (_RESOLVER, fut), scope=part.scope,
                       fresh_ids=part.fresh_ids)
        with s._cond:
            s._check_open()
            s._gc.queue.append(req)
            grant = not s._gc.leading
            if grant:
                s._gc.leading = True
                self._leader.granted = True
        if grant:
            self._leader.wake.set()
        return fut

    def _several(self, append: Append) -> list[AppendResult]:
        """Every part in one write transaction, with the group commit's lead held
        (so the writer cache of concurrent groups stays consistent)."""
        s = self.store
        gc = s._gc
        with gc.cond:
            s._check_open()
            while gc.leading:
                gc.cond.wait(0.05)
            gc.leading = True
        try:
            def work(txn: WriteTxn) -> list[AppendResult]:
                gc.cache.clear()
                last = txn.last("global")
                pos = from_u64(last[0]) if last else 0
                live = (proj.is_live(proj.read_info(txn, proj.LINKS), proj.LINKS),
                        proj.is_live(proj.read_info(txn, proj.STATE), proj.STATE))
                heads: dict[bytes, bytes] = {}
                states: dict[bytes, bytes] = {}
                out = []
                for part in append:
                    req = _Request(part.thread_id, list(part.events), part.expected, (_RESOLVER, None),
                                   scope=part.scope, fresh_ids=part.fresh_ids)
                    res, pos = s._apply(txn, req, pos, live, heads, states)
                    out.append(res)
                return out

            results = s.engine.run_write(work)
            top = max(r.last_position for r in results)
            with s._position_cond:
                gc.last_position = max(gc.last_position, top)
                s._position_cond.notify_all()
            return results
        finally:
            s._lead()  # commits what queued meanwhile, then gives up the lead

    def delete_thread(self, thread_id: str, tombstone: Encoded, *, scope: str | None = None) -> Handle[AppendResult]:
        fut: Future[AppendResult] = Future()
        try:
            fut.set_result(self._at(scope)._delete(thread_id, tombstone))
        except BaseException as exc:
            fut.set_exception(exc)
        return fut

    # ------------------------------------------------------------------ reads

    def head(self, thread_id: str, *, scope: str | None = None) -> ThreadHead | None:
        try:
            return self._at(scope).head(thread_id)
        except NotFoundError:
            return None

    def read_thread(self, thread_id: str, *, scope: str | None = None, after: int | None = None,
                    limit: int | None = None, direction: Direction = "forward") -> list[RecordedEvent]:
        view = self._at(scope)
        if direction == "forward":
            return view.read(thread_id, start=None if after is None else after + 1, limit=limit)
        if after is not None and after <= 1:
            view.head(thread_id)  # NotFoundError for a thread never seen, as a read would raise
            return []
        return view.read(thread_id, start=None if after is None else after - 1, direction="backward", limit=limit)

    def log_of(self, thread_id: str, *, scope: str | None = None) -> int:
        return 0

    def read_log(self, log: int, *, after: int = 0, limit: int | None = None,
                 scope: str | None = None) -> list[RecordedEvent]:
        if log != 0:
            raise InvalidInputError(f"log {log} does not exist: this store keeps 1 log")
        return self._at(scope).read_all(start=after + 1, limit=limit)

    def positions(self) -> Cursor:
        return (self.store.last_position,)

    def wait(self, cursor: Cursor, timeout: float | None = None) -> Cursor:
        return (self.store.wait_for_position(cursor[0] + 1, timeout),)

    def threads(self, *, scope: str | None = None, after: str | None = None, limit: int = 50,
                include_deleted: bool = False) -> ThreadPage:
        return self._at(scope).threads(limit=limit, cursor=after, include_deleted=include_deleted)

    def incoming(self, thread_id: str, *, scope: str | None = None, relation: str | None = None,
                 after: tuple[str, str] | None = None, limit: int | None = None) -> list[tuple[str, str]]:
        return self._at(scope).incoming(thread_id, relation=relation, after=after, limit=limit)

    def children(self, thread_id: str, *, scope: str | None = None, after: str | None = None,
                 limit: int | None = None) -> list[str]:
        return self._at(scope).children(thread_id, after=after, limit=limit)

    def thread_state(self, thread_id: str, *, scope: str | None = None) -> ThreadState | None:
        with self.store.engine.read() as txn:
            if not proj.is_live(proj.read_info(txn, proj.STATE), proj.STATE):
                return None
            return proj.load_state(txn, thread_key(thread_id, scope))

    # ------------------------------------------------------------------ projections

    def tracking(self) -> list[Tracking]:
        return [Tracking(name=name, version=p["version"], code_version=p["code_version"], status=p["status"],
                         position=(p["position"],)) for name, p in self.store.projections().items()]

    def rebuild(self, names: Sequence[str], *, verify: bool = False, force: bool = False, chunk: int = 20_000,
                progress: Callable[[int, int], None] | None = None) -> list[Any]:
        for n in names:
            if n not in proj.PROJECTIONS:
                raise InvalidInputError(f"unknown projection {n!r}; known: {', '.join(proj.PROJECTIONS)}")
        self.store._check_open()
        cb = None if progress is None else (lambda done, total: progress(done, total))
        return proj.rebuild(self.store.engine, self.store.codec, list(names), verify=verify, progress=cb,
                            force=force, chunk=chunk)

    # ------------------------------------------------------------------ maintenance

    def try_lock(self, name: str) -> Held | None:
        return self.store.engine.try_lock(name)

    def backup(self, dest: str, *, compact: bool = True) -> None:
        self.store.backup(dest, compact=compact)

    def stats(self) -> dict[str, Any]:
        st = self.store.stats()
        st.setdefault("logs", 1)
        return st

    def verify(self, *, projections: bool = True) -> list[str]:
        return list(verify_store(self.store, projections=projections).problems)

    def sync(self) -> None:
        self.store.sync()

    def close(self) -> None:
        self.store.close()
        self._leader.stop = True
        self._leader.wake.set()
