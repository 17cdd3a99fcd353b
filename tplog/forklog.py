"""Forks in the store-wide log: what catch-up readers (``read_all``/``iter_all``) see of a fork.

A fork writes one event, its ``ThreadStarted``; the log holds that and what the fork
appends afterwards. A copied thread would have all of its events in the log, so a
projection built from the log would miss a fork's prefix. Readers therefore get a
fork's log entry *expanded*: its ``ThreadStarted`` followed by the inherited events
(seqs 2..fork point) as :func:`tplog.fork.read` gives them (named by the fork, with
the parent's event ids and recording times), every one of them at the position of the
fork's ``ThreadStarted``. So:

- folding the log per thread gives for a fork exactly the events (and seqs) a copy's
  entries would, in an order where the fork's own later events come after them;
- the cursor stays the position: ``after=page[-1].position`` continues after the whole
  expansion, and a page never ends inside one (it then holds more than ``limit``);
- the raw log (``backend.read_log``, which ``tplog copy`` reads) is unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from tplog.events import RecordedEvent, ThreadStarted
from tplog.fork import SPAWNED_FROM, read
from tplog.protocol import model as m

if TYPE_CHECKING:
    from tplog.store import Store

__all__ = ["expand"]


def _may_fork(e: RecordedEvent) -> bool:
    """Whether ``e`` can be a fork's start (every fork declares ``spawned_from`` → its parent)."""
    ev = e.event
    if e.seq != 1 or not isinstance(ev, ThreadStarted):
        return False
    rel = ev.relationships
    return isinstance(rel, m.ThreadRelationships) and isinstance(rel.links, list) and any(
        lk.relation == SPAWNED_FROM for lk in rel.links)


def expand(store: Store, page: list[RecordedEvent]) -> list[RecordedEvent]:
    """``page`` (log entries in position order) with every live fork's start followed by its
    inherited events, all at the start's position."""
    if not any(_may_fork(e) for e in page):
        return page
    out: list[RecordedEvent] = []
    for e in page:
        out.append(e)
        if not _may_fork(e):
            continue
        head = store.backend.head(e.thread_id, scope=store.scope)
        if head is None or head.fork_of is None or head.status != "active" or head.fork_at < 2:
            continue
        out += [msgspec.structs.replace(x, position=e.position)
                for x in read(store, e.thread_id, after=1, limit=head.fork_at - 1)]
    return out
