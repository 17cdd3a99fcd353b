"""A fork's inherited links, on every backend: ``incoming``/``children`` of every thread
list a fork as they list the same thread copied (issue #22: a fork gives exactly what a
copied thread would). The fork indexes its prefix's ``LinkAdded`` links and spawn facts
under its own id when it is written; a rebuild recomputes those rows from the parent's
events, and verify compares them.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import agent_start, completed, exchange, link, register, spawn_message, started, user
from test_lifecycle import copy_by_append, store, tid  # noqa: F401  (the every-backend fixture)

from tplog import Store
from tplog.backends.common import thread_key
from tplog.errors import RebuildRequiredError
from tplog.protocol import model as m


def linked_parent(s: Store) -> tuple[str, list[str]]:
    """A parent whose prefix links to three threads and spawns a fourth; returns it and every
    thread that can be a link target. seq 1-2 start, 3-6 a turn pair, 7 link x, 8 link y (spawned_from),
    9-12 a turn that spawns z, 13 link w, 14-17 a turn pair."""
    x, y, z, w, parent = tid(), tid(), tid(), tid(), tid()
    for t in (x, y, z, w):
        s.append(t, [started(t)])
    s.append(parent, [started(parent, title="links"), register(), *exchange("a?", "b")])
    s.append(parent, [link(x), link(y, "spawned_from")])
    s.append(parent, [user("spawn?"), agent_start(), spawn_message(z), completed()])
    s.append(parent, [link(w, "referenced"), *exchange("c?", "d")])
    return parent, [x, y, z, w]


def same_links(s: Store, targets: list[str], f: str, c: str) -> None:
    for t in targets:
        rows = s.incoming(t)
        fork_rows = [r for src, r in rows if src == f]
        copy_rows = [r for src, r in rows if src == c]
        assert sorted(fork_rows) == sorted(copy_rows), t
        kids = s.children(t)
        assert (f in kids) == (c in kids), t
    assert s.children(f) == s.children(c)


@pytest.mark.parametrize("at", [2, 6, 7, 8, 12, 13, 17])
def test_fork_is_listed_by_incoming_and_children_like_a_copy(store: Store, at: int) -> None:  # noqa: F811
    parent, targets = linked_parent(store)
    f = store.fork(parent, at).thread_id
    store.append(f, [link(targets[0], "cites"), *exchange("own?", "mine")])
    c = copy_by_append(store, f)
    everyone = [*targets, parent, f, c]
    same_links(store, everyone, f, c)
    # Forks of forks inherit through their parent, at any point of it.
    g = store.fork(f, store.head(f).version).thread_id
    h = store.fork(f, max(1, at)).thread_id
    gc, hc = copy_by_append(store, g), copy_by_append(store, h)
    same_links(store, [*everyone, g, h, gc, hc], g, gc)
    same_links(store, [*everyone, g, h, gc, hc], h, hc)
    # A rebuild derives the same rows from the log, and verify finds nothing wrong.
    assert [r.differences for r in store.rebuild(verify=True)] == [[], []]
    assert store.verify().problems == []
    store.rebuild()
    same_links(store, [*everyone, g, h, gc, hc], g, gc)
    same_links(store, [*everyone, g, h, gc, hc], h, hc)
    # Deleting a fork takes its inherited rows with it, as deleting the copy does its own.
    store.delete_thread(f, cascade=True)
    store.delete_thread(c)
    for t in targets:
        assert all(src not in (f, g, h) for src, _ in store.incoming(t))
        assert f not in store.children(t)
    assert [r.differences for r in store.rebuild(verify=True)] == [[], []]


def test_fork_links_survive_a_memory_backup(tmp_path: object) -> None:
    """``Store("memory:DIR")`` restores a backup's forks: reads, exports, links, verify."""
    from pathlib import Path

    from tplog import thread_hash

    d = Path(str(tmp_path)) / "bk"
    with Store("memory:", check_rules=False) as s:
        parent, targets = linked_parent(s)
        f = s.fork(parent, 13).thread_id
        s.append(f, exchange("own?", "mine"))
        g = s.fork(f, 14).thread_id
        want = {t: (s.export(t), s.read(t), s.incoming(targets[0]), s.children(parent), s.links(t))
                for t in (f, g)}
        s.backup(str(d))
    with Store(f"memory:{d}", check_rules=False) as b:
        for t in (f, g):
            doc, evs, inc, kids, links = want[t]
            assert b.export(t) == doc and thread_hash(b.export(t)) == thread_hash(doc)
            assert b.read(t) == evs
            assert b.incoming(targets[0]) == inc and b.children(parent) == kids and b.links(t) == links
        assert b.head(g).fork_of == f
        assert b.verify().problems == []
        # The restored store goes on like the original: appending to a fork, forking again.
        b.append(g, exchange("later?", "yes"))
        assert len(b.export(g).turns) == len(want[g][0].turns) + 2
        b.delete_thread(parent, cascade=True)
        assert not b.exists(f) and b.verify().problems == []


