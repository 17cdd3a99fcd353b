"""A fork answers every read exactly as a copy of its events would (tplog/fork.py's splice): each
``after``/``limit``/``direction`` of ``read``, ``load``, ``links``, ``items`` and the loads' event
splice, for a fork, a fork of a fork, and a fork at its parent's last seq.

Written for the survivors of tplog/fork.py's mutation run (tests/MUTANTS.md): the fork tests read
a fork whole, or from the start, so the page arithmetic of the splice went unchecked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import ToyStore as Store
from conftest import exchange, link, started

from tplog import fork as tfork
from tplog.events import ThreadStarted


def _copy(s: Store, fid: str, cid: str) -> None:
    """A plain thread holding the fork's events (its ThreadStarted renamed)."""
    evs = [e.event for e in s.read(fid)]
    assert isinstance(evs[0], ThreadStarted)
    s.append(cid, [msgspec.structs.replace(evs[0], thread_id=cid), *evs[1:]])


def _same(ev: Any) -> Any:
    """An event with a ThreadStarted's own id blanked (the copy's is its own)."""
    return msgspec.structs.replace(ev, thread_id="") if isinstance(ev, ThreadStarted) else ev


def _pairs(evs: list[Any]) -> list[tuple[int, Any]]:
    return [(e.seq, _same(e.event)) for e in evs]


@pytest.fixture
def forks(tmp_path: Path) -> Any:
    with Store(tmp_path / "s") as s:
        s.append("p", [started("p"), *exchange("q1"), link("x"), *exchange("q2"), *exchange("q3")])  # 1..14
        s.fork("p", 10, new_thread_id="f1")
        s.append("f1", [*exchange("f1q"), link("y")])  # 11..15
        s.fork("f1", 14, new_thread_id="f2")  # reads f1 2..14, itself through p 2..10
        s.append("f2", exchange("f2q"))  # 15..18
        s.fork("p", 14, new_thread_id="f3")  # at the parent's last seq: nothing of its own after
        for f in ("f1", "f2", "f3"):
            _copy(s, f, "c" + f)
        yield s


@pytest.mark.parametrize("fid", ["f1", "f2", "f3"])
def test_every_page_of_a_fork_is_the_same_page_of_its_copy(forks: Store, fid: str) -> None:
    s, cid = forks, "c" + fid
    n = s.backend.head(cid).version  # type: ignore[union-attr]
    assert [e.seq for e in s.read(fid)] == list(range(1, n + 1))
    assert {e.thread_id for e in s.read(fid)} == {fid}
    for direction in ("forward", "backward"):
        for after in [None, *range(0, n + 2)]:
            for limit in (None, 0, 1, 2, 3, 5, n):
                got = s.read(fid, after=after, limit=limit, direction=direction)  # type: ignore[arg-type]
                want = s.read(cid, after=after, limit=limit, direction=direction)  # type: ignore[arg-type]
                assert _pairs(got) == _pairs(want), (direction, after, limit)
                assert all(e.thread_id == fid for e in got)


@pytest.mark.parametrize("fid", ["f1", "f2", "f3"])
def test_a_forks_loads_links_and_items_are_its_copys(forks: Store, fid: str) -> None:
    s, cid = forks, "c" + fid
    n = s.backend.head(cid).version  # type: ignore[union-attr]
    for after in range(0, n + 1):
        _, got = tfork.thread_events(s, fid, after)
        assert [_same(e) for e in got] == [_same(e.event) for e in s.read(cid, after=after)], after
    want = s.load(cid)
    assert s.load(fid).thread.turns == want.thread.turns  # type: ignore[union-attr]
    assert [lk.thread_id for lk in s.links(fid)] == [lk.thread_id for lk in s.links(cid)]
    assert [(it.seq, it.kind) for it in tfork.items(s, fid)] == [(it.seq, it.kind) for it in s.backend.items(cid)]


def test_forks_of_names_the_live_forks_reading_a_thread(forks: Store) -> None:
    assert sorted(tfork.forks_of(forks, "p")) == ["f1", "f3"]
    assert tfork.forks_of(forks, "f1") == ["f2"]
    assert tfork.forks_of(forks, "cf1") == []
