"""Issue 37 against real servers (uvicorn in subprocesses): the Host and cross-site checks as
uvicorn delivers requests, ``tplog serve --auth-token-file`` with two workers (the token reaches
both; it never shows in the access log), and the refusal to listen beyond loopback without one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from server.server_harness import ROOT, ServerProcess, chat_body, free_port, head, wait_until
from tplog.errors import NotFoundError
from tplog.integrations.server import Security, ServeError, serve
from tplog.integrations.server.security import check_bind
from tplog.integrations.vercel import thread_id_for_chat

TOKEN = "s3cret-" + "k" * 25


def test_rebinding_and_cross_site_requests_on_a_real_server(server: ServerProcess) -> None:
    with server.client() as c:
        assert c.get("/threads").status_code == 200
        r = c.get("/threads", headers={"host": f"attacker.example:{server.port}"})
        assert r.status_code == 421 and r.headers["x-content-type-options"] == "nosniff"
        assert c.get("/", headers={"host": f"localhost:{server.port}"}).status_code == 200
        chat = f"xsite-{uuid.uuid4().hex[:8]}"
        body = json.dumps(chat_body(chat, "hi")).encode()
        r = c.post("/api/chat", content=body, headers={"content-type": "text/plain", "origin": "https://evil.example"})
        assert r.status_code == 415
        r = c.post("/api/chat", content=body, headers={"content-type": "application/json",
                                                       "origin": "https://evil.example"})
        assert r.status_code == 403
    with pytest.raises(NotFoundError):  # nothing written
        head(server.store, thread_id_for_chat(chat))


def _serve(store: Path, port: int, *args: str) -> subprocess.Popen[bytes]:
    log = open(store.parent / f"serve-{port}.log", "wb")  # noqa: SIM115 - the child keeps it
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPLOG_SERVER_")}
    return subprocess.Popen([sys.executable, "-m", "tplog", "serve", str(store), "--port", str(port), *args],
                            cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)}, stdout=log, stderr=subprocess.STDOUT)


def test_token_with_two_workers_never_logged(tmp_path: Path) -> None:
    (tmp_path / "token").write_text(TOKEN + "\n")
    port = free_port()
    proc = _serve(tmp_path / "store", port, "--workers", "2", "--auth-token-file", str(tmp_path / "token"),
                  "--log-level", "info")
    url = f"http://127.0.0.1:{port}"
    try:
        pids: set[int] = set()

        def both_up() -> bool:
            assert proc.poll() is None, (tmp_path / f"serve-{port}.log").read_text()
            with contextlib.suppress(httpx.HTTPError):
                pids.add(httpx.get(url + "/health", timeout=2).json()["pid"])  # no token needed
            return len(pids) == 2

        wait_until(both_up, timeout=120, interval=0.1)
        auth = {"authorization": f"Bearer {TOKEN}"}
        seen: set[str] = set()
        for _ in range(200):  # fresh connections, until each worker answered (both read the token)
            assert httpx.get(url + "/metrics", timeout=10).status_code == 401
            r = httpx.get(url + "/metrics", headers=auth, timeout=10)
            assert r.status_code == 200
            seen.add(r.headers["x-tplog-worker"])
            if len(seen) == 2:
                break
        assert seen == {str(p) for p in pids}
        with httpx.Client(base_url=url, follow_redirects=True, timeout=10) as browser:  # keeps the cookie
            r = browser.get(f"/?token={TOKEN}")
            assert r.status_code == 200 and r.history[0].status_code == 303 and str(r.url) == url + "/"
            assert browser.get("/threads").status_code == 200
        assert httpx.post(url + "/api/chat", json=chat_body("tok", "hi"), headers=auth, timeout=30).status_code == 200
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
    log = (tmp_path / f"serve-{port}.log").read_text()
    assert "GET /?token=[redacted]" in log  # the access line is there, without the token
    assert TOKEN not in log


def test_beyond_loopback_without_a_token_refuses_to_start(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    proc = _serve(tmp_path / "store", free_port(), "--host", "0.0.0.0")
    assert proc.wait(60) == 2
    out = next(tmp_path.glob("serve-*.log")).read_text()
    assert out.startswith("error: refusing to listen on 0.0.0.0 without authentication") and "--auth-token-file" \
        in out, out
    assert not (tmp_path / "store").exists()  # refused before anything was made
    with pytest.raises(ServeError, match="without authentication"):
        serve(tmp_path / "store", host="0.0.0.0", port=free_port(),
              security=Security(user_header="X-User"))  # a header is no proof: anyone can send it
    assert not (tmp_path / "store").exists()
    for host in ("127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"):
        check_bind(host, Security(), False)
    for host in ("192.0.2.1", "x" * 64 + ".example"):  # not loopback; a name that does not resolve
        with pytest.raises(ServeError):
            check_bind(host, Security(), False)
    check_bind("0.0.0.0", Security(token=TOKEN), False)
    with caplog.at_level(logging.WARNING, logger="tplog.server"):
        check_bind("0.0.0.0", Security(), True)
    assert "without authentication" in caplog.text