def per_thread(events: list[Any]) -> dict[str, list[tuple[int, Any]]]:
    """A projection built from the store-wide log: each thread's (seq, event) in log order."""
    out: dict[str, list[tuple[int, Any]]] = {}
    for e in events:
        out.setdefault(e.thread_id, []).append((e.seq, e.event))
    return out


def test_log_readers_see_a_fork_as_they_see_a_copy(store: Store) -> None:  # noqa: F811
    """``read_all``/``iter_all`` expand a fork's start into its inherited events (at the start's
    position): a projection folded from the log holds the same events for a fork as for its copy."""
    parent, _targets = linked_parent(store)
    mark = store.last_position
    f = store.fork(parent, 13).thread_id
    store.append(f, exchange("own?", "mine"))
    g = store.fork(f, 14).thread_id
    store.append(g, [link(parent)])
    c, gc = copy_by_append(store, f), copy_by_append(store, g)
    whole = store.read_all()
    proj = per_thread(whole)
    for fork_id, copy_id in ((f, c), (g, gc)):
        assert [s for s, _ in proj[fork_id]] == [s for s, _ in proj[copy_id]] == list(
            range(1, store.head(fork_id).version + 1))
        assert proj[fork_id][1:] == proj[copy_id][1:]  # seq 1 names its own thread id
    # The expansion sits at the fork's start: positions never go back, the cursor is the position.
    positions = [e.position for e in whole]
    assert positions == sorted(positions)
    start = next(e.position for e in whole if e.thread_id == f and e.seq == 1)
    assert [e.seq for e in whole if e.position == start] == list(range(1, 14))
    # Catch-up readers paging with any limit, or streaming with any chunk, see the same.
    for limit in (1, 2, 5):
        got: list[Any] = []
        after = 0
        while page := store.read_all(after=after, limit=limit):
            got += page
            after = page[-1].position
        assert got == whole, limit
        assert list(store.iter_all(chunk=limit)) == whole
    # A reader that caught up to just before the fork sees the fork whole.
    assert per_thread(store.read_all(after=mark))[f] == proj[f]
    # The raw log still holds only the fork's own rows.
    raw = store.backend.read_log(0, after=0, limit=None, scope=store.scope)
    assert len([e for e in raw if e.thread_id == f]) == 1 + 4
    # A deleted fork's start is gone from the log (its tombstone stays): nothing is expanded.
    store.delete_thread(f, cascade=True)
    assert {e.event.__class__.__name__ for e in store.read_all() if e.thread_id in (f, g)} == {"ThreadDeleted"}


def test_a_fork_inherits_spawn_facts_alone(store: Store) -> None:  # noqa: F811
    """A parent whose prefix spawns a thread but adds no link (its head counts no links): a fork at
    its end still lists the spawned thread as its child, as the copy does (the children index says so)."""
    spawned, parent = tid(), tid()
    store.append(spawned, [started(spawned)])
    store.append(parent, [started(parent), register(), user("spawn?"), agent_start(), spawn_message(spawned),
                          completed()])
    f = store.fork(parent, 6).thread_id
    g = store.fork(f, 6).thread_id
    c = copy_by_append(store, g)
    assert sorted(store.children(parent)) == sorted([spawned, f])
    assert sorted(store.children(f)) == sorted([spawned, g, c])  # the copy keeps the fork's spawned_from link
    assert store.children(g) == store.children(c) == [spawned]
    assert [r.differences for r in store.rebuild(verify=True)] == [[], []]


