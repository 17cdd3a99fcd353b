"""``Store.prune`` at its edges: the policy's and ``now``'s bounds, the reasons and times it writes,
paging past 500 threads, the fixed point of what stays, a thread that changes between the plan and
its deletion, and the kept reports (the mutants of tplog/retire.py these kill: tests/MUTANTS.md)."""

from __future__ import annotations

import datetime as dt
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import exchange, link, register, started

from tplog import Store
from tplog.errors import ConfirmationRequiredError, InvalidInputError
from tplog.retire import Kept, RetentionPolicy

UTC = dt.UTC


def _thread(s: Store, *events: Any) -> str:
    t = str(uuid.uuid4())
    s.append(t, [started(t), register(), *events])
    return t


def test_policy_and_now_bounds(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        _thread(s)

        def policy_of(**kw: Any) -> dict[str, Any]:
            return s.prune(RetentionPolicy(**kw), dry_run=True, confirm_all=True).policy

        assert policy_of(max_age=dt.timedelta(milliseconds=500))["max_age_ns"] == 500_000_000
        assert policy_of(max_age=dt.timedelta(seconds=10))["max_age_ns"] == 10_000_000_000
        assert policy_of(max_age=1)["max_age_ns"] == 1
        for bad, named in ((0, "max_age"), (5.0, "max_age"), ("5", "max_age")):
            with pytest.raises(InvalidInputError, match=named):
                s.prune(RetentionPolicy(max_age=bad), dry_run=True)
        with pytest.raises(InvalidInputError, match="keep_if_linked"):
            s.prune(RetentionPolicy(max_threads=1, keep_if_linked="yes"), dry_run=True)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="RetentionPolicy, not dict"):
            s.prune({"max_threads": 1}, dry_run=True)  # type: ignore[arg-type]
        # now: nanoseconds from 0 up, or an aware datetime; nothing else.
        assert s.prune(RetentionPolicy(max_threads=5), dry_run=True, now=0).at_ns == 0
        at = dt.datetime(2030, 1, 1, tzinfo=UTC)
        assert s.prune(RetentionPolicy(max_threads=5), dry_run=True, now=at).at_ns == 1_893_456_000 * 10**9
        for bad in (-1, 1.5, "x", True, dt.datetime(2030, 1, 1)):  # the last: naive
            with pytest.raises(InvalidInputError, match="now"):
                s.prune(RetentionPolicy(max_threads=5), dry_run=True, now=bad)


