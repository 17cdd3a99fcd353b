"""Thread graph: children (spawned_from links and parents' spawn events), merges,
references, incoming links, paging, descendants, cycles, unknown threads, and a
generated graph of 10,000+ threads checked against a brute-force answer."""

from __future__ import annotations

import os
import random
import tempfile
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import ToyStore as Store
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import THREAD_SETTINGS, thread_models

from tplog.backends.lmdb.keys import tkey
from tplog.cli import main
from tplog.errors import InvalidInputError, NotFoundError, RebuildRequiredError
from tplog.events import (
    AgentTurnCompleted,
    AgentTurnStarted,
    Event,
    LinkAdded,
    MessageRecorded,
    ThreadStarted,
)
from tplog.projections.fold import events_from_thread
from tplog.protocol import model as m
from tplog.protocol.json import from_builtins
from tplog.protocol.versions import upgrade
from tplog.verify import verify_store

T = "2025-01-20T10:00:00Z"


def new_id(rng: random.Random | None = None) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4)) if rng else str(uuid.uuid4())


def started(tid: str) -> ThreadStarted:
    return ThreadStarted(thread_id=tid, created_at=T)


def link(target: str, relation: str) -> LinkAdded:
    return LinkAdded(link=m.ThreadLink(thread_id=target, relation=relation), at=T)


def spawn_turn(*children: str, event_type: str = "data-tp-thread_spawn", key: str = "spawned_thread_id") -> list[Event]:
    msgs = [
        MessageRecorded(message=m.SystemMessage(timestamp=T, event_type=event_type, event_data={key: c},
                                                source_agent="a1"))
        for c in children
    ]
    return [AgentTurnStarted(agent_id="a1", started_at=T), *msgs, AgentTurnCompleted(completed_at=T)]


def by_key(ids: list[str] | set[str]) -> list[str]:
    return sorted(ids, key=tkey)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "store", durability="relaxed")
    yield s
    s.close()


def make(store: Store, tid: str, *events: Event) -> str:
    store.append(tid, [started(tid), *events])
    return tid


# --------------------------------------------------------------------------- children


def test_children_via_spawned_from_links(store: Store) -> None:
    parent = make(store, new_id())
    kids = [make(store, new_id(), link(parent, "spawned_from")) for _ in range(5)]
    assert store.children(parent) == by_key(kids)
    for k in kids:
        assert store.children(k) == []
        assert store.incoming(parent, relation="spawned_from").count((k, "spawned_from")) == 1


def test_children_via_parent_spawn_events(store: Store) -> None:
    kids = [new_id() for _ in range(3)]
    parent = make(store, new_id(), *spawn_turn(*kids))
    assert store.children(parent) == by_key(kids)  # the children need not exist


def test_children_via_v003_thread_spawn_events(store: Store) -> None:
    a, b = new_id(), new_id()
    parent = make(store, new_id(), *spawn_turn(a, event_type="thread.spawn"),
                  *spawn_turn(b, event_type="thread.spawn", key="thread_id"))
    assert store.children(parent) == by_key([a, b])


def test_children_of_imported_v003_document(store: Store) -> None:
    parent, child = new_id(), new_id()
    doc = {
        "version": "0.0.3", "thread_id": parent, "created_at": T, "updated_at": T,
        "agents": {"a1": {"agent_id": "a1", "agent_name": "A", "created_at": T}},
        "turns": [{"turn_type": "agent", "agent_id": "a1", "started_at": T, "completed_at": T, "messages": [
            {"message_type": "system", "timestamp": T, "event_type": "thread.spawn",
             "event_data": {"spawned_thread_id": child}}]}],
    }
    store.import_thread(upgrade(from_builtins(doc, m.Thread)))
    assert store.children(parent) == [child]


def test_child_by_link_and_event_is_listed_once(store: Store) -> None:
    child = new_id()
    parent = make(store, new_id(), *spawn_turn(child))
    make(store, child, link(parent, "spawned_from"))
    assert store.children(parent) == [child]
    assert store.descendants(parent) == [(child, 1)]


def test_other_relations_are_not_children(store: Store) -> None:
    target = make(store, new_id())
    make(store, new_id(), link(target, "merged_from"), link(target, "referenced"), link(target, "x-custom"))
    make(store, new_id(), *spawn_turn(new_id(), event_type="data-tp-thread_merge"))
    assert store.children(target) == []


def test_children_paging(store: Store) -> None:
    parent = make(store, new_id())
    kids = [make(store, new_id(), link(parent, "spawned_from")) for _ in range(23)]
    extra = [new_id() for _ in range(4)]
    store.append(parent, spawn_turn(*extra))
    every = by_key(kids + extra)
    assert store.children(parent) == every
    pages: list[list[str]] = []
    after: str | None = None
    while True:
        page = store.children(parent, limit=5, after=after)
        if not page:
            break
        assert len(page) <= 5
        pages.append(page)
        after = page[-1]
    assert [c for p in pages for c in p] == every
    assert [len(p) for p in pages] == [5, 5, 5, 5, 5, 2]
    assert store.children(parent, limit=0) == []
    assert store.children(parent, after=every[-1]) == []
    assert store.children(parent, limit=3, after=every[10]) == every[11:14]


