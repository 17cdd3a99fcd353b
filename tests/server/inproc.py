"""The server app in this process (Starlette's TestClient): for tests of HTTP semantics only, which
need no real server (and which mutation testing can reach)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from starlette.testclient import TestClient

from tplog import Store
from tplog.integrations.server import create_app
from tplog.integrations.server.demo_agents import demo_agents


@contextlib.contextmanager
def in_process(store: Store, agents: Mapping[str, Any] | None = None, **options: Any) -> Iterator[TestClient]:
    """A client of the app serving ``store`` (which the test keeps owning, to write and read it directly)."""
    app = create_app(store, agents if agents is not None else demo_agents(), heartbeat=3600, **options)
    with TestClient(app) as client:  # raise_server_exceptions: an exception out of the app fails the test
        yield client
