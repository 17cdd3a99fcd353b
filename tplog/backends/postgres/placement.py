"""Which log a thread lives in, when a store keeps several (P > 1).

A thread's log is fixed when it is created: a thread whose creating append declares a
``spawned_from`` link (in ``ThreadStarted.relationships`` or a ``LinkAdded`` of that
append) goes into its parent's log, so that a conversation tree stays in one log (one
shard on Citus: its appends and link rows are single-shard); any other thread goes into
the log its id hashes to. So the log is no longer a function of the id alone: it is
looked up (``heads`` by ``(scope, tk)``, index ``heads_tk``) and then cached, which is
safe because it never changes.

Rows that name a thread before it exists (links *to* it, spawn facts of its children)
go into its home log as known at that moment: the hashed one. Creating the thread in
another log moves them along, in the creating transaction; a creator and every append
that writes rows for a not-yet-known thread take that thread's advisory lock first and
look it up after, so no such row is written in between.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable
from typing import Any, Final

import psycopg

from tplog.backends.common import SPAWNED_FROM, outgoing, thread_key
from tplog.backends.contract import Append
from tplog.events import LinkAdded, ThreadStarted

__all__ = ["Placement", "scope_column"]

#: Placements kept in memory at most (then forgotten and looked up again).
CACHE: Final = 1_000_000

Key = tuple[str, bytes]  # (scope column, thread key)


def scope_column(scope: str | None) -> str:
    # Scopes are non-empty strings, so '' stands for "unscoped" in a NOT NULL key column.
    return "" if scope is None else scope


class Placement:
    def __init__(self, schema: str, logs: int) -> None:
        self.schema, self.logs = schema, logs
        self._known: dict[Key, int] = {}
        self._lock = threading.Lock()

    def hashed(self, tk: bytes) -> int:
        # The reference backend's function: a thread that inherits no log lands where it does there.
        return int.from_bytes(tk[:4], "big") % self.logs

    def known(self, key: Key) -> int | None:
        return self._known.get(key)

    def remember(self, key: Key, log: int) -> None:
        with self._lock:
            if len(self._known) >= CACHE:
                self._known.clear()
            self._known[key] = log

    def lookup(self, conn: psycopg.Connection[Any], keys: Iterable[Key]) -> dict[Key, int]:
        """The logs of the stored threads among ``keys`` (remembered)."""
        ks = list(keys)
        if not ks:
            return {}
        rows = conn.execute(
            "SELECT h.scope, h.tk, h.log_id FROM unnest(%s::text[], %s::bytea[]) AS x(s, tk) JOIN heads h "
            "ON h.scope = x.s AND h.tk = x.tk WHERE h.head IS NOT NULL",
            ([k[0] for k in ks], [k[1] for k in ks])).fetchall()
        found = {(r[0], bytes(r[1])): r[2] for r in rows}
        for k, log in found.items():
            self.remember(k, log)
        return found

    def log(self, conn: psycopg.Connection[Any], key: Key) -> int:
        """A thread's log: its stored one, else the hashed one (where it would be created on its own)."""
        got = self._known.get(key)
        if got is None:
            got = self.lookup(conn, [key]).get(key)
        return self.hashed(key[1]) if got is None else got

    def plan(self, conn: psycopg.Connection[Any], appends: list[Append]) -> tuple[dict[Key, int], list[
            tuple[Key, int, int]]]:
        """In an append transaction, before anything else: the log of every thread the batch
        names (its threads, their link targets, the children its spawn facts name) and the
        moves of rows for the threads it may create in an inherited log: ``(key, from, to)``.
        Locks every thread not known yet (see the module's doc)."""
        named: dict[Key, None] = {}
        parents: dict[Key, Key] = {}
        for append in appends:
            for part in append:
                sc = scope_column(part.scope)
                key = (sc, thread_key(part.thread_id, part.scope))
                named[key] = None
                creates = bool(part.events) and isinstance(part.events[0].event, ThreadStarted)
                for enc in part.events:
                    ev = enc.event
                    if isinstance(ev, (ThreadStarted, LinkAdded)):
                        for _, lk in outgoing(0, ev):
                            target = (sc, thread_key(lk.thread_id, part.scope))
                            named[target] = None
                            if creates and lk.relation == SPAWNED_FROM:  # a new thread joins its parent's log
                                parents.setdefault(key, target)
                    for child in enc.facts.spawned if enc.facts is not None else ():
                        named[(sc, thread_key(child, part.scope))] = None
        unknown = [k for k in named if k not in self._known]
        if not unknown:
            return {}, []
        locks = sorted({int.from_bytes(hashlib.blake2b(b"%s\0t\0%s\0%s" % (self.schema.encode(), k[0].encode(), k[1]),
                                                       digest_size=8).digest(), "big", signed=True) for k in unknown})
        conn.execute("SELECT pg_advisory_xact_lock(x.k) FROM unnest(%s::bigint[]) WITH ORDINALITY AS x(k, i) "
                     "ORDER BY x.i", (locks,))
        found = self.lookup(conn, unknown)
        logs: dict[Key, int] = dict(found)
        moves: list[tuple[Key, int, int]] = []
        for key in unknown:  # threads first created by this batch, in its order
            if key in found or key not in parents:
                continue
            parent = parents[key]
            plog = self._known.get(parent, logs.get(parent))
            if plog is None:
                plog = self.log(conn, parent)
            logs[key] = plog
            if plog != self.hashed(key[1]):
                moves.append((key, self.hashed(key[1]), plog))
        for key in unknown:
            logs.setdefault(key, self.hashed(key[1]))
        return logs, moves

    @staticmethod
    def move(conn: psycopg.Connection[Any], moves: list[tuple[Key, int, int]]) -> None:
        """Rows naming the new threads (links to them, children of them) into their logs."""
        for (sc, tk), old, new in moves:
            conn.execute("UPDATE links SET log_id = %s WHERE log_id = %s AND scope = %s AND target = %s",
                         (new, old, sc, tk))
            conn.execute("UPDATE children SET log_id = %s WHERE log_id = %s AND scope = %s AND parent = %s",
                         (new, old, sc, tk))
