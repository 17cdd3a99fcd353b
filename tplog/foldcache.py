"""The store's fold cache: the folders of recently loaded threads, so that the next load of a thread
folds only the events appended since (``Store(fold_cache=N)``)."""

from __future__ import annotations

import threading
from collections import OrderedDict

from tplog.projections.fold import Folder

__all__ = ["FoldCache"]


class FoldCache:
    """Folders of recently loaded threads (LRU), bounded by the events they cover.

    Shared by a store and its scoped views (keys are scoped thread keys). An
    entry is taken out while a load extends it, so two loads of one thread never
    feed the same folder."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.events = 0
        self.entries: OrderedDict[bytes, Folder] = OrderedDict()
        self.lock = threading.Lock()
        self.hits = 0  # takes that found the thread's fold (/metrics: tplog_fold_cache_hits_total)
        self.misses = 0

    def take(self, tk: bytes) -> Folder | None:
        with self.lock:
            f = self.entries.pop(tk, None)
            if f is not None:
                self.events -= f.seq
                self.hits += 1
            else:
                self.misses += 1
            return f

    def give(self, tk: bytes, f: Folder) -> None:
        if f.seq > self.budget:
            return
        with self.lock:
            old = self.entries.pop(tk, None)
            if old is not None:
                self.events -= old.seq
            self.entries[tk] = f
            self.events += f.seq
            while self.events > self.budget:
                _, out = self.entries.popitem(last=False)
                self.events -= out.seq
