"""Many writers, many threads, expected versions: 4 processes x 8 threads append to shared and
to their own threads with integer expected versions, while a reader process tails the global log
with ``wait_for_position``.

Checked: nothing lost or doubled (every acknowledged append is in the log exactly once, where it
was acknowledged), every conflict is a WrongExpectedVersionError (any other error fails the
test), the global log is strictly increasing and gap-free, each thread's seqs are contiguous
from 1, each writer thread's appends to a thread keep their order, and the tailing reader saw
exactly the log.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import traceback
from pathlib import Path
from typing import Any

import pytest
from conftest import ToyStore as Store
from conftest import started, user

from tplog import WrongExpectedVersionError
from tplog.store import NO_STREAM

SPAWN = mp.get_context("spawn")
TIMEOUT = 90
PROCS, THREADS, APPENDS = 4, 8, 12
SHARED = ("hot-0", "hot-1")


def _writer(path: str, p: int, go: Any, out: Any) -> None:
    try:
        with Store(path, durability="relaxed", map_size=512 << 10) as s:
            go.wait(TIMEOUT)
            acks: list[tuple[str, list[str], int, int, int, int]] = []
            conflicts = [0]
            others: list[str] = []
            lock = threading.Lock()

            def work(t: int) -> None:
                own = f"own-{p}-{t}"
                version = 0
                try:
                    for i in range(APPENDS):
                        # odd appends go to a shared thread: read its head, append at that version, retry on conflict
                        if i % 2:
                            tid = SHARED[(p + t + i) % len(SHARED)]
                            ids = [f"{tid}/{p}/{t}/{i}/{k}" for k in range(1 + i % 3)]
                            while True:
                                v = s.head(tid).version
                                try:
                                    r = s.append(tid, [user(x) for x in ids], expected_version=v, event_ids=ids)
                                    break
                                except WrongExpectedVersionError as exc:
                                    assert exc.actual != v or exc.expected != v
                                    with lock:
                                        conflicts[0] += 1
                        else:
                            ids = [f"{own}/{i}/{k}" for k in range(1 + i % 4)]
                            evs: list[Any] = [user(x) for x in ids]
                            if version == 0:
                                evs[0] = started(own)
                            r = s.append(own, evs, expected_version=version or NO_STREAM, event_ids=ids)
                            assert r.first_seq == version + 1
                            version = r.last_seq
                        with lock:
                            acks.append((r.thread_id, ids, r.first_seq, r.last_seq, r.first_position,
                                         r.last_position))
                except BaseException:
                    with lock:
                        others.append(traceback.format_exc())

            ts = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            out.put(("writer", p, acks, conflicts[0], others))
    except BaseException:
        out.put(("error", f"writer {p}", traceback.format_exc()))


def _tail(path: str, total: int, ready: Any, out: Any) -> None:
    try:
        with Store(path, readonly=True) as s:
            ready.set()
            seen: list[tuple[int, str]] = []
            last = 0
            while last < total:
                got = s.wait_for_position(last + 1, timeout=TIMEOUT, poll=0.005)
                if got <= last:
                    raise TimeoutError(f"no new position after {last}")
                for e in s.read_all(after=last):
                    if e.position != last + 1:
                        raise AssertionError(f"tail saw position {e.position} after {last}")
                    seen.append((e.position, e.event_id))
                    last = e.position
            out.put(("tail", seen))
    except BaseException:
        out.put(("error", "tail", traceback.format_exc()))


def _total() -> int:
    per_thread = sum(1 + i % (3 if i % 2 else 4) for i in range(APPENDS))
    return len(SHARED) + PROCS * THREADS * per_thread


def test_processes_and_threads_with_expected_versions(tmp_path: Path) -> None:
    path = str(tmp_path / "store")
    with Store(path) as s:
        for tid in SHARED:
            s.append(tid, [started(tid)], expected_version=NO_STREAM, event_ids=[f"{tid}/start"])
    total = _total()
    go, ready, q = SPAWN.Event(), SPAWN.Event(), SPAWN.Queue()
    tail = SPAWN.Process(target=_tail, args=(path, total, ready, q), name="tail")
    tail.start()
    assert ready.wait(TIMEOUT)
    writers = [SPAWN.Process(target=_writer, args=(path, p, go, q), name=f"w{p}") for p in range(PROCS)]
    for w in writers:
        w.start()
    go.set()
    msgs = []
    for _ in range(PROCS + 1):
        msg = q.get(timeout=TIMEOUT)
        if msg[0] == "error":
            pytest.fail(f"{msg[1]} failed:\n{msg[2]}")
        msgs.append(msg)
    for pr in [*writers, tail]:
        pr.join(TIMEOUT)
        assert pr.exitcode == 0, (pr.name, pr.exitcode)
    acks = [a for m in msgs if m[0] == "writer" for a in m[2]]
    conflicts = sum(m[3] for m in msgs if m[0] == "writer")
    other = [o for m in msgs if m[0] == "writer" for o in m[4]]
    seen = next(m[1] for m in msgs if m[0] == "tail")
    assert other == [], "non-conflict failures:\n" + "\n".join(other[:3])
    print(f"\n{len(acks)} appends by {PROCS}x{THREADS} threads, {conflicts} WrongExpectedVersionError retries, "
          f"{total} events")

    with Store(path, readonly=True) as s:
        log = s.read_all()
        assert [e.position for e in log] == list(range(1, total + 1))  # strictly increasing, gap-free
        assert seen == [(e.position, e.event_id) for e in log]  # the tail saw exactly the log
        by_id = {e.event_id: e for e in log}
        assert len(by_id) == len(log) == total  # nothing doubled
        acked_ids = [i for a in acks for i in a[1]]
        assert len(set(acked_ids)) == len(acked_ids) == total - len(SHARED)  # nothing lost
        for tid, ids, fs, ls, fp, lp in acks:
            got = [(by_id[i].thread_id, by_id[i].seq, by_id[i].position) for i in ids]
            assert got == [(tid, fs + k, fp + k) for k in range(len(ids))]
            assert ls == fs + len(ids) - 1 and lp == fp + len(ids) - 1
        threads = {e.thread_id for e in log}
        for tid in threads:
            evs = s.read(tid)
            assert [e.seq for e in evs] == list(range(1, len(evs) + 1))
            assert s.head(tid).version == len(evs)
            order: dict[str, list[tuple[int, int]]] = {}
            for e in evs[1:]:
                parts = e.event_id.split("/")
                order.setdefault("/".join(parts[:-2]), []).append(
                    (int(parts[-2]), int(parts[-1])))
            for key, items in order.items():  # each writer thread's appends keep their order
                assert items == sorted(items), (tid, key)
        assert conflicts > 0 or PROCS * THREADS < 4  # the shared threads were contended


def _append_one(path: str, tid: str) -> None:
    with Store(path) as s:
        s.append(tid, [started(tid)], expected_version=NO_STREAM)


def test_writer_cache_not_fooled_by_a_commit_that_wrote_nothing(tmp_path: Path) -> None:
    """The writer reuses the rows of its last commit while the LMDB transaction id shows no
    other commit since. A transaction that wrote nothing (every append in it failed) does not
    use up its id: trusting it would let another process's commit go unnoticed and reuse a
    position (its global entry overwritten, an acknowledged event unreachable from the log)."""
    path = str(tmp_path / "store")
    with Store(path) as s:
        s.append("a", [started("a")])
        with pytest.raises(WrongExpectedVersionError):
            s.append("a", [user("x")], expected_version=7)  # a group that writes nothing
        other = SPAWN.Process(target=_append_one, args=(path, "b"))
        other.start()
        other.join(TIMEOUT)
        assert other.exitcode == 0
        r = s.append("a", [user("y")])
        assert r.last_position == 3
        log = s.read_all()
        assert [e.position for e in log] == [1, 2, 3]
        assert sorted(e.thread_id for e in log) == ["a", "a", "b"]
        assert s.head("a").version == 2 and s.head("b").version == 1