def test_children_paging_after_an_id_that_is_not_a_child(store: Store) -> None:
    parent = make(store, new_id())
    kids = by_key([make(store, new_id(), link(parent, "spawned_from")) for _ in range(10)])
    stranger = new_id()
    expected = [k for k in kids if tkey(k) > tkey(stranger)]
    assert store.children(parent, after=stranger) == expected


# --------------------------------------------------------------------------- merges, references, incoming


def test_incoming_paging_covers_every_link_once(store: Store, rng: random.Random) -> None:
    """Pages of ``incoming`` concatenate to the whole list, duplicates (a source that
    added the same link twice) included; a page runs past ``limit`` only to finish
    the links of its last pair, so the next page starts at a new pair."""
    target = make(store, new_id(rng))
    added = 0
    for _ in range(14):
        links = [link(target, rng.choice(["referenced", "spawned_from", "x-cites"])) for _ in range(rng.randint(1, 4))]
        make(store, new_id(rng), *links)
        added += len(links)
    assert len(store.incoming(target)) == added
    for relation in (None, "referenced", "x-cites"):
        want = store.incoming(target, relation=relation)
        assert len(set(want)) < len(want) or relation is not None  # duplicates are there to be paged over
        for limit in (1, 2, 3, 5, 1000):
            got: list[tuple[str, str]] = []
            after: tuple[str, str] | None = None
            while page := store.incoming(target, relation=relation, limit=limit, after=after):
                assert len(page) >= limit or len(got) + len(page) == len(want), (limit, page)
                assert all(pair == page[-1] for pair in page[limit - 1:]), (limit, page)  # past limit: one pair
                assert page[0] != after
                got += page
                after = page[-1]
            assert got == want, (relation, limit)
    assert store.incoming(target, limit=0) == []
    first = store.incoming(target)[0]
    assert store.incoming(target, limit=1, after=first)[0] != first
    stranger = (new_id(rng), "referenced")  # after a pair that is not there: the pairs that sort after it
    order = lambda p: (p[1].encode(), tkey(p[0]))  # noqa: E731
    want = [p for p in store.incoming(target) if order(p) > order(stranger)]
    assert store.incoming(target, after=stranger) == want
    for bad in ({"limit": -1}, {"limit": "3"}, {"limit": True}, {"after": ("x",)}, {"after": "x"},
                {"after": ("", "referenced")}, {"relation": "referenced", "after": (target, "x-cites")}):
        with pytest.raises(InvalidInputError):
            store.incoming(target, **bad)
    for bad_limit in (-1, 2.5):
        with pytest.raises(InvalidInputError):
            store.children(target, limit=bad_limit)  # type: ignore[arg-type]



def test_merge_with_several_parents(store: Store) -> None:
    p1, p2, p3 = (make(store, new_id()) for _ in range(3))
    merged = make(store, new_id(), link(p1, "merged_from"), link(p2, "merged_from"), link(p3, "merged_from"))
    for p in (p1, p2, p3):
        assert store.incoming(p, relation="merged_from") == [(merged, "merged_from")]
        assert store.incoming(p) == [(merged, "merged_from")]
        assert store.incoming(p, relation="spawned_from") == []
        assert store.children(p) == []
    assert [(lk.thread_id, lk.relation) for lk in store.links(merged)] == [
        (p1, "merged_from"), (p2, "merged_from"), (p3, "merged_from")]
    rel = store.thread(merged).relationships
    assert isinstance(rel, m.ThreadRelationships) and rel.links is not m.UNSET
    assert [lk.thread_id for lk in rel.links] == [p1, p2, p3]  # type: ignore[union-attr]


def test_references_and_incoming_by_relation(store: Store) -> None:
    doc = make(store, new_id())
    r1 = make(store, new_id(), link(doc, "referenced"))
    r2 = make(store, new_id(), link(doc, "referenced"), link(doc, "x-quoted"))
    s1 = make(store, new_id(), link(doc, "spawned_from"))
    m1 = make(store, new_id(), link(doc, "merged_from"))
    assert store.incoming(doc, relation="referenced") == sorted([(r1, "referenced"), (r2, "referenced")],
                                                                key=lambda r: tkey(r[0]))
    assert store.incoming(doc, relation="x-quoted") == [(r2, "x-quoted")]
    assert store.incoming(doc, relation="spawned_from") == [(s1, "spawned_from")]
    assert store.incoming(doc, relation="merged_from") == [(m1, "merged_from")]
    assert store.incoming(doc, relation="refer") == []  # a prefix of a relation is not that relation
    assert sorted(store.incoming(doc)) == sorted([(r1, "referenced"), (r2, "referenced"), (r2, "x-quoted"),
                                                  (s1, "spawned_from"), (m1, "merged_from")])
    assert store.children(doc) == [s1]


def test_links_added_later_and_links_projection(store: Store) -> None:
    a = make(store, new_id())
    b = make(store, new_id())
    store.append(a, [link(b, "referenced")])
    store.append(a, [link(b, "merged_from")])
    assert [(lk.thread_id, lk.relation) for lk in store.links(a)] == [(b, "referenced"), (b, "merged_from")]
    assert store.incoming(b) == [(a, "merged_from"), (a, "referenced")]  # ordered by relation


