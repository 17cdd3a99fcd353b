"""``GET /threads/{id}/family`` and the list fields the browser reads from ``GET /threads``, over
real HTTP against a real server: the tree (parent, spawned children, forks with their fork point
and reason, other links), its bounds, and scope isolation (users from a trusted proxy header)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from server.server_harness import ServerProcess
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
from tplog.integrations.server.security import ENV_TRUSTED_USER_HEADER
from tplog.protocol import model as m

ALICE, BOB = {"x-forwarded-user": "alice"}, {"x-forwarded-user": "bob"}
T = "2025-01-20T10:00:00Z"


def _thread(
    s: Store, title: str, *, parent: str | None = None, spawns: tuple[str, ...] = (), waiting: bool = False
) -> str:
    t = str(uuid.uuid4())
    rel = m.ThreadRelationships(links=[m.ThreadLink(thread_id=parent, relation="spawned_from")]) if parent else None
    evs: list[Any] = [
        ThreadStarted(thread_id=t, created_at=T, title=title, **({"relationships": rel} if rel else {})),
        AgentRegistered(agent=m.AgentConfig(agent_id=f"id-{title}", agent_name=f"Agent {title}", created_at=T)),
        UserTurnSubmitted(turn=m.UserTurn(submitted_at=T, parts=[m.UserPromptPart(content=f"hello {title}")])),
        AgentTurnStarted(agent_id=f"id-{title}", started_at=T),
        MessageRecorded(
            message=m.ResponseMessage(timestamp=T, agent_id=f"id-{title}", parts=[m.TextPart(content="ok")])
        ),
        *(
            MessageRecorded(
                message=m.SystemMessage(timestamp=T, event_type=m.THREAD_SPAWN, event_data={"spawned_thread_id": c})
            )
            for c in spawns
        ),
        AgentTurnCompleted(completed_at=T, **({"deferred": {"c1": "approval"}} if waiting else {})),
    ]
    s.append(t, evs)
    return t


@pytest.fixture(scope="module")
def family_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, dict[str, str]]]:
    srv = ServerProcess(tmp_path_factory.mktemp("family") / "store", env={ENV_TRUSTED_USER_HEADER: "X-Forwarded-User"})
    with Store(srv.store) as base:
        a, b = base.scoped("alice"), base.scoped("bob")
        ids: dict[str, str] = {}
        ids["root"] = _thread(a, "root", waiting=True)
        ids["child"] = _thread(a, "child", parent=ids["root"])
        ids["grandchild"] = _thread(a, "grandchild", parent=ids["child"])
        ids["other"] = _thread(a, "other")
        a.append(ids["child"], [LinkAdded(link=m.ThreadLink(thread_id=ids["other"], relation="referenced"))])
        ids["fork"] = a.fork(ids["root"], 3, reason="try the other tool").thread_id
        ids["bob"] = _thread(b, "bob's", parent=ids["root"])  # names alice's thread, which bob cannot see
    yield srv.start(), ids
    srv.stop()


def _get(srv: ServerProcess, path: str, user: dict[str, str] = ALICE) -> Any:
    with srv.client(headers=user) as c:
        return c.get(path)


def _ids(node: dict[str, Any]) -> list[str]:
    return [n["thread_id"] for n in node["children"]]


def test_the_tree_from_a_child(family_server: tuple[ServerProcess, dict[str, str]]) -> None:
    srv, ids = family_server
    r = _get(srv, f"/threads/{ids['child']}/family")
    assert r.status_code == 200, r.text
    fam = r.json()
    assert fam["thread_id"] == ids["child"] and fam["ancestors"] == [ids["root"]] and fam["truncated"] is False
    root = fam["root"]
    assert root["thread_id"] == ids["root"] and root["title"] == "root" and root["agents"] == ["Agent root"]
    assert root["activity"] == "waiting_approval"
    assert sorted(_ids(root)) == sorted([ids["child"], ids["fork"]])
    kids = {n["thread_id"]: n for n in root["children"]}
    assert kids[ids["fork"]]["fork"] == {
        "of": ids["root"],
        "seq": 3,
        "branch_point": "turn_1",
        "reason": "try the other tool",
    }
    assert "fork" not in kids[ids["child"]]
    assert _ids(kids[ids["child"]]) == [ids["grandchild"]]
    assert fam["links"] == [{"thread_id": ids["other"], "relation": "referenced"}]
    # the other end sees the link as incoming
    other = _get(srv, f"/threads/{ids['other']}/family").json()
    assert other["incoming"] == [{"thread_id": ids["child"], "relation": "referenced"}]
    assert other["root"]["thread_id"] == ids["other"] and other["root"]["children"] == []


def test_bounds(family_server: tuple[ServerProcess, dict[str, str]]) -> None:
    srv, ids = family_server
    up0 = _get(srv, f"/threads/{ids['grandchild']}/family?up=0").json()
    assert up0["root"]["thread_id"] == ids["grandchild"] and up0["ancestors"] == [] and up0["truncated"] is True
    up1 = _get(srv, f"/threads/{ids['grandchild']}/family?up=1&down=0").json()
    assert up1["root"]["thread_id"] == ids["child"] and up1["truncated"] is True
    assert _ids(up1["root"]) == [ids["grandchild"]]
    down0 = _get(srv, f"/threads/{ids['root']}/family?down=0").json()
    assert down0["root"]["children"] == [] and down0["truncated"] is True
    one = _get(srv, f"/threads/{ids['root']}/family?limit=2").json()
    assert len(_ids(one["root"])) == 1 and one["truncated"] is True
    # past the limit, the path from the root down to the thread is still there
    path = _get(srv, f"/threads/{ids['grandchild']}/family?limit=1").json()
    assert path["truncated"] is True and _ids(path["root"]) == [ids["child"]]
    assert _ids(path["root"]["children"][0]) == [ids["grandchild"]]
    whole = _get(srv, f"/threads/{ids['root']}/family").json()
    assert whole["truncated"] is False
    for bad in ("up=-1", "down=99", "limit=x", "limit=²"):
        r = _get(srv, f"/threads/{ids['root']}/family?{bad}")
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_parameter", bad


def test_scope_isolation(family_server: tuple[ServerProcess, dict[str, str]]) -> None:
    srv, ids = family_server
    assert _get(srv, f"/threads/{ids['child']}/family", BOB).status_code == 404
    assert _get(srv, f"/threads/{ids['bob']}/family").status_code == 404
    assert _get(srv, f"/threads/{uuid.uuid4()}/family").status_code == 404
    # bob's thread names alice's as its parent: a missing node (its id only), nothing of hers
    fam = _get(srv, f"/threads/{ids['bob']}/family", BOB).json()
    assert fam["root"] == {"thread_id": ids["root"], "missing": True, "children": []}
    # and alice's tree does not list bob's thread among her root's children
    assert ids["bob"] not in str(_get(srv, f"/threads/{ids['root']}/family").json())


def test_list_fields(family_server: tuple[ServerProcess, dict[str, str]]) -> None:
    """What the list shows comes in the one page: title, activity, agents by name, counts, times, fork."""
    srv, ids = family_server
    page = _get(srv, "/threads?limit=50").json()
    rows = {t["thread_id"]: t for t in page["threads"]}
    assert set(rows) == {ids[k] for k in ("root", "child", "grandchild", "other", "fork")}
    root = rows[ids["root"]]
    assert root["title"] == "root" and root["activity"] == "waiting_approval"
    assert root["agent_ids"] == ["id-root"] and root["agent_names"] == {"id-root": "Agent root"}
    assert root["messages"] == 1 and root["updated_ns"] > 0 and root["user_turns"] == 1
    assert rows[ids["fork"]]["fork_of"] == ids["root"] and rows[ids["fork"]]["fork_at"] == 3
    assert rows[ids["child"]]["parent"] == ids["root"]
    # server-side filters and cursor paging
    waiting = _get(srv, "/threads?activity=waiting_approval").json()["threads"]
    assert {t["thread_id"] for t in waiting} == {ids["root"]}  # the fork (at seq 3) is idle
    first = _get(srv, "/threads?limit=2").json()
    second = _get(srv, f"/threads?limit=2&after={first['next_cursor']}").json()
    assert len(first["threads"]) == 2 and not {t["thread_id"] for t in first["threads"]} & {
        t["thread_id"] for t in second["threads"]
    }
    assert [t["thread_id"] for t in _get(srv, "/threads", BOB).json()["threads"]] == [ids["bob"]]
