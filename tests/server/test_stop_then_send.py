"""Stop, then send (what ``useChat``'s stop button and the next message do), over real HTTP to real
uvicorn servers: the client drops the stream of a running turn mid-way, then sends the next message.
What is recorded for each ``after_stop`` mode, sent at once (within the detach grace: the server may
not have seen the disconnect yet) or later, to the same server or another one on the store (the stop
request then goes through the live table). tests/aisdk does it with the AI SDK client, in Node."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from server.server_harness import ServerProcess, chat_body, wait_until
from tplog.integrations.resume import _DETACH_GRACE

SLOW = "slow 100 50"  # 5 s of words: still running whatever the test does meanwhile


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """Two one-worker servers on one store, ``after_stop="interrupt"`` (the default)."""
    store = tmp_path_factory.mktemp("stop-pair") / "store"
    a = ServerProcess(store).start()
    b = ServerProcess(store).start()
    yield a, b
    a.stop()
    b.stop()


@pytest.fixture(scope="module")
def wait_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path_factory.mktemp("stop-wait") / "store", env={"TPLOG_SERVER_AFTER_STOP": "wait"})
    yield srv.start()
    srv.stop()


@pytest.fixture(scope="module")
def reject_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path_factory.mktemp("stop-reject") / "store", env={"TPLOG_SERVER_AFTER_STOP": "reject"})
    yield srv.start()
    srv.stop()


def _start_and_drop(srv: ServerProcess, t: str, text: str = SLOW) -> str:
    """Start a streaming turn, read it until its second word, drop the connection; the worker's pid."""
    with srv.client() as c, c.stream("POST", "/api/chat", json=chat_body(t, text)) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if "word1" in line:
                return r.headers["x-tplog-worker"]
    raise AssertionError("the stream ended before its second word")


def _agent_turns(srv: ServerProcess, t: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{srv.url}/threads/{t}/turns", timeout=30)
    assert r.status_code == 200, r.text
    return [row for row in r.json()["turns"] if row["turn_type"] == "agent"]


def _user_turns(srv: ServerProcess, t: str) -> int:
    r = httpx.get(f"{srv.url}/threads/{t}/turns", timeout=30)
    return sum(row["turn_type"] == "user" for row in r.json()["turns"])


def _closed(srv: ServerProcess, t: str, n: int) -> list[dict[str, Any]]:
    """The thread's agent turns once ``n`` of them are closed."""
    turns: list[dict[str, Any]] = wait_until(
        lambda: (rows := _agent_turns(srv, t)) and len(rows) == n and all(r["completion_status"] for r in rows)
        and rows, timeout=60)
    return turns


def _statuses(turns: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    return [(r["completion_status"], (r.get("interruption") or {}).get("reason")) for r in turns]


def _send(srv: ServerProcess, t: str) -> httpx.Response:
    with srv.client(timeout=60) as c:
        return c.post("/api/chat", json=chat_body(t, "hello after stop"))


def test_interrupt_sent_at_once_to_the_same_server(pair: tuple[ServerProcess, ServerProcess]) -> None:
    """Within the grace: the new message waits for the server to notice the client went away, then
    interrupts the run (``user_cancelled``) and is answered."""
    a, _ = pair
    t = str(uuid.uuid4())
    _start_and_drop(a, t)
    r = _send(a, t)
    assert r.status_code == 200, r.text
    assert "You said: hello after stop" in r.text
    assert _statuses(_closed(a, t, 2)) == [("interrupted", "user_cancelled"), ("complete", None)]


def test_interrupt_sent_after_the_grace_to_another_server(pair: tuple[ServerProcess, ServerProcess]) -> None:
    """The run is another server's: the stop request goes through the store's live table."""
    a, b = pair
    t = str(uuid.uuid4())
    first = _start_and_drop(a, t)
    time.sleep(_DETACH_GRACE + 0.5)
    r = _send(b, t)
    assert r.status_code == 200, r.text
    assert r.headers["x-tplog-worker"] != first
    assert "You said: hello after stop" in r.text
    assert _statuses(_closed(a, t, 2)) == [("interrupted", "user_cancelled"), ("complete", None)]


def test_a_client_still_reading_makes_the_next_message_a_conflict_after_the_grace(
        pair: tuple[ServerProcess, ServerProcess]) -> None:
    """No stop (the stream is still open): 409 ``turn_open`` once the grace is over, nothing written;
    the run goes on to its end."""
    a, _ = pair
    t = str(uuid.uuid4())
    with a.client() as c, c.stream("POST", "/api/chat", json=chat_body(t, "slow 60 50")) as first:
        lines = first.iter_lines()
        assert any("word1" in line for line in lines)
        t0 = time.monotonic()
        r = _send(a, t)
        waited = time.monotonic() - t0
        assert r.status_code == 409, r.text
        assert r.json()["error"]["code"] == "turn_open" and "still streaming" in r.json()["error"]["message"]
        assert waited >= _DETACH_GRACE
        assert _user_turns(a, t) == 1
        rest = "".join(lines)
    assert "word59" in rest
    assert _statuses(_closed(a, t, 1)) == [("complete", None)]


def test_wait_lets_the_abandoned_run_finish_first(wait_server: ServerProcess) -> None:
    t = str(uuid.uuid4())
    _start_and_drop(wait_server, t, "slow 30 50")
    r = _send(wait_server, t)
    assert r.status_code == 200, r.text
    assert "You said: hello after stop" in r.text
    turns = _closed(wait_server, t, 2)
    assert _statuses(turns) == [("complete", None), ("complete", None)]  # the first ran to its end
    thread = httpx.get(f"{wait_server.url}/threads/{t}", timeout=30).text
    assert "word29" in thread


def test_reject_is_a_conflict_at_once_and_the_run_goes_on(reject_server: ServerProcess) -> None:
    t = str(uuid.uuid4())
    _start_and_drop(reject_server, t, "slow 30 50")
    t0 = time.monotonic()
    r = _send(reject_server, t)
    assert r.status_code == 409, r.text
    assert r.json()["error"]["code"] == "turn_open" and "still running" in r.json()["error"]["message"]
    assert time.monotonic() - t0 < _DETACH_GRACE  # no waiting for a grace
    assert _statuses(_closed(reject_server, t, 1)) == [("complete", None)]
    assert _user_turns(reject_server, t) == 1