def test_links_to_unknown_threads_are_allowed_and_answered(store: Store) -> None:
    ghost_parent, ghost_ref = new_id(), "not-a-uuid-thread"
    t = make(store, new_id(), link(ghost_parent, "spawned_from"), link(ghost_ref, "referenced"))
    assert store.children(ghost_parent) == [t]
    assert store.incoming(ghost_ref) == [(t, "referenced")]
    assert store.descendants(ghost_parent) == [(t, 1)]
    assert store.children(ghost_ref) == []  # linked to (by a referenced link): known, no children
    assert store.incoming(ghost_parent) == [(t, "spawned_from")]


def test_a_thread_neither_stored_nor_linked_to_is_not_found(store: Store) -> None:
    make(store, new_id(), link(new_id(), "referenced"))
    for query in (store.children, store.incoming, store.descendants, store.links):
        with pytest.raises(NotFoundError, match="never-heard-of does not exist"):
            query("never-heard-of")


def test_uuid_case_is_one_thread(store: Store) -> None:
    parent = make(store, new_id())
    child = make(store, new_id(), link(parent.upper(), "spawned_from"))
    assert store.children(parent) == [child]
    assert store.incoming(parent.upper()) == [(child, "spawned_from")]


# --------------------------------------------------------------------------- descendants


def test_descendants_breadth_first_with_max_depth(store: Store) -> None:
    root = make(store, new_id())
    level1 = [make(store, new_id(), link(root, "spawned_from")) for _ in range(2)]
    level2 = [make(store, new_id(), link(p, "spawned_from")) for p in level1 for _ in range(2)]
    level3 = [make(store, new_id(), *spawn_turn()) for _ in range(1)]
    store.append(level2[0], spawn_turn(level3[0]))
    got = store.descendants(root)
    assert [d for _, d in got] == [1, 1, 2, 2, 2, 2, 3]
    assert {t for t, d in got if d == 1} == set(level1)
    assert {t for t, d in got if d == 2} == set(level2)
    assert [t for t, d in got if d == 3] == level3
    assert store.descendants(root, max_depth=1) == [(t, 1) for t in by_key(level1)]
    assert len(store.descendants(root, max_depth=2)) == 6
    assert store.descendants(root, max_depth=0) == []
    assert store.descendants(level3[0]) == []


def test_cycle_is_safe(store: Store) -> None:
    a, b, c = new_id(), new_id(), new_id()
    make(store, a, link(c, "spawned_from"))
    make(store, b, link(a, "spawned_from"))
    make(store, c, link(b, "spawned_from"))
    assert store.descendants(a) == [(b, 1), (c, 2)]
    assert store.descendants(b) == [(c, 1), (a, 2)]
    assert store.children(c) == [a]
    # A self-loop.
    s = make(store, new_id())
    store.append(s, [link(s, "spawned_from")])
    assert store.children(s) == [s]
    assert store.descendants(s) == []


def test_delete_drops_the_deleted_threads_edges(store: Store) -> None:
    parent = make(store, new_id())
    target = make(store, new_id())
    child = make(store, new_id(), link(parent, "spawned_from"), link(target, "referenced"))
    spawned = new_id()
    store.append(parent, spawn_turn(spawned))
    assert store.children(parent) == by_key([child, spawned])
    store.delete_thread(child)
    assert store.children(parent) == [spawned]
    assert store.incoming(target) == []
    store.delete_thread(parent)
    assert store.children(parent) == []


# --------------------------------------------------------------------------- a large generated graph


