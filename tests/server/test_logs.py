"""Structured logs of a real ``tplog serve --log-format json``: every line is one JSON object with
a ``thread_id``; the lines of a request about a thread (uvicorn's access line included) and the
store's own lines (an append, a refused append, a delete) name that thread."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from server.server_harness import ROOT, chat_body, free_port
from tplog.integrations.vercel import thread_id_for_chat


def test_json_logs_name_the_thread_on_every_line(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "server.log"
    cmd = [sys.executable, "-m", "tplog", "serve", str(tmp_path / "store"), "--port", str(port),
           "--log-format", "json", "--log-level", "debug"]
    chat = f"logs-{uuid.uuid4().hex[:8]}"
    tid = thread_id_for_chat(chat)
    missing = str(uuid.uuid4())
    with open(log, "wb") as f:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        with httpx.Client(base_url=url, timeout=60) as c:
            assert c.post("/api/chat", json=chat_body(chat, "hello")).status_code == 200
            assert c.get(f"/threads/{chat}/turns").status_code == 200
            assert c.get(f"/threads/{missing}/turns").status_code == 404
            # a stale If-Match: refused (409), and its line names the thread too
            r = c.post("/api/chat", json=chat_body(chat, "again"), headers={"if-match": "1"})
            assert r.status_code == 409, r.text
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
    lines = [ln for ln in log.read_text().splitlines() if ln.strip()]
    records: list[dict[str, Any]] = [json.loads(ln) for ln in lines]  # every line is JSON
    assert records and all({"time", "level", "logger", "thread_id", "message"} <= r.keys() for r in records)
    access = [r for r in records if r["logger"] == "uvicorn.access"]
    turns = [r for r in access if f"/threads/{chat}/turns" in r["message"]]
    assert turns and all(r["thread_id"] == tid for r in turns), access  # the thread the chat id names
    assert [r["thread_id"] for r in access if f"/threads/{missing}/turns" in r["message"]] == [missing]
    chats = [r for r in access if "/api/chat" in r["message"]]
    assert len(chats) == 2 and all(r["thread_id"] == tid for r in chats), chats
    appended = [r for r in records if r["logger"] == "tplog.store" and r["message"] == "appended"]
    assert appended and all(r["thread_id"] == tid for r in appended), appended
    assert appended[0]["first_seq"] == 1 and all(r["last_seq"] >= r["first_seq"] for r in appended)
    startup = [r for r in records if r["logger"] == "uvicorn.error" and "startup complete" in r["message"]]
    assert startup and startup[0]["thread_id"] is None
