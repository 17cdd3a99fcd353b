"""The thread browser at ``/`` in a real headless browser (Debian's chromium driven by Selenium)
against a real ``tplog serve``: list -> thread -> spawned child, as a person sees it.

The store holds a parent thread with a tool call and its return, an interrupted turn, a tool
call waiting for approval, and a spawned child. The server wants a token (issue 37): the
browser signs in once with ``/?token=…``, the test's own requests send it as a Bearer header.
The list's and the thread's newer parts (issue 40) are tested in test_browser_list.py and
test_browser_thread.py.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from server.browser_harness import AUTH, TOKEN, chromium, click, find, login, main_text, shoot
from server.server_harness import ServerProcess, chat_body, wait_until
from tplog import Store
from tplog.events import (
    AgentRegistered,
    AgentTurnCompleted,
    AgentTurnStarted,
    LinkAdded,
    MessageRecorded,
    ThreadStarted,
    UserTurnSubmitted,
)
from tplog.integrations.server.security import ENV_AUTH_TOKEN
from tplog.integrations.vercel import thread_id_for_chat
from tplog.protocol import model as m


@pytest.fixture(scope="module")
def browser_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str, str]]:
    """A server whose store holds the parent (tool call, interruption, pending approval) and a child."""
    srv = ServerProcess(tmp_path_factory.mktemp("browser") / "store", workers=1, env={ENV_AUTH_TOKEN: TOKEN}).start()
    parent_chat, child_chat = f"parent-{uuid.uuid4().hex[:8]}", f"child-{uuid.uuid4().hex[:8]}"
    try:
        with srv.client(headers=AUTH) as c:
            for text in ["weather in Paris", "fail", "delete /tmp/report.txt"]:
                assert c.post("/api/chat", json=chat_body(parent_chat, text)).status_code == 200
            assert c.post("/api/chat", json=chat_body(child_chat, "weather in Oslo")).status_code == 200
        parent, child = thread_id_for_chat(parent_chat), thread_id_for_chat(child_chat)
        with Store(srv.store) as s:  # a second process appending beside the server
            s.append(child, [LinkAdded(link=m.ThreadLink(thread_id=parent, relation="spawned_from"))])
        yield srv, parent, child
    finally:
        srv.stop()


@pytest.fixture
def driver() -> Iterator[Any]:
    yield from chromium()


def test_list_thread_child(browser_server: tuple[ServerProcess, str, str], driver: Any,
                           tmp_path_factory: pytest.TempPathFactory) -> None:
    srv, parent, child = browser_server
    # CI keeps them where TPLOG_SCREENSHOTS says (.ci/run: .ci/screenshots in the checkout); else a temp dir
    keep = os.environ.get("TPLOG_SCREENSHOTS")
    shots = Path(keep) if keep else tmp_path_factory.mktemp("screenshots")
    shots.mkdir(parents=True, exist_ok=True)

    # the list: both threads, most recently updated (the child, linked last) first
    login(driver, srv)
    rows = find(driver, "tr[data-thread]")
    assert [r.get_attribute("data-thread") for r in rows] == [child, parent]
    assert "weather in Paris" in main_text(driver)  # titles come in the page (no request per row)
    shoot(driver, shots / "list.png")

    # list -> thread: the conversation
    click(driver, f'tr[data-thread="{parent}"] a.title')
    find(driver, "section.turn")
    text = wait_until(lambda: (t := main_text(driver)) and "delete_file" in t and t)
    assert "weather in Paris" in text  # the user's prompt
    assert "get_weather" in text and '"city": "Paris"' in text  # the tool call with its arguments
    assert "sunny and 20 °C in Paris" in text  # its return
    assert "Interrupted here: error" in text  # the interruption, in the turn where it happened
    interrupted = find(driver, "section.turn.was-interrupted")
    assert len(interrupted) == 1 and interrupted[0].get_attribute("data-turn") == "3"
    pending = find(driver, ".tool-call.pending")
    assert len(pending) == 1 and "delete_file" in pending[0].text and "awaiting approval" in pending[0].text
    assert "1 tool call waiting: delete_file (awaiting approval)" in text
    shoot(driver, shots / "thread.png")

    # live: approving the call (another client) shows its result and clears the flag, no reload
    with srv.client(headers=AUTH) as c:
        [call] = c.get(f"/threads/{parent}/pending").json()["pending"]
        r = c.post(f"/threads/{parent}/approvals", json={"approvals": {call["tool_call_id"]: True}})
        assert r.status_code == 200
    wait_until(lambda: "delete_file: deleted /tmp/report.txt." in main_text(driver), timeout=20)
    assert "waiting" not in main_text(driver) and not driver.find_elements("css selector", ".tool-call.pending")
    shoot(driver, shots / "thread-live.png")

    # thread -> spawned child, and back to the parent through the family tree
    click(driver, f'.links.family li[data-thread="{child}"] > a[href="#/thread/{child}"]')
    wait_until(lambda: "sunny and 19 °C in Oslo" in main_text(driver))
    assert "waiting" not in main_text(driver)  # nothing pending in the child
    back = find(driver, f'.links.family li[data-thread="{parent}"] > a[href="#/thread/{parent}"]')
    assert back
    shoot(driver, shots / "child.png")
    print(f"\nbrowser screenshots: {shots}")
    for name in ("list.png", "thread.png", "thread-live.png", "child.png"):
        assert (shots / name).stat().st_size > 10_000, name


def test_stored_text_is_not_html(browser_server: tuple[ServerProcess, str, str], driver: Any) -> None:
    """A prompt holding markup shows as text: no element is made from it, no script runs."""
    srv, _, _ = browser_server
    chat = f"xss-{uuid.uuid4().hex[:8]}"
    payload = '<img src=x onerror="window.__pwned=1"><b id="injected">bold</b>'
    with srv.client(headers=AUTH) as c:
        assert c.post("/api/chat", json=chat_body(chat, payload)).status_code == 200
    login(driver, srv)
    driver.get(f"{srv.url}/#/thread/{thread_id_for_chat(chat)}")
    wait_until(lambda: payload in main_text(driver))
    from selenium.webdriver.common.by import By

    assert driver.find_elements(By.ID, "injected") == []
    assert driver.execute_script("return window.__pwned === undefined") is True


def test_page_assets(browser_server: tuple[ServerProcess, str, str]) -> None:
    """The page and its assets come from the package; other names under /ui/ are 404."""
    srv, _, _ = browser_server
    with srv.client(headers=AUTH) as c:
        page = c.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        csp = page.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "*" not in csp and "frame-ancestors 'none'" in csp
        assert page.headers["x-content-type-options"] == "nosniff"
        assert '<script type="module" src="/ui/app.js">' in page.text
        for name in ("app.js", "dom.js", "list.js", "thread.js", "family.js"):  # ES modules need a JS type
            assert c.get(f"/ui/{name}").headers["content-type"].startswith("text/javascript"), name
        assert c.get("/ui/app.css").headers["content-type"].startswith("text/css")
        assert c.get("/ui/__init__.py").status_code == 404
        assert c.get("/ui/..%2F__init__.py").status_code == 404


def test_turn_in_progress_shows_live(browser_server: tuple[ServerProcess, str, str], driver: Any) -> None:
    """A run started while the page is open shows as a turn in progress, then as its completed turn."""
    import threading

    srv, _, _ = browser_server
    chat = f"live-{uuid.uuid4().hex[:8]}"
    with srv.client(headers=AUTH) as c:
        assert c.post("/api/chat", json=chat_body(chat, "hello")).status_code == 200
    login(driver, srv)
    driver.get(f"{srv.url}/#/thread/{thread_id_for_chat(chat)}")
    wait_until(lambda: "You said: hello" in main_text(driver))
    find(driver, "#live:not([hidden])")

    def slow() -> None:
        with srv.client(timeout=60.0, headers=AUTH) as c:
            c.post("/api/chat", json=chat_body(chat, "slow 30 100"))  # 30 words, 100 ms apart

    runner = threading.Thread(target=slow)
    runner.start()
    try:
        # read in the page: the view is re-rendered on every event, so element handles go stale
        open_text = 'const e = document.querySelector("section.turn.open"); return e ? e.innerText : ""'
        wait_until(lambda: "in progress" in driver.execute_script(open_text), timeout=20)
        wait_until(lambda: "word29" in main_text(driver)
                   and not driver.find_elements("css selector", "section.turn.open"), timeout=30)
    finally:
        runner.join(60)


def test_files_and_remote_images(browser_server: tuple[ServerProcess, str, str], driver: Any,
                                 tmp_path_factory: pytest.TempPathFactory) -> None:
    """A PDF part renders (its label was shadowed: "label is not a function" took the whole view
    down), and an image at a web address is a link the page never fetches (it would tell the
    address's owner who reads the thread)."""
    import base64
    import http.server
    import threading

    from selenium.webdriver.common.by import By

    srv, _, _ = browser_server
    hits: list[str] = []

    class Tracker(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    tracker = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Tracker)
    threading.Thread(target=tracker.serve_forever, daemon=True).start()
    pixel = f"http://127.0.0.1:{tracker.server_address[1]}/pixel.png?who=reader"
    pdf = base64.b64encode(b"%PDF-1.4 tiny").decode()
    png = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")
    t, at = str(uuid.uuid4()), "2025-01-20T10:00:00Z"
    with Store(srv.store) as s:
        s.append(t, [
            ThreadStarted(thread_id=t, created_at=at, title="files"),
            AgentRegistered(agent=m.AgentConfig(agent_id="a", agent_name="a", created_at=at)),
            UserTurnSubmitted(turn=m.UserTurn(submitted_at=at, parts=[m.UserPromptPart(content=[
                "see these", m.ImageUrl(url=pixel), m.BinaryContent(data=pdf, media_type="application/pdf",
                                                                    identifier="report.pdf"),
                m.ImageUrl(url=f"data:image/png;base64,{png}")])])),
            AgentTurnStarted(agent_id="a", started_at=at),
            MessageRecorded(message=m.ResponseMessage(timestamp=at, agent_id="a", parts=[
                m.TextPart(content="here is the invoice"),
                m.FilePart(content=m.BinaryContent(data=pdf, media_type="application/pdf",
                                                   identifier="invoice.pdf"))])),
            AgentTurnCompleted(completed_at=at),
        ])
    try:
        login(driver, srv)
        driver.get(f"{srv.url}/#/thread/{t}")
        text = wait_until(lambda: (x := main_text(driver)) and "invoice.pdf" in x and x)
        assert not driver.find_elements(By.CSS_SELECTOR, "p.error"), text
        assert "report.pdf (application/pdf" in text and "here is the invoice" in text
        imgs = [i.get_attribute("src") for i in driver.find_elements(By.CSS_SELECTOR, "main img")]
        assert imgs == [f"data:image/png;base64,{png}"]  # the inline one only
        [link] = driver.find_elements(By.CSS_SELECTOR, "main a.remote")
        assert link.get_attribute("href") == pixel and link.text == pixel
        keep = os.environ.get("TPLOG_SCREENSHOTS")
        shots = Path(keep) if keep else tmp_path_factory.mktemp("screenshots-files")
        shots.mkdir(parents=True, exist_ok=True)
        shoot(driver, shots / "files.png")
        assert hits == []  # nothing fetched the remote image
    finally:
        tracker.shutdown()
