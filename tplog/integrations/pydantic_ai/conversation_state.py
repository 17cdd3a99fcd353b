"""What a ``TplogConversationStore`` knows of the threads it has read, so a save or a load
reads only what was appended since (by any process: the thread's head says how far its log
goes, and a log only grows).

Per thread: the seq it was read up to, the metadata of its newest record or deletion marker,
and, once a history was read, its entries decoded. States are replaced, never changed, so a
worker thread reading one while another save extends it sees a consistent snapshot.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Final

import pydantic
from pydantic_ai import messages as pm

from tplog.backends.memory import MemoryRecorder
from tplog.errors import ThreadDeletedError
from tplog.events import AgentTurnInterrupted, MessageRecorded, RecordedEvent, ThreadInfoChanged, UserTurnSubmitted
from tplog.integrations.pydantic_ai.mapping import message_from_tp, request_from_user_turn
from tplog.integrations.pydantic_ai_fast import fast_message, fast_user_turn
from tplog.protocol import model as m
from tplog.store import Store, ThreadHead

__all__ = [
    "BARE_KEY",
    "DELETED_KEY",
    "ENTRY_KEY",
    "RECORD_KEY",
    "Entries",
    "States",
    "ThreadState",
    "converted",
    "entries_of",
    "message_of",
]

#: Extension key of an entry's event object: ``{"parent": id | None, "message"?: exact JSON}``.
ENTRY_KEY: Final = "pydantic_ai_entry"
#: Thread-metadata key of the conversation's record (``ConversationRecord`` as JSON).
RECORD_KEY: Final = "pydantic_ai.conversation"
DELETED_KEY: Final = "pydantic_ai.deleted"
BARE_KEY: Final = "pydantic_ai.entries"

_PAGE: Final = 200
_MAX_ENTRIES: Final = 20_000  # decoded entries kept over all threads (LRU by thread), as Store's fold_cache
_MAX_THREADS: Final = 100_000
_SHORT: Final = 64  # events: a thread this short is read whole at once (its history is read next)

_MSG_TA: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(pm.ModelMessage)

#: Entry id -> (parent id, the event's object holding it, seq).
Entries = dict[str, tuple[str | None, Any, int]]


def entries_of(events: Sequence[RecordedEvent], into: Entries | None = None) -> Entries:
    """The entries among ``events`` (added to a copy of ``into``)."""
    out: Entries = dict(into) if into else {}
    for rec in events:
        ev = rec.event
        obj: Any = (
            ev.turn
            if isinstance(ev, UserTurnSubmitted)
            else ev.message
            if isinstance(ev, MessageRecorded)
            else ev.interruption
            if isinstance(ev, AgentTurnInterrupted)
            else None
        )
        ext = obj.extra.get(ENTRY_KEY) if obj is not None else None
        if isinstance(ext, dict):
            out[rec.event_id] = (ext.get("parent"), obj, rec.seq)
        elif isinstance(ev, ThreadInfoChanged) and isinstance(ev.metadata, dict):
            for bare in ev.metadata.get(BARE_KEY, ()):
                out[bare["id"]] = (bare["parent"], bare, rec.seq)
    return out


def message_of(obj: Any, *, own: bool = True) -> pm.ModelMessage:
    """The Pydantic AI message an entry's stored object holds, sharing nothing with it (the
    object may be a cached or a backend's own one), unless not ``own``: the object is the
    caller's to give away."""
    exact = obj["message"] if isinstance(obj, dict) else obj.extra[ENTRY_KEY].get("message")
    if exact is not None:
        out: pm.ModelMessage = _MSG_TA.validate_json(exact)
        return out
    return converted(obj, own=own)


def converted(obj: m.UserTurn | m.RequestMessage | m.ResponseMessage, *, own: bool = True) -> pm.ModelMessage:
    """A protocol user turn or message as Pydantic AI's, built directly where the shape allows
    (``fast_message``), else validated; a save stores the exact JSON of any message this does
    not give back byte for byte."""
    if isinstance(obj, m.UserTurn):
        return fast_user_turn(obj, own=own) or request_from_user_turn(obj)
    return fast_message(obj, own=own) or message_from_tp(obj)


def _marker(events: Sequence[RecordedEvent]) -> dict[str, Any] | None:
    """The metadata of the newest record or deletion marker among ``events``, or ``None``."""
    for rec in reversed(events):
        ev = rec.event
        meta = ev.metadata if isinstance(ev, ThreadInfoChanged) else None
        if isinstance(meta, dict) and (RECORD_KEY in meta or DELETED_KEY in meta):
            return meta
    return None


