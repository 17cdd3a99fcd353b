"""Every backend verb answers within the scope it is given, on every backend (memory, LMDB,
PostgreSQL): a scoped thread, its links, spawns, fork, event ids, deletion and rebuilt rows live
in that scope's key space only, and the unscoped space holds none of them.

Written for the memory backend's mutation run (tests/MUTANTS.md): each verb looked its thread
up with the scope dropped, and no test noticed as long as only unscoped threads were used.
"""

from __future__ import annotations

import uuid

import msgspec
import pytest
from conftest import agent_start, completed, link, register, spawn_message, started, user
from contract_helpers import (
    append,
    part,
    rec_fixture,  # noqa: F401  (the `rec` fixture)
    tid,
)
from test_backend_contract import fork_part, tool_answer
from test_lifecycle import store  # noqa: F401  (the every-backend fixture)

from tplog import Store
from tplog.backends.common import thread_key
from tplog.backends.contract import Recorder
from tplog.errors import HasForksError, InvalidEventError, NotFoundError
from tplog.events import MessageRecorded
from tplog.projections.fold import ThreadState
from tplog.protocol import model as m

S = "tenant"


def test_every_verb_finds_a_scoped_thread_in_its_scope_only(store: Store) -> None:  # noqa: F811
    s, b = store.scoped(S), store.backend
    x, kid, p, f, y = tid(), tid(), tid(), tid(), tid()
    s.append(x, [started(x)], event_ids=["x-start"])
    # p: 1 start, 2 register, 3 user, 4 agent turn, 5 spawns kid, 6 completed, 7 links x
    s.append(p, [started(p), register(), user(), agent_start(), spawn_message(kid), completed(), link(x)])
    s.append(kid, [started(kid), link(p, "spawned_from")])
    assert s.fork(p, 7, new_thread_id=f).thread_id == f

    def answers() -> list[object]:
        return [s.incoming(x), s.incoming(x, after=(sources[0], "referenced")), s.children(p),
                s.children(p, after=min(kid, f, key=lambda t: thread_key(t, S))), s.descendants(p)]

    by_key = sorted([kid, f], key=lambda t: thread_key(t, S))
    sources = sorted([p, f], key=lambda t: thread_key(t, S))
    want = [[(t, "referenced") for t in sources], [(sources[1], "referenced")], by_key, by_key[1:],
            [(by_key[0], 1), (by_key[1], 1)]]
    assert answers() == want
    assert b.has_spawned(p, scope=S) and b.has_spawned(f, scope=S) and not b.has_spawned(x, scope=S)
    assert b.thread_state(p, scope=S) == ThreadState(seq=6, turn=1, agent="a1")
    assert b.thread_state(f, scope=S) is None  # a fork's state is folded by the facade
    assert [i.seq for i in b.items(p, scope=S)] == list(range(1, 8))
    head, evs = b.thread_events(p, scope=S)
    assert (head.thread_id, head.version, len(evs)) == (p, 7, 7)
    assert [lk.thread_id for lk in b.links(p, scope=S)] == [x]
    assert [e.seq for e in b.read_thread(p, scope=S)] == list(range(1, 8))
    assert s.load(f).thread is not None and s.pending(p) is not None
    for verb in (store.read, store.load, store.links, store.children, store.descendants, store.incoming):
        with pytest.raises(NotFoundError):
            verb(p)  # nothing of the scope is seen unscoped
    for verb2 in (b.thread_state, b.items, b.thread_events, b.links):
        with pytest.raises(NotFoundError):
            verb2(p)

    # Event ids are per scope: a scoped id is free unscoped, and a scoped retry is a duplicate.
    assert not store.append(y, [started(y)], event_ids=["x-start"]).duplicate
    assert s.append(x, [started(x)], event_ids=["x-start"]).duplicate

    # The rebuilt rows are the scope's too.
    store.rebuild()
    assert answers() == want and store.verify().problems == []

    # The parent's live fork blocks its deletion in the scope; its tombstone's id is the scope's.
    with pytest.raises(HasForksError):
        s.delete_thread(p)
    s.delete_thread(f)
    gone = s.delete_thread(p)
    assert (gone.thread_id, gone.first_seq, gone.last_seq) == (p, 8, 8)
    stone = s.read(p)[-1].event_id
    z = tid()
    assert not store.append(z, [started(z)], event_ids=[stone]).duplicate
    assert s.incoming(x) == [] and s.children(p) == [kid] and store.verify().problems == []  # kid's link stays


