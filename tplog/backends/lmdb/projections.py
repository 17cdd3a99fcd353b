"""Projections kept in the store, their bookkeeping, and the rebuild.

Two projections are materialized, both maintained in the append's own write
transaction (so, when live, they cover exactly the log's last position):

- ``links``: the incoming-link index (table ``links_in``), the children
  index (table ``children``) and, per child named by a parent's spawn event,
  that parent (``proj`` rows ``b"spawner\\x00" + child key + parent key``, so
  deleting the child removes it from its parents' children). Every link a
  thread carries is indexed: those declared in ``ThreadStarted.relationships``
  and ``LinkAdded`` events; deleted threads contribute nothing, and a deleted
  thread is nobody's child;
- ``state``: per thread, the id-only fold state (:class:`~tplog.projections.fold.ThreadState`:
  pending tool calls, interrupt facts) in table ``proj`` under
  ``b"state\\x00" + thread key``.

Bookkeeping: table ``meta`` holds ``b"proj:" + name`` → msgpack
``[version, position, status]``. ``version`` is the fold code's version
(:data:`VERSIONS`); ``status`` is ``"live"`` (maintained by every append;
covers the whole log) or ``"stale"`` (the fold code changed, or the store
predates the projection: appends do not maintain it and it must be rebuilt;
``position`` says how far it was built). A stale ``state`` projection is
answered by folding the thread's headers on demand (correct, slower); a stale
``links`` projection raises :class:`RebuildRequiredError` naming the command.

Rebuild (:func:`rebuild`, ``tplog rebuild``) writes *shadow* rows (``proj``
keys prefixed ``~``), so live readers keep their answers meanwhile and appends
keep maintaining the live rows. Pass 1 reads the ``events`` table in key order
(thread by thread, no index lookups) in chunks, each in its own read snapshot,
noting each chunk's last key and its snapshot's log position. Pass 2 catches up
on the global log from the first snapshot's position, in write transactions,
folding only the events no chunk's snapshot held (a thread deleted after pass 1
folded it loses its link rows). The step that reaches the end of the log swaps
shadow → live (or, with ``verify=True``, compares them and reports every
difference) in that same transaction, while no append can interleave: no update
is lost or applied twice (the comparison: :mod:`tplog.backends.lmdb.compare`; the rows'
layout: :mod:`tplog.backends.lmdb.projrows`). Memory is one chunk's worth, whatever the log's size.
One rebuild of a projection runs at a time: it holds the engine's lock
``rebuild-<name>`` (see :meth:`~tplog.backends.lmdb.engine.LmdbEngine.try_lock`) for as long as it runs and claims
the projection in ``meta``; the claim of a rebuild that died is taken over.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import time
from collections.abc import Callable, Iterable
from typing import Any, Final

import msgspec

from tplog.backends.common import CHILD_LINK, CHILD_SPAWN, SPAWNED_FROM, child_spelling, decode_head
from tplog.backends.common import DECLARED as DECLARED
from tplog.backends.common import LINKS as LINKS
from tplog.backends.common import PROJECTIONS as PROJECTIONS
from tplog.backends.common import STATE as STATE
from tplog.backends.common import VERSIONS as VERSIONS
from tplog.backends.common import outgoing as outgoing
from tplog.backends.contract import RebuildReport as RebuildReport
from tplog.backends.lmdb.chunks import CHUNK_BYTES, EventRows, chunk_index, index_rows
from tplog.backends.lmdb.compare import clear_shadow, describe, differences
from tplog.backends.lmdb.engine import ReadTxn, WriteTxn
from tplog.backends.lmdb.keys import TKEY_SIZE, from_u64, tkey, u64
from tplog.backends.lmdb.projrows import SPAWNER_PREFIX as SPAWNER_PREFIX
from tplog.backends.lmdb.projrows import STATE_PREFIX as STATE_PREFIX
from tplog.backends.lmdb.projrows import child_dec as _child_dec
from tplog.backends.lmdb.projrows import enc as _enc
from tplog.backends.lmdb.projrows import thread_deleted as _deleted
from tplog.codec import (
    MSG_KIND,
    PEEK_FACTS,
    PREFIX_SIZE,
    Codec,
    Header,
    header_end,
    peek_header,
    verified_header_end,
)
from tplog.errors import InvalidInputError, RebuildInProgressError, RebuildRequiredError
from tplog.events import (
    KIND_CODE,
    AgentRegistered,
    AgentTurnCompleted,
    AgentTurnInterrupted,
    AgentTurnStarted,
    LinkAdded,
    ThreadDeleted,
    ThreadInfoChanged,
    ThreadStarted,
)
from tplog.projections.fold import Item, ThreadState, feed, step

__all__ = ["PROJECTIONS", "VERSIONS", "ProjectionInfo", "RebuildReport", "rebuild"]


_K_LINK = KIND_CODE[LinkAdded]
_K_STARTED = KIND_CODE[ThreadStarted]
#: The kinds whose body an id-only fold reads: links, and agent turn boundaries
#: written before format 3 (whose headers carry no ``turn`` facts); every other
#: event is folded from its header alone.
BODY_KINDS: Final = frozenset(KIND_CODE[c] for c in (AgentTurnStarted, AgentTurnCompleted, AgentTurnInterrupted,
                                                     LinkAdded))
_K_DELETED = KIND_CODE[ThreadDeleted]
#: The kinds no id-only fold reads (links come from LinkAdded events, spawn facts and the
#: ThreadStarted's declared links): a rebuild passes over them by their header's kind byte.
UNREAD_KINDS: Final = frozenset(KIND_CODE[c] for c in (ThreadStarted, AgentRegistered, ThreadInfoChanged))
#: As UNREAD_KINDS, when the links projection is folded (it reads ThreadStarted bodies).
UNREAD_FOR_LINKS: Final = UNREAD_KINDS - {_K_STARTED}
#: :func:`peek_header` answers for events no id-only fold reads: the kinds above,
#: with or without facts, and messages without facts (``_FOR_LINKS``: when links are folded).
SKIPPED: Final = frozenset(UNREAD_KINDS | {k | PEEK_FACTS for k in UNREAD_KINDS} | {MSG_KIND})
SKIPPED_FOR_LINKS: Final = frozenset(UNREAD_FOR_LINKS | {k | PEEK_FACTS for k in UNREAD_FOR_LINKS} | {MSG_KIND})
#: Events a rebuild folds per read snapshot and per write transaction: each chunk
#: costs one durable commit, and bounds the rebuild's memory and an append's wait.
CHUNK: Final = 20_000
#: Log positions per catch-up step (pass 2), each inside the writer's transaction.
CATCH_UP: Final = 5_000

_state_dec = msgspec.msgpack.Decoder(ThreadState)


class ProjectionInfo(msgspec.Struct, array_like=True):
    version: int
    position: int
    status: str  # "live" | "stale"


_info_dec = msgspec.msgpack.Decoder(ProjectionInfo)


def meta_key(name: str) -> bytes:
    return b"proj:" + name.encode()


def read_info(txn: ReadTxn, name: str) -> ProjectionInfo | None:
    raw = txn.get("meta", meta_key(name))
    return _info_dec.decode(raw) if raw is not None else None


def write_info(txn: WriteTxn, name: str, info: ProjectionInfo) -> None:
    txn.put("meta", meta_key(name), _enc.encode(info))


def is_live(info: ProjectionInfo | None, name: str) -> bool:
    return info is not None and info.status == "live" and info.version == VERSIONS[name]


def init_infos(txn: WriteTxn, log_empty: bool) -> None:
    """On open: new stores start every projection live; older ones are marked stale."""
    for name, version in VERSIONS.items():
        info = read_info(txn, name)
        if info is None:
            write_info(txn, name, ProjectionInfo(version, 0, "live" if log_empty else "stale"))
        elif info.version != version and info.status == "live":
            write_info(txn, name, ProjectionInfo(info.version, info.position, "stale"))


def require_live(txn: ReadTxn, name: str, path: str) -> None:
    info = read_info(txn, name)
    if not is_live(info, name):
        have = "missing" if info is None else f"version {info.version}, {info.status}"
        raise RebuildRequiredError(
            f"{path}: the {name!r} projection is not current ({have}; this tplog folds version "
            f"{VERSIONS[name]}); run `tplog rebuild {path} --projection {name}`"
        )


# --------------------------------------------------------------------------- table access (live or shadow)


class _Tables:
    """Where a projection's rows go: the live tables, or shadow rows in ``proj``."""

    __slots__ = ("shadow", "txn")

    def __init__(self, txn: WriteTxn, shadow: bool) -> None:
        self.txn = txn
        self.shadow = shadow

    def _where(self, table: str, key: bytes) -> tuple[str, bytes]:
        return ("proj", b"~" + table.encode() + b"\x00" + key) if self.shadow else (table, key)

    def get(self, table: str, key: bytes) -> bytes | None:
        return self.txn.get(*self._where(table, key))

    def put(self, table: str, key: bytes, value: bytes) -> None:
        t, k = self._where(table, key)
        self.txn.put(t, k, value)

    def delete(self, table: str, key: bytes) -> None:
        t, k = self._where(table, key)
        self.txn.delete(t, k)


