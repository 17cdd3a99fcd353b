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

import contextlib
import hashlib
import os
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any, Final, ParamSpec, TypeVar

import msgspec
import psycopg
import psycopg.errors
import psycopg_pool

from tplog.backends.contract import (
    EXISTS,
    NO_STREAM,
    Append,
    AppendResult,
    Cursor,
    Direction,
    Handle,
    Inherited,
    RebuildReport,
    ThreadAppend,
    ThreadHead,
    ThreadPage,
    Tracking,
    VerifyReport,
    apply_fork,
    check_append,
    check_fork_parent,
    inherited,
    outgoing,
    own_seqs,
    thread_key,
)
from tplog.backends.memory import VERSIONS, _advance
from tplog.backends.postgres.errors import LockTimeoutError, PostgresUnavailableError, SchemaError
from tplog.backends.postgres.fold import Batch as _Batch
from tplog.backends.postgres.fold import Thread as _Thread
from tplog.backends.postgres.fold import index_inherited, index_links, item_of
from tplog.backends.postgres.placement import Placement
from tplog.backends.postgres.schema import SCHEMA_VERSION, TABLES, check_schema_name, ddl
from tplog.codec import MSG_KIND, Codec, Encoded, Limits
from tplog.errors import (
    HasForksError,
    IdempotencyError,
    InvalidInputError,
    NotFoundError,
    RebuildInProgressError,
    RebuildRequiredError,
    StoreClosedError,
    ThreadDeletedError,
    TplogError,
    WrongExpectedVersionError,
)
from tplog.events import KIND_CODE, RecordedEvent, ThreadDeleted
from tplog.lifecycle import ACTIVITY_CODE, ThreadFilter, matches
from tplog.projections.fold import Item, ThreadState, feed

__all__ = ["PostgresRecorder"]

P = ParamSpec("P")
R = TypeVar("R")
#: Submissions joined into one transaction at most (bounds its size and its lock time).
MAX_BATCH: Final = 256
#: Writer threads (each its own connection and transaction): while one holds its log's counter
#: row through COMMIT, the next checks its batch and writes up to that row, so the log's
#: lock is held back to back instead of idle during every other transaction's first round trip.
WRITERS: Final = 2
_head_enc = msgspec.msgpack.Encoder()
_head_dec = msgspec.msgpack.Decoder(ThreadHead)
_state_dec = msgspec.msgpack.Decoder(ThreadState)
#: Why a whole batch is retried (as single submissions, or once more after a reconnect).
_RETRY = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure, psycopg.errors.UniqueViolation)


def event_key(tk: bytes, seq: int) -> bytes:
    """What a stored value's CRCs are keyed with (as on LMDB): a value copied to another row fails them."""
    return tk + seq.to_bytes(8, "big")


def _finder_cols(head: ThreadHead) -> tuple[int, str]:
    """The head's ``activity`` and ``agents`` columns (agents as JSON: unnest flattens 2-D arrays)."""
    return ACTIVITY_CODE.get(head.activity, 0), msgspec.json.encode(head.agent_ids).decode()


def _scope(scope: str | None) -> str:
    # Scopes are non-empty strings, so '' stands for "unscoped" in a NOT NULL key column.
    return "" if scope is None else scope


