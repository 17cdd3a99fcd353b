"""Random thread families against a brute force, on every backend: ``incoming()``,
``children()`` and ``has_spawned()`` of every thread equal what the same threads stored as
plain copies would give (computed here from each thread's *materialised* events), and the
rebuilt projections and ``verify`` agree.

A family is drawn as a sequence of steps over a small pool of thread ids (so ids collide
often: a fork named in its parent's spawn messages, links to threads not created yet):
roots with declared links, whole turns that add links or spawn threads, forks at any turn
boundary (forks of forks, forks at a parent's end), plain copies, cascading deletes and
rebuilds; targets named, and threads appended to, under either case of their ids. The
reference (:class:`Family`) holds each thread's events as a copy would hold them; the brute
force reads links and spawn facts from those with :func:`tplog.backends.common.outgoing`
and :func:`tplog.codec.facts_of`.

Seeded (``derandomize``): the default run checks the same families every time.
``TPLOG_FORK_PROP_EXAMPLES=N`` draws more (``--soak`` draws 400).
"""

from __future__ import annotations

import itertools
import os
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import agent_start, completed, exchange, link, spawn_message, started, user
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tplog import Store
from tplog.backends.common import outgoing, thread_key
from tplog.codec import facts_of
from tplog.copy import copy_store
from tplog.errors import NotFoundError
from tplog.protocol import model as m

SOAK = "--soak" in sys.argv
EXAMPLES = int(os.environ.get("TPLOG_FORK_PROP_EXAMPLES", "400" if SOAK else "0")) or None
RELATIONS = ["referenced", "spawned_from", "continues"]
POOL = 9  # thread ids per family: few enough that they collide often
_schemas = itertools.count()


@contextmanager
def open_store(kind: str, base: Path) -> Iterator[Store]:
    if kind == "memory":
        s = Store("memory:", check_rules=False)
    elif kind == "lmdb":
        s = Store(base / "store", check_rules=False)
    else:
        import psycopg
        from contract_helpers import pg_dsn

        schema = f"fp{os.getpid()}_{next(_schemas)}"
        s = Store(f"{pg_dsn()}?schema={schema}&logs=3", check_rules=False)
    try:
        yield s
    finally:
        s.close()
        if kind == "postgres":
            with psycopg.connect(pg_dsn(), autocommit=True) as c:
                c.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE".encode())


class Family:
    """The reference: each live thread's events as a plain copy would hold them."""

    def __init__(self, scope: str | None) -> None:
        self.scope = scope
        self.ids = [str(uuid.uuid4()) for _ in range(POOL)]
        self.events: dict[str, list[Any]] = {}
        self.boundaries: dict[str, list[int]] = {}  # seqs where no agent turn is open
        self.fork_of: dict[str, str] = {}  # live forks
        self.deleted: set[str] = set()
        self.log: list[str] = []  # the steps, for the failure message

    def story(self) -> str:
        return "\n".join(["steps (threads by pool index):", *self.log])

    def key(self, t: str) -> bytes:
        return thread_key(t, self.scope)

    def stored(self) -> set[str]:
        return set(self.events) | self.deleted

    def fresh(self) -> list[str]:
        return [t for t in self.ids if t not in self.stored()]

    def add(self, t: str, evs: list[Any]) -> None:
        self.events.setdefault(t, []).extend(evs)
        self.boundaries.setdefault(t, []).append(len(self.events[t]))

    def spawned_by(self, t: str) -> list[str]:
        return [c for ev in self.events[t] if (f := facts_of(ev)) is not None for c in f.spawned]

    def delete(self, t: str) -> None:
        """``delete_thread(t, cascade=True)``: its live forks (and theirs) go first."""
        for f in [f for f, p in self.fork_of.items() if p == t]:
            if f in self.events:
                self.delete(f)
        del self.events[t], self.boundaries[t]
        self.fork_of.pop(t, None)
        self.deleted.add(t)


