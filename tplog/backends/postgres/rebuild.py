"""Rebuilding (or verifying) the PostgreSQL projections from the log.

A rebuild folds every stored event, log by log in position order, into fresh link,
children and state rows. Verifying reads the log and the live rows from one
REPEATABLE READ snapshot and takes no lock. Swapping the rows in happens under every
log's counter lock, after folding what committed since the snapshot: positions are
commit-ordered per log, so "position > the snapshot's" is exactly what it missed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

import msgspec
import psycopg

from tplog.backends.common import SPAWNED_FROM, VERSIONS, outgoing
from tplog.backends.contract import Inherited, RebuildReport
from tplog.backends.postgres.fold import Batch, index_inherited, index_links
from tplog.codec import facts_of
from tplog.events import KIND_CODE, RecordedEvent, ThreadDeleted
from tplog.projections.fold import ThreadState, feed, item_of


class Source(Protocol):
    """What a rebuild needs of the recorder (it does not import it: no import cycle)."""

    def _event(self, conn: psycopg.Connection[Any], thread_id: str, log: int, tk: bytes, seq: int, position: int,
               event_id: str, value: bytes) -> RecordedEvent: ...

    def _key(self, thread_id: str, scope: str | None,
             conn: psycopg.Connection[Any] | None = None) -> tuple[int, str, bytes]: ...

    def _inherited(self, conn: psycopg.Connection[Any], thread_id: str, scope: str | None) -> list[Inherited]: ...

__all__ = ["rebuild"]

_K_DELETED = KIND_CODE[ThreadDeleted]
_enc = msgspec.msgpack.Encoder()
_EMPTY = _enc.encode(ThreadState())


class _Fold:
    """Fresh projection rows, fed events in each log's position order."""

    def __init__(self, rec: Source) -> None:
        self.rec = rec
        self.b = Batch()
        self.states: dict[tuple[int, str, bytes], ThreadState] = {}
        self.done = 0

    def feed(self, conn: psycopg.Connection[Any], sql: str, params: Any, chunk: int,
             progress: Callable[[int], None] | None = None) -> None:
        with conn.cursor(name="tplog_rebuild", binary=True) as cur:
            cur.itersize = max(1, chunk)
            cur.execute(sql.encode(), params)
            for thread_id, log, scope, tk, seq, position, event_id, value in cur:
                tk = bytes(tk)
                ev = self.rec._event(conn, thread_id, log, tk, seq, position, event_id, value).event
                kind = KIND_CODE[type(ev)]
                self.done += 1
                if progress is not None and self.done % max(1, chunk) == 0:
                    progress(self.done)
                if kind == _K_DELETED:
                    self.forget(log, scope, tk)  # its events before the snapshot went with it
                    continue
                it = item_of(seq, kind, facts_of(ev), ev)
                key_of = lambda t, s: self.rec._key(t, s, conn)  # noqa: E731
                index_links(self.b, key_of, log, scope, tk, thread_id, seq, ev, it.facts)
                if seq == 1 and any(lk.relation == SPAWNED_FROM for _, lk in outgoing(seq, ev)):
                    # perhaps a fork's start (every fork declares its parent): the rows it inherits too
                    index_inherited(self.b, key_of, log, scope, tk, thread_id,
                                    self.rec._inherited(conn, thread_id, scope or None))
                feed(self.states.setdefault((log, scope, tk), ThreadState()), it)

    def drop_deleted_children(self, conn: psycopg.Connection[Any]) -> None:
        """Spawn facts naming a thread deleted since add no child row (as on every backend)."""
        gone = {(r[0], bytes(r[1])) for r in conn.execute("SELECT scope, tk FROM heads WHERE deleted").fetchall()}
        for key in [k for k in self.b.children if (k[1], k[3]) in gone]:
            del self.b.children[key]

    def forget(self, log: int, scope: str, tk: bytes) -> None:
        """What a deletion removes: the thread's link rows, its children flags, its state."""
        b = self.b
        b.links = [r for r in b.links if not (r[1] == scope and r[4] == tk)]
        for key in list(b.children):
            row = b.children[key]
            if key[1] == scope and key[3] == tk:  # a deleted thread is nobody's child
                row[1] = 0
            if key[:3] == (log, scope, tk):
                row[1] &= ~2
            if not row[1]:
                del b.children[key]
        self.states.pop((log, scope, tk), None)


_EVENTS = ("SELECT h.thread_id, e.log_id, e.scope, e.tk, e.seq, e.position, e.event_id, e.value FROM events e "
           "JOIN heads h ON h.log_id = e.log_id AND h.scope = e.scope AND h.tk = e.tk")


