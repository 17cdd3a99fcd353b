"""Who may use the server and from where (issue 37), as HTTP semantics: the whole ASGI app in
process (Starlette's test client, a real LMDB store, the scripted demo agent). What only a real
server shows (the address connected to, uvicorn's access log, the bind refusal) is in
test_security_server.py.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.requests import Request
from starlette.testclient import TestClient

from server.server_harness import chat_body
from tplog import Store
from tplog.integrations.server import ServeError, create_app, demo_agents
from tplog.integrations.vercel import thread_id_for_chat

TOKEN = "t0ken-" + "x" * 26
SUPERSCRIPT_2 = "²".encode("latin-1")  # a header's bytes are latin-1 to Starlette: '²', which isdigit() takes
ALICE, BOB = "alice-" + "a" * 26, "bob-" + "b" * 28


def _app(path: Path, **kw: Any) -> Any:
    return create_app(str(path), demo_agents(), heartbeat=3600, **kw)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(_app(tmp_path / "s")) as c:
        yield c


def _stored(c: TestClient, scope: str | None = None) -> list[str]:
    """The thread ids in the store (or one scope of it), read from the store itself."""
    store: Store = c.app.state.tplog._astore.store  # type: ignore[attr-defined]
    view = store.scoped(scope) if scope else store
    return [h.thread_id for h in view.threads(include_deleted=True).threads]


# --------------------------------------------------------------------------- cross-site, rebinding


def test_cross_site_simple_post_is_refused_and_writes_nothing(client: TestClient) -> None:
    """A page of another site can POST text/plain (or a typeless blob) without a CORS preflight."""
    body = json.dumps(chat_body("evil-chat", "hi")).encode()
    r = client.post("/api/chat", content=body, headers={"content-type": "text/plain", "origin": "https://evil.example"})
    assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_media_type"
    assert client.post("/api/chat", content=body).status_code == 415  # no Content-Type at all
    r = client.post("/api/chat", content=body, headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 415
    for origin in ("https://evil.example", "null", "http://testserver.evil.example"):
        r = client.post("/api/chat", content=body, headers={"content-type": "application/json", "origin": origin})
        assert r.status_code == 403 and r.json()["error"]["code"] == "origin_not_allowed", origin
    r = client.post("/threads/" + str(uuid.uuid4()) + "/fork", json={"at": 1}, headers={"origin": "https://e.example"})
    assert r.status_code == 403
    assert _stored(client) == []  # nothing written
    # the server's own origin, or none (curl, the AI SDK in Node), is a request like any other
    r = client.post("/api/chat", json=chat_body("own-chat", "hi"), headers={"origin": "http://testserver"})
    assert r.status_code == 200, r.text
    # its host on another port: a dev server's page whose proxy (Vite's) sends the API's own Host
    r = client.post("/api/chat", json=chat_body("own-chat", "hi"), headers={"origin": "http://testserver:5173"})
    assert r.status_code == 200, r.text
    r = client.post("/api/chat", json=chat_body("own-chat", "hi"),
                    headers={"origin": "http://localhost:5173", "host": "127.0.0.1:8000"})
    assert r.status_code == 200, r.text
    assert client.post("/api/chat", json=chat_body("own-chat", "again"),
                       headers={"content-type": "application/json; charset=utf-8"}).status_code == 200
    assert _stored(client) == [thread_id_for_chat("own-chat")]


def test_allowed_origin(tmp_path: Path) -> None:
    from tplog.integrations.server import Security

    with TestClient(_app(tmp_path / "s", security=Security(allowed_origins=("https://App.example",)))) as c:
        assert c.post("/api/chat", json=chat_body("c", "hi"), headers={"origin": "https://app.example"}).status_code \
            == 200
        assert c.post("/api/chat", json=chat_body("c", "hi"), headers={"origin": "https://b.example"}).status_code \
            == 403


def test_rebinding_host_is_refused(client: TestClient) -> None:
    """A DNS-rebinding page reaches the port under its own name: the Host header names it."""
    r = client.get("/threads", headers={"host": "attacker.example:8765"})
    assert r.status_code == 421 and r.json()["error"]["code"] == "host_not_allowed"
    assert client.get("/", headers={"host": "attacker.example"}).status_code == 421
    for host in ("localhost:1234", "127.0.0.1:8000", "[::1]:9", "LOCALHOST", "testserver"):
        assert client.get("/threads", headers={"host": host}).status_code == 200, host


def test_allowed_hosts(tmp_path: Path) -> None:
    from tplog.integrations.server import Security

    with TestClient(_app(tmp_path / "s", security=Security(allowed_hosts=("Chat.Example",)))) as c:
        assert c.get("/threads", headers={"host": "chat.example:443"}).status_code == 200
        assert c.get("/threads", headers={"host": "other.example"}).status_code == 421
    with TestClient(_app(tmp_path / "s2", security=Security(allowed_hosts=("*",)))) as c:
        assert c.get("/threads", headers={"host": "other.example"}).status_code == 200


# --------------------------------------------------------------------------- headers, malformed input


def _secure_headers(r: Any) -> None:
    csp = r.headers["content-security-policy"]
    assert "*" not in csp and "frame-ancestors 'none'" in csp and "img-src 'self' data:" in csp, csp
    assert r.headers["x-content-type-options"] == "nosniff" and r.headers["referrer-policy"] == "no-referrer"


def test_security_headers_on_every_response(client: TestClient) -> None:
    for r in (client.get("/"), client.get("/ui/app.js"), client.get("/threads"), client.get("/health"),
              client.get("/nowhere"), client.get(f"/threads/{uuid.uuid4()}"), client.post("/api/chat", content=b"x"),
              client.get("/threads", headers={"host": "evil.example"})):
        _secure_headers(r)


def test_malformed_headers_and_params_are_400_not_500(client: TestClient) -> None:
    """'²'.isdigit() is True and int('²') raises: each was a 500 with the ValueError's text."""
    t = str(uuid.uuid4())
    r = client.post("/api/chat", json=chat_body(t, "hi"), headers={"if-match": SUPERSCRIPT_2})
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_if_match"
    r = client.post("/api/chat", json=chat_body(t, "hi"), headers={"if-match": "9" * 40})
    assert r.status_code == 400
    r = client.get(f"/threads/{t}/events?follow=0", headers={"last-event-id": SUPERSCRIPT_2})
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_last_event_id"
    r = client.get("/threads?created_after=%C2%B2")
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input"
    assert "ValueError" not in r.text
    assert _stored(client) == []


