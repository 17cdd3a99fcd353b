"""``tplog copy`` / ``tplog.copy.copy_store`` between LMDB and memory stores (PostgreSQL: tests/postgres)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from conftest import exchange, register, started
from copy_source import digests, fill, views

from tplog import Store
from tplog.copy import CopyConflictError, copy_store
from tplog.errors import InvalidInputError


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tplog", *args], capture_output=True, text=True, timeout=300)


def test_lmdb_to_memory_to_lmdb_keeps_every_thread(tmp_path: Path) -> None:
    with Store(tmp_path / "a", check_rules=False) as a, Store("memory:") as mem, Store(tmp_path / "b") as b:
        info = fill(a)
        first = copy_store(a, mem)
        second = copy_store(mem, b)
        assert first.ok and second.ok and first.verified and second.verified
        assert first.tombstones == second.tombstones == 1
        assert digests(a) == digests(mem) == digests(b)
        assert len(digests(a)) == first.threads == len(info["threads"]) + 2 + len(info["forks"])
        assert b.head(info["forks"][1]).fork_of == info["forks"][0]  # still a fork: its prefix is shared
        assert b.stats()["events"] == a.stats()["events"]
        assert views(a, info) == views(b, info)
        # event ids and recorded_at survive the copy
        for t in (info["root"], info["big"]):
            assert [(e.event_id, e.recorded_at) for e in a.read(t)] == [(e.event_id, e.recorded_at) for e in b.read(t)]
        assert b.head(info["deleted"]).status == "deleted"
        with pytest.raises(Exception, match="deleted"):  # the tombstone keeps the id from reuse there too
            b.append(info["deleted"], [started(info["deleted"])])


def test_copy_again_writes_nothing_and_continues_a_partial_copy(tmp_path: Path) -> None:
    with Store(tmp_path / "a", check_rules=False) as a, Store(tmp_path / "b", check_rules=False) as b:
        info = fill(a)
        t = info["threads"][3]
        # a partial copy: the first 2 events of one thread, as an interrupted copy leaves them
        src = a.read(t, limit=2)
        b.append(t, [e.event for e in src], event_ids=[e.event_id for e in src])
        rep = copy_store(a, b)
        assert rep.ok and rep.skipped == 2
        again = copy_store(a, b)
        assert again.ok and again.events == 0 and again.skipped == rep.skipped + rep.events - 1  # tombstone's start
        assert b.stats()["events"] == a.stats()["events"]  # nothing twice (the tombstone's ThreadStarted went with it)
        assert digests(a) == digests(b)


def test_conflicting_destination_is_a_typed_error_and_nothing_is_written(tmp_path: Path) -> None:
    with Store(tmp_path / "a", check_rules=False) as a, Store(tmp_path / "b", check_rules=False) as b:
        info = fill(a)
        t = info["threads"][4]
        b.append(t, [started(t), register(), *exchange("other")])  # same id, other events
        before = b.stats()["events"]
        with pytest.raises(CopyConflictError, match=t) as exc:
            copy_store(a, b)
        assert [x[0] for x in exc.value.threads] == [t]
        assert b.stats()["events"] == before


def test_cli_copy_reports_and_refuses_bad_targets(tmp_path: Path) -> None:
    with Store(tmp_path / "a", check_rules=False) as a:
        fill(a, extra=3)
        want = digests(a)
    out = _cli("copy", str(tmp_path / "a"), f"lmdb://{tmp_path / 'b'}", "--chunk", "7")
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout)
    assert rep["verified"] and rep["mismatches"] == [] and rep["threads"] == len(want)
    assert out.stderr == ""  # no progress bar without a terminal
    with Store(tmp_path / "b", readonly=True) as b:
        assert digests(b) == want
    listed = _cli("threads", f"lmdb://{tmp_path / 'b'}", "--limit", "1")  # every verb takes the URL
    assert listed.returncode == 0 and len(json.loads(listed.stdout)["threads"]) == 1
    missing = _cli("copy", str(tmp_path / "nowhere"), str(tmp_path / "c"))
    assert missing.returncode == 2 and "no tplog store here" in missing.stderr
    assert not (tmp_path / "c").exists()
    mem = _cli("copy", str(tmp_path / "a"), "memory:")
    assert mem.returncode == 2 and "memory:" in mem.stderr
    # a conflicting destination: exit 2 naming the thread
    t = str(uuid.uuid4())
    with Store(tmp_path / "a", check_rules=False) as a:
        a.append(t, [started(t), register()])
    with Store(tmp_path / "b", check_rules=False) as b:
        b.append(t, [started(t, title="not the source's")])
    clash = _cli("copy", str(tmp_path / "a"), str(tmp_path / "b"))
    assert clash.returncode == 2 and t in clash.stderr and "nothing was copied" in clash.stderr


def test_bad_chunk() -> None:
    with Store("memory:") as a, Store("memory:") as b, pytest.raises(InvalidInputError, match="chunk"):
        copy_store(a, b, chunk=0)


def test_cli_progress_bar_on_a_terminal_only(tmp_path: Path) -> None:
    import os
    import pty

    with Store(tmp_path / "a", check_rules=False) as a:
        fill(a, extra=3)
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "tplog", "copy", str(tmp_path / "a"), str(tmp_path / "b")],
                                stdout=subprocess.PIPE, stderr=follower)
        os.close(follower)
        err = b""
        while True:  # read the terminal until the process closes it
            try:
                data = os.read(leader, 65536)
            except OSError:
                break
            if not data:
                break
            err += data
        out, _ = proc.communicate(timeout=120)
    finally:
        os.close(leader)
    assert proc.returncode == 0
    assert json.loads(out)["mismatches"] == []  # stdout stays the JSON report
    assert b"copy" in err and b"verify" in err and "━".encode() in err  # rich's bar, on the terminal
    # drawn by tplog.console.progress, as import/rebuild/verify/prune are: its done/total column is
    # right-aligned to the total's width ("  0/575"), and the bars are erased at the end (transient)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", err.decode())
    first = re.search(r"copy ━+ +0/(\d+) ", text)
    assert first, text
    total = first.group(1)
    assert re.search(rf"copy ━+ {' ' * (len(total) - 1)}0/{total} -:--:--", text), text
    assert re.search(r"verify [━╸]+ +\d+/\d+ ", text), text
    assert err.endswith(b"\x1b[2K")  # the last thing written clears the bar's line


@pytest.mark.parametrize("kind", ["lmdb", "memory"])
def test_a_deleted_source_thread_never_tombstones_an_unrelated_live_one(tmp_path: Path, kind: str) -> None:
    """The source's thread is deleted (only its tombstone is left), the destination holds a live thread of
    its own under the same id: nothing shows it to be a copy of the deleted one, so the copy refuses
    (typed, naming it) and writes nothing, rather than deleting someone else's thread."""
    with Store(tmp_path / "a", check_rules=False) as a, \
            Store(tmp_path / "b" if kind == "lmdb" else "memory:", check_rules=False) as b:
        info = fill(a, extra=3)
        gone = info["deleted"]
        b.append(gone, [started(gone, title="someone else's"), register(), *exchange("mine")])
        before = b.stats()["events"], digests(b)
        with pytest.raises(CopyConflictError, match=gone) as exc:
            copy_store(a, b)
        assert [t for t, _ in exc.value.threads] == [gone]
        assert "deleted in the source" in exc.value.threads[0][1]
        assert (b.stats()["events"], digests(b)) == before
        assert b.head(gone).status == "active"


