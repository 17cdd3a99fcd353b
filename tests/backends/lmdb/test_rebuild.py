"""Projection bookkeeping, rebuild (also under concurrent appends) and `tplog verify`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
import zlib
from pathlib import Path
from typing import Any

import lmdb
import msgspec
import pytest
from conftest import ToyStore as Store
from conftest import user

from tplog.backends.common import CHILD_LINK, CHILD_SPAWN
from tplog.backends.lmdb import projections as proj
from tplog.backends.lmdb.rebuild import rebuild
from tplog.cli import main
from tplog.errors import CorruptionError, InvalidInputError, RebuildInProgressError, RebuildRequiredError
from tplog.events import (
    AgentTurnCompleted,
    AgentTurnStarted,
    LinkAdded,
    MessageRecorded,
    ThreadStarted,
)
from tplog.protocol import model as m

T = "2025-01-20T10:00:00Z"


def start(tid: str) -> ThreadStarted:
    return ThreadStarted(thread_id=tid, created_at=T)


def link(target: str, rel: str = "spawned_from") -> LinkAdded:
    return LinkAdded(link=m.ThreadLink(thread_id=target, relation=rel))


def tool_turn(call_id: str, deferred: dict[str, str] | None = None) -> list:
    return [
        AgentTurnStarted(agent_id="a", started_at=T),
        MessageRecorded(message=m.ResponseMessage(timestamp=T, agent_id="a", parts=[
            m.ToolCallPart(tool_name="approve_me", tool_call_id=call_id, args={})])),
        AgentTurnCompleted(completed_at=T, deferred=deferred or {}),
    ]


def populate(store: Store, n: int = 30) -> tuple[str, list[str]]:
    parent = str(uuid.uuid4())
    store.append(parent, [start(parent), *tool_turn("p1", {"p1": "approval"})])
    kids = []
    for i in range(n):
        kid = str(uuid.uuid4())
        kids.append(kid)
        store.append(kid, [start(kid), link(parent), link(kids[0], "referenced") if i else link(parent, "merged_from"),
                           *tool_turn(f"k{i}")])
    return parent, kids


def test_new_store_projections_are_live_and_match_a_rebuild(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        parent, kids = populate(s)
        info = s.projections()
        assert info["links"]["status"] == info["state"]["status"] == "live"
        assert info["links"]["position"] == s.last_position
        for r in s.rebuild(verify=True):
            assert r.differences == [], r.differences
            assert r.events == s.last_position
        assert sorted(s.children(parent)) == sorted(kids)
        assert [c.tool_call_id for c in s.pending(parent).pending] == ["p1"]


def test_verify_reports_a_tampered_projection_and_rebuild_repairs_it(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with Store(path) as s:
        parent, kids = populate(s, 5)
    env = lmdb.open(str(path), max_dbs=20)
    with env.begin(write=True) as txn:
        children = env.open_db(b"children", txn=txn)
        cur = txn.cursor(db=children)
        assert cur.first()
        cur.delete()  # lose one child entry
        projdb = env.open_db(b"proj", txn=txn)
        txn.delete(b"state\x00" + uuid.UUID(parent).bytes, db=projdb)  # lose one thread's state
    env.close()
    with Store(path) as s:
        assert len(s.children(parent)) == 4
        reports = s.rebuild(verify=True)
        diffs = [d for r in reports for d in r.differences]
        assert any(d.startswith("links: children[") and "live absent" in d for d in diffs), diffs
        assert any(d.startswith("state: state of thread key " + uuid.UUID(parent).hex) for d in diffs), diffs
        assert len(s.children(parent)) == 4  # verify changed nothing
        s.rebuild()
        assert sorted(s.children(parent)) == sorted(kids)
        assert [c.tool_call_id for c in s.pending(parent).pending] == ["p1"]
        assert all(r.differences == [] for r in s.rebuild(verify=True))


def test_changed_fold_version_is_reported_then_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s"
    with Store(path) as s:
        parent, kids = populate(s, 3)
    # The next tplog release folds links/state differently (the next versions).
    nxt = proj.VERSIONS["links"] + 1
    monkeypatch.setitem(proj.VERSIONS, "links", nxt)
    monkeypatch.setitem(proj.VERSIONS, "state", proj.VERSIONS["state"] + 1)
    with Store(path) as s:
        assert s.projections()["links"]["status"] == "stale"
        with pytest.raises(RebuildRequiredError, match=r"tplog rebuild .* --projection links"):
            s.children(parent)
        # Appends go on while stale; pending is answered by folding headers on demand.
        late = str(uuid.uuid4())
        s.append(late, [start(late), link(parent)])
        s.append(parent, tool_turn("p2", {"p2": "external"}))
        assert [c.tool_call_id for c in s.pending(parent).pending] == ["p1", "p2"]
        reports = s.rebuild()
        assert {r.projection for r in reports} == {"links", "state"}
        info = s.projections()
        assert info["links"] == {"code_version": nxt, "version": nxt, "status": "live", "position": s.last_position}
        assert sorted(s.children(parent)) == sorted([*kids, late])
        assert [(c.tool_call_id, c.kind) for c in s.pending(parent).pending] == [("p1", "approval"),
                                                                                 ("p2", "external")]


def test_cli_rebuild_and_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "s")
    with Store(path) as s:
        populate(s, 4)
    assert main(["rebuild", path, "--projection", "links"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out[0]["projection"] == "links" and out[0]["differences"] == []
    assert main(["verify", path]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True


def test_cli_rebuild_chunk(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--chunk N`` folds the log in chunks of N events (each its own snapshot and commit) to
    the same projections; a chunk that is not a positive number is a clear error, nothing written."""
    path = str(tmp_path / "s")
    with Store(path) as s:
        populate(s, 4)
        events = s.stats()["events"]
    assert main(["rebuild", path, "--chunk", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {r["projection"] for r in out} == {"links", "state"} and all(r["events"] == events for r in out)
    assert main(["rebuild", path, "--verify", "--chunk", "5"]) == 0  # the same rows as one big chunk
    assert all(r["differences"] == [] for r in json.loads(capsys.readouterr().out))
    for bad in ("0", "-2"):
        assert main(["rebuild", path, "--chunk", bad]) == 2
        _, err = capsys.readouterr()
        assert "chunk must be a positive number of events" in err and "Traceback" not in err
    with Store(path) as s:
        with pytest.raises(InvalidInputError, match="chunk"):
            s.rebuild(chunk=0)
        assert s.projections()["links"]["status"] == "live"
        done: list[int] = []
        s.rebuild("links", chunk=4, progress=lambda _name, n, _total: done.append(n))
        assert done[: events // 4] == [4 * (i + 1) for i in range(events // 4)]  # one call per chunk of 4
    assert main(["verify", path]) == 0


def test_verify_names_a_corrupted_event(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s"
    tid = str(uuid.uuid4())
    # the turn left open: its events stay one row each (tests/backends/lmdb/test_chunks.py damages chunks)
    with Store(path) as s:
        s.append(tid, [start(tid), *tool_turn("c")[:2]])
    env = lmdb.open(str(path), max_dbs=20)
    with env.begin(write=True) as txn:
        events = env.open_db(b"events", txn=txn)
        key = uuid.UUID(tid).bytes + (3).to_bytes(8, "big")
        v = bytearray(txn.get(key, db=events))
        v[-1] ^= 0xFF
        txn.put(key, bytes(v), db=events)
    env.close()
    assert main(["verify", str(path)]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    assert any(f"thread {tid}, seq 3" in p and "CRC" in p for p in report["problems"]), report


_APPENDER = """
import sys, uuid
from tplog.protocol import model as m
from tplog.events import ThreadStarted, LinkAdded, AgentTurnStarted, MessageRecorded, AgentTurnCompleted
from tplog.store import Store
path, parent, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
T = "2025-01-20T10:00:00Z"
with Store(path, durability="relaxed", check_rules=False) as s:  # toy data: agent "a" is not registered
    for i in range(n):
        kid = str(uuid.uuid4())
        s.append(kid, [ThreadStarted(thread_id=kid, created_at=T),
                       LinkAdded(link=m.ThreadLink(thread_id=parent, relation="spawned_from")),
                       AgentTurnStarted(agent_id="a", started_at=T),
                       MessageRecorded(message=m.ResponseMessage(timestamp=T, agent_id="a",
                           parts=[m.ToolCallPart(tool_name="t", tool_call_id=f"c{i}", args={})])),
                       AgentTurnCompleted(completed_at=T)])
print("done", flush=True)
"""


def test_rebuild_verify_while_another_process_appends(tmp_path: Path) -> None:
    path = str(tmp_path / "s")
    with Store(path) as s:
        parent, _ = populate(s, 20)
    n = 400
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    writer = subprocess.Popen([sys.executable, "-c", _APPENDER, path, parent, str(n)], env=env,
                              stdout=subprocess.PIPE, text=True)
    rounds = 0
    try:
        deadline = time.monotonic() + 60
        while writer.poll() is None and time.monotonic() < deadline:
            # A rebuild (swap) and a verify, each in its own process, while the writer appends.
            for cmd in (["rebuild", path], ["rebuild", path, "--verify"]):
                r = subprocess.run([sys.executable, "-m", "tplog", *cmd], env=env, capture_output=True, text=True,
                                   timeout=60)
                assert r.returncode == 0, (cmd, r.stdout, r.stderr)
                assert all(rep["differences"] == [] for rep in json.loads(r.stdout)), r.stdout
            rounds += 1
    finally:
        out, _ = writer.communicate(timeout=60)
    assert writer.returncode == 0 and "done" in out
    assert rounds >= 1
    with Store(path) as s:
        assert len(s.children(parent)) == 20 + n
        assert all(r.differences == [] for r in s.rebuild(verify=True))
        from tplog.verify import verify_store

        rep = verify_store(s)
        assert rep.ok, rep.problems


def spawn_turn(child: str) -> list:
    return [AgentTurnStarted(agent_id="a", started_at=T),
            MessageRecorded(message=m.SystemMessage(timestamp=T, event_type="data-tp-thread_spawn",
                                                    event_data={"spawned_thread_id": child})),
            AgentTurnCompleted(completed_at=T)]


@pytest.mark.parametrize("round_", range(4))  # thread keys are random: chunk boundaries fall differently
def test_rebuild_in_small_chunks_while_threads_are_appended_and_deleted(tmp_path: Path, round_: int) -> None:
    """The key-order scan runs in many snapshots and the catch-up folds only what none
    of them held: between every two chunks (the progress callback runs there) the
    store changes — appends to threads already scanned and not yet scanned, new
    threads, deletions of threads already folded (their links must go) — and the
    rebuilt projections still equal a fresh one-pass rebuild and the expected answers."""
    with Store(tmp_path / "s") as s:
        parent, kids = populate(s, 12)
        s.append(parent, [e for k in kids[:6] for e in spawn_turn(k)])
        expected_children = set(kids)
        actions = []
        for i, kid in enumerate(kids):
            if i % 3 == 0:  # deleted: nobody's child, though the parent's spawn event (kids[:6]) names it
                actions.append(lambda kid=kid: (s.delete_thread(kid), expected_children.discard(kid)))
            else:
                actions.append(lambda kid=kid, i=i: s.append(kid, tool_turn(f"late{i}")))
        for _ in range(4):
            def new_kid() -> None:
                kid = str(uuid.uuid4())
                s.append(kid, [start(kid), link(parent), *tool_turn("n")])
                expected_children.add(kid)
            actions.append(new_kid)
        actions.append(lambda: s.append(parent, tool_turn("p9", {"p9": "external"})))
        calls = 0

        def progress(done: int, total: int) -> None:
            nonlocal calls
            calls += 1
            if actions:
                actions.pop(0)()

        reports = rebuild(s.backend.engine, s.codec, ["links", "state"], chunk=7, progress=progress)
        assert calls > len(kids) // 2  # the log really was scanned in many chunks
        assert {r.projection for r in reports} == {"links", "state"}
        assert all(r.differences == [] for r in reports)
        # What was swapped in equals a rebuild of the final log in one pass...
        assert [r.differences for r in s.rebuild(verify=True)] == [[], []]
        # ... and the answers a reader expects.
        assert set(s.children(parent)) == expected_children
        for i, kid in enumerate(kids):
            if i % 3:
                assert [c.tool_call_id for c in s.pending(kid).pending] == [f"k{i}", f"late{i}"]
        assert [c.tool_call_id for c in s.pending(parent).pending] == ["p1", "p9"]


def _marker(s: Store, name: str) -> tuple[int, bytes, int] | None:
    with s.backend.engine.read() as txn:
        raw = txn.get("meta", b"rebuild:" + name.encode())
    return None if raw is None else tuple(msgspec.msgpack.decode(raw))  # type: ignore[return-value]


def test_a_second_rebuild_in_the_same_process_is_refused(tmp_path: Path) -> None:
    """Two rebuilds would fold the catch-up's events into the same shadow rows twice."""
    with Store(tmp_path / "s") as s:
        parent, _ = populate(s, 12)
        refused: list[Exception] = []

        def progress(done: int, total: int) -> None:
            if not refused:
                with pytest.raises(RebuildInProgressError, match=r"projection 'links' is already running") as exc:
                    s.rebuild()
                refused.append(exc.value)
                s.append(parent, tool_turn("late"))

        reports = rebuild(s.backend.engine, s.codec, ["links", "state"], chunk=7, progress=progress)
        assert refused and all(r.differences == [] for r in reports)
        assert _marker(s, "links") is None and _marker(s, "state") is None  # released by the swap
        assert all(r.differences == [] for r in s.rebuild(verify=True))


_HOLDER = """
import sys, time
from pathlib import Path
from tplog.backends.lmdb.rebuild import rebuild
from tplog.store import Store
path, flag = sys.argv[1], Path(sys.argv[2])
with Store(path) as s:
    def progress(done, total):
        print("holding", flush=True)
        while not flag.exists():
            time.sleep(0.01)
    rebuild(s.backend.engine, s.codec, ["links"], chunk=5, progress=progress)
print("done", flush=True)
"""


def _hold(path: str, flag: Path) -> subprocess.Popen[str]:
    """A rebuild of ``links`` in another process, stopped in its first progress call
    until ``flag`` exists."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, path, str(flag)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
    return holder


def test_a_rebuild_running_in_another_process_is_refused_then_a_dead_ones_marker_taken_over(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "s")
    with Store(path) as s:
        populate(s, 5)
    flag = tmp_path / "go"
    holder = _hold(path, flag)
    try:
        with Store(path) as s:
            with pytest.raises(RebuildInProgressError, match=rf"already running \(process {holder.pid}, started"):
                s.rebuild("links")
            s.rebuild("state")  # another projection's rebuild is not held up
        flag.touch()
        out, _ = holder.communicate(timeout=60)
        assert holder.returncode == 0 and "done" in out
    finally:
        if holder.poll() is None:
            holder.kill()
    # A marker left by a process that is gone (killed mid-rebuild) is taken over.
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)
    with Store(path) as s:
        s.backend.engine.run_write(lambda txn: txn.put("meta", b"rebuild:links",
                                               msgspec.msgpack.encode((dead_pid, b"x" * 16, time.time_ns()))))
        assert all(r.differences == [] for r in s.rebuild("links"))
        assert _marker(s, "links") is None


def test_a_rebuild_taken_over_stops_without_swapping(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        populate(s, 12)
        with s.backend.engine.read() as txn:
            before = [(bytes(k), bytes(v)) for k, v in txn.range("children")]

        def take_over(done: int, total: int) -> None:  # another rebuild found this one gone
            s.backend.engine.run_write(lambda txn: txn.put("meta", b"rebuild:links",
                                                   msgspec.msgpack.encode((os.getpid(), b"y" * 16, time.time_ns()))))
            s.backend.engine.run_write(lambda txn: txn.delete("children", before[0][0]))  # so a swap would show

        with pytest.raises(RebuildInProgressError, match="took this one over"):
            rebuild(s.backend.engine, s.codec, ["links"], chunk=7, progress=take_over)
        with s.backend.engine.read() as txn:
            assert [(bytes(k), bytes(v)) for k, v in txn.range("children")] == before[1:]  # not swapped
        assert _marker(s, "links") is not None and _marker(s, "links")[1] == b"y" * 16  # the other's, kept


def test_a_failed_rebuild_releases_its_claim(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        populate(s, 12)

        def boom(done: int, total: int) -> None:
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            rebuild(s.backend.engine, s.codec, ["links", "state"], chunk=7, progress=boom)
        assert _marker(s, "links") is None and _marker(s, "state") is None
        assert all(r.differences == [] for r in s.rebuild(verify=True))


def test_a_claim_whose_process_id_now_names_another_process_is_taken_over(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A rebuild that died left its claim; its process id has since been reused. The
    lock it held went with it, so the next rebuild takes the claim over by itself."""
    path = str(tmp_path / "s")
    with Store(path) as s:
        populate(s, 5)
        sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            s.backend.engine.run_write(lambda txn: txn.put("meta", b"rebuild:links",
                                                   msgspec.msgpack.encode((sleeper.pid, b"z" * 16, time.time_ns()))))
            assert all(r.differences == [] for r in s.rebuild("links"))
            assert _marker(s, "links") is None
        finally:
            sleeper.kill()
            sleeper.wait()
        # Through the CLI, naming process 1 (always there).
        s.backend.engine.run_write(lambda txn: txn.put("meta", b"rebuild:links",
                                               msgspec.msgpack.encode((1, b"z" * 16, time.time_ns()))))
    assert main(["rebuild", path, "--projection", "links"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["differences"] == []
    with Store(path) as s:
        assert _marker(s, "links") is None


def test_a_rebuild_killed_mid_way_is_taken_over_and_force_takes_over_a_running_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "s")
    with Store(path) as s:
        parent, _ = populate(s, 5)
    # Killed with SIGKILL mid-rebuild: no cleanup ran, its claim is still in meta.
    holder = _hold(path, tmp_path / "never")
    holder.kill()
    holder.wait()
    with Store(path) as s:
        marker = _marker(s, "links")
        assert marker is not None and marker[0] == holder.pid
        s.append(parent, tool_turn("after-kill"))
        assert all(r.differences == [] for r in s.rebuild("links"))
        assert _marker(s, "links") is None
        assert all(r.differences == [] for r in s.rebuild(verify=True))
    # A rebuild that still runs (here: waiting) is refused, and --force takes it over.
    flag = tmp_path / "go"
    holder = _hold(path, flag)
    try:
        assert main(["rebuild", path, "--projection", "links"]) != 0
        assert f"already running (process {holder.pid}, started" in capsys.readouterr().err
        assert main(["rebuild", path, "--projection", "links", "--force"]) == 0
        assert json.loads(capsys.readouterr().out)[0]["differences"] == []
        flag.touch()
        _, err = holder.communicate(timeout=60)
        assert holder.returncode != 0 and "took this one over" in err
    finally:
        if holder.poll() is None:
            holder.kill()
    with Store(path) as s:
        assert _marker(s, "links") is None
        assert all(r.differences == [] for r in s.rebuild(verify=True))
        assert len(s.children(parent)) == 5


def test_progress_counts_events_up_to_the_total(tmp_path: Path) -> None:
    """The progress callback (the CLI's bar) counts in events in both passes: it never
    goes backwards, and the last call reports done == total == the events folded."""
    with Store(tmp_path / "s") as s:
        parent, _ = populate(s, 12)
        calls: list[tuple[int, int]] = []

        def progress(done: int, total: int) -> None:
            calls.append((done, total))
            if len(calls) == 2:  # appended during the key-order pass: caught up on afterwards
                s.append(parent, tool_turn("late"))

        reports = rebuild(s.backend.engine, s.codec, ["links", "state"], chunk=7, progress=progress)
        dones = [d for d, _ in calls]
        assert dones == sorted(dones) and all(d <= t for d, t in calls)
        assert calls[-1][0] == calls[-1][1] == reports[0].events
        assert reports[0].events >= s.stats()["events"]


def test_verify_during_a_rebuild_skips_that_projection_check(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """`tplog verify` (another process) while a rebuild runs checks everything else and
    says which projection it did not compare (not a problem: exit 0)."""
    path = str(tmp_path / "s")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    with Store(path) as s:
        populate(s, 12)
        seen: list[subprocess.CompletedProcess[str]] = []

        def progress(done: int, total: int) -> None:
            if not seen:
                seen.append(subprocess.run([sys.executable, "-m", "tplog", "verify", path], env=env,
                                           capture_output=True, text=True, timeout=60))

        rebuild(s.backend.engine, s.codec, ["links"], chunk=7, progress=progress)
    assert seen[0].returncode == 0, seen[0].stderr
    report = json.loads(seen[0].stdout)
    assert report["ok"] is True and report["problems"] == []
    assert len(report["skipped"]) == 1 and "projection 'links'" in report["skipped"][0]
    assert "already running" in report["skipped"][0]
    assert main(["verify", path]) == 0
    assert json.loads(capsys.readouterr().out)["skipped"] == []


# ------------------------------------------------------------- verify / rebuild --verify see every kind of drift
# Each test plants one kind of damage a bug could leave and asserts the exact report, then the repair.


def _verify_problems(s: Store) -> list[str]:
    from tplog.verify import verify_store

    return verify_store(s).problems


def test_phantom_link_rows_are_reported_and_rebuild_deletes_them(tmp_path: Path) -> None:
    """Rows only the live projection has (a links_in and a children row no event accounts for)."""
    with Store(tmp_path / "s") as s:
        parent, kids = populate(s, 3)
        ghost = str(uuid.uuid4())
        pk, gk = uuid.UUID(parent).bytes, uuid.UUID(ghost).bytes
        s.backend.engine.run_write(lambda txn: (
            txn.put("links_in", proj.link_key(parent, "referenced", gk, 7), msgspec.msgpack.encode([ghost, parent])),
            txn.put("children", pk + gk, msgspec.msgpack.encode((ghost, CHILD_LINK)))))
        assert ghost in s.children(parent) and (ghost, "referenced") in s.incoming(parent)  # readers see them
        expected = [
            f"links: links_in[{pk.hex()} … {gk.hex()} seq 7]: live ['{ghost}', '{parent}'], rebuilt absent",
            f"links: children[{pk.hex()} → {gk.hex()}]: live ['{ghost}', 1], rebuilt absent",
        ]
        assert [r.differences for r in s.rebuild(verify=True)] == [expected, []]
        assert ghost in s.children(parent)  # --verify changes nothing
        assert _verify_problems(s) == expected
        s.rebuild("links")
        assert sorted(s.children(parent)) == sorted(kids)
        assert (ghost, "referenced") not in s.incoming(parent)
        assert [r.differences for r in s.rebuild(verify=True)] == [[], []]
        assert _verify_problems(s) == []


def test_changed_projection_values_are_reported_and_rebuild_restores_them(tmp_path: Path) -> None:
    """Rows both sides have, with a different value: a state row, a children row's flags, a
    links_in row's source."""
    with Store(tmp_path / "s") as s:
        parent, kids = populate(s, 3)
        pk, k0 = uuid.UUID(parent).bytes, uuid.UUID(kids[0]).bytes
        state_key = proj.STATE_PREFIX + pk
        link_key = proj.link_key(parent, "spawned_from", k0, 2)
        with s.backend.engine.read() as txn:
            old_state = bytes(txn.get("proj", state_key))
            assert bytes(txn.get("links_in", link_key)) == msgspec.msgpack.encode([kids[0], parent])
        empty = proj.encode_state(proj.decode_state(None))
        s.backend.engine.run_write(lambda txn: (
            txn.put("proj", state_key, empty),
            txn.put("children", pk + k0, msgspec.msgpack.encode((kids[0], CHILD_LINK | CHILD_SPAWN))),
            txn.put("links_in", link_key, msgspec.msgpack.encode([kids[1], parent]))))
        assert s.pending(parent).pending == []  # the damage is what readers get
        links_diffs = [
            f"links: links_in[{pk.hex()} … {k0.hex()} seq 2]: live ['{kids[1]}', '{parent}'], "
            f"rebuilt ['{kids[0]}', '{parent}']",
            f"links: children[{pk.hex()} → {k0.hex()}]: live ['{kids[0]}', 3], rebuilt ['{kids[0]}', 1]",
        ]
        state_diff = (f"state: state of thread key {pk.hex()}: live {repr(msgspec.msgpack.decode(empty))[:200]}, "
                      f"rebuilt {repr(msgspec.msgpack.decode(old_state))[:200]}")
        assert [r.differences for r in s.rebuild(verify=True)] == [links_diffs, [state_diff]]
        assert _verify_problems(s) == [*links_diffs, state_diff]
        assert s.pending(parent).pending == []  # --verify changes nothing
        s.rebuild()
        assert [c.tool_call_id for c in s.pending(parent).pending] == ["p1"]
        with s.backend.engine.read() as txn:
            assert bytes(txn.get("proj", state_key)) == old_state
            assert msgspec.msgpack.decode(txn.get("children", pk + k0)) == [kids[0], CHILD_LINK]
        assert s.incoming(parent, relation="spawned_from").count((kids[1], "spawned_from")) == 1
        assert [r.differences for r in s.rebuild(verify=True)] == [[], []]
        assert _verify_problems(s) == []


def test_verify_reports_a_wrong_blob_reference_count(tmp_path: Path) -> None:
    from tplog.codec import blob_refcount, blob_with_refcount
    from tplog.limits import Limits

    tid = str(uuid.uuid4())
    big = "x" * 5000
    with Store(tmp_path / "s", limits=Limits(blob_threshold=1024)) as s:
        s.append(tid, [start(tid), user(big), user(big)])  # one blob, referenced twice
        with s.backend.engine.read() as txn:
            [(sha, blob)] = [(bytes(k), bytes(v)) for k, v in txn.range("blobs")]
        assert blob_refcount(blob) == 2
        assert _verify_problems(s) == []
        for wrong in (5, 1):
            s.backend.engine.run_write(lambda txn, w=wrong: txn.put("blobs", sha, blob_with_refcount(blob, w)))
            assert _verify_problems(s) == [f"blob {sha.hex()}: refcount {wrong}, referenced 2"]


def test_verify_reports_an_event_missing_from_the_event_id_index(tmp_path: Path) -> None:
    tid = str(uuid.uuid4())
    with Store(tmp_path / "s") as s:
        s.append(tid, [start(tid), *tool_turn("c")])
        eid = s.read(tid)[2].event_id
        assert _verify_problems(s) == []
        s.backend.engine.run_write(lambda txn: txn.delete("eventids", eid.encode()))
        assert _verify_problems(s) == [f"thread {tid}, seq 3: event id {eid!r} is not indexed to it"]


def _damage(s: Store, tid: str, what: str) -> None:
    """One kind of damage to thread ``tid`` (seqs 1..3 at positions 1..3) or to the store."""
    from tplog.backends.lmdb.keys import event_key, scope_tag, tkey, u64

    tk = tkey(tid)
    keys = [event_key(tk, q) for q in (1, 2, 3)]
    eids = [e.event_id.encode() for e in s.read(tid)]
    head = s.head(tid)

    def edit(txn: object) -> None:
        t: Any = txn
        if what == "gap":  # seq 2 gone from the events table (its index entries stay)
            t.delete("events", keys[1])
        elif what == "garbage_header":  # a header the CRC accepts but no decoder does
            v = bytearray(t.get("events", keys[1]))
            v[v.index(eids[1])] = 0xFF
            end = 12 + int.from_bytes(v[10:12], "big")
            v[6:10] = zlib.crc32(keys[1], zlib.crc32(bytes(v[10:end]), zlib.crc32(b"\x03"))).to_bytes(4, "big")
            t.put("events", keys[1], bytes(v))
        elif what == "global_elsewhere":  # position 2 names seq 3
            t.put("global", u64(2), keys[2])
        elif what == "positions_out_of_order":  # seq 2 at position 3, seq 3 at position 2
            t.put("global", u64(2), keys[2])
            t.put("global", u64(3), keys[1])
            t.put("eventids", eids[1], keys[1] + u64(3))
            t.put("eventids", eids[2], keys[2] + u64(2))
        elif what == "head_version":
            t.put("heads", tk, msgspec.msgpack.encode(msgspec.structs.replace(head, version=4)))
        elif what == "updated_missing":
            t.delete("updated", scope_tag(None) + u64(head.updated_ns) + tk)
        elif what == "global_dangling":
            t.put("global", u64(99), event_key(tkey("nowhere"), 1))
        elif what == "stale":
            proj.write_info(t, "links", proj.ProjectionInfo(proj.VERSIONS["links"], 3, "stale"))

    s.backend.engine.run_write(edit)


@pytest.mark.parametrize("what", ["gap", "garbage_header", "global_elsewhere", "positions_out_of_order",
                                  "head_version", "updated_missing", "global_dangling", "stale"])
def test_verify_names_each_kind_of_damage_exactly(tmp_path: Path, what: str) -> None:
    tid = str(uuid.uuid4())
    with Store(tmp_path / "s") as s:
        s.append(tid, [start(tid), user("one"), user("two")])
        assert _verify_problems(s) == []
        _damage(s, tid, what)
        from tplog.backends.lmdb.keys import tkey
        from tplog.verify import verify_store

        nowhere = tkey("nowhere").hex()
        expected = {
            "gap": [f"thread {tid}: seq 3 follows seq 1 (gap)",
                    f"global position 2 names a missing event (thread key {uuid.UUID(tid).hex}, seq 2)"],
            "garbage_header": [],  # checked below: the lines embed the decoder's own message
            "global_elsewhere": [f"thread {tid}, seq 2: global position 2 does not name it"],
            "positions_out_of_order": [f"thread {tid}, seq 3: position 2 not after 3"],
            "head_version": [f"thread {tid}: head version 4 but last seq 3"],
            "updated_missing": [f"thread {tid}: no 'updated' index entry for its head"],
            "global_dangling": [f"global position 99 names a missing event (thread key {nowhere}, seq 1)"],
            "stale": [f"projection 'links' is stale: run `tplog rebuild {s.path} --projection links`"],
        }[what]
        problems = verify_store(s).problems
        if what == "garbage_header":  # reported by the log check, and by each projection's rebuild
            # tplog's part of each line (what failed, the thread, the seq); between them msgspec's words, untested
            prefixes = ["", "projection 'links' cannot be rebuilt: ", "projection 'state' cannot be rebuilt: "]
            assert len(problems) == 3, problems
            for prefix, problem in zip(prefixes, problems, strict=True):
                assert problem.startswith(f"{prefix}event header does not decode: "), problem
                assert problem.endswith(f" (thread {tid}, seq 2)"), problem
            with pytest.raises(CorruptionError) as info:
                s.read(tid)
            assert (info.value.thread_id, info.value.seq) == (tid, 2)
            assert str(info.value).startswith("event header does not decode: ")
        elif what == "gap":  # and the state rebuilt without seq 2 counts one user turn fewer
            assert problems[:2] == expected
            assert len(problems) == 3 and problems[2].startswith(
                f"state: state of thread key {uuid.UUID(tid).hex}: live {{'seq': 3, 'turn': 1,"), problems
        else:
            assert problems == expected
        if what == "stale":  # the log itself is sound: without the projection check, nothing to report
            assert verify_store(s, projections=False).problems == []
