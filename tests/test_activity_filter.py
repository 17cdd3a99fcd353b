"""One name for what a thread is doing (issue 35): ``activity``, in the API, the async API, HTTP and the CLI.

A head's ``status`` is whether the thread is live (``active``) or a tombstone (``deleted``); its
``activity`` is what it is doing. The filter on the latter was called ``status`` and took
``"active"`` for an open agent turn: now ``activity=`` takes the CLI's names (``running``, with
``active`` still taken, and ``waiting`` for either kind of wait); ``status=`` (and ``?status=``)
works for one release, with a DeprecationWarning naming ``activity=``. The stored values, and
so the head's JSON, do not change: a running thread's JSON says ``"activity": "active"``.
"""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import T, agent_start, exchange, response, started, user
from server.inproc import in_process

from tplog import AgentTurnCompleted, InvalidInputError, Store
from tplog.aio import AsyncStore
from tplog.cli import main

IDS = {k: f"0b9a3d5e-0000-4000-8000-00000000000{i}" for i, k in enumerate(
    ["idle", "running", "approval", "tools"], start=1)}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "store", check_rules=False) as s:
        for t in IDS.values():
            s.append(t, [started(t), *exchange()])
        s.append(IDS["running"], [user(), agent_start()])
        s.append(IDS["approval"], [user(), agent_start(), response(),
                                   AgentTurnCompleted(completed_at=T, deferred={"c1": "approval"})])
        s.append(IDS["tools"], [user(), agent_start(), response(),
                                AgentTurnCompleted(completed_at=T, deferred={"c2": "external"})])
        yield s


def listed(page: object) -> set[str]:
    by_id = {v: k for k, v in IDS.items()}
    return {by_id[h.thread_id] for h in page.threads}  # type: ignore[attr-defined]


def test_activity_takes_the_clis_names(store: Store) -> None:
    assert listed(store.threads(activity="running")) == {"running"}
    assert listed(store.threads(activity="active")) == {"running"}  # the old name of running, still taken
    assert listed(store.threads(activity="waiting")) == {"approval", "tools"}
    assert listed(store.threads(activity=["waiting_tools", "idle"])) == {"tools", "idle"}
    assert listed(store.threads(activity=["running", "active"])) == {"running"}
    # The head (and its JSON) keep the stored values: old clients read them.
    head = store.head(IDS["running"])
    assert (head.status, head.activity) == ("active", "active")
    with pytest.raises(InvalidInputError, match="activity") as err:
        store.threads(activity="waiting_for_godot")
    assert "running" in str(err.value)
    with pytest.raises(InvalidInputError, match="activity"):
        store.threads(activity=["idle", 3])  # type: ignore[list-item]


def test_status_is_the_deprecated_name_of_activity(store: Store) -> None:
    with pytest.warns(DeprecationWarning, match=r"activity=") as caught:
        page = store.threads(status="waiting_approval")
    assert listed(page) == {"approval"}
    assert caught[0].filename == __file__  # the warning points at the caller's line
    with warnings.catch_warnings(record=True) as none:
        warnings.simplefilter("always")
        store.threads(activity="waiting_approval")
    assert none == []
    with pytest.raises(InvalidInputError, match="not both"):
        store.threads(activity="idle", status="idle")


def test_the_async_store_takes_activity_and_warns_on_status(store: Store) -> None:
    async def go() -> tuple[set[str], set[str]]:
        a = AsyncStore(store)
        new = listed(await a.threads(activity="running"))
        with pytest.warns(DeprecationWarning, match=r"activity=") as caught:
            old = listed(await a.threads(status="waiting"))
        assert caught[0].filename == __file__
        return new, old

    assert asyncio.run(go()) == ({"running"}, {"approval", "tools"})


def test_http_threads_takes_activity_and_the_old_status(store: Store) -> None:
    with in_process(store) as client:
        def got(query: str) -> set[str]:
            r = client.get(f"/threads?{query}")
            assert r.status_code == 200, r.text
            by_id = {v: k for k, v in IDS.items()}
            return {by_id[h["thread_id"]] for h in r.json()["threads"]}

        assert got("activity=running") == {"running"}
        assert got("activity=waiting_tools&activity=idle") == {"tools", "idle"}
        assert got("activity=waiting") == {"approval", "tools"}
        assert got("status=active") == {"running"}  # deprecated: the same filter
        assert got("status=waiting_approval") == {"approval"}
        (running,) = client.get("/threads?activity=running").json()["threads"]
        assert (running["status"], running["activity"]) == ("active", "active")  # the stored values
        r = client.get("/threads?activity=sleeping")
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input"
        assert "activity" in r.json()["error"]["message"]
        r = client.get("/threads?activity=idle&status=idle")
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_parameter"


def test_the_cli_filters_through_activity(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(store.backend.path)  # type: ignore[attr-defined]
    store.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # the CLI passes activity=, not status=
        assert main(["threads", path, "--json", "--activity", "running", "--activity", "waiting_tools"]) == 0
    by_id = {v: k for k, v in IDS.items()}
    assert {by_id[h["thread_id"]] for h in json.loads(capsys.readouterr().out)["threads"]} == {"running", "tools"}
