"""Stop-then-send in process (``settle_open_turn``), the live writer, the sweeper, over a real LMDB
store and its live table: what tests/server/test_stop_then_send.py (uvicorn) and tests/aisdk (Node)
check end to end, here where mutation testing reaches it. The server's state is a stand-in holding
the real store and live table; its runs are stand-ins with a task, ``attached`` and ``stop()``."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import agent_start, completed, started, user

from tplog import Store
from tplog.backends.lmdb.live import open_live
from tplog.integrations.http import HTTPError
from tplog.integrations.resume import _DETACH_GRACE, OWNER, LiveWriter, settle_open_turn, sweeper


class _Watcher:
    """The server's log watcher: ``wait`` returns after ``timeout`` (the test polls the real store)."""

    pos = 0

    async def wait(self, mark: int, timeout: float) -> None:
        assert mark == self.pos  # the position read before the head: a commit after it wakes the wait
        await asyncio.sleep(timeout)


class _Run:
    def __init__(self, attached: bool) -> None:
        self.attached = attached
        self.task: asyncio.Task[None] | None = asyncio.get_running_loop().create_task(asyncio.sleep(60))
        self.stops = 0

    def stop(self) -> None:
        self.stops += 1


def _srv(store: Store, path: Path, mode: str, runs: list[Any] | None = None, wait: float = 5.0) -> Any:
    """The runs belong to the thread the test opened last (``_open``): another thread has none."""
    return SimpleNamespace(store=store, live=open_live(str(path)), after_stop=mode, after_stop_wait=wait,
                           watcher=_Watcher(), runs_of=lambda t: list(runs or []) if t == _last[0] else [])


_last = [""]


def _open(store: Store) -> tuple[str, Any]:
    t = _last[0] = str(uuid.uuid4())
    store.append(t, [started(t), user("hi"), agent_start("demo")])
    head = store.head(t)
    assert head.open_turn_agent == "demo"
    return t, head


def _close_later(store: Store, t: str, after: float) -> threading.Thread:
    th = threading.Thread(target=lambda: (time.sleep(after), store.append(t, [completed()])))
    th.start()
    return th


@pytest.fixture
def lmdb(tmp_path: Path) -> Any:
    with Store(tmp_path / "store", check_rules=False) as store:
        yield store, tmp_path / "store"


def test_reject_is_a_conflict_at_once_naming_the_thread_and_seq(lmdb: Any) -> None:
    store, path = lmdb
    t, head = _open(store)
    srv = _srv(store, path, "reject")
    t0 = time.monotonic()
    with pytest.raises(HTTPError) as err:
        asyncio.run(settle_open_turn(srv, t, head))
    assert time.monotonic() - t0 < 0.5
    assert (err.value.status, err.value.code) == (409, "turn_open")
    assert t in err.value.message and f"seq {head.open_turn_seq}" in err.value.message
    assert store.head(t).open_turn_seq == head.open_turn_seq  # nothing written


def test_interrupt_stops_a_detached_local_run_once_and_returns_the_closed_head(lmdb: Any) -> None:
    store, path = lmdb
    t, head = _open(store)

    async def go() -> tuple[Any, list[_Run]]:
        runs = [_Run(False), _Run(False)]
        done = _Run(True)  # a finished run of the thread: not counted (still "attached")
        assert done.task is not None
        done.task.cancel()
        await asyncio.sleep(0)
        th = _close_later(store, t, 0.4)
        cur = await settle_open_turn(_srv(store, path, "interrupt", [*runs, done]), t, head)
        th.join()
        return cur, runs

    cur, runs = asyncio.run(go())
    assert cur.open_turn_agent is None and cur.version > head.version
    assert [r.stops for r in runs] == [1, 1]  # stopped once, though the loop went round several times


def test_wait_never_stops_the_run_and_returns_once_it_ended(lmdb: Any) -> None:
    store, path = lmdb
    t, head = _open(store)
    live = open_live(str(path))
    live.write(t, head.open_turn_seq, [b"data: {}\n\n"], attached=False)  # another worker's detached run

    async def go() -> tuple[Any, _Run]:
        run = _Run(False)
        th = _close_later(store, t, 0.4)
        cur = await settle_open_turn(_srv(store, path, "wait", [run]), t, head)
        th.join()
        return cur, run

    cur, run = asyncio.run(go())
    assert cur.open_turn_agent is None
    assert run.stops == 0
    hdr, _ = live.read(t, after=0, limit=0)
    assert hdr is not None and not hdr.stop


def test_interrupt_asks_another_workers_detached_run_to_stop_through_the_live_table(lmdb: Any) -> None:
    store, path = lmdb
    t, head = _open(store)
    live = open_live(str(path))
    live.write(t, head.open_turn_seq, [b"data: {}\n\n"], attached=False)
    th = _close_later(store, t, 0.4)
    cur = asyncio.run(settle_open_turn(_srv(store, path, "interrupt"), t, head))
    th.join()
    assert cur.open_turn_agent is None
    hdr, _ = live.read(t, after=0, limit=0)
    assert hdr is not None and hdr.stop


