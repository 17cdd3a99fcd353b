"""Damage met while the links projection is computed (tplog/backends/lmdb/projections.py) is named
by thread and seq, wherever it is read: a ThreadStarted declaring links (the key-order scan), and a
fork's parent's prefix (read for the fork's inherited rows before the scan reaches the parent:
the fork's key sorts first). Also: a ThreadStarted stored as a blob still has its links indexed."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ToyStore as Store

from tplog import Limits
from tplog.backends.lmdb.keys import event_key, tkey
from tplog.errors import CorruptionError
from tplog.events import LinkAdded, ThreadStarted
from tplog.protocol import model as m

T = "2025-01-20T10:00:00Z"
PARENT = "ffffffff-0000-4000-8000-000000000001"
FORK = "00000000-0000-4000-8000-000000000001"
X = "77777777-0000-4000-8000-000000000001"
FIRST = "00000000-0000-4000-8000-000000000000"  # sorts before FORK: a thread started after FORK's chunk is
# in the range the key-order scan already passed, so the catch-up reads it


def start(tid: str, *links: tuple[str, str], title: str | None = None) -> ThreadStarted:
    rel = m.ThreadRelationships(links=[m.ThreadLink(thread_id=t, relation=r) for t, r in links]) if links else None
    return ThreadStarted(thread_id=tid, created_at=T, relationships=rel, title=title)


def link(target: str, rel: str = "referenced") -> LinkAdded:
    return LinkAdded(link=m.ThreadLink(thread_id=target, relation=rel))


def damage(s: Store, tid: str, seq: int, at: int) -> None:
    """Flip the bits of byte ``at`` (negative: from the end) of a single-row event."""
    key = event_key(tkey(tid, None), seq)

    def work(txn: object) -> None:
        value = bytearray(txn.get("events", key))  # type: ignore[attr-defined]
        assert value[:1] not in (b"\x04", b"\x05")  # a single row, not a chunk
        value[at] ^= 0xFF
        txn.put("events", key, bytes(value))  # type: ignore[attr-defined]

    s.backend.engine.run_write(work)


@pytest.mark.parametrize("part", ["header", "body"])
def test_damage_in_a_forks_parent_prefix_is_named_with_the_parents_thread_and_seq(tmp_path: Path,
                                                                                  part: str) -> None:
    with Store(tmp_path / "s") as s:
        s.append(PARENT, [start(PARENT), link(X)])
        assert s.fork(PARENT, 2, new_thread_id=FORK).thread_id == FORK
        assert sorted(s.incoming(X)) == sorted([(FORK, "referenced"), (PARENT, "referenced")])
        damage(s, PARENT, 2, 8 if part == "header" else -1)
        with pytest.raises(CorruptionError) as exc:
            s.rebuild("links")
        assert (exc.value.thread_id, exc.value.seq) == (PARENT, 2), str(exc.value)
        with pytest.raises(CorruptionError) as exc:
            s.delete_thread(FORK)  # the deletion reads the inherited rows the same way
        assert (exc.value.thread_id, exc.value.seq) == (PARENT, 2), str(exc.value)


def test_a_damaged_thread_started_declaring_links_is_named(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        s.append(PARENT, [start(PARENT, (X, "referenced"))])
        damage(s, PARENT, 1, -1)
        with pytest.raises(CorruptionError) as exc:
            s.rebuild("links")
        assert (exc.value.thread_id, exc.value.seq) == (PARENT, 1), str(exc.value)


def test_links_declared_by_a_thread_started_stored_as_a_blob_are_rebuilt(tmp_path: Path) -> None:
    with Store(tmp_path / "s", limits=Limits(blob_threshold=1024)) as s:
        s.append(PARENT, [start(PARENT, (X, "referenced"), title="t" * 5000)])
        s.append(FORK, [start(FORK), link(PARENT, "spawned_from"), link(X)])
        with s.backend.engine.read() as txn:
            assert len(list(txn.range("blobs"))) == 1
        assert [r.differences for r in s.rebuild(verify=True)] == [[], []]
        s.rebuild("links")
        assert sorted(s.incoming(X)) == sorted([(PARENT, "referenced"), (FORK, "referenced")])
        assert s.children(PARENT) == [FORK]


def test_a_forks_inherited_link_stored_as_a_blob_is_read_from_the_parent(tmp_path: Path) -> None:
    """The parent's LinkAdded body is a blob: the fork's rows (written, deleted, rebuilt) read it
    through the transaction's blob table, like the parent's own."""
    big = m.ThreadLink(thread_id=X, relation="referenced", metadata={"note": "n" * 5000})
    with Store(tmp_path / "s", limits=Limits(blob_threshold=1024)) as s:
        s.append(PARENT, [start(PARENT), LinkAdded(link=big)])
        s.fork(PARENT, 2, new_thread_id=FORK)
        assert sorted(s.incoming(X)) == sorted([(FORK, "referenced"), (PARENT, "referenced")])
        assert [r.differences for r in s.rebuild(verify=True)] == [[], []]
        s.rebuild("links")
        assert sorted(s.incoming(X)) == sorted([(FORK, "referenced"), (PARENT, "referenced")])
        s.delete_thread(FORK)
        assert s.incoming(X) == [(PARENT, "referenced")]
        assert [r.differences for r in s.rebuild(verify=True)] == [[], []]


@pytest.mark.parametrize("at", [8, -1])  # the header, the body
def test_damage_the_key_order_scan_meets_is_named(tmp_path: Path, at: int) -> None:
    """A LinkAdded row whose header or body fails its CRC, and a chunk (a closed turn) whose index
    section does: the rebuild stops at each naming the thread (and the row's seq)."""
    from tplog.events import AgentTurnCompleted, AgentTurnStarted

    with Store(tmp_path / "s") as s:
        s.append(PARENT, [start(PARENT), link(X)])
        damage(s, PARENT, 2, at)
        for names in ("links", "state"):
            with pytest.raises(CorruptionError) as exc:
                s.rebuild(names)
            assert (exc.value.thread_id, exc.value.seq) == (PARENT, 2), str(exc.value)
    with Store(tmp_path / "c") as s:
        s.append(PARENT, [start(PARENT), AgentTurnStarted(agent_id="a", started_at=T),
                          AgentTurnCompleted(completed_at=T)])
        with s.backend.engine.read() as txn:
            [key] = [bytes(k) for k, v in txn.range("events") if bytes(v)[:1] in (b"\x04", b"\x05")]

        def hit(txn: object) -> None:
            v = bytearray(txn.get("events", key))  # type: ignore[attr-defined]
            v[len(v) // 2] ^= 0x10
            txn.put("events", key, bytes(v))  # type: ignore[attr-defined]

        s.backend.engine.run_write(hit)
        with pytest.raises(CorruptionError) as exc:
            s.rebuild("state")
        assert exc.value.thread_id == PARENT, str(exc.value)


@pytest.mark.parametrize("part", ["header", "body"])
def test_damage_the_catch_up_meets_is_named(tmp_path: Path, part: str) -> None:
    """A LinkAdded appended (and damaged) while the key-order pass runs is read by the catch-up."""
    with Store(tmp_path / "s") as s:
        s.append(FORK, [start(FORK)])
        s.append(PARENT, [start(PARENT)])
        calls = 0

        def progress(done: int, total: int) -> None:
            nonlocal calls
            calls += 1
            if calls == 1:
                s.append(FIRST, [start(FIRST), link(X)])
                damage(s, FIRST, 2, 8 if part == "header" else -1)

        from tplog.backends.lmdb.rebuild import rebuild

        with pytest.raises(CorruptionError) as exc:
            rebuild(s.backend.engine, s.codec, ["links"], chunk=1, progress=progress)
        assert (exc.value.thread_id, exc.value.seq) == (FIRST, 2), str(exc.value)


def test_a_link_stored_as_a_blob_and_appended_during_the_scan_is_caught_up_on(tmp_path: Path) -> None:
    from tplog.backends.lmdb.rebuild import rebuild

    big = m.ThreadLink(thread_id=X, relation="referenced", metadata={"note": "n" * 5000})
    with Store(tmp_path / "s", limits=Limits(blob_threshold=1024)) as s:
        s.append(FORK, [start(FORK)])
        s.append(PARENT, [start(PARENT)])
        calls = 0

        def progress(done: int, total: int) -> None:
            nonlocal calls
            calls += 1
            if calls == 1:  # FORK's chunk is scanned: FIRST's events are the catch-up's
                s.append(FIRST, [start(FIRST), LinkAdded(link=big)])

        rebuild(s.backend.engine, s.codec, ["links"], chunk=1, progress=progress)
        assert s.incoming(X) == [(FIRST, "referenced")]
        assert [r.differences for r in s.rebuild(verify=True)] == [[], []]
