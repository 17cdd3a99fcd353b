"""``keep_if_linked`` keeps a candidate that a thread *staying* links to: links from threads that go in
the same prune keep nothing (two linked threads both past ``max_threads`` both go)."""

from __future__ import annotations

import uuid
from pathlib import Path

from conftest import link, register, started

from tplog import Store
from tplog.retire import RetentionPolicy


def _thread(s: Store, *events: object) -> str:
    t = str(uuid.uuid4())
    s.append(t, [started(t), register(), *events])
    return t


def test_two_linked_threads_both_past_max_threads_both_go(tmp_path: Path) -> None:
    with Store(tmp_path / "store") as s:
        target = _thread(s)
        source = _thread(s, link(target))  # newer, links to the older
        kept = [_thread(s), _thread(s)]  # the newest two
        policy = RetentionPolicy(max_threads=2)
        plan = s.prune(policy, dry_run=True)
        assert sorted(r.thread_id for r in plan.removed) == sorted([source, target]) and plan.kept == []
        done = s.prune(policy)
        assert sorted(r.thread_id for r in done.removed) == sorted([source, target])
        assert [s.head(t).status for t in (target, source, *kept)] == ["deleted", "deleted", "active", "active"]


def test_a_link_from_a_thread_that_stays_keeps_its_target(tmp_path: Path) -> None:
    with Store(tmp_path / "store") as s:
        target = _thread(s)
        old = _thread(s)
        source = _thread(s, link(target))  # within the newest two: it stays, and so does its target
        _thread(s)
        rep = s.prune(RetentionPolicy(max_threads=2))
        assert [r.thread_id for r in rep.removed] == [old]
        assert [(k.thread_id, k.why) for k in rep.kept] == [(target, f"linked to by {[source]}")]
