"""The rebuild's catch-up pass and its bookkeeping (tplog/backends/lmdb/rebuild.py): the
events it counts and the log position it reports, exactly; a thread started during the
key-order pass with links declared in its ThreadStarted; and the message that refuses a
second rebuild, word for word, in both of its forms.

The rebuild's bookkeeping after its catch-up (tplog/backends/lmdb/rebuild.py `_rebuild`;
written for its surviving mutants, tests/MUTANTS.md): the progress totals of each catch-up
step, exactly; the log position written with a swapped-in projection; the report's seconds;
a fork created in a scope while the key-order pass runs, whose inherited link rows the
catch-up keys in that scope. Real LMDB files; events appended from the progress callback,
between two of the rebuild's transactions.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import ToyStore as Store

from tplog.backends.lmdb import projections as proj
from tplog.backends.lmdb.keys import tkey
from tplog.backends.lmdb.rebuild import rebuild
from tplog.errors import NotFoundError, RebuildInProgressError
from tplog.events import AgentTurnCompleted, AgentTurnStarted, LinkAdded, MessageRecorded, ThreadStarted
from tplog.protocol import model as m

T = "2025-01-20T10:00:00Z"


def start(tid: str, *links: tuple[str, str]) -> ThreadStarted:
    if not links:
        return ThreadStarted(thread_id=tid, created_at=T)
    rel = m.ThreadRelationships(links=[m.ThreadLink(thread_id=t, relation=r) for t, r in links])
    return ThreadStarted(thread_id=tid, created_at=T, relationships=rel)


def turn(call: str) -> list[Any]:
    return [AgentTurnStarted(agent_id="a", started_at=T),
            MessageRecorded(message=m.ResponseMessage(timestamp=T, agent_id="a", parts=[
                m.ToolCallPart(tool_name="approve_me", tool_call_id=call, args={})])),
            AgentTurnCompleted(completed_at=T, deferred={call: "approval"})]


def populate(s: Store, n: int) -> list[str]:
    tids = [str(uuid.uuid4()) for _ in range(n)]
    for t in tids:
        s.append(t, [start(t), LinkAdded(link=m.ThreadLink(thread_id=tids[0], relation="referenced")), *turn("c")])
    return tids


@pytest.mark.parametrize("names", [["links"], ["state"], ["links", "state"]])
def test_the_report_counts_every_event_once_and_names_the_last_position(tmp_path: Path, names: list[str]) -> None:
    """Events appended during the key-order pass are read by the catch-up: the report's count
    is then every event of the log, and its position the log's last, whatever the chunking."""
    with Store(tmp_path / "s") as s:
        tids = populate(s, 6)
        for t in tids[:3]:  # rows of their own (the rest are chunks: closed turns): split by chunk=3 below
            s.append(t, [LinkAdded(link=m.ThreadLink(thread_id=tids[5], relation="referenced"))] * 2)
        with s.backend.engine.read() as txn:
            assert sum(1 for _, v in txn.range("events") if bytes(v)[:1] not in (b"\x04", b"\x05")) == 6
        split = rebuild(s.backend.engine, s.codec, names, chunk=3)
        assert [r.events for r in split] == [6 * 5 + 6] * len(names)
        late = "00000000-0000-4000-8000-0000000000ff"  # sorts first: in a chunk already scanned
        calls = 0
        entries = s.stats()["events"]

        def progress(done: int, total: int) -> None:
            nonlocal calls
            calls += 1
            if calls == 1:  # the key-order pass's total: the log's entries
                assert (done, total) == (5, entries)
            if calls == 2:  # the key-order pass is under way: these come after its first snapshot
                s.append(tids[0], turn("late"))
                s.append(late, [start(late, (tids[1], "referenced"), (tids[2], "spawned_from"))])

        [report] = rebuild(s.backend.engine, s.codec, names[:1], chunk=5, progress=progress) if len(names) == 1 \
            else rebuild(s.backend.engine, s.codec, names, chunk=5, progress=progress)[:1]
        assert calls > 3
        assert report.events == s.stats()["events"] == 6 * 5 + 6 + 3 + 1
        assert report.position == s.last_position
        if "links" in names:  # the late thread's declared links were folded by the catch-up
            assert (late, "referenced") in s.incoming(tids[1])
            assert s.children(tids[2]) == [late]
        if "state" in names:
            assert [c.tool_call_id for c in s.pending(tids[0]).pending] == ["c", "late"]
        with s.backend.engine.read() as txn:  # the catch-up wrote shadow rows of the rebuilt projections only
            assert [bytes(k) for k, _ in txn.range("proj") if bytes(k).startswith(b"~")] == []
        assert all(r.differences == [] for r in s.rebuild(verify=True))
        # A rebuild with nothing to catch up on (one snapshot held the whole log).
        [again] = rebuild(s.backend.engine, s.codec, names[:1])
        assert (again.events, again.position) == (6 * 5 + 6 + 3 + 1, s.last_position)


