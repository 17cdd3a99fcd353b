"""``GET /threads?q=``: in process (Starlette's TestClient) for its shape, scopes and errors, and on a
real uvicorn with two workers sharing one index file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from server.inproc import in_process
from server.server_harness import ServerProcess
from starlette.testclient import TestClient

from search.helpers import conversation, new_id
from tplog import Store
from tplog.integrations.server import Security, create_app, demo_agents
from tplog.search import MARK_START, MAX_QUERY

ALICE, BOB = "alice-" + "a" * 26, "bob-" + "b" * 28


def test_q_ranks_the_listing_objects_with_their_hits(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as store:
        a, b, c = new_id(), new_id(), new_id()
        store.append(a, conversation(a, title="refund refund", prompt="refund please"))
        store.append(b, conversation(b, prompt="where is my refund", agent="helper"))
        store.append(c, conversation(c, prompt="unrelated"))
        with in_process(store) as client:
            listing = {t["thread_id"]: t for t in client.get("/threads").json()["threads"]}
            r = client.get("/threads", params={"q": "refund"})
            assert r.status_code == 200
            body = r.json()
            assert [t["thread_id"] for t in body["threads"]] == [a, b]
            assert body["search"] == {"behind": 0} and body["next_cursor"] is None
            for t in body["threads"]:
                hit = t.pop("hit")
                assert t == listing[t["thread_id"]]  # the very objects the listing returns
                assert set(hit) == {"turn", "seq", "field", "snippet", "score", "matches"}
                assert MARK_START in hit["snippet"]
            assert body["threads"][0]["thread_id"] == a
            # the listing's filters apply, paging goes by next_cursor
            only = client.get("/threads", params={"q": "refund", "agent": "helper"}).json()["threads"]
            assert [t["thread_id"] for t in only] == [b]
            first = client.get("/threads", params={"q": "refund", "limit": 1}).json()
            rest = client.get("/threads", params={"q": "refund", "limit": 1, "after": first["next_cursor"]}).json()
            assert [t["thread_id"] for t in first["threads"] + rest["threads"]] == [a, b]
            assert rest["next_cursor"] is None


def test_bad_queries_are_422_with_a_code(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as store, in_process(store) as client:
        long = client.get("/threads", params={"q": "x" * (MAX_QUERY + 1)})
        assert long.status_code == 422 and long.json()["error"]["code"] == "query_too_long"
        bad = client.get("/threads", params={"q": "x", "after": "garbage"})
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_input"
        blank = client.get("/threads", params={"q": "   "})
        assert blank.status_code == 422 and blank.json()["error"]["code"] == "invalid_query"
        assert client.get("/threads", params={"q": ""}).status_code == 200  # empty q: the plain listing


def _users_app(path: Path) -> Any:
    return create_app(str(path), demo_agents(), heartbeat=3600, security=Security(users={"alice": ALICE, "bob": BOB}))


def test_q_is_scoped_to_the_user(tmp_path: Path) -> None:
    with TestClient(_users_app(tmp_path / "s")) as client:
        store = Store(tmp_path / "s")
        try:
            ta, tb = new_id(), new_id()
            store.scoped("alice").append(ta, conversation(ta, prompt="alice's pineapple"))
            store.scoped("bob").append(tb, conversation(tb, prompt="bob's pineapple"))
            tu = new_id()
            store.append(tu, conversation(tu, prompt="nobody's pineapple"))
        finally:
            store.close()
        for token, want in ((ALICE, ta), (BOB, tb)):
            r = client.get("/threads", params={"q": "pineapple"}, headers={"authorization": "Bearer " + token})
            assert r.status_code == 200, r.text
            assert [t["thread_id"] for t in r.json()["threads"]] == [want]


def test_two_uvicorn_workers_share_the_index(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "store", workers=2).start()
    try:
        with srv.client() as client:
            for i in range(6):  # appended by this process; each worker catches its search up from the log
                with Store(tmp_path / "store") as store:
                    tid = new_id()
                    store.append(tid, conversation(tid, prompt=f"coconut number{i}"))
                for _ in range(3):  # requests land on either worker
                    r = client.get("/threads", params={"q": f"coconut number{i}"})
                    assert r.status_code == 200 and [t["thread_id"] for t in r.json()["threads"]] == [tid]
            assert len(client.get("/threads", params={"q": "coconut"}).json()["threads"]) == 6
    finally:
        srv.stop()
    with Store(tmp_path / "store") as store:
        assert store.verify().ok
