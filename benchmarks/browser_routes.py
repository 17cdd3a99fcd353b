"""What the thread browser's pages cost the server (issue 40): ``GET /threads?limit=50`` (the list's
one request per page; before, the page also fetched every listed thread's document: measured
beside it as "list + 50 documents") and ``GET /threads/{id}/family`` for a 200-node family, over an
LMDB store of ``--threads`` threads. In process (Starlette's TestClient: the app and the store, no
network), p50/p99 of ``--repeat`` requests each.

    python -m benchmarks.browser_routes [--threads 10000] [--repeat 200]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from tplog import Store
from tplog.events import (
    AgentRegistered,
    AgentTurnCompleted,
    AgentTurnStarted,
    MessageRecorded,
    ThreadStarted,
    UserTurnSubmitted,
)
from tplog.protocol import model as m

T = "2025-01-20T10:00:00Z"


def _events(t: str, i: int, parent: str | None = None) -> list[Any]:
    rel = m.ThreadRelationships(links=[m.ThreadLink(thread_id=parent, relation="spawned_from")]) if parent else None
    return [
        ThreadStarted(thread_id=t, created_at=T, title=f"thread {i}", **({"relationships": rel} if rel else {})),
        AgentRegistered(agent=m.AgentConfig(agent_id=f"agent-{i % 7}", agent_name=f"Agent {i % 7}", created_at=T)),
        UserTurnSubmitted(turn=m.UserTurn(submitted_at=T, parts=[m.UserPromptPart(content=f"question {i}")])),
        AgentTurnStarted(agent_id=f"agent-{i % 7}", started_at=T),
        MessageRecorded(message=m.ResponseMessage(timestamp=T, agent_id=f"agent-{i % 7}",
                                                  parts=[m.TextPart(content=f"answer {i} " * 20)])),
        AgentTurnCompleted(completed_at=T),
    ]


def _time(client: Any, paths: list[str], repeat: int) -> tuple[float, float]:
    ms: list[float] = []
    for n in range(repeat):
        t0 = time.perf_counter()
        for p in paths:
            r = client.get(p.format(n=n))
            assert r.status_code == 200, r.text
        ms.append((time.perf_counter() - t0) * 1000)
    ms.sort()
    return statistics.median(ms), ms[min(len(ms) - 1, int(len(ms) * 0.99))]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.browser_routes", description=__doc__)
    ap.add_argument("--threads", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args(argv)
    from starlette.testclient import TestClient

    from tplog.integrations.server import create_app
    from tplog.integrations.server.demo_agents import demo_agents

    with tempfile.TemporaryDirectory() as d, Store(Path(d) / "store") as s:
        root = str(uuid.uuid4())
        s.append(root, _events(root, 0))
        kids = []
        for i in range(1, args.threads):
            t = str(uuid.uuid4())
            s.append(t, _events(t, i, parent=root if i < 200 else None))
            kids.append(t)
        page = s.threads(limit=50).threads
        docs = [f"/threads/{h.thread_id}" for h in page]
        with TestClient(create_app(s, demo_agents())) as c:
            rows = [
                ("GET /threads?limit=50 (the list now)", _time(c, ["/threads?limit=50"], args.repeat)),
                ("list + 50 documents (the list before)",
                 _time(c, ["/threads?limit=50", *docs], max(args.repeat // 10, 3))),
                ("GET /threads/{id}/family, 200 nodes", _time(c, [f"/threads/{kids[0]}/family"], args.repeat)),
            ]
    print(f"{args.threads} threads, LMDB, in process; ms per page")
    print("| request | p50 ms | p99 ms |\n|---|---|---|")
    for name, (p50, p99) in rows:
        print(f"| {name} | {p50:.1f} | {p99:.1f} |")


if __name__ == "__main__":
    main()