def brute(fam: Family) -> tuple[dict[bytes, list[tuple[bytes, str]]], dict[bytes, list[bytes]], set[bytes]]:
    """incoming (source key, relation), children (keys), by thread key, and the keys every live
    thread's events name. Keys, not spellings: targets are named in either case."""
    inc: dict[bytes, list[tuple[bytes, bytes, int, str, str]]] = {}
    kids: dict[bytes, dict[bytes, str]] = {}
    named: set[bytes] = set()
    key = fam.key
    dead = {key(t) for t in fam.deleted}
    for src, evs in fam.events.items():
        sk = key(src)
        for seq, ev in enumerate(evs, 1):
            for ordinal, lk in outgoing(seq, ev):
                tk = key(lk.thread_id)
                named.add(tk)
                inc.setdefault(tk, []).append((lk.relation.encode(), sk, ordinal, src, lk.relation))
                if lk.relation == "spawned_from":
                    kids.setdefault(tk, {})[sk] = src
            f = facts_of(ev)
            for child in f.spawned if f is not None else ():
                ck = key(child)
                named.add(ck)
                if ck not in dead:  # a deleted thread is nobody's child
                    kids.setdefault(sk, {})[ck] = child
    return ({k: [(r[1], r[4]) for r in sorted(v)] for k, v in inc.items()},
            {k: sorted(v) for k, v in kids.items()}, named)


def check(s: Store, fam: Family) -> None:
    inc, kids, named = brute(fam)
    for t in fam.ids:
        tk = fam.key(t)
        known = t in fam.stored() or tk in named
        for verb, want in (("incoming", inc.get(tk, [])), ("children", kids.get(tk, []))):
            try:
                got: Any = getattr(s, verb)(t)
            except NotFoundError:
                got = None
            else:
                got = [(fam.key(x), r) for x, r in got] if verb == "incoming" else [fam.key(x) for x in got]
            assert got == (want if known else None), (verb, fam.ids.index(t), fam.story())
            if got:
                assert pages(s, verb, t) == getattr(s, verb)(t), (verb, fam.ids.index(t), fam.story())
        if t in fam.events:
            assert [e.event for e in s.read(t)] == fam.events[t], (fam.ids.index(t), fam.story())
            spawns = any(fam.key(c) not in {fam.key(d) for d in fam.deleted} for c in fam.spawned_by(t))
            assert s.backend.has_spawned(t, scope=s.scope) == spawns, (fam.ids.index(t), fam.story())


def pages(s: Store, verb: str, t: str) -> list[Any]:
    """``verb``'s answer for ``t`` read a page of one at a time (a page never ends inside a pair)."""
    out: list[Any] = []
    while True:
        page = getattr(s, verb)(t, limit=1, after=out[-1] if out else None)
        if not page:
            return out
        out += page


def spawn(s: Store, fam: Family, t: str, child: str) -> None:
    evs = [user("spawn?"), agent_start(), spawn_message(child), completed()]
    s.append(t, evs)
    fam.add(t, evs)
    fam.log.append(f"spawn {fam.ids.index(t)} -> {fam.ids.index(child.lower())}")


