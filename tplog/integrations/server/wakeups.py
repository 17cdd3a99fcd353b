"""Wake-ups by thread for the server's long-lived readers (issue 37): an event tail or a resumed
chat stream waits for *its* thread, so an append or a live write wakes only that thread's
readers (2,000 idle tails all woke on every append before), and the resumed streams of one turn
share their reads of the live table.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["SharedLiveReads", "Wakeups"]


class Wakeups:
    """Per-key :class:`asyncio.Event`: take :meth:`event` *before* looking (a wake after that sets
    it, so none is lost), look, then wait on it. Keys are thread ids, lowercased. Loop thread only."""

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}
        self._watchers: dict[str, int] = {}

    @contextlib.contextmanager
    def watching(self, key: str) -> Iterator[None]:
        """While the block runs, ``key``'s event is kept; after the last watcher it is dropped."""
        key = key.lower()
        self._watchers[key] = self._watchers.get(key, 0) + 1
        try:
            yield
        finally:
            left = self._watchers[key] - 1
            if left:
                self._watchers[key] = left
            else:
                del self._watchers[key]
                self._events.pop(key, None)

    def event(self, key: str) -> asyncio.Event:
        """The event the next wake of ``key`` sets."""
        key = key.lower()
        ev = self._events.get(key)
        if ev is None:
            ev = self._events[key] = asyncio.Event()
        return ev

    def wake(self, keys: Iterable[str] | None) -> None:
        """Wake the readers of ``keys`` (``None``: everyone, e.g. at shutdown)."""
        if keys is None:
            evs, self._events = list(self._events.values()), {}
        else:
            evs = [ev for k in {k.lower() for k in keys} if (ev := self._events.pop(k, None)) is not None]
        for ev in evs:
            ev.set()


async def wait(ev: asyncio.Event, timeout: float) -> bool:
    """Whether ``ev`` was set within ``timeout`` seconds."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(ev.wait(), timeout)
    return ev.is_set()


class SharedLiveReads:
    """The resumed streams of one thread share their reads of the live table: one read at a time
    per thread, whose batches all of them slice from (kept while someone reads that thread).
    Two hundred readers of one turn made two hundred reads of each batch before."""

    def __init__(self, live: Any) -> None:
        self.live = live
        self._cache: dict[str, tuple[Any, list[bytes]]] = {}
        self._inflight: dict[str, asyncio.Future[tuple[Any, list[bytes]]]] = {}
        self._readers: dict[str, int] = {}

    @contextlib.contextmanager
    def reading(self, thread_id: str) -> Iterator[None]:
        self._readers[thread_id] = self._readers.get(thread_id, 0) + 1
        try:
            yield
        finally:
            left = self._readers[thread_id] - 1
            if left:
                self._readers[thread_id] = left
            else:
                del self._readers[thread_id]
                self._cache.pop(thread_id, None)

    async def read(self, thread_id: str, *, after: int = 0) -> tuple[Any, list[bytes]]:
        """``live.read(thread_id, after=after)``, answered from a read already under way or made once for all."""
        fut = self._inflight.get(thread_id)
        if fut is None:
            fut = asyncio.ensure_future(self._fetch(thread_id))
            self._inflight[thread_id] = fut
            fut.add_done_callback(lambda _f: self._inflight.pop(thread_id, None))
        hdr, batches = await asyncio.shield(fut)
        return hdr, batches[after:]

    async def _fetch(self, thread_id: str) -> tuple[Any, list[bytes]]:
        old_hdr, have = self._cache.get(thread_id, (None, []))
        hdr, new = await asyncio.to_thread(self.live.read, thread_id, after=len(have))
        if hdr is not None and old_hdr is not None and hdr.turn_seq != old_hdr.turn_seq:
            hdr, new = await asyncio.to_thread(self.live.read, thread_id, after=0)  # another turn: start over
            have = []
        have.extend(new)  # readers slice it as soon as their read returns: growing it later is safe
        got = (hdr, have)
        if thread_id in self._readers:
            self._cache[thread_id] = got
        return got