def _parse_url(url: str) -> tuple[str, dict[str, str]]:
    """The libpq URL without tplog's own query parameters (``schema``, ``logs``, ``writers``), and those."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise InvalidInputError(f"not a PostgreSQL URL (postgresql://…): {_redact(url)!r}")
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    ours = {k: v for k, v in query if k in ("schema", "logs", "writers")}
    rest = urllib.parse.urlencode([(k, v) for k, v in query if k not in ours])
    return urllib.parse.urlunsplit(parts._replace(query=rest)), ours


def _redact(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(":" + parts.password + "@", ":***@")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def _retried(fn: Callable[P, R]) -> Callable[P, R]:
    """Reads are idempotent: one on a pooled connection the server has since dropped is run
    again (the pool discards a broken connection when it comes back)."""

    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        for _ in range(3):
            try:
                return fn(*args, **kwargs)
            except PostgresUnavailableError:
                time.sleep(0.05)
        return fn(*args, **kwargs)

    run.__doc__, run.__name__ = fn.__doc__, fn.__name__
    return run


class _Held:
    """A named lock: a session advisory lock on its own connection (dies with the process)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def release(self) -> None:
        # Unlocked before the close: a closed session's locks go only when its server process
        # has exited, after close() returned (the next try_lock could still find it held).
        with contextlib.suppress(psycopg.Error):
            self._conn.execute("SELECT pg_advisory_unlock_all()")
        self._conn.close()


class _Job:
    __slots__ = ("append", "delete", "future")

    def __init__(self, append: Append | None, delete: tuple[str, Encoded, str | None] | None,
                 future: Future[Any]) -> None:
        self.append, self.delete, self.future = append, delete, future


