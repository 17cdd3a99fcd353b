"""The LMDB backend's read paths (tplog/backends/lmdb/reads.py) where its surviving mutants
showed them untested (tests/MUTANTS.md): waits that must end (a timeout, an append by
another store on the same file), reads in a scope reading that scope's thread, ``items``
(id-only folds) against the reference backend and on values written before format 3, and
every read naming a damaged value by its thread and seq.

Reads of whole events and of the bodies ``items`` needs (tplog/backends/lmdb/reads.py
`thread_events`/`_events_of` and `items`; written for their surviving mutants, tests/MUTANTS.md):
``thread_events``' ``after`` (inside the thread, past its version), its error for an unknown
thread, a blob-stored body, a damaged single row named by thread and seq; ``items`` of a value
written before format 3 whose turn-boundary body is a shared blob, is missing its blob, or
does not decode. Real LMDB files; the older values are golden format-2 values, rewritten with
valid CRCs.

``incoming``'s arguments and its pages in a scope, and ``links`` of a single-row LinkAdded
whose body is a shared blob, is missing its blob, or does not decode (tplog/backends/lmdb/reads.py
`incoming`, `links`; written for their surviving mutants, tests/MUTANTS.md). Real LMDB files.
"""

from __future__ import annotations

import hashlib
import struct
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import pytest
from conftest import ToyStore as Store
from conftest import agent_start, completed, link, response, spawn_message, started, user

from tplog import InvalidInputError, NotFoundError
from tplog.backends.lmdb.keys import event_key, tkey
from tplog.errors import CorruptionError
from tplog.limits import Limits


def _in_thread(fn: Any, limit: float = 20.0) -> tuple[Any, float]:
    """``fn()``'s result and how long it took, run in a thread given ``limit`` seconds
    (a wait that never ends fails the test instead of hanging it)."""
    out: list[Any] = []
    t0 = time.monotonic()
    th = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    th.start()
    th.join(limit)
    assert not th.is_alive(), f"still waiting after {limit} s"
    assert out, "the wait raised"
    return out[0], time.monotonic() - t0


# --------------------------------------------------------------------------- waits


