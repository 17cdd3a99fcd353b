"""The README's ``useChat`` page (tests/aisdk/page: React, ``@ai-sdk/react``, built by Vite and served
by ``vite preview``, which proxies ``/api`` to ``tplog serve``) in headless chromium: a chat, a tool
approval, a reload in the middle of an answer (the chat so far from the thread, the answer resumed),
stop then send -- no error shown.

Needs node/npm (tests/aisdk/conftest.py) and chromium + chromedriver + selenium (as the thread
browser's test: under ``CI=true`` a missing one fails, elsewhere the test skips).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from server.browser_harness import chromium, need_browser
from server.server_harness import ServerProcess, free_port, wait_until

PAGE = Path(__file__).resolve().parent / "page"


@pytest.fixture(scope="module")
def page_url(node: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ServerProcess]]:
    need_browser()
    srv = ServerProcess(tmp_path_factory.mktemp("page") / "store", workers=2).start()
    vite = str(PAGE.parent / "node_modules" / ".bin" / "vite")
    out = tmp_path_factory.mktemp("page-dist")
    r = subprocess.run([vite, "build", "--outDir", str(out), "--emptyOutDir"], cwd=PAGE, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, f"vite build failed:\n{r.stdout}\n{r.stderr}"
    port = free_port()
    log = open(out.parent / "vite-preview.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([vite, "preview", "--outDir", str(out), "--host", "127.0.0.1", "--port", str(port),
                             "--strictPort"], cwd=PAGE, env={**os.environ, "TPLOG_URL": srv.url}, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        def up() -> bool:
            assert proc.poll() is None, (out.parent / "vite-preview.log").read_text()
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(url, timeout=2).status_code == 200
            return False

        wait_until(up, timeout=60, interval=0.2)
        yield url, srv
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)
        log.close()
        srv.stop()


@pytest.fixture
def driver() -> Iterator[Any]:
    yield from chromium()


def test_the_readme_usechat_page_against_tplog_serve(page_url: tuple[str, ServerProcess], driver: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    url, srv = page_url

    def text() -> str:  # "" until the page rendered (after a reload: once the saved chat arrived)
        return "".join(str(e.text) for e in driver.find_elements(By.TAG_NAME, "main"))

    def say(words: str) -> None:
        box = wait_until(lambda: driver.find_elements(By.CSS_SELECTOR, "input"))[0]
        wait_until(lambda: driver.find_elements(By.CSS_SELECTOR, "button[type=submit]"))  # ready to send
        box.send_keys(words, Keys.ENTER)

    def shows(s: str, timeout: float = 30) -> None:
        wait_until(lambda: s in text(), timeout=timeout)

    def errors() -> list[str]:
        return [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".error")]

    driver.get(url)
    wait_until(lambda: "?chat=" in driver.current_url)
    chat = driver.current_url.split("?chat=")[1]

    say("hello")
    shows("You said: hello")

    say("delete /tmp/x")  # a tool that needs the user's approval
    wait_until(lambda: driver.find_elements(By.XPATH, "//button[text()='Approve']"))[0].click()
    shows("delete_file: deleted /tmp/x.")

    say("slow 40 100")  # reload in the middle of the answer: the chat so far comes back from the thread
    shows("word3")      # (GET /api/chat/{id}/messages), and useChat resumes the answer (.../stream)
    driver.refresh()
    shows("word39", timeout=60)
    assert "word0 word1" in text()  # replayed from the start
    assert "You said: hello" in text() and "delete_file: deleted /tmp/x." in text()
    assert text().count("word0 ") == 1

    say("slow 200 50")  # stop, then send: no error, the abandoned answer is recorded as cancelled
    shows("word2")
    wait_until(lambda: driver.find_elements(By.XPATH, "//button[text()='Stop']"))[0].click()
    say("after stop")
    shows("You said: after stop")
    assert errors() == []

    turns = httpx.get(f"{srv.url}/threads/{chat}/turns", timeout=30).json()["turns"]
    agent = [t for t in turns if t["turn_type"] == "agent"]
    story = [(t["turn_type"], t.get("completion_status"), [p.get("content") for p in t.get("parts", [])])
             for t in turns]
    assert [t["completion_status"] for t in agent] == ["complete", "complete", "complete", "complete",
                                                       "interrupted", "complete"], repr(story)
    assert agent[4]["interruption"]["reason"] == "user_cancelled"
