"""Store.pipeline on PostgreSQL: several writer threads may commit one process's submissions
out of order, so each pipelined append waits for the one before it; the thread comes out whole."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from conftest import agent_start, completed, response, started, user

from tplog import Store


def test_pipeline_keeps_order_over_several_writer_threads(pg_dsn: str) -> None:
    with Store(pg_dsn + f"?schema=pipe{os.getpid()}&writers=3", check_rules=False) as s:
        p = s.pipeline("t")
        p.append([started("t")])
        for k in range(5):
            p.append([user(f"u{k}"), agent_start()])
            for j in range(3):
                p.append([response(f"{k}.{j}")])
            p.append([completed()])
        assert p.commit() is not None
        recs = s.read("t")
        assert [r.seq for r in recs] == list(range(1, 1 + 1 + 5 * 6))
        texts = [r.event.message.parts[0].content for r in recs if hasattr(r.event, "message")]
        assert texts == [f"{k}.{j}" for k in range(5) for j in range(3)]
