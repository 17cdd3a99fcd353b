"""Client disconnects mid-stream (both on_disconnect modes) and the resumable live tail."""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import httpx

from server.server_harness import ServerProcess, chat_body, head, read_events, sse_frames, wait_until
from tplog import (
    AgentRegistered,
    AgentTurnCompleted,
    AgentTurnInterrupted,
    AgentTurnStarted,
    MessageRecorded,
    Store,
    ThreadStarted,
    UserTurnSubmitted,
)
from tplog.projections.fold import fold
from tplog.protocol import AgentConfig, ResponseMessage, TextPart, UserPromptPart, UserTurn
from tplog.protocol import model as m


def tid() -> str:
    return str(uuid.uuid4())


def _read_some_then_drop(srv: ServerProcess, t: str, text: str, n_chunks: int) -> list[str]:
    """Start a chat, read ``n_chunks`` SSE data lines, then close the connection."""
    got: list[str] = []
    with srv.client() as c, c.stream("POST", "/api/chat", json=chat_body(t, text)) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data:"):
                got.append(line)
            if len(got) >= n_chunks:
                break
    return got  # leaving the block closes the connection mid-stream


def test_disconnect_finish_mode_records_the_whole_run(server: ServerProcess) -> None:
    t = tid()
    got = _read_some_then_drop(server, t, "slow 150 40", 4)  # 6 s: still going when the client has left
    assert any("text-delta" in g for g in got)
    assert head(server.store, t).open_turn_agent is not None  # the run is still going
    wait_until(lambda: head(server.store, t).open_turn_agent is None, timeout=120)
    events = [e.event for e in read_events(server.store, t)]
    assert isinstance(events[-1], AgentTurnCompleted)
    th = fold(events).thread
    assert th is not None
    turn = th.turns[-1]
    assert isinstance(turn, m.AgentTurn) and turn.completion_status == "complete"
    text = "".join(p.content for msg in turn.messages if isinstance(msg, m.ResponseMessage)
                   for p in msg.parts if isinstance(p, m.TextPart))
    assert text == "".join(f"word{i} " for i in range(150))


def test_disconnect_interrupt_mode_records_the_interruption(interrupt_server: ServerProcess) -> None:
    srv = interrupt_server
    t = tid()
    # a completed turn first: its cycles stay; then one cut off by the client leaving
    with srv.client() as c:
        assert c.post("/api/chat", json=chat_body(t, "weather in Oslo")).status_code == 200
    _read_some_then_drop(srv, t, "slow 4000 50", 4)  # would take 200 s to finish
    wait_until(lambda: head(srv.store, t).open_turn_agent is None, timeout=120)  # interrupted, not run to its end
    events = [e.event for e in read_events(srv.store, t)]
    last = events[-1]
    assert isinstance(last, AgentTurnInterrupted)
    assert last.interruption.reason == "network_failure"
    th = fold(events).thread
    assert th is not None
    assert [type(x).__name__ for x in th.turns] == ["UserTurn", "AgentTurn", "UserTurn", "AgentTurn"]
    first, cut = th.turns[1], th.turns[3]
    assert isinstance(first, m.AgentTurn) and first.completion_status == "complete"
    assert isinstance(cut, m.AgentTurn) and cut.completion_status == "interrupted"
    assert cut.messages == []  # the partial response is not a complete message: not recorded
    with srv.client() as c:
        st = c.get(f"/threads/{t}/interrupts").json()
        assert st["interrupted"] is True and st["last"]["reason"] == "network_failure"
        # the thread goes on after the interruption
        r = c.post("/api/chat", json=chat_body(t, "are you there?"))
        assert r.status_code == 200 and "You said: are you there?" in r.text


