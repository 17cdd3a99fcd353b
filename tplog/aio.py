"""The asyncio API: :class:`AsyncStore`, the same verbs as :class:`tplog.store.Store`, awaitable.

Appends join the backend's writes like a thread's would; reads run in the
default executor, so the event loop never blocks. Open one with
``await AsyncStore.open(path)`` or wrap a :class:`~tplog.store.Store`.
"""

from __future__ import annotations

import asyncio
import copy
import os
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Literal, cast

from tplog.backends.contract import (
    ANY,
    NO_STREAM,
    AppendResult,
    RebuildReport,
    ThreadAppend,
    ThreadHead,
    ThreadPage,
    VerifyReport,
)
from tplog.codec import Codec
from tplog.errors import TplogError
from tplog.events import Event, RecordedEvent
from tplog.lifecycle import activity_argument
from tplog.pipeline import Pipeline
from tplog.prepare import (
    EVENT_CLASSES,
    check_chunk,
    check_expected_version,
    check_position,
    drain,
    encode,
    log_appended,
    log_refused,
)
from tplog.projections.fold import FoldResult, InterruptState, PendingState
from tplog.protocol import model as m
from tplog.retire import PruneReport, RetentionPolicy
from tplog.search import SearchPage
from tplog.store import CHUNK, ExpectedVersion, Store

__all__ = ["ASYNC_INLINE_BYTES", "AsyncStore"]


#: An async append whose events encode to more msgpack bytes than this is checked,
#: compressed and hashed in a worker thread; smaller ones on the loop (there a thread
#: hop costs more than the work).
ASYNC_INLINE_BYTES = 64 << 10


def _bodies(codec: Codec, events: object) -> list[bytes] | None:
    """The events' msgpack bodies (msgspec's encoding is cheap enough for the loop), or
    ``None`` if they are not all encodable events (:func:`tplog.prepare.encode` then raises the
    error, naming the thread and the event)."""
    if isinstance(events, (str, bytes)) or not isinstance(events, Sequence):
        return None
    out: list[bytes] = []
    for ev in events:
        if not isinstance(ev, EVENT_CLASSES):
            return None
        try:
            out.append(codec.encode_body(cast(Event, ev)))
        except TplogError:
            return None
    return out

