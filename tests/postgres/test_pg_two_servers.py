"""Two ``tplog serve`` processes, in separate working directories and sharing no files, on one
PostgreSQL store (one of them with two workers), taking chats concurrently over real HTTP."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg
import pytest

from tplog import Store
from tplog.protocol import UserTurn

ROOT = Path(__file__).resolve().parents[2]
_names = itertools.count()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Serve:
    """``python -m tplog serve URL --port P --workers W`` run in ``cwd``."""

    def __init__(self, url: str, cwd: Path, workers: int) -> None:
        cwd.mkdir()
        self.url, self.cwd, self.workers = url, cwd, workers
        self.log = cwd / "serve.log"
        self.pids: set[int] = set()
        self.tries = 0
        self._start()

    def _start(self) -> None:
        self.tries += 1
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        with open(self.log, "wb") as logf:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tplog", "serve", self.url, "--port", str(self.port), "--workers",
                 str(self.workers), "--shutdown-grace", "5"], cwd=self.cwd, stdout=logf, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONPATH": str(ROOT)})

    def wait_up(self, timeout: float = 180.0) -> None:  # generous: workers traced by coverage start slowly
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                if "in use" in self.log.read_text() and self.tries < 5:  # another process took the free port
                    self._start()
                    continue
                raise AssertionError(f"tplog serve exited with {self.proc.returncode}:\n{self.log.read_text()}")
            with contextlib.suppress(httpx.HTTPError):
                r = httpx.get(f"{self.base}/health", timeout=2.0)  # a new connection: any worker may answer
                if r.status_code == 200:
                    self.pids.add(r.json()["pid"])
                    if len(self.pids) >= self.workers:
                        return
            time.sleep(0.1)
        raise AssertionError(f"tplog serve did not answer with {self.workers} workers in {timeout}s "
                             f"(saw {self.pids}):\n{self.log.read_text()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def _chat(base: str, thread_id: str, text: str) -> None:
    body = {"trigger": "submit-message", "id": thread_id,
            "messages": [{"id": f"u-{uuid.uuid4()}", "role": "user", "parts": [{"type": "text", "text": text}]}]}
    with httpx.Client(base_url=base, timeout=120.0) as c:
        r = c.post("/api/chat", json=body)
        assert r.status_code == 200, (r.status_code, r.text[:500])
        assert "data-tp-" in r.text  # the recorded stream, to its end


class _Tail:
    """A live ``GET /threads/{id}/events`` on one server, read in a thread: the seqs it streams."""

    def __init__(self, base: str, thread_id: str, after: int) -> None:
        self.seqs: list[int] = []
        self.target: int | None = None
        self.error: BaseException | None = None
        self.worker = ""
        self._t = threading.Thread(target=self._run, args=(base, thread_id, after), daemon=True)
        self.opened = threading.Event()
        self._t.start()

    def _run(self, base: str, thread_id: str, after: int) -> None:
        try:
            with httpx.Client(base_url=base, timeout=httpx.Timeout(120.0)) as c, c.stream(
                    "GET", f"/threads/{thread_id}/events?after={after}") as r:
                assert r.status_code == 200
                self.worker = r.headers["x-tplog-worker"]
                self.opened.set()
                for line in r.iter_lines():
                    if line.startswith("id: "):
                        self.seqs.append(int(line[4:]))
                    if self.target is not None and self.seqs and self.seqs[-1] >= self.target:
                        return
        except BaseException as exc:  # reported by finish()
            self.error = exc
            self.opened.set()

    def finish(self, target: int, timeout: float = 90.0) -> list[int]:
        """The seqs seen once the tail reached ``target`` (the stream stays open: the server's
        shutdown ends it)."""
        self.target = target
        deadline = time.monotonic() + timeout
        while not (self.seqs and self.seqs[-1] >= target) and self.error is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert self.error is None, self.error
        assert self.seqs and self.seqs[-1] >= target, f"tail saw {self.seqs[-3:]} of {target} in {timeout}s"
        return list(self.seqs)


@pytest.fixture(params=[1, 4], ids=["P1", "P4"])
def url(pg_dsn: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """One log (tails woken by LISTEN/NOTIFY) and four (tails poll every log)."""
    name = f"srv{os.getpid()}_{next(_names)}"
    yield f"{pg_dsn}?schema={name}&logs={request.param}"
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        c.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE".encode())


def _user_texts(store: Store, thread_id: str) -> list[str]:
    doc = store.thread(thread_id)
    out = []
    for turn in doc.turns:
        if isinstance(turn, UserTurn):
            out += [p.content for p in turn.parts if isinstance(getattr(p, "content", None), str)]
    return out


def test_two_servers_share_one_postgres_store(tmp_path: Path, url: str) -> None:
    servers = [_Serve(url, tmp_path / "a", workers=2), _Serve(url, tmp_path / "b", workers=1)]
    try:
        for s in servers:
            s.wait_up()
        a, b = servers
        assert not (a.pids & b.pids)
        threads = [str(uuid.uuid4()) for _ in range(4)]
        # each thread starts on one server; its live tail is opened on the other one
        for i, t in enumerate(threads):
            _chat(servers[i % 2].base, t, f"{t} chat 0")
        with Store(url) as store:
            versions = {t: store.head(t).version for t in threads}
        tails = {t: _Tail(servers[(i + 1) % 2].base, t, versions[t]) for i, t in enumerate(threads)}
        for tail in tails.values():
            assert tail.opened.wait(60) and tail.error is None

        def conversation(i: int) -> None:  # chats of one thread go to both servers, in turn
            t = threads[i]
            for k in range(1, 3):
                _chat(servers[(i + k) % 2].base, t, f"{t} chat {k}")

        with ThreadPoolExecutor(len(threads)) as pool:
            list(pool.map(conversation, range(len(threads))))

        with Store(url) as store:
            for i, t in enumerate(threads):
                # every chat recorded exactly once, in order, whichever server took it
                assert _user_texts(store, t) == [f"{t} chat {k}" for k in range(3)]
                head = store.head(t)
                assert head.user_turns == 3 and head.agent_turns == 3 and head.open_turn_agent is None
                seen = tails[t].finish(head.version)
                # the other server's tail streamed every event after the first chat, once each, live
                assert seen == list(range(versions[t] + 1, head.version + 1)), (i, seen)
            assert store.verify().problems == []
        for s in servers:  # sharing no files: each working directory holds only its own log
            assert sorted(p.name for p in s.cwd.iterdir()) == ["serve.log"]
    finally:
        for s in servers:
            s.stop()
    for s in servers:
        assert s.proc.returncode == 0, s.log.read_text()[-3000:]

