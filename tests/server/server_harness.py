"""Harness for the HTTP tests: a real tplog server: uvicorn in a subprocess on 127.0.0.1, a free port.

Every wait is bounded. The server runs ``tplog.integrations.server:app_from_env`` (the same
factory ``tplog serve`` uses) with the scripted demo agent, so no network or API key is needed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tplog import Store
from tplog.integrations.server import ENV_DURABILITY, ENV_ON_DISCONNECT, ENV_STORE

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """``python -m uvicorn --factory tplog.integrations.server:app_from_env`` on a free loopback port."""

    def __init__(self, store: Path, *, workers: int = 1, on_disconnect: str = "finish",
                 durability: str = "durable", env: dict[str, str] | None = None, via_serve: bool = False,
                 uvicorn_args: tuple[str, ...] = ()) -> None:
        self.store = store
        self.workers = workers
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = store.parent / f"server-{self.port}.log"
        Store(store, durability=durability).close()  # created once, before the workers open it
        self.env = {**os.environ, ENV_STORE: str(store), ENV_ON_DISCONNECT: on_disconnect,
                    ENV_DURABILITY: durability, "PYTHONPATH": str(ROOT), **(env or {})}
        self.via_serve = via_serve
        self.uvicorn_args = uvicorn_args  # more uvicorn command-line options (not with via_serve)
        self.proc: subprocess.Popen[bytes] | None = None
        self.pids: set[int] = set()

    def start(self, timeout: float = 120.0) -> ServerProcess:
        # generous: on a loaded 2-core CI machine starting workers took over 40 s (no worker had answered)
        cmd = [sys.executable, "-m", "uvicorn", "--factory", "tplog.integrations.server:app_from_env",
               "--host", "127.0.0.1", "--port", str(self.port), "--workers", str(self.workers),
               "--log-level", "warning", "--timeout-graceful-shutdown", "20", *self.uvicorn_args]
        if self.via_serve:  # what `tplog serve STORE --port N --workers N` runs
            cmd = [sys.executable, "-c", "import sys; from tplog.integrations.server import serve; "
                   "serve(sys.argv[1], port=int(sys.argv[2]), workers=int(sys.argv[3]), "
                   "on_disconnect=sys.argv[4], log_level='warning')",
                   str(self.store), str(self.port), str(self.workers), self.env[ENV_ON_DISCONNECT]]
        with open(self.log, "wb") as logf:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=self.env, stdout=logf, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log.read_text()}")
            with contextlib.suppress(httpx.HTTPError):
                # a fresh connection each time, so the kernel spreads them over the workers
                r = httpx.get(f"{self.url}/health", timeout=2.0)
                if r.status_code == 200:
                    self.pids.add(r.json()["pid"])
                    if len(self.pids) >= self.workers:
                        return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"server did not come up with {self.workers} workers in {timeout}s "
                           f"(saw {self.pids}):\n{self.log.read_text()}")

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def client(self, **kw: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=kw.pop("timeout", 30.0), **kw)

    def async_client(self, **kw: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, timeout=kw.pop("timeout", 60.0), **kw)


# --------------------------------------------------------------------------- helpers


def chat_body(thread_id: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"trigger": "submit-message", "id": thread_id,
            "messages": [{"id": f"u-{time.monotonic_ns()}", "role": "user", "parts": [{"type": "text", "text": text}]}],
            **extra}


def sse_chunks(text: str) -> list[Any]:
    from tplog.integrations.vercel import parse_sse

    return list(parse_sse(text))


def sse_frames(text: str) -> list[dict[str, str]]:
    """Parse SSE text into frames ``{"id", "event", "data"}`` (comments and retry lines dropped)."""
    frames: list[dict[str, str]] = []
    cur: dict[str, str] = {}
    for line in text.split("\n"):
        if not line:
            if "data" in cur:
                frames.append(cur)
            cur = {}
            continue
        if line.startswith(":"):
            continue
        key, _, value = line.partition(":")
        cur[key] = value[1:] if value.startswith(" ") else value
    return frames


def wait_until(fn: Any, timeout: float = 15.0, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met in {timeout}s")
        time.sleep(interval)


def read_events(store_path: Path, thread_id: str) -> list[Any]:
    with Store(store_path, readonly=True) as s:
        return s.read(thread_id)


def head(store_path: Path, thread_id: str) -> Any:
    with Store(store_path, readonly=True) as s:
        return s.head(thread_id)


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=1)[:2000]
