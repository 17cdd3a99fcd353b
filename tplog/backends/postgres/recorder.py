"""The PostgreSQL recorder: the backend contract on psycopg 3.

Positions. A store keeps ``logs`` ordered logs (P). A log's positions come from its
counter row in ``logs``: the append transaction updates it last and holds its lock
until COMMIT, so a log's transactions commit in position order and a reader polling
``position > cursor`` never passes a position that is still to commit (a sequence
would let it: tests/postgres/test_log_order.py). This serializes a log's commits,
so appends are batched: a writer thread joins every submission that queued meanwhile
into one transaction (group commit), each caller still getting its own result or error.
Two writer threads (``writers``), each on its own connection: while one holds the log's
counter row through COMMIT, the other runs its batch's first round trip and checks, so
the counter is not left idle between transactions. They interleave as two processes'
writers would (the row locks order them).

One append transaction, two round trips (psycopg pipeline mode):

1. upsert-and-lock the heads of every thread in the batch (``INSERT … ON CONFLICT DO
   UPDATE`` in sorted key order: no deadlocks between writers), look up the event ids
   of retries, load the ``state`` rows and the projections' tracking;
2. (checks run in Python: idempotency, expected versions, order rules, folds) blobs,
   link rows (in the *target's* log), children, state rows, then per log the counter
   update joined with the events insert and the heads update, NOTIFY, COMMIT.

A connection lost during COMMIT leaves the outcome unknown: the batch is retried
once on a new connection with every id looked up, so a committed append comes back
as its original result and an uncommitted one is written once.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import msgspec
import psycopg
import psycopg.errors
import psycopg_pool

from tplog.backends.common import (
    VERSIONS,
    advance,
    apply_fork,
    check_append,
    check_collision,
    check_deletable,
    check_expected,
    check_fork_parent,
    check_no_forks,
    check_tombstone,
    decode_head,
    retry_refs,
    thread_key,
    tombstone_taken,
    with_prefix,
)
from tplog.backends.contract import Append, AppendResult, Handle, ThreadAppend, ThreadHead
from tplog.backends.dsn import redact, scrub
from tplog.backends.postgres.connections import (
    MAX_BATCH,
    RETRY,
    WRITERS,
    Job,
    event_key,
    finder_cols,
    head_enc,
    parse_url,
    state_dec,
)
from tplog.backends.postgres.errors import LockTimeoutError, PostgresUnavailableError, SchemaError
from tplog.backends.postgres.fold import Batch as _Batch
from tplog.backends.postgres.fold import Thread as _Thread
from tplog.backends.postgres.fold import index_inherited, index_links
from tplog.backends.postgres.maintenance import PgMaintenance
from tplog.backends.postgres.placement import Placement
from tplog.backends.postgres.schema import check_schema_name
from tplog.codec import Codec, Encoded, Limits
from tplog.errors import (
    InvalidInputError,
    TplogError,
)
from tplog.projections.fold import ThreadState, feed, item_of

__all__ = ["PostgresRecorder"]


class PostgresRecorder(PgMaintenance):
    """The :class:`~tplog.backends.contract.Recorder` on a PostgreSQL database.

    ``url``: ``postgresql://user:password@host:port/db`` (libpq's URL; ``?schema=NAME``
    and ``?logs=P`` are read here). ``schema``: the PostgreSQL schema holding the
    tables (created on first open when ``create``). ``logs``: P, fixed when the schema
    is created. ``lock_timeout``: seconds an append waits for a lock before
    :class:`LockTimeoutError`. ``migrate``: upgrade an older schema on open (else
    :class:`SchemaError` names the command that does). ``clock``: nanoseconds for
    heads' times. ``settings``: server settings for every connection (``SET name = value``).
    ``writers`` (or ``?writers=N``, default 2): threads committing this process's append
    batches, each on its own connection.
    """

    submits_in_order = False  # several writers: a later submission may commit first

    def __init__(self, url: str, *, schema: str | None = None, logs: int | None = None, create: bool = True,
                 migrate: bool = False, lock_timeout: float = 30.0, pool_size: int = 4, writers: int | None = None,
                 settings: dict[str, str] | None = None,
                 clock: Callable[[], int] = time.time_ns, codec: Codec | None = None,
                 limits: Limits | None = None) -> None:
        conninfo, ours = parse_url(url)
        self.url = redact(url)
        self.schema = check_schema_name(schema or ours.get("schema", "tplog"))
        want_logs = logs if logs is not None else ours.get("logs", 1)
        if isinstance(want_logs, bool) or not isinstance(want_logs, int) or not 1 <= want_logs <= 4096:
            raise InvalidInputError(f"logs must be an int in 1..4096, not {want_logs!r}")
        if writers is None:
            writers = ours.get("writers", WRITERS)
        if isinstance(writers, bool) or not isinstance(writers, int) or not 1 <= writers <= 16:
            raise InvalidInputError(f"writers must be an int in 1..16, not {writers!r}")
        self._clock = clock
        self.codec = codec or Codec(limits)
        self._channel = f"tplog_{self.schema}"
        opts = {"search_path": self.schema, "lock_timeout": str(max(1, int(lock_timeout * 1000))), **(settings or {})}
        for k, v in opts.items():
            if not k.replace("_", "").replace(".", "").isalnum() or not v.replace("_", "").replace(".", "").isalnum():
                raise InvalidInputError(f"setting {k}={v!r}: names and values are letters, digits, '_' or '.'")
        self._kwargs: dict[str, Any] = {"autocommit": True, "options": " ".join(f"-c {k}={v}" for k, v in opts.items())}
        try:
            given = psycopg.conninfo.conninfo_to_dict(conninfo)
            # A server that does not answer must not hang a writer forever.
            self._conninfo = psycopg.conninfo.make_conninfo(
                conninfo, **({} if "connect_timeout" in given else {"connect_timeout": 10}))
        except psycopg.ProgrammingError as exc:
            raise InvalidInputError(f"bad PostgreSQL URL {self.url!r}: {scrub(str(exc), url)}") from exc
        with self._connect() as conn:
            self.logs = self._open_schema(conn, want_logs if logs is not None or "logs" in ours else None,
                                          create=create, migrate=migrate)
        self._placement = Placement(self.schema, self.logs)
        self._pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
            self._conninfo, kwargs=self._kwargs, min_size=1, max_size=max(1, pool_size), open=True,
            name=f"tplog-{self.schema}", reconnect_timeout=30.0)
        self._cond = threading.Condition()
        self._queue: deque[Job] = deque()
        self._closing = False
        self._closed = False
        self._listener: threading.Thread | None = None
        self._live_until: dict[str, float] = {}
        #: Append transactions this process committed (submissions ÷ commits = the mean group).
        self.commits = 0
        self._wlocal = threading.local()  # each writer thread's connection
        self._writers = [threading.Thread(target=self._write_loop, name=f"tplog-pg-writer-{self.schema}-{i}",
                                          daemon=True) for i in range(writers)]
        for w in self._writers:
            w.start()

    # ------------------------------------------------------------------ writes

    def search_index(self, store: Any, *, thinking: bool = False) -> Any:
        """The store's search index in this schema (``tsvector``, GIN; :mod:`tplog.backends.postgres.search`)."""
        from tplog.backends.postgres.search import PgSearchIndex

        return PgSearchIndex(store, thinking=thinking)

    def search_index_exists(self) -> bool:
        """Whether this schema holds a search index (a search, or ``rebuild --projection search``, made it)."""
        with self._read() as conn:
            row = conn.execute("SELECT to_regclass('search_rows') IS NOT NULL").fetchone()
        return bool(row and row[0])

    def gate(self) -> None:
        """Nothing to hold back: encoding runs while the writer thread waits on the server."""

    def submit(self, append: Append, *, lead: bool = True) -> Handle[list[AppendResult]]:
        fut: Future[list[AppendResult]] = Future()
        try:
            check_append(append)
            self._enqueue(Job(list(append), None, fut))
        except TplogError as exc:
            fut.set_exception(exc)
        return fut

    def delete_thread(self, thread_id: str, tombstone: Encoded, *, scope: str | None = None) -> Handle[AppendResult]:
        fut: Future[AppendResult] = Future()
        try:
            check_tombstone(thread_id, tombstone)
            self._enqueue(Job(None, (thread_id, tombstone, scope), fut))
        except TplogError as exc:
            fut.set_exception(exc)
        return fut

    def _enqueue(self, job: Job) -> None:
        with self._cond:
            self._check_open()
            self._queue.append(job)
            self._cond.notify_all()

    def _write_loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    break
                batch = [self._queue.popleft()]
                if batch[0].append is not None:
                    while self._queue and self._queue[0].append is not None and len(batch) < MAX_BATCH:
                        batch.append(self._queue.popleft())
            self._run(batch)
        conn = getattr(self._wlocal, "conn", None)
        if conn is not None:
            conn.close()

    def _run(self, batch: list[Job]) -> None:
        try:
            outcomes = self._attempt(batch)
        except BaseException as exc:  # a bug must reach the callers, not kill the writer
            outcomes = [exc] * len(batch)
        for job, out in zip(batch, outcomes, strict=True):
            if isinstance(out, BaseException):
                job.future.set_exception(out)
            else:
                job.future.set_result(out)
        self._notify_local()

    def _attempt(self, batch: list[Job]) -> list[Any]:
        """The batch's outcomes, retrying what a retry can fix: a conflict between
        batched submissions (each alone), a deadlock, a lost connection (once)."""
        lost = False
        for attempt in range(3):
            try:
                conn = self._writer_conn()
                if batch[0].delete is not None:
                    return [self._delete_txn(conn, *batch[0].delete, retrying=lost)]
                return self._append_txn(conn, batch, lookup_all=lost)
            except RETRY as exc:
                if len(batch) > 1:
                    return [self._attempt([job])[0] for job in batch]
                if attempt == 2:
                    return [self._typed(exc, batch)]
            except psycopg.errors.LockNotAvailable as exc:
                return [self._typed(exc, batch)] * len(batch)
            except psycopg.errors.QueryCanceled as exc:
                return [self._typed(exc, batch)] * len(batch)
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                self._drop_writer()
                if lost or (self._closing and attempt):
                    return [self._typed(exc, batch)] * len(batch)
                lost = True  # the COMMIT may have happened: the retry looks every id up
            except psycopg.errors.UndefinedTable as exc:
                return [SchemaError(f"tplog schema {self.schema!r} at {self.url} is missing a table: {exc}")] * len(
                    batch)
            except PostgresUnavailableError as exc:
                return [exc] * len(batch)
        raise AssertionError("unreachable")  # pragma: no cover

    def _typed(self, exc: BaseException, batch: list[Job]) -> TplogError:
        names = sorted({p.thread_id for job in batch for p in (job.append or [])}
                       | ({batch[0].delete[0]} if batch[0].delete else set()))
        what = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        if isinstance(exc, psycopg.errors.LockNotAvailable | psycopg.errors.QueryCanceled):
            return LockTimeoutError(f"PostgreSQL {self.url}: appending to thread {what} waited longer than "
                                    f"lock_timeout for a lock (another writer holds the thread or its log): {exc}")
        return PostgresUnavailableError(f"PostgreSQL {self.url}: append to thread {what} failed: "
                                        f"{str(exc).strip()}; the outcome is unknown, retry with the same event ids")

    def _writer_conn(self) -> psycopg.Connection[Any]:
        conn: psycopg.Connection[Any] | None = getattr(self._wlocal, "conn", None)
        if conn is None or conn.closed:
            conn = self._wlocal.conn = self._connect()
        return conn

    def _drop_writer(self) -> None:
        conn = getattr(self._wlocal, "conn", None)
        if conn is not None:
            try:
                conn.close()
            finally:
                self._wlocal.conn = None

    def _append_txn(self, conn: psycopg.Connection[Any], jobs: list[Job], *, lookup_all: bool) -> list[Any]:
        try:
            return self._append_txn_placed(conn, jobs, lookup_all=lookup_all)
        finally:
            self._wlocal.wlogs = {}

    def _append_txn_placed(self, conn: psycopg.Connection[Any], jobs: list[Job], *, lookup_all: bool) -> list[Any]:
        b = _Batch()
        spelled: dict[tuple[int, str, bytes], str] = {}
        lookups: list[tuple[int, str, str]] = []
        with conn.pipeline(), conn.transaction():
            moves: list[Any] = []
            if self.logs > 1:  # which log each thread lives in (one more round trip while some are new)
                self._wlocal.wlogs, moves = self._placement.plan(conn, [j.append for j in jobs if j.append is not None])
            for job in jobs:
                assert job.append is not None
                for part in job.append:
                    key = self._wkey(part.thread_id, part.scope)
                    spelled.setdefault(key, part.thread_id)
                    if lookup_all or not part.fresh_ids:
                        lookups += [(key[0], key[1], e.event_id) for e in part.events]
            keys = sorted(spelled)
            if lookups and self.logs > 1:
                self._lock_ids(conn, lookups)
            heads = conn.execute(
                "INSERT INTO heads (log_id, scope, tk, thread_id) SELECT * FROM unnest(%s::int[], %s::text[], "
                "%s::bytea[], %s::text[]) ORDER BY 1, 2, 3 ON CONFLICT (log_id, scope, tk) DO UPDATE "
                "SET thread_id = heads.thread_id RETURNING log_id, scope, tk, head, last_position",
                ([k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys], [spelled[k] for k in keys]))
            found = conn.execute(
                "SELECT x.l, x.s, x.eid, e.tk, e.seq, e.position FROM unnest(%s::int[], %s::text[], %s::text[]) "
                "AS x(l, s, eid) JOIN events e ON e.scope = x.s AND e.event_id = x.eid",  # any log: ids are per scope
                ([k[0] for k in lookups], [k[1] for k in lookups], [k[2] for k in lookups])) if lookups else None
            states = conn.execute(
                "SELECT t.log_id, t.scope, t.tk, t.state FROM unnest(%s::int[], %s::text[], %s::bytea[]) "
                "AS x(l, s, tk) JOIN states t ON t.log_id = x.l AND t.scope = x.s AND t.tk = x.tk",
                ([k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys]))
            tracking = conn.execute("SELECT name, status, version FROM tracking")
            loaded = {(r[0], r[1], bytes(r[2])): bytes(r[3]) for r in states.fetchall()}
            for log, scope, tk, head, last in heads.fetchall():
                h = None if head is None else msgspec.structs.replace(decode_head(head), last_position=last)
                key = (log, scope, bytes(tk))
                b.threads[key] = _Thread(log, scope, key[2], h, loaded.get(key))
            for log, scope, eid, tk, seq, pos in found.fetchall() if found is not None else ():
                b.found[(log, scope, eid)] = (bytes(tk), seq, pos)
            live = {n: s == "live" and v == VERSIONS.get(n) for n, s, v in tracking.fetchall()}
            b.live_links, b.live_state = live.get("links", False), live.get("state", False)
            new = {k for k, t in b.threads.items() if t.head is None}
            plans = [self._plan(conn, b, job.append, lookup_all) for job in jobs if job.append is not None]
            if moves:  # threads this batch created in their parent's log: the rows already naming them follow
                Placement.move(conn, [m for m in moves if (m[2], *m[0]) in new and b.threads[(m[2], *m[0])].written])
            bases = self._write_rows(conn, b, keys)
        base = {log: cur.fetchone()[0] for log, cur in bases.items()}
        if self.logs > 1:  # committed: the threads this batch created live where it put them, for good
            for k in new:
                if b.threads[k].written:
                    self._placement.remember((k[1], k[2]), k[0])
        with self._cond:
            self.commits += 1
        out: list[Any] = []
        for plan in plans:
            if isinstance(plan, BaseException):
                out.append(plan)
                continue
            out.append([AppendResult(thread_id=name, first_seq=s0, last_seq=s1,
                                     first_position=p0 if l0 < 0 else base[l0] + p0,
                                     last_position=p1 if l1 < 0 else base[l1] + p1, event_ids=ids, duplicate=dup)
                        for name, s0, s1, (l0, p0), (l1, p1), ids, dup in plan])
        if base:
            self._notify_local()
        return out

    def _lock_ids(self, conn: psycopg.Connection[Any], lookups: list[tuple[int, str, str]]) -> None:
        """An event id names one event per scope, in any log; the UNIQUE constraint only guards one
        log (Citus: a UNIQUE must hold the distribution column). So appends bringing their own ids
        lock each id (a transaction advisory lock, in one global order: no deadlocks) before looking
        it up: of two appends storing one id in two logs, the second then finds the first's."""
        keys = sorted({int.from_bytes(hashlib.blake2b(f"{self.schema}\0{s}\0{eid}".encode(), digest_size=8).digest(),
                                      "big", signed=True) for _, s, eid in lookups})
        conn.execute("SELECT pg_advisory_xact_lock(x.k) FROM unnest(%s::bigint[]) WITH ORDINALITY AS x(k, i) "
                     "ORDER BY x.i", (keys,))

    def _plan(self, conn: psycopg.Connection[Any], b: _Batch, append: Append, lookup_all: bool) -> Any:
        """Check one submission against the batch so far; if it passes, add its rows.
        Returns its results (positions as (log, offset) until the counters are read) or its error."""
        staged: list[tuple[ThreadAppend, _Thread, ThreadHead] | None] = []
        out: list[Any] = []
        try:
            for part in append:
                key = self._wkey(part.thread_id, part.scope)
                t = b.threads[key]
                check_collision(part.thread_id, t.head)
                dup = self._duplicate(b, part, key, lookup_all)
                if dup is not None:
                    out.append(dup)
                    staged.append(None)
                    continue
                head = t.head if t.head is not None else ThreadHead(thread_id=part.thread_id, scope=part.scope)
                check_expected(part.thread_id, head, part.expected)
                if part.fork is not None:
                    pkey = self._wkey(part.fork.parent, part.scope)
                    pt = b.threads.get(pkey)
                    if pt is not None and pt.head is not None:
                        check_fork_parent(part.fork, pt.head)
                    else:  # FOR SHARE: a deletion of the parent waits for this append, or this for it
                        prow = conn.execute("SELECT head FROM heads WHERE log_id = %s AND scope = %s AND tk = %s "
                                            "AND head IS NOT NULL FOR SHARE", pkey).fetchone()
                        check_fork_parent(part.fork, None if prow is None else decode_head(prow[0]))
                stored: Callable[[], list[Any]] | None = None
                state = None
                if part.check_rules:  # the validation rules compare against the thread's state
                    stored = self._stored_reader(conn, t, part.thread_id, part.scope, head)
                    if b.live_state and t.state is None:
                        t.state = ThreadState() if t.loaded_state is None else state_dec.decode(t.loaded_state)
                    # a fork's state row lacks its parent's prefix: the rules take the slow path
                    state = None if head.fork_of else t.state
                staged.append((part, t, advance(part.thread_id, head, part.events, stored, state)))
                out.append(None)
        except TplogError as exc:
            return exc
        for i, st in enumerate(staged):
            if st is not None:
                out[i] = self._apply(b, *st)
                st[1].staged.extend(e.event for e in st[0].events)
        return out

    def _history(self, conn: psycopg.Connection[Any], thread_id: str, scope: str | None,
                 head: ThreadHead | None) -> list[Any]:
        """The thread's stored events (what the rules compare against); a fork's prefix
        from its parent, as a copy would hold them."""
        log, sc, tk = self._wkey(thread_id, scope)
        rows = conn.execute("SELECT seq, position, event_id, value FROM events WHERE log_id = %s AND scope = %s "
                            "AND tk = %s ORDER BY seq", (log, sc, tk), binary=True).fetchall()
        own = [self._event(conn, thread_id, log, tk, *r).event for r in rows]

        def parent(fork_of: str) -> list[Any] | None:
            prow = conn.execute("SELECT head FROM heads WHERE log_id = %s AND scope = %s AND tk = %s AND head IS NOT "
                                "NULL", self._key(fork_of, scope, conn)).fetchone()
            return None if prow is None else self._history(conn, fork_of, scope, decode_head(prow[0]))

        return with_prefix(head, own, parent)

    def _stored_reader(self, conn: psycopg.Connection[Any], t: _Thread, thread_id: str, scope: str | None,
                       head: ThreadHead | None) -> Callable[[], list[Any]]:
        """What reads the thread's events (once; a fork's with its parent's prefix), for the
        rules' slow paths only: a head written before the rules' values were kept, a tool
        return the state cannot place. Reading them for every checked append cost a round
        trip and a decode per event."""

        def load() -> list[Any]:
            if t.stored is None:
                t.stored = self._history(conn, thread_id, scope, head)
            return t.stored + t.staged

        return load

    def _duplicate(self, b: _Batch, part: ThreadAppend, key: tuple[int, str, bytes], lookup_all: bool) -> Any:
        if part.fresh_ids and not lookup_all:
            return None
        log, scope, tk = key
        refs: list[tuple[bytes, int, tuple[int, int]] | None] = []
        for e in part.events:
            k = (log, scope, e.event_id)
            mine = b.ids.get(k)
            if mine is not None:
                refs.append((mine[0], mine[1], (mine[2], mine[3])))
            else:
                got = b.found.get(k)
                refs.append(None if got is None else (got[0], got[1], (-1, got[2])))
        found = retry_refs(part.thread_id, tk, part.events, refs)
        if found is None:
            return None
        # Fresh ids found on a retry after a lost COMMIT were this very append's: not a duplicate to the caller.
        return (part.thread_id, found[0][1], found[-1][1], found[0][2], found[-1][2],
                [e.event_id for e in part.events], not part.fresh_ids)

    def _apply(self, b: _Batch, part: ThreadAppend, t: _Thread, head: ThreadHead) -> Any:
        events, name = part.events, part.thread_id
        log, scope, tk = t.log, t.scope, t.tk
        if b.live_state and t.state is None:
            t.state = ThreadState() if t.loaded_state is None else state_dec.decode(t.loaded_state)
        seq0 = head.version - len(events) + 1
        rows = b.events.setdefault(log, [])
        first = 0
        for i, enc in enumerate(events):
            seq = seq0 + i
            off = b.next_off(log)
            first = first or off
            value = enc.finish(event_key(tk, seq))
            rows.append((off, scope, tk, seq, enc.event_id, value))
            head.stored_bytes += len(value)
            if enc.blob is not None:
                b.blobs[(log, enc.blob[0])] = enc.blob[1]
            b.ids[(log, scope, enc.event_id)] = (tk, seq, log, off)
            if b.live_links:
                self._index_links(b, log, scope, tk, head.thread_id, seq, enc.event, enc.facts)  # as a rebuild
            if t.state is not None:
                feed(t.state, item_of(seq, enc.kind, enc.facts, enc.event))
        if part.fork is not None:
            if b.live_links:  # the prefix's link rows, as the facade read them
                index_inherited(b, self._wkey, log, scope, tk, head.thread_id, part.fork.inherited)
            head = apply_fork(head, part.fork)
        now = self._clock()
        if head.created_ns == 0:
            head.created_ns = now
        head.updated_ns = now
        t.head, t.written, t.last_off = head, True, b.offsets[log]
        return (name, seq0, head.version, (log, first), (log, b.offsets[log]), [e.event_id for e in events], False)

    def _index_links(self, b: _Batch, log: int, scope: str, tk: bytes, name: str, seq: int, ev: Any,
                     facts: Any) -> None:
        index_links(b, self._wkey, log, scope, tk, name, seq, ev, facts)

    def _write_rows(self, conn: psycopg.Connection[Any], b: _Batch, keys: list[tuple[int, str, bytes]]) -> dict[
            int, Any]:
        """Queue the batch's writes (lock order: blobs, children, then each log's counter last)."""
        if b.blobs:
            bl = sorted(b.blobs)
            conn.execute("INSERT INTO blobs SELECT * FROM unnest(%s::int[], %s::bytea[], %s::bytea[]) ORDER BY 1, 2 "
                         "ON CONFLICT DO NOTHING", ([k[0] for k in bl], [k[1] for k in bl], [b.blobs[k] for k in bl]))
        if b.links:
            cols = list(zip(*b.links, strict=True))
            conn.execute("INSERT INTO links SELECT * FROM unnest(%s::int[], %s::text[], %s::bytea[], %s::bytea[], "
                         "%s::bytea[], %s::bigint[], %s::text[])", [list(c) for c in cols])
        if b.children:
            ck = sorted(b.children)
            conn.execute(
                # A deleted thread is nobody's child: a spawn fact naming one adds no row.
                "INSERT INTO children SELECT x.l, x.s, x.p, x.c, x.cid, x.f FROM unnest(%s::int[], %s::text[], "
                "%s::bytea[], %s::bytea[], %s::text[], %s::int[], %s::int[]) AS x(l, s, p, c, cid, f, cl) "
                "WHERE x.f & 1 = 1 OR NOT EXISTS (SELECT 1 FROM heads h WHERE h.log_id = x.cl AND h.scope = x.s "
                "AND h.tk = x.c AND h.deleted) ORDER BY 1, 2, 3, 4 ON CONFLICT (log_id, scope, parent, child) "
                "DO UPDATE SET child_id = CASE WHEN EXCLUDED.flags & 1 = 1 OR children.flags & 1 = 0 THEN "
                "EXCLUDED.child_id ELSE children.child_id END, flags = children.flags | EXCLUDED.flags",
                ([k[0] for k in ck], [k[1] for k in ck], [k[2] for k in ck], [k[3] for k in ck],
                 [b.children[k][0] for k in ck], [b.children[k][1] for k in ck], [b.children[k][2] for k in ck]))
        states = []
        for key in keys:
            t = b.threads[key]
            if t.state is not None:
                raw = head_enc.encode(t.state)
                if raw != t.loaded_state:
                    states.append((*key, raw))
        if states:
            cols = list(zip(*states, strict=True))
            conn.execute("INSERT INTO states SELECT * FROM unnest(%s::int[], %s::text[], %s::bytea[], %s::bytea[]) "
                         "ON CONFLICT (log_id, scope, tk) DO UPDATE SET state = EXCLUDED.state",
                         [list(c) for c in cols])
        # Placeholder heads of threads this batch did not write (their row was only a lock).
        unwritten = [k for k in keys if b.threads[k].head is None]
        if unwritten:
            conn.execute("DELETE FROM heads h USING unnest(%s::int[], %s::text[], %s::bytea[]) AS x(l, s, tk) "
                         "WHERE h.log_id = x.l AND h.scope = x.s AND h.tk = x.tk AND h.head IS NULL",
                         ([k[0] for k in unwritten], [k[1] for k in unwritten], [k[2] for k in unwritten]))
        bases: dict[int, Any] = {}
        for log in sorted(b.events):
            rows = b.events[log]
            hs = [b.threads[k] for k in keys if k[0] == log and b.threads[k].written]
            heads = []
            for t in hs:
                assert t.head is not None
                heads.append((t.scope, t.tk, t.head.thread_id, head_enc.encode(t.head), t.head.updated_ns,
                              t.head.status == "deleted", t.last_off, *finder_cols(t.head)))
            bases[log] = conn.execute(self._COUNTER, self._counter_params(log, rows, heads))
        if bases and self.logs == 1:
            conn.execute(f"NOTIFY {self._channel}".encode())
        return bases

    #: The counter row, then the events and heads it numbers: one statement, the log's lock taken last.
    _COUNTER = (
        "WITH c AS (UPDATE logs SET position = position + %(n)s WHERE log_id = %(log)s "
        "RETURNING position - %(n)s AS base), "
        "ev AS (INSERT INTO events (log_id, position, scope, tk, seq, event_id, value) "
        "SELECT %(log)s, c.base + x.off, x.scope, x.tk, x.seq, x.eid, x.val FROM c, unnest(%(off)s::bigint[], "
        "%(escope)s::text[], %(etk)s::bytea[], %(seq)s::int[], %(eid)s::text[], %(val)s::bytea[]) "
        "AS x(off, scope, tk, seq, eid, val)), "
        "hd AS (UPDATE heads h SET thread_id = x.tid, head = x.head, updated_ns = x.upd, deleted = x.del, "
        "last_position = c.base + x.off, activity = x.act, "
        "agents = ARRAY(SELECT jsonb_array_elements_text(x.ags::jsonb)) "
        "FROM c, unnest(%(hscope)s::text[], %(htk)s::bytea[], %(tid)s::text[], "
        "%(head)s::bytea[], %(upd)s::bigint[], %(del)s::bool[], %(hoff)s::bigint[], %(act)s::smallint[], "
        "%(ags)s::text[]) AS x(scope, tk, tid, head, upd, del, off, act, ags) "
        "WHERE h.log_id = %(log)s AND h.scope = x.scope AND h.tk = x.tk) "
        "SELECT base FROM c"
    )

    @staticmethod
    def _counter_params(log: int, rows: list[tuple[int, str, bytes, int, str, bytes]],
                        heads: list[tuple[str, bytes, str, bytes, int, bool, int, int, str]]) -> dict[str, Any]:
        ev = [list(c) for c in zip(*rows, strict=True)]
        hd = [list(c) for c in zip(*heads, strict=True)] if heads else [[]] * 9
        return {"n": len(rows), "log": log, "off": ev[0], "escope": ev[1], "etk": ev[2], "seq": ev[3], "eid": ev[4],
                "val": ev[5], "hscope": hd[0], "htk": hd[1], "tid": hd[2], "head": hd[3], "upd": hd[4], "del": hd[5],
                "hoff": hd[6], "act": hd[7], "ags": hd[8]}

    def _delete_txn(self, conn: psycopg.Connection[Any], thread_id: str, tomb: Encoded, scope: str | None, *,
                    retrying: bool = False) -> AppendResult:
        log, sc, tk = self._key(thread_id, scope, conn)
        with conn.transaction():
            row = conn.execute("SELECT head, last_position FROM heads WHERE log_id = %s AND scope = %s AND tk = %s "
                               "AND head IS NOT NULL FOR UPDATE", (log, sc, tk)).fetchone()
            head = None if row is None else decode_head(row[0])
            if head is not None and head.status == "deleted" and retrying:
                # After a lost COMMIT: this deletion's own tombstone means it did commit.
                got = conn.execute("SELECT seq, position FROM events WHERE log_id = %s AND scope = %s AND tk = %s "
                                   "AND event_id = %s", (log, sc, tk, tomb.event_id)).fetchone()
                if got is not None:
                    return AppendResult(thread_id=thread_id, first_seq=got[0], last_seq=got[0],
                                        first_position=got[1], last_position=got[1], event_ids=[tomb.event_id])
            head = check_deletable(thread_id, head)
            forks = []
            for (craw,) in conn.execute(
                    "SELECT h.head FROM children c JOIN heads h ON h.scope = c.scope AND h.tk = c.child "
                    "WHERE c.log_id = %s AND c.scope = %s AND c.parent = %s AND h.head IS NOT NULL AND NOT h.deleted",
                    (log, sc, tk)).fetchall():
                ch = decode_head(craw)
                if ch.fork_of is not None and thread_key(ch.fork_of, scope) == tk:
                    forks.append(ch.thread_id)
            check_no_forks(thread_id, forks)
            if conn.execute("SELECT 1 FROM events WHERE scope = %s AND event_id = %s",
                            (sc, tomb.event_id)).fetchone():
                raise tombstone_taken(tomb.event_id)
            with conn.pipeline():
                conn.execute("DELETE FROM events WHERE log_id = %s AND scope = %s AND tk = %s", (log, sc, tk))
                # Link rows live in their target's log; with one log this filter names it.
                conn.execute("DELETE FROM links WHERE scope = %s AND source = %s" + (" AND log_id = 0" if self.logs
                             == 1 else ""), (sc, tk))
                conn.execute("DELETE FROM children WHERE scope = %s AND child = %s", (sc, tk))  # nobody's child
                conn.execute("UPDATE children SET flags = flags & ~2 WHERE log_id = %s AND scope = %s AND parent = %s",
                             (log, sc, tk))
                conn.execute("DELETE FROM children WHERE scope = %s AND (child = %s OR parent = %s) AND flags = 0",
                             (sc, tk, tk))
                conn.execute("DELETE FROM states WHERE log_id = %s AND scope = %s AND tk = %s", (log, sc, tk))
                seq = head.version + 1
                value = tomb.finish(event_key(tk, seq))
                new = msgspec.structs.replace(head, version=seq, status="deleted", updated_ns=self._clock(),
                                              open_turn_agent=None, open_turn_seq=0, stored_bytes=0)
                cur = conn.execute(self._COUNTER, self._counter_params(
                    log, [(1, sc, tk, seq, tomb.event_id, value)],
                    [(sc, tk, new.thread_id, head_enc.encode(new), new.updated_ns, True, 1, *finder_cols(new))]))
                if self.logs == 1:
                    conn.execute(f"NOTIFY {self._channel}".encode())
        pos = cur.fetchone()[0] + 1  # type: ignore[index]
        self._notify_local()
        return AppendResult(thread_id=thread_id, first_seq=seq, last_seq=seq, first_position=pos, last_position=pos,
                            event_ids=[tomb.event_id])

