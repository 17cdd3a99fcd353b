"""Several processes on one store: each opens its own Store (spawn context).

Writers in two processes interleave into one gap-free log (starting from a
small map, so one process's map growth is adopted by the other); a reader
process tails the log with ``wait_for_position`` while another appends; a
handle carried across ``fork()`` refuses to work.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import pytest
from conftest import ToyStore as Store
from conftest import started, user

from tplog.errors import StoreClosedError

SPAWN = mp.get_context("spawn")
TIMEOUT = 60


def _writer(path: str, name: str, n_appends: int, go: Any, out: Any) -> None:
    try:
        with Store(path, map_size=128 * 1024, durability="relaxed") as s:
            go.wait(TIMEOUT)
            results = []
            tid = f"{name}-own"
            results.append(s.append(tid, [started(tid)]))
            for i in range(n_appends):
                # an event of a few KB now and then makes the map grow under the other process
                text = os.urandom(3000).hex() if i % 10 == 0 else f"{name}-{i}"
                results.append(s.append(tid, [user(text), user(f"{name}-{i}b")]))
                s.append("shared", [user(f"{name}-shared-{i}")])
            out.put(("results", name, [(r.first_position, r.last_position, r.first_seq, r.last_seq)
                                       for r in results]))
    except BaseException:
        out.put(("error", name, traceback.format_exc()))


def _seen(path: str, out: Any) -> None:
    try:
        with Store(path) as s:
            out.put(("seen", [(e.position, e.thread_id, e.seq, e.event_id) for e in s.read_all()]))
    except BaseException:
        out.put(("error", "seen", traceback.format_exc()))


def _tail(path: str, total: int, ready: Any, out: Any) -> None:
    try:
        with Store(path, readonly=False) as s:
            ready.set()
            seen: list[tuple[int, str]] = []
            last = 0
            wakeups = 0
            while last < total:
                got = s.wait_for_position(last + 1, timeout=TIMEOUT, poll=0.01)
                if got <= last:
                    raise TimeoutError(f"no new position after {last}")
                wakeups += 1
                for e in s.read_all(after=last):
                    assert e.position == last + 1, (e.position, last)
                    seen.append((e.position, e.event_id))
                    last = e.position
            out.put(("tail", seen, wakeups))
    except BaseException:
        out.put(("error", "tail", traceback.format_exc()))


def _get(q: Any) -> Any:
    msg = q.get(timeout=TIMEOUT)
    if msg[0] == "error":
        pytest.fail(f"child {msg[1]} failed:\n{msg[2]}")
    return msg


def _join(procs: list[Any]) -> None:
    for p in procs:
        p.join(TIMEOUT)
        if p.is_alive():  # pragma: no cover - only on a hang
            p.kill()
            p.join()
            pytest.fail(f"{p.name} hung")
        assert p.exitcode == 0, p.exitcode


def test_two_processes_append_to_one_store(tmp_path: Path) -> None:
    path = str(tmp_path / "store")
    with Store(path, map_size=128 * 1024) as s:
        s.append("shared", [started("shared")])
    go, q = SPAWN.Event(), SPAWN.Queue()
    n = 40
    procs = [SPAWN.Process(target=_writer, args=(path, name, n, go, q), name=name) for name in ("A", "B")]
    for p in procs:
        p.start()
    go.set()
    reports = {m[1]: m[2] for m in (_get(q), _get(q))}
    _join(procs)
    readers = [SPAWN.Process(target=_seen, args=(path, q)) for _ in range(2)]
    for p in readers:
        p.start()
    seen_by_children = [_get(q)[1], _get(q)[1]]
    _join(readers)

    with Store(path) as s:
        log = s.read_all()
        mine = [(e.position, e.thread_id, e.seq, e.event_id) for e in log]
        assert seen_by_children == [mine, mine]  # every process sees every event
        assert [e.position for e in log] == list(range(1, len(log) + 1))
        assert len(log) == 1 + 2 * (1 + 3 * n)
        for name, results in reports.items():
            evs = s.read(f"{name}-own")
            assert len(evs) == 1 + 2 * n
            assert [(e.seq, e.position) for e in evs] == [
                (seq, fp + seq - fs) for fp, _lp, fs, ls in results for seq in range(fs, ls + 1)]
        shared = s.read("shared")
        assert [e.seq for e in shared] == list(range(1, 2 * n + 2))
        texts = [e.event.turn.parts[0].content for e in shared[1:]]  # type: ignore[union-attr]
        for name in ("A", "B"):  # each process's appends kept their own order
            assert [t for t in texts if t.startswith(name)] == [f"{name}-shared-{i}" for i in range(n)]
        assert s.stats()["map_size"] > 128 * 1024


def test_reader_process_tails_with_wait_for_position(tmp_path: Path) -> None:
    path = str(tmp_path / "store")
    total = 120
    with Store(path) as s:
        s.append("t", [started("t")])
        ready, q = SPAWN.Event(), SPAWN.Queue()
        reader = SPAWN.Process(target=_tail, args=(path, total, ready, q), name="tail")
        reader.start()
        assert ready.wait(TIMEOUT)
        appended = 1
        while appended < total:
            k = min(3, total - appended)
            s.append("t", [user(f"{appended + i}") for i in range(k)])
            appended += k
        _msg, seen, wakeups = _get(q)
        _join([reader])
        assert seen == [(e.position, e.event_id) for e in s.read_all()]
        assert len(seen) == total and wakeups >= 1


def _use_forked_handle(store: Store, q: Any) -> None:
    try:
        store.read_all()
    except StoreClosedError:
        q.put("closed")
    except BaseException as exc:
        q.put(f"other: {exc!r}")
    else:
        q.put("worked")


@pytest.mark.skipif(sys.platform != "linux", reason="fork start method")
def test_handle_used_after_fork_raises_store_closed(tmp_path: Path) -> None:
    ctx = mp.get_context("fork")
    with Store(tmp_path / "s") as s:
        s.append("t", [started("t")])
        q = ctx.Queue()
        p = ctx.Process(target=_use_forked_handle, args=(s, q))
        p.start()
        assert q.get(timeout=TIMEOUT) == "closed"
        p.join(TIMEOUT)
        assert len(s.read_all()) == 1  # the parent's handle is unaffected
