"""The server's limits (issue 37) on a real uvicorn server (one worker, loopback): what only a
real server shows -- a big body not stalling the worker, header and body read deadlines, caps
on open streams per client and in all, and a chat's latency with many streams open."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.server_tails import scenario
from server.server_harness import ServerProcess, chat_body, wait_until
from tplog.integrations.server import ENV_LIMITS, ServerLimits
from tplog.integrations.server.limits import H11_PROTOCOL

LIMITS = ServerLimits(max_streams=6, max_streams_per_client=4, header_timeout=1.0, body_timeout=1.0)


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path_factory.mktemp("lim") / "store", env={ENV_LIMITS: LIMITS.to_env()},
                        uvicorn_args=("--http", H11_PROTOCOL)).start()
    yield srv
    srv.stop()


def _connect(srv: ServerProcess, source: str = "127.0.0.1") -> socket.socket:
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10, source_address=(source, 0))
    return s


def _status(s: socket.socket) -> tuple[int, bytes]:
    """The status of the response on ``s`` and what came with it (headers, maybe some body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n")[1:]:  # a body of known length: all of it (an SSE stream's: what came)
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            while len(body) < int(value) and (chunk := s.recv(65536)):
                body += chunk
    return int(data.split(b" ", 2)[1]), head + b"\r\n\r\n" + body


def _open_tail(srv: ServerProcess, tid: str, source: str = "127.0.0.1") -> tuple[socket.socket, int, bytes]:
    s = _connect(srv, source)
    s.sendall(f"GET /threads/{tid}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    st, data = _status(s)
    return s, st, data


def _closed_within(s: socket.socket, limit: float) -> float:
    """Seconds until the server closed ``s`` (reading what it sends); fails past ``limit``."""
    t0 = time.monotonic()
    s.settimeout(limit)
    try:
        while s.recv(65536):
            pass
    except TimeoutError:
        raise AssertionError(f"the server kept the connection open for over {limit} s") from None
    return time.monotonic() - t0


def test_header_deadline_closes_half_sent_requests(limited: ServerProcess) -> None:
    for partial in (b"", b"GET /health HT", b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"):
        with _connect(limited) as s:
            s.sendall(partial)
            assert _closed_within(s, 8.0) < 5.0
    with _connect(limited) as s:  # after a response, the next request's headers get the deadline too
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        st, _ = _status(s)
        assert st == 200
        s.sendall(b"GET /health HTTP/1.1\r\n")
        assert _closed_within(s, 8.0) < 5.0


def test_body_deadline_is_408_and_nothing_written(limited: ServerProcess) -> None:
    t = str(uuid.uuid4())
    body = json.dumps(chat_body(t, "hello")).encode()
    with _connect(limited) as s:
        s.sendall(b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body[:10])
        s.settimeout(8.0)
        st, data = _status(s)
    assert st == 408 and b'"code":"body_timeout"' in data
    with limited.client() as c:
        assert c.get(f"/threads/{t}").status_code == 404


def test_a_huge_chat_body_is_refused_fast_and_health_stays_responsive(limited: ServerProcess) -> None:
    t = str(uuid.uuid4())
    parts = [{"type": "text", "text": "x" * 20} for _ in range(40_000)]
    body = json.dumps({"trigger": "submit-message", "id": t,
                       "messages": [{"id": "u1", "role": "user", "parts": parts}]}).encode()
    assert len(body) > 1_000_000
    got: dict[str, Any] = {}
    lat: list[float] = []
    done = threading.Event()

    def post() -> None:
        with limited.client() as c:
            t0 = time.perf_counter()
            got["r"] = c.post("/api/chat", content=body, headers={"content-type": "application/json"})
            got["s"] = time.perf_counter() - t0
        done.set()

    th = threading.Thread(target=post)
    with limited.client() as c:
        th.start()
        while not done.wait(0.05) and len(lat) < 200:
            t0 = time.perf_counter()
            assert c.get("/health").status_code == 200
            lat.append(time.perf_counter() - t0)
    th.join(60)
    r = got["r"]
    assert r.status_code == 413 and r.json()["error"]["code"] == "too_many_parts", r.text
    assert got["s"] < 3.0, got["s"]  # it took 5.8 s to validate, /health stalled 3.9 s meanwhile
    assert max(lat, default=0.0) < 1.0, lat
    with limited.client() as c:
        assert c.get(f"/threads/{t}").status_code == 404


def test_open_streams_are_capped_per_client_and_in_all(limited: ServerProcess) -> None:
    t = str(uuid.uuid4())
    with limited.client() as c:
        assert c.post("/api/chat", json=chat_body(t, "hello")).status_code == 200
    socks: list[socket.socket] = []
    try:
        for _ in range(4):
            s, st, _ = _open_tail(limited, t)
            socks.append(s)
            assert st == 200
        s, st, data = _open_tail(limited, t)  # a 5th from this address: too many for one client
        s.close()
        assert st == 429 and b'"code":"too_many_streams"' in data
        for _ in range(2):  # another client address still gets a place, up to the total
            s, st, _ = _open_tail(limited, t, source="127.0.0.2")
            socks.append(s)
            assert st == 200
        s, st, data = _open_tail(limited, t, source="127.0.0.3")
        s.close()
        assert st == 503 and b'"code":"too_many_streams"' in data
        with limited.client() as c:  # resumed chat streams count too; reads without follow do not
            assert c.get(f"/api/chat/{t}/stream").status_code == 503
            assert c.get(f"/threads/{t}/events", params={"follow": "0"}).status_code == 200
        socks.pop(0).close()  # a closed tail gives its place back

        def reopened() -> bool:
            s, st, _ = _open_tail(limited, t)
            if st == 200:
                socks.append(s)
                return True
            s.close()
            return False

        wait_until(reopened, timeout=10, interval=0.1)
    finally:
        for s in socks:
            s.close()


def test_open_tails_and_resumed_streams_leave_a_chat_fast(tmp_path: Path) -> None:
    """A small version of ``python -m benchmarks.server_tails``: 300 idle tails and 30 resumed
    streams of a running turn. Before, every tail woke on every append (a chat was ~5x slower)."""
    lim = ServerLimits(max_streams=400, max_streams_per_client=400)
    srv = ServerProcess(tmp_path / "store", env={ENV_LIMITS: lim.to_env()}).start()
    try:
        pid = next(iter(srv.pids))
        res = asyncio.run(scenario(srv.url, srv.port, pid, tails=300, readers=30, n_chats=30))
    finally:
        srv.stop()
    # Before: 5x the server CPU per chat (every tail woke on each of its appends), p50 4x. CPU per
    # chat is what the fix changes and is steady on a shared 2-core machine; latency is not (and
    # p99 of 30 samples is one sample): its bound is looser.
    assert res["server_cpu_ms_per_chat_loaded"] < 2.0 * res["server_cpu_ms_per_chat_idle"], res
    assert res["ratio_p50"] < 3.0, res