def link_key(target: str, relation: str, source_tk: bytes, ordinal: int, scope: str | None = None) -> bytes:
    """``links_in`` key; ``ordinal``: the LinkAdded's seq, or ``DECLARED | i`` (see :data:`DECLARED`)."""
    return tkey(target, scope) + relation.encode() + b"\x00" + source_tk + u64(ordinal)


def _started_body(codec: Codec, body: Any, where: tuple[str, int]) -> Any:
    """As :func:`started_event`, for a chunk's ThreadStarted body (verified with its chunk's index)."""
    raw = bytes(body) if body is not None else b""
    return codec.decode_event(raw, where=where) if b"relationships" in raw else None


def started_event(codec: Codec, txn: ReadTxn, key: bytes, value: bytes, where: tuple[str, int]) -> Any:
    """A stored ThreadStarted, verified and decoded if its body may declare links (the
    body names ``relationships``), else ``None``: most threads declare none."""
    codec.check(key, value, where=where)
    body = bytes(codec.body_bytes(value, txn, where=where))
    return codec.decode_event(body, where=where) if b"relationships" in body else None


def apply_links(tables: _Tables, thread_id: str, tk: bytes, seq: int, event: Any, spawned: Iterable[str],
                scope: str | None = None) -> None:
    """Index one event: a LinkAdded, a ThreadStarted declaring links, or a message
    naming spawned threads (unless that thread was deleted: it is nobody's child).
    Idempotent. Targets are keyed within the source thread's scope."""
    for ordinal, lk in outgoing(seq, event) if isinstance(event, (LinkAdded, ThreadStarted)) else ():
        target = lk.thread_id
        tables.put("links_in", link_key(target, lk.relation, tk, ordinal, scope), _enc.encode([thread_id, target]))
        if lk.relation == SPAWNED_FROM:
            _set_child(tables, tkey(target, scope), tk, thread_id, CHILD_LINK)
    for child in spawned:
        ck = tkey(child, scope)
        if not _deleted(tables.txn, ck):
            _set_child(tables, tk, ck, child, CHILD_SPAWN)