@pytest.mark.parametrize("where", ["local", "live"])
def test_a_run_still_streaming_to_its_client_is_a_conflict_after_the_grace(lmdb: Any, where: str) -> None:
    store, path = lmdb
    t, head = _open(store)
    live = open_live(str(path))
    if where == "live":
        live.write(t, head.open_turn_seq, [b"data: {}\n\n"], attached=True)

    async def go() -> tuple[float, HTTPError, list[_Run]]:
        runs = [_Run(True), _Run(False)] if where == "local" else []
        t0 = time.monotonic()
        with pytest.raises(HTTPError) as err:
            await settle_open_turn(_srv(store, path, "interrupt", runs), t, head)
        return time.monotonic() - t0, err.value, runs

    took, err, runs = asyncio.run(go())
    assert _DETACH_GRACE <= took < _DETACH_GRACE + 1.0
    assert (err.status, err.code) == (409, "turn_open") and "streaming" in err.message
    assert [r.stops for r in runs] == ([0, 0] if where == "local" else [])  # no stop while one still reads
    hdr, _ = live.read(t, after=0, limit=0)
    assert hdr is None or not hdr.stop
    assert store.head(t).open_turn_seq == head.open_turn_seq


def test_a_client_that_goes_away_within_the_grace_lets_the_message_through(lmdb: Any) -> None:
    store, path = lmdb
    t, head = _open(store)

    async def go() -> tuple[Any, _Run]:
        run = _Run(True)

        async def drop() -> None:  # the server notices the disconnect a moment after the stop
            await asyncio.sleep(0.5)
            run.attached = False

        dropper = asyncio.create_task(drop())
        th = _close_later(store, t, 0.9)
        cur = await settle_open_turn(_srv(store, path, "interrupt", [run]), t, head)
        await dropper
        th.join()
        return cur, run

    cur, run = asyncio.run(go())
    assert cur.open_turn_agent is None and run.stops == 1


@pytest.mark.parametrize("hdr", ["done", "older", "none"])
def test_a_stream_that_is_not_this_turns_running_one_counts_as_detached(lmdb: Any, hdr: str) -> None:
    """An ended stream still attached, or an older turn's: nobody reads this turn; no grace to wait."""
    store, path = lmdb
    t, head = _open(store)
    live = open_live(str(path))
    if hdr != "none":
        seq = head.open_turn_seq - (1 if hdr == "older" else 0)
        live.write(t, seq, [b"data: {}\n\n"], done=hdr == "done", attached=True)
    th = _close_later(store, t, 0.2)
    t0 = time.monotonic()
    cur = asyncio.run(settle_open_turn(_srv(store, path, "wait"), t, head))
    th.join()
    assert cur.open_turn_agent is None
    assert time.monotonic() - t0 < 0.9  # the head is polled every 0.1 s


def test_a_run_that_does_not_end_within_after_stop_wait_is_a_conflict(lmdb: Any) -> None:
    store, path = lmdb
    t, head = _open(store)
    live = open_live(str(path))
    live.write(t, head.open_turn_seq, [b"data: {}\n\n"], attached=False)
    t0 = time.monotonic()
    with pytest.raises(HTTPError) as err:
        asyncio.run(settle_open_turn(_srv(store, path, "interrupt", wait=0.3), t, head))
    assert 0.3 <= time.monotonic() - t0 < 1.2
    assert err.value.code == "turn_open" and "0.3 s" in err.value.message
    hdr, _ = live.read(t, after=0, limit=0)
    assert hdr is not None and hdr.stop  # asked to stop all the same


def test_another_turn_opened_meanwhile_is_a_conflict(lmdb: Any) -> None:
    store, path = lmdb
    t, head = _open(store)
    store.append(t, [completed(), user("elsewhere"), agent_start("demo")])
    with pytest.raises(HTTPError) as err:
        asyncio.run(settle_open_turn(_srv(store, path, "wait"), t, head))
    assert err.value.code == "turn_open" and "another turn" in err.value.message


# -- LiveWriter ---------------------------------------------------------------------------------


def _writer(path: Path, t: str, stops: list[int], live: Any = None, interval: float = 0.05) -> LiveWriter:
    tasks: set[asyncio.Task[None]] = set()
    return LiveWriter(live or open_live(str(path)), t, interval=interval, on_stop=lambda: stops.append(1), tasks=tasks)


def test_the_writer_records_every_frame_in_order_and_ends_the_stream(lmdb: Any) -> None:
    _, path = lmdb
    t = str(uuid.uuid4())
    stops: list[int] = []

    async def go() -> LiveWriter:
        w = _writer(path, t, stops, interval=0.3)
        w.push("data: 1\n\n")
        w.start(7)
        assert w.task in w.tasks
        await asyncio.sleep(0.1)
        w.push("data: 2\n\n")
        w.push("data: 3\n\n")  # within the interval: one batch with 2
        await asyncio.sleep(0.5)
        w.push("data: 4\n\n")
        w.close()
        assert w.task is not None
        await asyncio.wait_for(w.task, 5)
        assert not w.tasks  # the done callback took it out
        return w

    w = asyncio.run(go())
    hdr, batches = open_live(str(path)).read(t)
    assert hdr is not None and (hdr.turn_seq, hdr.done, hdr.attached, hdr.owner) == (7, True, True, OWNER)
    assert b"".join(batches) == b"data: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4\n\n"
    assert batches[0] == b"data: 1\n\n" and b"data: 2\n\ndata: 3\n\n" in batches
    assert len(batches) <= 3 and w.writes == len(batches)
    assert stops == []


