"""The store: appends with group commit, reads, heads, deletion, backup.

An append goes: check the events' types and limits → encode (msgpack, zstd,
CRC) in the caller's thread → queue → one LMDB write transaction shared by
every append waiting at that moment (group commit) that, per append, checks
idempotency, the expected version and the thread's state, then writes the
events, the global log, the event-id index, the link indexes and the thread
head → one commit (one pair of fsyncs for the whole group) → each caller gets
its own result or error.

Group commit is leader/follower: whoever finds no commit in progress leads,
taking every queued append into one transaction; the others wait and one of
them leads the next group. Async appends are led by a background thread so
the event loop never blocks.
"""

from __future__ import annotations

import asyncio
import copy
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, Literal, Union

import msgspec

from tplog import _model as m
from tplog import _projections as proj
from tplog._codec import (
    F_BLOB,
    MSG_KIND,
    PREFIX_SIZE,
    Codec,
    Encoded,
    Header,
    Limits,
    blob_refcount,
    blob_with_refcount,
)
from tplog._errors import (
    IdempotencyError,
    InvalidEventError,
    InvalidInputError,
    NotFoundError,
    StoreClosedError,
    ThreadDeletedError,
    TplogError,
    WrongExpectedVersionError,
)
from tplog._events import (
    KIND_CODE,
    AgentRegistered,
    AgentTurnCompleted,
    AgentTurnInterrupted,
    AgentTurnStarted,
    Event,
    LinkAdded,
    MessageRecorded,
    RecordedEvent,
    ThreadDeleted,
    ThreadInfoChanged,
    ThreadStarted,
    UserTurnSubmitted,
)
from tplog._fold import (
    FoldResult,
    InterruptState,
    Item,
    PendingState,
    ThreadState,
    events_from_thread,
    feed,
    fold,
    interrupts_of,
    pending_of,
    state_of,
)
from tplog._keys import TKEY_SIZE, eid_key, event_key, from_u64, scope_tag, tkey, u64
from tplog._projections import RebuildReport
from tplog._storage import LmdbEngine, ReadTxn, WriteTxn

__all__ = ["ANY", "EXISTS", "NO_STREAM", "AppendResult", "AsyncStore", "Store", "ThreadHead", "ThreadPage"]

ANY: Final = "any"
NO_STREAM: Final = "no_stream"
EXISTS: Final = "exists"
ExpectedVersion = Union[int, Literal["any", "no_stream", "exists"]]

_EVENT_CLASSES = tuple(KIND_CODE)
MAX_RELATION_BYTES: Final = 400  # links_in keys must stay under LMDB's 511-byte key limit


class ThreadHead(msgspec.Struct, array_like=True, kw_only=True):
    """A thread's head record: where its log ends and what state it is in.

    ``version`` is the last seq (0 for a thread with no events). ``status`` is
    ``"active"`` or ``"deleted"``. ``open_turn_agent`` names the agent whose
    turn is open (started, not yet completed or interrupted), else ``None``.
    Times are the store's clock in nanoseconds since the epoch.
    """

    thread_id: str
    version: int = 0
    last_position: int = 0
    created_ns: int = 0
    updated_ns: int = 0
    status: str = "active"
    open_turn_agent: str | None = None
    open_turn_seq: int = 0
    user_turns: int = 0
    agent_turns: int = 0
    messages: int = 0
    links: int = 0
    stored_bytes: int = 0
    scope: str | None = None


class AppendResult(msgspec.Struct, frozen=True, kw_only=True):
    """Where an append's events landed. ``duplicate`` is True when the same
    event ids were already stored (an idempotent retry): nothing was written and
    the original positions are returned."""

    thread_id: str
    first_seq: int
    last_seq: int
    first_position: int
    last_position: int
    event_ids: list[str]
    duplicate: bool = False


class ThreadPage(msgspec.Struct, frozen=True):
    """One page of threads, most recently updated first; pass ``cursor`` back for the next."""

    threads: list[ThreadHead]
    cursor: str | None


_head_dec = msgspec.msgpack.Decoder(ThreadHead)
_enc = msgspec.msgpack.Encoder()
_ids_dec = msgspec.msgpack.Decoder(list[str])
_child_dec = msgspec.msgpack.Decoder(tuple[str, int])


class _Request:
    __slots__ = ("done", "encoded", "error", "expected", "future", "result", "scope", "thread_id")

    def __init__(self, thread_id: str, encoded: list[Encoded], expected: ExpectedVersion,
                 future: Any = None, scope: str | None = None) -> None:
        self.thread_id = thread_id
        self.scope = scope
        self.encoded = encoded
        self.expected = expected
        self.future = future  # (loop, asyncio.Future) for async callers
        self.done = False
        self.result: AppendResult | None = None
        self.error: BaseException | None = None


class _GroupCommit:
    """State shared by a store and all its scoped views (never rebound per view)."""

    __slots__ = ("last_position", "leading", "queue")

    def __init__(self) -> None:
        self.queue: list[_Request] = []
        self.leading = False
        self.last_position = 0


def _now_ns() -> int:
    return time.time_ns()


