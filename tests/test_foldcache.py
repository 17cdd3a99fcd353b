"""The fold cache's own bookkeeping (tplog/foldcache.py): what it keeps, what it evicts, and its hit
and miss counts (served on /metrics). tests/test_fold_cache.py checks that loads through it fold the
same as from scratch, which a cache that never hits passes too."""

from __future__ import annotations

from tplog.foldcache import FoldCache
from tplog.projections.fold import Folder


def _folder(seq: int) -> Folder:
    f = Folder()
    f.seq = seq
    return f


def test_take_returns_what_was_given_once_and_counts_hits_and_misses() -> None:
    c = FoldCache(10)
    assert (c.hits, c.misses, c.events) == (0, 0, 0)
    f = _folder(4)
    c.give(b"t", f)
    assert c.events == 4
    assert c.take(b"t") is f
    assert (c.hits, c.misses, c.events) == (1, 0, 0)
    assert c.take(b"t") is None  # taken out while a load extends it
    assert c.take(b"u") is None
    assert (c.hits, c.misses) == (1, 2)
    c.give(b"t", f)
    assert c.take(b"t") is f
    assert (c.hits, c.misses) == (2, 2)


def test_a_fold_as_large_as_the_budget_is_kept_and_a_larger_one_is_not() -> None:
    c = FoldCache(5)
    c.give(b"big", _folder(6))
    assert c.events == 0 and not c.entries
    c.give(b"t", _folder(5))
    assert c.events == 5 and list(c.entries) == [b"t"]


def test_giving_a_thread_again_replaces_its_fold_and_its_count() -> None:
    c = FoldCache(10)
    c.give(b"t", _folder(3))
    newer = _folder(7)
    c.give(b"t", newer)
    assert c.events == 7 and list(c.entries) == [b"t"]
    c.give(b"u", _folder(3))  # 10 in all: within the budget, nothing evicted
    assert c.events == 10 and list(c.entries) == [b"t", b"u"]
    assert c.take(b"t") is newer


def test_over_the_budget_the_least_recently_given_folds_go_first() -> None:
    c = FoldCache(7)
    for tk in (b"a", b"b", b"c"):
        c.give(tk, _folder(3))
    assert list(c.entries) == [b"b", b"c"] and c.events == 6
    c.give(b"b", _folder(3))  # given again: now the most recent
    c.give(b"d", _folder(3))
    assert list(c.entries) == [b"b", b"d"] and c.events == 6