def test_generated_graph_matches_brute_force(tmp_path: Path) -> None:
    began = time.monotonic()
    rng = random.Random(20250120)
    n = 10_240
    ids = [new_id(rng) for _ in range(n)]
    unknown = [new_id(rng) for _ in range(200)] + [f"external-{i}" for i in range(50)]
    out_links: dict[int, list[tuple[str, str]]] = defaultdict(list)  # source index -> (target, relation)
    spawn_events: dict[int, list[str]] = defaultdict(list)  # parent index -> child ids (spawn messages)
    children_bf: dict[str, set[str]] = defaultdict(set)
    incoming_bf: dict[str, list[tuple[str, str]]] = defaultdict(list)
    seen_links: set[tuple[int, str, str]] = set()

    def add_link(src: int, target: str, rel: str) -> None:
        if (src, tkey(target).hex(), rel) in seen_links:
            return
        seen_links.add((src, tkey(target).hex(), rel))
        out_links[src].append((target, rel))
        incoming_bf[target].append((ids[src], rel))
        if rel == "spawned_from":
            children_bf[target].add(ids[src])

    # A spawn forest: each thread after the first few has a parent among the earlier ones,
    # stated by the child's link, the parent's spawn event, or both.
    for i in range(1, n):
        if i < 8:
            continue  # several roots
        p = rng.randrange(max(0, i - 400), i)
        how = rng.random()
        if how < 0.45 or how >= 0.9:
            add_link(i, ids[p], "spawned_from")
        if how >= 0.45:
            spawn_events[p].append(ids[i])
            children_bf[ids[p]].add(ids[i])
    # Spawn events naming threads that do not exist (allowed).
    for u in unknown[:40]:
        p = rng.randrange(n)
        spawn_events[p].append(u)
        children_bf[ids[p]].add(u)
    # Merges with several parents, references (some to unknown threads), a custom relation.
    for _ in range(1500):
        src = rng.randrange(n)
        for p in rng.sample(range(n), rng.randint(2, 4)):
            add_link(src, ids[p], "merged_from")
    for _ in range(3000):
        src = rng.randrange(n)
        target = rng.choice(unknown) if rng.random() < 0.1 else ids[rng.randrange(n)]
        add_link(src, target, rng.choice(["referenced", "referenced", "x-cites"]))
    def bfs(root: str, max_depth: int | None) -> dict[str, int]:
        depth = {root: 0}
        q = deque([root])
        while q:
            t = q.popleft()
            if max_depth is not None and depth[t] >= max_depth:
                continue
            for c in children_bf.get(t, ()):
                if c not in depth:
                    depth[c] = depth[t] + 1
                    q.append(c)
        del depth[root]
        return depth

    # Cycles: the first root becomes a child of its deepest descendant, and a self-loop.
    under0 = bfs(ids[0], None)
    deepest = max(under0, key=lambda t: (under0[t], tkey(t)))
    assert under0[deepest] >= 3
    add_link(0, deepest, "spawned_from")
    add_link(5, ids[5], "spawned_from")

    def events_of(i: int) -> list[Event]:
        evs: list[Event] = [started(ids[i])]
        evs += [link(t, r) for t, r in out_links.get(i, [])]
        if i in spawn_events:
            evs += spawn_turn(*spawn_events[i])
        return evs

    with Store(tmp_path / "graph", durability="relaxed", map_size=256 << 20) as store:
        with ThreadPoolExecutor(64) as pool:
            list(pool.map(lambda i: store.append(ids[i], events_of(i)), range(n)))
        built = time.monotonic() - began

        # Ids never stored nor named by any link or spawn event are not found.
        named = set(incoming_bf) | {c for kids in spawn_events.values() for c in kids}
        unknown, never = [u for u in unknown if u in named], [u for u in unknown if u not in named]
        assert unknown and never
        for tid in never:
            with pytest.raises(NotFoundError):
                store.children(tid)
            with pytest.raises(NotFoundError):
                store.incoming(tid)
        # children: every thread and every unknown target, exact order (by key).
        for tid in ids + unknown:
            assert store.children(tid) == by_key(children_bf.get(tid, set())), tid
        # incoming, all relations and per relation, exact order (relation, then source key).
        for tid in ids + unknown:
            want = sorted(incoming_bf.get(tid, []), key=lambda r: (r[1].encode(), tkey(r[0])))
            assert store.incoming(tid) == want, tid
        for tid in rng.sample(ids, 500) + unknown:
            for rel in ("spawned_from", "merged_from", "referenced", "x-cites"):
                want = sorted((s, r) for s, r in incoming_bf.get(tid, []) if r == rel)
                assert sorted(store.incoming(tid, relation=rel)) == want
        # links projection of a sample.
        for i in rng.sample(range(n), 300):
            assert [(lk.thread_id, lk.relation) for lk in store.links(ids[i])] == out_links.get(i, [])

        # descendants: from every root (the cycle runs through root 0) and from a sample.
        for root in ids[:8] + rng.sample(ids, 40):
            got = store.descendants(root)
            assert len(got) == len({t for t, _ in got})
            assert dict(got) == bfs(root, None)
            assert [d for _, d in got] == sorted(d for _, d in got)  # breadth-first
        for root in ids[:8]:
            for md in (1, 2, 3):
                assert dict(store.descendants(root, max_depth=md)) == bfs(root, md)
        # The cycle: root 0 is a child of its own deepest descendant; both walks end.
        assert (ids[0], 1) in store.descendants(deepest)
        around = dict(store.descendants(ids[0]))
        assert around[deepest] == under0[deepest] and ids[0] not in around
        assert set(around) == set(under0)
        # Every spawned thread hangs under one of the roots.
        reached = set().union(*(bfs(r, None) for r in ids[:8]))
        assert set(ids[8:]) <= reached
    print(f"graph test: {time.monotonic() - began:.1f}s (built in {built:.1f}s)")  # no bound: a loaded runner


# --------------------------------------------------------------------------- thread keys and the scan path


def _tkey_reference(thread_id: str) -> bytes:
    """tkey's original (unscoped) parse, by uuid.UUID: the fast path must agree with it exactly."""
    import hashlib

    if len(thread_id) == 36:
        try:
            u = uuid.UUID(thread_id)
        except ValueError:
            pass
        else:
            if str(u) == thread_id.lower():
                return u.bytes
    return hashlib.blake2b(b"tplog:" + thread_id.encode(), digest_size=16).digest()


def _outcome(f: Callable[[Any], bytes], x: Any) -> tuple[str, Any]:
    try:
        return "ok", f(x)
    except Exception as exc:
        return "error", (type(exc), str(exc))


_CANON = "0123abcd-4567-89ef-ABCD-0123456789aF"