@pytest.mark.parametrize("at", [1, 6])
def test_a_fork_named_by_its_parents_spawn_message_is_inherited_at_the_end(store: Store, at: int) -> None:  # noqa: F811
    """Issue #22's open problem 2: ``c`` is both a fork of ``parent`` and named in the parent's
    spawn message. A fork of the parent at its end inherits that spawn fact (the children row
    parent-fork → c), and so does a fork of ``c`` at its end when ``c``'s prefix holds the
    message (at=6). Before has_spawned, forking at the end looked for a spawn fact among the
    parent's children that do not link back to it, and ``c`` links back: the row was missed."""
    parent, c = tid(), tid()
    store.append(parent, [started(parent), register(), user("spawn?"), agent_start(), spawn_message(c),
                          completed()])
    store.fork(parent, at, new_thread_id=c)
    assert sorted(store.children(parent)) == sorted([c])  # one row: the spawn fact and c's spawned_from link
    assert store.backend.has_spawned(parent, scope=store.scope)
    f = store.fork(parent, 6).thread_id
    fc = copy_by_append(store, f)
    assert store.children(f) == store.children(fc) == [c]
    g = store.fork(c, store.head(c).version).thread_id
    gc = copy_by_append(store, g)
    assert store.children(g) == store.children(gc) == ([c] if at == 6 else [])
    assert store.backend.has_spawned(c, scope=store.scope) == (at == 6)
    assert [r.differences for r in store.rebuild(verify=True)] == [[], []]
    store.rebuild()
    assert store.children(f) == [c] and store.children(g) == ([c] if at == 6 else [])


