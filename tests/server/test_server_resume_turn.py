"""``GET /api/chat/{id}/stream`` serves the running turn's stream only: after a turn ended (its stream
still in the live table for a while) and a new turn opened that nobody streams (recorded by another
program), there is nothing to resume: 204 (in process)."""

from __future__ import annotations

import uuid
from pathlib import Path

from conftest import agent_start, user

from server.inproc import in_process
from server.server_harness import chat_body, wait_until
from tplog import Store
from tplog.backends.lmdb.live import open_live


def test_resume_after_the_streamed_turn_ended_and_an_unstreamed_one_opened_is_204(tmp_path: Path) -> None:
    t = str(uuid.uuid4())
    with Store(tmp_path / "store", check_rules=False) as store, in_process(store) as c:
        assert c.post("/api/chat", json=chat_body(t, "hi")).status_code == 200
        store.append(t, [user("from elsewhere"), agent_start("demo")])
        head = store.head(t)
        assert head.open_turn_agent == "demo"
        live = open_live(str(tmp_path / "store"))
        # the run's last live write (done) may land just after its response ended
        hdr = wait_until(lambda: (h := live.read(t, after=0, limit=0)[0]) is not None and h.done and h)
        assert hdr.done and hdr.turn_seq < head.open_turn_seq  # the ended turn's, still there
        r = c.get(f"/api/chat/{t}/stream")
        assert r.status_code == 204, r.text[:300]
        assert r.content == b""