_TKEY_CASES = [
    _CANON,
    _CANON.lower(),
    _CANON.upper(),
    str(uuid.UUID(int=0)),
    str(uuid.UUID(int=(1 << 128) - 1)).upper(),
    "urn:0123abcd456789efabcd0123456789af",  # 36 characters uuid.UUID accepts, not canonical
    "{0123abcd456789efabcd0123456789af}",
    "0123abcd456789efabcd0123456789af",
    "0123abcd-4567-89ef-abcd-0123456789af ",
    " 123abcd-4567-89ef-abcd-0123456789af",
    "0123abcd-4567-89ef-abcd-01234567 9af",
    "0123abcd-4567-89ef-abcd-01234567\t9af",
    "0123abcd-4567-89ef-abcd-0123456789a\n",
    "0123abc-d4567-89ef-abcd-0123456789af",  # hyphens moved
    "0123abcd-4567-89ef-abcd-0123-456789a",
    "0123abcd_4567_89ef_abcd_0123456789af",
    "0123abcd-4567-89ef-abcd-0123456_89af",
    "0123abcd-4567-89ef-abcd-+123456789af",
    "+123abcd-4567-89ef-abcd-0123456789af",
    "0123abcd-4567-89ef-abcd-0123456789ag",
    "0123abcd-4567-89ef-abcd-0123456789a\u0660",  # ARABIC-INDIC DIGIT ZERO (int() takes it)
    "0123abcd-4567-89ef-abcd-0123456789a\uff10",  # FULLWIDTH DIGIT ZERO
    "0123abcd-4567-89ef-abcd-0123456789a\uff21",  # FULLWIDTH A
    "0123abcd-4567-89ef-abcd-0123456789a\u212a",  # KELVIN SIGN (lowercases to ASCII k)
    "0123abcd-4567-89ef-abcd-0123456789a\u0130",  # I WITH DOT (lowercases to two characters)
    "0123abcd\u20104567-89ef-abcd-0123456789af",  # Unicode hyphen
    "0123abcd-4567-89ef-abcd-0123456789af0",
    "0123abcd-4567-89ef-abcd-0123456789a",
    "------------------------------------",
    "0123abcd-4567-89ef-abcd-0123456789a\ud800",  # lone surrogate: both raise on encode
    "",
    "thread-1",
    "x" * 36,
]


@pytest.mark.parametrize("tid", _TKEY_CASES)
def test_tkey_fast_parse_matches_the_uuid_parse(tid: str) -> None:
    assert _outcome(tkey, tid) == _outcome(_tkey_reference, tid)


@pytest.mark.parametrize("bad", [None, 42, b"0123abcd-4567-89ef-abcd-0123456789af", bytearray(36), ["x"] * 36])
def test_tkey_rejects_non_strings_as_before(bad: Any) -> None:
    assert _outcome(tkey, bad)[0] == "error"
    assert _outcome(tkey, bad) == _outcome(_tkey_reference, bad)


class _Str(str):
    pass


def test_tkey_of_a_str_subclass_is_the_same_key() -> None:
    assert tkey(_Str(_CANON)) == tkey(_CANON) == uuid.UUID(_CANON).bytes
    assert tkey(_Str("thread-1")) == tkey("thread-1")


def test_tkey_code_points_in_every_position_class() -> None:
    """Code points at the start, a hyphen, a segment start and the end of a canonical id: every
    one below U+3000 and in the halfwidth/fullwidth forms, a sample of the rest (all of them
    with TPLOG_TEST_EXHAUSTIVE=1)."""
    import sys

    every = os.environ.get("TPLOG_TEST_EXHAUSTIVE") == "1"
    points = [cp for cp in range(sys.maxunicode + 1) if every or cp < 0x3000 or 0xFF00 <= cp <= 0xFFFF or cp % 97 == 0]
    for cp in points:
        c = chr(cp)
        for pos in (0, 8, 9, 35):
            tid = _CANON[:pos] + c + _CANON[pos + 1 :]
            assert _outcome(tkey, tid) == _outcome(_tkey_reference, tid), (cp, pos)


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(
        st.uuids().map(str),
        st.uuids().map(lambda u: str(u).upper()),
        st.text(min_size=36, max_size=36),
        st.text(alphabet="0123456789abcdefABCDEF-_ {}+:urnid\u0660\uff10\u212a", min_size=30, max_size=40),
        st.tuples(st.uuids().map(str), st.integers(0, 35), st.characters()).map(
            lambda t: t[0][: t[1]] + t[2] + t[0][t[1] + 1 :]
        ),
    )
)
def test_tkey_fast_parse_matches_the_uuid_parse_generated(tid: str) -> None:
    assert _outcome(tkey, tid) == _outcome(_tkey_reference, tid)


def test_engine_scan_is_range_in_one_read(store: Store) -> None:
    rng = random.Random(7)
    parents = [make(store, new_id(rng)) for _ in range(5)]
    for _ in range(60):
        make(store, new_id(rng), link(rng.choice(parents), "spawned_from"), link(rng.choice(parents), "referenced"))
    eng = store.backend.engine
    with eng.read() as txn:
        for table in ("children", "links_in", "heads"):
            keys = [k for k, _ in txn.range(table)]
            bounds = [b"", b"\xff" * 40, *rng.sample(keys, 10), *(k[:16] for k in rng.sample(keys, 10))]
            for _ in range(60):
                a, b = rng.choice(bounds), rng.choice(bounds)
                for limit in (None, 0, 1, 3):
                    want = list(txn.range(table, a, b))
                    want = want if limit is None else want[:limit]
                    assert eng.scan(table, a, b, limit=limit) == want
                    assert eng.scan(table, a, b, limit=limit, txn=txn) == want
    assert eng._rw._readers == 0