def test_a_wait_with_a_timeout_and_no_append_returns_the_last_position(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        s.append("t", [started("t"), user()])
        assert s.last_position == 2
        got, took = _in_thread(lambda: s.wait_for_position(3, timeout=0.3))
        assert got == 2 and 0.25 <= took < 15
        got, took = _in_thread(lambda: s.backend.wait((2,), 0.3))
        assert got == (2,) and 0.25 <= took < 15


def test_a_wait_for_a_position_already_held_returns_at_once_without_a_timeout(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        s.append("t", [started("t"), user()])
        assert _in_thread(lambda: s.wait_for_position(2))[0] == 2
        assert _in_thread(lambda: s.wait_for_position(1, timeout=None))[0] == 2
        assert _in_thread(lambda: s.backend.wait((1,)))[0] == (2,)


@pytest.mark.parametrize("timeout", [None, 60.0])
def test_a_wait_sees_an_append_by_another_store_on_the_same_file(tmp_path: Path, timeout: float | None) -> None:
    """Another store (as another process would) does not wake this one's waiters: the wait
    polls, with or without a timeout, and returns the new position long before the timeout."""
    path = tmp_path / "s"
    with Store(path) as waiter, Store(path) as writer:
        writer.append("t", [started("t")])
        assert waiter.last_position == 1

        def later() -> None:
            time.sleep(0.3)
            writer.append("t", [user()])

        threading.Thread(target=later, daemon=True).start()
        got, took = _in_thread(lambda: waiter.wait_for_position(2, timeout=timeout))
        assert got == 2 and took < 20


def test_a_backend_wait_wakes_at_the_next_position_not_the_one_after(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        s.append("t", [started("t")])

        def later() -> None:
            time.sleep(0.3)
            s.append("t", [user()])

        threading.Thread(target=later, daemon=True).start()
        got, took = _in_thread(lambda: s.backend.wait((1,), 30.0), limit=40)
        assert got == (2,) and took < 20


# --------------------------------------------------------------------------- scopes


def _scoped_pair(path: Path) -> Store:
    """Thread ``p`` twice: unscoped (no spawn, one turn) and in scope ``a`` (a spawn, two turns)."""
    s = Store(path)
    s.append("p", [started("p"), user("plain"), agent_start(), response("r"), completed()])
    a = s.scoped("a")
    a.append("p", [started("p"), user("scoped " * 20), agent_start(), spawn_message("kid"), response("r " * 40),
                   completed(), user("again"), agent_start(), link("x"), completed()])
    return s


def test_reads_in_a_scope_read_that_scopes_thread(tmp_path: Path) -> None:
    s = _scoped_pair(tmp_path / "s")
    try:
        a = s.scoped("a")
        assert [seq for seq, _, _ in s.backend.iter_thread_values("p", scope="a")] == list(range(1, 11))
        assert [seq for seq, _, _ in s.backend.iter_thread_values("p")] == list(range(1, 6))
        assert [it.seq for it in s.backend.items("p", scope="a")] == list(range(1, 11))
        assert [it.seq for it in s.backend.items("p")] == list(range(1, 6))
        assert s.backend.has_spawned("p", scope="a") is True
        assert s.backend.has_spawned("p") is False
        # a fork in the scope inherits the spawn its parent's prefix holds
        a.fork("p", 6, new_thread_id="fp")
        assert a.children("fp") == ["kid"]
        s.fork("p", 5, new_thread_id="fq")
        assert s.children("fq") == []
    finally:
        s.close()


# --------------------------------------------------------------------------- items


def _conversation(stores: list[Store]) -> None:
    from test_chunks import _call  # a tool call (a fact an id-only fold reads)

    for s in stores:
        s.append("t", [started("t"), user("q " * 30), agent_start(), _call("c1"), response("r " * 60), link("u"),
                       completed()], event_ids=[f"a{i}" for i in range(7)])
        s.append("t", [user("open"), agent_start(), _call("c2")], event_ids=["b0", "b1", "b2"])


def _want_items(s: Store, tid: str) -> list[Any]:
    """What ``items`` must hold (its docstring): per event its seq, kind and header facts, and
    the header's ``turn`` facts, else the event itself for the kinds an id-only fold reads
    (links, and turn boundaries written before format 3), else nothing."""
    from tplog.backends.lmdb.projections import BODY_KINDS
    from tplog.events import KIND_CODE
    from tplog.projections.fold import Item

    headers = {seq: hdr for seq, hdr, _ in s.backend.iter_thread_values(tid)}
    out = []
    for e in s.read(tid):
        kind, hdr = KIND_CODE[type(e.event)], headers[e.seq]
        assert hdr.kind == kind
        out.append(Item(e.seq, kind, hdr.facts, hdr.turn if hdr.turn is not None
                        else e.event if kind in BODY_KINDS else None))
    return out


def test_items_hold_what_the_id_only_folds_read_for_chunks_and_single_rows(tmp_path: Path) -> None:
    from tplog.projections.fold import state_of

    with Store(tmp_path / "s") as lm, Store("memory:") as mem:
        _conversation([lm, mem])
        got = lm.backend.items("t")
        assert got == _want_items(lm, "t")
        assert state_of(got) == state_of(mem.backend.items("t"))
        assert sum(it.facts is not None for it in got) >= 2  # the two calls
        assert sum(it.event is not None for it in got) >= 4  # turn facts and the link
        with pytest.raises(NotFoundError, match=r"^thread nope does not exist$"):
            lm.backend.items("nope")


def test_items_of_values_written_before_format_3_read_the_bodies_they_need(tmp_path: Path) -> None:
    from test_golden import FORMATS, GOLDEN_SETS, _plant

    for version in [v for v in FORMATS if v < 3]:
        records, expected = GOLDEN_SETS[version]
        pairs = [(r, e) for r, e in zip(records, expected["events"], strict=True) if e["kind"] != "thread_deleted"]
        tid = expected["thread_id"]
        with Store(tmp_path / f"v{version}") as s:
            _plant(s, tid, pairs)
            got = s.backend.items(tid)
            assert got == _want_items(s, tid), version
            assert sum(it.event is not None for it in got) >= 3, version  # turn boundaries' bodies


@pytest.mark.parametrize("part", ["header", "body"])
def test_items_and_links_name_a_damaged_single_row_by_thread_and_seq(tmp_path: Path, part: str) -> None:
    """A single row (an open turn's) damaged in its header or its body: ``items`` reads the
    header of every row; ``links`` the body of a LinkAdded."""
    with Store(tmp_path / "s") as s:
        s.append("t", [started("t"), user("q"), agent_start(), response("r"), completed()])  # a chunk
        s.append("t", [user("open"), link("u")])  # seqs 6, 7: single rows
        key = event_key(tkey("t"), 7)

        def damage(txn: Any) -> None:
            v = bytearray(txn.get("events", key))
            v[14 if part == "header" else len(v) - 6] ^= 0x01
            txn.put("events", key, bytes(v))

        s.backend.engine.run_write(damage)
        calls = [lambda: s.links("t"), lambda: list(s.backend.iter_thread_values("t"))]
        if part == "header":
            calls.append(lambda: s.backend.items("t"))
        for call in calls:
            with pytest.raises(CorruptionError) as exc:
                call()
            assert (exc.value.thread_id, exc.value.seq) == ("t", 7)


def test_items_name_a_damaged_body_of_a_value_written_before_format_3(tmp_path: Path) -> None:
    """Before format 3 a turn boundary's header had no ``turn`` facts: ``items`` reads (and
    verifies) its body, and names the thread and seq of one whose body CRC fails."""
    from test_golden import GOLDEN_SETS, _plant

    from tplog.backends.lmdb.projections import BODY_KINDS

    records, expected = GOLDEN_SETS[2]
    pairs = [(r, e) for r, e in zip(records, expected["events"], strict=True) if e["kind"] != "thread_deleted"]
    tid = expected["thread_id"]
    with Store(tmp_path / "s") as s:
        _plant(s, tid, pairs)
        seq, key = next((seq, event_key(tkey(tid), seq)) for seq, hdr, _ in s.backend.iter_thread_values(tid)
                        if hdr.kind in BODY_KINDS)

        def damage(txn: Any) -> None:
            v = bytearray(txn.get("events", key))
            v[-6] ^= 0x01  # in the body: the header's CRC still holds
            txn.put("events", key, bytes(v))

        s.backend.engine.run_write(damage)
        with pytest.raises(CorruptionError) as exc:
            s.backend.items(tid)
        assert (exc.value.thread_id, exc.value.seq) == (tid, seq)


def test_the_state_of_a_scoped_thread_is_its_scopes(tmp_path: Path) -> None:
    from test_chunks import _call

    with Store(tmp_path / "s") as s:
        a = s.scoped("a")
        a.append("p", [started("p"), user("q"), agent_start(), _call("c1")])
        assert [c.tool_call_id for c in a.pending("p").pending] == ["c1"]
        assert s.backend.thread_state("p", scope="a") is not None
        with pytest.raises(NotFoundError, match=r"^thread p does not exist$"):
            s.backend.thread_state("p")


# --------------------------------------------------------------------------- listings


def test_thread_pages_limits_and_cursors(tmp_path: Path) -> None:
    from tplog.errors import InvalidInputError

    with Store(tmp_path / "s") as s:
        for i in range(52):
            s.append(f"t{i:02}", [started(f"t{i:02}")])
        b = s.backend
        first = b.threads()  # 50 by default
        assert len(first.threads) == 50 and first.cursor is not None
        rest = b.threads(after=first.cursor)
        assert len(rest.threads) == 2 and rest.cursor is None
        assert {h.thread_id for h in first.threads + rest.threads} == {f"t{i:02}" for i in range(52)}
        one = b.threads(limit=1)
        assert len(one.threads) == 1 and one.threads[0] == first.threads[0]
        for bad in (0, -1):
            with pytest.raises(InvalidInputError, match=r"^limit must be > 0$"):
                b.threads(limit=bad)
        with pytest.raises(InvalidInputError, match=r"^cursor 'zz' is not one this store returned$"):
            b.threads(after="zz")


def test_a_deleted_thread_in_the_listing_does_not_end_it(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        for tid in ("a", "b", "c"):
            s.append(tid, [started(tid)])
        s.delete_thread("b")  # now the newest: the listing meets it first
        assert [h.thread_id for h in s.threads().threads] == ["c", "a"]
        assert [h.thread_id for h in s.threads(include_deleted=True).threads] == ["b", "c", "a"]


def test_a_listing_before_the_finder_index_is_built_scans_every_thread(tmp_path: Path) -> None:
    """A store without the finder index's "done" mark (one written before it existed, until
    it is built) lists by the ``updated`` index: filters by status and agent find every thread."""
    from tplog.backends.lmdb import finder

    with Store(tmp_path / "s") as s:
        for tid in ("a", "b"):
            s.append(tid, [started(tid), user(), agent_start("a1"), response("r", "a1")])
        want = {"a", "b"}
        assert {h.thread_id for h in s.threads(agent="a1").threads} == want

        def unbuilt(txn: Any) -> None:
            assert txn.delete("meta", finder.DONE)
            for k, _ in list(txn.range("finder")):
                txn.delete("finder", k)

        s.backend.engine.run_write(unbuilt)
        assert {h.thread_id for h in s.threads(agent="a1").threads} == want
        assert {h.thread_id for h in s.threads(activity="active").threads} == want


# --------------------------------------------------------------------------- descendants


def test_descendants_without_a_depth_limit_end_and_list_each_thread_once(tmp_path: Path) -> None:
    """A diamond (d spawned by b and by c) and a cycle back to the root."""
    with Store(tmp_path / "s") as s:
        s.append("a", [started("a"), user(), agent_start(), spawn_message("b"), spawn_message("c"), completed()])
        s.append("b", [started("b"), user(), agent_start(), spawn_message("d"), spawn_message("a"), completed()])
        s.append("c", [started("c"), user(), agent_start(), spawn_message("d"), completed()])
        s.append("d", [started("d")])
        got = _in_thread(lambda: s.descendants("a"))[0]
        assert sorted(got) == [("b", 1), ("c", 1), ("d", 2)]
        assert sorted(s.descendants("a", max_depth=1)) == [("b", 1), ("c", 1)]
        assert _in_thread(lambda: s.descendants("d"))[0] == []


def test_link_reads_on_a_stale_links_index_name_the_store_and_the_fix(tmp_path: Path) -> None:
    from tplog.backends.lmdb import projections as proj
    from tplog.errors import RebuildRequiredError

    with Store(tmp_path / "s") as s:
        s.append("p", [started("p"), user(), agent_start(), spawn_message("kid"), completed()])
        s.backend.engine.run_write(lambda txn: proj.write_info(txn, "links", proj.ProjectionInfo(
            proj.VERSIONS["links"], 1, "stale")))
        for call in (lambda: s.backend.has_spawned("p"), lambda: s.descendants("p"), lambda: s.children("p"),
                     lambda: s.incoming("kid")):
            with pytest.raises(RebuildRequiredError) as exc:
                call()
            assert str(exc.value).startswith(f"{s.path}: the 'links' projection is not current")
            assert f"run `tplog rebuild {s.path} --projection links`" in str(exc.value)


# --------------------------------------------------------------------------- the log and positions


def test_read_all_in_scopes_lists_each_scopes_events_with_their_positions(tmp_path: Path) -> None:
    """Threads of two scopes and unscoped ones interleaved in the log: each store's
    ``read_all`` lists its own, with the log positions ``read`` gives them (chunks and single rows)."""
    with Store(tmp_path / "s") as s:
        a = s.scoped("a")
        s.append("t1", [started("t1"), user("q " * 30), agent_start(), response("r " * 60), completed()])
        a.append("p", [started("p"), user("q " * 30), agent_start(), response("r " * 60), completed()])
        a.append("p", [user("open"), link("x")])
        s.append("t2", [started("t2"), user("open")])
        plain, scoped = s.read_all(), a.read_all()
        assert [(e.thread_id, e.seq) for e in plain] == [("t1", i) for i in range(1, 6)] + [("t2", 1), ("t2", 2)]
        assert [(e.thread_id, e.seq) for e in scoped] == [("p", i) for i in range(1, 8)]
        assert [e.position for e in plain] == [1, 2, 3, 4, 5, 13, 14]
        assert [e.position for e in scoped] == list(range(6, 13))
        assert [e.position for e in a.read("p")] == list(range(6, 13))  # a chunk, then single rows
        assert [lk.thread_id for lk in a.links("p")] == ["x"]
        with pytest.raises(NotFoundError):
            s.links("p")
        from tplog.errors import InvalidInputError

        with pytest.raises(InvalidInputError, match=r"^log 1 does not exist: this store keeps 1 log$"):
            s.backend.read_log(1)


def test_an_event_whose_id_index_entry_is_lost_reads_at_position_0(tmp_path: Path) -> None:
    """The position comes from the event-id index; without its entry (damage ``verify`` reports)
    the event still reads, at position 0, in a chunk as in a single row."""
    with Store(tmp_path / "s") as s:
        s.append("t", [started("t"), user("q " * 30), agent_start(), response("r " * 60), completed()])  # chunk
        s.append("t", [user("open")])  # seq 6, a single row
        ids = {e.seq: e.event_id for e in s.read("t")}

        def lose(txn: Any) -> None:
            for seq in (2, 6):
                assert txn.delete("eventids", ids[seq].encode())

        s.backend.engine.run_write(lose)
        assert [e.position for e in s.read("t")] == [1, 0, 3, 4, 5, 0]


# --------------------------------------------------------------------------- damage named, the backend's defaults


def _single_rows(path: Path) -> None:
    with Store(path) as s:
        s.append("t", [started("t"), user("q"), agent_start(), response("r"), completed()])  # a chunk
        s.append("t", [user("open"), link("u")])  # seqs 6, 7: single rows


@pytest.mark.parametrize("part", ["body crc", "header bytes"])
def test_every_read_names_a_damaged_single_row_by_thread_and_seq(tmp_path: Path, part: str) -> None:
    """``header bytes``: a header its CRC accepts (rewritten with it) but no decoder does."""
    import zlib

    from tplog.codec import HEADER_CRC_SEED

    path = tmp_path / "s"
    _single_rows(path)
    key = event_key(tkey("t"), 7)
    with Store(path) as s:
        def damage(txn: Any) -> None:
            v = bytearray(txn.get("events", key))
            if part == "body crc":
                v[-6] ^= 0x01
            else:
                hl = int.from_bytes(v[10:12], "big")
                v[12:12 + hl] = b"\xc1" * hl
                crc = zlib.crc32(key, zlib.crc32(bytes(v[12:12 + hl]), zlib.crc32(v[10:12], HEADER_CRC_SEED[3])))
                v[6:10] = crc.to_bytes(4, "big")
            txn.put("events", key, bytes(v))

        s.backend.engine.run_write(damage)
        calls = {"read": lambda: s.read("t"), "backward": lambda: s.read("t", direction="backward"),
                 "read_all": lambda: s.read_all(), "links": lambda: s.links("t"),
                 "iter_thread_values": lambda: list(s.backend.iter_thread_values("t"))}
        if part == "header bytes":
            calls["items"] = lambda: s.backend.items("t")
        for how, call in calls.items():
            with pytest.raises(CorruptionError) as exc:
                call()
            assert (exc.value.thread_id, exc.value.seq) == ("t", 7), how


def test_an_index_body_that_does_not_decode_is_named_by_id_only_reads(tmp_path: Path) -> None:
    """A chunk whose CRCs hold but whose LinkAdded body (in the index section) is no event."""
    from test_chunks_boundaries import _one_chunk, _sections, _v5, _write

    path = tmp_path / "s"
    key, value = _one_chunk(path)  # seqs 1..8, the link at 7
    with Store(path) as s:
        headers, bodies = _sections(s.codec, value)
    bodies[6] = b"\x80"  # an empty map: not a LinkAdded
    arr = bytes([0x90 | len(headers)])
    _write(path, {key: _v5(key, 1, b"".join([b"\x92", arr, *headers, arr, *bodies]), b"\x90")})
    with Store(path) as s:
        for how, call in {"items": lambda: s.backend.items("t"), "links": lambda: s.links("t")}.items():
            with pytest.raises(CorruptionError) as exc:
                call()
            assert (exc.value.thread_id, exc.value.seq) == ("t", 7), how


def test_the_backends_read_thread_defaults_to_forward_and_names_an_unknown_thread(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        s.append("t", [started("t"), user("q"), agent_start(), response("r"), completed(), user("open")])
        assert [e.seq for e in s.backend.read_thread("t")] == [1, 2, 3, 4, 5, 6]
        with pytest.raises(NotFoundError, match=r"^thread nope does not exist$"):
            s.backend.read_thread("nope")


def test_a_scoped_backward_read_gives_the_log_positions(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        s.append("t", [started("t")])
        a = s.scoped("a")
        a.append("p", [started("p"), user("q " * 30), agent_start(), response("r " * 60), completed()])
        a.append("p", [user("open")])
        assert [(e.seq, e.position) for e in a.read("p", direction="backward")] == [
            (6, 7), (5, 6), (4, 5), (3, 4), (2, 3), (1, 2)]
        assert [(e.seq, e.position) for e in a.read("p", after=4, direction="backward")] == [(3, 4), (2, 3), (1, 2)]


# --------------------------------------------------------------------------- whole events and the bodies items needs


EVENTS = [started("t"), user("q"), agent_start(), response("r"), completed(), user("open"), link("u")]


def _store(path: Path, **options: Any) -> Store:
    s = Store(path, **options)
    s.append("t", EVENTS[:5])  # a chunk
    s.append("t", EVENTS[5:])  # seqs 6, 7: single rows
    return s


@pytest.mark.parametrize("after", [0, 3, 5, 6, 7, 8, 100])
def test_thread_events_after_a_seq_of_the_thread_or_past_its_version(tmp_path: Path, after: int) -> None:
    """Past the thread's version the caller's fold is of another life of the id: every event."""
    with _store(tmp_path / "s") as s:
        head, events = s.backend.thread_events("t", after=after)
        assert head.version == 7
        assert events == (EVENTS[after:] if after <= 7 else EVENTS)


def test_thread_events_of_an_unknown_thread_names_it(tmp_path: Path) -> None:
    with _store(tmp_path / "s") as s, pytest.raises(NotFoundError) as exc:
        s.backend.thread_events("nope")
    assert str(exc.value) == "thread nope does not exist"


def test_thread_events_read_a_body_stored_as_a_shared_blob(tmp_path: Path) -> None:
    big = response("long answer " * 600)  # over the blob threshold: a single row with a blob reference
    with Store(tmp_path / "s", limits=Limits(blob_threshold=4096)) as s:
        s.append("t", [started("t"), user("q"), agent_start(), big])
        assert s.stats()["tables"]["blobs"]["entries"] == 1
        assert s.backend.thread_events("t")[1] == [started("t"), user("q"), agent_start(), big]
        assert s.backend.thread_events("t", after=3)[1] == [big]


def test_thread_events_name_a_damaged_single_row_by_thread_and_seq(tmp_path: Path) -> None:
    """A body CRC that fails (``thread_events`` decodes bodies, never a single row's header)."""
    path = tmp_path / "s"
    _store(path).close()
    key = event_key(tkey("t"), 7)
    with Store(path) as s:
        def damage(txn: Any) -> None:
            v = bytearray(txn.get("events", key))
            v[-6] ^= 0x01
            txn.put("events", key, bytes(v))

        s.backend.engine.run_write(damage)
        for after in (0, 6):
            with pytest.raises(CorruptionError) as exc:
                s.backend.thread_events("t", after=after)
            assert (exc.value.thread_id, exc.value.seq) == ("t", 7)


# --------------------------------------------------------------------------- items of format-2 values


def _planted_v2(s: Store) -> tuple[str, int, bytes, bytes]:
    """The golden format-2 thread planted in ``s``; (thread id, seq, key, value) of its first
    agent-turn boundary, whose header has no ``turn``: ``items`` reads its body."""
    from test_golden import GOLDEN_SETS, _plant

    from tplog.backends.lmdb.projections import BODY_KINDS

    records, expected = GOLDEN_SETS[2]
    pairs = [(r, e) for r, e in zip(records, expected["events"], strict=True) if e["kind"] != "thread_deleted"]
    tid = expected["thread_id"]
    _plant(s, tid, pairs)
    seq = next(seq for seq, hdr, _ in s.backend.iter_thread_values(tid) if hdr.kind in BODY_KINDS and hdr.turn is None)
    key = event_key(tkey(tid), seq)
    with s.backend.engine.read() as txn:
        value = bytes(txn.get("events", key))
    assert value[0] == 2
    return tid, seq, key, value


def _with_body(key: bytes, value: bytes, flags: int, body: bytes) -> bytes:
    """``value`` (format 2) with another stored body and its CRC (the header and its CRC kept)."""
    end = 12 + int.from_bytes(value[10:12], "big")
    return (value[:1] + bytes([flags]) + (0).to_bytes(4, "big") + value[6:end] + body
            + zlib.crc32(key, zlib.crc32(body)).to_bytes(4, "big"))


def _move_body_to_blob(s: Store, key: bytes, value: bytes, *, keep_blob: bool) -> None:
    """Rewrite the format-2 value at ``key`` to reference its body as a shared blob (stored only if
    ``keep_blob``: else the reference dangles)."""
    data = bytes(s.codec.body_bytes(value))
    sha = hashlib.sha256(data).digest()
    stored = struct.pack(">IBII", 1, 0, 0, zlib.crc32(sha, zlib.crc32(data))) + data

    def to_blob(txn: Any) -> None:
        txn.put("events", key, _with_body(key, value, 2, sha))
        if keep_blob:
            txn.put("blobs", sha, stored)

    s.backend.engine.run_write(to_blob)


@pytest.mark.parametrize("blob", ["present", "missing"])
def test_items_read_a_format_2_turn_boundary_whose_body_is_a_shared_blob(tmp_path: Path, blob: str) -> None:
    with Store(tmp_path / "s") as s:
        tid, seq, key, value = _planted_v2(s)
        want = s.backend.items(tid)
        _move_body_to_blob(s, key, value, keep_blob=blob == "present")
        if blob == "present":
            got = s.backend.items(tid)
            assert got == want
            assert next(it for it in got if it.seq == seq).event is not None
        else:
            with pytest.raises(CorruptionError) as exc:
                s.backend.items(tid)
            assert (str(exc.value), exc.value.thread_id, exc.value.seq) == (
                f"the event's shared blob is missing (thread {tid}, seq {seq})", tid, seq)


def test_items_name_a_format_2_turn_boundary_whose_body_does_not_decode(tmp_path: Path) -> None:
    """Its CRCs hold (the body's rewritten with it), but the body is no msgpack."""
    with Store(tmp_path / "s") as s:
        tid, seq, key, value = _planted_v2(s)
        s.backend.engine.run_write(lambda txn: txn.put("events", key, _with_body(key, value, 0, b"\xc1")))
        with pytest.raises(CorruptionError) as exc:
            s.backend.items(tid)
        assert (exc.value.thread_id, exc.value.seq) == (tid, seq)


# ----------------------------------------------------------------- incoming in a scope, links of a single-row LinkAdded


TARGET = "00000000-0000-4000-8000-0000000000aa"
SOURCES = [f"{i:08x}-0000-4000-8000-{i:012x}" for i in (0x11, 0x52, 0x93, 0xd4, 0x35, 0x76, 0xb7, 0xf8)]


def _linked(s: Store) -> None:
    s.append(TARGET, [started(TARGET)])
    for src in SOURCES:
        s.append(src, [started(src), link(TARGET), link(TARGET)])  # two links of one pair


@pytest.mark.parametrize("limit", [-1, True, 1.5])
def test_incoming_refuses_a_limit_that_is_no_count(tmp_path: Path, limit: Any) -> None:
    with Store(tmp_path / "s") as s:
        _linked(s)
        for call in (s.incoming, s.backend.incoming):  # the facade checks too: the backend's own check
            with pytest.raises(InvalidInputError) as exc:
                call(TARGET, limit=limit)
            assert str(exc.value) == f"limit must be None or an int ≥ 0, not {limit!r}"


@pytest.mark.parametrize("after", [("a",), ("a", "b", "c"), ["a", "referenced"], ("", "referenced"),
                                   ("a", ""), (1, "referenced")], ids=repr)
def test_incoming_refuses_an_after_that_is_no_pair_of_ids(tmp_path: Path, after: Any) -> None:
    with Store(tmp_path / "s") as s:
        _linked(s)
        for call in (s.incoming, s.backend.incoming):
            with pytest.raises(InvalidInputError) as exc:
                call(TARGET, after=after)
            assert str(exc.value) == f"after must be a (source_thread_id, relation) pair, not {after!r}"


def test_incoming_refuses_an_after_of_another_relation_than_asked(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        _linked(s)
        for call in (s.incoming, s.backend.incoming):
            with pytest.raises(InvalidInputError) as exc:
                call(TARGET, relation="spawned_from", after=(SOURCES[0], "referenced"))
            assert str(exc.value) == "after names relation 'referenced', but relation='spawned_from' was asked"


@pytest.mark.parametrize("scope", [None, "tenant-a", "tenant-b"])
def test_incoming_pages_in_a_scope_start_after_the_scopes_source_key(tmp_path: Path, scope: str | None) -> None:
    """A page after ``(source, relation)`` starts past that source's key in the scope: keyed
    without the scope it would start elsewhere (the keys sort in another order), repeating or
    skipping sources."""
    with Store(tmp_path / "s") as root:
        s = root if scope is None else root.scoped(scope)
        _linked(s)
        everything = s.incoming(TARGET)
        assert len(everything) == 2 * len(SOURCES)
        order = [src for src, _ in everything[::2]]
        assert order == sorted(SOURCES, key=lambda t: tkey(t, scope))
        pages: list[tuple[str, str]] = []
        after = None
        for _ in range(len(SOURCES) + 1):  # bounded: a page that starts too early would repeat forever
            page = s.incoming(TARGET, limit=1, after=after)
            if not page:
                break
            assert len(page) == 2 and page[0] == page[1]  # a page never ends between two links of a pair
            pages += page
            after = page[-1]
        assert pages == everything


# --------------------------------------------------------------------------- links of a single row


def _single_link(s: Store) -> tuple[bytes, bytes]:
    s.append("t", [started("t"), user("q"), agent_start(), response("r"), completed()])  # a chunk
    s.append("t", [user("open"), link("u")])  # seqs 6, 7: single rows
    key = event_key(tkey("t"), 7)
    with s.backend.engine.read() as txn:
        return key, bytes(txn.get("events", key))


@pytest.mark.parametrize("blob", ["present", "missing"])
def test_links_read_a_link_whose_body_is_a_shared_blob(tmp_path: Path, blob: str) -> None:
    with Store(tmp_path / "s") as s:
        key, value = _single_link(s)
        want = s.links("t")
        assert [lk.thread_id for lk in want] == ["u"]
        _move_body_to_blob(s, key, value, keep_blob=blob == "present")
        if blob == "present":
            assert s.links("t") == want
        else:
            with pytest.raises(CorruptionError) as exc:
                s.links("t")
            assert (str(exc.value), exc.value.thread_id, exc.value.seq) == (
                "the event's shared blob is missing (thread t, seq 7)", "t", 7)


def test_links_name_a_link_whose_body_does_not_decode(tmp_path: Path) -> None:
    """Its CRCs hold (the body's rewritten with it), but the body is no msgpack."""
    with Store(tmp_path / "s") as s:
        key, value = _single_link(s)
        s.backend.engine.run_write(lambda txn: txn.put("events", key, _with_body(key, value, 0, b"\xc1")))
        with pytest.raises(CorruptionError) as exc:
            s.links("t")
        assert (exc.value.thread_id, exc.value.seq) == ("t", 7)


# --------------------------------------------------------------------------- children, a pair's neighbour, closed


def test_a_page_of_incoming_takes_the_rest_of_its_pair_and_no_neighbours_links(tmp_path: Path) -> None:
    """Two sources whose keys differ in their last byte only: the page of the first pair ends
    where that pair's links do (the pair is the key less its 8-byte seq)."""
    a, b = "00000000-0000-4000-8000-0000000000a1", "00000000-0000-4000-8000-0000000000a2"
    with Store(tmp_path / "s") as s:
        s.append(TARGET, [started(TARGET)])
        for src in (a, b):
            s.append(src, [started(src), link(TARGET), link(TARGET), link(TARGET)])
        assert tkey(a)[:-1] == tkey(b)[:-1]
        assert s.incoming(TARGET, limit=1) == [(a, "referenced")] * 3
        assert s.incoming(TARGET, limit=1, after=(a, "referenced")) == [(b, "referenced")] * 3


@pytest.mark.parametrize("limit", [-1, True])
def test_the_backends_children_refuses_a_limit_that_is_no_count(tmp_path: Path, limit: Any) -> None:
    with Store(tmp_path / "s") as s:
        _linked(s)
        with pytest.raises(InvalidInputError) as exc:
            s.backend.children(TARGET, limit=limit)
        assert str(exc.value) == f"limit must be None or an int ≥ 0, not {limit!r}"


@pytest.mark.parametrize("scope", [None, "tenant-a"])
def test_children_pages_in_a_scope_start_after_the_scopes_child_key(tmp_path: Path, scope: str | None) -> None:
    from conftest import spawn_message

    with Store(tmp_path / "s") as root:
        s = root if scope is None else root.scoped(scope)
        s.append(TARGET, [started(TARGET), user(), agent_start(), *[spawn_message(c) for c in SOURCES], completed()])
        everything = s.children(TARGET)
        assert everything == sorted(SOURCES, key=lambda t: tkey(t, scope))
        pages: list[str] = []
        after = None
        for _ in range(len(SOURCES) + 1):  # bounded: a page that starts too early would repeat forever
            page = s.children(TARGET, limit=3, after=after)
            if not page:
                break
            pages += page
            after = page[-1]
        assert pages == everything


def test_the_backends_link_reads_refuse_a_closed_store_naming_it(tmp_path: Path) -> None:
    from tplog.errors import StoreClosedError

    s = Store(tmp_path / "s")
    _linked(s)
    s.close()
    for call in (lambda: s.backend.incoming(TARGET), lambda: s.backend.children(TARGET),
                 lambda: s.backend.thread_events(TARGET)):
        with pytest.raises(StoreClosedError) as exc:
            call()
        assert str(exc.value) == f"{s.path}: cannot use the store, as it has been closed"
