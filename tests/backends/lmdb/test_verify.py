"""`tplog verify` (tplog.backends.lmdb.verify): the checks tests/backends/lmdb/test_rebuild.py does not reach,
each by one kind of damage to a real LMDB store and the exact problem list it gives.
Written to kill the surviving mutants of tests/MUTANTS.md (tplog/backends/lmdb/verify.py).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import ToyStore as Store
from conftest import agent_start, completed, response, started, user
from test_rebuild import start

from tplog.backends.lmdb.chunks import CHUNK
from tplog.backends.lmdb.keys import tkey
from tplog.verify import verify_store


def _problems(s: Store, *, projections: bool = False) -> list[str]:
    return verify_store(s, projections=projections).problems


@pytest.mark.parametrize("parent_is", ["shorter", "deleted", "gone"])
def test_verify_names_a_fork_whose_parent_no_longer_holds_its_prefix(tmp_path: Path, parent_is: str) -> None:
    parent = str(uuid.uuid4())
    with Store(tmp_path / "s") as s:
        s.append(parent, [start(parent), user("one"), user("two"), user("three")])
        f = s.fork(parent, 3).thread_id
        s.append(f, [user("mine")])
        g = s.fork(parent, 4).thread_id  # a fork of the whole parent: sound when the parent has 4 seqs
        gone = s.fork(parent, 4).thread_id
        s.delete_thread(gone)  # a deleted fork holds only its tombstone: its prefix is not checked
        assert _problems(s, projections=True) == []
        head = s.head(parent)
        tk = tkey(parent)

        def edit(txn: Any) -> None:
            if parent_is == "gone":
                txn.delete("heads", tk)
            else:
                changed = {"version": 3} if parent_is == "shorter" else {"status": "deleted"}
                txn.put("heads", tk, msgspec.msgpack.encode(msgspec.structs.replace(head, **changed)))

        s.backend.engine.run_write(edit)
        expected = {f"thread {g}: forked from {parent} at seq 4, which it does not hold"}
        if parent_is == "shorter":
            expected.add(f"thread {parent}: head version 3 but last seq 4")
        else:  # the parent no longer active: neither fork holds its prefix
            expected.add(f"thread {f}: forked from {parent} at seq 3, which it does not hold")
        problems = _problems(s)
        assert sorted(problems) == sorted(expected), problems
        assert len(problems) == len(expected)


def test_verify_counts_threads_events_and_blobs(tmp_path: Path) -> None:
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    with Store(tmp_path / "s") as s:
        s.append(a, [start(a), user("x" * 300_000)])  # a body this large is stored as a blob
        s.append(b, [start(b), user("x" * 300_000), user("short")])  # the same body: one blob, two refs
        rep = verify_store(s)
        assert (rep.threads, rep.events, rep.blobs, rep.problems, rep.skipped) == (2, 5, 1, [], [])


def test_verify_checks_a_fork_inside_a_scope_against_its_parent_in_that_scope(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        view = s.scoped("tenant-a")
        parent = str(uuid.uuid4())
        view.append(parent, [start(parent), user("one"), user("two")])
        f = view.fork(parent, 2).thread_id
        view.append(f, [user("mine")])
        assert _problems(s, projections=True) == []
        head, tk = view.head(parent), tkey(parent, "tenant-a")
        s.backend.engine.run_write(lambda txn: txn.put("heads", tk, msgspec.msgpack.encode(
            msgspec.structs.replace(head, version=1))))
        assert sorted(_problems(s)) == sorted([f"thread {f}: forked from {parent} at seq 2, which it does not hold",
                                               f"thread {parent}: head version 1 but last seq 3"])


def _turn(n: int) -> list[Any]:
    return [user(f"question {n} " * 40), agent_start(), response(f"answer {n} " * 200), completed()]


def test_a_damaged_chunk_is_reported_once_and_the_thread_checked_on(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        s.append("t", [started("t"), *_turn(1)])  # closed turns are stored as chunks: seqs 1..5
        s.append("t", _turn(2))  # seqs 6..9
        s.append("t", [user("open")])  # seq 10, a row of its own
        with s.backend.engine.read() as txn:
            keys = [bytes(k) for k, v in txn.range("events") if v[0] == CHUNK]
        assert len(keys) == 2

        def damage(txn: Any) -> None:
            v = bytearray(txn.get("events", keys[0]))
            v[len(v) // 2] ^= 0x10
            txn.put("events", keys[0], bytes(v))

        s.backend.engine.run_write(damage)
        rep = verify_store(s, projections=False)
        assert rep.problems == ["stored chunk (events up to seq 5) is truncated or its index section failed its "
                                "CRC-32 check (thread t, seq 5)"]  # the byte in the middle is the index section's
        assert (rep.threads, rep.events) == (1, 5)  # the sound chunk and the row after the damaged one


def test_verify_loads_a_dictionary_its_store_had_not_seen_to_check_chunks(tmp_path: Path) -> None:
    """A Store opened before another trained a dictionary verifies the chunks compressed with it."""
    path = tmp_path / "s"
    with Store(path, auto_dictionary=0) as w:
        for i in range(20):
            w.append(f"t{i}", [started(f"t{i}"), *_turn(i)])
    early = Store(path, auto_dictionary=0)
    try:
        with Store(path, auto_dictionary=0) as w:
            assert w.train_dictionary() == 1
            w.append("z", [started("z"), *_turn(99)])
        assert not early.codec.has_dictionary(1)
        rep = verify_store(early)
        assert (rep.problems, rep.threads, rep.events) == ([], 21, 21 * 5)
        assert early.codec.has_dictionary(1)
    finally:
        early.close()


def test_a_body_that_does_not_decode_is_named_as_reads_name_it(tmp_path: Path) -> None:
    """A body its CRC accepts (rewritten with it) but no decoder does: verify reports it with the
    thread and seq, in the words a read raises, and checks the event's index entries on."""
    import zlib

    from tplog.backends.lmdb.keys import event_key
    from tplog.errors import CorruptionError

    tid = str(uuid.uuid4())
    with Store(tmp_path / "s") as s:
        s.append(tid, [start(tid), user("one"), user("two")])
        key = event_key(tkey(tid), 2)

        def garble(txn: Any) -> None:
            v = bytes(txn.get("events", key))
            assert v[0] == 3 and v[1] == 0  # format 3, stored raw
            end = 12 + int.from_bytes(v[10:12], "big")
            body = b"\xc1" + v[end + 1:-4]  # 0xc1: a byte msgpack never uses
            txn.put("events", key, v[:end] + body + zlib.crc32(key, zlib.crc32(body)).to_bytes(4, "big"))

        s.backend.engine.run_write(garble)
        with pytest.raises(CorruptionError) as exc:
            s.read(tid)
        assert str(exc.value).endswith(f"(thread {tid}, seq 2)")
        rep = verify_store(s, projections=False)
        assert (rep.problems, rep.events) == ([str(exc.value)], 3)


