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