def step(s: Store, fam: Family, data: st.DataObject) -> None:
    live = [t for t in fam.ids if t in fam.events]  # pool order: the same draws pick the same threads
    fresh = fam.fresh()
    ops = (["root"] if fresh else []) + (["turn", "turn", "fork", "fork"] if live else []) + (
        ["copy", "delete", "rebuild"] if live and fresh else [])
    op = data.draw(st.sampled_from(ops))
    name = fam.ids.index
    if op == "root":
        t = data.draw(st.sampled_from(fresh))
        declared = data.draw(st.lists(st.tuples(st.sampled_from(fam.ids), st.sampled_from(RELATIONS)), max_size=2))
        rel = m.ThreadRelationships(links=[m.ThreadLink(thread_id=x, relation=r) for x, r in declared]) \
            if declared else None
        evs: list[Any] = [started(t, relationships=rel)]
        s.append(t, evs)
        fam.add(t, evs)
        fam.log.append(f"root {name(t)} declares {[(name(x), r) for x, r in declared]}")
    elif op == "turn":
        t = data.draw(st.sampled_from(live))
        what = data.draw(st.sampled_from(["exchange", "link", "spawn"]))
        target = data.draw(st.sampled_from(fam.ids))
        target = target.upper() if data.draw(st.booleans()) else target  # any case names the same thread
        if what == "spawn":
            spawn(s, fam, t, target)
            return
        evs = exchange("q", "a") if what == "exchange" else [link(target, data.draw(st.sampled_from(RELATIONS)))]
        # Unscoped, a UUID in any case names the same thread: append under either (scoped keys hash the text).
        s.append(t.upper() if fam.scope is None and data.draw(st.booleans()) else t, evs)
        fam.add(t, evs)
        fam.log.append(f"{what} {name(t)} -> {name(target.lower())}")
    elif op == "fork":
        parent = data.draw(st.sampled_from(live))
        if fresh and data.draw(st.booleans()):  # spawn a fresh id, then fork under that id: a spawned fork
            spawn(s, fam, parent, data.draw(st.sampled_from(fresh)))
        # Half the time at the parent's end (the path that probes has_spawned instead of reading).
        ends = fam.boundaries[parent]
        at = ends[-1] if data.draw(st.booleans()) else data.draw(st.sampled_from(ends))
        # Often an id the parent's spawn messages name: a fork that is also its parent's spawned child.
        named = [c.lower() for c in fam.spawned_by(parent) if c.lower() in fresh]
        f = data.draw(st.sampled_from(named or fresh) if named or fresh else st.none())
        if f is None:
            return
        s.fork(parent, at, new_thread_id=f)
        first = s.read(f, limit=1)[0].event
        # What fork() declares: spawned_from the parent, then the parent's other declared links.
        assert [(lk.thread_id, lk.relation) for _, lk in outgoing(1, first)] == [(parent, "spawned_from"), *(
            (lk.thread_id, lk.relation) for _, lk in outgoing(1, fam.events[parent][0])
            if lk.relation != "spawned_from")], fam.story()
        fam.events[f] = [first, *fam.events[parent][1:at]]
        fam.boundaries[f] = [b for b in fam.boundaries[parent] if b <= at]
        fam.fork_of[f] = parent
        fam.log.append(f"fork {name(parent)} at {at} -> {name(f)}")
    elif op == "copy":
        src, c = data.draw(st.sampled_from(live)), data.draw(st.sampled_from(fresh))
        evs = fam.events[src]
        copied = [msgspec.structs.replace(evs[0], thread_id=c), *evs[1:]]
        s.append(c, copied)
        fam.events[c], fam.boundaries[c] = copied, list(fam.boundaries[src])
        fam.log.append(f"copy {name(src)} -> {name(c)}")
    elif op == "delete":
        t = data.draw(st.sampled_from(live))
        s.delete_thread(t, cascade=True)
        fam.delete(t)
        fam.log.append(f"delete {name(t)}")
    else:
        check(s, fam)  # so that a rebuild cannot hide a wrong row written before it
        chunk = data.draw(st.sampled_from([2, 7, 20_000]))  # a fork's start may end a chunk
        s.rebuild(chunk=chunk)
        fam.log.append(f"rebuild (chunk {chunk})")


def _family(s: Store, data: st.DataObject) -> tuple[Store, Family]:
    if data.draw(st.booleans()):  # a scoped view: every key is the scope's own
        s = s.scoped("tenant")
    fam = Family(s.scope)
    for _ in range(data.draw(st.integers(4, 16))):
        step(s, fam, data)
    check(s, fam)
    return s, fam


@pytest.mark.parametrize("kind", ["memory", "lmdb", "postgres"])
def test_links_of_random_fork_families_match_a_brute_force(kind: str, tmp_path: Path) -> None:
    """Every family's links are checked as drawn; then the whole store is rebuilt, checked
    against a fresh rebuild (``verify=True``) and ``verify``-ed, checked again, and copied
    into a store of another backend (``tplog copy``), where every family is checked too."""
    families: list[tuple[Store, Family]] = []
    n = EXAMPLES or {"memory": 100, "lmdb": 40, "postgres": 20}[kind]
    with open_store(kind, tmp_path) as s:
        @settings(max_examples=n, deadline=None, derandomize=not SOAK, database=None,
                  phases=[Phase.explicit, Phase.generate, Phase.shrink], suppress_health_check=list(HealthCheck))
        @given(st.data())
        def run(data: st.DataObject) -> None:
            families.append(_family(s, data))

        run()
        assert [r.differences for r in s.rebuild(verify=True)] == [[], []]
        assert s.verify().problems == []
        s.rebuild()
        for view, fam in families:
            check(view, fam)
        # `tplog copy` re-creates forks as forks in another store (its own inherited rows): the same answers.
        with open_store("memory" if kind != "memory" else "lmdb", tmp_path / "copy") as dest:
            for scope in (None, "tenant"):
                src_v, dest_v = (s, dest) if scope is None else (s.scoped(scope), dest.scoped(scope))
                report = copy_store(src_v, dest_v)
                assert report.ok, report.mismatches
            for _, fam in families:
                check(dest if fam.scope is None else dest.scoped(fam.scope), fam)
            assert dest.verify().problems == []
