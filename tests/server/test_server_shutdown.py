"""``serve()`` (what ``tplog serve`` runs): a run whose client left is finished before the server exits."""

from __future__ import annotations

import uuid
from pathlib import Path

from server.server_harness import ServerProcess, chat_body, head, read_events
from tplog import AgentTurnCompleted
from tplog import _model as m
from tplog._fold import fold


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