def test_engine_scan_check_runs_in_the_scan_and_errors_release_the_reader(store: Store) -> None:
    parent = make(store, new_id())
    child = make(store, new_id(), link(parent, "spawned_from"))
    eng = store.backend.engine
    seen: list[Any] = []
    rows = eng.scan("children", tkey(parent), tkey(parent) + b"\xff" * 17, check=lambda txn: seen.append(
        txn.get("heads", tkey(child)) is not None))
    assert seen == [True] and len(rows) == 1

    def boom(txn: Any) -> None:
        raise RuntimeError("check failed")

    with pytest.raises(RuntimeError, match="check failed"):
        eng.scan("children", b"", b"\xff", check=boom)
    assert eng._rw._readers == 0
    eng._grow()  # a resize is not held off by a reader left behind
    store.append(child, [link(parent, "referenced")])
    assert store.incoming(parent) == [(child, "referenced"), (child, "spawned_from")]


def test_links_queries_raise_when_the_projection_is_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tplog.backends.lmdb import projections as proj
    from tplog.errors import RebuildRequiredError

    path = tmp_path / "s"
    with Store(path) as s:
        parent = make(s, new_id())
        make(s, new_id(), link(parent, "spawned_from"))
    monkeypatch.setitem(proj.VERSIONS, "links", 99)
    with Store(path) as s:
        for query in (s.children, s.incoming, s.descendants):
            with pytest.raises(RebuildRequiredError, match="--projection links"):
                query(parent)
        assert s.descendants(parent, max_depth=0) == []  # no walk, no query (as before)
        assert s.backend.engine._rw._readers == 0


def test_scan_adopts_a_map_grown_by_another_process(store: Store) -> None:
    import lmdb

    parent = make(store, new_id())
    child = make(store, new_id(), link(parent, "spawned_from"))
    eng = store.backend.engine
    real = eng._env
    calls = {"begin": 0, "adopted": 0}

    class Env:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def begin(self, **kw: Any) -> Any:
            calls["begin"] += 1
            if calls["begin"] == 1:
                raise lmdb.MapResizedError("grown elsewhere")
            return real.begin(**kw)

        def set_mapsize(self, n: int) -> None:
            calls["adopted"] += 1
            real.set_mapsize(n)

    eng._env = Env()
    try:
        assert store.children(parent) == [child]
    finally:
        eng._env = real
    assert calls == {"begin": 2, "adopted": 1}
    assert eng._rw._readers == 0


def test_links_queries_while_the_map_grows(tmp_path: Path) -> None:
    """Queries in threads (the scan path) while appends grow a tiny map many times."""
    s = Store(tmp_path / "s", durability="relaxed", map_size=64 * 1024)
    try:
        root = make(s, new_id())
        done = False
        errors: list[BaseException] = []

        def query() -> int:
            n = 0
            while not done:
                try:
                    kids = s.children(root)
                    assert len(kids) >= n
                    assert all(r == "spawned_from" for _, r in s.incoming(root))
                    time.sleep(0.001)  # leave the appender the GIL
                    n = len(kids)
                except BaseException as exc:
                    errors.append(exc)
                    raise
            return n

        with ThreadPoolExecutor(3) as ex:
            futs = [ex.submit(query) for _ in range(3)]
            map0 = s.stats()["map_size"]
            kids = [make(s, new_id(), link(root, "spawned_from")) for _ in range(300)]
            done = True
            for f in futs:
                f.result()
        assert not errors
        assert s.stats()["map_size"] > map0
        assert sorted(s.children(root)) == sorted(kids)
        assert [t for t, _ in s.descendants(root)] == s.children(root)
    finally:
        s.close()


# --------------------------------------------------------------------------- links declared at the start


def started_with(tid: str, *links: tuple[str, str]) -> ThreadStarted:
    """A ThreadStarted declaring ``links`` in its relationships (not as LinkAdded events)."""
    rel = m.ThreadRelationships(links=[m.ThreadLink(thread_id=t, relation=r) for t, r in links])
    return ThreadStarted(thread_id=tid, created_at=T, relationships=rel)


def test_links_declared_in_thread_started_are_indexed(store: Store) -> None:
    parent, ref = make(store, new_id()), make(store, new_id())
    child = new_id()
    # Three links of one ThreadStarted (seq 1) to the same target and relation: none collide.
    store.append(child, [started_with(child, (parent, "spawned_from"), (ref, "referenced"), (ref, "referenced"),
                                      (ref, "referenced")), link(ref, "merged_from")])
    assert [(lk.thread_id, lk.relation) for lk in store.links(child)] == [
        (parent, "spawned_from"), (ref, "referenced"), (ref, "referenced"), (ref, "referenced"), (ref, "merged_from")]
    exported = store.export(child).relationships
    assert isinstance(exported, m.ThreadRelationships)
    assert exported.links == store.links(child)  # the order the export shows
    assert store.children(parent) == [child]
    assert store.descendants(parent) == [(child, 1)]
    assert store.incoming(ref) == [(child, "merged_from")] + [(child, "referenced")] * 3
    assert store.incoming(ref, relation="referenced", limit=1) == [(child, "referenced")] * 3  # one pair, whole
    assert store.head(child).links == 5
    assert all(r.differences == [] for r in store.rebuild(verify=True))
    assert verify_store(store).ok
    store.rebuild()
    assert store.incoming(ref) == [(child, "merged_from")] + [(child, "referenced")] * 3
    assert store.children(parent) == [child]
    # Deleting the thread removes every row its declared links made.
    store.delete_thread(child)
    assert store.children(parent) == [] and store.incoming(ref) == [] and store.incoming(parent) == []
    assert all(r.differences == [] for r in store.rebuild(verify=True))


