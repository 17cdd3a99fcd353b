"""The rebuild's bookkeeping after its catch-up (tplog/backends/lmdb/rebuild.py `_rebuild`;
written for its surviving mutants, tests/MUTANTS.md): the progress totals of each catch-up
step, exactly; the log position written with a swapped-in projection; the report's seconds;
a fork created in a scope while the key-order pass runs, whose inherited link rows the
catch-up keys in that scope. Real LMDB files; events appended from the progress callback,
between two of the rebuild's transactions.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from conftest import ToyStore as Store
from test_rebuild_catch_up import populate, start, turn

from tplog.backends.lmdb import projections as proj
from tplog.backends.lmdb.keys import tkey
from tplog.backends.lmdb.rebuild import rebuild
from tplog.errors import NotFoundError
from tplog.events import LinkAdded
from tplog.protocol import model as m

FIRST = "00000000-0000-4000-8000-000000000001"  # its key sorts before every uuid4's: a range already scanned


@pytest.mark.parametrize("k", [9, 10])
@pytest.mark.parametrize("names", [["links"], ["state"], ["links", "state"]])
def test_each_catch_up_step_reports_the_events_done_and_the_positions_left(tmp_path: Path,
                                                                            names: list[str], k: int) -> None:
    """``k`` positions appended after the first snapshot, in a thread whose key the scan has
    passed: the catch-up reads them 3 at a time (chunk=3), each step's total is the events done
    plus the positions not yet caught up on (none after a step that ends exactly at the log's
    end: the next, empty, step finishes), and the last step's total is its count."""
    with Store(tmp_path / "s") as s:
        populate(s, 4)
        p0 = s.last_position
        calls: list[tuple[int, int]] = []

        def progress(done: int, total: int) -> None:
            calls.append((done, total))
            if len(calls) == 1:
                s.append(FIRST, [start(FIRST), *turn("x"), *turn("y"), *turn("z")][:k])
                assert s.last_position == p0 + k

        reports = rebuild(s.backend.engine, s.codec, names, chunk=3, progress=progress)
        steps = [(p0 + min(3 * i, k), p0 + k) for i in range(1, (k + 2) // 3 + 1)]
        if k % 3 == 0:
            steps.append((p0 + k, p0 + k))
        assert calls[-len(steps) - 1:] == [(p0, p0), *steps]
        assert [(r.events, r.position) for r in reports] == [(p0 + k, p0 + k)] * len(names)


def test_a_swapped_in_projection_is_live_at_the_logs_last_position(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        populate(s, 3)
        s.backend.engine.run_write(lambda txn: [
            proj.write_info(txn, n, proj.ProjectionInfo(proj.VERSIONS[n], 1, "stale"))
            for n in ("links", "state")])

        def progress(done: int, total: int) -> None:
            if s.last_position < 16:
                s.append(FIRST, [start(FIRST)])

        assert s.last_position == 15
        t0 = time.perf_counter()
        reports = rebuild(s.backend.engine, s.codec, ["links", "state"], chunk=4, progress=progress)
        elapsed = time.perf_counter() - t0
        with s.backend.engine.read() as txn:
            infos = {n: proj.read_info(txn, n) for n in ("links", "state")}
        assert {n: (i.version, i.position, i.status) for n, i in infos.items() if i is not None} == {
            n: (proj.VERSIONS[n], 16, "live") for n in ("links", "state")}
        assert all(0 < r.seconds <= elapsed for r in reports), [r.seconds for r in reports]
        assert [(r.projection, r.events, r.position) for r in reports] == [("links", 16, 16), ("state", 16, 16)]


def test_a_fork_made_in_a_scope_during_the_scan_inherits_its_parents_links_in_that_scope(tmp_path: Path) -> None:
    target = str(uuid.uuid4())
    with Store(tmp_path / "s") as root:
        s = root.scoped("tenant-a")
        s.append(target, [start(target)])
        tids = populate(s, 2)  # each links to tids[0]
        parent = tids[1]
        s.append(parent, [LinkAdded(link=m.ThreadLink(thread_id=target, relation="referenced"))])
        lowest = min(tkey(t, "tenant-a") for t in [target, *tids])
        fork = next(t for t in (str(uuid.UUID(int=i)) for i in range(10_000)) if tkey(t, "tenant-a") < lowest)
        calls = 0

        def progress(done: int, total: int) -> None:
            nonlocal calls
            calls += 1
            if calls == 1:  # sorts first in the scope: the catch-up folds it
                s.fork(parent, 6, new_thread_id=fork)

        rebuild(root.backend.engine, root.codec, ["links"], chunk=3, progress=progress)
        assert sorted(s.incoming(target)) == sorted([(parent, "referenced"), (fork, "referenced")])
        assert sorted(s.incoming(tids[0])) == sorted([(tids[0], "referenced"), (parent, "referenced"),
                                                      (fork, "referenced")])
        with pytest.raises(NotFoundError):  # unscoped, the target is no thread and nothing links to it
            root.incoming(target)
        assert [r.differences for r in root.rebuild(verify=True)] == [[], []]


@pytest.mark.parametrize("names", [["links"], ["state"]])
def test_the_catch_up_goes_on_past_an_event_it_skips_unread(tmp_path: Path, names: list[str]) -> None:
    """A ThreadInfoChanged (no id-only fold reads it: recognised from its header bytes and
    skipped) then a link and a tool call, in one catch-up step: the step goes on past it."""
    from tplog.events import ThreadInfoChanged

    target = str(uuid.uuid4())
    with Store(tmp_path / "s") as s:
        s.append(target, [start(target)])
        populate(s, 2)
        calls = 0

        def progress(done: int, total: int) -> None:
            nonlocal calls
            calls += 1
            if calls == 1:
                s.append(FIRST, [start(FIRST), ThreadInfoChanged(title="renamed"),
                                 LinkAdded(link=m.ThreadLink(thread_id=target, relation="referenced")), *turn("c")])

        [report] = rebuild(s.backend.engine, s.codec, names, chunk=100, progress=progress)
        assert calls == 2  # one key-order chunk, one catch-up step
        assert (report.events, report.position) == (s.last_position, s.last_position)
        assert [r.differences for r in s.rebuild(verify=True)] == [[], []]
        if names == ["links"]:
            assert s.incoming(target) == [(FIRST, "referenced")]
        else:
            assert [c.tool_call_id for c in s.pending(FIRST).pending] == ["c"]


def test_a_projection_rebuilt_from_an_empty_log_is_live_at_position_0(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        s.backend.engine.run_write(lambda txn: [
            proj.write_info(txn, n, proj.ProjectionInfo(proj.VERSIONS[n], 5, "stale"))
            for n in ("links", "state")])
        reports = rebuild(s.backend.engine, s.codec, ["links", "state"])
        assert [(r.events, r.position) for r in reports] == [(0, 0), (0, 0)]
        with s.backend.engine.read() as txn:
            got = [proj.read_info(txn, n) for n in ("links", "state")]
        assert [(i.version, i.position, i.status) for i in got if i is not None] == [
            (proj.VERSIONS["links"], 0, "live"), (proj.VERSIONS["state"], 0, "live")]
