"""Chat, deferred-tool approval and the read endpoints over real HTTP; bad requests."""

from __future__ import annotations

import json
import uuid
from typing import Any

import msgspec

from server.server_harness import ServerProcess, chat_body, head, read_events, sse_chunks, sse_frames
from tplog import AgentTurnCompleted, AgentTurnInterrupted, thread_hash
from tplog.integrations.vercel import assemble_turn
from tplog.projections.fold import fold
from tplog.protocol import model as m
from tplog.protocol.json import from_json


def tid() -> str:
    return str(uuid.uuid4())


def enc(events: list[Any]) -> bytes:
    return msgspec.json.encode(events)


def test_full_chat_with_tools(server: ServerProcess) -> None:
    t = tid()
    with server.client() as c:
        body = chat_body(t, "What is the weather in Paris?")
        r = c.post("/api/chat", json=body)
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["x-vercel-ai-ui-message-stream"] == "v1"
        chunks = sse_chunks(r.text)
        types = [ch["type"] if isinstance(ch, dict) else ch for ch in chunks]
        assert types[0] == "start" and types[-2:] == ["finish", "[DONE]"]
        for t_ in ("tool-input-available", "tool-output-available", "text-delta", "data-tp-user_turn",
                   "data-tp-turn_start", "data-tp-message", "data-tp-turn_end"):
            assert t_ in types, t_
        out = next(ch for ch in chunks if isinstance(ch, dict) and ch["type"] == "tool-output-available")
        assert out["output"] == "sunny and 20 °C in Paris"

        # what the client assembles from the stream is exactly what the server recorded
        recorded = [e.event for e in read_events(server.store, t)]
        assert type(recorded[0]).__name__ == "ThreadStarted" and type(recorded[1]).__name__ == "AgentRegistered"
        assert enc(assemble_turn(r.text, body)) == enc(recorded[2:])

        # a second message continues the recorded history
        r2 = c.post("/api/chat", json=chat_body(t, "thanks!"))
        assert r2.status_code == 200
        assert "You said: thanks!" in r2.text

        doc = c.get(f"/threads/{t}")
        assert doc.status_code == 200
        th = from_json(doc.content, m.Thread)
        assert th.thread_id == t and th.title == "What is the weather in Paris?"
        assert [type(x).__name__ for x in th.turns] == ["UserTurn", "AgentTurn", "UserTurn", "AgentTurn"]
        agent_turn = th.turns[1]
        assert isinstance(agent_turn, m.AgentTurn) and agent_turn.completion_status == "complete"
        assert [type(msg).__name__ for msg in agent_turn.messages] == ["ResponseMessage", "RequestMessage",
                                                                   "ResponseMessage"]
        assert "demo" in th.agents
        # the served document is the stored one
        events = [e.event for e in read_events(server.store, t)]
        folded = fold(events).thread
        assert folded is not None and thread_hash(folded) == thread_hash(th)

        turns = c.get(f"/threads/{t}/turns").json()
        assert turns["thread_id"] == t and len(turns["turns"]) == 4 and turns["in_progress"] is None
        assert turns["version"] == len(events)
        assert c.get(f"/threads/{t}/pending").json() == {"pending": [], "abandoned": []}
        assert c.get(f"/threads/{t}/interrupts").json()["interrupted"] is False
        assert c.get(f"/threads/{t}/children").json() == {"thread_id": t, "children": []}
        assert c.get(f"/threads/{t}/links?incoming=1&relation=spawned_from").json() == {"thread_id": t,
                                                                                         "incoming": []}
        assert c.get(f"/threads/{t}/links").json() == {"thread_id": t, "links": []}


