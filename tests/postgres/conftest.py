"""PostgreSQL fixtures: one real server per test session (see pg_server.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from .pg_server import INSTALL_HINT, PostgresServer, find_bindir, shared_dsn


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
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