def test_a_second_rebuild_is_refused_naming_the_first_ones_process_and_start(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        populate(s, 3)
        seen: list[str] = []
        t0 = time.time()

        def progress(done: int, total: int) -> None:
            if not seen:
                with pytest.raises(RebuildInProgressError) as exc:
                    s.rebuild("state")
                seen.append(str(exc.value))

        rebuild(s.backend.engine, s.codec, ["state"], chunk=5, progress=progress)
        pattern = (r"a rebuild of projection 'state' is already running \(process (\d+), started "
                   r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)\); wait for it to finish \(two rebuilds would fold the same "
                   r"events into the same shadow rows\), or, if it is stuck, take its claim over with --force \(it "
                   r"then stops without swapping anything in\)")
        match = re.fullmatch(pattern, seen[0])
        assert match is not None, seen[0]
        assert int(match[1]) == os.getpid()
        started = time.mktime(time.strptime(match[2], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
        assert t0 - 2 <= started <= time.time() + 1


def test_a_rebuild_whose_lock_is_held_before_its_claim_is_refused_saying_so(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        populate(s, 2)
        lock = s.backend.engine.try_lock("rebuild-links")
        assert lock is not None
        try:
            with pytest.raises(RebuildInProgressError) as exc:
                s.rebuild("links")
        finally:
            lock.release()
        assert str(exc.value) == (
            "a rebuild of projection 'links' is already running (another process or thread is starting or "
            "finishing one); wait for it to finish (two rebuilds would fold the same events into the same shadow "
            "rows), or, if it is stuck, take its claim over with --force (it then stops without swapping anything in)")
        assert [r.differences for r in s.rebuild(verify=True)] == [[], []]


def test_a_rebuild_of_an_empty_store(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        reports = s.rebuild()
        assert [(r.projection, r.events, r.position, r.differences) for r in reports] == [
            ("links", 0, 0, []), ("state", 0, 0, [])]
        assert s.projections()["links"]["position"] == 0


def test_the_catch_up_goes_on_past_events_a_later_snapshot_held(tmp_path: Path) -> None:
    """After the first chunk (A's events), B (not yet scanned) then N (a new thread whose key sorts
    before A's: in the range already scanned) get events: the catch-up passes over B's (the second
    chunk's snapshot held them) and still folds N's."""
    n, a, b = ("00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000010",
               "ffffffff-0000-4000-8000-000000000001")
    with Store(tmp_path / "s") as s:
        s.append(a, [start(a), *turn("a1")])
        s.append(b, [start(b), *turn("b1")])
        calls = 0

        def progress(done: int, total: int) -> None:
            nonlocal calls
            calls += 1
            if calls == 1:
                s.append(b, turn("b2"))
                s.append(n, [start(n), LinkAdded(link=m.ThreadLink(thread_id=a, relation="referenced")), *turn("n1")])

        [report] = rebuild(s.backend.engine, s.codec, ["state"], chunk=4, progress=progress)
        assert report.events == s.stats()["events"] == 16
        with s.backend.engine.read() as txn:  # a state rebuild's catch-up writes no link rows
            assert [bytes(k) for k, _ in txn.range("proj") if bytes(k).startswith(b"~")] == []
        assert [c.tool_call_id for c in s.pending(n).pending] == ["n1"]
        assert [c.tool_call_id for c in s.pending(b).pending] == ["b1", "b2"]
        assert all(r.differences == [] for r in s.rebuild(verify=True))


def test_a_rebuild_of_one_projection_leaves_no_shadow_rows(tmp_path: Path) -> None:
    """Not even of the other projection: a fork's inherited link rows are folded only for links."""
    p = str(uuid.uuid4())
    with Store(tmp_path / "s") as s:
        s.append(p, [start(p), LinkAdded(link=m.ThreadLink(thread_id=p, relation="referenced")), *turn("c")])
        s.fork(p, 5)
        for names in (["state"], ["links"], ["links", "state"]):
            rebuild(s.backend.engine, s.codec, names, chunk=3)
            with s.backend.engine.read() as txn:
                assert [bytes(k) for k, _ in txn.range("proj") if bytes(k).startswith(b"~")] == []
        assert all(r.differences == [] for r in s.rebuild(verify=True))


def test_the_refusal_dates_the_running_rebuild_from_its_claim(tmp_path: Path) -> None:
    """The start time is the claim's (UTC, to the second), not the time of the refusal."""
    import msgspec

    with Store(tmp_path / "s") as s:
        populate(s, 1)
        lock = s.backend.engine.try_lock("rebuild-state")
        assert lock is not None
        since = 1_577_934_245_678_000_000  # 2020-01-02T03:04:05.678Z
        marker = msgspec.msgpack.encode((4242, b"t" * 16, since))
        s.backend.engine.run_write(lambda txn: txn.put("meta", b"rebuild:state", marker))
        try:
            with pytest.raises(RebuildInProgressError, match=r"already running \(process 4242, started "
                                                             r"2020-01-02T03:04:05Z\); wait"):
                s.rebuild("state")
        finally:
            lock.release()


@pytest.mark.parametrize("names", [["state"], ["links", "state"]])
def test_a_thread_started_during_a_rebuild_keeps_its_state_row(tmp_path: Path, names: list[str]) -> None:
    """Regression: a thread started while the state projection was rebuilt, with no event the fold
    reads (a ThreadStarted alone), lost the state row its append wrote (the catch-up skipped the
    ThreadStarted, so the swap deleted the row), and `tplog verify` then reported the difference."""
    from tplog.verify import verify_store

    first = "00000000-0000-4000-8000-0000000000ff"  # sorts first: the catch-up reads its events
    with Store(tmp_path / "s") as s:
        populate(s, 3)
        calls = 0

        def progress(done: int, total: int) -> None:
            nonlocal calls
            calls += 1
            if calls == 1:
                s.append(first, [start(first)])

        rebuild(s.backend.engine, s.codec, names, chunk=5, progress=progress)
        with s.backend.engine.read() as txn:
            assert txn.get("proj", proj.STATE_PREFIX + uuid.UUID(first).bytes) == proj.encode_state(
                proj.decode_state(None))
        assert verify_store(s).problems == []


def test_the_rebuilds_arguments_are_checked(tmp_path: Path) -> None:
    from tplog.errors import InvalidInputError

    with Store(tmp_path / "s") as s:
        tids = populate(s, 2)
        for bad in (0, -1, True, "5", 2.0):
            with pytest.raises(InvalidInputError) as exc:
                rebuild(s.backend.engine, s.codec, ["links"], chunk=bad)  # type: ignore[arg-type]
            assert str(exc.value) == f"chunk must be a positive number of events, not {bad!r}"
        with pytest.raises(InvalidInputError, match=r"unknown projection 'link'; expected one of \['links', 'state'\]"):
            rebuild(s.backend.engine, s.codec, ["link"])
        [report] = rebuild(s.backend.engine, s.codec, "links", chunk=1)  # one name; one event per chunk
        assert (report.projection, report.verify, report.events) == ("links", False, 10)
        assert sorted(s.incoming(tids[0])) == sorted((t, "referenced") for t in tids)
        lock = s.backend.engine.try_lock("rebuild-links")
        assert lock is not None
        try:  # refused by default; ``force`` takes the claim over
            with pytest.raises(RebuildInProgressError):
                rebuild(s.backend.engine, s.codec, ["links"])
            [forced] = rebuild(s.backend.engine, s.codec, ["links"], force=True)
            assert forced.differences == []
        finally:
            lock.release()


def test_links_appended_in_a_scope_during_the_scan_are_keyed_in_that_scope(tmp_path: Path) -> None:
    from tplog.backends.lmdb.keys import tkey

    target = str(uuid.uuid4())
    with Store(tmp_path / "s") as root:
        s = root.scoped("tenant-a")
        s.append(target, [start(target)])
        tids = populate(s, 2)
        lowest = min(tkey(t, "tenant-a") for t in [target, *tids])
        # a thread whose key (in the scope) sorts first: the catch-up, not the scan, folds it
        first = next(t for t in (str(uuid.UUID(int=i)) for i in range(10_000)) if tkey(t, "tenant-a") < lowest)
        calls = 0

        def progress(done: int, total: int) -> None:
            nonlocal calls
            calls += 1
            if calls == 1:  # sorts first: the catch-up folds it
                s.append(first, [start(first), LinkAdded(link=m.ThreadLink(thread_id=target, relation="referenced"))])

        rebuild(root.backend.engine, root.codec, ["links"], chunk=3, progress=progress)
        assert s.incoming(target) == [(first, "referenced")]
        assert [r.differences for r in root.rebuild(verify=True)] == [[], []]


def test_an_event_at_a_snapshots_last_position_is_folded_once(tmp_path: Path) -> None:
    """The user turn appended after the first chunk is the last entry the next chunk's snapshot
    holds: the scan folds it, and the catch-up must not fold it again (a turn counted twice)."""
    from conftest import user

    a, b = "00000000-0000-4000-8000-000000000010", "ffffffff-0000-4000-8000-000000000001"
    with Store(tmp_path / "s") as s:
        s.append(a, [start(a), *turn("a1")])
        s.append(b, [start(b), *turn("b1")])
        calls = 0

        def progress(done: int, total: int) -> None:
            nonlocal calls
            calls += 1
            if calls == 1:
                s.append(b, [user("again")])

        rebuild(s.backend.engine, s.codec, ["state"], chunk=4, progress=progress)
        assert [r.differences for r in s.rebuild(verify=True)] == [[], []]


def test_the_catch_up_folds_forks_spawns_and_deletions(tmp_path: Path) -> None:
    """Appended while the key-order pass runs, in the range it already passed (keys sorting first):
    a fork (its inherited link rows), a spawn message (the child's row), and a thread started and
    deleted (no state row left)."""
    from tplog.events import MessageRecorded

    p, x, child = "00000000-0000-4000-8000-000000000010", str(uuid.uuid4()), str(uuid.uuid4())
    f, g, h = ("00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002",
               "00000000-0000-4000-8000-000000000003")
    with Store(tmp_path / "s") as s:
        s.append(p, [start(p), LinkAdded(link=m.ThreadLink(thread_id=x, relation="referenced")), *turn("c")])
        populate(s, 2)
        calls = 0

        def progress(done: int, total: int) -> None:
            nonlocal calls
            calls += 1
            if calls == 1:
                s.fork(p, 5, new_thread_id=f)
                s.append(g, [start(g), AgentTurnStarted(agent_id="a", started_at=T),
                             MessageRecorded(message=m.SystemMessage(
                                 timestamp=T, event_type="data-tp-thread_spawn",
                                 event_data={"spawned_thread_id": child})),
                             AgentTurnCompleted(completed_at=T)])
                s.append(h, [start(h), *turn("h")])
                s.delete_thread(h)

        rebuild(s.backend.engine, s.codec, ["links", "state"], chunk=5, progress=progress)
        assert sorted(s.incoming(x)) == sorted([(p, "referenced"), (f, "referenced")])
        assert s.children(g) == [child]
        with s.backend.engine.read() as txn:
            assert txn.get("proj", proj.STATE_PREFIX + uuid.UUID(h).bytes) is None
        assert [r.differences for r in s.rebuild(verify=True)] == [[], []]


# ------------------------------------------------------------------------- the catch-up's totals, positions and seconds


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