def test_threads_paging_and_links(server: ServerProcess) -> None:
    from tplog import LinkAdded, Store, ThreadStarted
    from tplog.protocol import ThreadLink

    parent, kids = tid(), [tid() for _ in range(3)]
    with server.client() as c:
        assert c.post("/api/chat", json=chat_body(parent, "hello")).status_code == 200
    # child threads written by another process (this one) straight into the store
    with Store(server.store) as s:
        for k in kids:
            s.append(k, [ThreadStarted(thread_id=k, created_at="2025-01-01T00:00:00Z"),
                         LinkAdded(link=ThreadLink(thread_id=parent, relation="spawned_from"),
                                   at="2025-01-01T00:00:00Z")])
    with server.client() as c:
        assert sorted(c.get(f"/threads/{parent}/children").json()["children"]) == sorted(kids)
        inc = c.get(f"/threads/{parent}/links", params={"incoming": 1, "relation": "spawned_from"}).json()
        assert sorted(x["thread_id"] for x in inc["incoming"]) == sorted(kids)
        assert {x["relation"] for x in inc["incoming"]} == {"spawned_from"}
        pages: list[dict[str, str]] = []
        after: dict[str, str] = {}
        while page := c.get(f"/threads/{parent}/links", params={"incoming": 1, "limit": 2, **after}).json()["incoming"]:
            assert len(page) <= 2
            pages += page
            after = {"after": page[-1]["thread_id"], "after_relation": page[-1]["relation"]}
        assert pages == c.get(f"/threads/{parent}/links", params={"incoming": 1}).json()["incoming"]
        assert len(pages) == len(kids)
        bad = c.get(f"/threads/{parent}/links", params={"incoming": 1, "after": kids[0]})
        assert bad.status_code == 400 and "after_relation" in bad.text
        out = c.get(f"/threads/{kids[0]}/links").json()["links"]
        assert out == [{"thread_id": parent, "relation": "spawned_from"}]
        rec = c.get(f"/threads/{parent}/children", params={"recursive": 1}).json()["descendants"]
        assert sorted(r["thread_id"] for r in rec) == sorted(kids)
        # paging: newest first, cursor until exhausted, each thread once
        seen: list[str] = []
        cursor = None
        for _ in range(1000):
            params: dict[str, Any] = {"limit": 2}
            if cursor:
                params["after"] = cursor
            page = c.get("/threads", params=params).json()
            seen += [h["thread_id"] for h in page["threads"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert len(seen) == len(set(seen))
        assert set(kids) | {parent} <= set(seen)
        assert seen.index(kids[-1]) < seen.index(parent)  # most recently updated first
        h = c.get("/threads", params={"limit": 1}).json()["threads"][0]
        assert set(h) >= {"thread_id", "version", "status", "open_turn_agent", "user_turns", "agent_turns"}


def _approval_turn(c: Any, t: str, path: str) -> str:
    r = c.post("/api/chat", json=chat_body(t, f"please delete {path}"))
    assert r.status_code == 200, r.text
    chunks = [ch for ch in sse_chunks(r.text) if isinstance(ch, dict)]
    req = [ch for ch in chunks if ch["type"] == "tool-approval-request"]
    assert len(req) == 1
    end = next(ch for ch in chunks if ch["type"] == "data-tp-turn_end")
    cid: str = req[0]["toolCallId"]
    assert end["data"]["deferred"] == {cid: "approval"}
    return cid


def test_deferred_tool_approval_over_http(server: ServerProcess) -> None:
    t = tid()
    with server.client() as c:
        cid = _approval_turn(c, t, "a.txt")
        pend = c.get(f"/threads/{t}/pending").json()
        assert [(p["tool_call_id"], p["state"], p["kind"]) for p in pend["pending"]] == [(cid, "deferred", "approval")]
        # a new message while the call waits for a decision is a conflict; nothing is written
        v = head(server.store, t).version
        r = c.post("/api/chat", json=chat_body(t, "never mind"))
        assert r.status_code == 409 and r.json()["error"]["code"] == "awaiting_tool_results"
        assert r.json()["error"]["pending"][0]["tool_call_id"] == cid
        # a decision for an unknown call, or none for the pending one: rejected, nothing written
        r = c.post(f"/threads/{t}/approvals", json={"approvals": {"nope": True}})
        assert r.status_code == 409 and "nope" in r.json()["error"]["message"]
        r = c.post(f"/threads/{t}/approvals", json={"approvals": {cid: "yes"}})
        assert r.status_code == 422 and cid in r.json()["error"]["message"]
        r = c.post(f"/threads/{t}/approvals", json={"results": {cid: "done"}})
        assert r.status_code == 422 and r.json()["error"]["code"] == "wrong_decision_kind"
        assert head(server.store, t).version == v

        r = c.post(f"/threads/{t}/approvals", json={"approvals": {cid: True}})
        assert r.status_code == 200, r.text
        chunks = [ch for ch in sse_chunks(r.text) if isinstance(ch, dict)]
        outs = [ch for ch in chunks if ch["type"] == "tool-output-available"]
        assert outs and outs[0]["toolCallId"] == cid and outs[0]["output"] == "deleted a.txt"
        assert "delete_file: deleted a.txt." in "".join(ch.get("delta", "") for ch in chunks)
        assert c.get(f"/threads/{t}/pending").json()["pending"] == []
        th = from_json(c.get(f"/threads/{t}").content, m.Thread)
        assert [type(x).__name__ for x in th.turns] == ["UserTurn", "AgentTurn", "AgentTurn"]
        last = th.turns[-1]
        assert isinstance(last, m.AgentTurn) and last.completion_status == "complete"
        ret = [p for msg in last.messages if isinstance(msg, m.RequestMessage) for p in msg.parts]
        assert isinstance(ret[0], m.ToolReturnPart) and ret[0].tool_call_id == cid and ret[0].status == "success"
        # deciding again: nothing pending any more
        r = c.post(f"/threads/{t}/approvals", json={"approvals": {cid: True}})
        assert r.status_code == 409 and r.json()["error"]["code"] == "nothing_pending"


def test_denial_and_sdk_v6_approval_body(server: ServerProcess) -> None:
    t1, t2 = tid(), tid()
    with server.client() as c:
        cid = _approval_turn(c, t1, "b.txt")
        r = c.post(f"/threads/{t1}/approvals", json={"approvals": {cid: {"approved": False, "reason": "keep it"}}})
        assert r.status_code == 200
        assert "tool-output-denied" in r.text and "delete_file: keep it." in r.text
        th = from_json(c.get(f"/threads/{t1}").content, m.Thread)
        parts = [p for msg in th.turns[-1].messages if isinstance(msg, m.RequestMessage) for p in msg.parts]  # type: ignore[union-attr]
        assert isinstance(parts[0], m.ToolReturnPart) and parts[0].status == "error"

        # the AI SDK v6 way: the assistant message comes back with an approval-responded tool part
        cid2 = _approval_turn(c, t2, "c.txt")
        body = {"trigger": "submit-message", "id": t2, "messages": [
            {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "please delete c.txt"}]},
            {"id": "a1", "role": "assistant", "parts": [
                {"type": "tool-delete_file", "toolCallId": cid2, "state": "approval-responded",
                 "input": {"path": "c.txt"}, "approval": {"id": cid2, "approved": True}}]},
        ]}
        r = c.post("/api/chat", json=body)
        assert r.status_code == 200, r.text
        assert "deleted c.txt" in r.text
        assert c.get(f"/threads/{t2}/pending").json()["pending"] == []