def _tail(srv: ServerProcess, t: str, *, last_id: str | None, stop_after: int | None,
          until: Any = None, timeout: float = 20.0, into: list[dict[str, str]] | None = None) -> list[dict[str, str]]:
    """Read the tail; stop after ``stop_after`` frames or when ``until(frame)`` is true (then drop)."""
    headers = {"last-event-id": last_id} if last_id is not None else {}
    frames: list[dict[str, str]] = into if into is not None else []
    buf = ""
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=srv.url, timeout=httpx.Timeout(timeout, read=timeout)) as c, \
            c.stream("GET", f"/threads/{t}/events", headers=headers) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        for text in r.iter_text():
            buf += text
            while "\n\n" in buf:
                block, buf = buf.split("\n\n", 1)
                for f in sse_frames(block + "\n\n"):
                    frames.append(f)
                    if stop_after is not None and len(frames) >= stop_after:
                        return frames
                    if until is not None and until(f):
                        return frames
            assert time.monotonic() < deadline, "tail timed out"
    return frames


def test_sse_resume_with_last_event_id(server: ServerProcess) -> None:
    t = tid()
    result: list[Any] = []

    def chat() -> None:
        with server.client() as c:
            result.append(c.post("/api/chat", json=chat_body(t, "slow 12 60")))

    runner = threading.Thread(target=chat)
    runner.start()
    try:
        wait_until(lambda: _exists(server, t))
        first = _tail(server, t, last_id=None, stop_after=3)  # then the connection drops
        assert [int(f["id"]) for f in first] == [1, 2, 3]
        rest = _tail(server, t, last_id=first[-1]["id"], stop_after=None,
                     until=lambda f: f["event"] in ("agent_turn_completed", "agent_turn_interrupted"))
    finally:
        runner.join(30)
    assert result and result[0].status_code == 200
    seqs = [int(f["id"]) for f in first + rest]
    stored = read_events(server.store, t)
    assert seqs == [e.seq for e in stored]  # nothing missed, nothing repeated
    assert seqs == list(range(1, len(stored) + 1))
    for f, e in zip(first + rest, stored, strict=True):
        row = json.loads(f["data"])
        assert row["seq"] == e.seq and row["event_id"] == e.event_id and row["position"] == e.position
        assert f["event"] == row["type"] == e.event.__struct_config__.tag
    assert rest and rest[-1]["event"] == "agent_turn_completed"
    # resuming from the end of a finished turn with follow=0 returns nothing more
    with server.client() as c:
        r = c.get(f"/threads/{t}/events", params={"follow": 0}, headers={"last-event-id": str(seqs[-1])})
        assert r.status_code == 200 and sse_frames(r.text) == []
        r = c.get(f"/threads/{t}/events", params={"follow": 0, "after": 2})
        assert [int(f["id"]) for f in sse_frames(r.text)] == seqs[2:]


def test_tail_sees_appends_from_another_process(server: ServerProcess) -> None:
    """Appends by this test process (not a server worker) reach a live tail on the server."""
    t = tid()
    ts = "2025-01-01T00:00:00Z"
    with Store(server.store) as s:
        s.append(t, [ThreadStarted(thread_id=t, created_at=ts),
                     AgentRegistered(agent=AgentConfig(agent_id="ext", agent_name="external", created_at=ts))])
    frames: list[dict[str, str]] = []

    def tail() -> None:
        _tail(server, t, last_id="0", stop_after=None, into=frames,
              until=lambda f: f["event"] == "agent_turn_completed")

    reader = threading.Thread(target=tail)
    reader.start()
    try:
        wait_until(lambda: len(frames) >= 1 or not reader.is_alive(), timeout=10)
        with Store(server.store) as s:
            s.append(t, [UserTurnSubmitted(turn=UserTurn(submitted_at=ts, parts=[UserPromptPart(content="hi")]))])
            time.sleep(0.2)
            s.append(t, [AgentTurnStarted(agent_id="ext", started_at=ts)])
            s.append(t, [MessageRecorded(message=ResponseMessage(timestamp=ts, agent_id="ext",
                                                                 parts=[TextPart(content="hello")])),
                         AgentTurnCompleted(completed_at=ts)])
    finally:
        reader.join(20)
    assert not reader.is_alive()
    assert [int(f["id"]) for f in frames] == [1, 2, 3, 4, 5, 6]
    assert [f["event"] for f in frames] == ["thread_started", "agent_registered", "user_turn", "agent_turn_started",
                                           "message", "agent_turn_completed"]


