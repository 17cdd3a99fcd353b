"""``GET /threads/{id}/events?follow=0`` sends the whole backlog, page after page (the tail reads 500
events at a time), then ends (in process)."""

from __future__ import annotations

import uuid
from pathlib import Path

from conftest import exchange, register, started

from server.inproc import in_process
from server.server_harness import sse_frames
from tplog import Store


def test_a_tail_without_follow_sends_a_backlog_of_more_than_one_page(tmp_path: Path) -> None:
    t = str(uuid.uuid4())
    with Store(tmp_path / "store") as store, in_process(store) as c:
        store.append(t, [started(t), register()])
        while store.head(t).version <= 1100:  # over two pages
            store.append(t, exchange() * 20)
        n = store.head(t).version
        r = c.get(f"/threads/{t}/events", params={"follow": "0"})
        assert r.status_code == 200
        assert [int(f["id"]) for f in sse_frames(r.text)] == list(range(1, n + 1))
        r = c.get(f"/threads/{t}/events", params={"follow": "0", "after": "498"})
        assert [int(f["id"]) for f in sse_frames(r.text)] == list(range(499, n + 1))
