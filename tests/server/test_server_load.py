"""200 concurrent chats across 2 worker processes: every event recorded exactly once."""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from typing import Any

import httpx
import msgspec

from server.server_harness import ServerProcess, chat_body
from tplog import AgentTurnCompleted, Store
from tplog.integrations.vercel import assemble_turn, thread_id_for_chat
from tplog.projections.fold import fold
from tplog.protocol import model as m
from tplog.protocol.validate import thread_id_for

N_CHATS = 200


async def _chat(c: httpx.AsyncClient, i: int, run: str) -> tuple[str, dict[str, Any], httpx.Response]:
    t = thread_id_for(f"load-{run}-{i:03d}")  # thread ids are UUIDs (the one id rule)
    text = f"what is the weather in city{i}" if i % 2 == 0 else f"hello number {i}"
    body = chat_body(t, text)
    r = await c.post("/api/chat", json=body)
    return t, body, r


async def _all(srv: ServerProcess, run: str) -> list[tuple[str, dict[str, Any], httpx.Response]]:
    limits = httpx.Limits(max_connections=N_CHATS, max_keepalive_connections=0)
    async with srv.async_client(limits=limits, timeout=90.0) as c:
        return await asyncio.gather(*(_chat(c, i, run) for i in range(N_CHATS)))


def test_200_concurrent_chats_two_workers(server: ServerProcess) -> None:
    run = uuid.uuid4().hex[:8]
    with Store(server.store, readonly=True) as s:
        start = s.last_position
    results = asyncio.run(_all(server, run))
    bad = [(t, r.status_code, r.text[:300]) for t, _, r in results if r.status_code != 200]
    assert not bad, bad[:3]
    pids = {r.headers["x-tplog-worker"] for _, _, r in results}
    assert len(pids) == 2, f"all chats went to one worker: {pids}"

    with Store(server.store, readonly=True) as s:
        # the chat ids are no UUIDs: each names its UUIDv5 thread
        tids = {thread_id_for_chat(t): t for t, _, _ in results}
        log = [e for e in s.read_all(after=start) if e.thread_id in tids]
        per_thread: dict[str, list[Any]] = defaultdict(list)
        for e in log:
            per_thread[e.thread_id].append(e)
        # no event stored twice, globally
        ids = [e.event_id for e in log]
        assert len(ids) == len(set(ids))
        positions = [e.position for e in log]
        assert positions == sorted(positions) and len(positions) == len(set(positions))
        assert len(per_thread) == N_CHATS
        for t, body, r in results:
            events = per_thread[thread_id_for_chat(t)]
            # per-thread seqs contiguous from 1, and the global log holds exactly the thread's events
            assert [e.seq for e in events] == list(range(1, len(events) + 1)), t
            assert [e.event_id for e in events] == [e.event_id for e in s.read(thread_id_for_chat(t))]
            evs = [e.event for e in events]
            assert isinstance(evs[-1], AgentTurnCompleted), t
            th = fold(evs).thread
            assert th is not None and len(th.turns) == 2
            turn = th.turns[1]
            assert isinstance(turn, m.AgentTurn) and turn.completion_status == "complete"
            n_msgs = 3 if body["messages"][-1]["parts"][0]["text"].startswith("what is the weather") else 1
            assert len(turn.messages) == n_msgs, (t, turn.messages)
            # the client's view of the stream is the recorded turn, exactly
            assert msgspec.json.encode(assemble_turn(r.text, body)) == msgspec.json.encode(evs[2:]), t