def inherited_rows(txn: ReadTxn, codec: Codec, tk: bytes) -> list[tuple[int, Any, tuple[str, ...]]]:
    """What a live fork's prefix indexes under the fork (:func:`tplog.backends.common.inherited`),
    read from its parent's rows (and theirs, for a fork of a fork) in ``txn``: the rebuild's and
    the deletion's view of what the fork's append indexed. ``[]`` for any other thread."""
    raw = txn.get("heads", tk)
    head = decode_head(raw) if raw is not None else None
    if head is None or head.fork_of is None or head.status != "active":
        return []
    out: list[tuple[int, Any, tuple[str, ...]]] = []
    _prefix_rows(txn, codec, head.fork_of, head.scope, 2, head.fork_at, out)
    return out


def _prefix_rows(txn: ReadTxn, codec: Codec, thread_id: str, scope: str | None, lo: int, hi: int,
                 out: list[tuple[int, Any, tuple[str, ...]]]) -> None:
    """The link-index inputs of ``thread_id``'s seqs ``lo``..``hi`` (a fork's through its parent)."""
    tk = tkey(thread_id, scope)
    raw = txn.get("heads", tk)
    if raw is None or lo > hi:
        return
    head = decode_head(raw)
    if head.fork_of is not None and head.status == "active":
        if lo <= head.fork_at:
            _prefix_rows(txn, codec, head.fork_of, scope, lo, min(hi, head.fork_at), out)
        lo = max(lo, head.fork_at + 1)
    for key, value, chdr, body in index_rows(txn, codec, tk + u64(lo), tk + u64(hi + 1), name=thread_id):
        seq = from_u64(key, TKEY_SIZE)
        if value is None:  # a chunk's event: header and LinkAdded body verified with its index section
            hdr: Header = chdr  # type: ignore[assignment]
        else:
            codec.check_header(key, value, where=(thread_id, seq))
            hdr = codec.header(value, where=(thread_id, seq))
        spawned = tuple(hdr.facts.spawned) if hdr.facts is not None and hdr.facts.spawned else ()
        if hdr.kind == _K_LINK:
            if value is None:
                ev = codec.decode_event(body if body is not None else b"", where=(thread_id, seq))
            else:
                codec.check(key, value, where=(thread_id, seq))
                ev = codec.decode_event(codec.body_bytes(value, txn, where=(thread_id, seq)), where=(thread_id, seq))
            out.append((seq, ev, spawned))
        elif spawned:
            out.append((seq, None, spawned))