def test_max_age_counts_from_now_and_a_thread_at_the_cutoff_stays(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        old, new = _thread(s), _thread(s)
        u = s.head(old).updated_ns
        # At the cutoff exactly: not "older than", so it stays.
        plan = s.prune(RetentionPolicy(max_age=1000), dry_run=True, now=u + 1000)
        assert [r.thread_id for r in plan.removed] == []
        plan = s.prune(RetentionPolicy(max_age=1000), dry_run=True, now=u + 1001)
        assert [r.thread_id for r in plan.removed] == [old]
        # A datetime `now` is that instant to the nanosecond's microsecond: 1.5 s after `old`'s update,
        # a 2 s maximum age keeps it.
        at = dt.datetime.fromtimestamp(u // 1000 / 1e6, UTC) + dt.timedelta(seconds=1, microseconds=500_000)
        assert s.prune(RetentionPolicy(max_age=dt.timedelta(seconds=2)), dry_run=True, now=at).removed == []
        plan = s.prune(RetentionPolicy(max_age=dt.timedelta(seconds=1)), dry_run=True, now=at, confirm_all=True)
        assert old in [r.thread_id for r in plan.removed]
        # Both reasons, each with its own words; the time is the update's, in UTC with a Z.
        rep = s.prune(RetentionPolicy(max_age=1, max_threads=1), now=s.head(new).updated_ns + 1)
        [why] = [r.why for r in rep.removed if r.thread_id == old]
        m = re.fullmatch(
            r"not updated since (\S+Z) \(max_age\); beyond the newest 1 threads of the scope "
            r"\(max_threads\)",
            why,
        )
        assert m is not None, why
        since = dt.datetime.fromisoformat(m[1].replace("Z", "+00:00"))
        assert abs(since.timestamp() * 1e9 - u) < 2_000  # the update's time, to the microsecond
        assert s.read(old)[-1].event.reason == f"retention: {why}"  # type: ignore[union-attr]


def test_more_than_a_page_of_threads(tmp_path: Path) -> None:
    """Past 500 threads the listing pages: every thread is counted, the oldest beyond max_threads goes."""
    with Store(tmp_path / "s") as s:
        tids = []
        for _ in range(503):
            t = str(uuid.uuid4())
            s.append(t, [started(t)])
            tids.append(t)
        rep = s.prune(RetentionPolicy(max_threads=500), dry_run=True)
        assert sorted(r.thread_id for r in rep.removed) == sorted(tids[:3])


def test_a_scoped_prune_reports_its_scope_and_the_report_thread_is_titled(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as base:
        s = base.scoped("tenant-a")
        _thread(s), _thread(s)
        rep = s.prune(RetentionPolicy(max_threads=1))
        assert rep.scope == "tenant-a" and len(rep.removed) == 1
        assert s.head(rep.report_thread_id).title == "tplog prune report"  # type: ignore[arg-type, union-attr]
        [kept] = s.prune_reports()[0]
        assert kept.scope == "tenant-a" and kept.report_thread_id == rep.report_thread_id


def test_progress_counts_each_candidate_once(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        for _ in range(3):
            _thread(s)
        steps: list[tuple[str, int, int | None]] = []
        s.prune(RetentionPolicy(max_threads=1), dry_run=True, progress=lambda *a: steps.append(a))
        assert [x for x in steps if x[0] == "prune: check links"] == [
            ("prune: check links", 1, 2),
            ("prune: check links", 2, 2),
        ]


def test_keeping_a_fork_keeps_the_thread_it_reads_on_a_later_pass(tmp_path: Path) -> None:
    """The forked thread is checked before its fork is found to stay: only the next pass keeps it."""
    with Store(tmp_path / "s") as s:
        parent = _thread(s, *exchange())
        fork = s.fork(parent, 6).thread_id
        s.append(parent, exchange("more", "yes"))  # the parent is now newer than its fork
        source = _thread(s, link(fork))  # the newest: stays, and keeps the fork it links to
        rep = s.prune(RetentionPolicy(max_threads=1))
        assert rep.removed == [] and rep.failed == []
        assert {k.thread_id: k.why for k in rep.kept} == {
            fork: f"linked to by {[source]}",
            parent: f"live forks read its events: {[fork]}",
        }
        assert s.exists(parent) and s.exists(fork)


def test_what_keeps_a_thread_names_at_most_five(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        cited, parent, forked = _thread(s), _thread(s), _thread(s, *exchange())
        forks = sorted(s.fork(forked, 6).thread_id for _ in range(6))
        kids = sorted(_thread(s, link(parent, "spawned_from")) for _ in range(6))
        sources = sorted(_thread(s, link(cited)) for _ in range(6))
        rep = s.prune(RetentionPolicy(max_threads=18), dry_run=True)
        assert {k.thread_id: k.why for k in rep.kept} == {
            cited: f"linked to by {sources[:5]}",
            parent: f"has spawned children {kids[:5]}",
            forked: f"live forks read its events: {forks[:5]}",
        }


def test_every_dangling_child_is_named(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        p1, p2 = _thread(s), _thread(s)
        c1, c2 = _thread(s, link(p1, "spawned_from")), _thread(s, link(p2, "spawned_from"))
        rep = s.prune(RetentionPolicy(max_threads=2, keep_if_linked=False))
        assert sorted(map(tuple, rep.dangling)) == sorted([(c1, p1), (c2, p2)])


def test_a_thread_deleted_between_the_plan_and_its_turn_is_listed_as_failed_and_the_rest_go(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        a, b, c = _thread(s), _thread(s), _thread(s)
        _thread(s)  # stays

        def meanwhile(desc: str, done: int, _total: int | None) -> None:
            if desc == "prune: delete" and done == 0:
                s.delete_thread(b)  # someone else, after the plan named it

        rep = s.prune(RetentionPolicy(max_threads=1), progress=meanwhile)
        assert [r.thread_id for r in rep.removed] == [c, a]
        [failed] = rep.failed
        assert isinstance(failed, Kept) and failed.thread_id == b and b in failed.why
        [kept] = s.prune_reports()[0]
        assert [f.thread_id for f in kept.failed] == [b]


def test_prune_reports_page_and_list_reports_only(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        _thread(s)
        made = [s.prune(RetentionPolicy(max_threads=5)).report_thread_id for _ in range(3)]
        _thread(s)  # an ordinary thread, newer than every report
        first, cursor = s.prune_reports(limit=2)
        assert [r.report_thread_id for r in first] == made[:0:-1] and cursor is not None
        rest, cursor = s.prune_reports(limit=2, after=cursor)
        assert [r.report_thread_id for r in rest] == made[:1] and cursor is None


def test_a_policy_removing_everything_says_how_to_confirm(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        _thread(s)
        with pytest.raises(ConfirmationRequiredError, match="--confirm-all"):
            s.prune(RetentionPolicy(max_threads=0), dry_run=True)
