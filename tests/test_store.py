"""The store against real LMDB files: atomicity, expected versions, idempotency,
global order, group commit, corruption, map growth, blobs, deletion, backup,
closed/read-only stores, paging and dictionaries.

No mocks: every test opens real stores under ``tmp_path``; concurrency tests use
real threads. (Processes: tests/test_store_processes.py; asyncio:
tests/test_store_async.py; the engine contract: tests/test_storage_contract.py.)
"""

from __future__ import annotations

import itertools
import os
import random
import struct
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb
import msgspec
import pytest
from conftest import (
    CountingStore,
    HookedStore,
    T,
    agent_start,
    completed,
    exchange,
    ids,
    link,
    register,
    response,
    snapshot,
    spawn_message,
    started,
    user,
)
from conftest import ToyStore as Store

from tplog import (
    AgentTurnInterrupted,
    ConflictError,
    InvalidEventError,
    InvalidInputError,
    MessageRecorded,
    NotFoundError,
    TplogError,
    UserTurnSubmitted,
    WrongExpectedVersionError,
)
from tplog.backends.lmdb.keys import event_key, tkey
from tplog.codec import Limits
from tplog.errors import (
    CorruptionError,
    IdempotencyError,
    LimitExceededError,
    ReadOnlyError,
    StorageError,
    StorageFullError,
    StoreClosedError,
    ThreadDeletedError,
)
from tplog.events import ThreadDeleted
from tplog.protocol import Interruption, ResponseMessage, TextPart, ToolCallPart
from tplog.store import AppendResult
from tplog.verify import verify_store


def event_ids_stored(store: Store, eids: list[str]) -> list[bool]:
    """Whether each id is in the event-id index (read straight through the engine)."""
    with store.backend.engine.read() as txn:
        return [txn.get("eventids", e.encode()) is not None for e in eids]


# =========================================================================== atomicity


ORDER_BREAKS: dict[str, Callable[[], list[Any]]] = {
    "message-without-open-turn": lambda: [user(), register(), response()],
    "completed-without-open-turn": lambda: [user(), register(), completed()],
    "interrupted-without-open-turn": lambda: [
        user(), register(),
        AgentTurnInterrupted(interruption=Interruption(reason="x", interrupted_at=T)),
    ],
    "user-turn-during-open-turn": lambda: [agent_start(), response(), user()],
    "agent-start-during-open-turn": lambda: [agent_start(), response(), agent_start("a2")],
    "second-thread-started": lambda: [user(), register(), started("t")],
    "thread-deleted-appended": lambda: [user(), register(), ThreadDeleted(reason="no")],
}


@pytest.mark.parametrize("case", sorted(ORDER_BREAKS))
def test_append_whose_third_event_breaks_an_order_rule_writes_nothing(store: Store, case: str) -> None:
    store.append("t", [started("t")])
    store.append("other", [started("other"), *exchange()])
    before = snapshot(store)
    eids = ids(3)
    with pytest.raises(InvalidEventError) as ei:
        store.append("t", ORDER_BREAKS[case](), event_ids=eids)
    assert "events[2]" in str(ei.value)
    assert isinstance(ei.value, InvalidInputError) and isinstance(ei.value, ValueError)
    assert snapshot(store) == before
    assert store.head("t").version == 1
    assert [e.seq for e in store.read("t")] == [1]
    assert event_ids_stored(store, eids) == [False, False, False]
    # The ids were not consumed: the valid prefix can still be appended under them.
    res = store.append("t", ORDER_BREAKS[case]()[:2], event_ids=eids[:2])
    assert not res.duplicate and (res.first_seq, res.last_seq) == (2, 3)


@pytest.mark.parametrize(
    "events",
    [
        pytest.param(lambda: [user(), register(), started("new")], id="not-first"),
        pytest.param(lambda: [started("new"), user(), response()], id="third-breaks"),
        pytest.param(lambda: [started("someone-else")], id="names-other-thread"),
        pytest.param(lambda: [user()], id="first-not-started"),
    ],
)
def test_bad_first_append_creates_no_thread(store: Store, events: Callable[[], list[Any]]) -> None:
    before = snapshot(store)
    with pytest.raises(InvalidEventError):
        store.append("new", events())
    assert snapshot(store) == before
    assert not store.exists("new")
    with pytest.raises(NotFoundError):
        store.head("new")
    with pytest.raises(NotFoundError):
        store.read("new")


def test_unencodable_value_is_invalid_input_and_writes_nothing(store: Store) -> None:
    store.append("t", [started("t"), agent_start()])
    before = snapshot(store)
    huge = MessageRecorded(message=ResponseMessage(
        timestamp=T, agent_id="a1",
        parts=[ToolCallPart(tool_name="f", tool_call_id="c1", args={"n": [1, 2**64 + 1]})],
    ))
    with pytest.raises(InvalidInputError):
        store.append("t", [response(), response(), huge])
    with pytest.raises(InvalidInputError):
        store.append("t", [response(), ToolCallPart(tool_name="f", tool_call_id="c")])  # not an event
    with pytest.raises(InvalidInputError):
        store.append("t", [])
    with pytest.raises(InvalidInputError):
        store.append("t", "not events")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        store.append("t", [response()], event_ids=["a", "b"])
    with pytest.raises(InvalidInputError):
        store.append("t", [response()], event_ids=[""])
    with pytest.raises(InvalidInputError):
        store.append("", [response()])
    with pytest.raises(InvalidInputError):
        store.append("x" * 513, [response()])
    assert snapshot(store) == before


def test_limits_are_enforced_before_anything_is_written(open_store: Callable[..., Store]) -> None:
    s = open_store(limits=Limits(max_event_bytes=2000, max_parts=3))
    s.append("t", [started("t"), agent_start()])
    before = snapshot(s)
    with pytest.raises(InvalidInputError):
        s.append("t", [response(), response("x" * 5000)])
    many = MessageRecorded(message=ResponseMessage(timestamp=T, agent_id="a1",
                                                   parts=[TextPart(content=str(i)) for i in range(4)]))
    with pytest.raises(InvalidInputError):
        s.append("t", [response(), many])
    assert snapshot(s) == before


def test_over_long_link_relation_is_invalid_input(store: Store) -> None:
    store.append("t", [started("t")])
    with pytest.raises(InvalidInputError):
        store.append("t", [link("p", relation="r" * 600)])


def test_link_relation_with_nul_is_refused_or_kept_exact(store: Store) -> None:
    """links_in keys end the relation with a NUL byte: a relation holding one
    must be refused, or else be reported and filtered exactly."""
    store.append("u", [started("u"), link("p", "a")])
    store.append("t", [started("t")])
    try:
        store.append("t", [link("p", "a\x00b")])
    except InvalidInputError:
        assert store.head("t").version == 1
    else:
        assert sorted(store.incoming("p")) == [("t", "a\x00b"), ("u", "a")]
        assert store.incoming("p", relation="a") == [("u", "a")]


# =========================================================================== expected version


