"""Races at the server's appends, made to happen every time: a request cancelled while its append
is in flight, and another writer between the history read and a run's first append."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import types
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import started, user

from server.server_harness import ROOT, ServerProcess, chat_body, read_events
from tplog import Store, ThreadStarted, UserTurnSubmitted
from tplog.aio import AsyncStore
from tplog.integrations.server import ENV_AGENTS
from tplog.integrations.server.state import _Writer
from tplog.store import NO_STREAM


def _texts(store: Store, tid: str) -> list[str]:
    return [e.event.turn.parts[0].content for e in store.read(tid) if isinstance(e.event, UserTurnSubmitted)]


def test_an_append_whose_request_is_cancelled_commits_and_the_writer_goes_on_from_it(tmp_path: Path) -> None:
    """The run's writer is cancelled (client gone, on_disconnect="interrupt") while its append waits
    for the store's writer lock: the append still commits, the cancellation reaches the run only
    after it, and the writer's next append (the interrupted turn's end) expects the version it made."""

    async def scenario(s: Store) -> None:
        srv = types.SimpleNamespace(astore=AsyncStore(s), metrics=None, prom=None)
        w = _Writer(srv, "t", NO_STREAM, [started("t")])  # type: ignore[arg-type]  # the server: only these
        await w([user("one")])
        holding, release = threading.Event(), threading.Event()
        engine = s.backend.engine
        holder = threading.Thread(target=lambda: engine.run_write(lambda _txn: (holding.set(), release.wait(30))))
        holder.start()
        try:
            assert holding.wait(10)
            task = asyncio.create_task(w([user("two")]))
            deadline = time.monotonic() + 60
            while not s.backend._gc.leading:  # type: ignore[attr-defined]  # queued: blocked on our lock
                assert time.monotonic() < deadline and not task.done(), "the append never reached the store"
                await asyncio.sleep(0.01)
            assert not task.done() and s.head("t").version == 2
            task.cancel()
            await asyncio.sleep(0.2)
            assert not task.done()  # the cancellation waits for the append it would abandon
        finally:
            release.set()
            holder.join(10)
        with pytest.raises(asyncio.CancelledError):
            await task
        assert s.head("t").version == 3  # committed before the run saw the cancellation
        res = await w([user("three")])  # expected version 3, the one the cancelled append made
        assert res.last_seq == 4

    with Store(tmp_path / "s", check_rules=False) as s:  # toy events: the test is about the writer
        asyncio.run(scenario(s))
        assert _texts(s, "t") == ["one", "two", "three"]


@pytest.fixture(scope="module")
def race_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    path = os.pathsep.join([str(ROOT), str(ROOT / "tests" / "server")])
    srv = ServerProcess(tmp_path_factory.mktemp("srv-race") / "store",
                        env={ENV_AGENTS: "race_agents:agents", "PYTHONPATH": path}).start()
    yield srv
    srv.stop()


@pytest.mark.parametrize("exists", [True, False], ids=["existing_thread", "new_thread"])
def test_a_writer_between_the_history_read_and_the_first_append_is_a_409_with_nothing_written(
        race_server: ServerProcess, exists: bool) -> None:
    t = str(uuid.uuid4())
    if exists:
        with Store(race_server.store) as s:
            s.append(t, [ThreadStarted(thread_id=t, created_at="2025-01-20T10:00:00Z"), user("hello")])
    version = 2 if exists else 0
    with race_server.client() as c:
        r = c.post("/api/chat", json=chat_body(t, f"race {t}"))
    assert r.status_code == 409, r.text
    err = r.json()["error"]
    assert err["code"] == "version_conflict"
    assert (err["expected"], err["actual"]) == ((version, version + 1) if exists else ("no_stream", 2)), err
    # the racer's append is there; nothing of the run is
    events = [e.event for e in read_events(race_server.store, t)]
    assert [type(e).__name__ for e in events] == ["ThreadStarted", *(["UserTurnSubmitted"] if exists else []),
                                                  "UserTurnSubmitted"]
    assert events[-1].turn.parts[0].content == "racer"
    with Store(race_server.store, readonly=True) as s:
        assert _texts(s, t) == [*(["hello"] if exists else []), "racer"]
