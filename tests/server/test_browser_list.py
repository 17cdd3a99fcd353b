"""The thread list in chromium against a real ``tplog serve`` (issue 40): one request per page,
the activity and agents-by-name columns, the server's filters, cursor paging, the keyboard,
an error answer shown as such, and cards at phone width. Screenshots as test_browser.py's."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from server.browser_harness import (
    TOKEN,
    chromium,
    console_errors,
    find,
    keys,
    login,
    low_contrast,
    main_text,
    shoot,
    shots_dir,
)
from server.server_harness import ServerProcess, wait_until
from tplog import Store
from tplog.events import (
    AgentRegistered,
    AgentTurnCompleted,
    AgentTurnInterrupted,
    AgentTurnStarted,
    MessageRecorded,
    ThreadStarted,
    UserTurnSubmitted,
)
from tplog.integrations.server.security import ENV_AUTH_TOKEN
from tplog.protocol import model as m

T = "2025-01-20T10:00:00Z"
SUPPORT = str(uuid.uuid4())  # an agent id as applications make them: a UUID, shown by its name


def _make(s: Store, title: str, end: Any, *, agent: str = "helper", name: str = "Helper", **kw: Any) -> str:
    t = str(uuid.uuid4())
    evs: list[Any] = [
        ThreadStarted(thread_id=t, created_at=T, title=title, **kw),
        AgentRegistered(agent=m.AgentConfig(agent_id=agent, agent_name=name, model_name="test-model", created_at=T)),
        UserTurnSubmitted(turn=m.UserTurn(submitted_at=T, parts=[m.UserPromptPart(content=f"about {title}")])),
        AgentTurnStarted(agent_id=agent, started_at=T),
        MessageRecorded(message=m.ResponseMessage(timestamp=T, agent_id=agent, parts=[m.TextPart(content="ok")])),
    ]
    if end is not None:
        evs.append(end)
    s.append(t, evs)
    return t


@pytest.fixture(scope="module")
def list_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, dict[str, str]]]:
    srv = ServerProcess(tmp_path_factory.mktemp("browser-list") / "store", env={ENV_AUTH_TOKEN: TOKEN})
    ids: dict[str, str] = {}
    with Store(srv.store) as s:
        for i in range(4):
            ids[f"idle{i}"] = _make(s, f"Idle chat {i}", AgentTurnCompleted(completed_at=T))
        ids["tools"] = _make(s, "Needs a client tool", AgentTurnCompleted(completed_at=T, deferred={"c": "external"}))
        ids["crash"] = _make(s, "Crashed run", AgentTurnInterrupted(
            interruption=m.Interruption(reason="error", interrupted_at=T)), metadata={"team": "red"})
        ids["running"] = _make(s, "Deploy in progress", None)
        ids["refund"] = _make(s, "Refund request", AgentTurnCompleted(completed_at=T, deferred={"c": "approval"}),
                              agent=SUPPORT, name="Support Bot")
    yield srv.start(), ids
    srv.stop()


@pytest.fixture
def driver() -> Iterator[Any]:
    yield from chromium()


def _rows(drv: Any) -> list[str]:
    return list(drv.execute_script(
        "return [...document.querySelectorAll('tr[data-thread]')].map(r => r.dataset.thread)"))


def _thread_requests(drv: Any) -> list[str]:
    """The page's requests to the API's thread routes (the resource timing entries)."""
    return [u for u in drv.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
            if "/threads" in u]


def _cell(drv: Any, tid: str, label: str) -> str:
    return str(drv.execute_script(
        f"return document.querySelector('tr[data-thread=\"{tid}\"] td[data-label=\"{label}\"]').innerText"))


def test_columns_and_one_request(list_server: tuple[ServerProcess, dict[str, str]], driver: Any,
                                 tmp_path_factory: pytest.TempPathFactory) -> None:
    srv, ids = list_server
    login(driver, srv)
    wait_until(lambda: len(_rows(driver)) == 8)
    assert _rows(driver)[0] == ids["refund"]  # newest first
    assert len(_thread_requests(driver)) == 1  # titles and all come in the page: no request per row
    assert "Refund request" in main_text(driver) and "Idle chat 0" in main_text(driver)
    expect = {"refund": "waiting on approval", "tools": "waiting on tools", "crash": "interrupted",
              "running": "running", "idle0": "idle"}
    assert {k: _cell(driver, ids[k], "activity") for k in expect} == expect
    # agents by their registered name; the id only on hover
    assert _cell(driver, ids["refund"], "agents") == "Support Bot"
    assert SUPPORT not in main_text(driver)
    assert _cell(driver, ids["refund"], "messages") == "1"
    updated = driver.find_element("css selector", f'tr[data-thread="{ids["refund"]}"] time')
    assert "ago" in updated.text or updated.text == "just now"
    assert updated.get_attribute("title").endswith("Z")  # the exact time, UTC
    assert low_contrast(driver) == []
    assert console_errors(driver) == []  # the modules loaded under the CSP, no script error
    shoot(driver, shots_dir(tmp_path_factory) / "list-columns.png")


def test_filters_paging_and_errors(list_server: tuple[ServerProcess, dict[str, str]], driver: Any) -> None:
    from selenium.webdriver.support.ui import Select

    srv, ids = list_server
    login(driver, srv)
    wait_until(lambda: len(_rows(driver)) == 8)
    Select(find(driver, "#activity")[0]).select_by_value("interrupted")  # submits on change
    wait_until(lambda: _rows(driver) == [ids["crash"]])
    assert "activity=interrupted" in driver.current_url
    Select(find(driver, "#activity")[0]).select_by_value("waiting")
    wait_until(lambda: _rows(driver) == [ids["refund"], ids["tools"]])
    # an agent's name links to the threads it took part in
    driver.get(f"{srv.url}/#/")
    wait_until(lambda: len(_rows(driver)) == 8)
    find(driver, f'tr[data-thread="{ids["refund"]}"] a.agent')[0].click()
    wait_until(lambda: _rows(driver) == [ids["refund"]])
    # metadata, typed as key=value
    driver.get(f"{srv.url}/#/")
    wait_until(lambda: len(_rows(driver)) == 8)  # the new view, not the one the hash change replaces
    meta = find(driver, "#meta")[0]
    meta.send_keys("team=red\n")
    wait_until(lambda: _rows(driver) == [ids["crash"]])
    # paging by the server's cursor: three a page, each page one request
    driver.execute_script("performance.clearResourceTimings()")
    driver.get(f"{srv.url}/#/?limit=3")  # the same page: a hash change
    wait_until(lambda: len(_rows(driver)) == 3)
    seen = _rows(driver)
    for n in (6, 8):
        find(driver, "#more:not([hidden])")[0].click()
        wait_until(lambda n=n: len(_rows(driver)) == n)
    assert len(set(_rows(driver))) == 8 and _rows(driver)[:3] == seen
    assert find(driver, "#more")[0].is_displayed() is False
    reqs = _thread_requests(driver)
    assert len(reqs) == 3 and all("after=" in u for u in reqs[1:])
    # an error answer is said as such, the form stays
    driver.get(f"{srv.url}/#/?meta=no-equals-sign")
    err = find(driver, "#status p.error")[0]
    assert "Could not list threads" in err.text and "422" in err.text
    assert find(driver, "#q")


def test_keyboard(list_server: tuple[ServerProcess, dict[str, str]], driver: Any) -> None:
    srv, ids = list_server
    login(driver, srv)
    wait_until(lambda: len(_rows(driver)) == 8)
    keys(driver, "j", "j")
    selected = "return [...document.querySelectorAll('tr.selected')].map(r => r.dataset.thread)"
    assert driver.execute_script(selected) == [_rows(driver)[1]]
    keys(driver, "k")
    assert driver.execute_script(selected) == [ids["refund"]]
    from selenium.webdriver.common.keys import Keys

    keys(driver, Keys.ARROW_DOWN, Keys.ARROW_UP, Keys.ENTER)
    wait_until(lambda: "#/thread/" + ids["refund"] in driver.current_url)
    wait_until(lambda: "about Refund request" in main_text(driver))
    keys(driver, Keys.ESCAPE)
    wait_until(lambda: len(_rows(driver)) == 8 and "#/thread/" not in driver.current_url)
    keys(driver, "/")
    assert driver.execute_script("return document.activeElement.id") == "q"
    keys(driver, "j")  # typed into the search box, not a move
    assert driver.execute_script("return document.activeElement.value") == "j"
    keys(driver, Keys.ESCAPE)
    assert driver.execute_script("return document.activeElement.id") != "q"
    # "/" on a thread: back to the list, in its search box
    find(driver, "a.title")[0].click()
    wait_until(lambda: "#/thread/" in driver.current_url and "about" in main_text(driver))
    keys(driver, "/")
    wait_until(lambda: driver.execute_script("return document.activeElement.id") == "q")
    assert "#/thread/" not in driver.current_url


def test_phone_width(list_server: tuple[ServerProcess, dict[str, str]], driver: Any,
                     tmp_path_factory: pytest.TempPathFactory) -> None:
    srv, ids = list_server
    login(driver, srv)
    driver.set_window_size(390, 844)
    wait_until(lambda: len(_rows(driver)) == 8)
    style = "return getComputedStyle(document.querySelector(arguments[0])).display"
    assert driver.execute_script(style, "table.threads thead") == "none"
    assert driver.execute_script(style, "tr[data-thread]") == "block"  # a card per thread
    assert driver.execute_script("return document.documentElement.scrollWidth") <= 390
    card = find(driver, f'tr[data-thread="{ids["refund"]}"]')[0]
    assert "Refund request" in card.text and "waiting on approval" in card.text and "Support Bot" in card.text
    before = "return getComputedStyle(document.querySelector(arguments[0]), '::before').content"
    assert driver.execute_script(before, f'tr[data-thread="{ids["refund"]}"] td[data-label="activity"]') == (
        '"activity: "')  # each value is labelled on the card
    shoot(driver, shots_dir(tmp_path_factory) / "list-phone.png", width=390)


def test_search_answer_rendering(list_server: tuple[ServerProcess, dict[str, str]], driver: Any) -> None:
    """A search answer's row (the shape GET /threads?q= answers with: each summary with its hit) as
    the page renders it: the snippet's text stays text, its U+E000/U+E001 marks become <mark>, and
    the row opens the thread at the hit. (Rendered in the page from the list's module, so this
    does not depend on the server's q= support; the end-to-end search test comes with it.)"""
    srv, _ = list_server
    login(driver, srv)
    wait_until(lambda: len(_rows(driver)) == 8)
    got = driver.execute_async_script("""
      const done = arguments[arguments.length - 1];
      import("/ui/list.js").then((m) => {
        const tr = m.row({thread_id: "t-1", title: "Refund <b>now</b>", activity: "waiting_approval",
          agent_ids: ["a"], agent_names: {a: "Support Bot"}, messages: 3, user_turns: 1, agent_turns: 1,
          updated_ns: Date.now() * 1e6, hit: {turn: 2, seq: 7, field: "prompt", score: 1.5, matches: 2,
          snippet: "I want a \\uE000refund\\uE001 for <img src=x onerror=window.__pwned=1> order"}}, "refund");
        document.body.appendChild(document.createElement("table")).appendChild(tr);
        const hit = tr.querySelector(".hit");
        done({marks: [...hit.querySelectorAll("mark")].map((x) => x.textContent),
              imgs: tr.querySelectorAll("img").length, text: hit.textContent,
              href: tr.querySelector("a.title").getAttribute("href"),
              title: tr.querySelector("a.title").textContent});
      }, (e) => done({error: String(e)}));
    """)
    assert got["marks"] == ["refund"] and got["imgs"] == 0
    assert got["text"].startswith("I want a refund for <img src=x onerror=window.__pwned=1> order")
    assert "turn 2 · prompt" in got["text"]
    assert got["href"] == "#/thread/t-1?turn=2&seq=7&q=refund" and got["title"] == "Refund <b>now</b>"
    assert driver.execute_script("return window.__pwned === undefined") is True


def test_search_end_to_end(list_server: tuple[ServerProcess, dict[str, str]], driver: Any,
                           tmp_path_factory: pytest.TempPathFactory) -> None:
    """The search box against the server's own index (GET /threads?q=): one request, the hits
    ranked with their snippets marked, the server's filters still applying, a hit opening its turn."""
    srv, ids = list_server
    login(driver, srv)
    wait_until(lambda: len(_rows(driver)) == 8)
    driver.execute_script("performance.clearResourceTimings()")
    box = find(driver, "#q")[0]
    box.send_keys("chat\n")
    wait_until(lambda: sorted(_rows(driver)) == sorted(ids[f"idle{i}"] for i in range(4)))
    assert "q=chat" in driver.current_url
    reqs = _thread_requests(driver)
    assert len(reqs) == 1 and "q=chat" in reqs[0]
    marks = driver.execute_script("return [...document.querySelectorAll('tr[data-thread] .hit mark')]"
                                  ".map(m => m.textContent.toLowerCase())")
    assert marks and set(marks) == {"chat"}
    shoot(driver, shots_dir(tmp_path_factory) / "list-search.png")
    # a word in one thread only, its prompt: that thread, and its row opens the thread at the hit
    driver.get(f"{srv.url}/#/?q=refund")
    wait_until(lambda: _rows(driver) == [ids["refund"]])
    # with a filter the hit does not pass: nothing
    driver.get(f"{srv.url}/#/?q=refund&activity=interrupted")
    wait_until(lambda: "No threads match." in main_text(driver))
    assert _rows(driver) == []
    driver.get(f"{srv.url}/#/?q=refund")
    wait_until(lambda: _rows(driver) == [ids["refund"]])
    find(driver, f'tr[data-thread="{ids["refund"]}"] a.title')[0].click()
    wait_until(lambda: "#/thread/" + ids["refund"] in driver.current_url)
    wait_until(lambda: "about Refund request" in main_text(driver))
    assert "q=refund" in driver.current_url
    shoot(driver, shots_dir(tmp_path_factory) / "thread-from-search.png")
