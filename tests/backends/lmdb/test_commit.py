"""The LMDB backend's append handles and its own checks (tplog/backends/lmdb/commit.py) where
mutation testing found them unpinned (tests/MUTANTS.md): a follower's sync handle answers
``result()`` again, ``add_done_callback`` calls back after a failed append too, the async
leader is a daemon thread of its own name that ``close`` ends, and the backend checks a page
``limit`` itself (the facade's check is a copy, so only direct calls reach this one).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from backends.contract_helpers import part
from conftest import agent_start, completed, link, spawn_message, started, user

from tplog.backends.lmdb import LmdbRecorder
from tplog.errors import InvalidInputError, WrongExpectedVersionError


@pytest.fixture
def rec(tmp_path: Path) -> Iterator[LmdbRecorder]:
    r = LmdbRecorder(tmp_path / "lmdb", auto_dictionary=0)
    yield r
    r.close()


def _within(fn: Callable[[], Any], limit: float = 10.0) -> Any:
    """``fn()`` run in a thread given ``limit`` seconds: a handle that blocks forever fails the test."""
    out: list[Any] = []
    th = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    th.start()
    th.join(limit)
    assert not th.is_alive(), f"still blocked after {limit} s"
    assert out, "raised"
    return out[0]


def test_a_follower_handle_answers_result_again(rec: LmdbRecorder) -> None:
    """The second append queued while the first caller holds the lead: the leader commits both;
    the follower's handle then answers ``result()`` as often as asked (it no longer waits)."""
    h1 = rec.submit([part("a", [started("a")], expected="no_stream")])
    h2 = rec.submit([part("b", [started("b")], expected="no_stream")])
    assert not h2.done()
    [r1] = h1.result()
    assert h2.done()
    [r2] = _within(h2.result)
    assert _within(h2.result) == [r2]
    assert (r1.thread_id, r1.first_position, r2.thread_id, r2.first_position) == ("a", 1, "b", 2)
    calls: list[Any] = []
    h2.add_done_callback(calls.append)
    assert calls == [h2]


def test_add_done_callback_calls_back_after_a_failed_append(rec: LmdbRecorder) -> None:
    rec.submit([part("a", [started("a")], expected="no_stream")]).result()
    h = rec.submit([part("a", [started("a")], expected="no_stream")])
    calls: list[Any] = []
    h.add_done_callback(calls.append)  # leads the commit, which refuses the append
    assert calls == [h]
    with pytest.raises(WrongExpectedVersionError, match="a"):
        h.result()
    assert rec.head("a").version == 1  # type: ignore[union-attr]


def test_the_async_leader_is_a_named_daemon_thread_that_close_ends(tmp_path: Path) -> None:
    """A daemon: a process that never closes its store can still exit; named, so a thread dump says whose."""
    r = LmdbRecorder(tmp_path / "lmdb", auto_dictionary=0)
    before = set(threading.enumerate())
    try:
        fut = r.submit([part("a", [started("a")], expected="no_stream")], lead=False)
        [res] = fut.result(timeout=30)
        assert res.last_position == 1
        new = [t for t in threading.enumerate() if t not in before]
        assert [(t.name, t.daemon) for t in new] == [("tplog-async-leader", True)]
        # later async appends go through the same leader
        [res] = r.submit([part("a", [user()], expected=1)], lead=False).result(timeout=30)
        assert res.last_position == 2
        assert [t for t in threading.enumerate() if t not in before] == new
    finally:
        r.close()
    new[0].join(10)
    assert not new[0].is_alive()


@pytest.mark.parametrize("bad", [True, False, -1, "3", 2.5, [3]])
def test_the_backend_checks_a_page_limit_itself(rec: LmdbRecorder, bad: object) -> None:
    rec.submit([part("p", [started("p"), user(), agent_start(), spawn_message("c"), completed()])]).result()
    rec.submit([part("s", [started("s"), link("p")])]).result()
    for read in (rec.children, rec.incoming):
        with pytest.raises(InvalidInputError) as err:
            read("p", limit=bad)  # type: ignore[operator]
        assert str(err.value) == f"limit must be None or an int ≥ 0, not {bad!r}"


def test_a_page_limit_of_zero_is_an_empty_page(rec: LmdbRecorder) -> None:
    rec.submit([part("p", [started("p"), user(), agent_start(), spawn_message("c"), completed()])]).result()
    rec.submit([part("s", [started("s"), link("p")])]).result()
    assert rec.children("p", limit=0) == []
    assert rec.incoming("p", limit=0) == []
    assert rec.children("p", limit=1) == ["c"]
    assert rec.incoming("p", limit=1) == [("s", "referenced")]


def test_stats_count_this_process_group_commits_from_zero(rec: LmdbRecorder) -> None:
    assert rec.stats()["group_commit"] == {"commits": 0, "appends": 0, "mean_group": 0.0}
    h1 = rec.submit([part("a", [started("a")], expected="no_stream")])
    h2 = rec.submit([part("b", [started("b")], expected="no_stream")])  # queued behind the first: one group
    h1.result()
    h2.result()
    rec.submit([part("a", [user()], expected=1)]).result()
    assert rec.stats()["group_commit"] == {"commits": 2, "appends": 3, "mean_group": 1.5}