def test_the_writer_records_a_detach_and_a_stop_request_stops_the_run_once(lmdb: Any) -> None:
    _, path = lmdb
    t = str(uuid.uuid4())
    live = open_live(str(path))
    stops: list[int] = []

    async def go() -> None:
        w = _writer(path, t, stops)
        w.start(3)
        w.push("data: a\n\n")
        await asyncio.sleep(0.3)
        w.detach()  # nothing pushed: the header changes all the same
        await asyncio.sleep(0.3)
        hdr, _ = live.read(t, after=0, limit=0)
        assert hdr is not None and not hdr.attached and not hdr.done
        assert live.request_stop(t, 3)
        await asyncio.sleep(0.8)  # idle: picked up by the writer's poll
        assert stops == [1]
        w.push("data: b\n\n")
        await asyncio.sleep(0.3)
        w.close()
        assert w.task is not None
        await asyncio.wait_for(w.task, 5)

    asyncio.run(go())
    assert stops == [1]
    hdr, batches = live.read(t)
    assert hdr is not None and hdr.done and b"".join(batches) == b"data: a\n\ndata: b\n\n"


def test_the_writer_leaves_a_newer_turn_alone_and_rewrites_its_stream_over_an_older_one(lmdb: Any) -> None:
    _, path = lmdb
    live = open_live(str(path))
    stops: list[int] = []
    newer, older = str(uuid.uuid4()), str(uuid.uuid4())

    async def go() -> None:
        a, b = _writer(path, newer, stops), _writer(path, older, stops)
        a.start(5)
        b.start(5)
        a.push("data: a1\n\n")
        b.push("data: b1\n\n")
        await asyncio.sleep(0.3)
        live.write(newer, 9, [b"data: next\n\n"])  # the next turn streams now
        live.write(older, 2, [b"data: late\n\n"])  # a stopped turn's late write
        a.push("data: a2\n\n")
        b.push("data: b2\n\n")
        await asyncio.sleep(0.3)
        assert a.task is not None and a.task.done()  # gave up: no close needed
        b.close()
        assert b.task is not None
        await asyncio.wait_for(b.task, 5)

    asyncio.run(go())
    hdr, batches = live.read(newer)
    assert hdr is not None and hdr.turn_seq == 9 and batches == [b"data: next\n\n"]
    hdr, batches = live.read(older)
    assert hdr is not None and (hdr.turn_seq, hdr.done) == (5, True)
    assert b"".join(batches) == b"data: b1\n\ndata: b2\n\n"


class _Failing:
    """The real live table whose writes fail (a full disk)."""

    def __init__(self, live: Any) -> None:
        self.live = live

    def read(self, *a: Any, **kw: Any) -> Any:
        return self.live.read(*a, **kw)

    def write(self, *a: Any, **kw: Any) -> Any:
        raise OSError("no space left")


def test_a_failing_live_write_ends_the_writer_with_a_warning_not_the_run(lmdb: Any,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    _, path = lmdb
    t = str(uuid.uuid4())
    stops: list[int] = []

    async def go() -> LiveWriter:
        w = _writer(path, t, stops, live=_Failing(open_live(str(path))))
        w.push("data: x\n\n")
        w.start(4)
        assert w.task is not None
        await asyncio.wait_for(w.task, 5)  # ends without raising
        return w

    with caplog.at_level(logging.WARNING, logger="tplog.server"):
        w = asyncio.run(go())
    assert w.writes == 0 and stops == []
    assert any(t in r.getMessage() and "OSError" in r.getMessage() for r in caplog.records)
    assert open_live(str(path)).read(t)[0] is None


# -- sweeper ------------------------------------------------------------------------------------


def test_the_sweeper_drops_ended_streams_after_every_seconds_and_dead_writers_after_stale(lmdb: Any) -> None:
    _, path = lmdb
    live = open_live(str(path))
    ended, running, dead = (str(uuid.uuid4()) for _ in range(3))

    async def go() -> list[set[str]]:
        live.write(dead, 1, [b"x"])  # not ended, and older than `stale` by the first sweep
        task = asyncio.create_task(sweeper(live, every=0.5, stale=0.3))
        await asyncio.sleep(0.1)
        live.write(ended, 1, [b"x"], done=True)
        seen = []
        for at in (0.6, 1.2):  # after the first sweep (at 0.5), after the second (at 1.0)
            await asyncio.sleep(at - (0.1 if at == 0.6 else 0.6))
            live.write(running, 1, [b"y"])  # written just now: not stale
            seen.append({t for t in (ended, running, dead) if live.read(t, after=0, limit=0)[0] is not None})
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return seen

    first, second = asyncio.run(go())
    assert first == {ended, running}  # ended 0.4 s before the sweep: readers still have time
    assert second == {running}
