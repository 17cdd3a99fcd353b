"""The online rebuild of the LMDB projections (:mod:`tplog.backends.lmdb.projections`: their rows
and bookkeeping).

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
from collections.abc import Callable
from typing import Any, Final

import msgspec

from tplog.backends.common import LINKS, PROJECTIONS, STATE, VERSIONS, decode_head
from tplog.backends.contract import RebuildReport
from tplog.backends.lmdb.chunks import CHUNK_BYTES, EventRows, chunk_index
from tplog.backends.lmdb.compare import clear_shadow, describe, differences
from tplog.backends.lmdb.engine import ReadTxn, WriteTxn
from tplog.backends.lmdb.keys import TKEY_SIZE, from_u64, u64
from tplog.backends.lmdb.projections import (
    BODY_KINDS,
    ProjectionInfo,
    Tables,
    apply_links,
    inherited_rows,
    load_state,
    save_state,
    started_event,
    write_info,
)
from tplog.backends.lmdb.projrows import STATE_PREFIX
from tplog.backends.lmdb.projrows import enc as _enc
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
from tplog.errors import InvalidInputError, RebuildInProgressError
from tplog.events import (
    KIND_CODE,
    AgentRegistered,
    LinkAdded,
    ThreadDeleted,
    ThreadInfoChanged,
    ThreadStarted,
)
from tplog.projections.fold import Item, ThreadState, feed, step

__all__ = ["CATCH_UP", "CHUNK", "items_in", "rebuild", "scan_keys"]

_K_LINK = KIND_CODE[LinkAdded]
_K_STARTED = KIND_CODE[ThreadStarted]
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


def _started_body(codec: Codec, body: Any, where: tuple[str, int]) -> Any:
    """As :func:`started_event`, for a chunk's ThreadStarted body (verified with its chunk's index)."""
    raw = bytes(body) if body is not None else b""
    return codec.decode_event(raw, where=where) if b"relationships" in raw else None


def items_in(
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


def scan_keys(txn: ReadTxn, codec: Codec, after: bytes, limit: int, do_links: bool, do_state: bool,
               carry: tuple[bytes, ThreadState] | None) -> _Chunk:
    """Up to ``limit`` events of ``events`` after key ``after``, in key order (thread by
    thread, seq by seq), folded in one snapshot. ``carry`` is the state of the thread
    the previous chunk stopped inside. What is read is verified, and what no fold uses is
    skipped by its header's bytes, as in :func:`items_in`. A chunk row's index section is
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
                if kind in unread or (kind == MSG_KIND and hdr.facts is None):  # see items_in
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
        if peek(value) in skipped:  # see items_in
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
    tables = Tables(txn, shadow=True)
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
            found = scan_keys(rtxn, codec, after, chunk, do_links, do_state, carry)
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
        batch, scanned, read, last = items_in(txn, codec, cursor + 1, catch_up, covered, do_links, do_state)
        tables = Tables(txn, shadow=True)
        states: dict[bytes, ThreadState] = {}
        for _pos, thread_id, tk, it, scope in batch:
            if do_links and (it.kind in (_K_LINK, _K_STARTED) or (it.facts is not None and it.facts.spawned)):
                apply_links(tables, thread_id, tk, it.seq, it.event, it.facts.spawned if it.facts else (), scope)
                if it.kind == _K_STARTED and it.seq == 1:  # a fork's inherited rows (see scan_keys)
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
