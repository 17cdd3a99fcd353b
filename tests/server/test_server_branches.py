"""AI SDK v6 regenerate and edit-and-resend on a real server: each answers on a new branch, a fork of
the chat's thread (tplog.integrations.branches); the old branch stays, listed with the new one as its child."""

from __future__ import annotations

import uuid
from typing import Any

from server.server_harness import ServerProcess, chat_body
from tplog import Store, thread_hash
from tplog.integrations.branches import branch_id


def user_msg(mid: str, text: str) -> dict[str, Any]:
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text}]}


def turns(c: Any, thread_id: str) -> list[str]:
    """The thread's turns as ``user:TEXT`` / ``agent:TEXT`` (its first text part)."""
    out = []
    for t in c.get(f"/threads/{thread_id}").json()["turns"]:
        if "parts" in t:
            out.append("user:" + t["parts"][0]["content"])
        else:
            texts = [p["content"] for msg in t["messages"] for p in msg.get("parts", [])
                     if p.get("part_kind") == "text"]
            out.append("agent:" + " ".join(texts))
    return out


def test_regenerate_and_edit_answer_on_new_branches(server: ServerProcess) -> None:
    chat = f"branchy-{uuid.uuid4()}"  # an AI SDK chat id: its first thread is its UUIDv5
    with server.client() as c:
        first = {**chat_body(chat, "first"), "messages": [user_msg("u1", "first")]}
        r = c.post("/api/chat", json=first)
        assert r.status_code == 200, r.text
        root = r.headers["x-tplog-thread"]
        r = c.post("/api/chat", json={**chat_body(chat, "second"), "messages": [user_msg("u2", "second")]})
        assert r.status_code == 200 and r.headers["x-tplog-thread"] == root
        before = turns(c, root)
        assert before == ["user:first", "agent:You said: first", "user:second", "agent:You said: second"]
        with Store(server.store) as s:
            root_hash = thread_hash(s.export(root))

        # regenerate(): the messages up to the user message to answer again; the answer goes on branch 1.
        msgs = c.get(f"/api/chat/{chat}/messages").json()
        assert [m["role"] for m in msgs] == ["user", "assistant", "user", "assistant"]
        regen = {"trigger": "regenerate-message", "id": chat, "messageId": msgs[3]["id"], "messages": msgs[:3]}
        r = c.post("/api/chat", json=regen)
        assert r.status_code == 200, r.text
        b1 = r.headers["x-tplog-thread"]
        assert b1 == branch_id(root, 1) and "You said: second" in r.text
        assert turns(c, b1) == before  # the same exchange, answered again
        doc = c.get(f"/threads/{b1}").json()
        assert doc["relationships"]["links"][0] == {
            "thread_id": root, "relation": "spawned_from",
            "metadata": {"branch_point": "turn_2", "seq": 6, "reason": "regenerate-message"}}
        # The old branch is untouched and reachable; the new one is its child.
        assert c.get(f"/threads/{root}/children").json()["children"] == [b1]
        assert turns(c, root) == before
        with Store(server.store) as s:
            assert thread_hash(s.export(root)) == root_hash
            assert s.head(b1).fork_of == root
        # The chat id now names the new branch: its messages, and where the next message goes.
        now = c.get(f"/api/chat/{chat}/messages").json()
        assert [m["id"] for m in now[:3]] == [m["id"] for m in msgs[:3]] and now[3]["id"] != msgs[3]["id"]
        r = c.post("/api/chat", json={**chat_body(chat, "third"), "messages": [user_msg("u3", "third")]})
        assert r.status_code == 200 and r.headers["x-tplog-thread"] == b1
        assert turns(c, b1)[-2:] == ["user:third", "agent:You said: third"] and turns(c, root) == before

        # sendMessage({text, messageId}): edit the first message and send it again, on branch 2 (a fork of 1).
        edit = {"trigger": "submit-message", "id": chat, "messageId": "u1",
                "messages": [user_msg("u1", "first, edited")]}
        r = c.post("/api/chat", json=edit)
        assert r.status_code == 200, r.text
        b2 = r.headers["x-tplog-thread"]
        assert b2 == branch_id(root, 2)
        assert turns(c, b2) == ["user:first, edited", "agent:You said: first, edited"]
        link = c.get(f"/threads/{b2}").json()["relationships"]["links"][0]
        assert link["thread_id"] == b1 and link["metadata"]["reason"] == "edit-and-resend"
        assert link["metadata"]["seq"] == 2  # after ThreadStarted and AgentRegistered: before the first turn
        assert c.get(f"/threads/{b1}/children").json()["children"] == [b2]
        assert len(turns(c, b1)) == 6  # branch 1 keeps its third exchange

        # Bad input: typed errors, nothing written.
        with Store(server.store) as s:
            last = s.last_position
        r = c.post("/api/chat", json={**regen, "messages": [user_msg("never-sent", "what?")]})
        assert r.status_code == 409 and r.json()["error"]["code"] == "unknown_message"
        r = c.post("/api/chat", json={**regen, "messages": msgs[:2]})  # ends with the assistant's message
        assert r.status_code == 422
        r = c.post("/api/chat", json={**regen, "messages": []})
        assert r.status_code == 422
        r = c.post("/api/chat", json={**edit, "messages": [user_msg("u1", "again")]}, headers={"if-match": "1"})
        assert r.status_code == 409 and r.json()["error"]["code"] == "version_conflict"
        r = c.post("/api/chat", json={**regen, "id": f"never-{uuid.uuid4()}", "messages": [user_msg("u1", "x")]})
        assert r.status_code == 409
        with Store(server.store) as s:
            assert s.last_position == last and not s.exists(branch_id(root, 3))
        # An edit of a message the chat never recorded is just a new message (on the newest branch).
        r = c.post("/api/chat", json={**edit, "messageId": "u9", "messages": [user_msg("u9", "fresh")]})
        assert r.status_code == 200 and r.headers["x-tplog-thread"] == b2
        assert turns(c, b2)[-2:] == ["user:fresh", "agent:You said: fresh"]
    with Store(server.store) as s:
        s.delete_thread(root, cascade=True)
        assert not any(s.exists(t) for t in (root, b1, b2))
