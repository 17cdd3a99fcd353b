"""Chunk rows (formats 4 and 5, tplog/backends/lmdb/chunks.py): a closed turn's events stored as one value.

Every read verb must answer exactly as before chunking: each LMDB answer is compared with
the in-memory reference backend holding the same appends (event ids given, so both stores
hold identical events; only the recording times differ, and are left out).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import lmdb
import pytest
from conftest import ToyStore as Store
from conftest import agent_start, completed, response, spawn_message, started, user

from tplog import CorruptionError, HasForksError
from tplog.backends.lmdb.chunks import CHUNK, MAX_EVENTS, OPEN_EVERY
from tplog.codec import F_COMPRESSED
from tplog.events import AgentTurnInterrupted, Interruption
from tplog.verify import verify_store

T = "2025-01-20T10:00:00Z"


def _raw_rows(path: Path) -> list[tuple[bytes, bytes]]:
    env = lmdb.open(str(path), max_dbs=20, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            return list(txn.cursor(db=env.open_db(b"events", txn=txn, create=False)))
    finally:
        env.close()


def _same(events: list[Any]) -> list[Any]:
    return [(e.thread_id, e.seq, e.position, e.event_id, e.event) for e in events]


def _fill(stores: list[Store], rng: random.Random) -> dict[str, int]:
    """Threads of several turns (some left open, one interrupted), appended to each store alike."""
    lengths: dict[str, int] = {}
    eid = 0

    def put(tid: str, events: list[Any]) -> None:
        nonlocal eid
        ids = [f"ev-{eid + i}" for i in range(len(events))]
        eid += len(events)
        for s in stores:
            s.append(tid, events, event_ids=ids)
        lengths[tid] = lengths.get(tid, 0) + len(events)

    for t in range(6):
        tid = f"t{t}"
        put(tid, [started(tid)])
        for turn in range(rng.randrange(1, 5)):
            put(tid, [user(f"q{turn} " * rng.randrange(1, 60))])
            put(tid, [agent_start()])
            for r in range(rng.randrange(1, 8)):
                put(tid, [response(f"answer {turn}.{r} " * rng.randrange(1, 200))])
            if t == 2 and turn == 0:
                put(tid, [spawn_message("kid")])
            put(tid, [completed()] if t != 3 else [AgentTurnInterrupted(interruption=Interruption(
                reason="user_cancelled", interrupted_at=T))])
        if t % 2:  # an open turn at the end: not chunked yet
            put(tid, [user("open"), agent_start(), response("partial")])
    return lengths


@pytest.fixture
def pair(tmp_path: Path) -> Any:
    rng = random.Random(5)
    lm = Store(tmp_path / "s")
    mem = Store("memory:")
    lengths = _fill([lm, mem], rng)
    yield lm, mem, lengths
    lm.close()
    mem.close()


def test_closed_turns_are_stored_as_chunks(pair: Any, tmp_path: Path) -> None:
    lm, _, lengths = pair
    lm.close()
    rows = _raw_rows(tmp_path / "s")
    chunked = [v for _, v in rows if v[0] == CHUNK]
    assert chunked, "no chunk rows written"
    assert len(rows) < sum(lengths.values())
    with Store(tmp_path / "s") as s:
        assert s.stats()["events"] == sum(lengths.values())
        assert verify_store(s).ok


def test_every_read_verb_answers_as_the_reference(pair: Any) -> None:
    lm, mem, lengths = pair
    assert _same(lm.read_all()) == _same(mem.read_all())
    for after in range(0, sum(lengths.values()) + 2, 7):
        assert _same(lm.read_all(after=after, limit=5)) == _same(mem.read_all(after=after, limit=5))
    for tid, n in lengths.items():
        full = mem.read(tid)
        assert _same(lm.read(tid)) == _same(full)
        for after in range(n + 2):
            for limit in (None, 1, 3):
                assert _same(lm.read(tid, after=after, limit=limit)) == _same(mem.read(tid, after=after, limit=limit))
                assert _same(lm.read(tid, after=after, limit=limit, direction="backward")) == _same(mem.read(
                    tid, after=after, limit=limit, direction="backward"))
        assert _same(lm.read(tid, direction="backward")) == _same(mem.read(tid, direction="backward"))
        assert lm.load(tid).thread == mem.load(tid).thread
        assert lm.export(tid) == mem.export(tid)
        assert lm.pending(tid) == mem.pending(tid)
        assert [(s, h.event_id) for s, h, _ in lm.backend.iter_thread_values(tid)] == [
            (e.seq, e.event_id) for e in full]
    assert lm.children("t2") == mem.children("t2") == ["kid"]


def test_a_load_after_a_chunk_folds_only_the_new_events(pair: Any) -> None:
    lm, mem, _ = pair
    first = lm.load("t0").thread
    lm_more = [user("more"), agent_start(), response("x" * 500), completed()]
    ids = ["m1", "m2", "m3", "m4"]
    for s in (lm, mem):
        s.append("t0", lm_more, event_ids=ids)
    assert lm.load("t0").thread == mem.load("t0").thread != first


def test_a_fork_inside_a_chunk_reads_the_parent_exactly(pair: Any) -> None:
    lm, mem, _ = pair
    for s in (lm, mem):
        base = s.read("t0")
        # every turn boundary of the parent: most lie inside a chunk
        ats = [e.seq for e in base if type(e.event).__name__ in ("AgentTurnCompleted", "UserTurnSubmitted")]
        for at in ats:
            s.fork("t0", at, new_thread_id=f"f{at}")
    for at in [e.seq for e in mem.read("t0") if type(e.event).__name__ in ("AgentTurnCompleted",
                                                                           "UserTurnSubmitted")]:
        # the fork's own ThreadStarted gets a fresh id in each store; the rest are the parent's
        assert [(e.seq, e.seq == 1 or e.event_id, e.event) for e in lm.read(f"f{at}")] == [
            (e.seq, e.seq == 1 or e.event_id, e.event) for e in mem.read(f"f{at}")]
        assert lm.export(f"f{at}") == mem.export(f"f{at}")
    with pytest.raises(HasForksError):
        lm.delete_thread("t0")


def test_rebuild_and_delete_over_chunks(pair: Any) -> None:
    lm, mem, _ = pair
    for r in lm.rebuild(chunk=3, verify=True):
        assert r.differences == []
    lm.delete_thread("t1")
    mem.delete_thread("t1")
    # the tombstone gets a fresh id in each store
    assert [(e.thread_id, e.seq, e.position, e.thread_id == "t1" or e.event_id) for e in lm.read_all()] == [
        (e.thread_id, e.seq, e.position, e.thread_id == "t1" or e.event_id) for e in mem.read_all()]
    rep = verify_store(lm)
    assert rep.ok, rep.problems
    for r in lm.rebuild(chunk=2, verify=True):
        assert r.differences == []


def test_a_long_turn_is_split_into_bounded_chunks(tmp_path: Path) -> None:
    n = MAX_EVENTS * 2 + 10
    with Store(tmp_path / "s") as s:
        s.append("t", [started("t"), user(), agent_start(), *[response(f"r{i}") for i in range(n)], completed()])
        assert [e.seq for e in s.read("t")] == list(range(1, n + 5))
    rows = _raw_rows(tmp_path / "s")
    assert 3 <= len(rows) <= 4
    assert all(v[0] == CHUNK for _, v in rows)


def test_an_open_turn_is_stored_raw_and_compressed_once_at_its_end(tmp_path: Path) -> None:
    big = "a compressible answer " * 40
    with Store(tmp_path / "s") as s:
        s.append("t", [started("t"), user(), agent_start()])
        for _ in range(3):
            s.append("t", [response(big)])
    rows = _raw_rows(tmp_path / "s")
    assert [v[0] for _, v in rows] == [3] * 6
    assert all(not v[1] & F_COMPRESSED for _, v in rows)  # no per-event zstd on the append path
    assert all(len(v) > len(big) for _, v in rows[3:])
    with Store(tmp_path / "s") as s:
        s.append("t", [completed()])
        assert [type(e.event).__name__ for e in s.read("t")][-2:] == ["MessageRecorded", "AgentTurnCompleted"]
    rows = _raw_rows(tmp_path / "s")
    assert len(rows) == 1 and rows[0][1][0] == CHUNK and rows[0][1][1] & F_COMPRESSED
    assert len(rows[0][1]) < 3 * len(big) // 4


def test_a_turn_never_closed_holds_a_bounded_number_of_raw_rows(tmp_path: Path) -> None:
    n = OPEN_EVERY * 3 + 5
    with Store(tmp_path / "s") as s:
        s.append("t", [started("t"), user(), agent_start()])
        for i in range(n):
            s.append("t", [response(f"part {i} " * 50)])
        assert [e.seq for e in s.read("t")] == list(range(1, n + 4))
        assert verify_store(s).ok
    rows = _raw_rows(tmp_path / "s")
    single = [v for _, v in rows if v[0] != CHUNK]
    assert len(single) < OPEN_EVERY
    assert sum(len(v) for _, v in rows) < sum(len(f"part {i} " * 50) for i in range(n)) // 2


@pytest.mark.parametrize("where", ["payload", "prefix", "crc"])
def test_a_damaged_chunk_is_a_corruption_error_and_verify_names_it(tmp_path: Path, where: str) -> None:
    path = tmp_path / "s"
    with Store(path) as s:
        s.append("t", [started("t"), user("hello " * 50), agent_start(), response("answer " * 300), completed()])
        s.append("u", [started("u"), user("other")])
    env = lmdb.open(str(path), max_dbs=20)
    with env.begin(write=True) as txn:
        db = env.open_db(b"events", txn=txn)
        key, value = next((k, v) for k, v in txn.cursor(db=db) if v[0] == CHUNK)
        v = bytearray(value)
        v[{"payload": len(v) // 2, "prefix": 17, "crc": 7}[where]] ^= 0x10
        txn.put(key, bytes(v), db=db)
    env.close()
    with Store(path) as s:
        with pytest.raises(CorruptionError) as exc:
            s.read("t")
        assert exc.value.thread_id == "t"
        with pytest.raises(CorruptionError):
            s.load("t")
        assert [e.seq for e in s.read("u")] == [1, 2]  # the other thread reads on
        rep = verify_store(s)
        assert not rep.ok
        assert any("chunk" in p and "CRC" in p for p in rep.problems), rep.problems
        assert not any("gap" in p for p in rep.problems), rep.problems
