"""The PostgreSQL backend's projections, locks, backup, stats, verify and close (:class:`PgMaintenance`,
a base of :class:`~tplog.backends.postgres.recorder.PostgresRecorder`).
"""


from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from tplog.backends.common import VERSIONS, decode_head, own_seqs
from tplog.backends.contract import RebuildReport, Tracking, VerifyReport
from tplog.backends.files import backup_dir, create_file
from tplog.backends.postgres.connections import Held, retried
from tplog.backends.postgres.reads import PgReads
from tplog.backends.postgres.schema import SCHEMA_VERSION, TABLES
from tplog.errors import InvalidInputError, RebuildInProgressError, TplogError

__all__ = ["PgMaintenance"]


class PgMaintenance(PgReads):
    """Projections' tracking and rebuilds, locks, backup, stats, verify, close of
    :class:`~tplog.backends.postgres.recorder.PostgresRecorder`."""

    # ------------------------------------------------------------------ projections

    @retried
    def tracking(self) -> list[Tracking]:
        with self._read() as conn:
            rows = {r[0]: r for r in conn.execute("SELECT name, status, version FROM tracking").fetchall()}
            pos = tuple(r[0] for r in conn.execute("SELECT position FROM logs ORDER BY log_id").fetchall())
        out = []
        for name in VERSIONS:
            r = rows.get(name)
            status = "live" if r is not None and r[1] == "live" and r[2] == VERSIONS[name] else "stale"
            out.append(Tracking(name=name, version=None if r is None else r[2], code_version=VERSIONS[name],
                                status=status, position=pos if status == "live" else (0,) * self.logs))
        return out

    def rebuild(self, names: Sequence[str], *, verify: bool = False, force: bool = False, chunk: int = 20_000,
                progress: Callable[[int, int], None] | None = None) -> list[RebuildReport]:
        from tplog.backends.postgres.rebuild import rebuild

        for n in names:
            if n not in VERSIONS:
                raise InvalidInputError(f"unknown projection {n!r}; known: {', '.join(VERSIONS)}")
        self._check_open()
        claims = []
        try:
            for n in names:
                held = self.try_lock(f"rebuild-{n}")
                if held is None and not force:
                    raise RebuildInProgressError(f"PostgreSQL {self.url}: a rebuild of {n} is in progress")
                claims.append(held)
            with self._read() as conn:
                return rebuild(self, conn, list(names), verify=verify, chunk=chunk, progress=progress)
        finally:
            for c in claims:
                if c is not None:
                    c.release()

    # ------------------------------------------------------------------ maintenance

    def try_lock(self, name: str) -> Held | None:
        if not isinstance(name, str) or not name or not all(c.isascii() and (c.isalnum() or c in "-_")
                                                            for c in name):
            raise InvalidInputError(f"lock name must be ASCII letters, digits, '-' or '_', not {name!r}")
        self._check_open()
        conn = self._connect()
        row = conn.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))",
                           (f"tplog:{self.schema}:{name}",)).fetchone()
        if row is None or not row[0]:
            conn.close()
            return None
        return Held(conn)

    def backup(self, dest: str, *, compact: bool = True) -> None:
        """Every table as ``COPY`` binary files (0600) in the new or empty directory ``dest``, from one
        snapshot (``pg_dump`` does it too)."""
        backup_dir(dest)  # new or empty, not a link: nothing overwritten, nothing written elsewhere
        with self._read() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            for table in TABLES:
                with open(create_file(os.path.join(dest, f"{table}.copy")), "wb") as f, conn.cursor().copy(
                        f"COPY {table} TO STDOUT (FORMAT binary)".encode()) as copy:
                    for data in copy:
                        f.write(data)

    @retried
    def stats(self) -> dict[str, Any]:
        with self._read() as conn:
            threads = conn.execute("SELECT count(*) FROM heads WHERE head IS NOT NULL").fetchone()
            events = conn.execute("SELECT count(*), coalesce(sum(length(value)), 0) FROM events").fetchone()
            pos = [r[0] for r in conn.execute("SELECT position FROM logs ORDER BY log_id").fetchall()]
        assert threads is not None and events is not None
        return {"backend": "postgres", "schema": self.schema, "logs": self.logs, "threads": threads[0],
                "events": events[0], "stored_bytes": int(events[1]), "last_positions": pos,
                "schema_version": SCHEMA_VERSION}

    def verify(self, *, projections: bool = True) -> VerifyReport:
        problems: list[str] = []
        events = 0
        with self._read() as conn:
            rows = conn.execute(
                "SELECT h.thread_id, h.head, h.log_id, h.tk, coalesce(array_agg(e.seq ORDER BY e.seq) FILTER "
                "(WHERE e.seq IS NOT NULL), '{}') FROM heads h LEFT JOIN events e ON e.log_id = h.log_id AND "
                "e.scope = h.scope AND e.tk = h.tk WHERE h.head IS NOT NULL GROUP BY h.log_id, h.scope, h.tk",
            ).fetchall()
            for thread_id, raw, _log, _tk, seqs in rows:
                head = decode_head(raw)
                want = own_seqs(head)
                if list(seqs) != want:
                    problems.append(f"thread {thread_id}: seqs {list(seqs)[:5]}… do not match its head "
                                    f"(version {head.version})")
            for r in conn.execute("SELECT h.thread_id, e.log_id, e.tk, e.seq, e.position, e.event_id, e.value "
                                  "FROM events e JOIN heads h ON h.log_id = e.log_id AND h.scope = e.scope AND "
                                  "h.tk = e.tk", binary=True):
                events += 1
                try:
                    self._event(conn, r[0], r[1], bytes(r[2]), r[3], r[4], r[5], r[6])
                except TplogError as exc:
                    problems.append(str(exc))
        if projections:
            for rep in self.rebuild(list(VERSIONS), verify=True):
                problems += rep.differences
        return VerifyReport(events=events, threads=len(rows), problems=problems)

    def sync(self) -> None:
        """Commits are durable when acknowledged (``synchronous_commit``): nothing to do."""
        self._check_open()

    def train_dictionary(self, *, samples: int = 2000, size: int = 64 << 10) -> int:
        """0: values are compressed without a dictionary here (no shared dictionary table yet)."""
        self._check_open()
        return 0

    def check_open(self) -> None:
        self._check_open()

    def close(self) -> None:
        with self._cond:
            if self._closing:
                return
            self._closing = True
            self._cond.notify_all()
        for w in self._writers:
            w.join()
        self._pool.close()
        self._closed = True