def test_internal_errors_carry_no_internals(tmp_path: Path) -> None:
    from tplog.integrations.server import Security

    def auth(request: Request) -> str | None:
        raise RuntimeError("db password is hunter2")

    with TestClient(_app(tmp_path / "s", security=Security(authenticator=auth)), raise_server_exceptions=False) as c:
        r = c.get("/threads")
        assert r.status_code == 500 and "hunter2" not in r.text and "RuntimeError" not in r.text
        _secure_headers(r)
    # an error out of a route: the app's 500 handler (the route is one the test adds)
    app = _app(tmp_path / "s2")

    async def boom(request: Request) -> Any:
        raise KeyError("secret-internal-key")

    app.add_route("/boom", boom)
    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.get("/boom")
        assert r.status_code == 500 and r.json()["error"]["code"] == "internal_error"
        assert "secret-internal-key" not in r.text and "KeyError" not in r.text
        _secure_headers(r)


# --------------------------------------------------------------------------- the token


def test_token(tmp_path: Path) -> None:
    from tplog.integrations.server import Security

    with TestClient(_app(tmp_path / "s", security=Security(token=TOKEN))) as c:
        r = c.get("/threads")
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
        _secure_headers(r)
        for bad in ("Bearer nope", "Bearer " + TOKEN[:-1], "Basic " + TOKEN, TOKEN, "Bearer"):
            assert c.get("/threads", headers={"authorization": bad}).status_code == 401, bad
        assert c.get("/", follow_redirects=False).status_code == 401
        assert c.post("/api/chat", json=chat_body("c", "hi")).status_code == 401
        assert c.get("/threads?token=" + TOKEN, headers={"x": "y"}, follow_redirects=False).status_code == 303
        assert c.get("/health").status_code == 200  # probes need no token
        auth = {"authorization": "Bearer " + TOKEN}
        assert c.get("/threads", headers=auth).status_code == 200
        assert c.post("/api/chat", json=chat_body("c", "hi"), headers=auth).status_code == 200
        # a token in the cookie does not make a cross-site POST acceptable
        r = c.post("/api/chat", json=chat_body("c", "hi"), headers={**auth, "origin": "https://evil.example"})
        assert r.status_code == 403
        assert _stored(c) == [thread_id_for_chat("c")]


