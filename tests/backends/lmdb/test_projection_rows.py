"""The links projection's rows kept by appends, deletions and forks (tplog/backends/lmdb/projections.py),
row by row: inside a scope (every key in the thread's scope), a deletion that leaves a child its own
link, a parent whose key sorts after almost every other, and a fork of a fork inheriting a link at
the first inheritable seq. Each case is also checked against a rebuild (``rebuild --verify``: no
difference), so the rows the append and deletion paths keep equal the rows the rebuild computes.

The projections' tracking rows on open and the error a read of a projection that is not
current raises (tplog/backends/lmdb/projections.py `init_infos`, `require_live`; written for
their surviving mutants, tests/MUTANTS.md): a new store starts every projection live at
position 0; an older store's missing rows are written stale; a projection folded by another
version of tplog is marked stale where it was (its version and position kept); a current or
already stale one is left alone. Real LMDB files, each store reopened.

Damage met while the links projection is computed (tplog/backends/lmdb/projections.py) is named
by thread and seq, wherever it is read: a ThreadStarted declaring links (the key-order scan), and a
fork's parent's prefix (read for the fork's inherited rows before the scan reaches the parent:
the fork's key sorts first). Also: a ThreadStarted stored as a blob still has its links indexed.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from conftest import ToyStore as Store
from conftest import agent_start, completed, spawn_message, started, user
from test_compare import link as spawned_link
from test_compare import link_rows as rows
from test_compare import spawn_turn
from test_compare import start as bare_start

from tplog.backends.common import CHILD_LINK, CHILD_SPAWN
from tplog.backends.lmdb import projections as proj
from tplog.backends.lmdb.keys import event_key, tkey
from tplog.errors import CorruptionError, NotFoundError, RebuildRequiredError
from tplog.events import LinkAdded, ThreadStarted
from tplog.limits import Limits
from tplog.protocol import model as m


def no_drift(s: Store) -> None:
    assert [r.differences for r in s.rebuild(verify=True)] == [[], []]


@pytest.mark.parametrize("scope", [None, "tenant-a"])
def test_deleting_a_parent_leaves_its_child_only_the_childs_own_link(tmp_path: Path, scope: str | None) -> None:
    """P spawns C1 and C2 and links to X; C1 says it was spawned from P; D links to P and is
    deleted too. After the deletions only C1's own link to P is left, keyed in the scope."""
    p, c1, c2, x, d = (str(uuid.uuid4()) for _ in range(5))
    with Store(tmp_path / "s") as root:
        s = root.scoped(scope) if scope is not None else root
        s.append(c1, [bare_start(c1), spawned_link(p)])
        s.append(c2, [bare_start(c2)])
        s.append(p, [bare_start(p), spawned_link(x, "referenced"), *spawn_turn(c1), *spawn_turn(c2)])
        s.append(d, [bare_start(d), spawned_link(p, "referenced")])
        pk, c1k, c2k = tkey(p, scope), tkey(c1, scope), tkey(c2, scope)
        assert rows(root)["children"] == {pk + c1k: [c1, CHILD_LINK | CHILD_SPAWN], pk + c2k: [c2, CHILD_SPAWN]}
        s.delete_thread(d)
        s.delete_thread(p)
        assert rows(root) == {
            "links_in": {proj.link_key(p, "spawned_from", c1k, 2, scope): [c1, p]},
            "children": {pk + c1k: [c1, CHILD_LINK]},
            "spawner": {},
        }
        assert s.incoming(p) == [(c1, "spawned_from")]
        with pytest.raises(NotFoundError):
            s.incoming(x)
        no_drift(root)


def test_deleting_a_child_drops_it_from_a_parent_whose_key_sorts_last(tmp_path: Path) -> None:
    """The child's spawner rows are found by a range over every parent key, up to the last."""
    p = "ffffffff-ffff-ffff-ffff-ffffffffff01"
    c = str(uuid.uuid4())
    with Store(tmp_path / "s") as s:
        s.append(c, [bare_start(c)])
        s.append(p, [bare_start(p), *spawn_turn(c)])
        assert s.children(p) == [c]
        s.delete_thread(c)
        assert s.children(p) == []
        assert rows(s) == {"links_in": {}, "children": {}, "spawner": {}}
        no_drift(s)


