"""Fork and find over HTTP: ``POST /threads/{id}/fork`` and the ``GET /threads`` filters, on a real server."""

from __future__ import annotations

import uuid

from conftest import agent_start, exchange, register, response, started, user

from server.server_harness import ServerProcess
from tplog import AgentTurnCompleted, Store


def tid() -> str:
    return str(uuid.uuid4())


def test_fork_and_filtered_listing(server: ServerProcess) -> None:
    parent, waiting = tid(), tid()
    with Store(server.store) as s:  # written by this process straight into the served store
        s.append(parent, [started(parent, title="HTTP fork"), register(), *exchange("a?", "b"),
                          *exchange("c?", "d")])
        s.append(waiting, [started(waiting, title="HTTP waiting"), register("helper-lc"), user(),
                           agent_start("helper-lc"), response(agent="helper-lc"),
                           AgentTurnCompleted(deferred={"c1": "approval"})])
    with server.client() as c:
        r = c.post(f"/threads/{parent}/fork", json={"at": 6, "reason": "retry"})
        assert r.status_code == 201, r.text
        fork = r.json()["thread_id"]
        assert (r.json()["first_seq"], r.json()["last_seq"]) == (1, 6)
        doc = c.get(f"/threads/{fork}").json()
        assert len(doc["turns"]) == 2 and doc["title"] == "HTTP fork"
        assert doc["relationships"]["links"][0] == {
            "thread_id": parent, "relation": "spawned_from",
            "metadata": {"branch_point": "turn_2", "seq": 6, "reason": "retry"}}
        assert c.get(f"/threads/{parent}/children").json()["children"] == [fork]
        named = tid()
        assert c.post(f"/threads/{parent}/fork", json={"at": 10, "thread_id": named}).json()["thread_id"] == named
        # Bad input: typed errors, nothing written.
        assert c.post(f"/threads/{parent}/fork", json={"at": 4}).status_code == 422  # inside an agent turn
        assert c.post(f"/threads/{parent}/fork", json={"at": 6, "thread_id": named}).status_code == 409
        assert c.post(f"/threads/{parent}/fork", json={"at": 6, "colour": 1}).status_code == 422
        assert c.post(f"/threads/{tid()}/fork", json={"at": 1}).status_code == 404
        assert sorted(c.get(f"/threads/{parent}/children").json()["children"]) == sorted([fork, named])
        # Find: filters on the thread listing, paged with after=.
        # (The session's store is shared with other server tests: each listing is narrowed to this test's threads.)
        page = c.get("/threads", params={"status": "waiting_approval", "title": "HTTP waiting"}).json()
        assert [h["thread_id"] for h in page["threads"]] == [waiting]
        assert [h["thread_id"] for h in c.get("/threads", params={"agent": "helper-lc"}).json()["threads"]] == [
            waiting]
        both = c.get("/threads", params=[("status", "waiting_approval"), ("status", "idle"),
                                         ("title", "http ")]).json()["threads"]
        assert [h["thread_id"] for h in both] == [named, fork, waiting, parent]
        first = c.get("/threads", params={"title": "http fork", "limit": 2}).json()
        rest = c.get("/threads", params={"title": "http fork", "limit": 2, "after": first["next_cursor"]}).json()
        assert [h["thread_id"] for h in first["threads"] + rest["threads"]] == [named, fork, parent]
        assert [h["thread_id"] for h in c.get("/threads", params={"roots": 1, "title": "http fork"}).json()[
            "threads"]] == [parent]
        assert [h["thread_id"] for h in c.get("/threads", params={"has_children": 1, "title": "HTTP"}).json()[
            "threads"]] == [parent]
        bad = c.get("/threads", params={"status": "asleep"})
        assert bad.status_code == 422 and "status" in bad.text
        assert c.get("/threads", params={"updated_after": "last week"}).status_code == 422
        assert c.get("/threads", params={"meta": "novalue"}).status_code == 422
    with Store(server.store) as s:
        s.delete_thread(parent, cascade=True)
        assert not s.exists(fork) and not s.exists(named)