class PostgresRecorder:
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

    def __init__(self, url: str, *, schema: str | None = None, logs: int | None = None, create: bool = True,
                 migrate: bool = False, lock_timeout: float = 30.0, pool_size: int = 4, writers: int | None = None,
                 settings: dict[str, str] | None = None,
                 clock: Callable[[], int] = time.time_ns, codec: Codec | None = None,
                 limits: Limits | None = None) -> None:
        conninfo, ours = _parse_url(url)
        self.url = _redact(url)
        self.schema = check_schema_name(schema or ours.get("schema", "tplog"))
        want_logs = logs if logs is not None else int(ours.get("logs", "1"))
        if isinstance(want_logs, bool) or not isinstance(want_logs, int) or not 1 <= want_logs <= 4096:
            raise InvalidInputError(f"logs must be an int in 1..4096, not {want_logs!r}")
        if writers is None:
            try:
                writers = int(ours.get("writers", WRITERS))
            except ValueError:
                raise InvalidInputError(f"writers must be an int in 1..16, not {ours['writers']!r}") from None
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
            raise InvalidInputError(f"bad PostgreSQL URL {self.url!r}: {exc}") from exc
        with self._connect() as conn:
            self.logs = self._open_schema(conn, want_logs if logs is not None or "logs" in ours else None,
                                          create=create, migrate=migrate)
        self._placement = Placement(self.schema, self.logs)
        self._pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
            self._conninfo, kwargs=self._kwargs, min_size=1, max_size=max(1, pool_size), open=True,
            name=f"tplog-{self.schema}", reconnect_timeout=30.0)
        self._cond = threading.Condition()
        self._queue: deque[_Job] = deque()
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

    # ------------------------------------------------------------------ connections and schema

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(self._conninfo, **self._kwargs)
        except psycopg.OperationalError as exc:
            msg = str(exc).strip()
            auth = "password authentication failed" in msg or "no password supplied" in msg
            raise PostgresUnavailableError(f"cannot connect to PostgreSQL at {self.url}: {msg}",
                                           retryable=not auth) from exc

    def _open_schema(self, conn: psycopg.Connection[Any], logs: int | None, *, create: bool, migrate: bool) -> int:
        """Check (or create) the schema; the number of logs it keeps."""
        exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{self.schema}.meta",)).fetchone()
        #: Whether this open created the schema, and the version it found (what ``tplog migrate`` reports).
        self.schema_created, self.schema_found = False, SCHEMA_VERSION
        if not (exists and exists[0]):
            if not create:
                raise SchemaError(f"PostgreSQL database at {self.url} has no tplog schema {self.schema!r}; open it "
                                  f"with create=True (or `tplog migrate {self.url}`) to create it")
            # One creator at a time (two processes opening a new store at once). A session lock taken
            # before the transaction: its snapshot then sees the other creator's tables (catalog
            # lookups inside a transaction that waited on an advisory lock may not).
            conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (f"tplog-ddl:{self.schema}",))
            try:
                with conn.transaction():
                    again = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{self.schema}.meta",)).fetchone()
                    if not (again and again[0]):
                        for stmt in ddl(self.schema, logs or 1):
                            conn.execute(stmt.encode())
                        self.schema_created = True
                        conn.execute("INSERT INTO tracking VALUES ('links', 'live', %s), ('state', 'live', %s)",
                                     (VERSIONS["links"], VERSIONS["state"]))
            finally:
                conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (f"tplog-ddl:{self.schema}",))
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        version = self.schema_found = int(meta.get("schema_version", 0))
        if version > SCHEMA_VERSION:
            raise SchemaError(f"tplog schema {self.schema!r} at {self.url} is version {version}, newer than this "
                              f"tplog understands ({SCHEMA_VERSION}); upgrade tplog")
        if version < SCHEMA_VERSION:
            if not migrate:
                raise SchemaError(f"tplog schema {self.schema!r} at {self.url} is version {version}, older than "
                                  f"{SCHEMA_VERSION}; run `tplog migrate {self.url}` (or open with migrate=True)")
            self._migrate(conn, version)
        stored = int(meta.get("logs", 1))
        if logs is not None and logs != stored:
            raise SchemaError(f"tplog schema {self.schema!r} at {self.url} keeps {stored} logs, not {logs}; "
                              "the number of logs is fixed when the schema is created")
        return stored

    def _migrate(self, conn: psycopg.Connection[Any], version: int) -> None:
        from tplog.backends.postgres.schema import MIGRATIONS

        with conn.transaction():
            # One migrator at a time; another may have upgraded the schema meanwhile.
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"tplog-ddl:{self.schema}",))
            row = conn.execute(f"SELECT value FROM {self.schema}.meta WHERE key = 'schema_version'".encode()
                               ).fetchone()
            version = int(row[0]) if row else version
            while version < SCHEMA_VERSION:
                steps = MIGRATIONS.get(version)
                if steps is None:
                    raise SchemaError(f"tplog schema {self.schema!r} at {self.url} is version {version}: no upgrade "
                                      f"to {SCHEMA_VERSION} exists; copy the store with `tplog copy`")
                for stmt in steps:
                    conn.execute(stmt.encode())
                version += 1
                conn.execute("UPDATE meta SET value = %s WHERE key = 'schema_version'", (str(version),))

    @contextmanager
    def _read(self) -> Iterator[psycopg.Connection[Any]]:
        self._check_open()
        try:
            with self._pool.connection() as conn:
                yield conn
        except psycopg.errors.UndefinedTable as exc:
            raise SchemaError(f"tplog schema {self.schema!r} at {self.url} is missing a table: {exc}") from exc
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
            raise PostgresUnavailableError(f"PostgreSQL at {self.url}: {str(exc).strip()}") from exc

    def _check_open(self) -> None:
        if self._closing:
            raise StoreClosedError(f"PostgreSQL store {self.url} (schema {self.schema}) has been closed")

    def log_of(self, thread_id: str, *, scope: str | None = None) -> int:
        """With several logs: the stored thread's log (a spawned child's is its parent's, see
        ``placement.py``), else the one its id hashes to."""
        return self._key(thread_id, scope)[0]

    def _key(self, thread_id: str, scope: str | None,
             conn: psycopg.Connection[Any] | None = None) -> tuple[int, str, bytes]:
        sc, tk = _scope(scope), thread_key(thread_id, scope)
        if self.logs == 1:
            return 0, sc, tk
        log = self._placement.known((sc, tk))
        if log is None:
            if conn is not None:
                log = self._placement.log(conn, (sc, tk))
            else:
                with self._read() as c:
                    log = self._placement.log(c, (sc, tk))
        return log, sc, tk

    def _wkey(self, thread_id: str, scope: str | None) -> tuple[int, str, bytes]:
        """``_key`` in the writer's transaction: the logs its batch planned."""
        if self.logs > 1:
            sc, tk = _scope(scope), thread_key(thread_id, scope)
            log = getattr(self._wlocal, "wlogs", {}).get((sc, tk))  # this writer thread's batch
            if log is not None:
                return log, sc, tk
        return self._key(thread_id, scope, getattr(self._wlocal, "conn", None))

    # ------------------------------------------------------------------ writes

    def gate(self) -> None:
        """Nothing to hold back: encoding runs while the writer thread waits on the server."""

    def submit(self, append: Append, *, lead: bool = True) -> Handle[list[AppendResult]]:
        fut: Future[list[AppendResult]] = Future()
        try:
            check_append(append)
            self._enqueue(_Job(list(append), None, fut))
        except TplogError as exc:
            fut.set_exception(exc)
        return fut

    def delete_thread(self, thread_id: str, tombstone: Encoded, *, scope: str | None = None) -> Handle[AppendResult]:
        fut: Future[AppendResult] = Future()
        try:
            if not isinstance(tombstone.event, ThreadDeleted):
                raise InvalidInputError(f"thread {thread_id}: a deletion's tombstone must be a ThreadDeleted event")
            self._enqueue(_Job(None, (thread_id, tombstone, scope), fut))
        except TplogError as exc:
            fut.set_exception(exc)
        return fut

    def _enqueue(self, job: _Job) -> None:
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

    def _run(self, batch: list[_Job]) -> None:
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

    def _attempt(self, batch: list[_Job]) -> list[Any]:
        """The batch's outcomes, retrying what a retry can fix: a conflict between
        batched submissions (each alone), a deadlock, a lost connection (once)."""
        lost = False
        for attempt in range(3):
            try:
                conn = self._writer_conn()
                if batch[0].delete is not None:
                    return [self._delete_txn(conn, *batch[0].delete, retrying=lost)]
                return self._append_txn(conn, batch, lookup_all=lost)
            except _RETRY as exc:
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

    def _typed(self, exc: BaseException, batch: list[_Job]) -> TplogError:
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

    def _append_txn(self, conn: psycopg.Connection[Any], jobs: list[_Job], *, lookup_all: bool) -> list[Any]:
        try:
            return self._append_txn_placed(conn, jobs, lookup_all=lookup_all)
        finally:
            self._wlocal.wlogs = {}

    def _append_txn_placed(self, conn: psycopg.Connection[Any], jobs: list[_Job], *, lookup_all: bool) -> list[Any]:
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
                h = None if head is None else msgspec.structs.replace(_head_dec.decode(head), last_position=last)
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
                if t.head is not None and t.head.thread_id.lower() != part.thread_id.lower():
                    raise InvalidInputError(
                        f"thread id {part.thread_id!r} collides with stored thread {t.head.thread_id!r}")
                dup = self._duplicate(b, part, key, lookup_all)
                if dup is not None:
                    out.append(dup)
                    staged.append(None)
                    continue
                head = t.head if t.head is not None else ThreadHead(thread_id=part.thread_id, scope=part.scope)
                if head.status == "deleted":
                    raise ThreadDeletedError(f"thread {part.thread_id} was deleted; its id cannot be reused")
                exp = part.expected
                if (exp == NO_STREAM and head.version != 0) or (exp == EXISTS and head.version == 0) or (
                        isinstance(exp, int) and exp != head.version):
                    raise WrongExpectedVersionError(part.thread_id, exp, head.version)
                if part.fork is not None:
                    pkey = self._wkey(part.fork.parent, part.scope)
                    pt = b.threads.get(pkey)
                    if pt is not None and pt.head is not None:
                        check_fork_parent(part.fork, pt.head)
                    else:  # FOR SHARE: a deletion of the parent waits for this append, or this for it
                        prow = conn.execute("SELECT head FROM heads WHERE log_id = %s AND scope = %s AND tk = %s "
                                            "AND head IS NOT NULL FOR SHARE", pkey).fetchone()
                        check_fork_parent(part.fork, None if prow is None else _head_dec.decode(prow[0]))
                stored: Callable[[], list[Any]] | None = None
                state = None
                if part.check_rules:  # the validation rules compare against the thread's state
                    stored = self._stored_reader(conn, t, part.thread_id, part.scope, head)
                    if b.live_state and t.state is None:
                        t.state = ThreadState() if t.loaded_state is None else _state_dec.decode(t.loaded_state)
                    # a fork's state row lacks its parent's prefix: the rules take the slow path
                    state = None if head.fork_of else t.state
                staged.append((part, t, _advance(part.thread_id, head, part.events, stored, state)))
                out.append(None)
        except TplogError as exc:
            return exc
        for i, st in enumerate(staged):
            if st is not None:
                out[i] = self._apply(b, *st)
                st[1].staged.extend(e.event for e in st[0].events)
        return out

    def _history(self, conn: psycopg.Connection[Any], thread_id: str, scope: str | None,
                 head: ThreadHead | None, *, writer: bool = True) -> list[Any]:
        """The thread's stored events (what the rules compare against); a fork's prefix
        from its parent, as a copy would hold them. ``writer``: keys by the writer's lookup."""
        log, sc, tk = self._wkey(thread_id, scope) if writer else self._key(thread_id, scope, conn)
        rows = conn.execute("SELECT seq, position, event_id, value FROM events WHERE log_id = %s AND scope = %s "
                            "AND tk = %s ORDER BY seq", (log, sc, tk), binary=True).fetchall()
        own = [self._event(conn, thread_id, log, tk, *r).event for r in rows]
        if head is None or head.fork_of is None or head.status != "active":
            return own
        prow = conn.execute("SELECT head FROM heads WHERE log_id = %s AND scope = %s AND tk = %s AND head IS NOT "
                            "NULL", self._key(head.fork_of, scope, conn)).fetchone()
        prefix = (self._history(conn, head.fork_of, scope, _head_dec.decode(prow[0]), writer=writer)[1:head.fork_at]
                  if prow is not None else [])
        return [*own[:1], *prefix, *own[1:]]

    def _inherited(self, conn: psycopg.Connection[Any], thread_id: str, scope: str | None) -> list[Inherited]:
        """What a live fork's prefix indexes under the fork (a rebuild's view, from its parent's
        events in ``conn``'s snapshot); ``[]`` for any other thread."""
        row = conn.execute("SELECT head FROM heads WHERE log_id = %s AND scope = %s AND tk = %s AND head IS NOT "
                           "NULL", self._key(thread_id, scope, conn)).fetchone()
        head = _head_dec.decode(row[0]) if row is not None else None
        if head is None or head.fork_of is None or head.status != "active":
            return []
        prow = conn.execute("SELECT head FROM heads WHERE log_id = %s AND scope = %s AND tk = %s AND head IS NOT "
                            "NULL", self._key(head.fork_of, scope, conn)).fetchone()
        if prow is None:
            return []
        return inherited(self._history(conn, head.fork_of, scope, _head_dec.decode(prow[0]), writer=False),
                         head.fork_at)

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
        if all(r is None for r in refs):
            return None
        if any(r is None for r in refs):
            stored = [e.event_id for e, r in zip(part.events, refs, strict=True) if r is not None]
            raise IdempotencyError(
                f"thread {part.thread_id}: event ids {stored} are already stored but the others of this append are "
                "not; an idempotent retry must resend exactly the original events")
        found = [r for r in refs if r is not None]
        for e, r in zip(part.events, found, strict=True):
            if r[0] != tk:
                raise IdempotencyError(f"event id {e.event_id!r} is already stored in another thread")
        seqs = [r[1] for r in found]
        if seqs != list(range(seqs[0], seqs[0] + len(seqs))):
            raise IdempotencyError(f"thread {part.thread_id}: event ids {[e.event_id for e in part.events]} are "
                                   "stored, but not as one contiguous append in this order")
        # Fresh ids found on a retry after a lost COMMIT were this very append's: not a duplicate to the caller.
        return (part.thread_id, seqs[0], seqs[-1], found[0][2], found[-1][2], [e.event_id for e in part.events],
                not part.fresh_ids)

    def _apply(self, b: _Batch, part: ThreadAppend, t: _Thread, head: ThreadHead) -> Any:
        events, name = part.events, part.thread_id
        log, scope, tk = t.log, t.scope, t.tk
        if b.live_state and t.state is None:
            t.state = ThreadState() if t.loaded_state is None else _state_dec.decode(t.loaded_state)
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
                self._index_links(b, log, scope, tk, name, seq, enc.event, enc.facts)
            if t.state is not None:
                feed(t.state, Item(seq, enc.kind, enc.facts, None if enc.kind == MSG_KIND else enc.event))
        if part.fork is not None:
            if b.live_links:  # the prefix's link rows, as the facade read them
                index_inherited(b, self._wkey, log, scope, tk, name, part.fork.inherited)
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
                "DO UPDATE SET child_id = EXCLUDED.child_id, flags = children.flags | EXCLUDED.flags",
                ([k[0] for k in ck], [k[1] for k in ck], [k[2] for k in ck], [k[3] for k in ck],
                 [b.children[k][0] for k in ck], [b.children[k][1] for k in ck], [b.children[k][2] for k in ck]))
        states = []
        for key in keys:
            t = b.threads[key]
            if t.state is not None:
                raw = _head_enc.encode(t.state)
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
                heads.append((t.scope, t.tk, t.head.thread_id, _head_enc.encode(t.head), t.head.updated_ns,
                              t.head.status == "deleted", t.last_off, *_finder_cols(t.head)))
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
            if row is None:
                raise NotFoundError(f"thread {thread_id} does not exist")
            head = _head_dec.decode(row[0])
            if head.status == "deleted" and retrying:
                # After a lost COMMIT: this deletion's own tombstone means it did commit.
                got = conn.execute("SELECT seq, position FROM events WHERE log_id = %s AND scope = %s AND tk = %s "
                                   "AND event_id = %s", (log, sc, tk, tomb.event_id)).fetchone()
                if got is not None:
                    return AppendResult(thread_id=thread_id, first_seq=got[0], last_seq=got[0],
                                        first_position=got[1], last_position=got[1], event_ids=[tomb.event_id])
            if head.status == "deleted":
                raise ThreadDeletedError(f"thread {thread_id} is already deleted")
            forks = []
            for (craw,) in conn.execute(
                    "SELECT h.head FROM children c JOIN heads h ON h.scope = c.scope AND h.tk = c.child "
                    "WHERE c.log_id = %s AND c.scope = %s AND c.parent = %s AND h.head IS NOT NULL AND NOT h.deleted",
                    (log, sc, tk)).fetchall():
                ch = _head_dec.decode(craw)
                if ch.fork_of is not None and thread_key(ch.fork_of, scope) == tk:
                    forks.append(ch.thread_id)
            if forks:
                raise HasForksError(f"thread {thread_id} has live forks that read its events: {sorted(forks)}; "
                                    "delete them first (Store.delete_thread(..., cascade=True))", sorted(forks))
            if conn.execute("SELECT 1 FROM events WHERE scope = %s AND event_id = %s",
                            (sc, tomb.event_id)).fetchone():
                raise IdempotencyError(f"event id {tomb.event_id!r} is already stored")
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
                    [(sc, tk, new.thread_id, _head_enc.encode(new), new.updated_ns, True, 1, *_finder_cols(new))]))
                if self.logs == 1:
                    conn.execute(f"NOTIFY {self._channel}".encode())
        pos = cur.fetchone()[0] + 1  # type: ignore[index]
        self._notify_local()
        return AppendResult(thread_id=thread_id, first_seq=seq, last_seq=seq, first_position=pos, last_position=pos,
                            event_ids=[tomb.event_id])

    # ------------------------------------------------------------------ reads

    def _event(self, conn: psycopg.Connection[Any], thread_id: str, log: int, tk: bytes, seq: int, position: int,
               event_id: str, value: bytes) -> RecordedEvent:
        where = (thread_id, seq)
        reader = _Blobs(conn, log)
        ev = self.codec.decode_value(event_key(tk, seq), value, reader, where=where)
        hdr = self.codec.header(value, where=where)
        return RecordedEvent(thread_id=thread_id, seq=seq, position=position, event_id=event_id,
                             recorded_at=hdr.recorded_at, event=ev)

    @_retried
    def head(self, thread_id: str, *, scope: str | None = None) -> ThreadHead | None:
        with self._read() as conn:
            row = conn.execute("SELECT head, last_position FROM heads WHERE log_id = %s AND scope = %s AND tk = %s "
                               "AND head IS NOT NULL", self._key(thread_id, scope, conn)).fetchone()
        return None if row is None else msgspec.structs.replace(_head_dec.decode(row[0]), last_position=row[1])

    @_retried
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

    @_retried
    def read_log(self, log: int, *, after: int = 0, limit: int | None = None,
                 scope: str | None = None) -> list[RecordedEvent]:
        if isinstance(log, bool) or not isinstance(log, int) or not 0 <= log < self.logs:
            raise InvalidInputError(f"log {log} does not exist: this store keeps {self.logs} log(s)")
        with self._read() as conn:
            rows = conn.execute(
                "SELECT h.thread_id, e.tk, e.seq, e.position, e.event_id, e.value FROM events e JOIN heads h "
                "ON h.log_id = e.log_id AND h.scope = e.scope AND h.tk = e.tk WHERE e.log_id = %s AND e.scope = %s "
                "AND e.position > %s ORDER BY e.position LIMIT %s", (log, _scope(scope), after, limit),
                binary=True).fetchall()
            return [self._event(conn, r[0], log, bytes(r[1]), r[2], r[3], r[4], r[5]) for r in rows]

    @_retried
    def positions(self) -> Cursor:
        with self._read() as conn:
            return tuple(r[0] for r in conn.execute("SELECT position FROM logs ORDER BY log_id").fetchall())

    def _notify_local(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def wait(self, cursor: Cursor, timeout: float | None = None) -> Cursor:
        """Commits of this process wake waiters at once; other processes' through
        LISTEN/NOTIFY (one log) or a short poll (several logs)."""
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

    @_retried
    def threads(self, *, scope: str | None = None, after: str | None = None, limit: int = 50,
                include_deleted: bool = False, where: ThreadFilter | None = None) -> ThreadPage:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
            raise InvalidInputError("limit must be > 0")
        conds: list[str] = []
        params: list[Any] = [_scope(scope)]
        cur: tuple[int, bytes] | None = None
        if after is not None:
            try:
                raw = bytes.fromhex(after)
                if len(raw) != 24:
                    raise ValueError
            except ValueError as exc:
                raise InvalidInputError(f"cursor {after!r} is not one this store returned") from exc
            cur = (int.from_bytes(raw[:8], "big", signed=True), raw[8:])
        if not include_deleted:
            conds.append("NOT deleted")
        if where is not None:  # the indexed filters in SQL, the others on the decoded heads
            if where.status is not None:
                conds.append("activity = ANY(%s::smallint[])")
                params.append([ACTIVITY_CODE[a] for a in where.status])
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
                    h = msgspec.structs.replace(_head_dec.decode(r[0]), last_position=r[1])
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

    @_retried
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

    @_retried
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

    @_retried
    def has_spawned(self, thread_id: str, *, scope: str | None = None) -> bool:
        """Whether the thread's events (a fork's inherited ones too) name a spawned thread."""
        log, sc, tk = self._key(thread_id, scope)
        with self._read() as conn:
            self._links_live(conn)
            row = conn.execute("SELECT EXISTS (SELECT 1 FROM children WHERE log_id = %s AND scope = %s AND "
                               "parent = %s AND flags & 2 = 2)", (log, sc, tk)).fetchone()
        return bool(row and row[0])

    @_retried
    def thread_state(self, thread_id: str, *, scope: str | None = None) -> ThreadState | None:
        with self._read() as conn:
            live = self._require_live(conn, "state")
            row = conn.execute("SELECT s.state, h.head FROM heads h LEFT JOIN states s ON s.log_id = h.log_id AND "
                               "s.scope = h.scope AND s.tk = h.tk WHERE h.log_id = %s AND h.scope = %s AND "
                               "h.tk = %s AND h.head IS NOT NULL", self._key(thread_id, scope, conn)).fetchone()
        if row is None:
            raise NotFoundError(f"thread {thread_id} does not exist")
        if not live or _head_dec.decode(row[1]).fork_of is not None:
            return None  # stale; or a fork, whose state the facade folds with its parent's prefix
        return ThreadState() if row[0] is None else _state_dec.decode(row[0])

    @_retried
    def thread_events(self, thread_id: str, *, scope: str | None = None,
                      after: int = 0) -> tuple[ThreadHead, list[Any]]:
        log, sc, tk = self._key(thread_id, scope)
        with self._read() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")  # the head and its events agree
            row = conn.execute("SELECT head, last_position FROM heads WHERE log_id = %s AND scope = %s AND tk = %s "
                               "AND head IS NOT NULL", (log, sc, tk)).fetchone()
            if row is None:
                raise NotFoundError(f"thread {thread_id} does not exist")
            head = msgspec.structs.replace(_head_dec.decode(row[0]), last_position=row[1])
            if head.status != "active" or after > head.version:
                after = 0
            rows = conn.execute("SELECT seq, position, event_id, value FROM events WHERE log_id = %s AND scope = %s "
                                "AND tk = %s AND seq > %s ORDER BY seq", (log, sc, tk, after), binary=True).fetchall()
            return head, [self._event(conn, head.thread_id, log, tk, *r).event for r in rows]

    def items(self, thread_id: str, *, scope: str | None = None) -> list[Item]:
        return [item_of(e.seq, KIND_CODE[type(e.event)], e.event) for e in self.read_thread(thread_id, scope=scope)]

    @_retried
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

    # ------------------------------------------------------------------ projections

    @_retried
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

    def try_lock(self, name: str) -> _Held | None:
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
        return _Held(conn)

    def backup(self, dest: str, *, compact: bool = True) -> None:
        """Every table as ``COPY`` binary files in ``dest``, from one snapshot (``pg_dump`` does it too)."""
        os.makedirs(dest, exist_ok=True)
        with self._read() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            for table in TABLES:
                with open(os.path.join(dest, f"{table}.copy"), "wb") as f, conn.cursor().copy(
                        f"COPY {table} TO STDOUT (FORMAT binary)".encode()) as copy:
                    for data in copy:
                        f.write(data)

    @_retried
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
                head = _head_dec.decode(raw)
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


class _Blobs:
    """What the codec reads a blob reference through (``get("blobs", sha)``)."""

    def __init__(self, conn: psycopg.Connection[Any], log: int) -> None:
        self._conn, self._log = conn, log

    def get(self, table: str, key: bytes) -> bytes | None:
        if table != "blobs":
            return None
        row = self._conn.execute("SELECT value FROM blobs WHERE log_id = %s AND sha = %s", (self._log, key)).fetchone()
        return None if row is None else bytes(row[0])
