"""The PostgreSQL backend's shared base: URL parsing, retries, connections and the schema on open
(:class:`PgConnections`), and the small helpers its reads and writes share.
"""


from __future__ import annotations

import contextlib
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any, Final, ParamSpec, TypeVar

import msgspec
import psycopg
import psycopg.errors
import psycopg_pool

from tplog.backends.common import VERSIONS, thread_key
from tplog.backends.contract import Append, ThreadHead
from tplog.backends.dsn import redact, scrub
from tplog.backends.postgres.errors import PostgresUnavailableError, SchemaError
from tplog.backends.postgres.placement import Placement, scope_column
from tplog.backends.postgres.schema import SCHEMA_VERSION, ddl
from tplog.codec import Codec, Encoded
from tplog.errors import InvalidInputError, StoreClosedError
from tplog.lifecycle import ACTIVITY_CODE
from tplog.projections.fold import ThreadState

__all__ = ["MAX_BATCH", "RETRY", "WRITERS", "Blobs", "Held", "Job", "PgConnections", "event_key", "finder_cols",
           "head_enc", "parse_url", "retried", "state_dec"]


P = ParamSpec("P")
R = TypeVar("R")
#: Submissions joined into one transaction at most (bounds its size and its lock time).
MAX_BATCH: Final = 256
#: Writer threads (each its own connection and transaction): while one holds its log's counter
#: row through COMMIT, the next checks its batch and writes up to that row, so the log's
#: lock is held back to back instead of idle during every other transaction's first round trip.
WRITERS: Final = 2
head_enc = msgspec.msgpack.Encoder()
state_dec = msgspec.msgpack.Decoder(ThreadState)
#: Why a whole batch is retried (as single submissions, or once more after a reconnect).
RETRY = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure, psycopg.errors.UniqueViolation)


def event_key(tk: bytes, seq: int) -> bytes:
    """What a stored value's CRCs are keyed with (as on LMDB): a value copied to another row fails them."""
    return tk + seq.to_bytes(8, "big")


def finder_cols(head: ThreadHead) -> tuple[int, str]:
    """The head's ``activity`` and ``agents`` columns (agents as JSON: unnest flattens 2-D arrays)."""
    return ACTIVITY_CODE.get(head.activity, 0), msgspec.json.encode(head.agent_ids).decode()


#: tplog's integer query parameters and their ranges (``?logs=P&writers=N``).
_URL_INTS: Final = {"logs": (1, 4096), "writers": (1, 16)}


def parse_url(url: str) -> tuple[str, dict[str, Any]]:
    """The libpq URL without tplog's own query parameters (``schema``, ``logs``, ``writers``), and
    those (``logs`` and ``writers`` as ints: a bad one is refused here, naming the parameter)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as exc:  # an unclosed '[' of an IPv6 host, ...
        raise InvalidInputError(f"bad PostgreSQL URL {redact(url)!r}: {exc}") from exc
    if parts.scheme not in ("postgresql", "postgres"):
        raise InvalidInputError(f"not a PostgreSQL URL (postgresql://…): {redact(url)!r}")
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    ours: dict[str, Any] = {k: v for k, v in query if k in ("schema", "logs", "writers")}
    for key, (lo, hi) in _URL_INTS.items():
        if key in ours:
            if not ours[key].isascii() or not ours[key].isdigit():
                raise InvalidInputError(f"{key} must be an int in {lo}..{hi}, not {ours[key]!r}")
            ours[key] = int(ours[key])
    rest = urllib.parse.urlencode([(k, v) for k, v in query if k not in ours])
    return urllib.parse.urlunsplit(parts._replace(query=rest)), ours


def retried(fn: Callable[P, R]) -> Callable[P, R]:
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


class Held:
    """A named lock: a session advisory lock on its own connection (dies with the process)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def release(self) -> None:
        # Unlocked before the close: a closed session's locks go only when its server process
        # has exited, after close() returned (the next try_lock could still find it held).
        with contextlib.suppress(psycopg.Error):
            self._conn.execute("SELECT pg_advisory_unlock_all()")
        self._conn.close()


class Job:
    __slots__ = ("append", "delete", "future")

    def __init__(self, append: Append | None, delete: tuple[str, Encoded, str | None] | None,
                 future: Future[Any]) -> None:
        self.append, self.delete, self.future = append, delete, future

class Blobs:
    """What the codec reads a blob reference through (``get("blobs", sha)``)."""

    def __init__(self, conn: psycopg.Connection[Any], log: int) -> None:
        self._conn, self._log = conn, log

    def get(self, table: str, key: bytes) -> bytes | None:
        if table != "blobs":
            return None
        row = self._conn.execute("SELECT value FROM blobs WHERE log_id = %s AND sha = %s", (self._log, key)).fetchone()
        return None if row is None else bytes(row[0])

class PgConnections:
    """Connections and the schema of :class:`~tplog.backends.postgres.recorder.PostgresRecorder`: the
    base its reads, maintenance and writes share. The recorder sets the attributes declared here."""

    url: str
    schema: str
    logs: int
    codec: Codec
    commits: int
    _clock: Callable[[], int]
    _channel: str
    _kwargs: dict[str, Any]
    _conninfo: str
    _placement: Placement
    _pool: psycopg_pool.ConnectionPool[Any]
    _cond: threading.Condition
    _closing: bool
    _closed: bool
    _listener: threading.Thread | None
    _live_until: dict[str, float]
    _wlocal: threading.local
    _writers: list[threading.Thread]

    # ------------------------------------------------------------------ connections and schema

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(self._conninfo, **self._kwargs)
        except psycopg.ProgrammingError as exc:  # a parameter libpq or psycopg refuses (connect_timeout=abc)
            raise InvalidInputError(f"bad PostgreSQL URL {self.url!r}: {scrub(str(exc), self._conninfo)}") from exc
        except psycopg.OperationalError as exc:
            msg = scrub(str(exc).strip(), self._conninfo)
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
                raise SchemaError(f"PostgreSQL database at {self.url} has no tplog schema {self.schema!r}; create it "
                                  f"with `tplog migrate {self.url}` (or open it with create=True)")
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
            except psycopg.errors.InsufficientPrivilege as exc:  # the role may not CREATE in this database
                raise SchemaError(f"cannot create tplog schema {self.schema!r} at {self.url}: "
                                  f"{scrub(str(exc).strip(), self._conninfo)}") from exc
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
        sc, tk = scope_column(scope), thread_key(thread_id, scope)
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
            sc, tk = scope_column(scope), thread_key(thread_id, scope)
            log = getattr(self._wlocal, "wlogs", {}).get((sc, tk))  # this writer thread's batch
            if log is not None:
                return log, sc, tk
        return self._key(thread_id, scope, getattr(self._wlocal, "conn", None))