def test_declared_link_relations_are_checked_like_added_ones(store: Store) -> None:
    tid = new_id()
    with pytest.raises(InvalidInputError, match=r"relationships\.links\[1\] relation contains a NUL"):
        store.append(tid, [started_with(tid, (new_id(), "referenced"), (new_id(), "bad\x00rel"))])
    with pytest.raises(InvalidInputError, match=r"relationships\.links\[0\] relation is 401 bytes"):
        store.append(tid, [started_with(tid, (new_id(), "r" * 401))])
    assert not store.exists(tid)


@st.composite
def linked_threads(draw: st.DrawFn) -> tuple[m.Thread, int, list[str]]:
    """A generated thread document carrying links of every kind: its own generated
    links plus some to a small pool of targets (itself included, so several links
    share a target and relation), spawn events naming pool threads; and how many of
    its links are declared in ThreadStarted (the rest recorded as LinkAdded)."""
    doc = draw(thread_models())
    pool = [doc.thread_id, *draw(st.lists(st.uuids().map(str), min_size=1, max_size=3, unique=True))]
    rel = doc.relationships
    own = list(rel.links) if isinstance(rel, m.ThreadRelationships) and isinstance(rel.links, list) else []
    extra = draw(st.lists(st.builds(lambda t, r: m.ThreadLink(thread_id=t, relation=r), st.sampled_from(pool),
                                    st.sampled_from(["spawned_from", "referenced", "x-cites"])), max_size=5))
    links = draw(st.permutations([*own, *extra]))
    turns = list(doc.turns)
    spawned = draw(st.lists(st.sampled_from(pool), max_size=3))
    if spawned:
        agent = next(iter(doc.agents))
        msgs = [m.SystemMessage(timestamp=T, event_type=m.THREAD_SPAWN, event_data={"spawned_thread_id": c})
                for c in spawned]
        turns.append(m.AgentTurn(agent_id=agent, started_at=T, messages=msgs, completion_status="complete"))
    base = rel if isinstance(rel, m.ThreadRelationships) else m.ThreadRelationships()
    doc = msgspec.structs.replace(doc, turns=turns, relationships=msgspec.structs.replace(base, links=links))
    return doc, draw(st.integers(0, len(links))), pool


def spawned_by(doc: m.Thread) -> set[str]:
    """The threads a document's spawn events name (ThreadProtocol: data-tp-thread_spawn
    or v0.0.3 thread.spawn, ``spawned_thread_id`` or else ``thread_id``)."""
    out = set()
    for turn in doc.turns:
        for msg in turn.messages if isinstance(turn, m.AgentTurn) else []:
            if (isinstance(msg, m.SystemMessage) and msg.event_type in (m.THREAD_SPAWN, "thread.spawn")
                    and isinstance(msg.event_data, dict)):
                sid = msg.event_data.get("spawned_thread_id", msg.event_data.get("thread_id"))
                if isinstance(sid, str):
                    out.add(sid)
    return out


@settings(THREAD_SETTINGS, max_examples=60)
@given(linked_threads())
def test_every_link_a_thread_carries_is_in_the_index(case: tuple[m.Thread, int, list[str]]) -> None:
    doc, declared, pool = case
    tid = doc.thread_id
    rel = doc.relationships
    assert isinstance(rel, m.ThreadRelationships) and isinstance(rel.links, list)
    carried = rel.links
    with tempfile.TemporaryDirectory() as d, Store(Path(d) / "s", durability="relaxed") as store:
        if declared == 0:
            store.import_thread(doc)  # every link as a LinkAdded event
        else:  # the first `declared` links kept in the ThreadStarted, the rest added
            events = events_from_thread(doc)
            first = events[0]
            assert isinstance(first, ThreadStarted) and isinstance(first.relationships, m.ThreadRelationships)
            events[0] = msgspec.structs.replace(
                first, relationships=msgspec.structs.replace(first.relationships, links=carried[:declared]))
            skip = {id(e) for e in events if isinstance(e, LinkAdded)}
            added = [LinkAdded(link=lk) for lk in carried[declared:]]
            at = next(i for i, e in enumerate(events) if id(e) in skip) if skip else len(events)
            events = [*events[:at], *added, *(e for e in events[at:] if id(e) not in skip)]
            store.append(tid, events)
        spawned = spawned_by(doc)
        targets = {lk.thread_id for lk in carried} | set(pool) | spawned

        def check() -> None:
            assert store.links(tid) == carried
            assert store.export(tid).relationships == rel
            for t in targets:
                if not store.exists(t) and t not in {lk.thread_id for lk in carried} and t not in spawned:
                    with pytest.raises(NotFoundError):
                        store.children(t)
                    continue
                kids = {tid} if any(lk.thread_id == t and lk.relation == "spawned_from" for lk in carried) else set()
                if t == tid:
                    kids |= spawned
                assert store.children(t) == by_key(kids), t
                want = sorted(((tid, lk.relation) for lk in carried if tkey(lk.thread_id) == tkey(t)),
                              key=lambda p: p[1].encode())
                assert store.incoming(t) == want, t

        check()
        assert verify_store(store).ok
        store.rebuild()
        check()
        assert verify_store(store).ok


