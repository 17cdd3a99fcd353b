"""The PostgreSQL backend's reads (:class:`PgReads`, a base of
:class:`~tplog.backends.postgres.recorder.PostgresRecorder`).
"""


from __future__ import annotations

import threading
import time
from typing import Any

import msgspec
import psycopg
import psycopg.errors

from tplog.backends.common import (
    VERSIONS,
    check_cursor,
    check_threads_page,
    decode_head,
    fold_item,
    inherited,
    outgoing,
    thread_key,
)
from tplog.backends.contract import Cursor, Direction, Inherited, ThreadHead, ThreadPage
from tplog.backends.postgres.connections import (
    Blobs,
    PgConnections,
    event_key,
    retried,
    state_dec,
)
from tplog.backends.postgres.placement import scope_column
from tplog.codec import facts_of
from tplog.errors import InvalidInputError, NotFoundError, RebuildRequiredError
from tplog.events import KIND_CODE, RecordedEvent
from tplog.lifecycle import ACTIVITY_CODE, ThreadFilter, matches
from tplog.projections.fold import Item, ThreadState

__all__ = ["PgReads"]


class PgReads(PgConnections):
    """The read side of :class:`~tplog.backends.postgres.recorder.PostgresRecorder`: heads, ranges,
    the log and its live wait, listings, incoming/children pages, folds."""

    # ------------------------------------------------------------------ reads

    def _event(self, conn: psycopg.Connection[Any], thread_id: str, log: int, tk: bytes, seq: int, position: int,
               event_id: str, value: bytes) -> RecordedEvent:
        where = (thread_id, seq)
        reader = Blobs(conn, log)
        ev = self.codec.decode_value(event_key(tk, seq), value, reader, where=where)
        hdr = self.codec.header(value, where=where)
        return RecordedEvent(thread_id=thread_id, seq=seq, position=position, event_id=event_id,
                             recorded_at=hdr.recorded_at, event=ev)

    @retried
    def head(self, thread_id: str, *, scope: str | None = None) -> ThreadHead | None:
        with self._read() as conn:
            row = conn.execute("SELECT head, last_position FROM heads WHERE log_id = %s AND scope = %s AND tk = %s "
                               "AND head IS NOT NULL", self._key(thread_id, scope, conn)).fetchone()
        return None if row is None else msgspec.structs.replace(decode_head(row[0]), last_position=row[1])

    @retried
    def read_thread(self, thread_id: str, *, scope: str | None = None, after: int | None = None,
                    limit: int | None = None, direction: Direction = "forward") -> list[RecordedEvent]:
        log, sc, tk = self._key(thread_id, scope)
        fwd = direction == "forward"
        cond = "" if after is None else (" AND e.seq > %(after)s" if fwd else " AND e.seq < %(after)s")
        sql = ("SELECT h.thread_id, e.seq, e.position, e.event_id, e.value FROM heads h LEFT JOIN LATERAL ("
               "SELECT seq, position, event_id, value FROM events e WHERE e.log_id = h.log_id AND e.scope = h.scope "
               f"AND e.tk = h.tk{cond} ORDER BY e.seq {'ASC' if fwd else 'DESC'} LIMIT %(limit)s) e ON true "
               "WHERE h.log_id = %(log)s AND h.scope = %(scope)s AND h.tk = %(tk)s AND h.head IS NOT NULL "
               f"ORDER BY e.seq {'ASC' if fwd else 'DESC'}")
        with self._read() as conn:
            rows = conn.execute(sql, {"after": after, "limit": limit, "log": log, "scope": sc, "tk": tk},
                                binary=True).fetchall()
            if not rows:
                raise NotFoundError(f"thread {thread_id} does not exist")
            return [self._event(conn, r[0], log, tk, r[1], r[2], r[3], r[4]) for r in rows if r[1] is not None]

    @retried
    def read_log(self, log: int, *, after: int = 0, limit: int | None = None,
                 scope: str | None = None) -> list[RecordedEvent]:
        if isinstance(log, bool) or not isinstance(log, int) or not 0 <= log < self.logs:
            raise InvalidInputError(f"log {log} does not exist: this store keeps {self.logs} log(s)")
        with self._read() as conn:
            rows = conn.execute(
                "SELECT h.thread_id, e.tk, e.seq, e.position, e.event_id, e.value FROM events e JOIN heads h "
                "ON h.log_id = e.log_id AND h.scope = e.scope AND h.tk = e.tk WHERE e.log_id = %s AND e.scope = %s "
                "AND e.position > %s ORDER BY e.position LIMIT %s", (log, scope_column(scope), after, limit),
                binary=True).fetchall()
            return [self._event(conn, r[0], log, bytes(r[1]), r[2], r[3], r[4], r[5]) for r in rows]

    @retried
    def positions(self) -> Cursor:
        with self._read() as conn:
            return tuple(r[0] for r in conn.execute("SELECT position FROM logs ORDER BY log_id").fetchall())

    def _notify_local(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def wait_for_position(self, position: int, timeout: float | None = None, *, poll: float = 0.05) -> int:
        return self.wait((position - 1,), timeout)[0]  # woken by NOTIFY (one log) or its own poll

    def wait(self, cursor: Cursor, timeout: float | None = None) -> Cursor:
        """Commits of this process wake waiters at once; other processes' through
        LISTEN/NOTIFY (one log) or a short poll (several logs)."""
        check_cursor(cursor, self.logs)
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.logs == 1:
            self._listen()
        while True:
            now = self.positions()
            if any(p > c for p, c in zip(now, cursor, strict=False)) or self._closing:
                return now
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return now
            with self._cond:
                self._cond.wait(0.5 if self.logs == 1 else 0.05 if left is None else min(left, 0.05))

    def _listen(self) -> None:
        with self._cond:
            if self._listener is not None:
                return
            self._listener = threading.Thread(target=self._listen_loop, name=f"tplog-pg-listen-{self.schema}",
                                              daemon=True)
            self._listener.start()

    def _listen_loop(self) -> None:
        while not self._closing:
            try:
                with psycopg.connect(self._conninfo, **self._kwargs) as conn:
                    conn.execute(f"LISTEN {self._channel}".encode())
                    while not self._closing:
                        for _ in conn.notifies(timeout=0.5, stop_after=1):
                            self._notify_local()
            except psycopg.Error:
                time.sleep(0.5)  # the server went away: waiters poll meanwhile

    @retried
    def threads(self, *, scope: str | None = None, after: str | None = None, limit: int = 50,
                include_deleted: bool = False, where: ThreadFilter | None = None) -> ThreadPage:
        raw = check_threads_page(after, limit)
        conds: list[str] = []
        params: list[Any] = [scope_column(scope)]
        cur = None if raw is None else (int.from_bytes(raw[:8], "big", signed=True), raw[8:])
        if not include_deleted:
            conds.append("NOT deleted")
        if where is not None:  # the indexed filters in SQL, the others on the decoded heads
            if where.activity is not None:
                conds.append("activity = ANY(%s::smallint[])")
                params.append([ACTIVITY_CODE[a] for a in where.activity])
            if where.agent is not None:
                conds.append("agents @> ARRAY[%s]::text[]")
                params.append(where.agent)
            if where.updated_after is not None:
                conds.append("updated_ns >= %s")
                params.append(where.updated_after)
            if where.updated_before is not None:
                conds.append("updated_ns < %s")
                params.append(where.updated_before)
            if where.has_children is not None:
                conds.append(("" if where.has_children else "NOT ") + "EXISTS (SELECT 1 FROM children c WHERE "
                             "c.log_id = heads.log_id AND c.scope = heads.scope AND c.parent = heads.tk)")
        heads: list[ThreadHead] = []
        last: Any = None
        more = False
        batch = limit + 1 if where is None else max(limit + 1, 256)
        with self._read() as conn:
            while True:  # batches of candidates until the page is full or they run out
                bound = "" if cur is None else " AND (updated_ns, tk) < (%s, %s)"
                extra = "".join(" AND " + c for c in conds)
                rows = conn.execute(
                    f"SELECT head, last_position, updated_ns, tk FROM heads WHERE scope = %s AND head IS NOT NULL"
                    f"{extra}{bound} ORDER BY updated_ns DESC, tk DESC LIMIT %s",
                    [*params, *(cur or ()), batch]).fetchall()
                for r in rows:
                    h = msgspec.structs.replace(decode_head(r[0]), last_position=r[1])
                    if where is not None and not matches(where, h):
                        continue
                    if len(heads) >= limit:
                        more = True
                        break
                    heads.append(h)
                    last = r
                if more or len(rows) < batch:
                    break
                cur = (rows[-1][2], bytes(rows[-1][3]))
        cursor = (last[2].to_bytes(8, "big", signed=True) + bytes(last[3])).hex() if more and last is not None else None
        return ThreadPage(heads, cursor)

    def _require_live(self, conn: psycopg.Connection[Any], name: str) -> bool:
        # A projection turns stale only when a process with other fold code rebuilds it: a live
        # answer is trusted for a second, sparing every link/state read a second query.
        now = time.monotonic()
        if self._live_until.get(name, 0.0) > now:
            return True
        row = conn.execute("SELECT status, version FROM tracking WHERE name = %s", (name,)).fetchone()
        live = row is not None and row[0] == "live" and row[1] == VERSIONS[name]
        if live:
            self._live_until[name] = now + 1.0
        return live

    @retried
    def incoming(self, thread_id: str, *, scope: str | None = None, relation: str | None = None,
                 after: tuple[str, str] | None = None, limit: int | None = None) -> list[tuple[str, str]]:
        log, sc, tk = self._key(thread_id, scope)
        cond, params = "", [log, sc, tk]
        if relation is not None:
            cond += " AND relation = %s"
            params.append(relation.encode())
        if after is not None:
            cond += " AND (relation, source) > (%s, %s)"
            params += [after[1].encode(), thread_key(after[0], scope)]
        sql = ("SELECT source_id, relation, source, ord FROM links WHERE log_id = %s AND scope = %s AND target = %s"
               f"{cond} ORDER BY relation, source, ord LIMIT %s")
        with self._read() as conn:
            self._links_live(conn)
            rows = conn.execute(sql.encode(), [*params, limit]).fetchall()
            if limit is not None and len(rows) == limit and rows:
                last = rows[-1]  # a page never ends between two links of one pair
                rows += conn.execute(
                    "SELECT source_id, relation, source, ord FROM links WHERE log_id = %s AND scope = %s AND "
                    "target = %s AND relation = %s AND source = %s AND ord > %s ORDER BY ord",
                    (log, sc, tk, last[1], last[2], last[3])).fetchall()
            if not rows:
                self._require_known(conn, thread_id, log, sc, tk)
        return [(r[0], bytes(r[1]).decode()) for r in rows]

    def _links_live(self, conn: psycopg.Connection[Any]) -> None:
        if not self._require_live(conn, "links"):
            raise RebuildRequiredError(f"PostgreSQL {self.url}: the links projection is stale; "
                                       "run rebuild(['links'])")

    def _require_known(self, conn: psycopg.Connection[Any], thread_id: str, log: int, sc: str, tk: bytes) -> None:
        """An empty links answer for a thread never stored, that no stored thread links to
        or names as spawned, is ``NotFoundError``."""
        row = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM heads WHERE log_id = %(l)s AND scope = %(s)s AND tk = %(t)s AND head IS NOT "
            "NULL) OR EXISTS (SELECT 1 FROM links WHERE log_id = %(l)s AND scope = %(s)s AND target = %(t)s) OR "
            "EXISTS (SELECT 1 FROM children WHERE log_id = %(l)s AND scope = %(s)s AND parent = %(t)s) OR "
            "EXISTS (SELECT 1 FROM children WHERE scope = %(s)s AND child = %(t)s AND flags & 2 = 2)",
            {"l": log, "s": sc, "t": tk}).fetchone()
        if not (row and row[0]):
            raise NotFoundError(f"thread {thread_id} does not exist, and no stored thread links to it")

    @retried
    def children(self, thread_id: str, *, scope: str | None = None, after: str | None = None,
                 limit: int | None = None) -> list[str]:
        log, sc, tk = self._key(thread_id, scope)
        cond, params = "", [log, sc, tk]
        if after is not None:
            cond = " AND child > %s"
            params.append(thread_key(after, scope))
        with self._read() as conn:
            self._links_live(conn)
            rows = conn.execute(("SELECT child_id FROM children WHERE log_id = %s AND scope = %s AND parent = %s"
                                 f"{cond} ORDER BY child LIMIT %s").encode(), [*params, limit]).fetchall()
            if not rows:
                self._require_known(conn, thread_id, log, sc, tk)
        return [r[0] for r in rows]

    def _inherited(self, conn: psycopg.Connection[Any], thread_id: str, scope: str | None) -> list[Inherited]:
        """What a live fork's prefix indexes under the fork (a rebuild's view, from its parent's
        events in ``conn``'s snapshot); ``[]`` for any other thread."""
        head = self._head_in(conn, thread_id, scope)
        if head is None or head.fork_of is None or head.status != "active":
            return []
        return inherited(self._copy_events(conn, head.fork_of, scope), head.fork_at)

    def _head_in(self, conn: psycopg.Connection[Any], thread_id: str, scope: str | None) -> ThreadHead | None:
        row = conn.execute("SELECT head FROM heads WHERE log_id = %s AND scope = %s AND tk = %s AND head IS NOT "
                           "NULL", self._key(thread_id, scope, conn)).fetchone()
        return decode_head(row[0]) if row is not None else None

    def _copy_events(self, conn: psycopg.Connection[Any], thread_id: str, scope: str | None) -> list[Any]:
        """The thread's decoded events as a copy would hold them (a fork's prefix from its parent)."""
        log, sc, tk = self._key(thread_id, scope, conn)
        rows = conn.execute("SELECT seq, position, event_id, value FROM events WHERE log_id = %s AND scope = %s "
                            "AND tk = %s ORDER BY seq", (log, sc, tk), binary=True).fetchall()
        own = [self._event(conn, thread_id, log, tk, *r).event for r in rows]
        head = self._head_in(conn, thread_id, scope)
        if head is None or head.fork_of is None or head.status != "active":
            return own
        return [*own[:1], *self._copy_events(conn, head.fork_of, scope)[1:head.fork_at], *own[1:]]

    @retried
    def has_spawned(self, thread_id: str, *, scope: str | None = None) -> bool:
        """Whether the thread's events (a fork's inherited ones too) name a spawned thread."""
        log, sc, tk = self._key(thread_id, scope)
        with self._read() as conn:
            self._links_live(conn)
            row = conn.execute("SELECT EXISTS (SELECT 1 FROM children WHERE log_id = %s AND scope = %s AND "
                               "parent = %s AND flags & 2 = 2)", (log, sc, tk)).fetchone()
        return bool(row and row[0])

    @retried
    def thread_state(self, thread_id: str, *, scope: str | None = None) -> ThreadState | None:
        with self._read() as conn:
            live = self._require_live(conn, "state")
            row = conn.execute("SELECT s.state, h.head FROM heads h LEFT JOIN states s ON s.log_id = h.log_id AND "
                               "s.scope = h.scope AND s.tk = h.tk WHERE h.log_id = %s AND h.scope = %s AND "
                               "h.tk = %s AND h.head IS NOT NULL", self._key(thread_id, scope, conn)).fetchone()
        if row is None:
            raise NotFoundError(f"thread {thread_id} does not exist")
        if not live or decode_head(row[1]).fork_of is not None:
            return None  # stale; or a fork, whose state the facade folds with its parent's prefix
        return ThreadState() if row[0] is None else state_dec.decode(row[0])

    @retried
    def thread_events(self, thread_id: str, *, scope: str | None = None,
                      after: int = 0) -> tuple[ThreadHead, list[Any]]:
        log, sc, tk = self._key(thread_id, scope)
        with self._read() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")  # the head and its events agree
            row = conn.execute("SELECT head, last_position FROM heads WHERE log_id = %s AND scope = %s AND tk = %s "
                               "AND head IS NOT NULL", (log, sc, tk)).fetchone()
            if row is None:
                raise NotFoundError(f"thread {thread_id} does not exist")
            head = msgspec.structs.replace(decode_head(row[0]), last_position=row[1])
            if head.status != "active" or after > head.version:
                after = 0
            rows = conn.execute("SELECT seq, position, event_id, value FROM events WHERE log_id = %s AND scope = %s "
                                "AND tk = %s AND seq > %s ORDER BY seq", (log, sc, tk, after), binary=True).fetchall()
            return head, [self._event(conn, head.thread_id, log, tk, *r).event for r in rows]

    def items(self, thread_id: str, *, scope: str | None = None) -> list[Item]:
        return [fold_item(e.seq, KIND_CODE[type(e.event)], facts_of(e.event), e.event)
                for e in self.read_thread(thread_id, scope=scope)]

    @retried
    def descendants(self, thread_id: str, *, scope: str | None = None,
                    max_depth: int | None = None) -> list[tuple[str, int]]:
        root = self._key(thread_id, scope)
        seen = {root[2]}
        out: list[tuple[str, int]] = []
        frontier = [root]
        depth = 0
        with self._read() as conn:
            while frontier and (max_depth is None or depth < max_depth):
                self._links_live(conn)
                depth += 1
                rows = conn.execute(
                    "SELECT c.child_id, c.child FROM unnest(%s::int[], %s::bytea[]) AS x(l, p) JOIN children c "
                    "ON c.log_id = x.l AND c.scope = %s AND c.parent = x.p ORDER BY x.p, c.child",
                    ([k[0] for k in frontier], [k[2] for k in frontier], root[1])).fetchall()
                if not rows and depth == 1:  # the root: is it known at all?
                    self._require_known(conn, thread_id, *root)
                nxt = []
                for child_id, ck in rows:
                    ck = bytes(ck)
                    if ck not in seen:
                        seen.add(ck)
                        out.append((child_id, depth))
                        nxt.append(self._key(child_id, scope, conn))
                frontier = nxt
        return out

    def links(self, thread_id: str, *, scope: str | None = None) -> list[Any]:
        return [lk for e in self.read_thread(thread_id, scope=scope) for _, lk in outgoing(e.seq, e.event)]