def unapply_links(tables: _Tables, thread_id: str, tk: bytes, seq: int, event: Any, spawned: Iterable[str],
                  scope: str | None = None) -> None:
    """Remove what :func:`apply_links` added for one event (thread deletion)."""
    for ordinal, lk in outgoing(seq, event):
        target = lk.thread_id
        tables.delete("links_in", link_key(target, lk.relation, tk, ordinal, scope))
        if lk.relation == SPAWNED_FROM:
            _drop_child(tables, tkey(target, scope), tk, CHILD_LINK)
    for child in spawned:
        _drop_child(tables, tk, tkey(child, scope), CHILD_SPAWN)


def drop_child_everywhere(txn: WriteTxn, child_tk: bytes) -> None:
    """A thread being deleted is nobody's child any more: remove the ``children`` rows
    of the parents whose spawn events name it (found by its ``spawner`` rows). Its
    own ``spawned_from`` links go with its events (:func:`unapply_links`)."""
    prefix = SPAWNER_PREFIX + child_tk
    keys = [bytes(k) for k, _ in txn.range("proj", prefix, prefix + b"\xff" * (TKEY_SIZE + 1))]
    for k in keys:
        txn.delete("children", k[len(SPAWNER_PREFIX) + TKEY_SIZE:] + child_tk)
        txn.delete("proj", k)


def _set_child(tables: _Tables, parent_tk: bytes, child_tk: bytes, child_id: str, flag: int) -> None:
    key = parent_tk + child_tk
    old = tables.get("children", key)
    flags = flag
    if old is not None:
        was, had = _child_dec.decode(old)
        child_id, flags = child_spelling(was, had, child_id, flag), had | flag
    tables.put("children", key, _enc.encode((child_id, flags)))
    if flag == CHILD_SPAWN:
        tables.put("proj", SPAWNER_PREFIX + child_tk + parent_tk, b"")


def _drop_child(tables: _Tables, parent_tk: bytes, child_tk: bytes, flag: int) -> None:
    key = parent_tk + child_tk
    if flag == CHILD_SPAWN:
        tables.delete("proj", SPAWNER_PREFIX + child_tk + parent_tk)
    old = tables.get("children", key)
    if old is None:
        return
    child, flags = _child_dec.decode(old)
    flags &= ~flag
    if flags:
        tables.put("children", key, _enc.encode((child, flags)))
    else:
        tables.delete("children", key)


def decode_state(raw: bytes | None) -> ThreadState:
    return _state_dec.decode(raw) if raw is not None else ThreadState()


def encode_state(st: ThreadState) -> bytes:
    return _enc.encode(st)


def load_state(tables: _Tables | ReadTxn, tk: bytes) -> ThreadState:
    return decode_state(tables.get("proj", STATE_PREFIX + tk))


def save_state(tables: _Tables, tk: bytes, st: ThreadState) -> None:
    tables.put("proj", STATE_PREFIX + tk, encode_state(st))


# --------------------------------------------------------------------------- rebuild