def test_two_events_at_one_position_are_out_of_order(tmp_path: Path) -> None:
    from tplog.backends.lmdb.keys import event_key, u64

    tid = str(uuid.uuid4())
    with Store(tmp_path / "s") as s:
        s.append(tid, [start(tid), user("one"), user("two")])
        eid = s.read(tid)[2].event_id
        k3 = event_key(tkey(tid), 3)
        # seq 3 claims position 2
        s.backend.engine.run_write(lambda txn: txn.put("eventids", eid.encode(), k3 + u64(2)))
        assert _problems(s) == [f"thread {tid}, seq 3: global position 2 does not name it",
                                f"thread {tid}, seq 3: position 2 not after 2"]


def test_a_blob_nothing_references_and_a_blob_after_a_deletion(tmp_path: Path) -> None:
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    with Store(tmp_path / "s") as s:
        s.append(a, [start(a), user("x" * 300_000)])
        s.append(b, [start(b), user("y" * 300_000)])
        s.delete_thread(a)  # its blob goes with its last reference
        rep = verify_store(s)
        assert (rep.problems, rep.blobs) == ([], 1)
        with s.backend.engine.read() as txn:
            [(sha, blob)] = [(bytes(k), bytes(v)) for k, v in txn.range("blobs")]
        orphan = b"\x01" * len(sha)
        s.backend.engine.run_write(lambda txn: txn.put("blobs", orphan, blob))  # refcount 1, no event refers to it
        rep = verify_store(s, projections=False)
        assert (rep.problems, rep.blobs) == ([f"blob {orphan.hex()}: refcount 1, referenced 0"], 2)


def test_every_stale_projection_is_named(tmp_path: Path) -> None:
    from tplog.backends.lmdb import projections as proj

    tid = str(uuid.uuid4())
    with Store(tmp_path / "s") as s:
        s.append(tid, [start(tid), user("one")])

        def stale(txn: Any) -> None:
            for name in ("links", "state"):
                proj.write_info(txn, name, proj.ProjectionInfo(proj.VERSIONS[name], 1, "stale"))

        s.backend.engine.run_write(stale)
        assert _problems(s, projections=True) == [
            f"projection {n!r} is stale: run `tplog rebuild {s.path} --projection {n}`" for n in ("links", "state")]


def test_verify_in_the_middle_of_a_rebuild_skips_that_projection_and_says_why(tmp_path: Path) -> None:
    from test_rebuild import populate

    from tplog.backends.lmdb.rebuild import rebuild

    with Store(tmp_path / "s") as s:
        populate(s, 12)
        seen: list[Any] = []

        def progress(done: int, total: int) -> None:
            if not seen:
                seen.append(verify_store(s))

        rebuild(s.backend.engine, s.codec, ["links"], chunk=7, progress=progress)
        rep = seen[0]
        assert rep.problems == [] and len(rep.skipped) == 1
        assert rep.skipped[0].startswith("projection 'links' not compared with a rebuild: a rebuild of projection "
                                         f"'links' is already running (process {os.getpid()}, started ")
        assert verify_store(s).skipped == []
