"""``Store.load`` keeps the folds of recently loaded threads (``fold_cache``) and folds
only what was appended since. Checked against folding the whole log from scratch."""

from __future__ import annotations

import multiprocessing as mp
import tempfile
from pathlib import Path
from typing import Any

from conftest import ToyStore as Store
from conftest import agent_start, completed, exchange, response, started, user
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import THREAD_SETTINGS, threads

from tplog.projections.fold import events_from_thread, fold
from tplog.protocol import model as m
from tplog.protocol.json import from_builtins

SPAWN = mp.get_context("spawn")


def _scratch(s: Store, tid: str) -> Any:
    return fold(e.event for e in s.read(tid))


@settings(THREAD_SETTINGS, max_examples=40)
@given(doc=threads(), cuts=st.lists(st.integers(min_value=1, max_value=400), max_size=6))
def test_incremental_loads_equal_folds_from_scratch(doc: dict[str, Any], cuts: list[int]) -> None:
    thread = from_builtins(doc, m.Thread)
    events = events_from_thread(thread)
    bounds = sorted({c % len(events) for c in cuts if c % len(events)} | {len(events)})
    with tempfile.TemporaryDirectory() as d, Store(d) as s:
        done = 0
        for b in bounds:
            s.append(thread.thread_id, events[done:b])
            done = b
            assert s.load(thread.thread_id) == _scratch(s, thread.thread_id) == fold(events[:b])
        assert s.load(thread.thread_id) == fold(events)  # a cache hit: nothing new


def test_results_do_not_share_containers_with_the_cache(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        s.append("t", [started("t"), *exchange("q1", "a1"), user("q2"), agent_start(), response("partial")])
        first = s.load("t")
        assert first.thread is not None and first.in_progress is not None
        first.thread.turns.clear()
        first.thread.agents["x"] = m.AgentConfig(agent_id="x", agent_name="x", created_at="2025-01-20T10:00:00Z")
        first.in_progress.messages.clear()
        again = s.load("t")
        assert again == _scratch(s, "t")
        assert again.thread is not None and len(again.thread.turns) == 3 and "x" not in again.thread.agents
        assert again.in_progress is not None and len(again.in_progress.messages) == 1


def _append_turn(path: str) -> None:
    with Store(path) as s:
        s.append("t", exchange("from another process", "answer"))


def test_another_processes_appends_are_folded_in(tmp_path: Path) -> None:
    path = str(tmp_path / "s")
    with Store(path) as s:
        s.append("t", [started("t"), *exchange()])
        assert s.load("t").thread.turns.__len__() == 2  # type: ignore[union-attr]
        p = SPAWN.Process(target=_append_turn, args=(path,))
        p.start()
        p.join(60)
        assert p.exitcode == 0
        res = s.load("t")
        assert res == _scratch(s, "t")
        assert res.thread is not None and len(res.thread.turns) == 4 and res.seq == 9


def test_a_deleted_thread_never_answers_from_the_cache(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        s.append("t", [started("t"), *exchange("secret", "data")])
        assert s.load("t").thread is not None
        s.delete_thread("t")
        res = s.load("t")
        assert res.deleted and res.thread is None and res.seq == 1  # the tombstone alone


def test_budget_evicts_and_answers_stay_exact(tmp_path: Path) -> None:
    with Store(tmp_path / "s", fold_cache=12) as s:
        tids = [f"t{i}" for i in range(5)]
        for t in tids:
            s.append(t, [started(t), *exchange()])  # 5 events each: at most 2 threads fit
        for rnd in range(3):
            for t in tids:
                assert s.load(t) == _scratch(s, t)
                s.append(t, [user(f"more {rnd}"), agent_start(), response(), completed()])
        cache = s._folds
        assert cache.events <= 12 and sum(f.seq for f in cache.entries.values()) == cache.events
        for t in tids:
            assert s.load(t) == _scratch(s, t)


def test_fold_cache_off_and_bad_option(tmp_path: Path) -> None:
    with Store(tmp_path / "s", fold_cache=0) as s:
        s.append("t", [started("t"), *exchange()])
        assert s.load("t") == _scratch(s, "t") and not s._folds.entries
    import pytest

    from tplog import InvalidInputError

    with pytest.raises(InvalidInputError, match="fold_cache"):
        Store(tmp_path / "x", fold_cache=-1)