class ThreadState:
    """One thread as read up to seq ``version``: ``meta`` (``{}``: no record nor marker yet),
    ``entries`` (``None``: not read)."""

    __slots__ = ("entries", "meta", "once", "version")

    def __init__(self, version: int, meta: dict[str, Any], entries: Entries | None, once: bool = False) -> None:
        self.version, self.meta, self.entries = version, meta, entries
        self.once = once  # its history was read once, not kept

    def extended(self, events: Sequence[RecordedEvent]) -> ThreadState:
        """This state with ``events`` (those after ``version``) read too."""
        if not events:
            return self
        meta = _marker(events)
        entries = None if self.entries is None else entries_of(events, self.entries)
        return ThreadState(events[-1].seq, self.meta if meta is None else meta, entries, self.once)


class States:
    """The threads' states, newest used last; bounded by the decoded entries they hold."""

    def __init__(self, store: Store, max_entries: int = _MAX_ENTRIES) -> None:
        self._store, self._max = store, max_entries
        # Whether a read's events are the caller's own (decoded for it), not the backend's stored objects.
        self._fresh = not isinstance(store.backend, MemoryRecorder)
        self._states: OrderedDict[str, ThreadState] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    def known(self, tid: str) -> ThreadState | None:
        """The state last read, unchecked (a write checks it by its expected version)."""
        with self._lock:
            return self._states.get(tid)

    def forget(self, tid: str) -> None:
        with self._lock:
            old = self._states.pop(tid, None)
            self._held -= len(old.entries) if old is not None and old.entries else 0

    def current(self, tid: str, *, entries: bool = False, head: ThreadHead | None = None) -> ThreadState:
        """The thread's state now (with its entries if ``entries``): the head (read, or the one
        given) says whether anything was appended since the state kept; only that is read.
        ``NotFoundError`` / ``ThreadDeletedError`` as the store's reads."""
        store = self._store
        head = store.head(tid) if head is None else head
        if head.status != "active":
            self.forget(tid)
            raise ThreadDeletedError(f"thread {tid} was deleted")
        st = self.known(tid)
        if st is not None and st.version > head.version:  # not this thread's log any more
            st = None
        if st is not None and (st.entries is not None or not entries):
            if st.version < head.version:
                st = st.extended(store.read(tid, after=st.version))
        elif entries or head.version <= _SHORT:
            events = store.read(tid)
            st = ThreadState(events[-1].seq if events else 0, _marker(events) or {}, entries_of(events))
        else:
            st = self._backward(tid)
        self.keep(tid, st)
        return st

    def history(self, tid: str) -> tuple[Entries, bool]:
        """The thread's entries now, and whether nothing else holds their objects (the caller may
        hand them out instead of copies). A long thread's first history read is not kept: its
        fresh objects go to the caller; the next read keeps its entries (copied from then on)."""
        st = self.known(tid)
        if not self._fresh or (st is not None and (st.entries is not None or st.once)):
            entries = self.current(tid, entries=True).entries
            assert entries is not None
            return entries, False
        head = self._store.head(tid)
        if head.status != "active":
            self.forget(tid)
            raise ThreadDeletedError(f"thread {tid} was deleted")
        events = self._store.read(tid)
        version = events[-1].seq if events else 0
        self.keep(tid, ThreadState(version, _marker(events) or {}, None, once=True))
        return entries_of(events), True

    def _backward(self, tid: str) -> ThreadState:
        """The newest record or marker, read from the end (a record needs no entries)."""
        store = self._store
        page = store.read(tid, limit=1, direction="backward")
        version = page[0].seq if page else 0
        while page:
            meta = _marker(page[::-1])
            if meta is not None:
                return ThreadState(version, meta, None)
            page = store.read(tid, after=page[-1].seq, limit=_PAGE, direction="backward")
        return ThreadState(version, {}, None)

    def keep(self, tid: str, st: ThreadState) -> None:
        with self._lock:
            old = self._states.pop(tid, None)
            if old is not None and old.entries:
                self._held -= len(old.entries)
            self._states[tid] = st
            self._held += len(st.entries) if st.entries else 0
            while (self._held > self._max or len(self._states) > _MAX_THREADS) and len(self._states) > 1:
                _, gone = self._states.popitem(last=False)
                self._held -= len(gone.entries) if gone.entries else 0