@pytest.mark.parametrize("kind", ["memory", "lmdb", "postgres"])
def test_forks_written_without_inherited_rows_make_links_stale_until_rebuilt(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue #22's open problem 1: a store written by the ``lifecycle`` branch (links version 2)
    holds forks without the rows their prefix gives a copy. Links version 3 makes it report
    the projection stale (links queries raise, naming the command) instead of answering
    wrong; ``tplog rebuild --projection links`` (a memory backup: ``rebuild("links")``)
    derives the rows and the fork is listed as its copy is."""
    import tplog.fork
    from tplog.backends.common import VERSIONS
    from tplog.cli import main

    schema = f"stale{os.getpid()}_{uuid.uuid4().hex[:8]}"
    url = {"memory": "memory:", "lmdb": str(tmp_path / "s")}.get(kind) or f"{_pg()}?schema={schema}"
    try:
        with monkeypatch.context() as old:  # what the lifecycle branch wrote: version 2, no inherited rows
            old.setitem(VERSIONS, "links", 2)
            old.setattr(tplog.fork, "inherited", lambda history, at: [])
            with Store(url, check_rules=False) as s:
                parent, targets = linked_parent(s)
                f = s.fork(parent, 13).thread_id
                g = s.fork(f, 13).thread_id
                c, gc = copy_by_append(s, f), copy_by_append(s, g)
                assert (f, "referenced") not in s.incoming(targets[0]) and (c, "referenced") in s.incoming(targets[0])
                assert s.projections()["links"]["version"] == 2
                if kind == "memory":
                    s.backup(str(tmp_path / "bk"))
                    url = f"memory:{tmp_path / 'bk'}"
        with Store(url, check_rules=False) as s:
            assert s.projections()["links"] == {"code_version": 3, "version": 2, "status": "stale",
                                                "position": s.projections()["links"]["position"]}
            with pytest.raises(RebuildRequiredError, match="rebuild"):
                s.incoming(targets[0])
            assert any("links" in p for p in s.verify().problems)
            if kind == "memory":  # nothing to reopen: rebuild in place
                s.rebuild("links")
                rebuilt_like_copies(s, parent, targets, f, g, c, gc)
        if kind != "memory":
            assert main(["rebuild", url, "--projection", "links"]) == 0
            capsys.readouterr()
            with Store(url, check_rules=False) as s:
                rebuilt_like_copies(s, parent, targets, f, g, c, gc)
    finally:
        if kind == "postgres":
            import psycopg

            with psycopg.connect(_pg(), autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE".encode())


def rebuilt_like_copies(s: Store, parent: str, targets: list[str], f: str, g: str, c: str, gc: str) -> None:
    assert s.projections()["links"]["status"] == "live"
    assert (f, "referenced") in s.incoming(targets[0])
    for t in [*targets, parent]:
        rows = s.incoming(t)
        assert sorted(r for src, r in rows if src == f) == sorted(r for src, r in rows if src == c), t
    same_links(s, [*targets, parent], g, gc)
    assert set(s.children(f)) - {g, gc} == set(s.children(c))  # g and gc name f as spawned_from
    assert s.verify().problems == []
    assert [r.differences for r in s.rebuild(verify=True)] == [[], []]


def _pg() -> str:
    from contract_helpers import pg_dsn

    return pg_dsn()


@pytest.mark.parametrize("link_first", [False, True])
def test_a_child_named_in_another_case_keeps_its_own_spelling_through_a_rebuild(
        store: Store, link_first: bool) -> None:  # noqa: F811
    """Found by the property test (after ``tplog copy`` into LMDB): the parent's spawn fact names
    the child in upper case, the child links ``spawned_from`` under its own lower-case id. The
    children row took the latest writer's spelling: log order live, thread-key order in an LMDB
    rebuild, so ``verify`` reported a difference and a rebuild changed what ``children`` said.
    The row now keeps the child's own spelling, in whatever order the rows are written."""
    parent, child = "ffffffff-0000-4000-8000-000000000000", "00000000-0000-4000-8000-00000000000a"
    own = [started(child, relationships=m.ThreadRelationships(links=[
        m.ThreadLink(thread_id=parent, relation="spawned_from")]))]
    spawning = [user("spawn?"), agent_start(), spawn_message(child.upper()), completed()]
    if link_first:
        store.append(parent, [started(parent)])
        store.append(child, own)
        store.append(parent, spawning)
    else:
        store.append(parent, [started(parent), *spawning])
        store.append(child, own)
    f = store.fork(parent, store.head(parent).version).thread_id  # inherits the spawn fact: a row spelled upper
    assert store.children(parent) == [child, f]  # by key: the child's is all zeros
    assert store.children(f) == [child.upper()]  # no link of the child's own: the spawn fact's spelling
    assert [r.differences for r in store.rebuild(verify=True)] == [[], []]
    store.rebuild()
    assert store.children(parent) == [child, f] and store.children(f) == [child.upper()]


def test_link_rows_name_a_source_appended_in_another_case_as_its_head_does(store: Store) -> None:  # noqa: F811
    """Found by the property test once it appended under either case of an id: the link rows of
    an append named the source as that append spelled it, a rebuild as the head does (its first
    spelling), so ``verify`` reported a difference and a rebuild changed ``incoming``/``children``.
    Rows now name the source as its head does, live and rebuilt (results keep the append's)."""
    x, t, p = tid(), tid(), tid()
    store.append(x, [started(x)])
    store.append(p, [started(p)])
    store.append(t, [started(t)])
    assert store.append(t.upper(), [link(x), link(p, "spawned_from")]).thread_id == t.upper()
    f = store.fork(t.upper(), 3).thread_id  # its inherited rows too
    want = sorted([(t, "referenced"), (f, "referenced")])
    assert sorted(store.incoming(x)) == want and store.children(p) == sorted([t, f], key=thread_key)
    assert [r.differences for r in store.rebuild(verify=True)] == [[], []]
    store.rebuild()
    assert sorted(store.incoming(x)) == want and store.children(p) == sorted([t, f], key=thread_key)