def test_page_login_sets_a_strict_cookie_and_drops_the_token(tmp_path: Path) -> None:
    from tplog.integrations.server import Security

    with TestClient(_app(tmp_path / "s", security=Security(token=TOKEN))) as c:
        assert c.get("/?token=wrong-" + "w" * 20, follow_redirects=False).status_code == 401
        r = c.get(f"/?token={TOKEN}&x=1", follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/?x=1"
        cookie = r.headers["set-cookie"]
        assert "tplog_token=" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
        assert "Secure" not in cookie  # plain http: a Secure cookie would never come back
        assert c.get("/threads").status_code == 200  # the cookie, kept by the client
        assert c.get("/%2F%2Fevil.example?token=" + TOKEN, follow_redirects=False).headers["location"] == "/"
    with TestClient(_app(tmp_path / "s2", security=Security(token=TOKEN)), base_url="https://testserver") as c:
        r = c.get("/?token=" + TOKEN, follow_redirects=False)
        assert r.status_code == 303 and "Secure" in r.headers["set-cookie"]


# --------------------------------------------------------------------------- users and their scopes


def _two_users(c: TestClient, a: dict[str, str], b: dict[str, str]) -> None:
    """Alice and Bob each chat; each sees only their own threads; Alice's ids are 404 to Bob."""
    assert c.post("/api/chat", json=chat_body("chat-a", "delete /tmp/a.txt"), headers=a).status_code == 200
    assert c.post("/api/chat", json=chat_body("chat-b", "weather in Oslo"), headers=b).status_code == 200
    ta, tb = thread_id_for_chat("chat-a"), thread_id_for_chat("chat-b")
    assert [t["thread_id"] for t in c.get("/threads", headers=a).json()["threads"]] == [ta]
    assert [t["thread_id"] for t in c.get("/threads", headers=b).json()["threads"]] == [tb]
    assert c.get(f"/threads/{ta}", headers=a).status_code == 200
    for path in (f"/threads/{ta}", "/threads/chat-a", f"/threads/{ta}/turns", f"/threads/{ta}/pending",
                 f"/threads/{ta}/events?follow=0", f"/threads/{ta}/interrupts"):
        r = c.get(path, headers=b)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", path
    assert c.get("/api/chat/chat-a/messages", headers=b).json() == []  # as any chat not started
    assert c.post(f"/threads/{ta}/fork", json={"at": 1}, headers=b).status_code == 404
    [call] = c.get(f"/threads/{ta}/pending", headers=a).json()["pending"]
    r = c.post(f"/threads/{ta}/approvals", json={"approvals": {call["tool_call_id"]: True}}, headers=b)
    assert r.status_code == 404
    assert c.get("/api/chat/chat-a/stream", headers=b).status_code == 204
    # Bob's message to Alice's chat id starts a thread of Bob's own; Alice's is as it was
    before = c.get(f"/threads/{ta}/turns", headers=a).json()["version"]
    assert c.post("/api/chat", json=chat_body("chat-a", "hello"), headers=b).status_code == 200
    assert c.get(f"/threads/{ta}/turns", headers=a).json()["version"] == before
    assert {t["thread_id"] for t in c.get("/threads", headers=b).json()["threads"]} == {ta, tb}
    # the store itself: each user's threads in their scope, none unscoped
    assert _stored(c) == []


def test_users_file_tokens_scope_each_user(tmp_path: Path) -> None:
    from tplog.integrations.server import Security

    with TestClient(_app(tmp_path / "s", security=Security(users={"alice": ALICE, "bob": BOB}))) as c:
        assert c.get("/threads").status_code == 401
        assert c.get("/threads", headers={"authorization": "Bearer " + TOKEN}).status_code == 401
        _two_users(c, {"authorization": "Bearer " + ALICE}, {"authorization": "Bearer " + BOB})
        assert _stored(c, "alice") == [thread_id_for_chat("chat-a")]
        # a login link followed from another site would log the browser in as that site's user
        r = c.get("/?token=" + BOB, headers={"sec-fetch-site": "cross-site"}, follow_redirects=False)
        assert r.status_code == 403
        assert c.get("/?token=" + BOB, headers={"sec-fetch-site": "none"}, follow_redirects=False).status_code == 303


def test_trusted_user_header_scopes_each_user(tmp_path: Path) -> None:
    from tplog.integrations.server import Security

    with TestClient(_app(tmp_path / "s", security=Security(user_header="X-Forwarded-User"))) as c:
        r = c.get("/threads")
        assert r.status_code == 401 and "X-Forwarded-User" in r.json()["error"]["message"]
        assert c.get("/threads", headers={"x-forwarded-user": "u" * 300}).status_code == 401
        _two_users(c, {"x-forwarded-user": "alice"}, {"x-forwarded-user": "bob"})
        assert _stored(c, "bob") and _stored(c, "alice") == [thread_id_for_chat("chat-a")]


def test_authenticator_function(tmp_path: Path) -> None:
    from tplog.integrations.server import Security

    def auth(request: Request) -> str | None:
        return {"k-a": "alice", "k-b": "bob"}.get(request.headers.get("x-key", ""))

    with TestClient(_app(tmp_path / "s", security=Security(authenticator=auth))) as c:
        assert c.get("/threads", headers={"x-key": "nope"}).status_code == 401
        _two_users(c, {"x-key": "k-a"}, {"x-key": "k-b"})


# --------------------------------------------------------------------------- options


def test_bad_options_are_serve_errors(tmp_path: Path) -> None:
    from tplog.integrations.server import Security
    from tplog.integrations.server.security import read_token_file, read_users_file

    bad: list[dict[str, Any]] = [
        {"token": "short"}, {"token": TOKEN, "users": {"a": ALICE}}, {"users": {"a": ALICE}, "user_header": "X-U"},
        {"users": {"a": "short"}}, {"users": {"": ALICE}}, {"users": {"a": ALICE, "b": ALICE}},
        {"user_header": "X U"}, {"allowed_origins": ("https://a.example/path",)},
    ]
    for kw in bad:
        with pytest.raises(ServeError):
            Security(**kw)
    with pytest.raises(ServeError, match="cannot read"):
        read_token_file(str(tmp_path / "missing"))
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ServeError, match="empty"):
        read_token_file(str(tmp_path / "empty"))
    for text in ("{not json", "[]", "{}"):
        (tmp_path / "users.json").write_text(text)
        with pytest.raises(ServeError, match="users"):
            read_users_file(str(tmp_path / "users.json"))
    with pytest.raises(ServeError, match="cannot read"):
        read_users_file(str(tmp_path / "missing"))
    with pytest.raises(ServeError, match="authenticator"):
        Security(authenticator=lambda r: "x").to_env()
    for text in ("{", "[1]"):
        with pytest.raises(ServeError, match="TPLOG_SERVER_AUTH_USERS"):
            Security.from_env({"TPLOG_SERVER_AUTH_USERS": text})


