"""Fixtures: real tplog servers (uvicorn subprocesses on 127.0.0.1) shared by the session."""

from __future__ import annotations

from collections.abc import Iterator

# Declared test dependencies (pyproject `test`), imported plainly: a broken install fails the
# server tests instead of skipping them.
import httpx  # noqa: F401
import pydantic_ai  # noqa: F401
import pytest
import starlette  # noqa: F401
import uvicorn  # noqa: F401

from server.server_harness import ServerProcess


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """Two workers, ``on_disconnect="finish"``, durable store; shared by the tests of the session."""
    srv = ServerProcess(tmp_path_factory.mktemp("srv") / "store", workers=2).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def interrupt_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path_factory.mktemp("srv-int") / "store", workers=1, on_disconnect="interrupt").start()
    yield srv
    srv.stop()