def test_a_tombstone_copy_interrupted_after_its_start_event_resumes(tmp_path: Path) -> None:
    """What a tombstone copy writes first (its ThreadStarted, under an id derived from the tombstone's) is
    provably ours: a copy run again over it writes the tombstone."""
    with Store(tmp_path / "a", check_rules=False) as a, Store(tmp_path / "b", check_rules=False) as b:
        info = fill(a, extra=3)
        gone = info["deleted"]
        full = copy_store(a, Store("memory:"))  # how many events a whole copy writes
        [tomb] = a.read(gone)
        # spelled out: a copy resumed by a later tplog must derive the same id
        eid = str(uuid.uuid5(uuid.UUID("0c9f3b1e-6f0a-4f43-9d0e-7b7d2c1c0a51"), tomb.event_id))
        b.append(gone, [started(gone)], event_ids=[eid])  # the copy was killed right after it
        rep = copy_store(a, b)
        assert rep.ok and rep.tombstones == 1 and rep.events == full.events - 1
        assert b.head(gone).status == "deleted" and digests(a) == digests(b)


def _diverged(a: Store, b: Store, t: str, same: set[int]) -> None:
    """Thread ``t`` into ``b``: the source's first three events, under the source's ids at the seqs in
    ``same`` and under other ids (another agent registered) at the others."""
    src = a.read(t, limit=3)
    evs = [e.event if e.seq in same or e.seq != 2 else register("someone-else") for e in src]
    b.append(t, evs, event_ids=[e.event_id if e.seq in same else str(uuid.uuid4()) for e in src])


def test_a_destination_equal_at_seq_1_and_diverged_after_is_a_conflict(tmp_path: Path) -> None:
    with Store(tmp_path / "a", check_rules=False) as a, Store(tmp_path / "b", check_rules=False) as b:
        t = fill(a, extra=3)["threads"][0]
        _diverged(a, b, t, {1})
        before = digests(b)
        with pytest.raises(CopyConflictError) as exc:
            copy_store(a, b)
        assert exc.value.threads == [(t, "seq 3 holds another event in the destination")]
        assert digests(b) == before


def test_cli_copy_reports_a_destination_that_differs_and_exits_1(tmp_path: Path) -> None:
    """Equal at the first and last seq it holds (what the conflict check compares), other in between:
    the copy goes on, and the verification finds the thread differs."""
    with Store(tmp_path / "a", check_rules=False) as a, Store(tmp_path / "b", check_rules=False) as b:
        t = fill(a, extra=3)["threads"][1]  # not [0]: its forks read its events, they would differ too
        _diverged(a, b, t, {1, 3})
        want = digests(a)
    out = _cli("copy", str(tmp_path / "a"), str(tmp_path / "b"))
    assert out.returncode == 1, out.stderr
    with Store(tmp_path / "b", readonly=True) as b:
        got = digests(b)
    assert got[t] != want[t] and {k: v for k, v in got.items() if k != t} == {k: v for k, v in want.items() if k != t}
    rep = json.loads(out.stdout)
    assert rep["verified"] and rep["mismatches"] == [{"thread_id": t, "source": want[t], "dest": got[t]}]