def test_model_error_is_recorded(server: ServerProcess) -> None:
    t = tid()
    with server.client() as c:
        r = c.post("/api/chat", json=chat_body(t, "fail now"))
        assert r.status_code == 200
        types = [ch["type"] for ch in sse_chunks(r.text) if isinstance(ch, dict)]
        assert "error" in types
    last = read_events(server.store, t)[-1].event
    assert isinstance(last, AgentTurnInterrupted) and last.interruption.reason == "error"
    assert head(server.store, t).open_turn_agent is None


def test_bad_requests(server: ServerProcess) -> None:
    t = tid()
    with server.client() as c:
        r = c.post("/api/chat", content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "malformed_json"
        r = c.post("/api/chat", content=b"", headers={"content-type": "application/json"})
        assert r.status_code == 400
        assert c.post("/api/chat", content=b"").status_code == 415  # no Content-Type: what a page of any site can send
        r = c.post("/api/chat", json=[1, 2])
        assert r.status_code == 422 and "object" in r.json()["error"]["message"]
        r = c.post("/api/chat", json={"id": t})
        assert r.status_code == 422 and "messages" in r.json()["error"]["message"]
        r = c.post("/api/chat", json={"id": t, "messages": [{"role": "user", "parts": [{"type": "text"}]}]})
        assert r.status_code == 422 and r.json()["error"]["errors"]
        r = c.post("/api/chat", json={"id": t, "messages": []})
        assert r.status_code == 422 and r.json()["error"]["code"] == "nothing_to_run"
        r = c.post("/api/chat", json=chat_body(t, "hi", agent="nobody"))
        assert r.status_code == 422 and "nobody" in r.json()["error"]["message"]
        r = c.post("/api/chat", json={**chat_body(t, "hi"), "trigger": "regenerate-message"})
        assert r.status_code == 409 and r.json()["error"]["code"] == "unknown_message"  # nothing to answer again
        r = c.post("/api/chat", json=chat_body(t, "hi"), headers={"if-match": "abc"})
        assert r.status_code == 400
        # none of that wrote anything
        assert c.get(f"/threads/{t}").status_code == 404

        # unknown thread: 404 everywhere
        for path in ("", "/turns", "/pending", "/interrupts", "/children", "/links", "/links?incoming=1",
                     "/events"):
            r = c.get(f"/threads/{t}{path}")
            assert r.status_code == 404, path
            assert r.json()["error"]["code"] == "not_found" and t in r.json()["error"]["message"]
        r = c.post(f"/threads/{t}/approvals", json={"approvals": {"x": True}})
        assert r.status_code == 404
        assert c.get("/no/such/route").status_code == 404
        assert c.get("/api/chat").status_code == 405

        # version conflicts: If-Match on a thread at another version; nothing written
        r = c.post("/api/chat", json=chat_body(t, "hi"), headers={"if-match": "3"})
        assert r.status_code == 409 and r.json()["error"]["code"] == "version_conflict"
        assert c.get(f"/threads/{t}").status_code == 404
        r = c.post("/api/chat", json=chat_body(t, "hi"), headers={"if-match": "0"})
        assert r.status_code == 200
        v = head(server.store, t).version
        r = c.post("/api/chat", json=chat_body(t, "again"), headers={"if-match": str(v - 1)})
        assert r.status_code == 409
        assert r.json()["error"]["expected"] == v - 1 and r.json()["error"]["actual"] == v
        assert head(server.store, t).version == v
        r = c.post("/api/chat", json=chat_body(t, "again"), headers={"if-match": str(v)})
        assert r.status_code == 200

        # query parameters
        assert c.get("/threads", params={"limit": "x"}).status_code == 422
        assert c.get("/threads", params={"limit": 0}).status_code == 422
        r = c.get("/threads", params={"after": "zz"})
        assert r.status_code == 422 and "cursor" in r.json()["error"]["message"]
        assert c.get(f"/threads/{t}/events", headers={"last-event-id": "x"}).status_code == 400
        assert c.get(f"/threads/{t}/links", params={"incoming": "maybe"}).status_code == 422
        r = c.post(f"/threads/{t}/approvals", json={"approvals": {}})
        assert r.status_code == 422
        r = c.post(f"/threads/{t}/approvals", json={"approvals": {"x": True}, "extra": 1})
        assert r.status_code == 422 and "extra" in r.json()["error"]["message"]


def test_turn_open_conflict(server: ServerProcess) -> None:
    """A second message while the agent turn is still running *and its client still reads it*: 409
    (after the short grace a stop-then-send gets for the server to notice the client went away),
    nothing written, the run undisturbed. (A run whose client went away: tests/aisdk, stop then send.)"""
    import threading

    t = tid()
    with server.client() as c:
        done: list[Any] = []

        def slow() -> None:
            with server.client() as c2:
                done.append(c2.post("/api/chat", json=chat_body(t, "slow 120 50")))

        th = threading.Thread(target=slow)
        th.start()
        try:
            from server.server_harness import wait_until

            wait_until(lambda: _open(server, t))
            v = head(server.store, t).version
            r = c.post("/api/chat", json=chat_body(t, "interrupting"))
            assert r.status_code == 409 and r.json()["error"]["code"] in ("turn_open", "version_conflict")
            # the run was not disturbed; the rejected request wrote nothing of its own
            assert all(type(e.event).__name__ != "UserTurnSubmitted" for e in read_events(server.store, t)[v:])
        finally:
            th.join(30)
        assert done and done[0].status_code == 200
        events = read_events(server.store, t)
        assert isinstance(events[-1].event, AgentTurnCompleted)
        assert sum(type(e.event).__name__ == "UserTurnSubmitted" for e in events) == 1


def _open(server: ServerProcess, t: str) -> bool:
    try:
        return head(server.store, t).open_turn_agent is not None
    except Exception:
        return False


def test_sse_frames_helper() -> None:
    assert sse_frames("id: 1\nevent: x\ndata: {}\n\n: ping\n\n") == [{"id": "1", "event": "x", "data": "{}"}]


def test_chat_ids_that_are_not_uuids(server: ServerProcess) -> None:
    """An AI SDK chat id ("chat-1", useChat's nanoid) names a UUIDv5 thread; every endpoint takes either."""
    from tplog.integrations.vercel import CHAT_ID_KEY, thread_id_for_chat
    from tplog.protocol.validate import validate

    chat = f"chat-{uuid.uuid4().hex[:8]}"
    t = thread_id_for_chat(chat)
    assert uuid.UUID(t).version == 5 and thread_id_for_chat(chat) == t
    with server.client() as c:
        r = c.post("/api/chat", json=chat_body(chat, "hello"))
        assert r.status_code == 200, r.text
        assert r.headers["x-tplog-thread"] == t
        r = c.post("/api/chat", json=chat_body(chat, "delete old.txt"))
        assert r.status_code == 200, r.text
        for ident in (chat, t):
            th = from_json(c.get(f"/threads/{ident}").content, m.Thread)
            assert th.thread_id == t and th.metadata == {CHAT_ID_KEY: chat}
            assert validate(th).ok, validate(th).errors
            assert c.get(f"/threads/{ident}/turns").json()["thread_id"] == t
            assert len(c.get(f"/threads/{ident}/pending").json()["pending"]) == 1
            assert c.get(f"/threads/{ident}/interrupts").status_code == 200
            frames = sse_frames(c.get(f"/threads/{ident}/events", params={"follow": "0"}).text)
            assert json.loads(frames[0]["data"])["event"]["thread_id"] == t
        cid = c.get(f"/threads/{chat}/pending").json()["pending"][0]["tool_call_id"]
        r = c.post(f"/threads/{chat}/approvals", json={"approvals": {cid: True}})
        assert r.status_code == 200, r.text
        assert "deleted old.txt" in r.text
    assert [type(t).__name__ for t in fold([e.event for e in read_events(server.store, t)]).thread.turns] == [  # type: ignore[union-attr]
        "UserTurn", "AgentTurn", "UserTurn", "AgentTurn", "AgentTurn"]


def test_client_side_tool_result_resumes_the_run(server: ServerProcess) -> None:
    """AI SDK v6 addToolOutput: the result comes back as an output-available tool part of the
    assistant message; it is the tool return that resumes the run (not a 422, not a re-deferral)."""
    t = tid()
    with server.client() as c:
        r = c.post("/api/chat", json=chat_body(t, "where am I?"))
        assert r.status_code == 200, r.text
        calls = [ch for ch in sse_chunks(r.text) if isinstance(ch, dict) and ch["type"] == "tool-input-available"]
        cid = calls[0]["toolCallId"]
        assert c.get(f"/threads/{t}/pending").json()["pending"][0]["kind"] == "external"
        body = {"trigger": "submit-message", "id": t, "messages": [
            {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "where am I?"}]},
            {"id": "a1", "role": "assistant", "parts": [
                {"type": "step-start"},
                {"type": "tool-get_location", "toolCallId": cid, "state": "output-available",
                 "input": {}, "output": {"city": "Lyon"}}]},
        ]}
        r = c.post("/api/chat", json=body)
        assert r.status_code == 200, r.text
        chunks = [ch for ch in sse_chunks(r.text) if isinstance(ch, dict)]
        assert {"type": "tool-output-available", "toolCallId": cid, "output": {"city": "Lyon"}} in chunks
        assert "get_location: {'city': 'Lyon'}." in "".join(ch.get("delta", "") for ch in chunks)
        assert c.get(f"/threads/{t}/pending").json()["pending"] == []
        th = from_json(c.get(f"/threads/{t}").content, m.Thread)
        last = th.turns[-1]
        assert isinstance(last, m.AgentTurn) and last.completion_status == "complete"
        first = last.messages[0]
        assert isinstance(first, m.RequestMessage) and isinstance(first.parts[0], m.ToolReturnPart)
        assert first.parts[0].tool_call_id == cid and first.parts[0].content == {"city": "Lyon"}
        # the same body again: that result was taken; nothing is waiting for it
        v = head(server.store, t).version
        r = c.post("/api/chat", json=body)
        assert r.status_code == 409 and r.json()["error"]["code"] == "nothing_pending"
        assert head(server.store, t).version == v