def test_options_round_trip_through_the_environment(tmp_path: Path) -> None:
    from tplog.integrations.server import Security
    from tplog.integrations.server.security import ENV_AUTH_TOKEN_FILE, ENV_AUTH_USERS_FILE

    sec = Security(users={"alice": ALICE}, allowed_hosts=("a.example", "b.example"),
                   allowed_origins=("https://a.example",))
    back = Security.from_env(sec.to_env())
    assert (back.users, back.allowed_hosts, back.allowed_origins) == (sec.users, sec.allowed_hosts,
                                                                      sec.allowed_origins)
    (tmp_path / "tok").write_text(TOKEN + "\n")
    (tmp_path / "users.json").write_text(json.dumps({"bob": BOB}))
    assert Security.from_env({ENV_AUTH_TOKEN_FILE: str(tmp_path / "tok")}).token == TOKEN
    assert Security.from_env({ENV_AUTH_USERS_FILE: str(tmp_path / "users.json")}).users == {"bob": BOB}
    assert Security.from_env({"TPLOG_SERVER_TRUSTED_USER_HEADER": "X-User"}).user_header == "X-User"


def test_the_live_table_is_per_user() -> None:
    """Resumable streams are keyed by thread id: the same id in two scopes is two streams."""
    from tplog.backends.live import MemoryLive
    from tplog.integrations.server.security import ScopedLive

    live = MemoryLive()
    a, b = ScopedLive(live, "alice"), ScopedLive(live, "bob")
    t = str(uuid.uuid4())
    a.write(t, 3, [b"data: alice's\n\n"])
    assert b.read(t) == (None, []) and live.read(t) == (None, [])
    assert a.read(t)[1] == [b"data: alice's\n\n"]
    assert b.request_stop(t, 3) is False and a.request_stop(t, 3) is True
    b.expire(t, 3)
    assert a.read(t)[0] is not None
    a.write(t, 3, [], done=True)
    assert b.sweep(done_before=2**62, stale_before=0) == 1 and a.read(t) == (None, [])
    a.write(t, 4, [b"x"])
    a.expire(t, 4)
    assert a.read(t) == (None, [])


def test_access_log_filter_redacts_tokens_only() -> None:
    import logging

    from tplog.integrations.server.security import redact_access_log

    redact_access_log()
    redact_access_log()  # once is enough, twice is harmless
    logger = logging.getLogger("uvicorn.access")
    assert len([f for f in logger.filters if type(f).__name__ == "_RedactToken"]) == 1
    rec = logger.makeRecord("uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s" %d',
                            ("1.2.3.4", "GET", f"/a?x=1&token={TOKEN}&y=2", 303), None)
    assert all(f.filter(rec) for f in logger.filters)
    assert rec.getMessage() == '1.2.3.4 - "GET /a?x=1&token=[redacted]&y=2" 303'
    plain = logger.makeRecord("uvicorn.access", logging.INFO, __file__, 1, "no args", None, None)
    assert all(f.filter(plain) for f in logger.filters) and plain.getMessage() == "no args"
