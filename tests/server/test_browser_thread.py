"""One thread in chromium against a real ``tplog serve`` (issue 40): agents by name and model,
usage per turn and in all, long tool output folded until clicked, a spawn message as a link,
the family tree (parent, child, fork), a fork's fork point and reason, and a search hit
highlighted when the thread is opened from one. Screenshots as test_browser.py's."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from server.browser_harness import (
    TOKEN,
    chromium,
    click,
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
    AgentTurnStarted,
    LinkAdded,
    MessageRecorded,
    ThreadStarted,
    UserTurnSubmitted,
)
from tplog.integrations.server.security import ENV_AUTH_TOKEN
from tplog.protocol import model as m

T = "2025-01-20T10:00:00Z"
PLANNER = str(uuid.uuid4())
LONG = "\n".join(f"hotel {i}: Lisbon, 80 EUR" for i in range(50))


def _exchange(text: str, answer: str, usage: tuple[int, int], *extra: Any) -> list[Any]:
    return [
        UserTurnSubmitted(turn=m.UserTurn(submitted_at=T, parts=[m.UserPromptPart(content=text)])),
        AgentTurnStarted(agent_id=PLANNER, started_at=T),
        *extra,
        MessageRecorded(message=m.ResponseMessage(
            timestamp=T, agent_id=PLANNER, model_name="gpt-test", parts=[m.TextPart(content=answer)],
            usage=m.Usage(input_tokens=usage[0], output_tokens=usage[1]))),
        AgentTurnCompleted(completed_at=T),
    ]


@pytest.fixture(scope="module")
def thread_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, dict[str, str]]]:
    srv = ServerProcess(tmp_path_factory.mktemp("browser-thread") / "store", env={ENV_AUTH_TOKEN: TOKEN})
    p, c, x = (str(uuid.uuid4()) for _ in range(3))
    call = m.ToolCallPart(tool_name="find_hotels", tool_call_id="call-1", args={"city": "Lisbon"})
    tools = [
        MessageRecorded(message=m.ResponseMessage(timestamp=T, agent_id=PLANNER, model_name="gpt-test", parts=[call])),
        MessageRecorded(message=m.RequestMessage(timestamp=T, agent_id=PLANNER, parts=[m.ToolReturnPart(
            tool_name="find_hotels", tool_call_id="call-1", status="success", content=LONG)])),
        MessageRecorded(message=m.SystemMessage(timestamp=T, event_type=m.THREAD_SPAWN,
                                                event_data={"spawned_thread_id": c}, source_agent=PLANNER)),
    ]
    with Store(srv.store) as s:
        s.append(x, [ThreadStarted(thread_id=x, created_at=T, title="Visa rules")])
        s.append(p, [
            ThreadStarted(thread_id=p, created_at=T, title="Trip planner"),
            AgentRegistered(agent=m.AgentConfig(agent_id=PLANNER, agent_name="Planner", model_name="gpt-test",
                                                created_at=T)),
            *_exchange("plan a trip to Lisbon", "Here are hotels in Lisbon.", (100, 20), *tools),
            LinkAdded(link=m.ThreadLink(thread_id=x, relation="referenced")),
        ])
        s.append(c, [
            ThreadStarted(thread_id=c, created_at=T, title="Hotel search", relationships=m.ThreadRelationships(
                links=[m.ThreadLink(thread_id=p, relation="spawned_from")])),
            AgentRegistered(agent=m.AgentConfig(agent_id=PLANNER, agent_name="Planner", created_at=T)),
            *_exchange("find hotels", "found 50", (7, 3)),
        ])
        f = s.fork(p, s.head(p).version, reason="try a cheaper hotel").thread_id
        s.append(p, _exchange("and flights?", "Flights are 120 EUR.", (30, 5)))
        s.append(f, _exchange("cheaper please", "Hostel at 25 EUR.", (40, 6)))
    yield srv.start(), {"parent": p, "child": c, "fork": f, "other": x}
    srv.stop()


@pytest.fixture
def driver() -> Iterator[Any]:
    yield from chromium()


def _js(drv: Any, script: str, *args: Any) -> Any:
    return drv.execute_script(script, *args)


def test_agents_usage_and_long_output(thread_server: tuple[ServerProcess, dict[str, str]], driver: Any,
                                      tmp_path_factory: pytest.TempPathFactory) -> None:
    srv, ids = thread_server
    login(driver, srv)
    driver.get(f"{srv.url}/#/thread/{ids['parent']}")
    text = wait_until(lambda: (t := main_text(driver)) and "Flights are 120 EUR." in t and t)
    assert "Planner (gpt-test)" in text  # the registry, by name and model
    assert PLANNER not in text  # the id only on hover
    who = [w.text for w in driver.find_elements("css selector", "section.turn.agent .who .agent-name")]
    assert who == ["Planner", "Planner"]
    usage = [u.text for u in driver.find_elements("css selector", "section.turn.agent .usage")]
    assert usage == ["usage: 100 in · 20 out", "usage: 30 in · 5 out"]
    assert "usage: 130 in · 25 out" in find(driver, ".meta .usage-total")[0].text
    # the 50-line return is folded: its first line shows, the rest after a click
    [long] = driver.find_elements("css selector", ".tool-return details.long")
    assert long.get_attribute("open") is None and "hotel 0: Lisbon" in long.text and "hotel 49" not in long.text
    assert "show all 50 lines" in long.text
    long.find_element("css selector", "summary").click()
    wait_until(lambda: long.get_attribute("open") is not None and "hotel 49: Lisbon" in long.text)
    # j/k move from turn to turn
    keys(driver, "j", "j", "j", "k", "\ue015")  # \ue015: selenium's arrow down
    at = "return [...document.querySelectorAll('section.turn.selected')].map(t => t.dataset.turn)"
    assert _js(driver, at) == ["2"] and _js(driver, "return document.activeElement.dataset.turn") == "2"
    # the short arguments are not folded
    assert find(driver, ".tool-call pre.json")[0].text.replace(" ", "") == '{\n"city":"Lisbon"\n}'
    assert low_contrast(driver) == []
    shoot(driver, shots_dir(tmp_path_factory) / "thread-usage.png")


def test_spawn_link_and_family_tree(thread_server: tuple[ServerProcess, dict[str, str]], driver: Any,
                                    tmp_path_factory: pytest.TempPathFactory) -> None:
    srv, ids = thread_server
    login(driver, srv)
    driver.get(f"{srv.url}/#/thread/{ids['parent']}")
    spawn = find(driver, ".system.spawn a.spawn-link")[0]
    assert spawn.get_attribute("href").endswith(f"#/thread/{ids['child']}")
    assert "spawned_thread_id" not in main_text(driver)  # not the raw JSON
    assert "Started thread" in find(driver, ".system.spawn")[0].text
    # the tree: the parent (here), its child and its fork; the other link beside it
    tree = find(driver, "nav.tree .family-tree")[0]
    assert _js(driver, "return document.querySelector('.family-tree > li').dataset.thread") == ids["parent"]
    kids = _js(driver, "return [...document.querySelectorAll('.family-tree > li > ul > li')]"
                       ".map(l => l.dataset.thread)")
    assert sorted(kids) == sorted([ids["child"], ids["fork"]])
    assert "fork at turn 2: try a cheaper hotel" in tree.text
    assert find(driver, f'.family-tree li[data-thread="{ids["parent"]}"] > b[aria-current="page"]')
    assert find(driver, f'.links.outgoing a[href="#/thread/{ids["other"]}"]')
    spawn.click()
    wait_until(lambda: "found 50" in main_text(driver))
    # on the child: the same family, the child marked as here, the parent a link back
    find(driver, f'.family-tree li[data-thread="{ids["child"]}"] > b[aria-current="page"]')
    assert find(driver, f'.family-tree li[data-thread="{ids["parent"]}"] > a')
    shoot(driver, shots_dir(tmp_path_factory) / "thread-family.png")


def test_fork_point_and_reason(thread_server: tuple[ServerProcess, dict[str, str]], driver: Any,
                               tmp_path_factory: pytest.TempPathFactory) -> None:
    srv, ids = thread_server
    login(driver, srv)
    driver.get(f"{srv.url}/#/thread/{ids['parent']}")
    click(driver, f'.family-tree li[data-thread="{ids["fork"]}"] > a')
    wait_until(lambda: "Hostel at 25 EUR." in main_text(driver))
    summary = find(driver, ".fork-summary")[0].text
    assert "Forked from" in summary and "at turn 2" in summary and "try a cheaper hotel" in summary
    assert find(driver, f'.fork-summary a[href="#/thread/{ids["parent"]}"]')
    # the divider sits between the parent's turns (0, 1) and the fork's own (2, 3)
    order = _js(driver, "return [...document.querySelector('.conversation').children]"
                        ".map(e => e.classList.contains('fork-point') ? 'fork' : e.dataset.turn)")
    assert order == ["0", "1", "fork", "2", "3"]
    assert "Flights" not in main_text(driver)  # the parent's later turns are not the fork's
    assert low_contrast(driver) == []
    assert console_errors(driver) == []
    shoot(driver, shots_dir(tmp_path_factory) / "thread-fork.png")


def test_opened_from_a_search_hit(thread_server: tuple[ServerProcess, dict[str, str]], driver: Any) -> None:
    """What a hit's link opens (the list builds it from the hit's turn and seq): the turn marked,
    the query's words highlighted, scrolled into view."""
    srv, ids = thread_server
    login(driver, srv)
    driver.set_window_size(1280, 500)
    driver.get(f"{srv.url}/#/thread/{ids['parent']}?turn=4&seq=20&q=flights%20EUR")  # turns from 1
    wait_until(lambda: driver.find_elements("css selector", "section.turn.hit-turn"))
    assert _js(driver, "return document.querySelector('.hit-turn').dataset.turn") == "3"
    marks = _js(driver, "return [...document.querySelectorAll('mark.hl')].map(m => m.textContent.toLowerCase())")
    assert set(marks) == {"flights", "eur"} and len(marks) > 2  # the folded return's "EUR"s too
    assert _js(driver, "const r = document.querySelector('.hit-turn mark.hl').getBoundingClientRect();"
                       "return r.top >= 0 && r.bottom <= innerHeight")


def test_phone_width(thread_server: tuple[ServerProcess, dict[str, str]], driver: Any,
                     tmp_path_factory: pytest.TempPathFactory) -> None:
    srv, ids = thread_server
    login(driver, srv)
    driver.set_window_size(390, 844)
    driver.get(f"{srv.url}/#/thread/{ids['fork']}")
    wait_until(lambda: "Hostel at 25 EUR." in main_text(driver))
    assert _js(driver, "return document.documentElement.scrollWidth") <= 390
    shoot(driver, shots_dir(tmp_path_factory) / "thread-phone.png", width=390)
