"""The LMDB backend's maintenance verbs (tplog/backends/lmdb/maintenance.py) where mutation
testing found them unpinned (tests/MUTANTS.md): what each refused deletion says (thread and
reason), ``tracking()`` of an empty store, of a projection an older tplog left behind and of a
store without projection info (opened read-only), ``backup`` compacting unless told not to,
deleting damaged, blob-holding and scoped threads, and ``stats()``'s keys and group-commit counts.

Dictionary training of the LMDB backend (tplog/backends/lmdb/maintenance.py) where
mutation testing found them unpinned (tests/MUTANTS.md): which bodies a dictionary is trained on
(the newest ``samples`` stored bodies of at most 64 KiB, blobs read through the transaction;
the background trainer takes 500), the background trainer a named daemon thread that adopts a
dictionary another handle trained meanwhile.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest
from backends.contract_helpers import encode, part, tombstone
from conftest import T, agent_start, completed, link, response, started, user
from conftest import ToyStore as Store
from test_dictionary import _events as dictionary_events

from tplog.backends.lmdb import LmdbRecorder, chunks
from tplog.backends.lmdb import projections as proj
from tplog.backends.lmdb.keys import eid_key, event_key, tkey
from tplog.codec import Codec
from tplog.errors import CorruptionError, HasForksError, InvalidInputError, NotFoundError, ThreadDeletedError


def test_each_refused_deletion_names_the_thread_and_why(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        s.append("p", [started("p"), user(), agent_start(), response(), completed()])
        with pytest.raises(NotFoundError) as nf:
            s.delete_thread("nope")
        assert str(nf.value) == "thread nope does not exist"
        f = s.fork("p", 5, new_thread_id="f").thread_id
        with pytest.raises(HasForksError) as hf:
            s.delete_thread("p")
        assert str(hf.value) == ("thread p has live forks that read its events: ['f']; "
                                 "delete them first (Store.delete_thread(..., cascade=True))")
        assert hf.value.forks == [f]
        s.delete_thread("f")
        with pytest.raises(ThreadDeletedError) as td:
            s.delete_thread("f")
        assert str(td.value) == "thread f is already deleted"
        # the backend's own check of its tombstone (the facade always builds a ThreadDeleted)
        with pytest.raises(InvalidInputError) as bad:
            s.backend.delete_thread("p", encode([user()])[0]).result()
        assert str(bad.value) == "thread p: a deletion's tombstone must be a ThreadDeleted event"
        assert s.head("p").status == "active"


def test_tracking_of_an_empty_store_is_live_at_position_0(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        got = [(t.name, t.version, t.code_version, t.status, t.position) for t in s.backend.tracking()]
        assert got == [(n, proj.VERSIONS[n], proj.VERSIONS[n], "live", (0,)) for n in proj.PROJECTIONS]


def _events(s: Store, n: int) -> None:
    s.append("t", [started("t")])
    for _ in range(n - 1):
        s.append("t", [user()])


def test_tracking_of_a_projection_an_older_tplog_built_says_where_it_stopped(tmp_path: Path) -> None:
    """The state projection written by an older version up to position 5, 8 events since:
    reopened, it is stale, of its old version, at 5 (not the log's end); links stays live at 8."""
    path = tmp_path / "s"
    with Store(path) as s:
        _events(s, 8)
        s.backend.engine.run_write(lambda txn: proj.write_info(
            txn, proj.STATE, proj.ProjectionInfo(proj.VERSIONS[proj.STATE] - 1, 5, "live")))
    with Store(path) as s:
        got = {t.name: (t.version, t.status, t.position) for t in s.backend.tracking()}
        assert got == {proj.STATE: (proj.VERSIONS[proj.STATE] - 1, "stale", (5,)),
                       proj.LINKS: (proj.VERSIONS[proj.LINKS], "live", (8,))}


def test_tracking_of_a_store_without_projection_info_opened_read_only(tmp_path: Path) -> None:
    """A store whose ``meta`` has no projection rows (an older tplog's), opened read-only (so
    nothing writes them): each projection is stale, of no version, at position 0."""
    path = tmp_path / "s"
    with Store(path) as s:
        _events(s, 3)

        def drop(txn: object) -> None:
            for n in proj.PROJECTIONS:
                assert txn.delete("meta", proj.meta_key(n))  # type: ignore[attr-defined]

        s.backend.engine.run_write(drop)
    with Store(path, readonly=True) as s:
        got = [(t.name, t.version, t.status, t.position) for t in s.backend.tracking()]
        assert got == [(n, None, "stale", (0,)) for n in proj.PROJECTIONS]


def _size(d: Path) -> int:
    return sum(os.path.getsize(d / f) for f in os.listdir(d))


def test_backup_compacts_unless_told_not_to(tmp_path: Path) -> None:
    """After deleting most of the data, a compacting copy leaves the freed pages out; the
    backend's default is to compact (the facade passes it on)."""
    r = LmdbRecorder(tmp_path / "lmdb", auto_dictionary=0)
    try:
        from backends.contract_helpers import append

        append(r, part("keep", [started("keep")]))
        for i in range(4):
            tid = f"big{i}"
            append(r, part(tid, [started(tid), *[user(os.urandom(2000).hex()) for _ in range(40)]]))
            r.delete_thread(tid, tombstone()).result()
        r.backup(str(tmp_path / "default"))
        r.backup(str(tmp_path / "compact"), compact=True)
        r.backup(str(tmp_path / "plain"), compact=False)
    finally:
        r.close()
    default, compact, plain = (_size(tmp_path / d) for d in ("default", "compact", "plain"))
    assert compact < plain / 2, (compact, plain)
    assert default < plain / 2, (default, plain)
    for d in ("default", "compact", "plain"):
        with Store(tmp_path / d, readonly=True) as s:
            assert [h.thread_id for h in s.threads().threads] == ["keep"]


# --------------------------------------------------------------------------- deleting a damaged or large thread


def _flip_header(txn: Any, key: bytes) -> None:
    """A header its CRC accepts (rewritten with it) but no decoder does."""
    import zlib

    from tplog.codec import HEADER_CRC_SEED

    v = bytearray(txn.get("events", key))
    hl = int.from_bytes(v[10:12], "big")
    v[12:12 + hl] = b"\xc1" * hl
    crc = zlib.crc32(key, zlib.crc32(bytes(v[12:12 + hl]), zlib.crc32(v[10:12], HEADER_CRC_SEED[3])))
    v[6:10] = crc.to_bytes(4, "big")
    txn.put("events", key, bytes(v))


def _declaring(tid: str, target: str, **kw: Any) -> Any:
    from tplog.protocol import model as m

    return started(tid, relationships=m.ThreadRelationships(
        links=[m.ThreadLink(thread_id=target, relation="referenced")]), **kw)


def test_deleting_a_thread_with_a_damaged_row_names_its_thread_and_seq(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        s.append("t", [started("t"), user("q"), agent_start(), response("r"), completed()])  # a chunk
        s.append("t", [user("open"), link("u")])  # seqs 6, 7: single rows
        s.backend.engine.run_write(lambda txn: _flip_header(txn, event_key(tkey("t"), 7)))
        with pytest.raises(CorruptionError) as exc:
            s.delete_thread("t")
        assert (exc.value.thread_id, exc.value.seq) == ("t", 7)
        # a ThreadStarted declaring links (read for them) whose body fails its CRC
        s.append("d", [_declaring("d", "u")])

        def body(txn: Any) -> None:
            key = event_key(tkey("d"), 1)
            v = bytearray(txn.get("events", key))
            v[-6] ^= 0x01
            txn.put("events", key, bytes(v))

        s.backend.engine.run_write(body)
        with pytest.raises(CorruptionError) as exc:
            s.delete_thread("d")
        assert (exc.value.thread_id, exc.value.seq) == ("d", 1)
        # a LinkAdded (read for its link) whose body is a blob that fails its CRC
        from tplog.events import LinkAdded
        from tplog.protocol import model as m

        s.append("b", [started("b"), LinkAdded(link=m.ThreadLink(
            thread_id="v", relation="referenced", metadata={"pad": "x" * (300 << 10)}), at=T)])

        def blob(txn: Any) -> None:
            [(k, v)] = list(txn.range("blobs"))
            w = bytearray(v)
            w[-10] ^= 0x01
            txn.put("blobs", bytes(k), bytes(w))

        s.backend.engine.run_write(blob)
        with pytest.raises(CorruptionError) as exc:
            s.delete_thread("b")
        assert (exc.value.thread_id, exc.value.seq) == ("b", 2)
        assert s.head("t").status == s.head("d").status == s.head("b").status == "active"


def test_deleting_a_thread_with_a_damaged_chunk_names_the_thread(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        s.append("t", [started("t"), user("q"), agent_start(), response("r"), completed()])  # a chunk

        def damage(txn: Any) -> None:
            [(k, v)] = list(txn.range("events", tkey("t"), tkey("t") + b"\xff" * 8))
            w = bytearray(v)
            w[len(w) // 2] ^= 0x01
            txn.put("events", bytes(k), bytes(w))

        s.backend.engine.run_write(damage)
        with pytest.raises(CorruptionError) as exc:
            s.delete_thread("t")
        assert exc.value.thread_id == "t"
        assert "thread t" in str(exc.value)


def test_deleting_a_thread_whose_start_and_link_are_blobs_drops_their_links_and_blobs(tmp_path: Path) -> None:
    big = {"pad": "x" * (300 << 10)}  # over the blob threshold (256 KiB)
    with Store(tmp_path / "s") as s:
        s.append("t", [_declaring("t", "u", metadata=big), user("q"), link("v", "referenced")])
        s.append("t", [link("w", "referenced")])
        from tplog.events import LinkAdded
        from tplog.protocol import model as m

        s.append("t", [LinkAdded(link=m.ThreadLink(thread_id="v2", relation="referenced", metadata=big), at=T)])
        assert s.incoming("u") == [("t", "referenced")] and s.incoming("v2") == [("t", "referenced")]
        with s.backend.engine.read() as txn:
            assert len(list(txn.range("blobs"))) == 2
        s.delete_thread("t")
        with s.backend.engine.read() as txn:
            assert list(txn.range("blobs")) == []
            assert list(txn.range("links_in")) == []  # u, v, w and v2 are now unknown to the store
        assert s.verify().problems == []


def test_deleting_a_scoped_thread_removes_its_event_ids_not_those_of_the_same_ids_elsewhere(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        team = s.scoped("team")
        s.append("u", [started("u"), user()], event_ids=["e1", "e2"])
        team.append("t", [started("t"), user()], event_ids=["e1", "e2"])
        res = team.delete_thread("t")
        with s.backend.engine.read() as txn:
            assert {bytes(k) for k, _ in txn.range("eventids")} == {
                eid_key("e1", None), eid_key("e2", None), eid_key(res.event_ids[0], "team")}
        assert s.verify().problems == []
        team.append("t2", [started("t2"), user()], event_ids=["e1", "e2"])  # the ids are free in the scope again
        assert [e.event_id for e in team.read("t2")] == ["e1", "e2"]


def test_stats_name_what_they_count(tmp_path: Path) -> None:
    with Store(tmp_path / "s", auto_dictionary=0) as s:
        st = s.backend.stats()
        assert (st["events"], st["threads"], st["last_position"], st["dictionaries"], st["logs"]) == (0, 0, 0, 0, 1)
        assert st["group_commit"] == {"commits": 0, "appends": 0, "mean_group": 0.0}
        s.append("a", [started("a"), user()])
        s.append("b", [started("b")])
        gc = s.backend._gc
        h1 = s.backend.submit([part("a", [user()], expected=2)])
        h2 = s.backend.submit([part("b", [user()], expected=1)])  # queued behind the first: one group of two
        h1.result()
        h2.result()
        st = s.backend.stats()
        assert (st["events"], st["threads"], st["last_position"]) == (5, 2, 5)
        assert (gc.commits, gc.appends) == (3, 4)
        assert st["group_commit"] == {"commits": 3, "appends": 4, "mean_group": 1.33}


def test_a_deleted_head_and_the_deletion_result_say_what_the_tombstone_is(tmp_path: Path) -> None:
    """The thread deleted with its turn open: the head drops the open turn, moves to the
    tombstone's position, and the ``updated`` index holds one entry per thread, values empty."""
    from tplog.backends.lmdb.keys import scope_tag, u64

    with Store(tmp_path / "s") as s:
        s.append("o", [started("o")])
        s.append("t", [started("t"), user(), agent_start("a1"), response("r", "a1")])
        assert (s.head("t").open_turn_agent, s.head("t").open_turn_seq) == ("a1", 3)
        enc = tombstone("done")
        res = s.backend.delete_thread("t", enc).result()
        assert (res.thread_id, res.first_seq, res.last_seq, res.first_position, res.last_position,
                res.event_ids) == ("t", 5, 5, 6, 6, [enc.event_id])
        head = s.head("t")
        assert (head.status, head.version, head.last_position, head.open_turn_agent, head.open_turn_seq,
                head.stored_bytes) == ("deleted", 5, 6, None, 0, 0)
        with s.backend.engine.read() as txn:
            got = {bytes(k): bytes(v) for k, v in txn.range("updated")}
        assert got == {scope_tag(None) + u64(s.head(t).updated_ns) + tkey(t): b"" for t in ("o", "t")}


def test_the_backend_checks_projection_names_and_passes_its_options_on(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        for i in range(3):
            s.append(f"t{i}", [started(f"t{i}"), user(), link("x")])
        with pytest.raises(InvalidInputError) as err:
            s.backend.rebuild(["links", "nope"])
        assert str(err.value) == "unknown projection 'nope'; known: links, state"
        [rep] = s.backend.rebuild(["links"])
        assert (rep.projection, rep.verify, rep.events) == ("links", False, 9)
        calls: list[tuple[int, int]] = []
        [rep] = s.backend.rebuild(["links"], chunk=2, progress=lambda done, total: calls.append((done, total)))
        assert [c[0] for c in calls[:4]] == [2, 4, 6, 8] and calls[-1][0] == 9
        assert sorted(s.incoming("x")) == [("t0", "referenced"), ("t1", "referenced"), ("t2", "referenced")]


def test_verify_checks_the_projections_unless_told_not_to(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        s.append("t", [started("t"), user(), link("x")])
        s.backend.engine.run_write(lambda txn: proj.write_info(
            txn, proj.LINKS, proj.ProjectionInfo(proj.VERSIONS[proj.LINKS], 3, "stale")))
        default = s.backend.verify().problems
        assert default and default == s.backend.verify(projections=True).problems
        assert any("links" in p for p in default)
        assert s.backend.verify(projections=False).problems == []


# --------------------------------------------------------------------------- dictionary training


def _stored_bodies(s: Store) -> list[bytes]:
    """Every stored body, newest first."""
    out: list[bytes] = []
    with s.backend.engine.read() as txn:
        rows = chunks.EventRows(txn, s.codec)
        for _pk, key in txn.range("global", b"", None, reverse=True):
            v = rows.get(key)
            assert v is not None
            out.append(bytes(s.codec.body_bytes(v, txn)))
    return out


def _newest_bodies(s: Store, samples: int) -> list[bytes]:
    """What a dictionary is trained on: stored bodies newest first, those over 64 KiB left out."""
    return [b for b in _stored_bodies(s) if len(b) <= 64 << 10][:samples]


def _text_for_body(path: Path, size: int) -> str:
    """A user message whose stored body is exactly ``size`` bytes (measured on a store of its own)."""
    text = "y" * (size - 200)
    for _ in range(4):
        with Store(path / str(len(text))) as p:
            p.append("p", [started("p"), user(text)])
            got = len(_stored_bodies(p)[0])
        if got == size:
            return text
        text = "y" * (len(text) + size - got)
    raise AssertionError(f"no message of body size {size}")


def _diverse(n: int, seed: int) -> list[Any]:
    """``n`` user messages of 600 seeded random letters: bodies varied enough that the trained
    dictionary depends on every sample and on its size limit (similar bodies give one dictionary
    whatever is added)."""
    r = random.Random(seed)
    return [user("".join(r.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(600))) for _ in range(n)]


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[list[bytes]]:
    """``Codec.train`` wrapped to record the samples it is given (the real one runs): zstd returns the
    same dictionary for 500 or 501 such bodies, so the bytes alone cannot tell the counts apart."""
    seen: list[list[bytes]] = []
    real = Codec.train

    def train(samples: list[bytes], size: int = 64 << 10) -> bytes:
        seen.append([bytes(b) for b in samples])
        return real(samples, size)

    monkeypatch.setattr(Codec, "train", staticmethod(train))
    return seen


def _dict(s: Store, i: int) -> bytes:
    with s.backend.engine.read() as txn:
        raw = txn.get("dicts", i.to_bytes(8, "big"))
        assert raw is not None
        return bytes(raw)


def test_a_dictionary_is_trained_on_the_newest_bodies_up_to_64_kib(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with Store(tmp_path / "s", auto_dictionary=0) as s:
        s.append("old", [started("old"), *_diverse(120, 1)])
        edge = _text_for_body(tmp_path / "probe", 64 << 10)  # exactly 64 KiB: taken
        over = _text_for_body(tmp_path / "probe", (64 << 10) + 500)  # just over: left out
        r = random.Random(2)
        s.append("big", [started("big"), user("".join(r.choice("0123456789") for _ in edge)),
                         user("".join(r.choice("0123456789") for _ in over)),
                         user("m" + os.urandom(50 << 10).hex()),  # 100 KiB: left out
                         user("b" + os.urandom(150 << 10).hex())])  # 300 KiB: a blob, left out
        s.append("new", [started("new"), *_diverse(40, 3)])
        with s.backend.engine.read() as txn:
            assert len(list(txn.range("blobs"))) == 1
        want = _newest_bodies(s, 64)
        assert len(want) == 64 and (64 << 10) in [len(b) for b in want]
        seen = _spy(monkeypatch)
        assert s.train_dictionary(samples=64, size=16 << 10) == 1
        assert seen == [want]
        assert _dict(s, 1) == Codec.train(want, 16 << 10)


def test_the_background_trainer_takes_the_newest_500_bodies_in_a_named_daemon_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _spy(monkeypatch)
    with Store(tmp_path / "s", auto_dictionary=600) as s:
        s.append("t", [started("t"), *_diverse(640, 4)])  # crosses 600: training starts
        trainer = s.backend._gc.trainer
        assert trainer is not None
        assert (trainer.name, trainer.daemon) == ("tplog-dictionary", True)
        trainer.join(60)
        assert s.codec.current_dict == 1
        assert seen == [_newest_bodies(s, 500)]
        assert _dict(s, 1) == Codec.train(_newest_bodies(s, 500), 64 << 10)


def test_the_background_trainer_adopts_a_dictionary_another_handle_trained(tmp_path: Path) -> None:
    """Two handles on one directory: ``a`` trains the first dictionary; ``b``, opened before it,
    crosses its threshold next and uses that one instead of training a second."""
    path = tmp_path / "s"
    a = Store(path, auto_dictionary=0)
    b = Store(path, auto_dictionary=200)
    try:
        a.append("t1", dictionary_events(150, "t1"))
        assert a.train_dictionary(samples=100) == 1
        assert b.codec.current_dict == 0
        b.append("t2", dictionary_events(100, "t2"))  # crosses 200
        trainer = b.backend._gc.trainer
        assert trainer is not None
        trainer.join(60)
        assert b.codec.current_dict == 1
        assert b.stats()["dictionaries"] == 1
    finally:
        b.close()
        a.close()


def test_a_dictionary_is_trained_on_2000_bodies_unless_told(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _spy(monkeypatch)
    with Store(tmp_path / "s", auto_dictionary=0) as s:
        s.append("t", [started("t"), *_diverse(2010, 5)])
        assert s.backend.train_dictionary() == 1  # the backend's own default (the facade passes its 2000)
        assert seen == [_newest_bodies(s, 2000)]
        assert _dict(s, 1) == Codec.train(_newest_bodies(s, 2000), 64 << 10)