def _items_in(
    txn: WriteTxn, codec: Codec, start: int, limit: int, covered: Callable[[bytes, int], bool] | None = None,
    do_links: bool = True, do_state: bool = False,
) -> tuple[list[tuple[int, str, bytes, Item, str | None]], int, int, int]:
    """Up to ``limit`` log entries from position ``start``, as (position, thread id,
    thread key, item, scope); how many entries were scanned, how many of them were
    read (not covered) and the last position scanned. Entries for which ``covered(event key, position)`` is true
    were folded already (by the key-order scan) and are passed over unread.
    What is read is verified (the header's CRC; the body's when it is read); an event of
    the ``UNREAD_KINDS``, or a message whose header has no facts (no tool calls or returns,
    no spawned thread, not an aborted response: nothing any id-only fold uses), is
    recognised from the header's bytes and skipped without decoding. With ``do_links``
    a ThreadStarted that may declare links is read (see :func:`started_event`); with ``do_state``
    every ThreadStarted is passed on, so that its thread gets its state row (as the key-order scan
    gives every thread one) even when no other event of it is read."""
    out: list[tuple[int, str, bytes, Item, str | None]] = []
    names: dict[bytes, tuple[str, str | None]] = {}
    scanned = read = 0
    last = start - 1
    check, check_header, header = codec.check, codec.check_header, codec.header
    skipped = SKIPPED_FOR_LINKS if do_links or do_state else SKIPPED
    rows = EventRows(txn, codec)
    for pk, key in txn.range("global", u64(start)):
        if scanned >= limit:
            break
        scanned += 1
        last = from_u64(pk)
        if covered is not None and covered(key, last):
            continue
        read += 1
        value = rows.get(key)
        if value is None:  # pragma: no cover - the index and the events change together
            continue
        tk = key[:TKEY_SIZE]
        seq = from_u64(key, TKEY_SIZE)
        known = names.get(tk)
        if known is None:
            raw = txn.get("heads", tk)
            head = decode_head(raw) if raw is not None else None
            known = names[tk] = (head.thread_id, head.scope) if head is not None else (tk.hex(), None)
        name, scope = known
        where = (name, seq)
        check_header(key, value, where=where)
        if peek_header(value) in skipped:  # nothing an id-only fold reads
            continue
        hdr: Header = header(value, where=where)
        if hdr.kind == _K_STARTED:
            started = started_event(codec, txn, key, value, where) if do_links else None
            if started is not None or do_state:
                out.append((last, name, tk, Item(seq, hdr.kind, None, started), scope))
            continue
        ev: Any = hdr.turn
        if ev is None and hdr.kind in BODY_KINDS:
            check(key, value, where=where)  # the body is read: verify it too
            ev = codec.decode_event(codec.body_bytes(value, txn, where=where), where=where)
        out.append((last, name, tk, Item(seq, hdr.kind, hdr.facts, ev), scope))
    return out, scanned, read, last


class _Chunk(msgspec.Struct, gc=False):
    """What one key-order chunk found, to be written to the shadow rows."""

    states: dict[bytes, ThreadState]  # thread key -> state after the chunk's events
    links: list[tuple[str, bytes, int, Any, Any, str | None]]  # apply_links arguments
    dropped: list[bytes]  # threads deleted since the chunk before folded their first events
    last_key: bytes  # the last event key scanned (b"" if none)
    position: int  # the snapshot's last global position
    events: int
    done: bool  # the scan reached the end of ``events``


