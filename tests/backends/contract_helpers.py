"""The backends every contract test runs over, and helpers to feed them.

A new backend joins the contract suite and the differential test by adding one
entry to :data:`FACTORIES` (a function of a fresh temporary directory); the tests
themselves do not change.
"""

from __future__ import annotations

import atexit
import itertools
import os
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tplog.backends.contract import ANY, ExpectedVersion, Recorder, ThreadAppend
from tplog.backends.lmdb import LmdbRecorder
from tplog.backends.memory import MemoryRecorder
from tplog.codec import Codec, Encoded
from tplog.events import Event, ThreadDeleted
from tplog.ids import new_event_id

_codec = Codec()


def _memory(path: Path, clock: Callable[[], int]) -> Recorder:
    return MemoryRecorder(clock=clock)


def _memory_p4(path: Path, clock: Callable[[], int]) -> Recorder:
    return MemoryRecorder(clock=clock, logs=4)


def _lmdb(path: Path, clock: Callable[[], int]) -> Recorder:
    return LmdbRecorder(path / "lmdb", auto_dictionary=0)


_pg: list[str] = []  # the DSN of this test process's PostgreSQL server, once started
_schemas = itertools.count()


def pg_dsn() -> str:
    """One real PostgreSQL server for the whole test run (tests/postgres/pg_server.py), started on first use.

    Without the server binaries: a skip, or under ``CI=true`` a failure. ``TPLOG_TEST_PG_DSN``: that
    running server instead (tests/postgres/pg_server.py's ``shared_dsn``)."""
    from postgres.pg_server import check_marked, shared_dsn

    check_marked()
    shared = shared_dsn()
    if shared:
        return shared
    if not _pg:
        import pytest
        from postgres.pg_server import INSTALL_HINT, PostgresServer, find_bindir

        if find_bindir() is None:
            if os.environ.get("CI") == "true":
                pytest.fail(f"CI=true and no PostgreSQL server binaries: {INSTALL_HINT}")
            pytest.skip(INSTALL_HINT)
        server = PostgresServer().start()
        atexit.register(server.stop)
        _pg.append(server.dsn)
    return _pg[0]


# per (process, P): emptied schemas, ready for the next recorder (cheaper than new); per process, as
# mutmut's forked children inherit the list and would otherwise share a schema
_free_schemas: dict[tuple[int, int], list[str]] = {}


def _postgres(path: Path, clock: Callable[[], int], logs: int = 1) -> Recorder:
    """A PostgreSQL recorder in a schema of its own, emptied and handed to the next test when it is closed."""
    from tplog.backends.postgres import PostgresRecorder

    class Throwaway(PostgresRecorder):
        def close(self) -> None:
            first = not self._closing
            super().close()
            if first:
                import psycopg

                with psycopg.connect(self._conninfo, autocommit=True) as c, c.transaction():
                    c.execute(f"SET LOCAL search_path TO {self.schema}".encode())
                    for table in ("events", "heads", "links", "children", "states", "blobs"):
                        c.execute(f"DELETE FROM {table}".encode())
                    c.execute("UPDATE logs SET position = 0")
                    c.execute("DROP TABLE IF EXISTS search_rows, search_threads, search_scopes, search_meta")
                    c.execute("UPDATE tracking SET status = 'live'")
                _free_schemas.setdefault((os.getpid(), self.logs), []).append(self.schema)

    free = _free_schemas.get((os.getpid(), logs))
    schema = free.pop() if free else f"t{os.getpid()}_{next(_schemas)}"
    # Durability is not what these tests check (tests/postgres does): no fsync wait per commit.
    return Throwaway(pg_dsn(), schema=schema, clock=clock, pool_size=2, settings={"synchronous_commit": "off"},
                     logs=logs)


#: name → factory(tmp dir, clock). The clock is only honoured where a backend
#: takes one (tests never depend on it but for ordering the differential test).
#: ``memory-p4`` and ``postgres-p4`` keep four logs: the contract suite must hold for any number of logs.
FACTORIES: dict[str, Callable[[Path, Callable[[], int]], Recorder]] = {
    "memory": _memory, "memory-p4": _memory_p4, "lmdb": _lmdb, "postgres": _postgres,
    "postgres-p4": lambda path, clock: _postgres(path, clock, logs=4)}

#: The backends the differential test compares with the reference (``memory``): each
#: with one log, as the reference keeps (positions are then comparable one to one).
DIFFERENTIAL: list[str] = ["lmdb", "postgres"]

#: Differential-test examples per backend where the default (EXAMPLES) would take too
#: long: every step reads everything back, a round trip per read on a server backend.
DIFF_EXAMPLES: dict[str, int] = {"postgres": 100}


@pytest.fixture(name="rec", params=sorted(FACTORIES))
def rec_fixture(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Recorder]:
    """The ``rec`` fixture: a fresh recorder of each backend of :data:`FACTORIES`, closed after the test.
    A test file takes it with ``from contract_helpers import rec_fixture`` (the module-level name is not
    ``rec``, so the tests' ``rec`` parameters shadow nothing)."""
    counter = itertools.count(time.time_ns())
    r = FACTORIES[request.param](tmp_path, lambda: next(counter))
    yield r
    r.close()


def tid() -> str:
    return str(uuid.uuid4())


def encode(events: Sequence[Event], event_ids: Sequence[str] | None = None, *, now: int | None = None) -> list[Encoded]:
    """Encode as the facade does: one recorded_at for the whole append."""
    t = time.time_ns() if now is None else now
    ids = list(event_ids) if event_ids is not None else [new_event_id() for _ in events]
    return [_codec.encode(ev, eid, t) for ev, eid in zip(events, ids, strict=True)]


def part(thread_id: str, events: Sequence[Event], *, ids: Sequence[str] | None = None,
         expected: ExpectedVersion = ANY, scope: str | None = None, now: int | None = None,
         check_rules: bool = False) -> ThreadAppend:
    """One thread's append. The suite tests storage mechanics on toy events (agents
    never registered, placeholder times): only the order rules unless ``check_rules``."""
    return ThreadAppend(thread_id=thread_id, events=encode(events, ids, now=now), expected=expected, scope=scope,
                        fresh_ids=ids is None, check_rules=check_rules)


def tombstone(reason: str | None = None, *, now: int | None = None) -> Encoded:
    import msgspec

    ev = ThreadDeleted(reason=reason if reason is not None else msgspec.UNSET)
    return encode([ev], now=now)[0]


def append(rec: Recorder, *parts: ThreadAppend) -> Any:
    return rec.submit(list(parts)).result(timeout=30)