class AsyncStore:
    """The same verbs as :class:`Store`, for asyncio. Never blocks the event loop.

    Appends join the same group commit as threads (led by a background
    thread); reads run in the default executor. An append's events are encoded
    to msgpack on the loop; when that is over :data:`ASYNC_INLINE_BYTES`, the
    rest of their encoding (schema check, compression, hashing) runs in a worker
    thread. Open with ``await
    AsyncStore.open(path, **options)`` or wrap an existing ``Store``.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._view = False

    @classmethod
    async def open(cls, path: str | os.PathLike[str], **options: Any) -> AsyncStore:
        store = await asyncio.to_thread(Store, path, **options)
        return cls(store)

    def scoped(self, scope: str) -> AsyncStore:
        """As :meth:`Store.scoped`: a view confined to ``scope``, sharing this
        store's connection, group commit and leader thread; closing a view does
        nothing, close the store itself."""
        view = copy.copy(self)
        view.store = self.store.scoped(scope)
        view._view = True
        return view

    @property
    def scope(self) -> str | None:
        """The scope of this view, or ``None`` for the unscoped store."""
        return self.store.scope

    async def append(
        self,
        thread_id: str,
        events: Sequence[Event],
        *,
        expected_version: ExpectedVersion = ANY,
        event_ids: Sequence[str] | None = None,
    ) -> AppendResult:
        """As :meth:`Store.append`; awaits the group commit without blocking the loop.

        Cancelling the awaiting task does not cancel the append: once queued it
        commits, and the caller only loses the result. Retry with the same
        ``event_ids`` to learn it (an idempotent retry returns it), or shield
        the call."""
        s = self.store
        bodies = _bodies(s.codec, events)
        if bodies is not None and sum(map(len, bodies)) > ASYNC_INLINE_BYTES:
            # The checks, compression and hashing of a large event take long enough
            # to stall other tasks: not on the loop.
            encoded = await asyncio.to_thread(encode, s.backend, thread_id, events, event_ids, bodies)
        else:
            encoded = encode(s.backend, thread_id, events, event_ids, bodies)
        check_expected_version(expected_version)
        part = ThreadAppend(thread_id=thread_id, events=encoded, expected=expected_version, scope=s.scope,
                            fresh_ids=event_ids is None, check_rules=s.check_rules)
        handle = s.backend.submit((part,), lead=False)
        try:
            res: AppendResult = (await asyncio.wrap_future(handle))[0]  # type: ignore[arg-type]
        except TplogError as exc:
            log_refused(thread_id, exc)
            raise
        log_appended(res)
        return res

    def pipeline(self, thread_id: str, *, expected_version: ExpectedVersion = ANY) -> Pipeline:
        """As :meth:`Store.pipeline` (use its ``aappend`` / ``acommit``)."""
        return Pipeline(self.store, thread_id, expected_version=expected_version)

    async def read(
        self,
        thread_id: str,
        *,
        after: int | None = None,
        limit: int | None = None,
        direction: Literal["forward", "backward"] = "forward",
    ) -> list[RecordedEvent]:
        return await asyncio.to_thread(self.store.read, thread_id, after=after, limit=limit, direction=direction)

    async def read_all(self, *, after: int = 0, limit: int | None = None) -> list[RecordedEvent]:
        return await asyncio.to_thread(self.store.read_all, after=after, limit=limit)

    def iter_all(self, *, after: int = 0, chunk: int = 64) -> AsyncIterator[RecordedEvent]:
        """As :meth:`Store.iter_all` (``async for``): each chunk is read in the default executor."""
        check_position(after)
        check_chunk(chunk)
        self.store.backend.check_open()
        return self._iter_all(after, chunk)

    async def _iter_all(self, pos: int, chunk: int) -> AsyncIterator[RecordedEvent]:
        while page := await asyncio.to_thread(self.store.read_all, after=pos, limit=chunk):
            pos = page[-1].position
            for ev in drain(page):
                yield ev

    async def head(self, thread_id: str) -> ThreadHead:
        return await asyncio.to_thread(self.store.head, thread_id)

    async def threads(
        self,
        *,
        after: str | None = None,
        limit: int = 50,
        include_deleted: bool = False,
        activity: str | Sequence[str] | None = None,
        agent: str | None = None,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        created_after: Any = None,
        created_before: Any = None,
        updated_after: Any = None,
        updated_before: Any = None,
        roots: bool = False,
        has_children: bool | None = None,
        status: str | Sequence[str] | None = None,
    ) -> ThreadPage:
        """As :meth:`Store.threads` (same filters; ``status=`` is ``activity=``'s deprecated name)."""
        activity = activity_argument(activity, status, "AsyncStore.threads")
        return await asyncio.to_thread(
            self.store.threads, after=after, limit=limit, include_deleted=include_deleted, activity=activity,
            agent=agent, title=title, metadata=metadata, created_after=created_after, created_before=created_before,
            updated_after=updated_after, updated_before=updated_before, roots=roots, has_children=has_children)

    async def search(
        self,
        query: str,
        *,
        scope: str | None = None,
        limit: int = 20,
        after: str | None = None,
        syntax: Literal["words", "fts5"] = "words",
        activity: str | Sequence[str] | None = None,
        agent: str | None = None,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        created_after: Any = None,
        created_before: Any = None,
        updated_after: Any = None,
        updated_before: Any = None,
        roots: bool = False,
        has_children: bool | None = None,
    ) -> SearchPage:
        """As :meth:`Store.search` (the index's catch-up and query run in the default executor)."""
        return await asyncio.to_thread(
            self.store.search, query, scope=scope, limit=limit, after=after, syntax=syntax, activity=activity,
            agent=agent, title=title, metadata=metadata, created_after=created_after, created_before=created_before,
            updated_after=updated_after, updated_before=updated_before, roots=roots, has_children=has_children)

    async def fork(self, thread_id: str, at: int, *, new_thread_id: str | None = None,
                   reason: str | None = None) -> AppendResult:
        """As :meth:`Store.fork`."""
        return await asyncio.to_thread(self.store.fork, thread_id, at, new_thread_id=new_thread_id, reason=reason)

    async def prune(self, policy: RetentionPolicy, *, dry_run: bool = False, confirm_all: bool = False,
                    now: Any = None, progress: Callable[[str, int, int | None], None] | None = None) -> PruneReport:
        """As :meth:`Store.prune`, in a worker thread (``progress`` is called from it)."""
        return await asyncio.to_thread(self.store.prune, policy, dry_run=dry_run, confirm_all=confirm_all, now=now,
                                       progress=progress)

    async def prune_reports(self, *, after: str | None = None,
                            limit: int = 50) -> tuple[list[PruneReport], str | None]:
        return await asyncio.to_thread(self.store.prune_reports, after=after, limit=limit)

    async def delete_thread(self, thread_id: str, *, reason: str | None = None, cascade: bool = False) -> AppendResult:
        return await asyncio.to_thread(self.store.delete_thread, thread_id, reason=reason, cascade=cascade)

    async def wait_for_position(self, position: int, timeout: float | None = None, *, poll: float = 0.05) -> int:
        """As :meth:`Store.wait_for_position`. Each waiter holds a default-executor
        thread while it waits: for many live tails, run one watcher thread that
        waits and fans out (as ``tplog.integrations.server`` does)."""
        return await asyncio.to_thread(self.store.wait_for_position, position, timeout, poll=poll)

    async def exists(self, thread_id: str) -> bool:
        return await asyncio.to_thread(self.store.exists, thread_id)

    async def load(self, thread_id: str) -> FoldResult:
        return await asyncio.to_thread(self.store.load, thread_id)

    async def thread(self, thread_id: str) -> m.Thread:
        return await asyncio.to_thread(self.store.thread, thread_id)

    async def export(self, thread_id: str) -> m.Thread:
        return await asyncio.to_thread(self.store.export, thread_id)

    async def import_thread(self, thread: m.Thread, *, expected_version: ExpectedVersion = NO_STREAM) -> AppendResult:
        return await asyncio.to_thread(self.store.import_thread, thread, expected_version=expected_version)

    async def pending(self, thread_id: str) -> PendingState:
        return await asyncio.to_thread(self.store.pending, thread_id)

    async def interrupts(self, thread_id: str) -> InterruptState:
        return await asyncio.to_thread(self.store.interrupts, thread_id)

    async def links(self, thread_id: str) -> list[m.ThreadLink]:
        return await asyncio.to_thread(self.store.links, thread_id)

    async def incoming(
        self,
        thread_id: str,
        *,
        relation: str | None = None,
        limit: int | None = None,
        after: tuple[str, str] | None = None,
    ) -> list[tuple[str, str]]:
        return await asyncio.to_thread(self.store.incoming, thread_id, relation=relation, limit=limit, after=after)

    async def children(self, thread_id: str, *, limit: int | None = None, after: str | None = None) -> list[str]:
        return await asyncio.to_thread(self.store.children, thread_id, limit=limit, after=after)

    async def descendants(self, thread_id: str, *, max_depth: int | None = None) -> list[tuple[str, int]]:
        return await asyncio.to_thread(self.store.descendants, thread_id, max_depth=max_depth)

    async def last_position(self) -> int:
        """As the :attr:`Store.last_position` property (a coroutine here: it reads the store)."""
        return await asyncio.to_thread(lambda: self.store.last_position)

    async def stats(self) -> dict[str, Any]:
        return await asyncio.to_thread(self.store.stats)

    async def fold_cache_stats(self) -> dict[str, int]:
        return self.store.fold_cache_stats()  # in memory, under a short lock: no thread needed

    async def projections(self) -> dict[str, dict[str, Any]]:
        return await asyncio.to_thread(self.store.projections)

    async def rebuild(
        self,
        projection: str | None = None,
        *,
        verify: bool = False,
        progress: Callable[[str, int, int], None] | None = None,
        force: bool = False,
        chunk: int = CHUNK,
    ) -> list[RebuildReport]:
        """As :meth:`Store.rebuild`, in a worker thread (``progress`` is called from it)."""
        return await asyncio.to_thread(
            self.store.rebuild, projection, verify=verify, progress=progress, force=force, chunk=chunk
        )

    async def backup(self, dest: str, *, compact: bool = True) -> None:
        await asyncio.to_thread(self.store.backup, dest, compact=compact)

    async def sync(self) -> None:
        await asyncio.to_thread(self.store.sync)

    async def train_dictionary(self, *, samples: int = 2000, size: int = 64 << 10) -> int:
        return await asyncio.to_thread(self.store.train_dictionary, samples=samples, size=size)

    async def verify(self, *, projections: bool = True) -> VerifyReport:
        return await asyncio.to_thread(self.store.verify, projections=projections)

    async def close(self) -> None:
        """Close the store (pending appends finish first); on a view, nothing."""
        if self._view:
            return
        await asyncio.to_thread(self.store.close)

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