@pytest.mark.parametrize("scope", [None, "tenant-a"])
def test_a_fork_of_a_fork_inherits_the_link_at_seq_2(tmp_path: Path, scope: str | None) -> None:
    """P's seq 2 is a link; F1 forks P at 2 (it inherits exactly seq 2), F2 forks F1 at 3 (F1's seq
    2 is P's, seq 3 its own link): F2 indexes both, through F1 to P; a rebuild computes the same."""
    p, x, y = (str(uuid.uuid4()) for _ in range(3))
    with Store(tmp_path / "s") as root:
        s = root.scoped(scope) if scope is not None else root
        s.append(p, [bare_start(p), spawned_link(x, "referenced"), spawned_link(y, "referenced")])
        f1 = s.fork(p, 2).thread_id
        s.append(f1, [spawned_link(y, "merged_from")])
        f2 = s.fork(f1, 3).thread_id
        assert sorted(s.incoming(x)) == sorted([(p, "referenced"), (f1, "referenced"), (f2, "referenced")])
        assert sorted(s.incoming(y)) == sorted([(p, "referenced"), (f1, "merged_from"), (f2, "merged_from")])
        no_drift(root)
        s.delete_thread(f2)
        assert sorted(s.incoming(x)) == sorted([(p, "referenced"), (f1, "referenced")])
        no_drift(root)


# ------------------------------------------------------------------ the tracking rows on open, a projection not current


NAMES = ("links", "state")


def _infos(s: Store) -> dict[str, tuple[int, int, str] | None]:
    with s.backend.engine.read() as txn:
        out: dict[str, tuple[int, int, str] | None] = {}
        for name in NAMES:
            info = proj.read_info(txn, name)
            out[name] = None if info is None else (info.version, info.position, info.status)
        return out


def _with_events(path: Path) -> None:
    with Store(path) as s:
        s.append("p", [started("p"), user(), agent_start(), spawn_message("kid"), completed()])


def test_a_new_store_starts_every_projection_live_at_position_0(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        assert _infos(s) == {n: (proj.VERSIONS[n], 0, "live") for n in NAMES}


def test_an_older_store_without_tracking_rows_gets_them_stale(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _with_events(path)
    with Store(path) as s:
        s.backend.engine.run_write(lambda txn: [txn.delete("meta", proj.meta_key(n)) for n in NAMES])
    with Store(path) as s:
        assert _infos(s) == {n: (proj.VERSIONS[n], 0, "stale") for n in NAMES}


def test_a_projection_of_another_version_is_marked_stale_where_it_was(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _with_events(path)
    with Store(path) as s:
        s.backend.engine.run_write(lambda txn: [
            proj.write_info(txn, "links", proj.ProjectionInfo(proj.VERSIONS["links"] - 1, 4, "live")),
            proj.write_info(txn, "state", proj.ProjectionInfo(proj.VERSIONS["state"] + 1, 3, "stale")),
        ])
    with Store(path) as s:
        assert _infos(s) == {"links": (proj.VERSIONS["links"] - 1, 4, "stale"),
                             "state": (proj.VERSIONS["state"] + 1, 3, "stale")}


def test_current_projections_are_left_alone_on_open(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _with_events(path)
    with Store(path) as s:
        before = _infos(s)
        s.backend.engine.run_write(lambda txn: proj.write_info(
            txn, "state", proj.ProjectionInfo(proj.VERSIONS["state"], 2, "stale")))
    assert before == {n: (proj.VERSIONS[n], 0, "live") for n in NAMES}
    with Store(path) as s:
        assert _infos(s) == {"links": (proj.VERSIONS["links"], 0, "live"),
                             "state": (proj.VERSIONS["state"], 2, "stale")}


@pytest.mark.parametrize("info", [None, (2, 5, "live"), (3, 1, "stale")], ids=["missing", "v2-live", "v3-stale"])
def test_a_links_read_names_why_the_projection_is_not_current(tmp_path: Path,
                                                              info: tuple[int, int, str] | None) -> None:
    with Store(tmp_path / "s") as s:
        s.append("p", [started("p"), user(), agent_start(), spawn_message("kid"), completed()])
        if info is None:
            s.backend.engine.run_write(lambda txn: txn.delete("meta", proj.meta_key("links")))
            have = "missing"
        else:
            s.backend.engine.run_write(lambda txn: proj.write_info(txn, "links", proj.ProjectionInfo(*info)))
            have = f"version {info[0]}, {info[2]}"
        with pytest.raises(RebuildRequiredError) as exc:
            s.children("p")
        assert str(exc.value) == (
            f"{s.path}: the 'links' projection is not current ({have}; this tplog folds version "
            f"{proj.VERSIONS['links']}); run `tplog rebuild {s.path} --projection links`")


# -------------------------------------------------------------------- damage met while the links projection is computed


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
