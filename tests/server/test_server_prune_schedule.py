"""Retention on a schedule (``tplog serve --prune-every``): a real server prunes by itself, leaving tombstones
and a kept report; bad schedules are typed errors before anything starts."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from conftest import exchange, link, register, started

from server.server_harness import ROOT, ServerProcess, wait_until
from tplog import RetentionPolicy, Store
from tplog.errors import InvalidInputError
from tplog.integrations.scheduled_prune import ENV_PRUNE, PruneSchedule, duration, schedule_from_env


def test_scheduled_prune_leaves_tombstones_and_a_report(tmp_path: Path) -> None:
    schedule = PruneSchedule(every=0.5, policy=RetentionPolicy(max_threads=2))
    srv = ServerProcess(tmp_path / "store", workers=2, env={ENV_PRUNE: schedule.to_env()})
    threads = [str(uuid.uuid4()) for _ in range(5)]
    with Store(srv.store) as s:  # oldest first; the newest links to the oldest, which keep_if_linked keeps
        for t in threads:
            s.append(t, [started(t), register(), *exchange()])
        s.append(threads[-1], [link(threads[0])])
    srv.start()
    try:
        with Store(srv.store) as s:
            gone = threads[1:3]
            wait_until(lambda: not any(s.exists(t) for t in gone), timeout=60)
            for t in gone:
                tomb = s.read(t)[-1].event
                assert tomb.reason.startswith("retention: beyond the newest 2")  # type: ignore[union-attr]
            assert all(s.exists(t) for t in (threads[0], *threads[3:]))
            # the report is kept after the deletions, in a write of its own: under load it can lag them
            wait_until(lambda: bool(s.prune_reports()[0]), timeout=30)
            reports, _ = s.prune_reports()
            assert sorted(r.thread_id for rep in reports for r in rep.removed) == sorted(gone)
            assert any(k.thread_id == threads[0] for rep in reports for k in rep.kept)
            # Later rounds find nothing more to remove and write nothing (no empty reports).
            last = s.last_position
            with srv.client() as c:
                assert c.get("/health").status_code == 200
            wait_until(lambda: s.last_position == last, timeout=10)
            assert len(s.prune_reports()[0]) == len(reports)
    finally:
        srv.stop()


def test_bad_schedules_are_typed_errors() -> None:
    for text in ("", "soon", "-1h", "0", "inf", "1y"):
        with pytest.raises(InvalidInputError, match="--every"):
            duration(text, "--every")
    assert duration("90m", "x") == 5400 and duration("2", "x") == 2
    with pytest.raises(InvalidInputError, match="max_age and/or max_threads"):
        PruneSchedule(every=60, policy=RetentionPolicy()).check()
    with pytest.raises(InvalidInputError, match="every"):
        PruneSchedule(every=0, policy=RetentionPolicy(max_threads=1)).check()
    with pytest.raises(InvalidInputError, match=ENV_PRUNE):
        schedule_from_env('{"every": 1, "colour": 2}')
    s = PruneSchedule(every=3600, policy=RetentionPolicy(max_age=dt.timedelta(days=90), max_threads=10,
                                                         keep_if_linked=False))
    assert schedule_from_env(s.to_env()) == s


@pytest.mark.parametrize(("flags", "says"), [
    (["--prune-every", "soon", "--prune-max-threads", "3"], "--prune-every"),
    (["--prune-every", "1h"], "max_age and/or max_threads"),
    (["--prune-every", "1h", "--prune-max-age", "x"], "--prune-max-age"),
    (["--prune-max-threads", "3"], "need --prune-every"),
])
def test_serve_refuses_bad_prune_flags(tmp_path: Path, flags: list[str], says: str) -> None:
    r = subprocess.run([sys.executable, "-m", "tplog", "serve", str(tmp_path / "store"), "--port", "1", *flags],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and says in r.stderr, r.stderr
    assert not (tmp_path / "store").exists()  # refused before anything starts


def _store_of(path: Path, n: int) -> list[str]:
    threads = [str(uuid.uuid4()) for _ in range(n)]
    with Store(path) as s:
        for t in threads:
            s.append(t, [started(t), register(), *exchange()])
    return threads


def test_a_scheduled_round_skips_when_another_worker_holds_the_lock(tmp_path: Path) -> None:
    from tplog.integrations.scheduled_prune import LOCK, run_once

    threads = _store_of(tmp_path / "s", 3)
    policy = RetentionPolicy(max_threads=1)
    with Store(tmp_path / "s") as a, Store(tmp_path / "s") as b:
        held = a.backend.try_lock(LOCK)  # another worker's round is running
        assert held is not None
        try:
            assert run_once(b, policy) is None
            assert all(b.exists(t) for t in threads) and b.prune_reports()[0] == []
        finally:
            held.release()
        report = run_once(b, policy)  # the next round runs
        assert report is not None and len(report.removed) == 2
        assert sum(b.exists(t) for t in threads) == 1


def test_a_scheduled_round_never_removes_every_thread_and_survives_errors(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A policy that would remove every thread needs a person's confirmation: on a schedule that round is
    skipped and logged, as is any other error; the lock is released, so the next round can run."""
    import time

    from tplog.integrations.scheduled_prune import LOCK, run_once

    threads = _store_of(tmp_path / "s", 2)
    time.sleep(1.1)
    with Store(tmp_path / "s") as s, caplog.at_level("WARNING", logger="tplog.server"):
        everything = RetentionPolicy(max_age=dt.timedelta(seconds=1))  # both threads are older
        assert run_once(s, everything) is None
        assert any("scheduled prune skipped" in r.getMessage() and "every thread" in r.getMessage()
                   for r in caplog.records), caplog.text
        assert all(s.exists(t) for t in threads)
        assert run_once(s, RetentionPolicy()) is None  # a policy saying nothing: an error, logged
        assert any(r.getMessage().startswith("scheduled prune failed: ") and "max_age and/or max_threads"
                   in r.getMessage() for r in caplog.records), caplog.text
        held = s.backend.try_lock(LOCK)  # both rounds released the lock
        assert held is not None
        held.release()


def test_a_schedule_with_a_max_age_in_nanoseconds_goes_to_the_workers_as_seconds() -> None:
    s = PruneSchedule(every=60, policy=RetentionPolicy(max_age=90 * 86400 * 10**9))
    back = schedule_from_env(s.to_env())
    assert back is not None and back.policy.max_age == dt.timedelta(days=90) and back.every == 60
