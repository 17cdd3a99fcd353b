"""The links projection's rows kept by appends, deletions and forks (tplog/backends/lmdb/projections.py),
row by row: inside a scope (every key in the thread's scope), a deletion that leaves a child its own
link, a parent whose key sorts after almost every other, and a fork of a fork inheriting a link at
the first inheritable seq. Each case is also checked against a rebuild (``rebuild --verify``: no
difference), so the rows the append and deletion paths keep equal the rows the rebuild computes."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from conftest import ToyStore as Store
from test_rebuild_compare import link, spawn_turn, start
from test_rebuild_compare import link_rows as rows

from tplog.backends.common import CHILD_LINK, CHILD_SPAWN
from tplog.backends.lmdb import projections as proj
from tplog.backends.lmdb.keys import tkey
from tplog.errors import NotFoundError


def no_drift(s: Store) -> None:
    assert [r.differences for r in s.rebuild(verify=True)] == [[], []]


@pytest.mark.parametrize("scope", [None, "tenant-a"])
def test_deleting_a_parent_leaves_its_child_only_the_childs_own_link(tmp_path: Path, scope: str | None) -> None:
    """P spawns C1 and C2 and links to X; C1 says it was spawned from P; D links to P and is
    deleted too. After the deletions only C1's own link to P is left, keyed in the scope."""
    p, c1, c2, x, d = (str(uuid.uuid4()) for _ in range(5))
    with Store(tmp_path / "s") as root:
        s = root.scoped(scope) if scope is not None else root
        s.append(c1, [start(c1), link(p)])
        s.append(c2, [start(c2)])
        s.append(p, [start(p), link(x, "referenced"), *spawn_turn(c1), *spawn_turn(c2)])
        s.append(d, [start(d), link(p, "referenced")])
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
        s.append(c, [start(c)])
        s.append(p, [start(p), *spawn_turn(c)])
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
        s.append(p, [start(p), link(x, "referenced"), link(y, "referenced")])
        f1 = s.fork(p, 2).thread_id
        s.append(f1, [link(y, "merged_from")])
        f2 = s.fork(f1, 3).thread_id
        assert sorted(s.incoming(x)) == sorted([(p, "referenced"), (f1, "referenced"), (f2, "referenced")])
        assert sorted(s.incoming(y)) == sorted([(p, "referenced"), (f1, "merged_from"), (f2, "merged_from")])
        no_drift(root)
        s.delete_thread(f2)
        assert sorted(s.incoming(x)) == sorted([(p, "referenced"), (f1, "referenced")])
        no_drift(root)