def test_expected_version_semantics(store: Store) -> None:
    # no_stream: only on a thread with no events
    r = store.append("t", [started("t")], expected_version="no_stream")
    assert (r.first_seq, r.last_seq) == (1, 1)
    before = snapshot(store)
    with pytest.raises(WrongExpectedVersionError) as ei:
        store.append("t", [user()], expected_version="no_stream")
    assert (ei.value.expected, ei.value.actual, ei.value.thread_id) == ("no_stream", 1, "t")
    assert isinstance(ei.value, ConflictError)
    assert snapshot(store) == before

    # exists: only on a thread with events
    with pytest.raises(WrongExpectedVersionError) as ei:
        store.append("u", [started("u")], expected_version="exists")
    assert (ei.value.expected, ei.value.actual) == ("exists", 0)
    assert snapshot(store) == before
    assert not store.exists("u")
    r = store.append("t", [user()], expected_version="exists")
    assert r.last_seq == 2

    # exact int
    before = snapshot(store)
    for wrong in (0, 1, 3, 100):
        with pytest.raises(WrongExpectedVersionError) as ei:
            store.append("t", [user(), user()], expected_version=wrong)
        assert (ei.value.expected, ei.value.actual) == (wrong, 2)
    with pytest.raises(WrongExpectedVersionError) as ei:
        store.append("new", [started("new")], expected_version=5)
    assert (ei.value.expected, ei.value.actual) == (5, 0)
    assert snapshot(store) == before
    r = store.append("t", [user(), user()], expected_version=2)
    assert (r.first_seq, r.last_seq) == (3, 4)
    r = store.append("v", [started("v")], expected_version=0)
    assert r.last_seq == 1

    # any: always
    assert store.append("t", [user()], expected_version="any").last_seq == 5
    assert store.append("w", [started("w")]).last_seq == 1


@pytest.mark.parametrize("bad", [-1, True, False, "latest", "ANY", 1.0, None, [1]])
def test_bad_expected_version_values(store: Store, bad: Any) -> None:
    store.append("t", [started("t")])
    before = snapshot(store)
    with pytest.raises(InvalidInputError):
        store.append("t", [user()], expected_version=bad)
    assert snapshot(store) == before


# =========================================================================== idempotency


def test_idempotent_retry_returns_original_result(store: Store) -> None:
    store.append("other", [started("other")])
    eids = ids(3)
    first = store.append("t", [started("t"), user(), register()], event_ids=eids, expected_version="no_stream")
    assert first.event_ids == eids and not first.duplicate
    before = snapshot(store)
    again = store.append("t", [started("t"), user(), register()], event_ids=eids, expected_version="no_stream")
    assert again.duplicate
    assert msgspec.structs.replace(again, duplicate=False) == first
    assert snapshot(store) == before
    assert store.last_position == before["last_position"]
    # Still a duplicate after the thread moved on (retry after a lost acknowledgement).
    store.append("t", [user()])
    store.append("other", [user()])
    later = store.append("t", [started("t"), user(), register()], event_ids=eids, expected_version=0)
    assert later.duplicate and later.first_position == first.first_position
    assert later.last_position == first.last_position
    assert [e.event_id for e in store.read("t")][:3] == eids


def test_partial_overlap_and_foreign_ids_raise_idempotency_error(store: Store) -> None:
    eids = ids(3)
    store.append("t", [started("t"), user()], event_ids=eids[:2])
    store.append("u", [started("u")])
    before = snapshot(store)
    with pytest.raises(IdempotencyError):  # one stored, two new
        store.append("t", [user(), user(), user()], event_ids=[eids[1], "fresh-1", "fresh-2"])
    with pytest.raises(IdempotencyError):  # stored, but in another order
        store.append("t", [user(), started("t")], event_ids=[eids[1], eids[0]])
    with pytest.raises(IdempotencyError) as ei:  # stored in another thread
        store.append("u", [started("t"), user()], event_ids=eids[:2])
    assert isinstance(ei.value, ConflictError)
    with pytest.raises(IdempotencyError):
        store.append("u", [user()], event_ids=[eids[0]])
    assert snapshot(store) == before
    assert event_ids_stored(store, ["fresh-1", "fresh-2"]) == [False, False]


def test_duplicate_ids_inside_one_append(store: Store) -> None:
    store.append("t", [started("t")])
    before = snapshot(store)
    with pytest.raises(InvalidInputError):
        store.append("t", [user(), user()], event_ids=["same", "same"])
    assert snapshot(store) == before


# =========================================================================== global order


def test_global_log_order_across_interleaved_appends(store: Store, rng: random.Random) -> None:
    names = [f"thread-{i}" for i in range(12)] + [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(4)]
    results: list[AppendResult] = []
    for n in names:
        results.append(store.append(n, [started(n)]))
    for _ in range(150):
        n = rng.choice(names)
        k = rng.randint(1, 4)
        results.append(store.append(n, [user(f"{n}-{i}") for i in range(k)]))
    log = store.read_all()
    positions = [e.position for e in log]
    assert positions == list(range(1, len(log) + 1))  # strictly increasing, gap-free
    assert store.last_position == len(log) == sum(r.last_seq - r.first_seq + 1 for r in results)
    by_pos = {e.position: e for e in log}
    for r in results:  # each result names exactly where its events went
        for off, eid in enumerate(r.event_ids):
            ev = by_pos[r.first_position + off]
            assert (ev.thread_id, ev.seq, ev.event_id) == (r.thread_id, r.first_seq + off, eid)
    per_thread: dict[str, list[int]] = defaultdict(list)
    for e in log:
        per_thread[e.thread_id].append(e.seq)
    for n in names:
        assert per_thread[n] == list(range(1, len(per_thread[n]) + 1))
        thread = store.read(n)
        assert [(e.seq, e.position, e.event_id) for e in thread] == [
            (e.seq, e.position, e.event_id) for e in log if e.thread_id == n
        ]
        h = store.head(n)
        assert h.version == len(thread) and h.last_position == thread[-1].position
    # read_all paging and read() windows
    assert store.read_all(after=9, limit=7) == log[9:16]
    assert store.read_all(after=log[15].position, limit=7) == log[16:23]  # the next page
    assert store.read_all(after=len(log)) == []
    t0 = store.read(names[0])
    assert store.read(names[0], direction="backward") == t0[::-1]
    assert store.read(names[0], after=1, limit=2) == t0[1:3]
    assert store.read(names[0], after=t0[2].seq, limit=2) == t0[3:5]  # the next page
    assert store.read(names[0], after=3, direction="backward") == t0[:2][::-1]
    assert store.read(names[0], after=t0[0].seq, direction="backward") == []
    assert store.read(names[0], limit=0) == []
    with pytest.raises(InvalidInputError):
        store.read(names[0], direction="sideways")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        store.read(names[0], after=-1)
    with pytest.raises(InvalidInputError, match="after must be None or an int"):
        store.read(names[0], after="2")  # type: ignore[arg-type]
    for bad in (-1, None, True):
        with pytest.raises(InvalidInputError, match="after must be a log position"):
            store.read_all(after=bad)  # type: ignore[arg-type]
    with pytest.raises(NotFoundError):
        store.read("never-existed")


