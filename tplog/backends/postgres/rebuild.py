"""Rebuilding (or verifying) the PostgreSQL projections from the log.

A rebuild folds every stored event, log by log in position order, into fresh link,
children and state rows. Verifying reads the log and the live rows from one
REPEATABLE READ snapshot and takes no lock. Swapping the rows in locks every log's
counter row first, so appends wait until the new rows commit and none is missed;
appends are therefore paused for the rebuild's duration (not online yet).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec
import psycopg

from tplog._events import KIND_CODE, ThreadDeleted
from tplog._fold import ThreadState, feed
from tplog.backends.memory import VERSIONS

if TYPE_CHECKING:
    from tplog.backends.postgres.recorder import PostgresRecorder

__all__ = ["rebuild"]

_K_DELETED = KIND_CODE[ThreadDeleted]
_enc = msgspec.msgpack.Encoder()
_EMPTY = _enc.encode(ThreadState())


def rebuild(rec: PostgresRecorder, conn: psycopg.Connection[Any], names: list[str], *, verify: bool, chunk: int,
            progress: Callable[[int, int], None] | None) -> list[Any]:
    from tplog._projections import RebuildReport
    from tplog.backends.postgres.recorder import _Batch, item_of

    t0 = time.monotonic()
    with conn.transaction():
        if verify:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            pos = [r[0] for r in conn.execute("SELECT position FROM logs ORDER BY log_id").fetchall()]
        else:  # appends wait on the counters until the new rows are in
            pos = [r[0] for r in conn.execute("SELECT position FROM logs ORDER BY log_id FOR UPDATE").fetchall()]
        total_row = conn.execute("SELECT count(*) FROM events").fetchone()
        total = int(total_row[0]) if total_row else 0
        b = _Batch()
        states: dict[tuple[int, str, bytes], ThreadState] = {}
        done = 0
        with conn.cursor(name="tplog_rebuild", binary=True) as cur:
            cur.itersize = max(1, chunk)
            cur.execute("SELECT h.thread_id, e.log_id, e.scope, e.tk, e.seq, e.position, e.event_id, e.value "
                        "FROM events e JOIN heads h ON h.log_id = e.log_id AND h.scope = e.scope AND h.tk = e.tk "
                        "ORDER BY e.log_id, e.position")
            for thread_id, log, scope, tk, seq, position, event_id, value in cur:
                tk = bytes(tk)
                ev = rec._event(conn, thread_id, log, tk, seq, position, event_id, value).event
                kind = KIND_CODE[type(ev)]
                done += 1
                if kind == _K_DELETED:
                    continue
                it = item_of(seq, kind, ev)
                rec._index_links(b, log, scope, tk, thread_id, seq, ev, it.facts)
                feed(states.setdefault((log, scope, tk), ThreadState()), it)
                if progress is not None and done % max(1, chunk) == 0:
                    progress(done, total)
        links = sorted(b.links)
        children = {k: (v[0], v[1]) for k, v in b.children.items()}
        fresh_states = {k: raw for k, st in states.items() if (raw := _enc.encode(st)) != _EMPTY}
        reports = []
        for n in names:
            problems: list[str] = []
            if verify:
                if n == "links":
                    live_links = sorted((r[0], r[1], bytes(r[2]), bytes(r[3]), bytes(r[4]), r[5], r[6]) for r in
                                        conn.execute("SELECT * FROM links").fetchall())
                    live_children = {(r[0], r[1], bytes(r[2]), bytes(r[3])): (r[4], r[5])
                                     for r in conn.execute("SELECT * FROM children").fetchall()}
                    if live_links != links or live_children != children:
                        problems.append("links: the live index differs from a rebuild")
                else:
                    live_states = {(r[0], r[1], bytes(r[2])): bytes(r[3])
                                   for r in conn.execute("SELECT * FROM states").fetchall() if bytes(r[3]) != _EMPTY}
                    if live_states != fresh_states:
                        problems.append("state: the live rows differ from a rebuild")
            elif n == "links":
                conn.execute("DELETE FROM links")
                conn.execute("DELETE FROM children")
                if links:
                    cols = [list(c) for c in zip(*links, strict=True)]
                    conn.execute("INSERT INTO links SELECT * FROM unnest(%s::int[], %s::text[], %s::bytea[], "
                                 "%s::bytea[], %s::bytea[], %s::int[], %s::text[])", cols)
                if children:
                    ck = sorted(children)
                    conn.execute("INSERT INTO children SELECT * FROM unnest(%s::int[], %s::text[], %s::bytea[], "
                                 "%s::bytea[], %s::text[], %s::int[])",
                                 ([k[0] for k in ck], [k[1] for k in ck], [k[2] for k in ck], [k[3] for k in ck],
                                  [children[k][0] for k in ck], [children[k][1] for k in ck]))
            else:
                conn.execute("DELETE FROM states")
                if fresh_states:
                    sk = sorted(fresh_states)
                    conn.execute("INSERT INTO states SELECT * FROM unnest(%s::int[], %s::text[], %s::bytea[], "
                                 "%s::bytea[])", ([k[0] for k in sk], [k[1] for k in sk], [k[2] for k in sk],
                                                  [fresh_states[k] for k in sk]))
            if not verify:
                conn.execute("INSERT INTO tracking VALUES (%s, 'live', %s) ON CONFLICT (name) DO UPDATE SET "
                             "status = 'live', version = EXCLUDED.version", (n, VERSIONS[n]))
            reports.append(RebuildReport(projection=n, verify=verify, events=done, seconds=time.monotonic() - t0,
                                         position=sum(pos), differences=problems))
    if progress is not None:
        progress(done, total)
    return reports
