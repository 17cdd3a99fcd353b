"""In-flight stream chunks: what a server streamed of a thread's open turn, kept beside the log.

A chat server streams a turn as UI chunks while the recorder appends its complete messages to
the log. A client that lost the connection (or a page that reloads mid-turn) asks any server
process for the rest (``GET /api/chat/{id}/stream``): the chunks must be where every process
can read them, so they are kept *in the store* -- but not *in the log*, which holds complete
messages only: a side table per backend (LMDB: a small environment of its own in the store
directory, without fsync; PostgreSQL: an UNLOGGED table; memory: a dict), written in batches,
dropped when the turn is over.

Per thread: a :class:`LiveHeader` (which turn, how many batches, whether the stream ended,
whether someone asked the run to stop) and numbered batches of stream text (1, 2, ...). Only
the latest turn of a thread is kept: writing for a newer turn replaces an older one's entries.
Ended streams are dropped by :meth:`LiveStreams.sweep` (the server sweeps every few seconds: one
transaction for all the streams that ended, rather than one per turn).
The range vocabulary is the backends' (``after`` exclusive, ``limit``). A store's live table:
:func:`tplog.backends.live_streams.live_streams`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

import msgspec

__all__ = ["LiveHeader", "LiveStreams", "MemoryLive", "NotifyingLive", "expired"]


class LiveHeader(msgspec.Struct, kw_only=True):
    """``turn_seq``: the seq of the turn's ``AgentTurnStarted``; ``batches``: how many are stored;
    ``done``: the stream ended (its last batch is stored); ``stop``: a stop was requested (the
    process running the turn cancels it); ``attached``: the client that started the run is still
    reading it; ``owner``: who writes it (``host:pid``)."""

    turn_seq: int
    batches: int = 0
    done: bool = False
    stop: bool = False
    attached: bool = True
    owner: str = ""
    updated_ns: int = 0


class LiveStreams(Protocol):
    """The side table of in-flight stream chunks (one implementation per backend)."""

    def write(self, thread_id: str, turn_seq: int, batches: list[bytes], *, done: bool = False,
              attached: bool = True, owner: str = "") -> LiveHeader:
        """Add ``batches`` to the turn's stream (replacing another turn's entries), mark it ``done``
        if so, set ``attached``; one transaction. Returns the header as written (its ``stop`` tells
        the writer to stop its run)."""
        ...

    def read(self, thread_id: str, *, after: int = 0, limit: int | None = None) -> tuple[LiveHeader | None,
                                                                                          list[bytes]]:
        """The thread's header and its batches numbered after ``after``, from one snapshot."""
        ...

    def request_stop(self, thread_id: str, turn_seq: int) -> bool:
        """Ask the writer of that turn's stream to stop its run; False if no such stream is running."""
        ...

    def expire(self, thread_id: str, turn_seq: int) -> None:
        """Drop the thread's entries if they are that turn's."""
        ...

    def sweep(self, *, done_before: int, stale_before: int) -> int:
        """Drop the entries of every stream that ended before ``done_before``, or was last written
        before ``stale_before`` without ending (its writer died); times in ns since the epoch.
        One transaction, and none when there is nothing to drop. Returns how many streams went."""
        ...


class MemoryLive:
    """:class:`LiveStreams` in a dict: for the in-memory backend (one process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[str, tuple[LiveHeader, list[bytes]]] = {}

    def write(self, thread_id: str, turn_seq: int, batches: list[bytes], *, done: bool = False,
              attached: bool = True, owner: str = "") -> LiveHeader:
        with self._lock:
            row = self._rows.get(thread_id)
            if row is None or row[0].turn_seq != turn_seq:
                row = (LiveHeader(turn_seq=turn_seq, owner=owner), [])
                self._rows[thread_id] = row
            hdr, data = row
            data.extend(batches)
            hdr.batches = len(data)
            hdr.done = hdr.done or done
            hdr.attached = attached
            hdr.updated_ns = time.time_ns()
            return msgspec.structs.replace(hdr)

    def read(self, thread_id: str, *, after: int = 0, limit: int | None = None) -> tuple[LiveHeader | None,
                                                                                          list[bytes]]:
        with self._lock:
            row = self._rows.get(thread_id)
            if row is None:
                return None, []
            hdr, data = row
            out = data[after:] if limit is None else data[after:after + max(limit, 0)]
            return msgspec.structs.replace(hdr), list(out)

    def request_stop(self, thread_id: str, turn_seq: int) -> bool:
        with self._lock:
            row = self._rows.get(thread_id)
            if row is None or row[0].turn_seq != turn_seq or row[0].done:
                return False
            row[0].stop = True
            return True

    def expire(self, thread_id: str, turn_seq: int) -> None:
        with self._lock:
            row = self._rows.get(thread_id)
            if row is not None and row[0].turn_seq == turn_seq:
                del self._rows[thread_id]

    def sweep(self, *, done_before: int, stale_before: int) -> int:
        with self._lock:
            gone = [t for t, (h, _) in self._rows.items() if expired(h, done_before, stale_before)]
            for t in gone:
                del self._rows[t]
            return len(gone)


class NotifyingLive:
    """A :class:`LiveStreams` that calls ``on_write(thread_id)`` after each write to a thread's
    stream (in the writing thread): readers in this process wait for that instead of polling the
    table. Writers in other processes are not seen; their readers still poll."""

    def __init__(self, inner: LiveStreams, on_write: Callable[[str], None]) -> None:
        self.inner = inner
        self.on_write = on_write

    def write(self, thread_id: str, turn_seq: int, batches: list[bytes], *, done: bool = False,
              attached: bool = True, owner: str = "") -> LiveHeader:
        hdr = self.inner.write(thread_id, turn_seq, batches, done=done, attached=attached, owner=owner)
        self.on_write(thread_id)
        return hdr

    def read(self, thread_id: str, *, after: int = 0, limit: int | None = None) -> tuple[LiveHeader | None,
                                                                                          list[bytes]]:
        return self.inner.read(thread_id, after=after, limit=limit)

    def request_stop(self, thread_id: str, turn_seq: int) -> bool:
        return self.inner.request_stop(thread_id, turn_seq)

    def expire(self, thread_id: str, turn_seq: int) -> None:
        self.inner.expire(thread_id, turn_seq)

    def sweep(self, *, done_before: int, stale_before: int) -> int:
        return self.inner.sweep(done_before=done_before, stale_before=stale_before)


def expired(h: LiveHeader, done_before: int, stale_before: int) -> bool:
    return h.updated_ns < (done_before if h.done else stale_before)
