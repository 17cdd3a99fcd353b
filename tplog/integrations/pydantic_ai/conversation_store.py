"""Pydantic AI's ``ConversationStore`` on tplog: each conversation is a ThreadProtocol thread.

``TplogConversationStore(store)`` (a :class:`~tplog.Store`, an :class:`~tplog.AsyncStore`, a
path or a URL such as ``"memory:"`` or ``"postgresql://…"``) implements the five storage
primitives of :class:`pydantic_ai.conversation_store.ConversationStore`; the base class keeps
deciding what is new, where a history branches and what a fork shares.

Mapping (see tplog/integrations/DECISIONS.md, "Pydantic AI's conversation store"):

- Conversation ``cid`` lives in thread ``thread_id_for(cid)``; once deleted, a conversation
  saved again under the same id gets the next *generation* thread
  (a UUIDv5 of the first one and the generation number), so its revision is new.
- Every entry is one event, whose event id is the entry id: a user-prompt-only request is a
  ``UserTurnSubmitted``, any other complete message a ``MessageRecorded`` in an agent turn, a
  message that is not complete (a cancelled run's partial response) the
  ``AgentTurnInterrupted`` closing a turn of its own (the complete messages before it end
  as a completed turn, so a later save can answer their tool calls). The event's model object carries
  ``"pydantic_ai_entry": {"parent": id}`` and, only when the protocol mapping would not give the
  message back byte for byte (system prompts, instructions, partial messages, clamped times),
  ``"message"``: its exact ``ModelMessagesTypeAdapter`` JSON. A message with nothing the
  protocol keeps (only a system prompt, or no parts: ``v4-message-has-parts``) is no event: it
  is listed, with its id and parent, under ``pydantic_ai.entries`` of the write's
  ``ThreadInfoChanged``.
- Each write ends with one ``ThreadInfoChanged`` whose metadata is the record, so one
  ``Store.append`` with ``expected_version`` = the version the revision was read at stores the
  entries and the record together, or (a conflict) nothing.
- ``branch`` and a rewriting save append to the same thread: the log is the conversation's
  whole tree in save order (the ``parent`` links say which line an entry is on), so the history
  a branch leaves stays readable and ``branch(from_entry=…)`` can come back to it.
- ``fork`` is tplog's copy-on-write fork of the source thread at the turn boundary after the
  kept entry (``children()`` of the source lists it); it shares the source's entries.
- ``delete`` marks the thread deleted (the conversation no longer loads or lists) and then
  deletes the thread, unless a fork still reads entries from it: then its events stay until
  the fork is gone.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import os
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Final, Literal, TypeVar

import msgspec
import pydantic
from pydantic_ai import messages as pm
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
)
from pydantic_ai.exceptions import UserError

from tplog.aio import AsyncStore
from tplog.errors import (
    ConflictError,
    HasForksError,
    InvalidInputError,
    NotFoundError,
    ThreadDeletedError,
    TplogError,
)
from tplog.events import (
    AgentRegistered,
    AgentTurnCompleted,
    AgentTurnInterrupted,
    AgentTurnStarted,
    Event,
    MessageRecorded,
    RecordedEvent,
    ThreadInfoChanged,
    ThreadStarted,
    UserTurnSubmitted,
)
from tplog.ids import new_event_id
from tplog.integrations.pydantic_ai.conversation_state import (
    BARE_KEY as _BARE_KEY,
)
from tplog.integrations.pydantic_ai.conversation_state import (
    DELETED_KEY as _DELETED_KEY,
)
from tplog.integrations.pydantic_ai.conversation_state import (
    ENTRY_KEY,
    RECORD_KEY,
    States,
    ThreadState,
    converted,
    entries_of,
    message_of,
)
from tplog.integrations.pydantic_ai.mapping import (
    is_user_request,
    message_to_tp,
    now_iso,
    run_usage_to_tp,
    user_turn_from_request,
)
from tplog.protocol import model as m
from tplog.protocol.validate import thread_id_for
from tplog.store import Store

__all__ = ["DEFAULT_AGENT_ID", "ENTRY_KEY", "RECORD_KEY", "TplogConversationStore"]

#: The agent id saved conversations' turns are attributed to by default (a UUID, as validate wants).
DEFAULT_AGENT_ID: Final = thread_id_for("pydantic_ai conversation store")

_SCOPE_KEY: Final = "pydantic_ai.scope"
_KIND_KEY: Final = "pydantic_ai.store"
_LAST_KEY: Final = "pydantic_ai.last_time"
_GEN_KEY: Final = "pydantic_ai.generation"

#: UUIDv5 namespace of generation ids (fixed: a conversation's threads must resolve the same forever).
_GEN_NAMESPACE: Final = uuid.UUID("0d7c9a52-3e1b-4f6a-8c2d-91b7e5a4f3c8")

_WHERE_MAX: Final = 100_000
_PAGE = 200  # threads per listing page

_T = TypeVar("_T")
_RECORD_TA: pydantic.TypeAdapter[ConversationRecord] = pydantic.TypeAdapter(ConversationRecord)
_MSG_TA: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(pm.ModelMessage)


def _exact(msg: pm.ModelMessage) -> bytes:
    return _MSG_TA.dump_json(msg)


def _later(ts: str, floor: str | None) -> str:
    """``ts``, or ``floor`` when ``ts`` is earlier: the store's time rules need turns in order."""
    if floor is None:
        return ts
    return floor if datetime.fromisoformat(ts) < datetime.fromisoformat(floor) else ts


