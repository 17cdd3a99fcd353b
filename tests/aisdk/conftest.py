"""Fixtures: the real Vercel AI SDK client (npm ``ai`` 6.x and 7.x, installed here by ``npm ci``) and
real tplog servers for it to talk to.

Without Node.js/npm the tests skip, except under ``CI=true``, where they fail (``.ci/run`` installs
them). ``npm ci`` runs once per lockfile: the installed lockfile's hash is kept in node_modules.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from server.server_harness import ServerProcess

HERE = Path(__file__).resolve().parent
MAJORS = (6, 7)


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        msg = f"the AI SDK client tests need {tool} (Node.js 20+): apt-get install nodejs npm"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and no {tool}: {msg}")
        pytest.skip(msg)
    return path


@pytest.fixture(scope="session")
def node() -> str:
    """The node binary, with the pinned ``ai`` packages installed in tests/aisdk/node_modules."""
    exe = _need("node")
    npm = _need("npm")
    version = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60).stdout.strip()
    major, minor = (int(x) for x in version.lstrip("v").split(".")[:2])
    if (major, minor) < (20, 19):  # vite 8 (the useChat page's build) needs 20.19+; the ai packages 18+
        msg = f"the AI SDK client tests need Node.js 20.19 or later, not {version}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true: {msg}")
        pytest.skip(msg)
    lock = HERE / "package-lock.json"
    stamp = HERE / "node_modules" / ".tplog-lock-sha256"
    want = hashlib.sha256(lock.read_bytes()).hexdigest()
    # One install for all pytest-xdist workers: `npm ci` empties node_modules under the others' feet.
    with open(HERE / ".npm-install.lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if not stamp.exists() or stamp.read_text() != want:
            r = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=HERE,
                               capture_output=True, text=True, timeout=600)
            assert r.returncode == 0, f"npm ci failed:\n{r.stdout}\n{r.stderr}"
            stamp.write_text(want)
    return exe


class SdkClient:
    """``node client.mjs MAJOR SCENARIO CONFIG``: one chat session of the real client; its JSON report."""

    def __init__(self, node: str) -> None:
        self.node = node

    def run(self, major: int, scenario: str, timeout: float = 120.0, **config: Any) -> dict[str, Any]:
        r = subprocess.run([self.node, "client.mjs", str(major), scenario, json.dumps(config)], cwd=HERE,
                           capture_output=True, text=True, timeout=timeout)
        assert r.returncode == 0, f"client.mjs {major} {scenario} failed:\n{r.stdout}\n{r.stderr}"
        out: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
        assert out["major"] == major and out["version"].startswith(f"{major}.")
        return out


@pytest.fixture(scope="session")
def sdk(node: str) -> SdkClient:
    return SdkClient(node)


@pytest.fixture(scope="session")
def sdk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One worker, the defaults of ``tplog serve``."""
    srv = ServerProcess(tmp_path_factory.mktemp("aisdk") / "store", workers=1).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def parts_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """``TPLOG_SERVER_TP_CHUNKS=parts``: the ``data-tp-*`` chunks kept as message parts (tplog before issue 28)."""
    srv = ServerProcess(tmp_path_factory.mktemp("aisdk-parts") / "store", workers=1,
                        env={"TPLOG_SERVER_TP_CHUNKS": "parts"}).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """Two server processes on one LMDB store (what ``--workers 2`` is, with the worker chosen by the test)."""
    store = tmp_path_factory.mktemp("aisdk-pair") / "store"
    a = ServerProcess(store, workers=1).start()
    b = ServerProcess(store, workers=1).start()
    yield a, b
    a.stop()
    b.stop()