def test_links_declared_at_start_deleted_children_and_unknown_ids(server: ServerProcess) -> None:
    from tplog import AgentRegistered, AgentTurnStarted, LinkAdded, MessageRecorded, Store, ThreadStarted
    from tplog.protocol import ThreadLink

    at = "2025-01-01T00:00:00Z"
    parent, declared, spawned, external, unknown = tid(), tid(), tid(), tid(), tid()
    # Written by another process (this one) straight into the store the server has open.
    with Store(server.store) as s:
        spawn = m.SystemMessage(timestamp=at, event_type=m.THREAD_SPAWN, event_data={"spawned_thread_id": spawned})
        agent = AgentRegistered(agent=m.AgentConfig(agent_id="a", agent_name="a", created_at=at))
        s.append(parent, [ThreadStarted(thread_id=parent, created_at=at), agent,
                          AgentTurnStarted(agent_id="a", started_at=at),
                          MessageRecorded(message=spawn), AgentTurnCompleted(completed_at=at)])
        rel = m.ThreadRelationships(links=[ThreadLink(thread_id=parent, relation="spawned_from"),
                                            ThreadLink(thread_id=external, relation="referenced")])
        s.append(declared, [ThreadStarted(thread_id=declared, created_at=at, relationships=rel)])
        s.append(spawned, [ThreadStarted(thread_id=spawned, created_at=at),
                           LinkAdded(link=ThreadLink(thread_id=parent, relation="referenced"))])
        assert sorted(s.children(parent)) == sorted([declared, spawned])
        s.delete_thread(spawned)
    with server.client() as c:
        assert c.get(f"/threads/{parent}/children").json() == {"thread_id": parent, "children": [declared]}
        rec = c.get(f"/threads/{parent}/children", params={"recursive": 1}).json()["descendants"]
        assert rec == [{"thread_id": declared, "depth": 1}]
        inc = c.get(f"/threads/{parent}/links", params={"incoming": 1}).json()["incoming"]
        assert inc == [{"thread_id": declared, "relation": "spawned_from"}]  # the deleted source is gone
        assert c.get(f"/threads/{declared}/links").json()["links"] == [
            {"thread_id": parent, "relation": "spawned_from"}, {"thread_id": external, "relation": "referenced"}]
        # A thread kept elsewhere that a stored thread links to is answered; one nobody knows is 404.
        r = c.get(f"/threads/{external}/links", params={"incoming": 1})
        assert r.status_code == 200 and r.json()["incoming"] == [{"thread_id": declared, "relation": "referenced"}]
        assert c.get(f"/threads/{external}/children").json() == {"thread_id": external, "children": []}
        for path in ("/children", "/children?recursive=1", "/links?incoming=1", "/links"):
            r = c.get(f"/threads/{unknown}{path}")
            assert r.status_code == 404, path
            assert r.json()["error"]["code"] == "not_found" and unknown in r.json()["error"]["message"]
        # The deleted thread: its children query answers (nothing names it as parent), its links are gone.
        assert c.get(f"/threads/{spawned}/children").json() == {"thread_id": spawned, "children": []}
        assert c.get(f"/threads/{spawned}/links").json()["links"] == []
