"""``GET /api/chat/{id}/stream`` (``resume_response``) in process, over a real LMDB store: 204 when
there is nothing to resume, else the open turn's stream from the live table (written here directly,
as another worker's run would), live to its end. The mutants of resume.py these kill: tests/MUTANTS.md."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import agent_start, completed, started, user
from server.inproc import in_process

from tplog import Store
from tplog.backends.lmdb.live import open_live
from tplog.integrations.resume import _RESUME_WAIT
from tplog.integrations.server import create_app

A = b'data: {"type":"text-start","id":"t"}\n\n'
B = b'data: {"type":"text-delta","id":"t","delta":"x"}\n\n'


@pytest.fixture
def lmdb(tmp_path: Path) -> Any:
    with Store(tmp_path / "store", check_rules=False) as store:
        yield store, open_live(str(tmp_path / "store"))


def _open(store: Store) -> tuple[str, int]:
    t = str(uuid.uuid4())
    store.append(t, [started(t), user("hi"), agent_start("demo")])
    seq = store.head(t).open_turn_seq
    assert seq is not None
    return t, seq


def _later(after: float, fn: Any) -> threading.Thread:
    th = threading.Thread(target=lambda: (time.sleep(after), fn()))
    th.start()
    return th


def test_nothing_to_resume_is_204(lmdb: Any) -> None:
    store, live = lmdb
    closed = str(uuid.uuid4())
    store.append(closed, [started(closed), user("hi"), agent_start("demo"), completed()])
    live.write(closed, 3, [A], done=True)  # its ended stream, still there
    gone, gone_seq = _open(store)
    live.write(gone, gone_seq, [A])
    store.delete_thread(gone)
    with in_process(store) as c:
        for t in (str(uuid.uuid4()), closed, gone):
            t0 = time.monotonic()
            r = c.get(f"/api/chat/{t}/stream")
            assert (r.status_code, r.content) == (204, b""), t
            assert time.monotonic() - t0 < _RESUME_WAIT  # known at once, no waiting for a first batch
            assert r.headers["x-tplog-worker"].isdigit()


def test_the_running_turns_stream_from_its_start_then_live_to_its_end(lmdb: Any) -> None:
    store, live = lmdb
    t, seq = _open(store)
    live.write(t, seq, [A])
    with in_process(store) as c:
        th = _later(0.4, lambda: live.write(t, seq, [B], done=True))
        r = c.get(f"/api/chat/{t}/stream")
        th.join()
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["x-tplog-thread"] == t
    assert r.content == A + B


def test_a_stream_resumed_mid_part_gets_the_parts_start(lmdb: Any) -> None:
    store, live = lmdb
    t, seq = _open(store)
    live.write(t, seq, [B], done=True)
    with in_process(store) as c:
        r = c.get(f"/api/chat/{t}/stream")
    assert r.status_code == 200 and r.content == A + B


def test_the_first_batch_written_during_the_wait_is_served(lmdb: Any) -> None:
    store, live = lmdb
    t, seq = _open(store)
    live.write(t, seq - 1, [b"data: old\n\n"], done=True)  # the previous turn's, ended
    with in_process(store) as c:
        th = _later(0.5, lambda: live.write(t, seq, [A, B], done=True))
        r = c.get(f"/api/chat/{t}/stream")
        th.join()
    assert r.status_code == 200 and r.content == A + B


def test_an_open_turn_nobody_streams_is_204_after_the_wait(lmdb: Any) -> None:
    store, _ = lmdb
    t, _ = _open(store)
    with in_process(store) as c:
        t0 = time.monotonic()
        r = c.get(f"/api/chat/{t}/stream")
    assert r.status_code == 204
    assert _RESUME_WAIT <= time.monotonic() - t0 < _RESUME_WAIT + 1.5


def test_a_turn_that_ends_during_the_wait_is_204_at_once(lmdb: Any) -> None:
    store, _ = lmdb
    t, _ = _open(store)
    with in_process(store) as c:
        th = _later(0.3, lambda: store.append(t, [completed()]))
        t0 = time.monotonic()
        r = c.get(f"/api/chat/{t}/stream")
        th.join()
    assert r.status_code == 204
    assert time.monotonic() - t0 < _RESUME_WAIT - 0.5


def test_a_stream_replaced_by_the_next_turns_ends(lmdb: Any) -> None:
    store, live = lmdb
    t, seq = _open(store)
    live.write(t, seq, [A])
    with in_process(store) as c:
        th = _later(0.4, lambda: live.write(t, seq + 5, [b"data: next\n\n"]))
        r = c.get(f"/api/chat/{t}/stream")
        th.join()
    assert r.status_code == 200 and r.content == A


def test_a_quiet_stream_gets_keep_alives(lmdb: Any) -> None:
    from starlette.testclient import TestClient

    from tplog.integrations.server.demo_agents import demo_agents

    store, live = lmdb
    t, seq = _open(store)
    live.write(t, seq, [A])
    with TestClient(create_app(store, demo_agents(), heartbeat=0.2)) as c:
        th = _later(0.9, lambda: live.write(t, seq, [B], done=True))
        r = c.get(f"/api/chat/{t}/stream")
        th.join()
    assert r.status_code == 200
    assert r.content.startswith(A) and r.content.endswith(B)
    assert r.content.count(b": keep-alive\n\n") >= 2