class Store:
    """A tplog store in the directory ``path`` (created if missing).

    Thread-safe; several processes may open the same directory (LMDB allows
    one writer at a time; readers are never blocked). Options:

    - ``durability``: ``"durable"`` (default) — an acknowledged append has been
      fsynced; ``"relaxed"`` — one fsync per commit instead of two: an OS crash
      or power loss may undo the last committed group, never corrupts.
    - ``readonly``: open without write access (appends raise ReadOnlyError).
    - ``map_size``: the initial LMDB map; it grows by itself (doubling) up to
      ``max_map_size``.
    - ``limits``: :class:`~tplog._codec.Limits` on event size, parts, depth,
      decompressed size and the blob threshold.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        readonly: bool = False,
        durability: str = "durable",
        map_size: int = 64 << 20,
        max_map_size: int = 1 << 40,
        limits: Limits | None = None,
    ) -> None:
        self.path = os.fspath(path)
        self.engine = LmdbEngine(
            self.path, readonly=readonly, durability=durability, map_size=map_size, max_map_size=max_map_size
        )
        self.codec = Codec(limits)
        self.readonly = readonly
        self._scope: str | None = None
        self._view = False
        self._closed = False
        self._cond = threading.Condition(threading.Lock())
        self._gc = _GroupCommit()
        self._bg: threading.Thread | None = None
        self._bg_wanted = False
        self._position_cond = threading.Condition(threading.Lock())
        self._load_dictionaries()
        with self.engine.read() as txn:
            last = txn.last("global")
            self._gc.last_position = from_u64(last[0]) if last else 0
        if not readonly:
            empty = self._gc.last_position == 0
            self.engine.run_write(lambda txn: proj.init_infos(txn, empty))

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def scoped(self, scope: str) -> Store:
        """A view of this store confined to ``scope`` (a tenant).

        Thread ids, event ids, listings and link queries of the view live in the
        scope's own key space: a view of scope A never sees scope B's threads,
        events or links, whatever ids it names (the same id in two scopes is two
        threads). Views share the store's connection and group commit; closing a
        view does nothing, close the store itself.
        """
        if not isinstance(scope, str) or not scope or len(scope.encode()) > 256:
            raise InvalidInputError(f"scope must be a non-empty string of at most 256 bytes, not {scope!r}")
        view = copy.copy(self)
        view._scope = scope
        view._view = True
        return view

    @property
    def scope(self) -> str | None:
        """The scope of this view, or ``None`` for the unscoped store."""
        return self._scope

    def _tk(self, thread_id: str) -> bytes:
        return tkey(thread_id, self._scope)

    def close(self) -> None:
        """Close the store. Pending appends finish first; later calls raise StoreClosedError."""
        if self._view:
            return
        with self._cond:
            if self._closed:
                return
            self._closed = True
            while self._gc.queue or self._gc.leading:
                self._cond.notify_all()
                self._cond.wait(0.05)
            self._cond.notify_all()
        if self._bg is not None:
            self._bg.join(5)
        self.engine.close()

    def _check_open(self) -> None:
        if self.engine._closed:
            raise StoreClosedError(f"{self.path}: cannot use the store, as it has been closed")
        if self._closed:
            raise StoreClosedError(f"{self.path}: cannot use the store, as it has been closed")

    def _load_dictionaries(self) -> None:
        with self.engine.read() as txn:
            for k, v in txn.range("dicts"):
                self.codec.add_dictionary(from_u64(k), bytes(v))

    # ------------------------------------------------------------------ append

    def _encode(self, thread_id: str, events: Sequence[Event], event_ids: Sequence[str] | None) -> list[Encoded]:
        self._check_open()
        if not isinstance(thread_id, str) or not thread_id or len(thread_id.encode()) > 512:
            raise InvalidInputError(f"thread id must be a non-empty string of at most 512 bytes, not {thread_id!r}")
        if isinstance(events, (str, bytes)) or not isinstance(events, Sequence):
            raise InvalidInputError("events must be a sequence of tplog events")
        if not events:
            raise InvalidInputError(f"thread {thread_id}: append needs at least one event")
        if event_ids is not None and len(event_ids) != len(events):
            raise InvalidInputError(
                f"thread {thread_id}: {len(event_ids)} event ids for {len(events)} events"
            )
        now = _now_ns()
        out: list[Encoded] = []
        for i, ev in enumerate(events):
            if not isinstance(ev, _EVENT_CLASSES):
                raise InvalidInputError(
                    f"thread {thread_id}: events[{i}] is a {type(ev).__name__}, not a tplog event "
                    f"(one of {', '.join(c.__name__ for c in _EVENT_CLASSES)})"
                )
            if isinstance(ev, LinkAdded) and "\x00" in ev.link.relation:
                raise InvalidInputError(f"thread {thread_id}: events[{i}] link relation contains a NUL character")
            if isinstance(ev, LinkAdded) and len(ev.link.relation.encode()) > MAX_RELATION_BYTES:
                raise InvalidInputError(
                    f"thread {thread_id}: events[{i}] link relation is {len(ev.link.relation.encode())} bytes; "
                    f"at most {MAX_RELATION_BYTES} are allowed"
                )
            eid = str(uuid.uuid4()) if event_ids is None else event_ids[i]
            if not isinstance(eid, str) or not eid or len(eid.encode()) > 256:
                raise InvalidInputError(f"thread {thread_id}: event_ids[{i}] must be a non-empty string ≤ 256 bytes")
            out.append(self.codec.encode(ev, eid, now))
        if event_ids is not None and len(set(event_ids)) != len(event_ids):
            raise InvalidInputError(f"thread {thread_id}: the same event id appears twice in one append")
        return out

    def append(
        self,
        thread_id: str,
        events: Sequence[Event],
        *,
        expected_version: ExpectedVersion = ANY,
        event_ids: Sequence[str] | None = None,
    ) -> AppendResult:
        """Append ``events`` to a thread, atomically: all of them or none.

        ``expected_version``: ``"any"`` (default); ``"no_stream"`` — the thread
        must have no events; ``"exists"`` — it must have some; an int — its
        version (last seq) must be exactly that. A mismatch raises
        :class:`WrongExpectedVersionError` and writes nothing.

        ``event_ids``: one id per event (default: new UUIDs). Re-appending
        events whose ids are all stored already, in the same order, returns the
        original result with ``duplicate=True`` and writes nothing — safe to
        retry after a lost acknowledgement. Ids stored elsewhere or for only
        some of the events raise :class:`IdempotencyError`.

        Returns once the group's commit is durable (see ``durability``).
        """
        encoded = self._encode(thread_id, events, event_ids)
        self._check_expected(expected_version)
        req = _Request(thread_id, encoded, expected_version, scope=self._scope)
        with self._cond:
            self._check_open()
            self._gc.queue.append(req)
            while not req.done:
                if not self._gc.leading:
                    self._gc.leading = True
                    break
                self._cond.wait()
        if not req.done:
            self._lead()
        if req.error is not None:
            raise req.error
        assert req.result is not None
        return req.result

    @staticmethod
    def _check_expected(expected: object) -> None:
        if isinstance(expected, bool) or not (
            (isinstance(expected, int) and expected >= 0) or expected in (ANY, NO_STREAM, EXISTS)
        ):
            raise InvalidInputError(
                f"expected_version must be 'any', 'no_stream', 'exists' or an int ≥ 0, not {expected!r}"
            )

    def _lead(self) -> None:
        """Commit one group: everything queued now. Called with leadership held."""
        with self._cond:
            batch = self._gc.queue
            self._gc.queue = []
        try:
            if batch:
                self._commit(batch)
        finally:
            with self._cond:
                self._gc.leading = False
                self._cond.notify_all()
            for req in batch:
                if req.future is not None:
                    loop, fut = req.future
                    loop.call_soon_threadsafe(_resolve, fut, req)

    def _commit(self, batch: list[_Request]) -> None:
        def work(txn: WriteTxn) -> list[tuple[AppendResult | None, BaseException | None]]:
            last = txn.last("global")
            pos = from_u64(last[0]) if last else 0
            live = (proj.is_live(proj.read_info(txn, proj.LINKS), proj.LINKS),
                    proj.is_live(proj.read_info(txn, proj.STATE), proj.STATE))
            out: list[tuple[AppendResult | None, BaseException | None]] = []
            for req in batch:
                try:
                    res, pos = self._apply(txn, req, pos, live)
                    out.append((res, None))
                except TplogError as exc:
                    out.append((None, exc))
            return out

        try:
            results = self.engine.run_write(work)
        except BaseException as exc:  # engine failure: every append of the group failed
            for req in batch:
                req.error = exc
                req.done = True
            return
        top = self._gc.last_position
        for req, (res, err) in zip(batch, results):
            req.result, req.error, req.done = res, err, True
            if res is not None and res.last_position > top:
                top = res.last_position
        if top > self._gc.last_position:
            with self._position_cond:
                self._gc.last_position = top
                self._position_cond.notify_all()

    def _apply(self, txn: WriteTxn, req: _Request, pos: int, live: tuple[bool, bool]) -> tuple[AppendResult, int]:
        thread_id = req.thread_id
        scope = req.scope
        tk = tkey(thread_id, scope)
        raw = txn.get("heads", tk)
        head = _head_dec.decode(raw) if raw is not None else ThreadHead(thread_id=thread_id, scope=scope)
        if raw is not None and head.thread_id != thread_id and head.thread_id.lower() != thread_id.lower():
            raise InvalidInputError(f"thread id {thread_id!r} collides with stored thread {head.thread_id!r}")
        encoded = req.encoded
        # Idempotency: all ids stored here, in order → the original result.
        found = [txn.get("eventids", eid_key(e.event_id, scope)) for e in encoded]
        if any(f is not None for f in found):
            return self._duplicate(thread_id, tk, encoded, found), pos
        if head.status == "deleted":
            raise ThreadDeletedError(f"thread {thread_id} was deleted; its id cannot be reused")
        exp = req.expected
        if exp == NO_STREAM and head.version != 0 or exp == EXISTS and head.version == 0 or (
            isinstance(exp, int) and exp != head.version
        ):
            raise WrongExpectedVersionError(thread_id, exp, head.version)
        old_updated = head.updated_ns if raw is not None else None
        head = self._advance(thread_id, head, encoded)
        now = _now_ns()
        seq0 = head.version - len(encoded) + 1
        first_pos = pos + 1
        stored = 0
        tables = proj._Tables(txn, shadow=False)
        state = proj.load_state(tables, tk) if live[1] else None
        for i, enc in enumerate(encoded):
            seq = seq0 + i
            pos += 1
            key = event_key(tk, seq)
            value = enc.finish(key)
            stored += len(value)
            txn.put("events", key, value)
            txn.put("global", u64(pos), key)
            txn.put("eventids", eid_key(enc.event_id, scope), key + u64(pos))
            if enc.blob is not None:
                sha, blob = enc.blob
                old = txn.get("blobs", sha)
                txn.put("blobs", sha, blob if old is None else blob_with_refcount(old, blob_refcount(old) + 1))
            if live[0]:
                proj.apply_links(tables, thread_id, tk, seq, enc.event, enc.facts.spawned if enc.facts else (), scope)
            if state is not None:
                feed(state, Item(seq, enc.kind, enc.facts, None if enc.kind == MSG_KIND else enc.event))
        if state is not None:
            proj.save_state(tables, tk, state)
        head.last_position = pos
        head.stored_bytes += stored
        if head.created_ns == 0:
            head.created_ns = now
        head.updated_ns = now
        tag = scope_tag(scope)
        if old_updated is not None:
            txn.delete("updated", tag + u64(old_updated) + tk)
        txn.put("updated", tag + u64(now) + tk, b"")
        txn.put("heads", tk, _enc.encode(head))
        return (
            AppendResult(
                thread_id=thread_id,
                first_seq=seq0,
                last_seq=head.version,
                first_position=first_pos,
                last_position=pos,
                event_ids=[e.event_id for e in encoded],
            ),
            pos,
        )

    def _duplicate(self, thread_id: str, tk: bytes, encoded: list[Encoded], found: list[bytes | None]) -> AppendResult:
        if any(f is None for f in found):
            stored = [e.event_id for e, f in zip(encoded, found) if f is not None]
            raise IdempotencyError(
                f"thread {thread_id}: event ids {stored} are already stored but the others of this append are "
                "not; an idempotent retry must resend exactly the original events"
            )
        seqs: list[int] = []
        positions: list[int] = []
        for e, f in zip(encoded, found):
            assert f is not None
            if f[:TKEY_SIZE] != tk:
                raise IdempotencyError(f"event id {e.event_id!r} is already stored in another thread")
            seqs.append(from_u64(f, TKEY_SIZE))
            positions.append(from_u64(f, TKEY_SIZE + 8))
        if seqs != list(range(seqs[0], seqs[0] + len(seqs))):
            raise IdempotencyError(f"thread {thread_id}: event ids {[e.event_id for e in encoded]} are stored, "
                                   "but not as one contiguous append in this order")
        return AppendResult(
            thread_id=thread_id,
            first_seq=seqs[0],
            last_seq=seqs[-1],
            first_position=positions[0],
            last_position=positions[-1],
            event_ids=[e.event_id for e in encoded],
            duplicate=True,
        )

    def _advance(self, thread_id: str, head: ThreadHead, encoded: list[Encoded]) -> ThreadHead:
        """Check the events against the thread's state and return the new head."""
        h = msgspec.structs.replace(head)
        for i, enc in enumerate(encoded):
            ev = enc.event
            seq = h.version + 1
            where = f"thread {thread_id}, events[{i}] (would be seq {seq})"
            if isinstance(ev, ThreadStarted):
                if h.version != 0:
                    raise InvalidEventError(f"{where}: ThreadStarted must be the first event of a thread")
                if ev.thread_id != thread_id:
                    raise InvalidEventError(
                        f"{where}: ThreadStarted names thread {ev.thread_id!r} but is appended to {thread_id!r}"
                    )
            elif h.version == 0:
                raise InvalidEventError(f"{where}: the first event of a thread must be ThreadStarted, "
                                        f"not {type(ev).__name__}")
            elif isinstance(ev, (MessageRecorded, AgentTurnCompleted, AgentTurnInterrupted)):
                if h.open_turn_agent is None:
                    raise InvalidEventError(f"{where}: {type(ev).__name__} needs an open agent turn; "
                                            "append AgentTurnStarted first")
                if isinstance(ev, MessageRecorded):
                    h.messages += 1
                else:
                    h.open_turn_agent = None
                    h.open_turn_seq = 0
            elif isinstance(ev, (UserTurnSubmitted, AgentTurnStarted)):
                if h.open_turn_agent is not None:
                    raise InvalidEventError(
                        f"{where}: the agent turn of {h.open_turn_agent!r} opened at seq {h.open_turn_seq} is "
                        "still open; append AgentTurnCompleted or AgentTurnInterrupted first"
                    )
                if isinstance(ev, UserTurnSubmitted):
                    h.user_turns += 1
                else:
                    h.open_turn_agent = ev.agent_id
                    h.open_turn_seq = seq
                    h.agent_turns += 1
            elif isinstance(ev, LinkAdded):
                h.links += 1
            elif isinstance(ev, ThreadDeleted):
                raise InvalidEventError(f"{where}: delete a thread with Store.delete_thread(), not by appending")
            elif not isinstance(ev, (AgentRegistered, ThreadInfoChanged)):  # pragma: no cover
                raise InvalidEventError(f"{where}: unknown event {type(ev).__name__}")
            h.version = seq
        return h

    # ------------------------------------------------------------------ delete

    def delete_thread(self, thread_id: str, *, reason: str | None = None) -> AppendResult:
        """Hard-delete a thread: its events and index entries are removed, shared blobs
        released, and a ``ThreadDeleted`` tombstone kept so the id is never reused.
        Space is reused by later writes; ``tplog backup`` (compacting) shrinks the file."""
        tomb = ThreadDeleted(reason=reason if reason is not None else msgspec.UNSET)
        enc = self._encode(thread_id, [tomb], None)[0]
        scope = self._scope
        tk = self._tk(thread_id)
        tag = scope_tag(scope)

        def work(txn: WriteTxn) -> AppendResult:
            raw = txn.get("heads", tk)
            if raw is None:
                raise NotFoundError(f"thread {thread_id} does not exist")
            head = _head_dec.decode(raw)
            if head.status == "deleted":
                raise ThreadDeletedError(f"thread {thread_id} is already deleted")
            last = txn.last("global")
            pos = (from_u64(last[0]) if last else 0) + 1  # before removing any: positions are never reused
            tables = proj._Tables(txn, shadow=False)
            for k, v in list(txn.range("events", tk, tk + b"\xff" * 8)):
                seq = from_u64(k, TKEY_SIZE)
                hdr = self.codec.header(v, where=(thread_id, seq))
                ref = txn.get("eventids", eid_key(hdr.event_id, scope))
                if ref is not None:
                    txn.delete("global", u64(from_u64(ref, TKEY_SIZE + 8)))
                    txn.delete("eventids", eid_key(hdr.event_id, scope))
                if hdr.kind == KIND_CODE[LinkAdded] or (hdr.facts is not None and hdr.facts.spawned):
                    ev = None
                    if hdr.kind == KIND_CODE[LinkAdded]:
                        ev = self.codec.decode_event(self.codec.body_bytes(
                            v, lambda sha: txn.get("blobs", sha), where=(thread_id, seq)))
                    proj.unapply_links(tables, thread_id, tk, seq, ev, hdr.facts.spawned if hdr.facts else (), scope)
                if v[1] & F_BLOB:  # release one reference to the shared blob
                    sha = bytes(v[PREFIX_SIZE + int.from_bytes(v[10:12], "big"):])
                    blob = txn.get("blobs", sha)
                    if blob is not None:
                        n = blob_refcount(blob) - 1
                        if n <= 0:
                            txn.delete("blobs", sha)
                        else:
                            txn.put("blobs", sha, blob_with_refcount(blob, n))
                txn.delete("events", k)
            txn.delete("proj", proj.STATE_PREFIX + tk)
            seq = head.version + 1
            key = event_key(tk, seq)
            txn.put("events", key, enc.finish(key))
            txn.put("global", u64(pos), key)
            txn.put("eventids", eid_key(enc.event_id, scope), key + u64(pos))
            txn.delete("updated", tag + u64(head.updated_ns) + tk)
            now = _now_ns()
            txn.put("updated", tag + u64(now) + tk, b"")
            new_head = msgspec.structs.replace(
                head, version=seq, last_position=pos, status="deleted", updated_ns=now,
                open_turn_agent=None, open_turn_seq=0, stored_bytes=0,
            )
            txn.put("heads", tk, _enc.encode(new_head))
            return AppendResult(thread_id=thread_id, first_seq=seq, last_seq=seq, first_position=pos,
                                last_position=pos, event_ids=[enc.event_id])

        res = self.engine.run_write(work)
        with self._position_cond:
            self._gc.last_position = max(self._gc.last_position, res.last_position)
            self._position_cond.notify_all()
        return res

    # ------------------------------------------------------------------ read

    def head(self, thread_id: str) -> ThreadHead:
        """The thread's head record; :class:`NotFoundError` if it has none."""
        self._check_open()
        with self.engine.read() as txn:
            raw = txn.get("heads", self._tk(thread_id))
        if raw is None:
            raise NotFoundError(f"thread {thread_id} does not exist")
        return _head_dec.decode(raw)

    def exists(self, thread_id: str) -> bool:
        with self.engine.read() as txn:
            raw = txn.get("heads", self._tk(thread_id))
        return raw is not None and _head_dec.decode(raw).status == "active"

    def _decode_value(self, txn: ReadTxn, key: bytes, value: bytes, thread_id: str, seq: int,
                      position: int | None = None) -> RecordedEvent:
        where = (thread_id, seq)
        self.codec.check(key, value, where=where)
        hdr = self.codec.header(value, where=where)
        body = self.codec.body_bytes(value, lambda sha: txn.get("blobs", sha), where=where)
        ev = self.codec.decode_event(body, where=where)
        if position is None:
            ref = txn.get("eventids", eid_key(hdr.event_id, self._scope))
            position = from_u64(ref, TKEY_SIZE + 8) if ref is not None else 0
        return RecordedEvent(thread_id=thread_id, seq=seq, position=position, event_id=hdr.event_id,
                             recorded_at=hdr.recorded_at, event=ev)

    def read(
        self,
        thread_id: str,
        *,
        start: int | None = None,
        direction: Literal["forward", "backward"] = "forward",
        limit: int | None = None,
    ) -> list[RecordedEvent]:
        """A thread's events from seq ``start`` (inclusive), forward or backward.

        ``start`` defaults to the first (forward) or last (backward) event;
        ``limit`` caps how many are returned. Each value's CRC is verified; a
        mismatch raises :class:`CorruptionError` naming the thread and seq.
        Raises :class:`NotFoundError` for a thread the store never had.
        """
        self._check_open()
        if direction not in ("forward", "backward"):
            raise InvalidInputError(f"direction must be 'forward' or 'backward', not {direction!r}")
        if limit is not None and limit < 0 or start is not None and start < 0:
            raise InvalidInputError("start and limit must be ≥ 0")
        tk = self._tk(thread_id)
        out: list[RecordedEvent] = []
        with self.engine.read() as txn:
            raw = txn.get("heads", tk)
            if raw is None:
                raise NotFoundError(f"thread {thread_id} does not exist")
            name = _head_dec.decode(raw).thread_id
            if direction == "forward":
                it = txn.range("events", event_key(tk, start or 0), tk + b"\xff" * 8)
            else:
                end = event_key(tk, start + 1) if start is not None else tk + b"\xff" * 8
                it = txn.range("events", tk, end, reverse=True)
            for k, v in it:
                if limit is not None and len(out) >= limit:
                    break
                out.append(self._decode_value(txn, k, v, name, from_u64(k, TKEY_SIZE)))
        return out

    def iter_thread_values(self, thread_id: str) -> Iterator[tuple[int, Header, bytes]]:
        """(seq, header, raw value) for a thread, without decoding bodies."""
        tk = self._tk(thread_id)
        with self.engine.read() as txn:
            for k, v in txn.range("events", tk, tk + b"\xff" * 8):
                seq = from_u64(k, TKEY_SIZE)
                self.codec.check(k, v, where=(thread_id, seq))
                yield seq, self.codec.header(v, where=(thread_id, seq)), v

    def read_all(self, *, start: int = 1, limit: int | None = None) -> list[RecordedEvent]:
        """The store-wide log from ``position`` ``start`` in commit order (catch-up readers).

        Positions are gap-free at commit; events of a deleted thread leave gaps
        (their positions are skipped), except its ``ThreadDeleted`` tombstone.
        """
        self._check_open()
        out: list[RecordedEvent] = []
        names: dict[bytes, str] = {}
        with self.engine.read() as txn:
            for pk, key in txn.range("global", u64(max(start, 1))):
                if limit is not None and len(out) >= limit:
                    break
                value = txn.get("events", key)
                if value is None:  # pragma: no cover - deleted between index and event (same txn: impossible)
                    continue
                tk = key[:TKEY_SIZE]
                name = names.get(tk)
                if name is None:
                    raw = txn.get("heads", tk)
                    head = _head_dec.decode(raw) if raw is not None else None
                    if head is None or head.scope != self._scope:
                        name = ""  # another scope's thread: not visible here
                    else:
                        name = head.thread_id
                    names[tk] = name
                if not name:
                    continue
                out.append(self._decode_value(txn, key, value, name, from_u64(key, TKEY_SIZE), from_u64(pk)))
        return out

    @property
    def last_position(self) -> int:
        """The newest position in the store-wide log (re-read from disk)."""
        with self.engine.read() as txn:
            last = txn.last("global")
        pos = from_u64(last[0]) if last else 0
        with self._position_cond:
            self._gc.last_position = max(self._gc.last_position, pos)
        return pos

    def wait_for_position(self, position: int, timeout: float | None = None, *, poll: float = 0.05) -> int:
        """Block until the log holds ``position`` (or the timeout passes); returns the last position.

        Appends in this process wake waiters at once; appends by other processes
        are seen by polling every ``poll`` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._position_cond:
                if self._gc.last_position >= position:
                    return self._gc.last_position
                wait = poll if deadline is None else min(poll, max(0.0, deadline - time.monotonic()))
                self._position_cond.wait(wait)
            last = self.last_position
            if last >= position or (deadline is not None and time.monotonic() >= deadline):
                return last

    def threads(self, *, limit: int = 50, cursor: str | None = None, include_deleted: bool = False) -> ThreadPage:
        """Threads by last update, newest first, ``limit`` per page."""
        self._check_open()
        if limit <= 0:
            raise InvalidInputError("limit must be > 0")
        tag = scope_tag(self._scope)
        end: bytes | None = tag + b"\xff" * 8
        if cursor is not None:
            try:
                end = tag + bytes.fromhex(cursor)
                if len(end) != 16 + TKEY_SIZE:
                    raise ValueError
            except ValueError as exc:
                raise InvalidInputError(f"cursor {cursor!r} is not one this store returned") from exc
        out: list[ThreadHead] = []
        last_key: bytes | None = None
        more = False
        with self.engine.read() as txn:
            for k, _ in txn.range("updated", tag, end, reverse=True):
                raw = txn.get("heads", k[16:])
                if raw is None:  # pragma: no cover
                    continue
                h = _head_dec.decode(raw)
                if h.status == "deleted" and not include_deleted:
                    continue
                if len(out) >= limit:  # one more exists: the page is full and another follows
                    more = True
                    break
                out.append(h)
                last_key = k
        return ThreadPage(out, last_key[8:].hex() if more and last_key is not None else None)

    # ------------------------------------------------------------------ links (exact indexes)

    def incoming(self, thread_id: str, *, relation: str | None = None) -> list[tuple[str, str]]:
        """Threads that link to ``thread_id``: ``(source_thread_id, relation)`` pairs."""
        self._check_open()
        tk = self._tk(thread_id)
        prefix = tk + (relation.encode() + b"\x00" if relation is not None else b"")
        out: list[tuple[str, str]] = []
        with self.engine.read() as txn:
            proj.require_live(txn, proj.LINKS, self.path)
            for k, v in txn.range("links_in", prefix, prefix + b"\xff" * 40):
                rel = k[TKEY_SIZE:].split(b"\x00", 1)[0].decode()
                out.append((_ids_dec.decode(v)[0], rel))
        return out

    def children(self, thread_id: str, *, limit: int | None = None, after: str | None = None) -> list[str]:
        """Threads spawned from ``thread_id`` (by their ``spawned_from`` link or the
        parent's thread_spawn event), ordered by key; page with ``after=<last child id>``."""
        self._check_open()
        tk = self._tk(thread_id)
        start = tk + (self._tk(after) + b"\x00" if after is not None else b"")
        out: list[str] = []
        with self.engine.read() as txn:
            proj.require_live(txn, proj.LINKS, self.path)
            for _, v in txn.range("children", start, tk + b"\xff" * 17):
                if limit is not None and len(out) >= limit:
                    break
                out.append(_child_dec.decode(v)[0])
        return out

    # ------------------------------------------------------------------ projections (folds)

    def load(self, thread_id: str) -> FoldResult:
        """Fold the thread's log: its v0.0.4 document and the agent turn in progress."""
        return fold(e.event for e in self.read(thread_id))

    def thread(self, thread_id: str) -> m.Thread:
        """The thread as a ThreadProtocol v0.0.4 document (canonical turns only)."""
        res = self.load(thread_id)
        if res.deleted:
            raise ThreadDeletedError(f"thread {thread_id} was deleted")
        if res.thread is None:  # pragma: no cover - ThreadStarted is always first
            raise NotFoundError(f"thread {thread_id} has no ThreadStarted event")
        return res.thread

    def _items(self, thread_id: str) -> list[Item]:
        """Headers only for messages; small non-message bodies decoded."""
        self._check_open()
        tk = self._tk(thread_id)
        out: list[Item] = []
        with self.engine.read() as txn:
            if txn.get("heads", tk) is None:
                raise NotFoundError(f"thread {thread_id} does not exist")
            for k, v in txn.range("events", tk, tk + b"\xff" * 8):
                seq = from_u64(k, TKEY_SIZE)
                where = (thread_id, seq)
                self.codec.check(k, v, where=where)
                hdr = self.codec.header(v, where=where)
                ev = None
                if hdr.kind != MSG_KIND:
                    ev = self.codec.decode_event(self.codec.body_bytes(v, lambda sha: txn.get("blobs", sha),
                                                                       where=where), where=where)
                out.append(Item(seq, hdr.kind, hdr.facts, ev))
        return out

    def _state(self, thread_id: str) -> ThreadState:
        """The thread's id-only fold state: from the ``state`` projection when live,
        else folded from the thread's headers."""
        self._check_open()
        tk = self._tk(thread_id)
        with self.engine.read() as txn:
            if txn.get("heads", tk) is None:
                raise NotFoundError(f"thread {thread_id} does not exist")
            if proj.is_live(proj.read_info(txn, proj.STATE), proj.STATE):
                return proj.load_state(txn, tk)
        return state_of(self._items(thread_id))

    def pending(self, thread_id: str) -> PendingState:
        """Tool calls still waiting (deferred / executing) and those abandoned by an interruption."""
        return pending_of(self._state(thread_id))

    def interrupts(self, thread_id: str) -> InterruptState:
        """Whether and where the thread was interrupted, from recorded facts only."""
        return interrupts_of(self._state(thread_id))

    def rebuild(
        self,
        projection: str | None = None,
        *,
        verify: bool = False,
        progress: Callable[[str, int, int], None] | None = None,
    ) -> list[RebuildReport]:
        """Rebuild one projection (or all) from the log; safe while other threads and
        processes append. With ``verify`` the live projection is left alone and every
        difference from a fresh rebuild is reported instead."""
        self._check_open()
        names = [projection] if projection is not None else list(proj.PROJECTIONS)
        label = "+".join(names)
        cb = None if progress is None else (lambda done, total: progress(label, done, total))
        return proj.rebuild(self.engine, self.codec, names, verify=verify, progress=cb)

    def projections(self) -> dict[str, dict[str, Any]]:
        """Each projection's fold version, status and the log position it covers."""
        with self.engine.read() as txn:
            end = txn.last("global")
            last = from_u64(end[0]) if end else 0
            out: dict[str, dict[str, Any]] = {}
            for name in proj.PROJECTIONS:
                info = proj.read_info(txn, name)
                live = proj.is_live(info, name)
                out[name] = {
                    "code_version": proj.VERSIONS[name],
                    "version": info.version if info else None,
                    "status": "live" if live else "stale",
                    "position": last if live else (info.position if info else 0),
                }
        return out

    def links(self, thread_id: str) -> list[m.ThreadLink]:
        """The thread's outgoing links, in the order they were added."""
        return [it.event.link for it in self._items(thread_id) if isinstance(it.event, LinkAdded)]

    def descendants(self, thread_id: str, *, max_depth: int | None = None) -> list[tuple[str, int]]:
        """Every thread spawned from ``thread_id``, transitively: ``(thread_id, depth)``,
        breadth-first; each thread once, so cycles end. ``max_depth`` limits the depth."""
        seen = {self._tk(thread_id)}
        out: list[tuple[str, int]] = []
        frontier = [thread_id]
        depth = 0
        while frontier and (max_depth is None or depth < max_depth):
            depth += 1
            nxt: list[str] = []
            for t in frontier:
                for child in self.children(t):
                    k = self._tk(child)
                    if k not in seen:
                        seen.add(k)
                        out.append((child, depth))
                        nxt.append(child)
            frontier = nxt
        return out

    def import_thread(self, thread: m.Thread, *, expected_version: ExpectedVersion = NO_STREAM) -> AppendResult:
        """Store a ThreadProtocol document as its history events (upgrade v0.0.3 first).

        By default the thread must not exist yet. ``export(thread_id)`` gives back a
        document with the same canonical hash.
        """
        return self.append(thread.thread_id, events_from_thread(thread), expected_version=expected_version)

    def export(self, thread_id: str) -> m.Thread:
        """The thread as a v0.0.4 document (same as :meth:`thread`)."""
        return self.thread(thread_id)

    # ------------------------------------------------------------------ maintenance

    def backup(self, dest: str, *, compact: bool = True) -> None:
        """A consistent copy of the live store into the empty directory ``dest``."""
        self._check_open()
        self.engine.backup(dest, compact=compact)

    def sync(self) -> None:
        """Force everything committed so far to disk (useful in ``relaxed`` mode)."""
        self.engine.sync()

    def train_dictionary(self, *, samples: int = 2000, size: int = 64 << 10) -> int:
        """Train a zstd dictionary on up to ``samples`` stored event bodies; new values use it.

        Returns the new dictionary id (old values keep theirs). Returns 0 and
        trains nothing when there are too few samples.
        """
        bodies: list[bytes] = []
        with self.engine.read() as txn:
            for pk, key in txn.range("global", b"", None, reverse=True):
                v = txn.get("events", key)
                if v is None:
                    continue
                b = self.codec.body_bytes(v, lambda sha: txn.get("blobs", sha))
                if len(b) <= 64 << 10:
                    bodies.append(b)
                if len(bodies) >= samples:
                    break
        if len(bodies) < 64:
            return 0
        data = self.codec.train(bodies, size)

        def work(txn: WriteTxn) -> int:
            last = txn.last("dicts")
            new_id = (from_u64(last[0]) if last else 0) + 1
            txn.put("dicts", u64(new_id), data)
            return new_id

        new_id = self.engine.run_write(work)
        self.codec.add_dictionary(new_id, data)
        return new_id

    def stats(self) -> dict[str, Any]:
        """Counts and sizes: threads, events, bytes, map size, per-table entries."""
        info = self.engine.info()
        info["events"] = info["tables"]["events"]["entries"]
        info["threads"] = info["tables"]["heads"]["entries"]
        info["last_position"] = self.last_position
        info["dictionaries"] = info["tables"]["dicts"]["entries"]
        return info


def _resolve(fut: asyncio.Future[AppendResult], req: _Request) -> None:
    if fut.done():
        return
    if req.error is not None:
        fut.set_exception(req.error)
    else:
        fut.set_result(req.result)  # type: ignore[arg-type]


class AsyncStore:
    """The same verbs as :class:`Store`, for asyncio. Never blocks the event loop.

    Appends join the same group commit as threads (led by a background
    thread); reads run in the default executor. Open with ``await
    AsyncStore.open(path, **options)`` or wrap an existing ``Store``.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._leader = threading.Thread(target=self._lead_loop, name="tplog-async-leader", daemon=True)
        self._wake = threading.Event()
        self._stop = False
        self._leader.start()

    @classmethod
    async def open(cls, path: str | os.PathLike[str], **options: Any) -> AsyncStore:
        store = await asyncio.to_thread(Store, path, **options)
        return cls(store)

    def _lead_loop(self) -> None:
        s = self.store
        while True:
            self._wake.wait()
            self._wake.clear()
            while True:
                with s._cond:
                    if not s._gc.queue:
                        break
                    while s._gc.leading:
                        s._cond.wait()
                    if not s._gc.queue:
                        break
                    s._gc.leading = True
                s._lead()
            if self._stop:
                return

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
        encoded = s._encode(thread_id, events, event_ids)
        s._check_expected(expected_version)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[AppendResult] = loop.create_future()
        req = _Request(thread_id, encoded, expected_version, (loop, fut), scope=s._scope)
        with s._cond:
            s._check_open()
            s._gc.queue.append(req)
        self._wake.set()
        return await fut

    async def read(self, thread_id: str, **kw: Any) -> list[RecordedEvent]:
        return await asyncio.to_thread(self.store.read, thread_id, **kw)

    async def read_all(self, **kw: Any) -> list[RecordedEvent]:
        return await asyncio.to_thread(self.store.read_all, **kw)

    async def head(self, thread_id: str) -> ThreadHead:
        return await asyncio.to_thread(self.store.head, thread_id)

    async def threads(self, **kw: Any) -> ThreadPage:
        return await asyncio.to_thread(self.store.threads, **kw)

    async def delete_thread(self, thread_id: str, **kw: Any) -> AppendResult:
        return await asyncio.to_thread(self.store.delete_thread, thread_id, **kw)

    async def wait_for_position(self, position: int, timeout: float | None = None) -> int:
        """As :meth:`Store.wait_for_position`. Each waiter holds a default-executor
        thread while it waits: for many live tails, run one watcher thread that
        waits and fans out (as ``tplog.integrations.server`` does)."""
        return await asyncio.to_thread(self.store.wait_for_position, position, timeout)

    async def close(self) -> None:
        self._stop = True
        self._wake.set()
        await asyncio.to_thread(self._leader.join, 5)
        await asyncio.to_thread(self.store.close)

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

