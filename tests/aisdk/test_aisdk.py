"""The real Vercel AI SDK client (npm ``ai``, latest 6.x and 7.x) against ``tplog serve``.

``client.mjs`` drives the SDK's framework-agnostic chat class (what ``useChat`` wraps) over
``DefaultChatTransport`` and real HTTP; these tests assert on its report and on the store.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from server.server_harness import ServerProcess

from aisdk.conftest import MAJORS, SdkClient


def texts(msg: dict[str, Any]) -> str:
    return "".join(p["text"] for p in msg["parts"] if p["type"] == "text")


def tool_parts(msg: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in msg["parts"] if p["type"].startswith("tool-")]


def check_clean(out: dict[str, Any]) -> None:
    """No error in the chat, every response 2xx, and the SDK's own validation accepts the history."""
    assert out["status"] == "ready", out
    assert out["error"] is None, out["error"]
    assert all(200 <= r["status"] < 300 for r in out["requests"]), out["requests"]
    assert out["validation"] == {"ok": True}, out["validation"]


def turns(server: ServerProcess, chat_id: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{server.url}/threads/{chat_id}/turns", timeout=30)
    assert r.status_code == 200, r.text
    rows: list[dict[str, Any]] = r.json()["turns"]
    return rows


@pytest.mark.parametrize("major", MAJORS)
def test_text(sdk: SdkClient, sdk_server: ServerProcess, major: int) -> None:
    out = sdk.run(major, "text", api=f"{sdk_server.url}/api/chat")
    check_clean(out)
    msgs = out["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user", "assistant"]
    assert texts(msgs[1]) == "You said: hello there" and texts(msgs[3]) == "You said: and again"
    assert [t["turn_type"] for t in turns(sdk_server, out["chatId"])] == ["user", "agent", "user", "agent"]


@pytest.mark.parametrize("major", MAJORS)
def test_tools(sdk: SdkClient, sdk_server: ServerProcess, major: int) -> None:
    out = sdk.run(major, "tools", api=f"{sdk_server.url}/api/chat")
    check_clean(out)
    (call,) = tool_parts(out["messages"][-1])
    assert call["type"] == "tool-get_weather" and call["state"] == "output-available"
    assert call["input"] == {"city": "Paris"} and call["output"] == "sunny and 20 °C in Paris"
    assert "get_weather: sunny and 20 °C in Paris." in texts(out["messages"][-1])


@pytest.mark.parametrize("major", MAJORS)
def test_approvals(sdk: SdkClient, sdk_server: ServerProcess, major: int) -> None:
    """SDK v6+ tool approval: approval-requested, addToolApprovalResponse, the run goes on."""
    out = sdk.run(major, "approvals", api=f"{sdk_server.url}/api/chat")
    check_clean(out)
    assert out["notes"]["approvalRequested"] is True
    assert [m["role"] for m in out["messages"]] == ["user", "assistant"]  # one assistant message, two runs
    (call,) = tool_parts(out["messages"][-1])
    assert call["type"] == "tool-delete_file" and call["state"] == "output-available"
    assert call["output"] == "deleted /tmp/x"
    th = turns(sdk_server, out["chatId"])
    assert [t["turn_type"] for t in th] == ["user", "agent", "agent"]


@pytest.mark.parametrize("major", MAJORS)
def test_client_side_tool_results(sdk: SdkClient, sdk_server: ServerProcess, major: int) -> None:
    """A tool the browser runs: onToolCall, addToolOutput, the server resumes the deferred call."""
    out = sdk.run(major, "client_tools", api=f"{sdk_server.url}/api/chat")
    check_clean(out)
    assert out["notes"]["toolCalls"] == ["get_location"]
    (call,) = tool_parts(out["messages"][-1])
    assert call["state"] == "output-available" and call["output"] == "Berlin"
    assert "get_location: Berlin." in texts(out["messages"][-1])
    th = turns(sdk_server, out["chatId"])
    returns = [p for t in th if t["turn_type"] == "agent" for msg in t["messages"]
               for p in msg.get("parts", []) if p["part_kind"] == "tool-return"]
    assert [(p["tool_name"], p["content"]) for p in returns] == [("get_location", "Berlin")]


TP_NOTICES = {"data-tp-user_turn", "data-tp-turn_start", "data-tp-message", "data-tp-turn_end"}


@pytest.mark.parametrize("major", MAJORS)
def test_a_reloaded_chat_gets_the_messages_with_their_ids(sdk: SdkClient, sdk_server: ServerProcess,
                                                         major: int) -> None:
    """``GET /api/chat/{id}/messages``: the thread as UI messages with the ids the chat showed (an
    approval's two runs are one assistant message); the SDK validates them and goes on from them."""
    first = sdk.run(major, "approvals", api=f"{sdk_server.url}/api/chat")
    check_clean(first)
    again = sdk.run(major, "reload", api=f"{sdk_server.url}/api/chat", chatId=first["chatId"])
    check_clean(again)
    saved = again["notes"]["saved"]
    assert [(m["id"], m["role"]) for m in saved] == [(m["id"], m["role"]) for m in first["messages"]]
    assert [texts(m) for m in saved] == [texts(m) for m in first["messages"]]
    (call,) = tool_parts(saved[-1])
    assert (call["type"], call["state"], call["output"]) == ("tool-delete_file", "output-available", "deleted /tmp/x")
    assert [m["role"] for m in again["messages"]] == ["user", "assistant", "user", "assistant"]
    assert texts(again["messages"][-1]) == "You said: after reload"
    kept = [t["vercel:message_id"] for t in turns(sdk_server, first["chatId"])]
    one_per_message = [k for i, k in enumerate(kept) if i == 0 or k != kept[i - 1]]
    assert [m["id"] for m in again["messages"]] == one_per_message  # the reloaded chat, /turns: the same ids
    r = httpx.get(f"{sdk_server.url}/api/chat/never-used/messages", timeout=30)
    assert r.status_code == 200 and r.json() == []


@pytest.mark.parametrize("major", MAJORS)
def test_tp_chunks_transient_by_default(sdk: SdkClient, sdk_server: ServerProcess, parts_server: ServerProcess,
                                         major: int) -> None:
    """Transient ``data-tp-*`` chunks reach ``onData`` but stay out of the messages the client sends
    back; ``parts`` mode keeps them as parts (and the requests grow with them)."""
    lean = sdk.run(major, "short_chat", api=f"{sdk_server.url}/api/chat")
    fat = sdk.run(major, "short_chat", api=f"{parts_server.url}/api/chat")
    check_clean(lean)
    check_clean(fat)
    lean_types = {p["type"] for m in lean["messages"] for p in m["parts"]}
    fat_types = {p["type"] for m in fat["messages"] for p in m["parts"]}
    assert not lean_types & TP_NOTICES
    assert fat_types >= TP_NOTICES
    assert {d["type"] for d in lean["data"]} == TP_NOTICES  # the client still sees them, in onData
    # the same conversation otherwise
    assert [texts(m) for m in lean["messages"]] == [texts(m) for m in fat["messages"]]
    lean_req, fat_req = lean["requests"][-1]["bodyBytes"], fat["requests"][-1]["bodyBytes"]
    assert lean["bytes"] < fat["bytes"] and lean_req < fat_req
    print(f"[ai {lean['version']}] history after a short chat: {lean['bytes']} bytes transient, "  # -s shows it
          f"{fat['bytes']} bytes as parts; last request body {lean_req} vs {fat_req} bytes")


@pytest.mark.parametrize("major", MAJORS)
def test_message_ids_kept_with_the_thread(sdk: SdkClient, sdk_server: ServerProcess, major: int) -> None:
    """``start`` carries the server's assistant message id; the thread keeps the user's and the
    assistant's UI message ids, so ``/turns`` and the chat agree (an approval's continuation too)."""
    out = sdk.run(major, "text", api=f"{sdk_server.url}/api/chat")
    check_clean(out)
    th = turns(sdk_server, out["chatId"])
    assert [m["id"] for m in out["messages"]] == [t["vercel:message_id"] for t in th]
    assert all(m["id"].startswith("msg-") for m in out["messages"] if m["role"] == "assistant")

    out = sdk.run(major, "approvals", api=f"{sdk_server.url}/api/chat")
    check_clean(out)
    user, assistant = out["messages"]
    th = turns(sdk_server, out["chatId"])
    assert [t.get("vercel:message_id") for t in th] == [user["id"], assistant["id"], assistant["id"]]


def agent_turns(server: ServerProcess, chat_id: str) -> list[dict[str, Any]]:
    return [t for t in turns(server, chat_id) if t["turn_type"] == "agent"]


@pytest.mark.parametrize("major", MAJORS)
def test_resume_after_a_dropped_connection_on_another_worker(
    sdk: SdkClient, pair: tuple[ServerProcess, ServerProcess], major: int
) -> None:
    """The connection drops mid-turn; the SDK reconnects (``GET /api/chat/{id}/stream``) to another
    server process on the same store, which replays the turn from its start and follows it live."""
    a, b = pair
    out = sdk.run(major, "resume", api=f"{a.url}/api/chat", resumeApi=f"{b.url}/api/chat",
                  text="slow 30 60", cutAfter="word2")
    post, get = out["requests"]
    assert post["method"] == "POST" and post["cut"] is True
    assert out["notes"]["afterCut"]["status"] == "error" and "word2" in out["notes"]["afterCut"]["text"]
    assert get["method"] == "GET" and get["status"] == 200
    assert get["worker"] != post["worker"]  # served by a different process than the one running the turn
    check_clean(out)
    user, assistant = out["messages"]
    assert texts(assistant) == "".join(f"word{i} " for i in range(30))  # whole, once
    th = turns(a, out["chatId"])
    assert th[-1]["completion_status"] == "complete"
    assert [user["id"], assistant["id"]] == [t["vercel:message_id"] for t in th]  # the resumed stream agrees


@pytest.mark.parametrize("major", MAJORS)
def test_reconnect_after_a_stop_is_processed_by_the_sdk(sdk: SdkClient, sdk_server: ServerProcess,
                                                       major: int) -> None:
    """The user stops mid-text and sends again (the stopped run is interrupted, the next one
    starts); ``transport.reconnectToStream`` during the new answer gives a stream the SDK's own
    processor (``readUIMessageStream``) reads without error, the whole answer once. (The stopped
    run's last live write used to replace the new turn's first entries: a replay starting mid-text,
    "Received text-delta for missing text part", in about one run of three.)"""
    for _ in range(3):
        out = sdk.run(major, "abort_reconnect", api=f"{sdk_server.url}/api/chat", text="slow 30 20",
                      sendAgain="slow 30 60")
        notes = out["notes"]
        assert notes["reconnected"] is True, out["requests"]
        assert notes.get("resumeError") is None, notes["resumeError"]
        assert notes["resumed"] == "".join(f"word{i} " for i in range(30))
        check_clean(out)
        first, second = agent_turns(sdk_server, out["chatId"])
        assert first["interruption"]["reason"] == "user_cancelled"
        assert second["completion_status"] == "complete"


def test_resumed_stream_entries_are_beside_the_log_and_expire(
    sdk: SdkClient, pair: tuple[ServerProcess, ServerProcess]
) -> None:
    """While the turn runs its chunks are in the store's live table, not in the log; after the
    turn ends they are dropped; and an idle chat's reconnect is a 204."""
    from server.server_harness import wait_until

    from tplog import Store
    from tplog.backends.live_streams import live_streams

    a, b = pair
    out = sdk.run(6, "resume", api=f"{a.url}/api/chat", resumeApi=f"{b.url}/api/chat", text="slow 10 50",
                  cutAfter="word1")
    check_clean(out)
    tid = httpx.get(f"{a.url}/threads/{out['chatId']}/turns", timeout=30).json()["thread_id"]
    with Store(a.store) as s:
        live = live_streams(s.backend)
        assert live is not None
        types = {type(e.event).__name__ for e in s.read(tid)}
        assert types <= {"ThreadStarted", "AgentRegistered", "UserTurnSubmitted", "AgentTurnStarted",
                         "MessageRecorded", "AgentTurnCompleted"}
        wait_until(lambda: live.read(tid)[0] is None, timeout=60, interval=0.5)
    r = httpx.get(f"{b.url}/api/chat/{out['chatId']}/stream", timeout=30)
    assert r.status_code == 204 and r.content == b""


@pytest.mark.parametrize("major", MAJORS)
def test_idle_resume_is_204(sdk: SdkClient, sdk_server: ServerProcess, major: int) -> None:
    """``useChat({resume: true})`` on mount, nothing running (here: no thread yet): 204, status ready."""
    out = sdk.run(major, "idle_resume", api=f"{sdk_server.url}/api/chat")
    assert out["status"] == "ready" and out["error"] is None
    assert [(r["method"], r["status"]) for r in out["requests"]] == [("GET", 204)]


@pytest.mark.parametrize("major", MAJORS)
def test_stop_then_send_interrupts_the_abandoned_run(
    sdk: SdkClient, pair: tuple[ServerProcess, ServerProcess], major: int
) -> None:
    """The user presses stop (the SDK aborts the request; the server goes on with the run), then
    sends a message, to another worker: the abandoned run is interrupted (``user_cancelled``), the
    new message answered, and the chat shows no error."""
    a, b = pair
    out = sdk.run(major, "stop_then_send", api=f"{a.url}/api/chat", secondApi=f"{b.url}/api/chat")
    assert out["notes"]["afterStop"] == {"status": "ready", "error": None}
    check_clean(out)
    first, second = out["requests"]
    assert first["worker"] != second["worker"]
    assert texts(out["messages"][-1]) == "You said: hello after stop"
    first_turn, second_turn = agent_turns(a, out["chatId"])
    assert first_turn["completion_status"] == "interrupted"
    assert first_turn["interruption"]["reason"] == "user_cancelled"
    assert second_turn["completion_status"] == "complete"


@pytest.fixture(scope="module")
def wait_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    srv = ServerProcess(tmp_path_factory.mktemp("aisdk-wait") / "store", env={"TPLOG_SERVER_AFTER_STOP": "wait"})
    yield srv.start()
    srv.stop()


@pytest.fixture(scope="module")
def reject_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    srv = ServerProcess(tmp_path_factory.mktemp("aisdk-reject") / "store", env={"TPLOG_SERVER_AFTER_STOP": "reject"})
    yield srv.start()
    srv.stop()


def test_stop_then_send_waits_for_the_abandoned_run(sdk: SdkClient, wait_server: ServerProcess) -> None:
    """``after_stop="wait"``: the new message waits until the abandoned run is recorded to its end."""
    out = sdk.run(6, "stop_then_send", api=f"{wait_server.url}/api/chat", text="slow 30 50")
    check_clean(out)
    first_turn, second_turn = agent_turns(wait_server, out["chatId"])
    assert first_turn["completion_status"] == "complete"  # not interrupted: it ran to its end
    assert second_turn["completion_status"] == "complete"


def test_stop_then_send_rejected(sdk: SdkClient, reject_server: ServerProcess) -> None:
    """``after_stop="reject"`` (tplog before issue 28): 409 ``turn_open``, which the chat shows as an error."""
    out = sdk.run(6, "stop_then_send", api=f"{reject_server.url}/api/chat")
    assert out["status"] == "error" and "turn_open" in out["error"]
    assert [r["status"] for r in out["requests"]] == [200, 409]


@pytest.fixture(scope="module")
def pg_pair(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Two server processes on one PostgreSQL store (what two hosts behind a load balancer are)."""
    import uuid

    import psycopg
    from backends.contract_helpers import pg_dsn

    schema = f"aisdk_{uuid.uuid4().hex[:12]}"
    url = f"{pg_dsn()}?schema={schema}"
    from tplog import Store

    Store(url).close()  # the schema, created once before the servers race to
    tmp = tmp_path_factory.mktemp("aisdk-pg")
    a = ServerProcess(tmp / "a", env={"TPLOG_SERVER_STORE": url}).start()
    b = ServerProcess(tmp / "b", env={"TPLOG_SERVER_STORE": url}).start()
    yield a, b
    a.stop()
    b.stop()
    with psycopg.connect(pg_dsn(), autocommit=True) as c:
        c.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE".encode())


def test_resume_and_stop_across_servers_on_one_postgresql_store(
    sdk: SdkClient, pg_pair: tuple[ServerProcess, ServerProcess]
) -> None:
    """Resume on another server, and stop then send to another server, both through the store's
    live table in PostgreSQL."""
    a, b = pg_pair
    out = sdk.run(7, "resume", api=f"{a.url}/api/chat", resumeApi=f"{b.url}/api/chat", text="slow 20 60",
                  cutAfter="word2")
    check_clean(out)
    post, get = out["requests"]
    assert get["status"] == 200 and get["worker"] != post["worker"]
    assert texts(out["messages"][-1]) == "".join(f"word{i} " for i in range(20))

    out = sdk.run(7, "stop_then_send", api=f"{a.url}/api/chat", secondApi=f"{b.url}/api/chat")
    check_clean(out)
    first_turn, second_turn = agent_turns(b, out["chatId"])
    assert first_turn["interruption"]["reason"] == "user_cancelled"
    assert second_turn["completion_status"] == "complete"