def test_recorded_event_fields(store: Store) -> None:
    t0 = time.time_ns()
    store.append("t", [started("t", title="hi"), *exchange("q", "a")], event_ids=ids(5, "x"))
    t1 = time.time_ns()
    evs = store.read("t")
    assert [type(e.event).__name__ for e in evs] == [
        "ThreadStarted", "UserTurnSubmitted", "AgentTurnStarted", "MessageRecorded", "AgentTurnCompleted"]
    assert evs[0].event == started("t", title="hi")
    assert all(t0 <= e.recorded_at <= t1 for e in evs)
    assert store.read_all() == evs
    h = store.head("t")
    assert (h.version, h.status, h.user_turns, h.agent_turns, h.messages, h.open_turn_agent) == (
        5, "active", 1, 1, 1, None)
    store.append("t", [agent_start("a9")])
    assert (store.head("t").open_turn_agent, store.head("t").open_turn_seq) == ("a9", 6)


def test_uuid_thread_ids_any_case_are_one_thread(store: Store) -> None:
    tid = str(uuid.uuid4())
    store.append(tid, [started(tid)])
    store.append(tid.upper(), [user()])
    assert [e.seq for e in store.read(tid)] == [1, 2]
    assert store.read(tid.upper()) == store.read(tid)
    assert store.head(tid.upper()).thread_id == tid


# =========================================================================== group commit (threads)


def test_group_commit_gives_each_writer_its_own_result(open_store: Callable[..., Store]) -> None:
    n = 24
    s: CountingStore = open_store(cls=CountingStore)
    for i in range(n):
        s.append(f"t{i}", [started(f"t{i}")])
    s.append("shared", [started("shared")])
    s.groups.clear()
    # Writers 0..n-1 on their own threads; every 4th expects a wrong version on
    # purpose; two more race for version 1 of "shared" (exactly one wins).
    jobs: list[tuple[str, Any]] = [(f"t{i}", 99 if i % 4 == 0 else 1) for i in range(n)] + [("shared", 1)] * 2
    s.gate = len(jobs)
    barrier = threading.Barrier(len(jobs))
    out: list[Any] = [None] * len(jobs)

    def work(k: int) -> None:
        tid, expected = jobs[k]
        eids = ids(2, f"w{k}")
        barrier.wait()
        try:
            out[k] = (eids, s.append(tid, [user(f"{k}"), user(f"{k}b")], expected_version=expected, event_ids=eids))
        except TplogError as exc:
            out[k] = (eids, exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)

    for k, (tid, expected) in enumerate(jobs[:n]):
        eids, res = out[k]
        if expected == 99:
            assert isinstance(res, WrongExpectedVersionError)
            assert (res.thread_id, res.expected, res.actual) == (tid, 99, 1)
            assert event_ids_stored(s, eids) == [False, False]
            assert s.head(tid).version == 1
        else:
            assert isinstance(res, AppendResult), res
            assert (res.thread_id, res.first_seq, res.last_seq, res.event_ids) == (tid, 2, 3, eids)
            assert [(e.position, e.event_id) for e in s.read(tid)[1:]] == [
                (res.first_position, eids[0]), (res.last_position, eids[1])]
    shared = [out[k][1] for k in (n, n + 1)]
    assert sorted(type(r).__name__ for r in shared) == ["AppendResult", "WrongExpectedVersionError"]
    loser = next(r for r in shared if isinstance(r, WrongExpectedVersionError))
    assert (loser.expected, loser.actual) == (1, 3)

    # Grouping happened: some commit held several appends, mixing successes and
    # deliberate failures; groups are disjoint and cover every append.
    sizes = [len(g) for g in s.groups]
    assert sum(sizes) == len(jobs)
    assert max(sizes) > 1, sizes
    assert any(any(e is None for *_, e in g) and any(isinstance(e, WrongExpectedVersionError) for *_, e in g)
               for g in s.groups)
    log = s.read_all()
    assert [e.position for e in log] == list(range(1, len(log) + 1))


