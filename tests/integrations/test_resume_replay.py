"""The resumed stream (``GET /api/chat/{id}/stream``) is one the AI SDK's processor can read: every
part it continues was started in it, even when the stored stream lost its first batches."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from tplog import Store
from tplog.backends.live import MemoryLive
from tplog.backends.live_streams import live_streams
from tplog.events import AgentRegistered, AgentTurnStarted, ThreadStarted, UserTurnSubmitted
from tplog.integrations.resume import LiveWriter
from tplog.integrations.server import create_app
from tplog.integrations.server.demo_agents import demo_agents
from tplog.integrations.vercel import parse_sse
from tplog.protocol import model as m

TID = "00000000-0000-4000-8000-0000000000d1"
T0 = "2026-01-01T00:00:00Z"


def sse(*chunks: dict[str, Any] | str) -> str:
    return "".join(f"data: {c if isinstance(c, str) else json.dumps(c)}\n\n" for c in chunks)


def unstarted(chunks: list[Any]) -> list[dict[str, Any]]:
    """The chunks that continue a part (or a tool call) not started before them in the same stream."""
    started: set[str] = set()
    bad = []
    for c in chunks:
        if not isinstance(c, dict):
            continue
        t = c["type"]
        if t in ("text-start", "reasoning-start"):
            started.add(c["id"])
        elif t in ("tool-input-start", "tool-input-available"):
            started.add(c["toolCallId"])
        else:
            part = c.get("id") if t.startswith(("text-", "reasoning-")) else c.get("toolCallId")
            if t.startswith(("text-", "reasoning-", "tool-input-delta", "tool-output-")) and part not in started:
                bad.append(c)
    return bad


def test_a_replay_whose_start_was_lost_opens_what_it_continues(tmp_path: Path) -> None:
    """The live table holds the open turn's stream from mid-text on (its first batches replaced):
    the replay starts each text/reasoning part it continues, and drops tool chunks of calls it never
    announced, so the SDK's processor does not refuse it."""
    with Store(tmp_path / "db") as store:
        store.append(TID, [
            ThreadStarted(thread_id=TID, created_at=T0),
            AgentRegistered(agent=m.AgentConfig(agent_id="demo", agent_name="demo", created_at=T0)),
            UserTurnSubmitted(turn=m.UserTurn(submitted_at=T0, parts=[m.UserPromptPart(content="slow")])),
            AgentTurnStarted(agent_id="demo", started_at=T0),
        ])
        live = live_streams(store.backend)
        assert live is not None
        stored = sse(
            {"type": "text-delta", "id": "t1", "delta": "word3 "},
            {"type": "reasoning-delta", "id": "r1", "delta": "hm"},
            {"type": "reasoning-end", "id": "r1"},
            {"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": "{}"},
            {"type": "tool-output-available", "toolCallId": "c1", "output": 1},
            "{not json",  # passed on as it is
        )
        rest = sse({"type": "text-delta", "id": "t1", "delta": "word4"}, {"type": "text-end", "id": "t1"},
                   {"type": "text-start", "id": "t2"}, {"type": "text-delta", "id": "t2", "delta": "more"},
                   {"type": "text-end", "id": "t2"}, {"type": "finish-step"}, {"type": "finish"}, "[DONE]")
        live.write(TID, 4, [stored.encode(), rest.encode()], done=True)
        app = create_app(store, demo_agents())
        with TestClient(app) as client:
            r = client.get(f"/api/chat/{TID}/stream")
        assert r.status_code == 200
        assert "data: {not json\n\n" in r.text
        chunks = list(parse_sse(r.text.replace("data: {not json\n\n", "")))
        assert unstarted(chunks) == []
        texts = [c.get("delta") for c in chunks if isinstance(c, dict) and c["type"] == "text-delta"]
        assert texts == ["word3 ", "word4", "more"]  # nothing stored is lost but the unannounced call's chunks
        starts = [c["id"] for c in chunks if isinstance(c, dict) and c["type"] == "text-start"]
        assert starts == ["t1", "t2"]  # a part the stream did start is not started twice
        assert [c["type"] for c in chunks if isinstance(c, dict)][:2] == ["text-start", "text-delta"]
        assert chunks[-1] == "[DONE]"


def test_a_stopped_runs_last_write_does_not_replace_the_next_turns_stream() -> None:
    """Stop then send: the stopped run's stream ends after the next run's stream began. Its last
    write must not replace the next turn's entries (which would lose that stream's start)."""
    live = MemoryLive()

    async def go() -> None:
        tasks: set[asyncio.Task[None]] = set()
        old = LiveWriter(live, TID, interval=0.0, on_stop=lambda: None, tasks=tasks)
        new = LiveWriter(live, TID, interval=0.0, on_stop=lambda: None, tasks=tasks)
        old.start(4)
        old.push(sse({"type": "text-start", "id": "a"}, {"type": "text-delta", "id": "a", "delta": "x"}))
        await asyncio.sleep(0.3)
        new.start(9)  # the next turn opened (the old one is closed in the log)
        new.push(sse({"type": "start"}, {"type": "text-start", "id": "b"}, {"type": "text-delta", "id": "b",
                                                                             "delta": "y"}))
        await asyncio.sleep(0.3)
        old.push(sse({"type": "text-end", "id": "a"}, {"type": "abort"}, "[DONE]"))
        old.close()  # the stopped run's stream ends now
        await asyncio.sleep(0.3)
        new.push(sse({"type": "text-delta", "id": "b", "delta": "z"}))
        new.close()
        await asyncio.gather(*tasks)

    asyncio.run(go())
    hdr, batches = live.read(TID)
    assert hdr is not None and hdr.turn_seq == 9 and hdr.done
    chunks = list(parse_sse(b"".join(batches).decode()))
    assert [c["type"] for c in chunks if isinstance(c, dict)] == ["start", "text-start", "text-delta", "text-delta"]


def test_a_stream_replaced_by_an_older_turns_late_write_is_written_again_whole() -> None:
    """The stopped run's last write can still land between the next run's read of the header and
    its write: the next run's writer then finds its entries replaced and writes its stream again."""
    live = MemoryLive()

    async def go() -> None:
        tasks: set[asyncio.Task[None]] = set()
        new = LiveWriter(live, TID, interval=0.0, on_stop=lambda: None, tasks=tasks)
        new.start(9)
        new.push(sse({"type": "start"}, {"type": "text-start", "id": "b"}, {"type": "text-delta", "id": "b",
                                                                             "delta": "y"}))
        await asyncio.sleep(0.3)
        live.write(TID, 4, [sse({"type": "abort"}, "[DONE]").encode()], done=True)  # the old run's late write
        new.push(sse({"type": "text-delta", "id": "b", "delta": "z"}))
        new.close()
        await asyncio.gather(*tasks)

    asyncio.run(go())
    hdr, batches = live.read(TID)
    assert hdr is not None and hdr.turn_seq == 9 and hdr.done
    chunks = [c for c in parse_sse(b"".join(batches).decode()) if isinstance(c, dict)]
    assert [(c["type"], c.get("delta")) for c in chunks] == [
        ("start", None), ("text-start", None), ("text-delta", "y"), ("text-delta", "z")]