def _scan_keys(txn: ReadTxn, codec: Codec, after: bytes, limit: int, do_links: bool, do_state: bool,
               carry: tuple[bytes, ThreadState] | None) -> _Chunk:
    """Up to ``limit`` events of ``events`` after key ``after``, in key order (thread by
    thread, seq by seq), folded in one snapshot. ``carry`` is the state of the thread
    the previous chunk stopped inside. What is read is verified, and what no fold uses is
    skipped by its header's bytes, as in :func:`_items_in`. A chunk row's index section is
    verified and decoded once (:func:`chunks.chunk_index`), its events skipped by their
    decoded header's kind and facts; no message body is read."""
    end = txn.last("global")
    chunk = _Chunk(states={}, links=[], dropped=[], last_key=after, position=from_u64(end[0]) if end else 0,
                   events=0, done=True)
    states, links = chunk.states, chunk.links
    check, check_header, header = codec.check, codec.check_header, codec.header
    body_bytes, decode_event = codec.body_bytes, codec.decode_event
    header_decode = codec.header_decoder.decode
    verified_end, peek = verified_header_end, peek_header
    skipped = SKIPPED_FOR_LINKS if do_links else SKIPPED
    unread = UNREAD_FOR_LINKS if do_links else UNREAD_KINDS
    st = ThreadState()
    name: str = ""
    scope: str | None = None

    def fold(key: bytes, tk: bytes, seq: int, hdr: Header, value: bytes | None, body: Any) -> None:
        """One event no skip rule passed over: ``value`` a single row's (``key`` its key), else
        ``body`` a chunk's (verified with the chunk's index section)."""
        kind = hdr.kind
        if kind == _K_STARTED:  # read only for the links it may declare
            started = None
            if do_links:
                started = (started_event(codec, txn, key, value, (name, seq)) if value is not None
                           else _started_body(codec, body, (name, seq)))
            if started is not None:
                links.append((name, tk, seq, started, (), scope))
                if seq == 1:  # a fork's: the rows it inherits from its parent's prefix too
                    links.extend((name, tk, sq, ev, sp, scope) for sq, ev, sp in inherited_rows(txn, codec, tk))
            return
        if kind == _K_DELETED:  # deleted before this snapshot: nothing of it is left to fold ...
            states.pop(tk, None)
            # ... but the chunk before folded its first events (if it stopped inside this thread;
            # not ``carry``, which is set only when the state projection is rebuilt too)
            if after[:TKEY_SIZE] == tk:
                chunk.dropped.append(tk)
            return
        facts = hdr.facts
        ev: Any = hdr.turn
        if ev is None and kind in BODY_KINDS:
            if value is None:  # a chunk's: verified with its index section
                ev = decode_event(body if body is not None else b"", where=(name, seq))
            else:
                check(key, value, where=(name, seq))  # the body is read: verify it too
                ev = decode_event(body_bytes(value, txn, where=(name, seq)), where=(name, seq))
            if do_links and kind == _K_LINK:
                links.append((name, tk, seq, ev, facts.spawned if facts is not None else (), scope))
        elif do_links and facts is not None and facts.spawned:
            links.append((name, tk, seq, ev, facts.spawned, scope))
        if do_state:
            step(st, seq, kind, facts, ev)

    current = key = b""
    n = 0
    more = False
    # The loop runs once per row, and once per event of a chunk row: the header decode and
    # the skip rules are inlined (on a mismatch, codec.check_header / codec.header raise).
    for k, value in txn.range("events", after + b"\x00" if after else b""):
        if n >= limit:
            more = True
            break
        tk = k[:TKEY_SIZE]
        if tk != current:
            current = tk
            raw = txn.get("heads", tk)
            head = decode_head(raw) if raw is not None else None
            name, scope = (head.thread_id, head.scope) if head is not None else (tk.hex(), None)
            st = carry[1] if carry is not None and carry[0] == tk else ThreadState()
            if do_state:
                states[tk] = st
        if value[:1] in CHUNK_BYTES:
            first, headers, bodies = chunk_index(codec, k, value, txn, name)
            lo = from_u64(after, TKEY_SIZE) - first + 1 if after[:TKEY_SIZE] == tk else 0
            lo = max(lo, 0)  # the events up to ``after`` were folded by the chunk before
            hi = min(len(headers), lo + limit - n)
            for i in range(lo, hi):
                hdr = headers[i]
                kind = hdr.kind
                if kind in unread or (kind == MSG_KIND and hdr.facts is None):  # see _items_in
                    continue
                fold(tk, tk, first + i, hdr, None, bodies[i])  # (a chunk's event needs no key of its own)
            if hi > lo:
                n += hi - lo
                key = tk + u64(first + hi - 1)
            if hi < len(headers):
                more = True
                break
            continue
        n += 1
        key = k
        hend = verified_end(k, value)
        if not hend:  # an older format (the method checks it) or damage (the method raises)
            check_header(k, value, where=(name, from_u64(k, TKEY_SIZE)))
            hend = header_end(value)
        if peek(value) in skipped:  # see _items_in
            continue
        seq = int.from_bytes(k[TKEY_SIZE:], "big")
        try:
            hdr = header_decode(value[PREFIX_SIZE:hend])
        except (msgspec.DecodeError, UnicodeDecodeError, TypeError):  # TypeError: see Codec.decode_event
            hdr = header(value, where=(name, seq))
        fold(k, tk, seq, hdr, value, None)
    chunk.last_key = key or after
    chunk.events = n
    chunk.done = not more
    return chunk


def _write_chunk(txn: WriteTxn, found: _Chunk, names: list[str], token: bytes) -> None:
    """A key-order chunk's fold results into the shadow rows (if this rebuild still holds them)."""
    _check_claim(txn, names, token)
    tables = _Tables(txn, shadow=True)
    for thread_id, tk, seq, ev, spawned, scope in found.links:
        apply_links(tables, thread_id, tk, seq, ev, spawned, scope)
    for tk, st in found.states.items():
        save_state(tables, tk, st)
    for tk in found.dropped:
        tables.delete("proj", STATE_PREFIX + tk)