def test_a_scoped_fork_is_checked_against_its_parent_in_the_scope(rec: Recorder) -> None:
    p, f = tid(), tid()
    call = m.ToolCallPart(tool_name="f", tool_call_id="c1", args={})
    append(rec, part(p, [started(p), register(), user(), agent_start(),
                         MessageRecorded(message=m.ResponseMessage(timestamp="2025-01-20T09:00:00Z",
                                                                   agent_id="a1", parts=[call])),
                         completed()], check_rules=True, scope=S))
    [res] = append(rec, msgspec.structs.replace(fork_part(f, p, 6, check_rules=True), scope=S))
    assert (res.thread_id, res.last_seq) == (f, 6)
    with pytest.raises(InvalidEventError):
        append(rec, part(f, [user(), agent_start(), tool_answer("c2")], check_rules=True, scope=S))
    [ok] = append(rec, part(f, [user(), agent_start(), tool_answer("c1"), completed()], check_rules=True, scope=S))
    assert (ok.first_seq, ok.last_seq) == (7, 10)


def test_log_of_a_scoped_thread_is_the_log_its_events_are_read_from(rec: Recorder) -> None:
    # Ids whose scoped and unscoped keys fall in different logs (when the store keeps several).
    ids = [str(uuid.UUID(int=i)) for i in range(1, 40)]
    for a in ids[:8]:
        append(rec, part(a, [started(a)], scope=S))
        [e] = [e for log in range(rec.logs) for e in rec.read_log(log, scope=S) if e.thread_id == a]
        assert rec.log_of(a, scope=S) == next(
            log for log in range(rec.logs) if any(x.thread_id == a for x in rec.read_log(log, scope=S)))
        assert e.position == rec.positions()[rec.log_of(a, scope=S)]


def test_pages_within_a_scope_follow_the_scoped_keys(rec: Recorder) -> None:
    # Fixed ids whose scoped keys sort otherwise than their unscoped ones (checked below), so a
    # page bound keyed without the scope would cut the page elsewhere.
    p = str(uuid.UUID(int=100))
    kids = [str(uuid.UUID(int=i)) for i in range(1, 7)]
    scoped_order = sorted(kids, key=lambda t: thread_key(t, S))
    assert scoped_order != sorted(kids, key=thread_key)
    append(rec, part(p, [started(p)], scope=S))
    for k in kids:
        append(rec, part(k, [started(k), link(p, "spawned_from")], scope=S))
    assert rec.children(p, scope=S) == scoped_order
    assert rec.incoming(p, scope=S) == [(k, "spawned_from") for k in scoped_order]
    for i, k in enumerate(scoped_order):
        assert rec.children(p, scope=S, after=k) == scoped_order[i + 1:]
        assert rec.incoming(p, scope=S, after=(k, "spawned_from")) == [
            (x, "spawned_from") for x in scoped_order[i + 1:]]


def test_forks_of_forks_in_a_scope_inherit_their_ancestors_links_through_a_rebuild(
        store: Store) -> None:  # noqa: F811
    s = store.scoped(S)
    x, p, f1, f2, f3 = tid(), tid(), tid(), tid(), tid()
    s.append(x, [started(x)])
    s.append(p, [started(p), link(x), register(), user(), agent_start(), completed()])
    s.fork(p, 6, new_thread_id=f1)
    s.append(f1, [user(), agent_start(), completed()])
    s.fork(f1, 9, new_thread_id=f2)
    s.append(f2, [user(), agent_start(), completed()])
    s.fork(f2, 12, new_thread_id=f3)  # three generations: each prefix read through its parent's
    want = sorted([(t, "referenced") for t in (p, f1, f2, f3)], key=lambda r: thread_key(r[0], S))
    assert s.incoming(x) == want
    store.rebuild("links")
    assert s.incoming(x) == want and store.verify().problems == []
