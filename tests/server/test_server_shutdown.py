"""``serve()`` (what ``tplog serve`` runs): a run whose client left is finished before the server exits."""

from __future__ import annotations

import uuid
from pathlib import Path

from server.server_harness import ServerProcess, chat_body, head, read_events
from tplog import AgentTurnCompleted
from tplog.projections.fold import fold
from tplog.protocol import model as m
from tplog.store import Store


def test_serve_finishes_detached_runs_on_shutdown(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "store", via_serve=True).start()
    t = str(uuid.uuid4())
    try:
        with srv.client() as c, c.stream("POST", "/api/chat", json=chat_body(t, "slow 25 40")) as r:
            assert r.status_code == 200
            for n, _ in enumerate(r.iter_lines()):
                if n >= 6:
                    break  # drop the connection mid-stream
        assert head(srv.store, t).open_turn_agent is not None
    finally:
        srv.stop()  # SIGINT: graceful; the lifespan waits for the detached run
    assert srv.proc is not None and srv.proc.returncode == 0
    events = [e.event for e in read_events(srv.store, t)]
    assert isinstance(events[-1], AgentTurnCompleted)
    th = fold(events).thread
    assert th is not None
    turn = th.turns[-1]
    assert isinstance(turn, m.AgentTurn) and turn.completion_status == "complete"
    text = "".join(p.content for msg in turn.messages if isinstance(msg, m.ResponseMessage)
                   for p in msg.parts if isinstance(p, m.TextPart))
    assert text == "".join(f"word{i} " for i in range(25))


SLOW_AGENTS = '''
import asyncio
from pydantic_ai import Agent
from pydantic_ai import messages as pm
from pydantic_ai.models.function import DeltaToolCall, FunctionModel


def make(words):
    async def stream(messages, info):
        last = messages[-1]
        if isinstance(last, pm.ModelRequest) and any(isinstance(p, pm.ToolReturnPart) for p in last.parts):
            for i in range(words):  # after one complete tool cycle: a long answer
                yield f"w{i} "
                await asyncio.sleep(0.05)
            return
        yield {0: DeltaToolCall(name="lookup", json_args='{"q": "x"}', tool_call_id="call_lookup")}

    agent = Agent(FunctionModel(stream_function=stream, model_name="slow"), name=f"words{words}")

    @agent.tool_plain
    def lookup(q: str) -> str:
        return "found " + q

    return agent


AGENTS = {"slow": make(600), "quick": make(20)}
'''


def test_shutdown_gives_runs_the_grace_then_records_server_shutdown(tmp_path: Path) -> None:
    """SIGTERM to `tplog serve --shutdown-grace 2` with two runs streaming: the one that ends within the
    grace is recorded complete; the other gets the grace (counted from the signal, not after other
    waits), then is recorded as interrupted (``server_shutdown``) with its complete tool cycle kept,
    its client's stream ends cleanly (the turn's end, ``abort``, ``[DONE]``), no traceback is logged,
    and the process exits soon after the grace."""
    import os
    import signal
    import subprocess
    import sys
    import threading
    import time
    from datetime import datetime

    from server.server_harness import ROOT, free_port, sse_chunks, wait_until
    from tplog import AgentTurnInterrupted
    from tplog.integrations.vercel import thread_id_for_chat

    (tmp_path / "slowagents.py").write_text(SLOW_AGENTS)
    store = tmp_path / "store"
    port = free_port()
    log = tmp_path / "serve.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    grace = 2.0
    with open(log, "wb") as logf:
        proc = subprocess.Popen([sys.executable, "-m", "tplog", "serve", str(store), "--port", str(port),
                                 "--agents", "slowagents:AGENTS", "--shutdown-grace", str(grace)],
                                cwd=ROOT, env=env, stdout=logf, stderr=subprocess.STDOUT)
    try:
        import httpx

        def up() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                assert proc.poll() is None, log.read_text()
                return False

        wait_until(up, timeout=60)
        streams: dict[str, list[str]] = {"slow": [], "quick": []}
        texting = {k: threading.Event() for k in streams}
        chat_ids: dict[str, str] = {}

        def chat(agent: str) -> None:
            chat_ids[agent] = f"t-{agent}-{uuid.uuid4()}"
            body = {"id": chat_ids[agent], "agent": agent,
                    "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "go"}]}]}
            with httpx.stream("POST", f"http://127.0.0.1:{port}/api/chat", json=body, timeout=60) as r:
                assert r.status_code == 200
                for line in r.iter_lines():
                    streams[agent].append(line)
                    if '"text-delta"' in line:
                        texting[agent].set()

        clients = [threading.Thread(target=chat, args=(a,)) for a in streams]
        for c in clients:
            c.start()
        assert all(texting[a].wait(60) for a in streams)  # both past their tool cycle, streaming text
        t_signal = time.time()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=grace + 30)
        exited = time.time() - t_signal
        for c in clients:
            c.join(30)
            assert not c.is_alive()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    output = log.read_text()
    assert "Traceback" not in output and "Exception in ASGI application" not in output, output
    assert "ERROR" not in output, output
    assert proc.returncode in (0, -signal.SIGTERM), output
    # not two separate waits: the grace, then uvicorn's own (grace + 15 s) would end after grace + 17 s
    assert grace <= exited <= grace + 14, exited

    with Store(store, readonly=True) as s:
        by_agent = {agent: thread_id_for_chat(chat) for agent, chat in chat_ids.items()}
        quick = [e.event for e in s.read(by_agent["quick"])]
        slow = [e.event for e in s.read(by_agent["slow"])]
    # The quick run finished within the grace: complete, with its whole answer.
    assert isinstance(quick[-1], AgentTurnCompleted)
    quick_chunks = sse_chunks("\n".join(streams["quick"]) + "\n")
    assert quick_chunks[-2:] == [{"type": "finish"}, "[DONE]"]
    # The slow one: interrupted at the end of the grace, reason server_shutdown, its tool cycle kept.
    last = slow[-1]
    assert isinstance(last, AgentTurnInterrupted) and last.interruption.reason == "server_shutdown"
    at = datetime.fromisoformat(last.interruption.interrupted_at.replace("Z", "+00:00")).timestamp()
    assert t_signal + grace - 0.5 <= at <= t_signal + grace + 12, (at - t_signal)
    th = fold(slow).thread
    assert th is not None
    turn = th.turns[-1]
    assert isinstance(turn, m.AgentTurn) and turn.completion_status == "interrupted"
    calls = [p for msg in turn.messages if isinstance(msg, m.ResponseMessage) for p in msg.parts
             if isinstance(p, m.ToolCallPart)]
    returns = [p for msg in turn.messages if isinstance(msg, m.RequestMessage) for p in msg.parts
               if isinstance(p, m.ToolReturnPart)]
    assert [c.tool_call_id for c in calls] == ["call_lookup"] and [r.content for r in returns] == ["found x"]
    # Its client saw the end of the turn as the thread records it, then a clean end of stream.
    chunks = sse_chunks("\n".join(streams["slow"]) + "\n")
    ends = [c for c in chunks if isinstance(c, dict) and c["type"] == "data-tp-turn_end"]
    assert [e["data"]["interruption"]["reason"] for e in ends] == ["server_shutdown"]
    types = [c["type"] if isinstance(c, dict) else c for c in chunks]
    assert "abort" in types and types[-1] == "[DONE]"
