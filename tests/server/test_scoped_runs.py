"""Two users of one server who pick the same chat id have two threads (the id is scoped): a message
of one never stops the other's running turn, and each resumes only their own stream. Real uvicorn,
users from a trusted proxy header (issue 37)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from server.server_harness import ServerProcess, chat_body, sse_chunks, wait_until
from tplog.integrations.server.security import ENV_TRUSTED_USER_HEADER

ALICE, BOB = {"x-forwarded-user": "alice"}, {"x-forwarded-user": "bob"}
CHAT = "shared-chat-id"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    s = ServerProcess(tmp_path_factory.mktemp("scoped-runs") / "store",
                      env={ENV_TRUSTED_USER_HEADER: "X-Forwarded-User"})
    yield s.start()
    s.stop()


def _agent_turns(srv: ServerProcess, user: dict[str, str]) -> list[dict[str, Any]]:
    r = httpx.get(f"{srv.url}/threads/{CHAT}/turns", headers=user, timeout=30)
    assert r.status_code == 200, r.text
    return [row for row in r.json()["turns"] if row["turn_type"] == "agent"]


def test_a_message_in_one_scope_never_stops_a_run_in_another(srv: ServerProcess) -> None:
    seen = threading.Event()
    done: list[int] = []

    def alice_streams() -> None:  # stays attached: a run nobody may stop but its own user
        with srv.client() as c, c.stream("POST", "/api/chat", json=chat_body(CHAT, "slow 40 50"), headers=ALICE) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if "word1" in line:
                    seen.set()
            done.append(r.status_code)

    t = threading.Thread(target=alice_streams)
    t.start()
    assert seen.wait(60)
    # Bob's resume of "his" chat: he has none (Alice's stream is hers alone)
    assert httpx.get(f"{srv.url}/api/chat/{CHAT}/stream", headers=BOB, timeout=30).status_code == 204
    # Bob runs a turn of his own under the same chat id, drops its stream, and sends the next message:
    # his run is stopped (after_stop=interrupt), Alice's, still streaming to her, is not his to stop
    with srv.client() as c, c.stream("POST", "/api/chat", json=chat_body(CHAT, "slow 40 50"), headers=BOB) as r:
        assert r.status_code == 200
        next(line for line in r.iter_lines() if "word1" in line)
    with srv.client() as c:
        r = c.post("/api/chat", json=chat_body(CHAT, "hello"), headers=BOB)
        assert r.status_code == 200, r.text
        assert any(ch.get("type") == "finish" for ch in sse_chunks(r.text))
    # Alice's resume reads her own running turn's stream from its start
    with srv.client() as c, c.stream("GET", f"/api/chat/{CHAT}/stream", headers=ALICE) as r:
        assert r.status_code == 200
        first = next(line for line in r.iter_lines() if line.startswith("data: "))
        assert '"type":"start"' in first.replace(" ", "")
    t.join(120)
    assert done == [200]
    alice = wait_until(lambda: (rows := _agent_turns(srv, ALICE)) and rows[-1]["completion_status"] and rows,
                       timeout=60)
    assert [row["completion_status"] for row in alice] == ["complete"]  # not user_cancelled by Bob's message
    bob = [(row["completion_status"], (row.get("interruption") or {}).get("reason")) for row in _agent_turns(srv, BOB)]
    assert bob == [("interrupted", "user_cancelled"), ("complete", None)]