def test_group_commit_stress_many_writers(open_store: Callable[..., Store], rng: random.Random) -> None:
    s: CountingStore = open_store(cls=CountingStore, durability="relaxed")
    n_threads, per = 16, 25
    seeds = [rng.randrange(2**32) for _ in range(n_threads)]
    results: dict[int, list[AppendResult]] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(n_threads)

    def work(k: int) -> None:
        r = random.Random(seeds[k])
        tid = f"w{k}"
        mine: list[AppendResult] = []
        try:
            barrier.wait()
            mine.append(s.append(tid, [started(tid)], expected_version="no_stream"))
            for _ in range(per):
                n_ev = r.randint(1, 3)
                mine.append(s.append(tid, [user() for _ in range(n_ev)], expected_version=mine[-1].last_seq))
                if r.random() < 0.2:  # a retry of the last append: must be a duplicate
                    again = s.append(tid, [user() for _ in range(n_ev)], event_ids=mine[-1].event_ids)
                    assert again.duplicate and again.first_position == mine[-1].first_position
        except BaseException as exc:
            errors.append(exc)
        results[k] = mine

    threads = [threading.Thread(target=work, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    log = s.read_all()
    assert [e.position for e in log] == list(range(1, len(log) + 1))
    seen_positions: set[int] = set()
    assert sorted(results) == list(range(n_threads))
    for mine in results.values():
        seqs = [(r.first_seq, r.last_seq) for r in mine]
        assert seqs[0] == (1, 1) and len(seqs) == per + 1
        for (_, b), (c, _) in itertools.pairwise(seqs):
            assert c == b + 1
        for r in mine:
            span = set(range(r.first_position, r.last_position + 1))
            assert len(span) == r.last_seq - r.first_seq + 1 and not span & seen_positions
            seen_positions |= span
    assert seen_positions == set(range(1, len(log) + 1))
    assert sum(len(g) for g in s.groups) >= n_threads * (per + 1)


# =========================================================================== corruption


def _raw_env(path: Path) -> lmdb.Environment:
    return lmdb.open(str(path), max_dbs=32, subdir=True)


# (byte offset, xor mask): the format byte, the flags (a known bit, an unknown
# bit), the dictionary id, the CRC, the header length, header, body, last byte.
FLIPS = {
    "format": (0, 0x01), "flags-compressed": (1, 0x01), "flags-unknown-bit": (1, 0x40),
    "dict-id": (5, 0x01), "crc": (7, 0x40), "header-length": (11, 0x01),
    "header": (13, 0x40), "body": (-100, 0x40), "last": (-1, 0x01),
}


# a raw body's dictionary id is never read (nothing to decompress): that flip changes nothing
@pytest.mark.parametrize(("where", "compressed"), [(w, c) for w in sorted(FLIPS) for c in (True, False)
                                                   if c or w != "dict-id"])
def test_flipped_byte_is_detected(open_store: Callable[..., Store], tmp_path: Path, where: str,
                                  compressed: bool) -> None:
    path = tmp_path / "store"
    s = open_store(path)
    # appends store an open turn's bodies raw; older stores hold them compressed one by one
    s.codec.compress_bodies = compressed
    s.append("t", [started("t"), user("x" * 300), user("short")])
    s.append("u", [started("u"), user()])
    s.close()
    key = event_key(tkey("t"), 2)
    env = _raw_env(path)
    try:
        db = env.open_db(b"events")
        with env.begin(write=True, db=db) as txn:
            value = bytearray(txn.get(key))
            assert value[1] == compressed and len(value) > 150  # body well past offset -100
            idx, mask = FLIPS[where]
            value[idx] ^= mask
            txn.put(key, bytes(value))
    finally:
        env.close()
    s = open_store(path)
    with pytest.raises(CorruptionError) as ei:
        s.read("t")
    assert (ei.value.thread_id, ei.value.seq) == ("t", 2)
    assert "seq 2" in str(ei.value) and "thread t" in str(ei.value)
    with pytest.raises(CorruptionError) as ei:
        s.read_all()
    assert (ei.value.thread_id, ei.value.seq) == ("t", 2)
    assert [e.seq for e in s.read("t", after=2)] == [3]  # neighbours still readable
    assert len(s.read("u")) == 2


def test_value_moved_to_another_key_is_detected(open_store: Callable[..., Store], tmp_path: Path) -> None:
    path = tmp_path / "store"
    s = open_store(path)
    s.append("t", [started("t"), user("same"), user("same")])
    s.append("u", [started("u"), user("same")])
    s.close()
    env = _raw_env(path)
    try:
        db = env.open_db(b"events")
        with env.begin(write=True, db=db) as txn:
            txn.put(event_key(tkey("t"), 3), txn.get(event_key(tkey("t"), 2)))  # within a thread
            txn.put(event_key(tkey("u"), 2), txn.get(event_key(tkey("t"), 2)))  # across threads
    finally:
        env.close()
    s = open_store(path)
    with pytest.raises(CorruptionError) as ei:
        s.read("t")
    assert (ei.value.thread_id, ei.value.seq) == ("t", 3)
    with pytest.raises(CorruptionError) as ei:
        s.read("u")
    assert (ei.value.thread_id, ei.value.seq) == ("u", 2)


def test_corrupted_blob_is_detected(open_store: Callable[..., Store], tmp_path: Path) -> None:
    path = tmp_path / "store"
    s = open_store(path, limits=Limits(blob_threshold=4096))
    s.append("t", [started("t"), user(os.urandom(6000).hex())])
    assert s.stats()["tables"]["blobs"]["entries"] == 1
    s.close()
    env = _raw_env(path)
    try:
        db = env.open_db(b"blobs")
        with env.begin(write=True, db=db) as txn:
            k, v = next(iter(txn.cursor()))
            v = bytearray(v)
            v[-5] ^= 1
            txn.put(k, bytes(v))
    finally:
        env.close()
    s = open_store(path, limits=Limits(blob_threshold=4096))
    with pytest.raises(CorruptionError, match=r"^shared blob failed its CRC-32 check \(thread t, seq 2\)$") as ei:
        s.read("t")
    assert (ei.value.thread_id, ei.value.seq) == ("t", 2)


def _reencoded(s: Store, stored: bytes, flags: int, dict_id: int, old: bytes, new: bytes) -> bytes:
    """``stored`` (a body as kept: raw or zstd-compressed) with ``old`` replaced by ``new`` (same
    length) inside the msgpack body, re-compressed with the same dictionary: bytes every decoder
    accepts, that only the CRC can tell from the original."""
    body = s.codec._decompressor(dict_id).decompress(stored) if flags & 1 else stored
    assert body.count(old) >= 1 and len(old) == len(new)
    body = body.replace(old, new, 1)
    out = s.codec._compressor(dict_id).compress(body) if flags & 1 else body
    assert out != stored
    return out


def test_blob_changed_in_a_way_only_its_crc_can_tell_is_detected(open_store: Callable[..., Store],
                                                                 tmp_path: Path) -> None:
    path = tmp_path / "store"
    text = "lorem ipsum " * 700
    s = open_store(path, limits=Limits(blob_threshold=4096))
    s.append("t", [started("t"), user(text), user("after")])
    with s.backend.engine.read() as txn:
        [(sha, blob)] = [(bytes(k), bytes(v)) for k, v in txn.range("blobs")]
    _refcount, flags, dict_id, _crc = struct.unpack_from(">IBII", blob)
    assert flags & 1  # compressed: the new bytes must still be a valid zstd frame
    bad = blob[:13] + _reencoded(s, blob[13:], flags, dict_id, b"lorem", b"LOREM")
    s.backend.engine.run_write(lambda txn: txn.put("blobs", sha, bad))
    with pytest.raises(CorruptionError, match=r"^shared blob failed its CRC-32 check \(thread t, seq 2\)$") as ei:
        s.read("t")
    assert (ei.value.thread_id, ei.value.seq) == ("t", 2)
    with pytest.raises(CorruptionError, match="shared blob failed its CRC-32 check"):
        s.read_all()
    assert [e.seq for e in s.read("t", after=2)] == [3]
    problems = verify_store(s).problems
    assert problems == ["shared blob failed its CRC-32 check (thread t, seq 2)"], problems


@pytest.mark.parametrize("compressed", [True, False])
def test_event_body_changed_in_a_way_only_its_crc_can_tell_is_detected(open_store: Callable[..., Store],
                                                                       tmp_path: Path, compressed: bool) -> None:
    s = open_store(tmp_path / "store")
    s.codec.compress_bodies = compressed  # values compressed one by one, as older stores hold them
    s.append("t", [started("t"), user("lorem ipsum " * 20 if compressed else "lorem"), user("after")])
    key = event_key(tkey("t"), 2)
    with s.backend.engine.read() as txn:
        v = bytes(txn.get("events", key))
    assert v[0] == 3 and bool(v[1] & 1) == compressed
    end = 12 + int.from_bytes(v[10:12], "big")
    bad = v[:end] + _reencoded(s, v[end:-4], v[1], int.from_bytes(v[2:6], "big"), b"lorem", b"LOREM") + v[-4:]
    s.backend.engine.run_write(lambda txn: txn.put("events", key, bad))
    with pytest.raises(CorruptionError, match=r"^stored value failed its CRC-32 check \(thread t, seq 2\)$"):
        s.read("t")
    with pytest.raises(CorruptionError, match=r"^stored value failed its CRC-32 check \(thread t, seq 2\)$"):
        s.read_all()
    assert [e.seq for e in s.read("t", after=2)] == [3]
    assert verify_store(s).problems == ["stored value failed its CRC-32 check (thread t, seq 2)"]


# =========================================================================== map growth


def _big_text(rng: random.Random, n: int) -> str:
    return rng.randbytes(n // 2).hex()  # incompressible


def test_growth_from_a_tiny_map(open_store: Callable[..., Store], rng: random.Random) -> None:
    s = open_store(map_size=64 * 1024, limits=Limits(blob_threshold=4096))
    map0 = s.stats()["map_size"]
    expected: dict[str, list[Any]] = defaultdict(list)
    stop = threading.Event()
    reader_errors: list[BaseException] = []

    def reader() -> None:  # reads keep working while the map is resized under them
        try:
            while not stop.is_set():
                s.read_all(after=max(0, s.last_position - 21))
        except BaseException as exc:
            reader_errors.append(exc)

    rt = threading.Thread(target=reader)
    rt.start()
    try:
        names = [f"g{i}" for i in range(8)]
        for n in names:
            s.append(n, [started(n)])
            expected[n].append(started(n))
        total = len(names)
        while total < 3000:
            n = rng.choice(names)
            batch = [user(_big_text(rng, rng.choice([5000, 9000])) if rng.random() < 0.03 else f"m{total + i}")
                     for i in range(rng.randint(5, 25))]
            s.append(n, batch)
            expected[n].extend(batch)
            total += len(batch)
    finally:
        stop.set()
        rt.join(30)
    assert not reader_errors, reader_errors
    st = s.stats()
    assert st["map_size"] > map0
    assert st["tables"]["blobs"]["entries"] > 0
    for n, evs in expected.items():
        assert [e.event for e in s.read(n)] == evs
    assert [e.position for e in s.read_all()] == list(range(1, total + 1))


def test_max_map_size_too_small_is_storage_full_and_nothing_half_written(
    open_store: Callable[..., Store], tmp_path: Path, rng: random.Random
) -> None:
    path = tmp_path / "store"
    s = open_store(path, map_size=64 * 1024, max_map_size=256 * 1024)
    s.append("t", [started("t")])
    last_ok = snapshot(s)
    with pytest.raises(StorageFullError) as ei:
        for _ in range(1000):
            s.append("t", [user(_big_text(rng, 3000)) for _ in range(4)])
            last_ok = snapshot(s)
    assert isinstance(ei.value, OSError) and isinstance(ei.value, TplogError)
    assert snapshot(s) == last_ok  # the failing 4-event append left nothing behind
    assert s.head("t").version == len(s.read("t")) == last_ok["heads"][0].version
    # The store stays usable; reopened with room, it accepts the append.
    s.close()
    s2 = open_store(path, max_map_size=1 << 30)
    assert snapshot(s2) == last_ok
    r = s2.append("t", [user(_big_text(rng, 3000)) for _ in range(4)])
    assert r.last_seq == last_ok["heads"][0].version + 4


# =========================================================================== blobs


def test_identical_large_bodies_share_one_blob(open_store: Callable[..., Store], rng: random.Random) -> None:
    s = open_store(limits=Limits(blob_threshold=4096))
    big = response(_big_text(rng, 20_000))
    for n in ("a", "b"):
        s.append(n, [started(n), agent_start(), big, completed()])
    assert s.stats()["tables"]["blobs"]["entries"] == 1
    assert s.read("a")[2].event == s.read("b")[2].event == big
    with s.backend.engine.read() as txn:
        v = txn.get("events", event_key(tkey("a"), 3))
        assert v[1] & 2  # stored as a blob reference
    s.delete_thread("a")
    assert s.stats()["tables"]["blobs"]["entries"] == 1
    assert s.read("b")[2].event == big
    s.delete_thread("b")
    assert s.stats()["tables"]["blobs"]["entries"] == 0


def test_idempotent_retry_does_not_add_a_blob_reference(open_store: Callable[..., Store], rng: random.Random) -> None:
    s = open_store(limits=Limits(blob_threshold=4096))
    big = user(_big_text(rng, 10_000))
    s.append("a", [started("a")])
    s.append("b", [started("b")])
    r = s.append("a", [big], event_ids=["big-1"])
    assert s.append("a", [big], event_ids=["big-1"]).duplicate
    s.append("b", [big])
    assert r.first_seq == 2
    s.delete_thread("a")
    assert s.read("b")[1].event == big  # the retry must not have left a dangling count
    s.delete_thread("b")
    assert s.stats()["tables"]["blobs"]["entries"] == 0


# =========================================================================== deletion


def test_delete_thread(store: Store) -> None:
    store.append("parent", [started("parent"), agent_start(), spawn_message("kid"), completed()])
    store.append("kid", [started("kid"), link("parent", "spawned_from"), link("ref", "referenced")])
    store.append("keep", [started("keep"), link("parent", "spawned_from"), link("ref", "referenced")])
    assert sorted(store.incoming("parent")) == [("keep", "spawned_from"), ("kid", "spawned_from")]
    assert sorted(store.incoming("ref", relation="referenced")) == [("keep", "referenced"), ("kid", "referenced")]
    assert sorted(store.children("parent")) == ["keep", "kid"]
    kid_ids = [e.event_id for e in store.read("kid")]
    before_all = store.read_all()

    res = store.delete_thread("kid", reason="gdpr")
    assert (res.thread_id, res.first_seq, res.last_seq) == ("kid", 4, 4)
    assert res.last_position == before_all[-1].position + 1 == store.last_position
    evs = store.read("kid")
    assert len(evs) == 1 and evs[0].event == ThreadDeleted(reason="gdpr") and evs[0].seq == 4
    assert evs[0].position == res.last_position
    h = store.head("kid")
    assert (h.status, h.version, h.open_turn_agent) == ("deleted", 4, None)
    assert not store.exists("kid") and store.exists("keep")
    for attempt in ([user()], [started("kid")]):
        with pytest.raises(ThreadDeletedError):
            store.append("kid", attempt)
    with pytest.raises(ThreadDeletedError):
        store.delete_thread("kid")
    with pytest.raises(NotFoundError):
        store.delete_thread("never-existed")
    assert "kid" not in [t.thread_id for t in store.threads().threads]
    assert store.incoming("parent") == [("keep", "spawned_from")]
    assert store.incoming("ref") == [("keep", "referenced")]
    # a deleted thread is nobody's child, though the parent's own spawn message names it
    assert store.children("parent") == ["keep"]
    # read_all: the deleted thread leaves gaps except for its tombstone
    after_all = store.read_all()
    assert [e for e in after_all if e.thread_id != "kid"] == [e for e in before_all if e.thread_id != "kid"]
    assert [(e.thread_id, e.seq) for e in after_all if e.thread_id == "kid"] == [("kid", 4)]
    tables = store.stats()["tables"]
    assert tables["global"]["entries"] == len(after_all)
    assert store.stats()["events"] == len(after_all)
    # a closed turn's events share one row (tplog/backends/lmdb/chunks.py); the deleted thread's rows are gone
    assert tables["events"]["entries"] < len(after_all)
    assert event_ids_stored(store, kid_ids) == [False] * 3

    # Deleting the parent drops the children entries its spawn message created.
    store.delete_thread("parent")
    assert store.children("parent") == ["keep"]


def test_deleted_thread_listed_with_include_deleted(store: Store) -> None:
    store.append("a", [started("a")])
    store.append("b", [started("b")])
    store.delete_thread("a")
    assert [t.thread_id for t in store.threads().threads] == ["b"]
    listed = {t.thread_id: t.status for t in store.threads(include_deleted=True).threads}
    assert listed == {"a": "deleted", "b": "active"}


def test_delete_thread_with_large_link(open_store: Callable[..., Store], rng: random.Random) -> None:
    s = open_store(limits=Limits(blob_threshold=4096))
    big_link = link("target", "referenced")
    big_link = msgspec.structs.replace(
        big_link, link=msgspec.structs.replace(big_link.link, metadata={"blob": _big_text(rng, 9000)}))
    s.append("t", [started("t"), big_link])
    assert s.incoming("target") == [("t", "referenced")]
    s.delete_thread("t")
    with pytest.raises(NotFoundError):  # no stored thread links to it any more: the store does not know it
        s.incoming("target")
    assert s.stats()["tables"]["blobs"]["entries"] == 0


# =========================================================================== backup


@pytest.mark.parametrize("compact", [True, False])
def test_backup_while_appending_reopens_equal(open_store: Callable[..., Store], tmp_path: Path,
                                              compact: bool) -> None:
    s = open_store(tmp_path / "live")
    for i in range(20):
        s.append(f"t{i}", [started(f"t{i}"), *exchange()])
    s.delete_thread("t3")
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        i = 0
        try:
            while not stop.is_set() or i < 20:
                s.append(f"t{i % 20 if i % 20 != 3 else 4}", [user(f"bg{i}")])
                i += 1
        except BaseException as exc:
            errors.append(exc)

    wt = threading.Thread(target=writer)
    wt.start()
    try:
        time.sleep(0.05)
        s.backup(str(tmp_path / "bak"), compact=compact)
        time.sleep(0.05)
    finally:
        stop.set()
        wt.join(30)
    assert not errors, errors
    b = open_store(tmp_path / "bak")
    live_all = s.read_all()
    bak_all = b.read_all()
    p = b.last_position
    assert p > 0 and bak_all == [e for e in live_all if e.position <= p]  # a consistent prefix
    assert len(live_all) > len(bak_all) or s.last_position == p
    for h in b.threads(limit=1000, include_deleted=True).threads:
        evs = b.read(h.thread_id)
        assert h.version == evs[-1].seq and evs == s.read(h.thread_id)[: len(evs)]
        live = s.head(h.thread_id)
        if live.version == h.version:
            assert live == h
    assert not b.exists("t3") and b.head("t3").status == "deleted"
    # the copy is a full store: it accepts appends of its own
    assert b.append("t0", [user("after")]).first_position == p + 1
    with pytest.raises(StorageError):
        s.backup(str(tmp_path / "bak"))  # not empty


# =========================================================================== closed / read-only


def test_closed_store_raises_store_closed(tmp_path: Path) -> None:
    s = Store(tmp_path / "s")
    s.append("t", [started("t")])
    s.close()
    s.close()  # idempotent
    calls: list[Callable[[], Any]] = [
        lambda: s.append("t", [user()]),
        lambda: s.read("t"),
        lambda: s.read_all(),
        lambda: s.head("t"),
        lambda: s.exists("t"),
        lambda: s.threads(),
        lambda: s.incoming("t"),
        lambda: s.children("t"),
        lambda: s.delete_thread("t"),
        lambda: s.backup(str(tmp_path / "b")),
        lambda: s.stats(),
        lambda: s.last_position,
        lambda: s.train_dictionary(),
        lambda: s.sync(),
    ]
    for call in calls:
        with pytest.raises(StoreClosedError):
            call()
    with Store(tmp_path / "s") as s2:
        assert len(s2.read("t")) == 1
    with pytest.raises(StoreClosedError):
        s2.read("t")


def test_readonly_store(open_store: Callable[..., Store], tmp_path: Path) -> None:
    path = tmp_path / "store"
    with Store(path) as w:
        w.append("t", [started("t"), *exchange()])
        w.append("u", [started("u"), link("t", "spawned_from")])
        expected = w.read_all()
    r = open_store(path, readonly=True)
    assert r.read_all() == expected
    assert len(r.read("t")) == 5 and r.head("u").version == 2 and r.exists("t")
    assert r.incoming("t") == [("u", "spawned_from")] and r.children("t") == ["u"]
    assert {h.thread_id for h in r.threads().threads} == {"t", "u"}
    assert r.last_position == len(expected)
    for call in (lambda: r.append("t", [user()]), lambda: r.append("new", [started("new")]),
                 lambda: r.delete_thread("t")):
        with pytest.raises(ReadOnlyError):
            call()
    assert r.read_all() == expected


def test_readonly_without_a_store(tmp_path: Path) -> None:
    missing = tmp_path / "nothing-here"
    with pytest.raises(TplogError) as ei:
        Store(missing, readonly=True)
    assert isinstance(ei.value, (StorageError, NotFoundError))
    assert not missing.exists()  # read-only never creates
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TplogError):
        Store(empty, readonly=True)


# =========================================================================== threads() paging


def test_threads_paging_by_cursor(store: Store) -> None:
    names = [f"p{i:02d}" for i in range(23)]
    for n in names:
        store.append(n, [started(n)])
    store.append("p05", [user()])  # most recently updated now
    want = ["p05", *[n for n in reversed(names) if n != "p05"]]
    got: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = store.threads(limit=5, after=cursor)
        pages += 1
        assert len(page.threads) <= 5
        got.extend(h.thread_id for h in page.threads)
        cursor = page.cursor
        if cursor is None:
            break
        assert pages < 20
    assert got == want
    assert pages == 5
    assert store.threads(limit=100).cursor is None
    for bad in ("zz", "abcd", "00" * 23, "00" * 25, "not hex at all"):
        with pytest.raises(InvalidInputError):
            store.threads(after=bad)
    for bad_limit in (0, -3):
        with pytest.raises(InvalidInputError):
            store.threads(limit=bad_limit)


# =========================================================================== dictionaries


def _chatty(i: int, rng: random.Random) -> UserTurnSubmitted:
    words = ["tool", "call", "result", "weather", "Paris", "forecast", "temperature", "sunny", "json", "agent"]
    text = " ".join(rng.choice(words) for _ in range(60)) + f" #{i}"
    return user(text)


def test_dictionary_training(open_store: Callable[..., Store], tmp_path: Path, rng: random.Random) -> None:
    path = tmp_path / "store"
    s = open_store(path)
    # per-event values compressed one by one (older stores, PostgreSQL): appends inside a
    # turn store bodies raw and compress them with the dictionary once per chunk
    s.codec.compress_bodies = True
    assert s.train_dictionary() == 0  # too few samples
    s.append("t", [started("t")])
    old = [_chatty(i, rng) for i in range(300)]
    for i in range(0, 300, 30):
        s.append("t", old[i : i + 30])
    dict_id = s.train_dictionary(size=16 << 10)
    assert dict_id == 1
    assert s.stats()["dictionaries"] == 1
    new = [_chatty(1000 + i, rng) for i in range(20)]
    s.append("t", new)
    dicts = {seq: int.from_bytes(v[2:6], "big") for seq, _, v in s.backend.iter_thread_values("t")}
    assert all(dicts[seq] == 0 for seq in range(1, 302))
    assert all(dicts[seq] == dict_id for seq in range(302, 322)), dicts
    assert [e.event for e in s.read("t")] == [started("t"), *old, *new]
    s.close()
    s2 = open_store(path)
    s2.codec.compress_bodies = True
    assert s2.codec.has_dictionary(dict_id)
    assert [e.event for e in s2.read("t")] == [started("t"), *old, *new]
    s2.append("t", [_chatty(5000, rng)])
    assert int.from_bytes(list(s2.backend.iter_thread_values("t"))[-1][2][2:6], "big") == dict_id
    assert s2.train_dictionary(size=16 << 10) == 2


def test_a_group_that_fails_outside_the_engine_fails_its_appends(tmp_path: Path) -> None:
    """An unexpected error in the leader's commit (not an engine error) must fail every
    append of that group: none may be left waiting, or take the lead alongside another."""

    class Boom(HookedStore):
        stage = 0

        holding = threading.Event()

        def _commit(self, batch: list[Any]) -> None:
            if self.stage == 1:  # hold this group (the first thread's alone) until 8 appends queue behind it
                self.holding.set()
                deadline = time.monotonic() + 60
                while len(self._gc.queue) < 8:
                    assert time.monotonic() < deadline, "the 8 appends never queued"
                    time.sleep(0.001)
                self.stage = 2
            elif self.stage == 2:  # the group of those 8
                self.stage = 3
                raise RuntimeError("boom")
            super()._commit(batch)

    with Boom(tmp_path / "s", auto_dictionary=0) as s:
        s.append("t", [started("t")])
        s.stage = 1
        outcome: dict[int, BaseException | None] = {}

        def one(i: int) -> None:
            try:
                s.append(f"u{i}", [started(f"u{i}")])
                outcome[i] = None
            except BaseException as exc:
                outcome[i] = exc

        ts = [threading.Thread(target=one, args=(i,)) for i in range(9)]
        ts[0].start()
        assert s.holding.wait(60)  # the first append leads a group of its own before the others start
        for t in ts[1:]:
            t.start()
        for t in ts:
            t.join(60)
        assert not any(t.is_alive() for t in ts)
        failed = [i for i, e in outcome.items() if e is not None]
        assert all(isinstance(outcome[i], RuntimeError) for i in failed) and len(failed) == 8
        assert s.stage == 3 and s.last_position == 2  # "t" and the held group's one append
        assert s.append("after", [started("after")]).last_position == 3


class _Staged(HookedStore):
    """Commit groups staged by conditions, not by timing: group 1 is ``u0`` alone (it
    waits until ``u1``..``u4`` have queued behind it), group 2 is ``u1``..``u4`` (its
    transaction, once built — which lets appenders through the gate — commits only
    after ``u5``, ``u6`` have queued), group 3 is ``u5``, ``u6``. ``fail`` makes group
    3 raise before it reaches the engine; else its transaction, once built, stays open
    until the four callers of group 2 have returned. Each wait fails loudly after a
    minute instead of going on with another grouping."""

    fail = False

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.groups = 0
        self.told = 0  # callers of group 2 returned
        self.told_at: tuple[int, int] | None = None  # (before, after) group 3's build

    @staticmethod
    def _until(cond: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + 60
        while not cond():
            if time.monotonic() > deadline:
                raise AssertionError(f"staging: gave up waiting for {what}")
            time.sleep(0.001)

    def _holding(self, batch: list[Any], after_build: Callable[[], None],
                 before_build: Callable[[], None] = lambda: None) -> None:
        run_write = self.backend.engine.run_write

        def held(fn: Any, on_wait: Any = None) -> Any:
            def build(txn: Any) -> Any:
                before_build()
                out = fn(txn)
                after_build()
                return out

            return run_write(build, on_wait)

        self.backend.engine.run_write = held  # type: ignore[method-assign]
        try:
            super()._commit(batch)
        finally:
            self.backend.engine.run_write = run_write  # type: ignore[method-assign]

    def _commit(self, batch: list[Any]) -> None:
        self.groups += 1
        if self.groups == 1:
            self._until(lambda: len(self._gc.queue) >= 4, "u1..u4 to queue behind group 1")
            return super()._commit(batch)
        if self.groups == 2:
            return self._holding(batch, lambda: self._until(lambda: len(self._gc.queue) >= 2,
                                                            "u5, u6 to queue behind group 2"))
        if self.groups != 3:
            return super()._commit(batch)
        if self.fail:
            raise RuntimeError("boom")
        before: list[int] = []

        def told_all() -> None:
            self._until(lambda: self.told >= 4, "group 2's callers to return")
            self.told_at = (before[0], self.told)

        return self._holding(batch, told_all, lambda: before.append(self.told))


def _staged_appends(s: _Staged) -> dict[int, Any]:
    """u0..u6, each from its own thread, started so that they form _Staged's groups."""
    outcome: dict[int, Any] = {}
    lock = threading.Lock()

    def one(i: int) -> None:
        try:
            outcome[i] = s.append(f"u{i}", [started(f"u{i}")])
        except BaseException as exc:
            outcome[i] = exc
        if 1 <= i <= 4:
            with lock:
                s.told += 1

    ts = [threading.Thread(target=one, args=(i,)) for i in range(7)]
    for i, t in enumerate(ts):
        t.start()
        if i in (0, 4):  # u0's group, then u1..u4's, is taken before the next appends start
            want = 1 if i == 0 else 2
            s._until(lambda want=want: s.groups >= want, f"group {want} to start")
    for t in ts:
        t.join(30)
    assert not any(t.is_alive() for t in ts), "an append was never told its result"
    return outcome


def test_a_group_is_told_when_the_next_leader_has_built_its_transaction(tmp_path: Path) -> None:
    """The waiting callers of a committed group are woken by the next leader once its
    transaction is built (so they run during its fsync, not during its LMDB calls):
    when group 3's build starts, at most group 2's leader has returned; when it ends,
    all four of group 2 have."""
    with _Staged(tmp_path / "s", auto_dictionary=0) as s:
        outcome = _staged_appends(s)
        assert s.groups == 3
        assert s.told_at is not None and s.told_at[0] <= 1 and s.told_at[1] == 4, s.told_at
        assert all(isinstance(r, AppendResult) for r in outcome.values()), outcome
        assert sorted(r.last_position for r in outcome.values()) == list(range(1, 8))


def test_a_group_is_told_even_when_the_next_group_fails(tmp_path: Path) -> None:
    """Waking a committed group's callers is left to the next leader; when that leader's
    group fails before it reaches the engine, the committed group still hears its results
    (and is not failed with the next group's error)."""
    with _Staged(tmp_path / "s", auto_dictionary=0) as s:
        s.fail = True
        outcome = _staged_appends(s)
        assert s.groups == 3
        ok = {i for i, r in outcome.items() if isinstance(r, AppendResult)}
        failed = {i for i, r in outcome.items() if isinstance(r, RuntimeError)}
        assert ok == {0, 1, 2, 3, 4} and failed == {5, 6}, outcome
        assert sorted(outcome[i].last_position for i in ok) == [1, 2, 3, 4, 5]
        assert s.append("after", [started("after")]).last_position == 6


_NOW = "2025-01-20T10:00:00Z"


@pytest.mark.parametrize(
    "bad,path",
    [
        (lambda: ResponseMessage(parts=[TextPart(content=123)], agent_id="a1", timestamp=_NOW),
         "$.message.parts[0].content"),
        (lambda: ResponseMessage(parts=[ToolCallPart(tool_name="f", args={}, tool_call_id=None)],
                                 agent_id="a1", timestamp=_NOW), "$.message.parts[0].tool_call_id"),
        (lambda: ResponseMessage(parts=["not a part"], agent_id="a1", timestamp=_NOW),
         "$.message.parts[0]"),
        (lambda: ResponseMessage(parts=[], agent_id={"x": 1}, timestamp=_NOW),
         "$.message.agent_id"),
    ],
)
def test_a_wrongly_typed_event_is_refused_not_stored(open_store: Callable[..., Store], bad: Any, path: str) -> None:
    """msgspec does not check types when a Struct is built: a mistyped field would encode,
    then never decode, making the whole thread unreadable. The append refuses it instead."""
    s = open_store()
    s.append("t", [started("t"), agent_start()])
    before = snapshot(s)
    with pytest.raises(InvalidInputError, match=r"thread t: events\[0\]: MessageRecorded does not match") as exc:
        s.append("t", [MessageRecorded(message=bad())])
    assert exc.value.path == path
    assert snapshot(s) == before
    assert len(s.read("t")) == 2


@pytest.mark.parametrize("depth,error", [(80, InvalidInputError), (5000, LimitExceededError)])
def test_deep_nesting_in_a_scalar_field_is_refused(open_store: Callable[..., Store], depth: int,
                                                   error: type[Exception]) -> None:
    """The depth check walks only fields that may nest; a container put where a string
    belongs is refused by the schema check, and one too deep to encode by the limit."""
    nested: list[Any] = []
    inner = nested
    for _ in range(depth):
        inner.append([])
        inner = inner[0]
    s = open_store()
    s.append("t", [started("t"), agent_start()])
    before = snapshot(s)
    bad = MessageRecorded(message=ResponseMessage(parts=[TextPart(content=nested)], agent_id="a1", timestamp=_NOW))
    with pytest.raises(error):
        s.append("t", [bad])
    assert snapshot(s) == before


def test_generated_event_ids_are_uuid7_and_unique_across_threads_and_fork() -> None:
    """Ids draw their random bits from a per-thread os.urandom buffer: threads never
    share one, and a forked child gets fresh bytes instead of replaying its parent's."""
    from tplog.ids import new_event_id

    first = new_event_id()  # this thread's buffer now holds unused random bytes
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(r)
        os.write(w, "\n".join(new_event_id() for _ in range(50)).encode())
        os._exit(0)
    os.close(w)
    mine = [new_event_id() for _ in range(50)]
    with os.fdopen(r) as f:
        child = f.read().split("\n")
    os.waitpid(pid, 0)
    assert len(child) == 50
    assert not {i[-17:] for i in mine} & {i[-17:] for i in child}  # the random parts differ, not only time

    out: list[list[str]] = [[] for _ in range(8)]

    def gen(k: int) -> None:
        out[k].extend(new_event_id() for _ in range(2000))

    workers = [threading.Thread(target=gen, args=(k,)) for k in range(8)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    every = [first, *mine, *child, *(i for ids in out for i in ids)]
    assert len(set(every)) == len(every)
    for i in every:
        u = uuid.UUID(i)
        assert u.version == 7 and u.variant == uuid.RFC_4122 and str(u) == i
    # In order below the millisecond too (rand_a holds the sub-millisecond time), so
    # new ids go last in the eventids index and fill its pages.
    for made in out:
        assert made == sorted(made)
        assert len({i[:14] for i in made}) < len(made)  # many share a millisecond: the ms alone does not order them


def test_iter_all_streams_the_global_log_in_chunks(tmp_path: Path, rng: random.Random) -> None:
    with Store(tmp_path / "s") as s:
        names = [f"t{i}" for i in range(6)]
        for n in names:
            s.append(n, [started(n)])
        for _ in range(80):
            s.append(rng.choice(names), [user() for _ in range(rng.randint(1, 3))])
        s.delete_thread("t2")  # its events leave gaps; its tombstone stays
        log = s.read_all()
        assert [e.position for e in log] != list(range(1, len(log) + 1))  # the gaps are there
        for chunk in (1, 3, 7, 256):
            assert list(s.iter_all(chunk=chunk)) == log, chunk
        assert list(s.iter_all(after=log[19].position, chunk=5)) == log[20:]
        assert list(s.iter_all(after=log[-1].position)) == []

        # events committed while iterating are included once their positions are reached
        it = s.iter_all(chunk=4)
        first = [next(it) for _ in range(4)]
        extra = s.append("t0", [user("late")])
        rest = list(it)
        assert first + rest == s.read_all()
        assert rest[-1].position == extra.last_position and rest[-1].event_id == extra.event_ids[0]

        for bad in (0, -1, 1.5, True, "9"):
            with pytest.raises(InvalidInputError, match="chunk must be an int > 0"):
                s.iter_all(chunk=bad)  # type: ignore[arg-type]
    with pytest.raises(StoreClosedError):
        s.iter_all()


def test_opening_what_is_not_a_store(tmp_path: Path) -> None:
    """Bad options and directories that hold no tplog store: typed errors, nothing created."""
    with pytest.raises(InvalidInputError, match="durability must be 'durable' or 'relaxed', not 'eventual'"):
        Store(tmp_path / "a", durability="eventual")
    assert not (tmp_path / "a").exists()
    with pytest.raises(StorageError, match=r"no store here \(opened read-only, so none was created\)"):
        Store(tmp_path / "nothing", readonly=True)
    assert not (tmp_path / "nothing").exists()
    env = lmdb.open(str(tmp_path / "other"), max_dbs=4)  # an LMDB environment of some other program
    env.open_db(b"mine")
    env.close()
    with pytest.raises(StorageError, match="not a tplog store"):
        Store(tmp_path / "other", readonly=True)