def test_verify_reports_a_missing_declared_link_and_rebuild_repairs_it(tmp_path: Path) -> None:
    import lmdb

    path = tmp_path / "s"
    parent, child = new_id(), new_id()
    with Store(path) as s:
        make(s, parent)
        s.append(child, [started_with(child, (parent, "referenced"), (parent, "referenced"))])
    # Lose the first of the two declared links' rows, as an index written before they were indexed would.
    env = lmdb.open(str(path), max_dbs=20)
    with env.begin(write=True) as txn:
        db = env.open_db(b"links_in", txn=txn)
        keys = [bytes(k) for k, _ in txn.cursor(db=db)]
        assert len(keys) == 2
        assert txn.delete(keys[0], db=db)
    env.close()
    with Store(path) as s:
        assert s.incoming(parent) == [(child, "referenced")]
        rep = verify_store(s)
        assert [p for p in rep.problems if "declared link 0" in p and "live absent" in p], rep.problems
    assert main(["verify", str(path)]) == 1
    assert main(["rebuild", str(path), "--verify"]) == 1  # reports, repairs nothing
    assert main(["verify", str(path)]) == 1
    assert main(["rebuild", str(path), "--projection", "links"]) == 0
    with Store(path) as s:
        assert s.incoming(parent) == [(child, "referenced")] * 2
        assert verify_store(s).ok


def test_a_store_indexed_before_declared_links_says_rebuild(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A store written by a tplog that did not index declared links (links projection
    version 1) has them missing: its queries say to rebuild, and the rebuild adds them."""
    import lmdb
    import msgspec as ms

    path = tmp_path / "s"
    parent, child = new_id(), new_id()
    with Store(path) as s:
        make(s, parent)
        s.append(child, [started_with(child, (parent, "spawned_from"))])
        position = s.last_position
    env = lmdb.open(str(path), max_dbs=20)
    with env.begin(write=True) as txn:  # what version 1 left: no rows for the declared link
        for name in (b"links_in", b"children"):
            txn.drop(env.open_db(name, txn=txn), delete=False)
        txn.put(b"proj:links", ms.msgpack.encode([1, position, "live"]), db=env.open_db(b"meta", txn=txn))
    env.close()
    with Store(path) as s:
        assert s.projections()["links"]["status"] == "stale"
        for query in (s.children, s.incoming, s.descendants):
            with pytest.raises(RebuildRequiredError, match="--projection links"):
                query(parent)
        assert any("projection 'links' is stale" in p for p in verify_store(s).problems)
    assert main(["rebuild", str(path), "--projection", "links"]) == 0
    capsys.readouterr()
    with Store(path) as s:
        assert s.projections()["links"]["status"] == "live"
        assert s.children(parent) == [child]
        assert s.incoming(parent) == [(child, "spawned_from")]
        assert verify_store(s).ok


# --------------------------------------------------------------------------- deleted threads


def test_a_deleted_thread_is_nobodys_child(store: Store) -> None:
    parent, other = make(store, new_id()), make(store, new_id())
    by_link = make(store, new_id(), link(parent, "spawned_from"))
    by_event = new_id()
    store.append(parent, spawn_turn(by_event))
    store.append(other, spawn_turn(by_event))  # two parents name it
    both = make(store, new_id(), link(parent, "spawned_from"))
    store.append(parent, spawn_turn(both))
    grandchild = make(store, new_id(), link(by_event, "spawned_from"))
    store.append(by_event, [started(by_event)])
    assert store.children(parent) == by_key([by_link, by_event, both])
    assert store.descendants(parent) == [*((c, 1) for c in by_key([by_link, by_event, both])), (grandchild, 2)]
    for gone in (by_event, both):
        store.delete_thread(gone)
    assert store.children(parent) == [by_link]
    assert store.children(other) == []
    assert store.descendants(parent) == [(by_link, 1)]
    # Named again by a spawn event after its deletion: still nobody's child.
    store.append(parent, spawn_turn(by_event))
    assert store.children(parent) == [by_link]
    # A deleted parent's live children (their spawned_from link is their history) are still
    # listed, and so is an outgoing link to a deleted thread.
    assert store.children(by_event) == [grandchild]
    assert [(lk.thread_id, lk.relation) for lk in store.links(grandchild)] == [(by_event, "spawned_from")]
    assert store.incoming(by_event) == [(grandchild, "spawned_from")]
    assert store.links(by_event) == []  # a deleted thread has no links
    assert all(r.differences == [] for r in store.rebuild(verify=True))
    assert verify_store(store).ok
    store.rebuild()
    assert store.children(parent) == [by_link] and store.children(other) == []


def test_async_store_links_queries_say_not_found(tmp_path: Path) -> None:
    import asyncio

    from tplog import AsyncStore

    async def run() -> None:
        async with await AsyncStore.open(tmp_path / "s") as s:
            for query in (s.children, s.incoming, s.descendants, s.links):
                with pytest.raises(NotFoundError):
                    await query(new_id())

    asyncio.run(run())