_marker_dec = msgspec.msgpack.Decoder(tuple[int, bytes, int])


def _marker_key(name: str) -> bytes:
    return b"rebuild:" + name.encode()


def _lock_name(name: str) -> str:
    return "rebuild-" + name


def _in_progress(engine: Any, name: str) -> RebuildInProgressError:
    """The error for a rebuild of ``name`` that another one (whose lock is held) runs."""
    with engine.read() as txn:
        raw = txn.get("meta", _marker_key(name))
    if raw is None:  # between its lock and its claim, or between its swap and its unlock
        who = "another process or thread is starting or finishing one"
    else:
        pid, _token, since = _marker_dec.decode(raw)
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since / 1e9))
        who = f"process {pid}, started {started}"
    return RebuildInProgressError(
        f"a rebuild of projection {name!r} is already running ({who}); wait for it to finish (two rebuilds "
        "would fold the same events into the same shadow rows), or, if it is stuck, take its claim over with "
        "--force (it then stops without swapping anything in)"
    )


def _claim(txn: WriteTxn, names: list[str], token: bytes) -> None:
    """Mark projections ``names`` as being rebuilt by this rebuild (``meta`` key
    ``rebuild:<name>`` = msgpack [pid, token, started ns]) and clear their shadow rows.
    The caller holds each one's lock (or was told to ``force``): a marker found here
    is then one a dead rebuild left, or one being taken over."""
    for name in names:
        txn.put("meta", _marker_key(name), _enc.encode((os.getpid(), token, time.time_ns())))
        clear_shadow(txn, name)


def _check_claim(txn: WriteTxn, names: list[str], token: bytes) -> None:
    """Raise if another rebuild took one of ``names`` over (it found this process gone
    or its marker removed): this rebuild must stop writing and must not swap."""
    for name in names:
        raw = txn.get("meta", _marker_key(name))
        if raw is None or _marker_dec.decode(raw)[1] != token:
            raise RebuildInProgressError(
                f"another rebuild of projection {name!r} took this one over; nothing of this one was swapped in"
            )


def rebuild(
    engine: Any,
    codec: Codec,
    names: str | list[str],
    *,
    verify: bool = False,
    chunk: int = CHUNK,
    progress: Callable[[int, int], None] | None = None,
    force: bool = False,
) -> list[RebuildReport]:
    """Rebuild projections ``names`` from the log (see module doc); safe while others
    append and delete. ``progress(done, total)`` is called after each chunk, in events:
    those folded so far, and that plus what is left (the events table's entries during
    the key-order pass, then the log positions not yet caught up on).
    """
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise InvalidInputError(f"chunk must be a positive number of events, not {chunk!r}")
    names = [names] if isinstance(names, str) else list(names)
    for name in names:
        if name not in VERSIONS:
            raise InvalidInputError(f"unknown projection {name!r}; expected one of {list(PROJECTIONS)}")
    token = os.urandom(16)
    # Whether another rebuild runs is its lock's business (the kernel drops it when
    # that process dies, however it dies), never a process id: ids are reused, and
    # differ between containers sharing the store's directory.
    held: list[Any] = []
    try:
        for name in names:
            lock = engine.try_lock(_lock_name(name))
            if lock is None and not force:
                raise _in_progress(engine, name)
            if lock is not None:
                held.append(lock)
    except BaseException:
        for lock in held:
            lock.release()
        raise
    try:
        return _rebuild(engine, codec, names, verify, chunk, progress, token)
    except BaseException:
        def release(txn: WriteTxn) -> None:  # so that the next rebuild need not find this one gone
            for name in names:
                raw = txn.get("meta", _marker_key(name))
                if raw is not None and _marker_dec.decode(raw)[1] == token:
                    txn.delete("meta", _marker_key(name))

        with contextlib.suppress(Exception):  # e.g. the disk is full: the marker is taken over later
            engine.run_write(release)
        raise
    finally:
        for lock in held:
            lock.release()


