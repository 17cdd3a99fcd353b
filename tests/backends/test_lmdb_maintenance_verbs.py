"""The LMDB backend's maintenance verbs (tplog/backends/lmdb/maintenance.py) where mutation
testing found them unpinned (tests/MUTANTS.md): what each refused deletion says (thread and
reason), ``tracking()`` of an empty store, of a projection an older tplog left behind and of a
store without projection info (opened read-only), and ``backup`` compacting unless told not to.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import ToyStore as Store
from conftest import agent_start, completed, response, started, user
from contract_helpers import encode

from tplog.backends.lmdb import LmdbRecorder
from tplog.backends.lmdb import projections as proj
from tplog.errors import HasForksError, InvalidInputError, NotFoundError, ThreadDeletedError


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
        s.engine.run_write(lambda txn: proj.write_info(
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

        s.engine.run_write(drop)
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
        from contract_helpers import append, part, tombstone

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
