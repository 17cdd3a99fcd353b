"""Fixtures: real tplog servers (uvicorn subprocesses on 127.0.0.1) shared by the session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("httpx")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("pydantic_ai")

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