def rebuild(rec: Source, conn: psycopg.Connection[Any], names: list[str], *, verify: bool, chunk: int,
            progress: Callable[[int, int], None] | None) -> list[RebuildReport]:
    """Pass 1 folds the log from a REPEATABLE READ snapshot without locks (appends go on).
    Pass 2, under every log's counter lock (appends wait), folds what committed since and swaps
    the rows in: the only pause appends see is the catch-up and the swap."""
    t0 = time.monotonic()
    fold = _Fold(rec)
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        pos = [r[0] for r in conn.execute("SELECT position FROM logs ORDER BY log_id").fetchall()]
        total_row = conn.execute("SELECT count(*) FROM events").fetchone()
        total = int(total_row[0]) if total_row else 0
        fold.feed(conn, _EVENTS + " ORDER BY e.log_id, e.position", None, chunk,
                  None if progress is None else (lambda n: progress(n, total)))
        if verify:
            fold.drop_deleted_children(conn)
            reports = [RebuildReport(projection=n, verify=True, events=fold.done, seconds=time.monotonic() - t0,
                                     position=sum(pos), differences=_compare(conn, fold, n)) for n in names]
    if verify:
        if progress is not None:
            progress(fold.done, total)
        return reports
    with conn.transaction():
        # The lock order of an append (projection tables, then the counters): appends that hold
        # projection rows finish first, later ones wait; readers are not blocked.
        conn.execute("LOCK TABLE links, children, states IN EXCLUSIVE MODE")
        now = [r[0] for r in conn.execute("SELECT position FROM logs ORDER BY log_id FOR UPDATE").fetchall()]
        if now != pos:
            fold.feed(conn, _EVENTS + " JOIN unnest(%s::int[], %s::bigint[]) AS s(l, p) ON e.log_id = s.l "
                      "AND e.position > s.p ORDER BY e.log_id, e.position", (list(range(len(pos))), pos), chunk)
        fold.drop_deleted_children(conn)
        for n in names:
            _swap(conn, fold, n)
            conn.execute("INSERT INTO tracking VALUES (%s, 'live', %s) ON CONFLICT (name) DO UPDATE SET "
                         "status = 'live', version = EXCLUDED.version", (n, VERSIONS[n]))
    if progress is not None:
        progress(fold.done, max(total, fold.done))
    return [RebuildReport(projection=n, verify=False, events=fold.done, seconds=time.monotonic() - t0,
                          position=sum(now)) for n in names]


def _fresh_states(fold: _Fold) -> dict[tuple[int, str, bytes], bytes]:
    return {k: raw for k, st in fold.states.items() if (raw := _enc.encode(st)) != _EMPTY}


def _compare(conn: psycopg.Connection[Any], fold: _Fold, name: str) -> list[str]:
    if name == "links":
        live_links = sorted((r[0], r[1], bytes(r[2]), bytes(r[3]), bytes(r[4]), r[5], r[6]) for r in
                            conn.execute("SELECT * FROM links").fetchall())
        live_children = {(r[0], r[1], bytes(r[2]), bytes(r[3])): (r[4], r[5])
                         for r in conn.execute("SELECT * FROM children").fetchall()}
        children = {k: (v[0], v[1]) for k, v in fold.b.children.items()}
        if live_links != sorted(fold.b.links) or live_children != children:
            return ["links: the live index differs from a rebuild"]
        return []
    live_states = {(r[0], r[1], bytes(r[2])): bytes(r[3])
                   for r in conn.execute("SELECT * FROM states").fetchall() if bytes(r[3]) != _EMPTY}
    return [] if live_states == _fresh_states(fold) else ["state: the live rows differ from a rebuild"]


def _swap(conn: psycopg.Connection[Any], fold: _Fold, name: str) -> None:
    if name == "links":
        conn.execute("DELETE FROM links")
        conn.execute("DELETE FROM children")
        links = sorted(fold.b.links)
        if links:
            cols = [list(c) for c in zip(*links, strict=True)]
            conn.execute("INSERT INTO links SELECT * FROM unnest(%s::int[], %s::text[], %s::bytea[], %s::bytea[], "
                         "%s::bytea[], %s::bigint[], %s::text[])", cols)
        ck = sorted(fold.b.children)
        if ck:
            conn.execute("INSERT INTO children SELECT * FROM unnest(%s::int[], %s::text[], %s::bytea[], %s::bytea[], "
                         "%s::text[], %s::int[])",
                         ([k[0] for k in ck], [k[1] for k in ck], [k[2] for k in ck], [k[3] for k in ck],
                          [fold.b.children[k][0] for k in ck], [fold.b.children[k][1] for k in ck]))
        return
    conn.execute("DELETE FROM states")
    fresh = _fresh_states(fold)
    if fresh:
        sk = sorted(fresh)
        conn.execute("INSERT INTO states SELECT * FROM unnest(%s::int[], %s::text[], %s::bytea[], %s::bytea[])",
                     ([k[0] for k in sk], [k[1] for k in sk], [k[2] for k in sk], [fresh[k] for k in sk]))