def _rebuild(engine: Any, codec: Codec, names: list[str], verify: bool, chunk: int,
             progress: Callable[[int, int], None] | None, token: bytes) -> list[RebuildReport]:
    t0 = time.perf_counter()
    engine.run_write(lambda txn: _claim(txn, names, token))
    do_links, do_state = LINKS in names, STATE in names
    events = 0
    deleted: set[bytes] = set()

    # 1. The events table in key order, each chunk in a snapshot of its own. Chunk i
    # folds every event with a key in (last_keys[i-1], last_keys[i]] that its snapshot
    # (log position positions[i]) holds; the last chunk's range is open-ended.
    last_keys: list[bytes] = []
    positions: list[int] = []
    total = int(engine.info()["tables"]["global"]["entries"]) if progress is not None else 0
    after = b""
    carry: tuple[bytes, ThreadState] | None = None
    while True:
        with engine.read() as rtxn:
            found = _scan_keys(rtxn, codec, after, chunk, do_links, do_state, carry)
        engine.run_write(lambda txn, found=found: _write_chunk(txn, found, names, token))
        events += found.events
        deleted.update(found.dropped)
        last_keys.append(found.last_key)
        positions.append(found.position)
        if progress is not None:
            progress(events, max(total, events))
        if found.done:
            break
        after = found.last_key
        tk = after[:TKEY_SIZE]
        carry = (tk, found.states[tk]) if tk in found.states else None
        found = None  # type: ignore[assignment]  # one chunk in memory at a time
    last_keys.pop()  # the last chunk covers every key after the one before it

    def covered(key: bytes, position: int) -> bool:
        return position <= positions[bisect.bisect_left(last_keys, key)]

    # 2. Catch up: the global log from the first snapshot's position, folding what no
    # chunk's snapshot held, chunk by chunk, each in one write transaction. The chunk
    # that reaches the end of the log swaps shadow -> live (or, with ``verify``,
    # compares them) in that same transaction, while no append can interleave.
    cursor = positions[0]
    reports: list[RebuildReport] | None = None
    catch_up = min(chunk, CATCH_UP)  # these steps hold the writer's lock: appends wait behind them

    def catch_up_step(txn: WriteTxn) -> tuple[int, int, list[RebuildReport] | None]:
        _check_claim(txn, names, token)
        batch, scanned, read, last = _items_in(txn, codec, cursor + 1, catch_up, covered, do_links, do_state)
        tables = _Tables(txn, shadow=True)
        states: dict[bytes, ThreadState] = {}
        for _pos, thread_id, tk, it, scope in batch:
            if do_links and (it.kind in (_K_LINK, _K_STARTED) or (it.facts is not None and it.facts.spawned)):
                apply_links(tables, thread_id, tk, it.seq, it.event, it.facts.spawned if it.facts else (), scope)
                if it.kind == _K_STARTED and it.seq == 1:  # a fork's inherited rows (see _scan_keys)
                    for sq, ev, sp in inherited_rows(txn, codec, tk):
                        apply_links(tables, thread_id, tk, sq, ev, sp, scope)
            if it.kind == _K_DELETED:
                deleted.add(tk)
                if do_state:
                    states.pop(tk, None)
                    tables.delete("proj", STATE_PREFIX + tk)
                continue
            if do_state:
                st = states.get(tk)
                if st is None:
                    st = states[tk] = load_state(tables, tk)
                feed(st, it)
        for tk, st in states.items():
            save_state(tables, tk, st)
        if scanned >= catch_up:
            return last, read, None
        # The end of the log, inside the writer's transaction: finish here.
        out: list[RebuildReport] = []
        for name in names:
            found = differences(txn, name, deleted if name == LINKS else set())
            diffs: list[str] = []
            if verify:
                diffs = [describe(name, table, key, live, fresh) for table, key, live, fresh in found]
            else:
                for table, key, _live, fresh in found:
                    if fresh is None:
                        txn.delete(table, key)
                    else:
                        txn.put(table, key, fresh)
                end = txn.last("global")
                write_info(txn, name, ProjectionInfo(VERSIONS[name], from_u64(end[0]) if end else 0, "live"))
            clear_shadow(txn, name)
            txn.delete("meta", _marker_key(name))
            out.append(RebuildReport(projection=name, verify=verify, events=0, seconds=0.0, position=last,
                                     differences=diffs))
        return last, read, out

    while reports is None:
        cursor, n, reports = engine.run_write(catch_up_step)
        events += n
        if progress is not None:  # in events too: those done, plus the log positions still to catch up on
            with engine.read() as txn:
                end = txn.last("global")
            todo = max(0, (from_u64(end[0]) if end else 0) - cursor) if reports is None else 0
            progress(events, events + todo)
    seconds = time.perf_counter() - t0
    for r in reports:
        r.events = events
        r.seconds = seconds
    return reports
