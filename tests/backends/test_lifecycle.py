"""Thread lifecycle on every backend (memory, lmdb, postgres): find threads by what they are.

``Store`` over each backend, since the filters are checked in the facade and
answered by the backend's indexes (tplog.lifecycle, tplog.backends.lmdb.finder,
the PostgreSQL heads columns).
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import T, agent_start, completed, exchange, link, register, response, started, user

from tplog import Store
from tplog.errors import InvalidInputError
from tplog.events import AgentTurnCompleted, AgentTurnInterrupted, ThreadInfoChanged
from tplog.protocol import model as m

BACKENDS = ["memory", "lmdb", "postgres"]
_schemas = itertools.count()


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "memory":
        s = Store("memory:", check_rules=False)
        yield s
        s.close()
    elif request.param == "lmdb":
        s = Store(tmp_path / "store", check_rules=False)
        yield s
        s.close()
    else:
        import psycopg
        from contract_helpers import pg_dsn

        schema = f"lc{os.getpid()}_{next(_schemas)}"
        s = Store(f"{pg_dsn()}?schema={schema}", check_rules=False)
        try:
            yield s
        finally:
            s.close()
            with psycopg.connect(pg_dsn(), autocommit=True) as c:
                c.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE".encode())


def tid() -> str:
    return str(uuid.uuid4())


def interrupted() -> AgentTurnInterrupted:
    return AgentTurnInterrupted(interruption=m.Interruption(reason="user_cancelled", interrupted_at=T))


def deferred(kinds: dict[str, str]) -> AgentTurnCompleted:
    return AgentTurnCompleted(completed_at=T, deferred=kinds)


def ids(page: Any) -> list[str]:
    return [h.thread_id for h in page.threads]


def every(s: Store, **filters: Any) -> list[str]:
    """All pages of a filtered listing, two threads per page (paging is part of the check)."""
    out: list[str] = []
    after = None
    while True:
        page = s.threads(limit=2, after=after, **filters)
        out += ids(page)
        after = page.cursor
        if after is None:
            return out


def build(s: Store) -> dict[str, str]:
    """One thread per activity (created in this order, so the newest is last)."""
    t = {k: tid() for k in ("idle", "active", "interrupted", "tools", "approval", "resumed")}
    s.append(t["idle"], [started(t["idle"], title="Weekly report", metadata={"team": "red", "n": 3}),
                         register("writer"), *exchange(agent="writer")])
    s.append(t["active"], [started(t["active"], title="Bug triage"), register(), user(), agent_start(), response()])
    s.append(t["interrupted"], [started(t["interrupted"], metadata={"team": "blue"}), register("coder"), user(),
                                agent_start("coder"), interrupted()])
    s.append(t["tools"], [started(t["tools"]), user(), agent_start(), response(), deferred({"c1": "external"})])
    s.append(t["approval"], [started(t["approval"]), user(), agent_start(), response(),
                             deferred({"c1": "external", "c2": "approval"})])
    # Interrupted, then a new user turn: idle again.
    s.append(t["resumed"], [started(t["resumed"], title="weekly sync"), user(), agent_start("coder"), interrupted(),
                            user()])
    return t


def test_status_filters(store: Store) -> None:
    t = build(store)
    assert every(store, activity="running") == [t["active"]]
    assert every(store, activity="interrupted") == [t["interrupted"]]
    assert every(store, activity="waiting_tools") == [t["tools"]]
    assert every(store, activity="waiting_approval") == [t["approval"]]
    assert every(store, activity="idle") == [t["resumed"], t["idle"]]
    # Several statuses: any of them, still newest update first.
    assert every(store, activity=["waiting_tools", "interrupted", "waiting_approval"]) == [
        t["approval"], t["tools"], t["interrupted"]]
    # An update moves a thread between statuses (its index entries follow the head).
    store.append(t["active"], [completed()])
    assert every(store, activity="running") == []
    assert every(store, activity="idle") == [t["active"], t["resumed"], t["idle"]]
    assert store.head(t["active"]).activity == "idle"


def test_agent_title_metadata_filters(store: Store) -> None:
    t = build(store)
    assert every(store, agent="coder") == [t["resumed"], t["interrupted"]]
    assert every(store, agent="writer") == [t["idle"]]
    assert every(store, agent="nobody") == []
    assert every(store, title="WEEKLY") == [t["resumed"], t["idle"]]
    assert every(store, metadata={"team": "red"}) == [t["idle"]]
    assert every(store, metadata={"team": "red", "n": 3}) == [t["idle"]]
    assert every(store, metadata={"n": "3"}) == []  # values compare as values
    # Title and metadata follow ThreadInfoChanged.
    store.append(t["tools"], [ThreadInfoChanged(title="Weekly tools", metadata={"team": "red"})])
    assert every(store, title="weekly") == [t["tools"], t["resumed"], t["idle"]]
    assert every(store, metadata={"team": "red"}) == [t["tools"], t["idle"]]
    # Filters combine: every one must hold.
    assert every(store, title="weekly", activity="idle", agent="coder") == [t["resumed"]]
    assert every(store, agent="coder", activity="interrupted") == [t["interrupted"]]


def test_time_ranges(store: Store) -> None:
    t = build(store)
    heads = {k: store.head(v) for k, v in t.items()}
    mid = heads["interrupted"].created_ns
    assert every(store, created_after=mid) == [t["resumed"], t["approval"], t["tools"], t["interrupted"]]
    assert every(store, created_before=mid) == [t["active"], t["idle"]]
    lo, hi = heads["active"].updated_ns, heads["approval"].updated_ns
    assert every(store, updated_after=lo, updated_before=hi) == [t["tools"], t["interrupted"], t["active"]]
    # Aware datetimes work too.
    future = dt.datetime.now(dt.UTC) + dt.timedelta(days=1)
    assert every(store, updated_after=future) == []
    assert len(every(store, updated_before=future)) == 6


def test_roots_and_children(store: Store) -> None:
    parent, child, other = tid(), tid(), tid()
    store.append(parent, [started(parent)])
    store.append(child, [started(child, relationships=m.ThreadRelationships(
        links=[m.ThreadLink(thread_id=parent, relation="spawned_from")]))])
    store.append(other, [started(other), link(parent, "spawned_from")])  # spawned, recorded by a LinkAdded
    assert every(store, roots=True) == [parent]
    assert every(store, has_children=True) == [parent]
    assert every(store, has_children=False) == [other, child]
    assert store.head(child).parent == parent
    store.delete_thread(child)
    store.delete_thread(other)
    assert every(store, has_children=True) == []  # a deleted thread is nobody's child


def test_deleted_and_scopes(store: Store) -> None:
    t = build(store)
    store.delete_thread(t["active"])
    assert t["active"] not in every(store)
    assert every(store, activity="active") == []
    assert t["active"] in [h.thread_id for h in store.threads(activity="active", include_deleted=True).threads]
    view = store.scoped("tenant")
    x = tid()
    view.append(x, [started(x), register("coder"), user(), agent_start("coder"), interrupted()])
    assert every(view, agent="coder") == [x]
    assert every(view, activity="interrupted") == [x]
    assert every(store, activity="interrupted") == [t["interrupted"]]


def test_paging_through_a_filter(store: Store) -> None:
    made = []
    for i in range(9):
        x = tid()
        store.append(x, [started(x, title=f"t{i}"), *(exchange() if i % 3 else [user(), agent_start(), response()])])
        made.append(x)
    want = [x for i, x in reversed(list(enumerate(made))) if i % 3]
    assert every(store, activity="idle") == want
    got, after = [], None
    while True:
        page = store.threads(limit=4, after=after, activity="idle")
        assert len(page.threads) <= 4
        got += ids(page)
        if page.cursor is None:
            break
        after = page.cursor
    assert got == want


@pytest.mark.parametrize(("filters", "named"), [
    ({"activity": "sleeping"}, "activity"),
    ({"activity": []}, "activity"),
    ({"activity": 3}, "activity"),
    ({"agent": ""}, "agent"),
    ({"title": 5}, "title"),
    ({"metadata": {}}, "metadata"),
    ({"metadata": "team=red"}, "metadata"),
    ({"created_after": -1}, "created_after"),
    ({"updated_before": "yesterday"}, "updated_before"),
    ({"updated_after": dt.datetime(2025, 1, 1)}, "updated_after"),  # naive: no zone
    ({"created_after": 10, "created_before": 5}, "created_after"),
    ({"roots": "yes"}, "roots"),
    ({"has_children": 1}, "has_children"),
])
def test_bad_filters_are_typed_errors(store: Store, filters: dict[str, Any], named: str) -> None:
    x = tid()
    store.append(x, [started(x)])
    with pytest.raises(InvalidInputError) as err:
        store.threads(**filters)
    assert named in str(err.value)


def test_head_lifecycle_fields_are_the_same_on_every_backend(tmp_path: Path) -> None:
    """The derived fields come from one function (tplog.lifecycle.note): equal heads everywhere."""
    def heads(s: Store) -> list[Any]:
        fixed = {"idle": str(uuid.UUID(int=1)), "approval": str(uuid.UUID(int=2))}
        s.append(fixed["idle"], [started(fixed["idle"], title="A", metadata={"k": [1, 2]}), register("w"),
                                 *exchange(agent="w")])
        s.append(fixed["approval"], [started(fixed["approval"]), user(), agent_start(), deferred({"c": "approval"})])
        return [msgspec.structs.asdict(s.head(v)) | {"created_ns": 0, "updated_ns": 0, "last_position": 0,
                                                     "stored_bytes": 0} for v in (fixed["idle"], fixed["approval"])]

    with Store("memory:", check_rules=False) as mem, Store(tmp_path / "l", check_rules=False) as lm:
        got = heads(mem)
        assert got == heads(lm)
        assert got[0]["agent_ids"] == ["w"] and got[0]["title"] == "A" and got[1]["activity"] == "waiting_approval"


# =========================================================================== fork


def conversation(s: Store, t: str) -> None:
    """seq 1 start, 2 register, 3-6 turn pair 1, 7-10 turn pair 2, 11-12 a user turn and an open agent turn."""
    s.append(t, [started(t, title="Plan", metadata={"team": "red"}), register()])
    s.append(t, exchange("first?", "one"))
    s.append(t, exchange("second?", "two"))
    s.append(t, [user("third?"), agent_start()])


def test_fork_is_the_prefix_with_a_spawned_from_link(store: Store) -> None:
    from tplog import thread_hash

    parent = tid()
    conversation(store, parent)
    before = store.export(parent)
    res = store.fork(parent, 6, reason="try another answer")
    child = res.thread_id
    assert (res.first_seq, res.last_seq) == (1, 6)
    doc = store.export(child)
    assert doc.thread_id == child
    assert doc.turns == before.turns[:2]  # the first user turn and its agent turn
    assert doc.agents == before.agents and doc.title == "Plan" and doc.metadata == {"team": "red"}
    [lk] = doc.relationships.links  # type: ignore[union-attr]
    assert (lk.thread_id, lk.relation) == (parent, "spawned_from")
    assert lk.metadata == {"branch_point": "turn_2", "seq": 6, "reason": "try another answer"}
    # A copy made by importing the fork's export is the same thread (same canonical hash).
    with Store("memory:") as other:
        other.import_thread(doc)
        assert thread_hash(other.export(child)) == thread_hash(doc)
        assert other.export(child) == doc
    # It is a thread like any other: listed, a child of its parent, appendable on its own.
    assert store.children(parent) == [child]
    assert child in every(store, has_children=False) and parent in every(store, has_children=True)
    assert child not in every(store, roots=True)
    store.append(child, exchange("other?", "three"))
    assert store.export(parent) == before  # the parent is untouched
    assert len(store.export(child).turns) == 4
    # Forks of forks.
    grand = store.fork(child, 10, new_thread_id=tid()).thread_id
    assert store.export(grand).turns == store.export(child).turns
    assert store.children(child) == [grand]
    assert store.descendants(parent) == [(child, 1), (grand, 2)]
    # The parent cannot go while its forks read it; cascade takes the forks with it.
    from tplog.errors import HasForksError

    with pytest.raises(HasForksError) as refused:
        store.delete_thread(parent)
    assert refused.value.forks == [child]
    assert store.exists(parent)
    with pytest.raises(HasForksError):
        store.delete_thread(child)  # the grandchild reads the child's own events
    store.delete_thread(grand)
    store.delete_thread(child)
    store.delete_thread(parent)
    assert store.verify().problems == []


def copy_by_append(s: Store, fork_id: str) -> str:
    """The thread a fork stands for, written out event by event under a new id."""
    evs = [e.event for e in s.read(fork_id)]
    cid = tid()
    s.append(cid, [msgspec.structs.replace(evs[0], thread_id=cid), *evs[1:]])
    return cid


def test_fork_reads_like_a_copy(store: Store) -> None:
    parent = tid()
    conversation(store, parent)
    store.append(parent, [response("tool time"), completed(), ThreadInfoChanged(title="Renamed")])  # seq 13-15
    store.append(parent, exchange("fourth?", "four"))  # seq 16-19
    for at in (1, 2, 6, 11, 15, 19):
        f = store.fork(parent, at).thread_id
        store.append(f, exchange(f"after {at}?", "mine"))
        c = copy_by_append(store, f)
        fv, cv = store.head(f).version, store.head(c).version
        assert fv == cv == at + 4
        for after in (None, 0, 1, 2, at - 1, at, at + 1, fv - 1, fv, fv + 1):
            for limit in (None, 1, 2, 5):
                for direction in ("forward", "backward"):
                    got = store.read(f, after=after, limit=limit, direction=direction)  # type: ignore[arg-type]
                    want = store.read(c, after=after, limit=limit, direction=direction)  # type: ignore[arg-type]
                    where = (at, after, limit, direction)
                    assert [e.seq for e in got] == [e.seq for e in want], where
                    assert [e.event for e in got if e.seq > 1] == [e.event for e in want if e.seq > 1], where
                    assert all(e.thread_id == f for e in got)
        fd, cd = store.export(f), store.export(c)
        assert msgspec.structs.replace(fd, thread_id=c) == cd
        assert store.pending(f) == store.pending(c) and store.interrupts(f) == store.interrupts(c)
        hf, hc = store.head(f), store.head(c)
        for field in ("user_turns", "agent_turns", "messages", "links", "activity", "title", "agent_ids"):
            assert getattr(hf, field) == getattr(hc, field), (at, field)
        assert store.links(f) == store.links(c)
    # The parent's title change at seq 15 is in the forks from there on.
    assert store.head(store.fork(parent, 15).thread_id).title == "Renamed"
    assert store.verify().problems == []
    assert [r.differences for r in store.rebuild(verify=True)] == [[], []]


def test_forks_of_forks_100_deep(store: Store) -> None:
    from tplog import thread_hash

    root = tid()
    store.append(root, [started(root), register(), *exchange("q0", "a0")])
    chain = [root]
    for i in range(1, 101):
        f = store.fork(chain[-1], store.head(chain[-1]).version).thread_id
        store.append(f, exchange(f"q{i}", f"a{i}"))
        chain.append(f)
    last = store.export(chain[-1])
    assert len(last.turns) == 202
    assert [t.parts[0].content for t in last.turns[::2]][:3] == ["q0", "q1", "q2"]  # type: ignore[union-attr]
    copy = copy_by_append(store, chain[-1])
    assert thread_hash(msgspec.structs.replace(store.export(copy), thread_id=chain[-1])) == thread_hash(last)
    assert [e.seq for e in store.read(chain[-1], after=2, limit=4)] == [3, 4, 5, 6]
    assert store.descendants(root, max_depth=3) == [(chain[1], 1), (chain[2], 2), (chain[3], 3)]
    store.delete_thread(root, cascade=True)
    assert not any(store.exists(t) for t in chain)
    assert store.verify().problems == []


def test_fork_bad_input_writes_nothing(store: Store) -> None:
    from tplog.errors import NotFoundError, ThreadDeletedError, WrongExpectedVersionError

    parent, other, gone = tid(), tid(), tid()
    conversation(store, parent)
    store.append(other, [started(other)])
    store.append(gone, [started(gone)])
    store.delete_thread(gone)
    last = store.last_position
    cases: list[tuple[Any, dict[str, Any], type[Exception], str]] = [
        (parent, {"at": 4}, InvalidInputError, "not a turn boundary"),  # inside the first agent turn
        (parent, {"at": 12}, InvalidInputError, "not a turn boundary"),  # the open turn at the end
        (parent, {"at": 13}, InvalidInputError, "past its last seq"),
        (parent, {"at": 0}, InvalidInputError, "at must be"),
        (parent, {"at": "6"}, InvalidInputError, "at must be"),
        (parent, {"at": 6, "new_thread_id": other}, WrongExpectedVersionError, ""),
        (parent, {"at": 6, "new_thread_id": gone}, ThreadDeletedError, ""),
        (parent, {"at": 6, "new_thread_id": parent}, InvalidInputError, "itself"),
        (gone, {"at": 1}, ThreadDeletedError, "deleted"),
        (tid(), {"at": 1}, NotFoundError, "does not exist"),
    ]
    for source, kw, err, text in cases:
        with pytest.raises(err, match=text or None):
            store.fork(source, **kw)
    assert store.last_position == last
    assert store.children(parent) == []
    # A turn boundary right after a user turn, and seq 1 (the start alone), are fine.
    assert store.fork(parent, 11).last_seq == 11
    assert store.fork(parent, 1).last_seq == 1


def test_fork_passes_the_validation_rules(tmp_path: Path) -> None:
    with Store(tmp_path / "rules") as s:
        parent = tid()
        conversation(s, parent)
        child = s.fork(parent, 10).thread_id
        s.append(child, exchange("again?", "four"))
        assert len(s.export(child).turns) == 6


# =========================================================================== retire


def test_prune_by_age_and_count_leaves_tombstones_and_a_report(store: Store) -> None:
    from tplog import RetentionPolicy

    old = [tid() for _ in range(3)]
    for t in old:
        store.append(t, [started(t), user()])
    cutoff_ns = store.head(old[-1]).updated_ns + 1
    new = [tid() for _ in range(4)]
    for t in new:
        store.append(t, [started(t), user()])
    now = store.head(new[-1]).updated_ns + 1
    age = now - cutoff_ns  # ns: everything before cutoff_ns, as of now
    # Dry run: the plan, nothing written.
    last = store.last_position
    plan = store.prune(RetentionPolicy(max_age=age), dry_run=True, now=now)
    assert sorted(r.thread_id for r in plan.removed) == sorted(old)
    assert all("max_age" in r.why for r in plan.removed)
    assert store.last_position == last and all(store.exists(t) for t in old)
    # For real: tombstones say why and when; the report is kept and listed.
    rep = store.prune(RetentionPolicy(max_age=age), now=now)
    assert sorted(r.thread_id for r in rep.removed) == sorted(old) and rep.report_thread_id
    for t in old:
        assert not store.exists(t)
        tomb = store.read(t)[-1].event
        assert tomb.reason.startswith("retention: not updated since")  # type: ignore[union-attr]
    assert all(store.exists(t) for t in new)
    # max_threads: the newest 2 stay; progress is reported per step, the deletions counted to the end.
    steps: list[tuple[str, int, int | None]] = []
    rep2 = store.prune(RetentionPolicy(max_threads=2), progress=lambda *a: steps.append(a))
    assert [r.thread_id for r in rep2.removed] == [new[1], new[0]]
    assert ("prune: list threads", 4, None) in steps and ("prune: check links", 2, 2) in steps
    assert [s for s in steps if s[0] == "prune: delete"] == [("prune: delete", i, 2) for i in range(3)]
    assert all("max_threads" in r.why for r in rep2.removed)
    reports, cursor = store.prune_reports()
    assert cursor is None and [r.report_thread_id for r in reports] == [rep2.report_thread_id, rep.report_thread_id]
    assert [len(r.removed) for r in reports] == [2, 3] and not reports[0].dry_run
    # Reports are never pruned themselves, and a policy removing everything needs confirmation.
    from tplog.errors import ConfirmationRequiredError

    last = store.last_position
    with pytest.raises(ConfirmationRequiredError):
        store.prune(RetentionPolicy(max_threads=0))
    assert store.last_position == last
    everything = store.prune(RetentionPolicy(max_threads=0), confirm_all=True)
    assert sorted(r.thread_id for r in everything.removed) == sorted(new[2:])
    assert len(store.prune_reports()[0]) == 3


def test_prune_keeps_linked_threads_and_says_what_dangles(store: Store) -> None:
    from tplog import RetentionPolicy

    parent, child, cited, citing, forked = tid(), tid(), tid(), tid(), tid()
    store.append(parent, [started(parent), register(), *exchange()])
    store.append(cited, [started(cited)])
    store.append(forked, [started(forked), register(), *exchange()])
    fork = store.fork(forked, 6).thread_id
    store.append(fork, exchange("more?", "yes"))
    store.append(child, [started(child), link(parent, "spawned_from")])
    store.append(citing, [started(citing), link(cited, "referenced")])
    policy = RetentionPolicy(max_threads=3)  # citing, child and the fork stay; the other three are candidates
    rep = store.prune(policy, dry_run=True)
    kept = {k.thread_id: k.why for k in rep.kept}
    assert "spawned children" in kept[parent] and "linked to by" in kept[cited]
    assert "live forks" in kept[forked]
    assert rep.removed == [] and rep.dangling == []
    # Without keep_if_linked the parent and the cited thread go, and the child left dangling is named;
    # the forked thread stays while its fork lives.
    rep = store.prune(RetentionPolicy(max_threads=3, keep_if_linked=False))
    assert sorted(r.thread_id for r in rep.removed) == sorted([parent, cited])
    assert rep.dangling == [[child, parent]]
    assert [k.thread_id for k in rep.kept] == [forked]
    assert store.exists(forked) and store.exists(fork) and store.exists(child)
    [kept_report] = [r for r in store.prune_reports()[0] if r.report_thread_id == rep.report_thread_id]
    assert kept_report.dangling == [[child, parent]]
    # When the fork is a candidate too, it goes first and then the thread it read.
    rep = store.prune(RetentionPolicy(max_threads=2, keep_if_linked=False))
    assert [r.thread_id for r in rep.removed] == [fork, forked]
    assert store.verify().problems == []


def test_bad_policies_are_typed_errors(store: Store) -> None:
    from tplog import RetentionPolicy

    for bad, named in ((RetentionPolicy(), "max_age"), (RetentionPolicy(max_age=-5), "max_age"),
                       (RetentionPolicy(max_age=dt.timedelta(0)), "max_age"),
                       (RetentionPolicy(max_threads=-1), "max_threads"),
                       (RetentionPolicy(max_threads=True), "max_threads")):
        with pytest.raises(InvalidInputError, match=named):
            store.prune(bad)


def test_fork_survives_backup(tmp_path: Path) -> None:
    """A backup holds the fork's head and its parent's rows: the fork reads the same from it."""
    from tplog import thread_hash

    with Store(tmp_path / "live") as s:
        parent = tid()
        conversation(s, parent)
        f = s.fork(parent, 10).thread_id
        s.append(f, exchange("other?", "other"))
        want = s.export(f)
        s.backup(str(tmp_path / "copy"))
    with Store(tmp_path / "copy") as b:
        assert thread_hash(b.export(f)) == thread_hash(want) and b.export(f) == want
        assert b.head(f).fork_of == parent and b.verify().problems == []
