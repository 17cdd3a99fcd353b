"""The LMDB finder index (tplog/backends/lmdb/finder.py) where mutation testing found it
unpinned (tests/MUTANTS.md): the table holds exactly the entries FORMAT.md lays out for the
heads as they are now (no entry of an earlier update left, values empty), also when an update
lands in the same nanosecond; a listing by several statuses reads each status's run; a filter
by agent and status reads the pair's own entries, not every thread of the status.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from conftest import ToyStore as Store
from conftest import agent_start, completed, response, started, user

from tplog.backends.common import thread_key
from tplog.backends.lmdb import finder
from tplog.backends.lmdb import recorder as lmdb_recorder
from tplog.backends.lmdb.keys import scope_tag
from tplog.lifecycle import ACTIVITIES, ThreadFilter


def _documented(head: Any, scope: str | None) -> set[bytes]:
    """A head's entries as FORMAT.md lays them out (built here from the layout, not by finder)."""
    tag = scope_tag(scope)
    tail = head.updated_ns.to_bytes(8, "big") + thread_key(head.thread_id, scope)
    code = bytes([ACTIVITIES.index(head.activity)])
    out = {b"a" + tag + code + tail}
    for agent in head.agent_ids:
        h = hashlib.blake2b(agent.encode(), digest_size=8).digest()
        out |= {b"g" + tag + h + tail, b"c" + tag + h + code + tail}
    return out


def _table(s: Store) -> dict[bytes, bytes]:
    with s.backend.engine.read() as txn:
        return {bytes(k): bytes(v) for k, v in txn.range("finder")}


def _check(s: Store, threads: dict[str | None, list[str]]) -> None:
    want: set[bytes] = set()
    for scope, tids in threads.items():
        for tid in tids:
            head = s.backend.head(tid, scope=scope)
            assert head is not None
            want |= _documented(head, scope)
    rows = _table(s)
    assert set(rows) == want
    assert set(rows.values()) == {b""}


def test_the_finder_table_holds_exactly_the_entries_of_the_heads_as_they_are_now(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        team = s.scoped("team")
        s.append("a", [started("a")])
        s.append("b", [started("b"), user(), agent_start("a1"), response("r", "a1")])
        team.append("c", [started("c"), user(), agent_start("a2"), response("r", "a2")])
        threads: dict[str | None, list[str]] = {None: ["a", "b"], "team": ["c"]}
        _check(s, threads)
        s.append("b", [response("again", "a1")])  # a later update, activity and agents unchanged
        _check(s, threads)
        s.append("b", [completed()])  # active -> idle
        _check(s, threads)
        s.append("a", [user(), agent_start("a1"), response("r", "a1"), completed(),
                       user(), agent_start("a2"), response("r", "a2")])  # two agents
        team.append("c", [completed()])
        _check(s, threads)
        s.delete_thread("b")
        _check(s, threads)
        assert s.head("b").status == "deleted"


def test_an_update_in_the_same_nanosecond_keeps_the_shared_entries_and_replaces_the_rest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A coarse clock: the update's entries share updated ns with the old ones; only those whose
    activity changed are replaced (the agent-only entries are the same keys, kept)."""
    monkeypatch.setattr(lmdb_recorder, "now_ns", lambda: 1_700_000_000_000_000_000)
    with Store(tmp_path / "s") as s:
        s.append("t", [started("t"), user(), agent_start("a1"), response("r", "a1")])
        _check(s, {None: ["t"]})
        before = _table(s)
        s.append("t", [completed()])  # active -> idle, same ns
        _check(s, {None: ["t"]})
        after = _table(s)
        g = [k for k in before if k[:1] == b"g"]
        assert len(g) == 1 and g[0] in after  # the agent entry did not change
        assert [h.thread_id for h in s.threads(activity="idle", agent="a1").threads] == ["t"]
        assert s.threads(activity="active").threads == []


def test_a_thread_updated_again_is_listed_once_by_status_and_by_agent(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        s.append("t", [started("t"), user(), agent_start("a1"), response("r", "a1")])
        for i in range(3):
            s.append("t", [response(f"more {i}", "a1")])
        assert [h.thread_id for h in s.threads(activity="active").threads] == ["t"]
        assert [h.thread_id for h in s.threads(agent="a1").threads] == ["t"]
        assert [h.thread_id for h in s.threads(agent="a1", activity="active").threads] == ["t"]


def test_a_listing_by_two_statuses_finds_the_threads_of_both_newest_first(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        s.append("idle1", [started("idle1")])
        s.append("act", [started("act"), user(), agent_start("a1"), response("r", "a1")])
        s.append("idle2", [started("idle2")])
        s.append("idle3", [started("idle3"), user(), agent_start("a1"), response("r", "a1"), completed()])
        got = [h.thread_id for h in s.threads(activity=["active", "idle"]).threads]
        assert got == ["idle3", "idle2", "act", "idle1"]
        got = [h.thread_id for h in s.threads(activity=["idle", "active"], agent="a1").threads]
        assert got == ["idle3", "act"]


def test_a_filter_by_agent_and_status_reads_only_that_pairs_entries(tmp_path: Path) -> None:
    """The candidates themselves (what a listing then reads heads for): a rare agent among
    many active threads is found without scanning every active thread."""
    with Store(tmp_path / "s") as s:
        for i in range(6):
            s.append(f"busy{i}", [started(f"busy{i}"), user(), agent_start("common"), response("r", "common")])
        s.append("rare", [started("rare"), user(), agent_start("rare-agent"), response("r", "rare-agent")])
        s.append("done", [started("done"), user(), agent_start("rare-agent"), response("r", "rare-agent"),
                          completed()])
        tag = scope_tag(None)
        with s.backend.engine.read() as txn:
            def keys(where: ThreadFilter) -> list[bytes]:
                return [bytes(k[8:]) for k in finder.candidates(txn, tag, where, b"", b"\xff" * 8, True)]

            assert keys(ThreadFilter(activity=("active",), agent="rare-agent")) == [thread_key("rare")]
            assert keys(ThreadFilter(activity=("idle", "active"), agent="rare-agent")) == [
                thread_key("done"), thread_key("rare")]
            assert len(keys(ThreadFilter(activity=("active",)))) == 7
            assert keys(ThreadFilter(agent="rare-agent")) == [thread_key("done"), thread_key("rare")]


def test_a_store_without_finder_entries_gets_them_at_its_next_writable_open(tmp_path: Path) -> None:
    """A store written before the finder table existed (no entries, no done mark): the next
    writable open writes every head's entries, scoped and deleted heads too, and the mark."""
    path = tmp_path / "s"
    threads: dict[str | None, list[str]] = {None: ["a", "b", "gone"], "team": ["c"]}
    with Store(path) as s:
        s.append("a", [started("a"), user(), agent_start("a1"), response("r", "a1")])
        s.append("b", [started("b")])
        s.append("gone", [started("gone")])
        s.delete_thread("gone")
        s.scoped("team").append("c", [started("c"), user(), agent_start("a2"), response("r", "a2"), completed()])

        def unbuilt(txn: Any) -> None:
            assert txn.delete("meta", finder.DONE)
            for k, _ in list(txn.range("finder")):
                txn.delete("finder", k)

        s.backend.engine.run_write(unbuilt)
        assert _table(s) == {}
    with Store(path) as s:
        _check(s, threads)
        with s.backend.engine.read() as txn:
            assert txn.get("meta", finder.DONE) is not None
        assert [h.thread_id for h in s.scoped("team").threads(agent="a2", activity="idle").threads] == ["c"]