def test_tail_of_deleted_thread_ends_with_tombstone(server: ServerProcess) -> None:
    t = tid()
    with Store(server.store) as s:
        s.append(t, [ThreadStarted(thread_id=t, created_at="2025-01-01T00:00:00Z")])
        s.delete_thread(t, reason="test")
    frames = _tail(server, t, last_id=None, stop_after=None, timeout=10)
    assert [f["event"] for f in frames] == ["thread_deleted"]
    with server.client() as c:
        assert c.get(f"/threads/{t}").status_code == 410
        r = c.post("/api/chat", json=chat_body(t, "hi"))
        assert r.status_code == 410


def _exists(srv: ServerProcess, t: str) -> bool:
    try:
        head(srv.store, t)
        return True
    except Exception:
        return False


def test_resume_is_204_unless_this_store_streams_the_open_turn(server: ServerProcess) -> None:
    """``GET /api/chat/{id}/stream`` answers 204 for a chat with no thread, with no open turn, with an
    open turn that no server streams (recorded by another program: after a short wait for a first
    batch) and for a deleted thread."""
    from conftest import agent_start, register, started, user

    def resume(t: str) -> httpx.Response:
        with server.client() as c:
            return c.get(f"/api/chat/{t}/stream")

    assert resume(tid()).status_code == 204  # never written
    t = tid()
    with Store(server.store) as s:
        s.append(t, [started(t), register(), user()])
    assert resume(t).status_code == 204  # nothing running
    with Store(server.store) as s:
        s.append(t, [agent_start()])
    t0 = time.monotonic()
    r = resume(t)
    assert r.status_code == 204 and r.content == b""
    assert time.monotonic() - t0 >= 1.5  # it waited for a stream to appear
    assert head(server.store, t).open_turn_agent == "a1"  # and touched nothing
    with Store(server.store) as s:
        s.delete_thread(t)
    assert resume(t).status_code == 204


def test_resume_replays_a_running_turn_from_its_start_then_follows_it(server: ServerProcess) -> None:
    """A second connection (maybe to the other worker) gets the open turn's stream from its ``start``,
    then live to its end: the same text the chat's own client receives. (10 s of words: still running
    when the second connection comes, however loaded the machine.)"""
    t = tid()
    first: list[str] = []

    def chat() -> None:
        with server.client(timeout=120) as c, c.stream("POST", "/api/chat", json=chat_body(t, "slow 100 100")) as r:
            first.extend(line for line in r.iter_lines() if line.startswith("data:"))

    th = threading.Thread(target=chat)
    th.start()
    try:
        wait_until(lambda: _has_words(server, t), timeout=60)
        with server.client(timeout=120) as c:
            r = c.get(f"/api/chat/{t}/stream")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    finally:
        th.join(120)
    resumed = [line for line in r.text.split("\n") if line.startswith("data:")]

    def text(lines: list[str]) -> str:
        return "".join(json.loads(x[5:])["delta"] for x in lines if '"text-delta"' in x)

    assert text(first) == "".join(f"word{i} " for i in range(100))
    assert text(resumed) == text(first)  # from its start, whole, once
    assert json.loads(resumed[0][5:])["type"] == "start" and resumed[-1] == "data: [DONE]"


def _has_words(server: ServerProcess, t: str) -> bool:
    try:
        return any(isinstance(e.event, MessageRecorded) for e in read_events(server.store, t)) or \
            head(server.store, t).open_turn_agent is not None
    except Exception:
        return False
