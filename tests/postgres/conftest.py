"""PostgreSQL fixtures: one real server per test session (see pg_server.py)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from tplog.backends.postgres import PostgresRecorder

from .pg_server import INSTALL_HINT, PostgresServer, check_marked, find_bindir, shared_dsn


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    check_marked()
    shared = shared_dsn()  # TPLOG_TEST_PG_DSN: a server already running (pg_server.py)
    if shared:
        yield shared
        return
    if find_bindir() is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and no PostgreSQL server binaries: {INSTALL_HINT}")
        pytest.skip(INSTALL_HINT)
    with PostgresServer() as server:
        yield server.dsn


_names = itertools.count()


@pytest.fixture
def schema(pg_dsn: str) -> Iterator[str]:
    """A schema of this test's own, dropped after it."""
    name = f"s{os.getpid()}_{next(_names)}"
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        c.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE".encode())


@pytest.fixture
def open_rec(pg_dsn: str, schema: str) -> Iterator[Callable[..., PostgresRecorder]]:
    """``open_rec(**options)``: a recorder on the test's schema (``url=``/``schema=`` to point elsewhere),
    closed after the test."""
    opened: list[PostgresRecorder] = []

    def make(**kw: Any) -> PostgresRecorder:
        kw.setdefault("schema", schema)
        rec = PostgresRecorder(kw.pop("url", pg_dsn), **kw)
        opened.append(rec)
        return rec

    yield make
    for r in opened:
        r.close()