#: Where the store's blocking calls run: a pool of its own, wider than asyncio's default (5 + cores
#: threads), so up to this many concurrent saves meet in one group commit (one fsync between them).
_POOL: concurrent.futures.Executor


def _new_pool() -> None:
    global _POOL
    _POOL = concurrent.futures.ThreadPoolExecutor(32, thread_name_prefix="tplog-conversations")


_new_pool()
# A forked child has none of the parent's threads but would believe the pool's idle ones there.
os.register_at_fork(after_in_child=_new_pool)


async def _off_loop(fn: Callable[..., _T], *args: Any) -> _T:
    return await asyncio.get_running_loop().run_in_executor(_POOL, functools.partial(fn, *args))


def _gen_id(root: str, k: int) -> str:
    """The thread of generation ``k`` of the conversation whose first thread is ``root``."""
    return root if k == 0 else str(uuid.uuid5(_GEN_NAMESPACE, f"{root}/{k}"))


def _newest(store: Store, root: str) -> tuple[str, int]:
    """The newest stored generation (``(root, 0)`` if none): generations are made in order and
    their ids never freed (a deleted thread keeps its tombstone), so the stored ones are 0..k."""

    def stored(k: int) -> bool:
        try:
            store.head(_gen_id(root, k))
        except NotFoundError:
            return False
        return True

    if not stored(1):
        return root, 0
    lo, hi = 1, 2
    while stored(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # lo is stored, hi is not
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if stored(mid) else (lo, mid)
    return _gen_id(root, lo), lo


def _ts(msg: pm.ModelMessage) -> str | None:
    """The message's time in Pydantic AI's JSON form, or ``None``."""
    ts = _MSG_TA.dump_python(msg, mode="json", include={"timestamp"}).get("timestamp")
    return ts if isinstance(ts, str) else None


def _with_entry(obj: Any, ext: dict[str, Any]) -> Any:
    return msgspec.structs.replace(obj, extra={**obj.extra, ENTRY_KEY: ext})


def _is_complete(msg: pm.ModelMessage) -> bool:
    return getattr(msg, "state", "complete") == "complete"


class _Events:
    """The events one write appends for its new entries (the live recorder's shapes)."""

    def __init__(self, agent_id: str, last: str | None) -> None:
        self.agent_id, self.last = agent_id, last
        self.events: list[Event] = []
        self.ids: list[str] = []
        self.open = False
        self.recorded = 0  # messages recorded in the open turn
        self.usage: Any = None  # the open turn's responses' usage, summed: its total_usage, as the recorder's
        # Entries with no protocol content, kept in the write's ThreadInfoChanged instead.
        self.bare: list[dict[str, Any]] = []

    def add(self, event: Event, event_id: str | None = None) -> None:
        self.events.append(event)
        self.ids.append(event_id or new_event_id())

    def _start(self, ts: str) -> None:
        if not self.open:
            self.add(AgentTurnStarted(agent_id=self.agent_id, started_at=ts))
            self.open, self.recorded, self.usage = True, 0, None

    def close(self, deferred: dict[str, str] | None = None) -> None:
        if self.open:
            usage = run_usage_to_tp(self.usage)
            self.add(AgentTurnCompleted(completed_at=self.last or now_iso(), deferred=deferred or {},
                                        total_usage=m.UNSET if usage is None else usage))
            self.open = False

    def entry(self, entry: ConversationEntry) -> None:
        msg = entry.message
        ext: dict[str, Any] = {"parent": entry.parent_id}
        ts = _later(_ts(msg) or self.last or now_iso(), self.last)
        if not _is_complete(msg):
            # The complete messages before it stand as a completed turn, so a later save may answer
            # their tool calls (the fold drops an interrupted turn's unanswered cycles).
            if self.recorded:
                self.close()
            self._start(ts)
            ext["message"] = _exact(msg).decode()
            self.add(AgentTurnInterrupted(interruption=_with_entry(
                m.Interruption(reason="interrupted", interrupted_at=ts), ext)), entry.id)
            self.open, self.last = False, ts
            return
        if is_user_request(msg):
            self.close()
            turn = user_turn_from_request(msg, submitted_at=None if msg.timestamp else ts)  # type: ignore[arg-type]
            turn = msgspec.structs.replace(turn, submitted_at=_later(turn.submitted_at, self.last))
            if _exact(converted(turn)) != _exact(msg):
                ext["message"] = _exact(msg).decode()
            self.add(UserTurnSubmitted(turn=_with_entry(turn, ext)), entry.id)
            self.last = turn.submitted_at
            return
        tp = message_to_tp(msg, self.agent_id, default_timestamp=ts)
        if not tp.parts:  # nothing the protocol keeps (only system prompts, or no parts): no message
            self.bare.append({"id": entry.id, "parent": entry.parent_id, "message": _exact(msg).decode()})
            return
        tp = msgspec.structs.replace(tp, timestamp=_later(tp.timestamp, self.last))
        if _exact(converted(tp)) != _exact(msg):
            ext["message"] = _exact(msg).decode()
        self._start(tp.timestamp)
        if isinstance(msg, pm.ModelResponse):
            self.usage = msg.usage if self.usage is None else self.usage + msg.usage
        self.add(MessageRecorded(message=_with_entry(tp, ext)), entry.id)
        self.last, self.recorded = tp.timestamp, self.recorded + 1


def _deferred(record: ConversationRecord) -> dict[str, str]:
    req = record.deferred_tool_requests
    if req is None:
        return {}
    out = {c.tool_call_id: "external" for c in req.calls}
    out.update({c.tool_call_id: "approval" for c in req.approvals})
    return out


class TplogConversationStore(ConversationStore):
    """A :class:`~pydantic_ai.conversation_store.ConversationStore` keeping each conversation
    as a tplog thread (see the module docstring for the mapping).

    ``store``: a :class:`~tplog.Store` or :class:`~tplog.AsyncStore` (left open by
    :meth:`close`), or a path or URL to open one (closed by :meth:`close`). A scoped view
    (``store.scoped(tenant)``) keeps every conversation in that tenant's key space;
    Pydantic AI's ``scope=`` is the record's, kept in the thread's metadata.
    ``agent_id``/``agent_name``: the agent the threads register and attribute their agent turns to.
    """

    def __init__(self, store: Store | AsyncStore | str | os.PathLike[str], *, agent_id: str = DEFAULT_AGENT_ID,
                 agent_name: str = "pydantic_ai") -> None:
        if isinstance(store, AsyncStore):
            store = store.store
        if isinstance(store, Store):
            self._store, self._owned = store, False
        elif isinstance(store, (str, os.PathLike)):
            try:
                self._store, self._owned = Store(store), True
            except TplogError as exc:
                raise UserError(f"cannot open the tplog store {store!r}: {exc}") from exc
        else:
            raise UserError(f"TplogConversationStore needs a Store, an AsyncStore, a path or a URL, not {store!r}")
        self.agent_id, self.agent_name = agent_id, agent_name
        # Entry id -> the thread it was last read or written in. The base class always reads a
        # record (or a history) before it names an entry, so this is filled before it is needed.
        self._where: dict[str, str] = {}
        # Conversation id -> its generation (thread, number) last found live; the threads' states.
        self._gens: dict[str, tuple[str, int]] = {}
        self._states = States(self._store)

    @property
    def store(self) -> Store:
        """The tplog store the conversations are kept in."""
        return self._store

    def close(self) -> None:
        """Close the store if this object opened it (from a path or URL)."""
        if self._owned:
            self._store.close()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    async def __aenter__(self) -> TplogConversationStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ the record

    def _current(self, conversation_id: str) -> tuple[str, int, ConversationRecord | None, int, dict[str, Any]]:
        """The conversation's newest generation thread, its number, record (``None``: no live
        conversation there), version and metadata."""
        try:
            root = thread_id_for(conversation_id)
        except InvalidInputError as exc:
            raise UserError(f"conversation id {conversation_id!r} cannot name a thread: {exc}") from exc
        known = self._gens.get(conversation_id)
        if known is not None:  # a generation with a live record has no newer one: no search
            try:
                st = self._states.current(known[0])
            except (NotFoundError, ThreadDeletedError):
                st = None
            record = None if st is None else self._live(conversation_id, known, st)
            if st is not None and record is not None:
                return known[0], known[1], record, st.version, st.meta
        tid, k = _newest(self._store, root)
        try:
            st = self._states.current(tid)
        except NotFoundError:
            return tid, k, None, 0, {}
        except ThreadDeletedError:  # deleted: a new conversation under this id takes the next generation
            return tid, k, None, 1, {}
        record = self._live(conversation_id, (tid, k), st)
        return tid, k, record, st.version, st.meta if record is not None else {}

    def _kept(self, conversation_id: str) -> tuple[str, int, ConversationRecord, int, dict[str, Any]] | None:
        """:meth:`_current` as this object last read or wrote it, not checked against the
        store (for a write, whose expected version checks it), or ``None``."""
        known = self._gens.get(conversation_id)
        st = self._states.known(known[0]) if known is not None else None
        record = None if known is None or st is None else self._live(conversation_id, known, st)
        if known is None or st is None or record is None:
            return None
        return known[0], known[1], record, st.version, st.meta

    def _live(self, conversation_id: str, gen: tuple[str, int], st: ThreadState) -> ConversationRecord | None:
        """The conversation's record in generation ``gen``'s state, if it holds a live one."""
        meta = st.meta
        raw = meta.get(RECORD_KEY)
        if not isinstance(raw, dict) or raw.get("conversation_id") != conversation_id or meta.get(_GEN_KEY) != gen[1]:
            return None
        if len(self._gens) > _WHERE_MAX:
            self._gens.clear()
        self._gens[conversation_id] = gen
        record = _RECORD_TA.validate_python(raw)
        self._seen(gen[0], [record.head_id, *record.branches])
        return record

    def _sync_read_record(self, conversation_id: str) -> ConversationRecord | None:
        return self._current(conversation_id)[2]

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        return await _off_loop(self._sync_read_record, conversation_id)

    def _sync_read_records(self, scope: str | None, limit: int | None) -> list[ConversationRecord]:
        want = {_KIND_KEY: "conversation"} if scope is None else {_SCOPE_KEY: scope}
        found: list[ConversationRecord] = []
        after: str | None = None
        while True:
            page = self._store.threads(metadata=want, after=after, limit=_PAGE)
            for head in page.threads:
                meta = self._states.current(head.thread_id, head=head).meta
                raw = meta.get(RECORD_KEY)
                if not isinstance(raw, dict):
                    continue
                record = _RECORD_TA.validate_python(raw)
                k = meta.get(_GEN_KEY, 0)
                root = thread_id_for(record.conversation_id)
                if _gen_id(root, k) == head.thread_id:  # not a fork's inherited record
                    found.append(record)
            if page.cursor is None:
                break
            after = page.cursor
        found.sort(key=lambda r: r.updated_at, reverse=True)
        return found[:limit]

    async def read_records(self, *, scope: str | None = None, limit: int | None = None) -> Sequence[ConversationRecord]:
        return await _off_loop(self._sync_read_records, scope, limit)

    # ------------------------------------------------------------------ writes

    def _info(self, record: ConversationRecord, k: int, last: str | None,
              bare: list[dict[str, Any]]) -> ThreadInfoChanged:
        meta: dict[str, Any] = {RECORD_KEY: _RECORD_TA.dump_python(record, mode="json"), _KIND_KEY: "conversation",
                                _GEN_KEY: k, _LAST_KEY: last}
        if bare:
            meta[_BARE_KEY] = bare
        if record.scope is not None:
            meta[_SCOPE_KEY] = record.scope
        return ThreadInfoChanged(metadata=meta, updated_at=_later(now_iso(), last))

    def _sync_write_record(self, record: ConversationRecord, new_entries: Sequence[ConversationEntry],
                      expected_revision: str | None) -> None:
        cid = record.conversation_id
        new_ids = {e.id for e in new_entries}
        head_is_new = record.head_id is None or record.head_id in new_ids
        kept = self._kept(cid) if head_is_new else None
        stale: TplogError | None = None  # what a write on the kept state met
        if kept is not None and kept[2].revision == expected_revision:
            # What this object last read or wrote, unchecked: the append expects its version, so a
            # change since (anyone's) is a conflict, and then the write is decided again on a fresh read.
            tid, k, _stored, version, meta = kept
            out = _Events(self.agent_id, meta.get(_LAST_KEY))
            self._finish(out, record, new_entries, k)
            try:
                self._append(tid, out, version)
            except (ConflictError, ThreadDeletedError, NotFoundError) as exc:
                self._states.forget(tid)
                stale = exc
            except InvalidInputError as exc:
                raise UserError(f"conversation {cid!r} cannot be stored: {exc}") from exc
            else:
                self._seen(tid, [e.id for e in new_entries])
                return
        tid, k, stored, version, meta = self._current(cid)
        if (stored.revision if stored is not None else None) != expected_revision:
            raise ConversationConflict(cid) from stale
        try:
            if stored is None:
                if version != 0:
                    self._retire(tid, version, cid)
                    k, tid = k + 1, _gen_id(thread_id_for(cid), k + 1)
                if head_is_new:
                    self._create(tid, k, record, new_entries)
                else:
                    self._fork(tid, k, record, new_entries)
            else:
                if not head_is_new and not self._has_entry(tid, record.head_id):
                    raise ConversationConflict(cid)
                out = _Events(self.agent_id, meta.get(_LAST_KEY))
                self._finish(out, record, new_entries, k)
                self._append(tid, out, version)
        except (ConflictError, ThreadDeletedError, NotFoundError) as exc:
            raise ConversationConflict(cid) from exc
        except InvalidInputError as exc:
            raise UserError(f"conversation {cid!r} cannot be stored: {exc}") from exc
        self._seen(tid, [e.id for e in new_entries])

    def _append(self, tid: str, out: _Events, version: int | Literal["no_stream"]) -> None:
        """Append a write's events at ``version``; the thread's state then knows the record it
        ends with (entries read before are extended from the log at the next read)."""
        res = self._store.append(tid, out.events, expected_version=version, event_ids=out.ids)
        st = self._states.known(tid)
        if st is None or st.entries is None:
            info = out.events[-1]
            assert isinstance(info, ThreadInfoChanged) and isinstance(info.metadata, dict)
            self._states.keep(tid, ThreadState(res.last_seq, info.metadata, None))

    def _retire(self, tid: str, version: int, cid: str) -> None:
        """End a generation that holds no live record before the save takes the next one: it is
        deleted, or a fork whose record never came (a crash between the two appends), or one
        another writer's fork is about to record. The marker, at ``version``, makes that writer's
        record a conflict (or, appended after it, this one), so only one of two creating saves wins."""
        with contextlib.suppress(ThreadDeletedError):
            self._store.append(tid, [ThreadInfoChanged(metadata={_DELETED_KEY: cid}, updated_at=now_iso())],
                               expected_version=version)

    def _seen(self, tid: str, entry_ids: Sequence[str | None]) -> None:
        if len(self._where) > _WHERE_MAX:  # bounded: the next read fills it again
            self._where.clear()
        for entry_id in entry_ids:
            if entry_id is not None:
                self._where[entry_id] = tid

    def _finish(self, out: _Events, record: ConversationRecord, new_entries: Sequence[ConversationEntry],
                k: int) -> None:
        for e in new_entries:
            out.entry(e)
        out.close(_deferred(record))
        out.add(self._info(record, k, out.last, out.bare))

    def _create(self, tid: str, k: int, record: ConversationRecord, new_entries: Sequence[ConversationEntry]) -> None:
        created = (_ts(new_entries[0].message) if new_entries else None) or now_iso()
        out = _Events(self.agent_id, None)
        out.add(ThreadStarted(thread_id=tid, created_at=created))
        out.add(AgentRegistered(agent=m.AgentConfig(agent_id=self.agent_id, agent_name=self.agent_name,
                                                    created_at=created)))
        self._finish(out, record, new_entries, k)
        self._append(tid, out, "no_stream")

    def _fork(self, tid: str, k: int, record: ConversationRecord, new_entries: Sequence[ConversationEntry]) -> None:
        head = record.head_id
        assert head is not None
        source = self._where.get(head)
        if source is None:
            raise ConversationConflict(record.conversation_id)
        events = self._store.read(source)
        entries = entries_of(events)
        if head not in entries:
            raise ConversationConflict(record.conversation_id)
        at, open_ = 0, False
        for rec in events:  # the first turn boundary at or after the kept entry
            ev = rec.event
            if isinstance(ev, AgentTurnStarted):
                open_ = True
            elif isinstance(ev, (AgentTurnCompleted, AgentTurnInterrupted)):
                open_ = False
            if rec.seq >= entries[head][2] and not open_:
                at = rec.seq
                break
        last = self._last_time(events, at)
        res = self._store.fork(source, at, new_thread_id=tid, reason="pydantic_ai fork")
        out = _Events(self.agent_id, last)
        self._finish(out, record, new_entries, k)
        self._append(tid, out, res.last_seq)

    @staticmethod
    def _last_time(events: Sequence[RecordedEvent], at: int) -> str | None:
        """The latest protocol time of the events up to seq ``at``: what the fork's next turn
        may not start before."""
        last: str | None = None
        for rec in events:
            if rec.seq > at:
                break
            t = rec.event.time() if not isinstance(rec.event, ThreadInfoChanged) else None
            if t is not None:
                last = _later(t, last)
        return last

    def _has_entry(self, tid: str, entry_id: str | None) -> bool:
        entries = self._states.current(tid, entries=True).entries
        return entries is not None and entry_id in entries

    async def write_record(self, record: ConversationRecord, *, new_entries: Sequence[ConversationEntry] = (),
                           expected_revision: str | None) -> None:
        await _off_loop(self._sync_write_record, record, list(new_entries), expected_revision)

    def _sync_delete_record(self, conversation_id: str, expected_revision: str) -> None:
        tid, _k, stored, version, _ = self._current(conversation_id)
        if stored is None or stored.revision != expected_revision:
            raise ConversationConflict(conversation_id)
        try:
            self._store.append(tid, [ThreadInfoChanged(metadata={_DELETED_KEY: conversation_id},
                                                       updated_at=now_iso())], expected_version=version)
        except (ConflictError, ThreadDeletedError) as exc:
            raise ConversationConflict(conversation_id) from exc
        # A fork still reading its entries (HasForksError) keeps the thread's events until it is gone.
        with contextlib.suppress(HasForksError):
            self._store.delete_thread(tid, reason="pydantic_ai conversation deleted")

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        await _off_loop(self._sync_delete_record, conversation_id, expected_revision)

    # ------------------------------------------------------------------ entries

    def _sync_read_history(self, head_id: str | None, limit: int | None) -> list[ConversationEntry]:
        if head_id is None:
            return []
        tid = self._where.get(head_id)
        if tid is None:
            raise LookupError(head_id)
        try:
            entries, lent = self._states.history(tid)
        except (NotFoundError, ThreadDeletedError) as exc:
            raise LookupError(head_id) from exc
        line: list[ConversationEntry] = []
        entry_id: str | None = head_id
        while entry_id is not None and (limit is None or len(line) < limit):
            if entry_id not in entries:
                raise LookupError(entry_id)
            parent, obj, _ = entries[entry_id]
            line.append(ConversationEntry(id=entry_id, parent_id=parent, message=message_of(obj, own=not lent)))
            entry_id = parent
        line.reverse()
        self._seen(tid, [e.id for e in line])
        return line

    async def read_history(self, head_id: str | None, *, limit: int | None = None) -> list[ConversationEntry]:
        return await _off_loop(self._sync_read_history, head_id, limit)

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        return (await self.read_history(entry_id, limit=1))[0]

