"""The LMDB backend's reads: heads, thread and log ranges, listings, incoming/children pages,
folds (:class:`LmdbReads`, a base of :class:`~tplog.backends.lmdb.recorder.LmdbRecorder`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

from tplog.backends.common import CHILD_SPAWN, check_cursor, check_threads_page, decode_head
from tplog.backends.contract import Cursor, Direction, ThreadHead, ThreadPage
from tplog.backends.lmdb import chunks, finder
from tplog.backends.lmdb import projections as proj
from tplog.backends.lmdb.commit import GroupCommit, check_page_limit, ids_dec
from tplog.backends.lmdb.engine import LmdbEngine, ReadTxn
from tplog.backends.lmdb.keys import TKEY_SIZE, eid_key, event_key, from_u64, scope_tag, tkey, u64
from tplog.backends.lmdb.projrows import child_dec
from tplog.codec import Codec, Header
from tplog.errors import InvalidInputError, NotFoundError, StoreClosedError
from tplog.events import KIND_CODE, LinkAdded, RecordedEvent, ThreadStarted
from tplog.lifecycle import ThreadFilter, matches
from tplog.projections.fold import Item, ThreadState

__all__ = ["LmdbReads"]


class LmdbReads:
    """The read side of :class:`~tplog.backends.lmdb.recorder.LmdbRecorder`: heads, thread and log
    ranges, listings, links, folds. The recorder sets the attributes declared here."""

    path: str
    engine: LmdbEngine
    codec: Codec
    readonly: bool
    _closed: bool
    _gc: GroupCommit
    _position_cond: threading.Condition

    def check_open(self) -> None:
        self._check_open()

    def _check_open(self) -> None:
        if self._closed or self.engine._closed:
            raise StoreClosedError(f"{self.path}: cannot use the store, as it has been closed")

    # ------------------------------------------------------------------ read

    def head(self, thread_id: str, *, scope: str | None = None) -> ThreadHead | None:
        self._check_open()
        with self.engine.read() as txn:
            raw = txn.get("heads", tkey(thread_id, scope))
        return None if raw is None else decode_head(raw)

    def _decode_value(self, txn: ReadTxn, key: bytes, value: bytes, thread_id: str, seq: int,
                      position: int | None = None, scope: str | None = None) -> RecordedEvent:
        where = (thread_id, seq)
        ev = self.codec.decode_value(key, value, txn, where=where)
        hdr = self.codec.header(value, where=where)
        if position is None:
            ref = txn.get("eventids", eid_key(hdr.event_id, scope))
            position = from_u64(ref, TKEY_SIZE + 8) if ref is not None else 0
        return RecordedEvent(thread_id=thread_id, seq=seq, position=position, event_id=hdr.event_id,
                             recorded_at=hdr.recorded_at, event=ev)

    def read_thread(self, thread_id: str, *, scope: str | None = None, after: int | None = None,
                    limit: int | None = None, direction: Direction = "forward") -> list[RecordedEvent]:
        """Each value's CRC is verified; a mismatch raises :class:`CorruptionError`
        naming the thread and seq."""
        self._check_open()
        tk = tkey(thread_id, scope)
        out: list[RecordedEvent] = []
        with self.engine.read() as txn:
            raw = txn.get("heads", tk)
            if raw is None:
                raise NotFoundError(f"thread {thread_id} does not exist")
            name = decode_head(raw).thread_id
            if direction == "forward":
                start = event_key(tk, 0 if after is None else after + 1)
                for k, v in txn.range("events", start, tk + b"\xff" * 8):
                    if limit is not None and len(out) >= limit:
                        break
                    if chunks.is_chunk(v):  # decoded in one call; the events before ``start`` dropped
                        out.extend(self._chunk_recorded(txn, k, v, name, scope, start, limit, len(out)))
                    else:
                        out.append(self._decode_value(txn, k, v, name, from_u64(k, TKEY_SIZE), scope=scope))
                return out
            end = event_key(tk, after) if after is not None else tk + b"\xff" * 8
            for k, v in chunks.EventRows(txn, self.codec).range(tk, end, reverse=True, name=name):
                if limit is not None and len(out) >= limit:
                    break
                out.append(self._decode_value(txn, k, v, name, from_u64(k, TKEY_SIZE), scope=scope))
        return out

    def _chunk_recorded(self, txn: ReadTxn, key: bytes, value: bytes, name: str, scope: str | None, start: bytes,
                        limit: int | None, have: int) -> list[RecordedEvent]:
        first, headers, events = chunks.chunk_recorded(self.codec, key, value, txn, name)
        skip = max(0, from_u64(start, TKEY_SIZE) - first)
        stop = len(events) if limit is None else min(len(events), skip + limit - have)
        out = []
        for i in range(skip, stop):
            hdr = headers[i]
            ref = txn.get("eventids", eid_key(hdr.event_id, scope))
            out.append(RecordedEvent(thread_id=name, seq=first + i, position=from_u64(ref, TKEY_SIZE + 8)
                                     if ref is not None else 0, event_id=hdr.event_id,
                                     recorded_at=hdr.recorded_at, event=events[i]))
        return out

    def iter_thread_values(self, thread_id: str, *, scope: str | None = None) -> Iterator[tuple[int, Header, bytes]]:
        """(seq, header, raw value) for a thread, without decoding bodies."""
        tk = tkey(thread_id, scope)
        with self.engine.read() as txn:
            for k, v in chunks.EventRows(txn, self.codec).range(tk, tk + b"\xff" * 8, name=thread_id):
                seq = from_u64(k, TKEY_SIZE)
                self.codec.check(k, v, where=(thread_id, seq))
                yield seq, self.codec.header(v, where=(thread_id, seq)), v

    def log_of(self, thread_id: str, *, scope: str | None = None) -> int:
        return 0

    def read_log(self, log: int, *, after: int = 0, limit: int | None = None,
                 scope: str | None = None) -> list[RecordedEvent]:
        """Positions are gap-free at commit; events of a deleted thread leave gaps
        (their positions are skipped), except its ``ThreadDeleted`` tombstone."""
        if log != 0:
            raise InvalidInputError(f"log {log} does not exist: this store keeps 1 log")
        self._check_open()
        start = after + 1
        out: list[RecordedEvent] = []
        names: dict[bytes, str] = {}
        with self.engine.read() as txn:
            rows = chunks.EventRows(txn, self.codec)
            for pk, key in txn.range("global", u64(max(start, 1))):
                if limit is not None and len(out) >= limit:
                    break
                tk = key[:TKEY_SIZE]
                name = names.get(tk)
                if name is None:
                    raw = txn.get("heads", tk)
                    head = decode_head(raw) if raw is not None else None
                    # another scope's thread: not visible here
                    name = "" if head is None or head.scope != scope else head.thread_id
                    names[tk] = name
                if not name:
                    continue
                value = rows.get(key, name=name)  # a damaged chunk is named by its thread, not its key
                if value is None:  # pragma: no cover - deleted between index and event (same txn: impossible)
                    continue
                out.append(self._decode_value(txn, key, value, name, from_u64(key, TKEY_SIZE), from_u64(pk), scope))
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

    def positions(self) -> Cursor:
        return (self.last_position,)

    def wait(self, cursor: Cursor, timeout: float | None = None) -> Cursor:
        check_cursor(cursor, 1)  # one log
        return (self.wait_for_position(cursor[0] + 1, timeout),)

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

    def threads(self, *, scope: str | None = None, after: str | None = None, limit: int = 50,
                include_deleted: bool = False, where: ThreadFilter | None = None) -> ThreadPage:
        self._check_open()
        bound = check_threads_page(after, limit)
        tag = scope_tag(scope)
        hi = b"\xff" * 8
        if where is not None and where.updated_before is not None:
            hi = u64(where.updated_before)
        if bound is not None:
            hi = min(hi, bound)
        lo = u64(where.updated_after) if where is not None and where.updated_after is not None else b""
        out: list[ThreadHead] = []
        last_key: bytes | None = None
        more = False
        with self.engine.read() as txn:
            indexed = self.engine._dbs.get("finder") is not None and txn.get("meta", finder.DONE) is not None
            for k in finder.candidates(txn, tag, where, lo, hi, indexed):
                raw = txn.get("heads", k[8:])
                if raw is None:  # pragma: no cover
                    continue
                h = decode_head(raw)
                if h.status == "deleted" and not include_deleted:
                    continue
                if where is not None and not (matches(where, h) and (
                        where.has_children is None
                        or where.has_children == (next(txn.range("children", k[8:], k[8:] + b"\xff" * 17),
                                                       None) is not None))):
                    continue
                if len(out) >= limit:  # one more exists: the page is full and another follows
                    more = True
                    break
                out.append(h)
                last_key = k
        return ThreadPage(out, last_key.hex() if more and last_key is not None else None)

    # ------------------------------------------------------------------ links (exact indexes)

    def incoming(
        self,
        thread_id: str,
        *,
        scope: str | None = None,
        relation: str | None = None,
        after: tuple[str, str] | None = None,
        limit: int | None = None,
    ) -> list[tuple[str, str]]:
        """Threads that link to ``thread_id``: ``(source_thread_id, relation)`` pairs,
        one per link (a thread that added the same link twice is listed twice),
        ordered by relation, then by source key.

        Page with ``limit`` and ``after=<the last pair of the previous page>``: the
        next page starts after every link of that pair, so a page never ends
        between two links of one pair (it holds more than ``limit`` pairs then)."""
        self._check_open()
        check_page_limit(limit)
        tk = tkey(thread_id, scope)
        prefix = tk + (relation.encode() + b"\x00" if relation is not None else b"")
        start = prefix
        if after is not None:
            if (not isinstance(after, tuple) or len(after) != 2
                    or not all(isinstance(x, str) and x for x in after)):
                raise InvalidInputError(f"after must be a (source_thread_id, relation) pair, not {after!r}")
            if relation is not None and after[1] != relation:
                raise InvalidInputError(f"after names relation {after[1]!r}, but relation={relation!r} was asked")
            start = tk + after[1].encode() + b"\x00" + tkey(after[0], scope) + b"\xff" * 8
        rows = self.engine.scan("links_in", start, prefix + b"\xff" * 40,
                                limit=None if limit is None else limit + 1,
                                check=lambda txn: proj.require_live(txn, proj.LINKS, self.path))
        if not rows:
            self._require_known(thread_id, tk)
        if limit is not None and len(rows) > limit:
            extra, rows = rows[limit], rows[:limit]
            if rows and extra[0][:-8] == rows[-1][0][:-8]:  # the last pair goes on: take the rest of its links
                pair = rows[-1][0][:-8]  # key = target + relation + NUL + source + seq (8 bytes)
                rows += self.engine.scan("links_in", rows[-1][0] + b"\x00", pair + b"\xff" * 8 + b"\x00")
        out: list[tuple[str, str]] = []
        for k, v in rows:
            rel = k[TKEY_SIZE:].split(b"\x00", 1)[0].decode()
            out.append((ids_dec.decode(v)[0], rel))
        return out

    def _require_known(self, thread_id: str, tk: bytes) -> None:
        """For a links query that found nothing: :class:`NotFoundError` unless the store
        knows the thread: it is stored (deleted or not: the links to a deleted thread
        are its sources' history), or a stored thread links to it or names it as
        spawned (a link may name a thread kept elsewhere). Only an empty answer pays
        for this check, in a snapshot of its own (what it finds is as current)."""
        with self.engine.read() as txn:
            if txn.get("heads", tk) is not None:
                return
            for table, lo in (("links_in", tk), ("children", tk), ("proj", proj.SPAWNER_PREFIX + tk)):
                if next(iter(txn.range(table, lo, lo + b"\xff" * 40)), None) is not None:
                    return
        raise NotFoundError(f"thread {thread_id} does not exist, and no stored thread links to it")

    def children(self, thread_id: str, *, scope: str | None = None, after: str | None = None,
                 limit: int | None = None) -> list[str]:
        """Threads spawned from ``thread_id`` (by their ``spawned_from`` link or the
        parent's thread_spawn event), ordered by key; page with ``after=<last child id>``.
        A deleted child stays listed while the parent's own log names it (its spawn
        event); its own ``spawned_from`` link went with its events."""
        self._check_open()
        check_page_limit(limit)
        tk = tkey(thread_id, scope)
        start = tk + (tkey(after, scope) + b"\x00" if after is not None else b"")
        # One short scan per query: engine.scan (not read() + range()), whose generator
        # machinery cost more than the LMDB lookup itself (see benchmarks/links.py).
        rows = self.engine.scan("children", start, tk + b"\xff" * 17, limit=limit,
                                check=lambda txn: proj.require_live(txn, proj.LINKS, self.path))
        if not rows:
            self._require_known(thread_id, tk)
        dec = child_dec.decode
        return [dec(v)[0] for _, v in rows]

    def has_spawned(self, thread_id: str, *, scope: str | None = None) -> bool:
        """Whether the thread's events (a fork's inherited ones too) name a spawned thread: a
        ``children`` row of it with the spawn flag (what a fork of it would inherit)."""
        self._check_open()
        tk = tkey(thread_id, scope)
        rows = self.engine.scan("children", tk, tk + b"\xff" * 17,
                                check=lambda txn: proj.require_live(txn, proj.LINKS, self.path))
        dec = child_dec.decode
        return any(dec(v)[1] & CHILD_SPAWN for _, v in rows)

    def thread_events(self, thread_id: str, *, scope: str | None = None,
                      after: int = 0) -> tuple[ThreadHead, list[Any]]:
        """The head and the decoded events with seq > ``after``, in one snapshot; from
        seq 1 when the thread is not active or its version is below ``after`` (the
        caller's fold is then of another life of the id). ``NotFoundError`` if unknown."""
        self._check_open()
        tk = tkey(thread_id, scope)
        # engine.snapshot, not read(): a cold load of a short thread is one chunk row, and the
        # generator-based context managers cost more than reading it
        return self.engine.snapshot(lambda txn: self._events_of(txn, tk, thread_id, after))

    def _events_of(self, txn: ReadTxn, tk: bytes, thread_id: str, after: int) -> tuple[ThreadHead, list[Any]]:
        raw = txn.get("heads", tk)
        if raw is None:
            raise NotFoundError(f"thread {thread_id} does not exist")
        head = decode_head(raw)
        if head.status != "active" or after > head.version:
            after = 0
        name = head.thread_id
        codec = self.codec
        events: list[Any] = []
        for k, v in txn.range("events", event_key(tk, after + 1), tk + b"\xff" * 8):
            if v[:1] in chunks.CHUNK_BYTES:  # one decompression and one decode per section for the chunk's events
                more = chunks.chunk_events(codec, k, v, txn, name, after)
                if events:
                    events += more
                else:
                    events = more
            else:
                events.append(codec.decode_value(k, v, txn, where=(name, from_u64(k, TKEY_SIZE))))
        return head, events

    def items(self, thread_id: str, *, scope: str | None = None) -> list[Item]:
        """Headers; bodies only of the kinds an id-only fold reads (proj.BODY_KINDS) when
        the header has no ``turn`` facts (values written before format 3)."""
        self._check_open()
        tk = tkey(thread_id, scope)
        out: list[Item] = []
        with self.engine.read() as txn:
            if txn.get("heads", tk) is None:
                raise NotFoundError(f"thread {thread_id} does not exist")
            # chunk rows: each chunk's index section verified and decoded once, no message body read
            for k, v, chdr, body in chunks.index_rows(txn, self.codec, tk, tk + b"\xff" * 8, name=thread_id):
                seq = from_u64(k, TKEY_SIZE)
                where = (thread_id, seq)
                if v is None:
                    hdr: Header = chdr  # type: ignore[assignment]  # index_rows: a chunk event's header
                else:
                    self.codec.check_header(k, v, where=where)
                    hdr = self.codec.header(v, where=where)
                ev: Any = hdr.turn
                if ev is None and hdr.kind in proj.BODY_KINDS:
                    if v is None:  # verified with its chunk's index section
                        ev = self.codec.decode_event(body if body is not None else b"", where=where)
                    else:
                        self.codec.check(k, v, where=where)
                        ev = self.codec.decode_event(self.codec.body_bytes(v, txn, where=where), where=where)
                out.append(Item(seq, hdr.kind, hdr.facts, ev))
        return out

    def thread_state(self, thread_id: str, *, scope: str | None = None) -> ThreadState | None:
        self._check_open()
        tk = tkey(thread_id, scope)
        with self.engine.read() as txn:
            raw = txn.get("heads", tk)
            if raw is None:
                raise NotFoundError(f"thread {thread_id} does not exist")
            if decode_head(raw).fork_of is not None:
                return None  # a fork: the facade folds its state with its parent's prefix
            if proj.is_live(proj.read_info(txn, proj.STATE), proj.STATE):
                return proj.load_state(txn, tk)
        return None

    def links(self, thread_id: str, *, scope: str | None = None) -> list[Any]:
        """The thread's outgoing links: declared in its ThreadStarted, then added; only
        those two kinds of event are decoded."""
        self._check_open()
        tk = tkey(thread_id, scope)
        out: list[Any] = []
        codec = self.codec
        k_started, k_link = KIND_CODE[ThreadStarted], KIND_CODE[LinkAdded]
        with self.engine.read() as txn:
            if txn.get("heads", tk) is None:
                raise NotFoundError(f"thread {thread_id} does not exist")
            for k, v, chdr, body in chunks.index_rows(txn, self.codec, tk, tk + b"\xff" * 8, name=thread_id):
                seq = from_u64(k, TKEY_SIZE)
                where = (thread_id, seq)
                if v is None:  # a chunk's event: its header and (these kinds') body are in the index section
                    if chdr is not None and chdr.kind in (k_started, k_link):
                        ev = codec.decode_event(body if body is not None else b"", where=where)
                        out.extend(lk for _, lk in proj.outgoing(seq, ev))
                    continue
                codec.check_header(k, v, where=where)
                kind = codec.header(v, where=where).kind
                if kind in (k_started, k_link):
                    codec.check(k, v, where=where)
                    ev = codec.decode_event(codec.body_bytes(v, txn, where=where), where=where)
                    out.extend(lk for _, lk in proj.outgoing(seq, ev))
        return out

    def descendants(self, thread_id: str, *, scope: str | None = None,
                    max_depth: int | None = None) -> list[tuple[str, int]]:
        """Every thread spawned from ``thread_id``, transitively: ``(thread_id, depth)``,
        breadth-first; each thread once, so cycles end. ``max_depth`` limits the depth."""
        root = tkey(thread_id, scope)
        seen = {root}
        out: list[tuple[str, int]] = []
        # The walk goes by thread key: a ``children`` row's key is parent key + child key,
        # so a child's key is read off the row instead of being parsed again from its id.
        # Each node is one children() query (its own snapshot and projection check, as
        # before), done by the engine's short-scan path.
        frontier = list(seen)
        depth = 0
        scan = self.engine.scan
        dec = child_dec.decode
        path = self.path

        def live(txn: ReadTxn) -> None:
            proj.require_live(txn, proj.LINKS, path)

        while frontier and (max_depth is None or depth < max_depth):
            depth += 1
            nxt: list[bytes] = []
            for tk in frontier:
                self._check_open()
                rows = scan("children", tk, tk + b"\xff" * 17, check=live)
                if not rows and depth == 1:  # the root: is it known at all?
                    self._require_known(thread_id, root)
                for k, v in rows:
                    ck = k[TKEY_SIZE:]
                    if ck not in seen:
                        seen.add(ck)
                        out.append((dec(v)[0], depth))
                        nxt.append(ck)
            frontier = nxt
        return out
