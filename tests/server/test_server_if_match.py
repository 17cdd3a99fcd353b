"""``If-Match: 0`` means "the thread must not exist": sent to a thread that exists, it is a 409 and nothing
is written (the server's own HTTP semantics: in process)."""

from __future__ import annotations

import uuid
from pathlib import Path

from server.inproc import in_process
from server.server_harness import chat_body
from tplog import Store


def test_if_match_0_on_an_existing_thread_is_a_conflict_and_writes_nothing(tmp_path: Path) -> None:
    t = str(uuid.uuid4())
    with Store(tmp_path / "store") as store, in_process(store) as c:
        assert c.post("/api/chat", json=chat_body(t, "hi"), headers={"if-match": "0"}).status_code == 200
        v = store.head(t).version
        assert v > 0
        r = c.post("/api/chat", json=chat_body(t, "again"), headers={"if-match": "0"})
        assert r.status_code == 409, r.text
        err = r.json()["error"]
        assert (err["code"], err["expected"], err["actual"]) == ("version_conflict", 0, v)
        assert store.head(t).version == v
