"""Projection rows of the PostgreSQL backend, computed in Python: what an append batch
writes, and what a rebuild folds the log into (the same code, so they agree)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final

from tplog.backends.common import SPAWNED_FROM, child_spelling, outgoing
from tplog.backends.contract import Inherited, ThreadHead
from tplog.projections.fold import ThreadState

__all__ = ["ORD_SHIFT", "Batch", "Thread", "index_inherited", "index_links"]

#: Link ordinals (common.outgoing: a seq, or DECLARED | i) are stored minus 2**63: a bigint, same order.
ORD_SHIFT: Final = 1 << 63
#: (thread_id, scope) → (log, scope key, thread key)
KeyOf = Callable[[str, str | None], tuple[int, str, bytes]]


class Thread:
    """One thread's head while a batch is planned."""

    __slots__ = ("head", "last_off", "loaded_state", "log", "scope", "staged", "state", "stored", "tk", "written")

    def __init__(self, log: int, scope: str, tk: bytes, head: ThreadHead | None, state: bytes | None) -> None:
        self.log, self.scope, self.tk, self.head = log, scope, tk, head
        self.loaded_state = state
        self.state: ThreadState | None = None
        self.written = False
        self.last_off = 0
        self.stored: list[Any] | None = None  # the thread's stored events, read when a rule check needs them
        self.staged: list[Any] = []  # events this batch appended to it so far


class Batch:
    """What one transaction writes, built in Python between the two round trips."""

    def __init__(self) -> None:
        self.threads: dict[tuple[int, str, bytes], Thread] = {}
        self.found: dict[tuple[int, str, str], tuple[bytes, int, int]] = {}  # stored ids → (tk, seq, position)
        self.ids: dict[tuple[int, str, str], tuple[bytes, int, int, int]] = {}  # written here → (tk, seq, log, off)
        self.offsets: dict[int, int] = {}  # per log: events planned so far
        self.events: dict[int, list[tuple[int, str, bytes, int, str, bytes]]] = {}
        self.blobs: dict[tuple[int, bytes], bytes] = {}
        self.links: list[tuple[int, str, bytes, bytes, bytes, int, str]] = []
        self.children: dict[tuple[int, str, bytes, bytes], list[Any]] = {}
        self.live_links = True
        self.live_state = True

    def next_off(self, log: int) -> int:
        self.offsets[log] = off = self.offsets.get(log, 0) + 1
        return off


def index_inherited(b: Batch, key_of: KeyOf, log: int, scope: str, tk: bytes, name: str,
                    rows: Iterable[Inherited]) -> None:
    """The rows a fork's prefix indexes under the fork (:func:`tplog.backends.common.inherited`)."""
    for seq, ev, spawned in rows:
        index_links(b, key_of, log, scope, tk, name, seq, ev, None, spawned)


def index_links(b: Batch, key_of: KeyOf, log: int, scope: str, tk: bytes, name: str, seq: int, ev: Any,
                facts: Any, spawned: Iterable[str] = ()) -> None:
    """The link rows (in the target's log) and children rows one event adds (``facts``, or
    ``spawned`` for an inherited row). A spawn fact's child row is written only if the child
    is not deleted (checked when the row is written)."""
    sc = scope or None
    for ordinal, lk in outgoing(seq, ev):
        tlog, _, ttk = key_of(lk.thread_id, sc)
        b.links.append((tlog, scope, ttk, lk.relation.encode(), tk, ordinal - ORD_SHIFT, name))
        if lk.relation == SPAWNED_FROM:
            _child(b, (tlog, scope, ttk, tk), name, 1, tlog)
    for child in facts.spawned if facts is not None else spawned:
        clog, _, ctk = key_of(child, sc)
        _child(b, (log, scope, tk, ctk), child, 2, clog)


def _child(b: Batch, key: tuple[int, str, bytes, bytes], child_id: str, flag: int, child_log: int) -> None:
    row = b.children.get(key)
    if row is None:
        b.children[key] = [child_id, flag, child_log]
    else:
        row[0], row[1] = child_spelling(row[0], row[1], child_id, flag), row[1] | flag
