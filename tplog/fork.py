"""Forks: a thread that starts as another thread's first events, copy-on-write.

``Store.fork(parent, at)`` writes one event, the fork's own ``ThreadStarted`` (it
declares ``spawned_from`` → parent with ``{"branch_point": "turn_N", "seq": at,
"reason": ...}`` as the link's metadata), and a head saying ``fork_of=parent,
fork_at=at``: the fork's seqs 2..at are the parent's rows, read from there (a fork
of a fork reads through its parent, and so on), its own rows are seq 1 and whatever
is appended after ``at``. Nothing of the prefix is copied, so a fork costs the same
at any depth of the parent (forking at the parent's last seq reads only its head and
first event; forking earlier folds the prefix once, reading, for the head's counters).

The splice lives here, above the backends: :func:`read`, :func:`thread_events`,
:func:`items` and :func:`links` answer for a fork exactly what a copied thread
would (the same events, seqs, document, canonical hash, pending tools and
interrupts), with the parent's event ids, positions and recording times on the
shared events. What differs from a copy: the store-wide log holds only the fork's
own events (its ``ThreadStarted`` names the parent and the branch point; log readers
expand it, see :mod:`tplog.forklog`). The link indexes hold the fork's inherited
rows too: the links and spawn facts of the prefix, indexed under the fork's id with
the ordinals a copy's rows would have (:data:`ForkSeed.inherited`, recomputed from the
parent's events by every backend's rebuild), so ``incoming``/``children`` of other
threads list the fork as they would a copy.

A parent with live forks cannot be deleted alone (``HasForksError``);
``delete_thread(..., cascade=True)`` deletes its forks (and theirs) first.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import msgspec

from tplog.backends.common import inherited, outgoing, thread_key
from tplog.backends.contract import NO_STREAM, Direction, ForkSeed, Inherited, ThreadAppend, ThreadHead
from tplog.errors import InvalidInputError, NotFoundError, ThreadDeletedError, TplogError
from tplog.events import (
    AgentTurnCompleted,
    AgentTurnInterrupted,
    AgentTurnStarted,
    LinkAdded,
    MessageRecorded,
    RecordedEvent,
    ThreadStarted,
    UserTurnSubmitted,
)
from tplog.lifecycle import SPAWNED_FROM, note
from tplog.prepare import encode
from tplog.projections.fold import Item
from tplog.protocol import model as m

if TYPE_CHECKING:
    from tplog.backends.contract import AppendResult
    from tplog.store import Store

__all__ = ["SPAWNED_FROM", "fork", "forks_of", "items", "links", "read", "seed_of", "thread_events"]



def _is_fork(head: ThreadHead | None) -> bool:
    return head is not None and head.fork_of is not None and head.status == "active"


def _exact(evs: list[RecordedEvent], after: int | None, limit: int | None, direction: Direction) -> bool:
    """Whether a backend read is surely what a fork splice would give too: contiguous
    seqs from where the read starts, and not the answers a fork's gap can look like (an
    empty page, or seq 1 alone). Spares the head lookup on almost every read."""
    if not evs:
        return False
    step = 1 if direction == "forward" else -1
    if evs[-1].seq - evs[0].seq != step * (len(evs) - 1):  # seqs strictly monotonic: a gap shows here
        return False
    if direction == "forward":
        if evs[0].seq != (0 if after is None else after) + 1:
            return False
        return not (len(evs) == 1 and evs[0].seq == 1 and limit != 1)
    if after is not None and evs[0].seq != after - 1:
        return False
    return not (evs[-1].seq == 1 and len(evs) == 1)


def read(store: Store, thread_id: str, *, after: int | None = None, limit: int | None = None,
         direction: Direction = "forward") -> list[RecordedEvent]:
    """``backend.read_thread``, with a fork's prefix spliced in from its parent (the shared
    events named by the fork's id, as a copy's would be)."""
    b, sc = store.backend, store.scope
    evs = b.read_thread(thread_id, scope=sc, after=after, limit=limit, direction=direction)
    if limit == 0 or _exact(evs, after, limit, direction):
        return evs
    head = b.head(thread_id, scope=sc)
    if not _is_fork(head):
        return evs
    assert head is not None
    name = head.thread_id  # as the fork's own rows spell it
    return [e if e.thread_id == name else msgspec.structs.replace(e, thread_id=name)
            for e in _read_fork(store, thread_id, head, after, limit, direction)]


def _read(store: Store, thread_id: str, after: int | None, limit: int | None,
          direction: Direction) -> list[RecordedEvent]:
    """:func:`read` with each event named by the thread whose row it is (relabelled once, on top)."""
    b, sc = store.backend, store.scope
    evs = b.read_thread(thread_id, scope=sc, after=after, limit=limit, direction=direction)
    if limit == 0 or _exact(evs, after, limit, direction):
        return evs
    head = b.head(thread_id, scope=sc)
    if head is None or not _is_fork(head):
        return evs
    return _read_fork(store, thread_id, head, after, limit, direction)


def _read_fork(store: Store, thread_id: str, head: ThreadHead, after: int | None, limit: int | None,
               direction: Direction) -> list[RecordedEvent]:
    b, sc = store.backend, store.scope
    assert head.fork_of is not None
    pieces: list[tuple[str | None, int, int]] = [
        (None, 1, 1), (head.fork_of, 2, head.fork_at), (None, head.fork_at + 1, head.version)]
    out: list[RecordedEvent] = []
    forward = direction == "forward"
    a = (0 if after is None else after) if forward else (head.version + 1 if after is None else after)
    for src, lo, hi in (pieces if forward else reversed(pieces)):
        if forward:
            lo = max(lo, a + 1)
        else:
            hi = min(hi, a - 1)
        if lo > hi:
            continue
        n = hi - lo + 1 if limit is None else min(hi - lo + 1, limit - len(out))
        if n <= 0:
            break
        start = lo - 1 if forward else hi + 1
        if src is None:
            out += b.read_thread(thread_id, scope=sc, after=start, limit=n, direction=direction)
        else:
            out += _read(store, src, start, n, direction)
    return out


def thread_events(store: Store, thread_id: str, after: int) -> tuple[ThreadHead, list[Any]]:
    """``backend.thread_events`` (what ``load`` folds), a fork's prefix spliced in."""
    head, evs = store.backend.thread_events(thread_id, scope=store.scope, after=after)
    if not _is_fork(head):
        return head, evs
    if after > head.version:  # the backend answered from seq 1 (another life of the id)
        after = 0
    return head, _splice(store, head, evs, after, head.version)


def _splice(store: Store, head: ThreadHead, evs: list[Any], after: int, upto: int) -> list[Any]:
    """The thread's events with seq in (``after``, ``upto``], given ``evs``: its own rows
    with seq > ``after`` as ``backend.thread_events`` returned them; a fork's prefix from
    its parent, recursively (decoded events: no per-event wrapping on the load path)."""
    if not _is_fork(head):
        return evs[: upto - after]
    assert head.fork_of is not None
    out: list[Any] = []
    tail = evs
    if after == 0:
        out.append(evs[0])  # the fork's own ThreadStarted
        tail = evs[1:]
    if after < head.fork_at and upto > max(after, 1):
        lo = max(after, 1)
        ph, pevs = store.backend.thread_events(head.fork_of, scope=store.scope, after=lo)
        out += _splice(store, ph, pevs, lo, min(upto, head.fork_at))
    out += tail[: max(0, upto - max(after, head.fork_at))]
    return out


def items(store: Store, thread_id: str) -> list[Item]:
    """``backend.items``, a fork's prefix spliced in (the id-only folds: pending, interrupts)."""
    b, sc = store.backend, store.scope
    own = b.items(thread_id, scope=sc)
    head = b.head(thread_id, scope=sc)
    if not _is_fork(head):
        return own
    assert head is not None and head.fork_of is not None
    prefix = [it for it in items(store, head.fork_of) if 2 <= it.seq <= head.fork_at]
    return [*own[:1], *prefix, *(it for it in own if it.seq > head.fork_at)]


def links(store: Store, thread_id: str) -> list[m.ThreadLink]:
    """``backend.links``; a fork's from its spliced events (declared first, then added)."""
    b, sc = store.backend, store.scope
    head = b.head(thread_id, scope=sc)
    if not _is_fork(head):
        return b.links(thread_id, scope=sc)
    return [lk for e in read(store, thread_id) for _, lk in outgoing(e.seq, e.event)]


def forks_of(store: Store, thread_id: str) -> list[str]:
    """The live forks that read ``thread_id``'s events (its children with ``fork_of`` it)."""
    b, sc = store.backend, store.scope
    tk = thread_key(thread_id, sc)
    out = []
    for child in b.children(thread_id, scope=sc):
        h = b.head(child, scope=sc)
        if _is_fork(h) and h is not None and h.fork_of is not None and thread_key(h.fork_of, sc) == tk:
            out.append(h.thread_id)
    return out


def _prefix(store: Store, thread_id: str, at: int) -> list[Any]:
    """The parent's decoded events of seqs 2..``at`` (its prefix as a copy holds it)."""
    ph, pevs = store.backend.thread_events(thread_id, scope=store.scope, after=1)
    return _splice(store, ph, pevs, 1, at)


def _may_inherit(store: Store, thread_id: str, phead: ThreadHead, first: ThreadStarted) -> bool:
    """Whether the parent's events may hold links or spawn facts (then the prefix is read
    for them): added links are counted in its head, spawn facts flagged in the children
    index. Almost never, so forking stays a head read and an index probe."""
    if phead.links > len(outgoing(1, first)):
        return True
    try:
        return store.backend.has_spawned(thread_id, scope=store.scope)
    except TplogError:  # a stale links index: read the prefix (a rebuild recomputes the rows anyway)
        return True


def _seed(store: Store, thread_id: str, phead: ThreadHead, at: int,
          first: ThreadStarted) -> tuple[ThreadHead, int, list[Inherited]]:
    """The head values the parent's first ``at`` events lead to, its closed turns there,
    and the link-index rows the fork inherits (:func:`tplog.backends.common.inherited`);
    ``InvalidInputError`` if an agent turn is open at ``at``."""
    if at == phead.version:  # the parent's own head says it all
        if phead.open_turn_agent is not None:
            raise _not_boundary(thread_id, at, phead.open_turn_seq)
        h = ThreadHead(thread_id="", user_turns=phead.user_turns, agent_turns=phead.agent_turns,
                       messages=phead.messages, links=phead.links - len(outgoing(1, first)),
                       activity=phead.activity, title=phead.title, metadata=phead.metadata,
                       agent_ids=list(phead.agent_ids), agent_names=dict(phead.agent_names))
        inh = inherited([first, *_prefix(store, thread_id, at)], at) if (
            at > 1 and _may_inherit(store, thread_id, phead, first)) else []
        return h, phead.user_turns + phead.agent_turns, inh
    h = ThreadHead(thread_id="")
    note(h, first)
    open_at = 0
    prefix = _prefix(store, thread_id, at)
    for seq, ev in enumerate(prefix, 2):  # seqs 2..at, decoded
        note(h, ev)
        if isinstance(ev, AgentTurnStarted):
            open_at = seq
            h.agent_turns += 1
        elif isinstance(ev, (AgentTurnCompleted, AgentTurnInterrupted)):
            open_at = 0
        elif isinstance(ev, UserTurnSubmitted):
            h.user_turns += 1
        elif isinstance(ev, MessageRecorded):
            h.messages += 1
        elif isinstance(ev, LinkAdded):
            h.links += 1
    if open_at:
        raise _not_boundary(thread_id, at, open_at)
    h.parent = None
    return h, h.user_turns + h.agent_turns, inherited([first, *prefix], at)


def seed_of(store: Store, parent: str, at: int, started: ThreadStarted) -> ForkSeed:
    """The seed of a fork of ``parent`` at ``at`` whose ThreadStarted is ``started``, from
    ``store``'s parent (what :func:`fork` appends; ``tplog copy`` re-creates a fork with it)."""
    phead = store.backend.head(parent, scope=store.scope)
    if phead is None:
        raise NotFoundError(f"thread {parent} does not exist")
    if phead.status == "deleted":
        raise ThreadDeletedError(f"thread {parent} was deleted; it cannot be forked")
    first = read(store, parent, limit=1)[0].event
    if not isinstance(first, ThreadStarted):  # pragma: no cover - the order rules put it first
        raise InvalidInputError(f"thread {parent}: seq 1 is not ThreadStarted")
    seed, _, inh = _seed(store, parent, phead, at, first)
    seed.links += len(outgoing(1, started))
    seed.parent = parent
    return ForkSeed(parent=parent, at=at, head=seed, inherited=tuple(inh))


def _not_boundary(thread_id: str, at: int, opened: int) -> InvalidInputError:
    return InvalidInputError(
        f"fork of thread {thread_id}: seq {at} is not a turn boundary (the agent turn opened at seq {opened} "
        "is still open there); fork at a seq where no agent turn is open")


def fork(store: Store, thread_id: str, at: int, *, new_thread_id: str | None = None,
         reason: str | None = None) -> AppendResult:
    """See :meth:`Store.fork`."""
    if isinstance(at, bool) or not isinstance(at, int) or at < 1:
        raise InvalidInputError(f"fork of thread {thread_id}: at must be a seq ≥ 1 (an int), not {at!r}")
    if reason is not None and not isinstance(reason, str):
        raise InvalidInputError(f"fork of thread {thread_id}: reason must be a string, not {reason!r}")
    new_id = str(uuid.uuid4()) if new_thread_id is None else new_thread_id
    if not isinstance(new_id, str) or not new_id:
        raise InvalidInputError(f"fork of thread {thread_id}: new_thread_id must be a non-empty string")
    b = store.backend
    phead = b.head(thread_id, scope=store.scope)
    if phead is None:
        raise NotFoundError(f"thread {thread_id} does not exist")
    if phead.status == "deleted":
        raise ThreadDeletedError(f"thread {thread_id} was deleted; it cannot be forked")
    if at > phead.version:
        raise InvalidInputError(f"fork of thread {thread_id}: at={at} is past its last seq {phead.version}")
    if thread_key(new_id, store.scope) == thread_key(thread_id, store.scope):
        raise InvalidInputError(f"fork of thread {thread_id}: new_thread_id names the thread itself")
    first = read(store, thread_id, limit=1)[0].event
    if not isinstance(first, ThreadStarted):  # pragma: no cover - the order rules put it first
        raise InvalidInputError(f"thread {thread_id}: seq 1 is not ThreadStarted")
    seed, turns, inh = _seed(store, thread_id, phead, at, first)
    meta: dict[str, Any] = {"branch_point": f"turn_{turns}", "seq": at}
    if reason is not None:
        meta["reason"] = reason
    rel = first.relationships if isinstance(first.relationships, m.ThreadRelationships) else None
    kept = [lk for lk in (rel.links if rel is not None and isinstance(rel.links, list) else [])
            if lk.relation != SPAWNED_FROM]
    declared = [m.ThreadLink(thread_id=thread_id, relation=SPAWNED_FROM, metadata=meta), *kept]
    relationships = (msgspec.structs.replace(rel, links=declared) if rel is not None
                     else m.ThreadRelationships(links=declared))
    started = msgspec.structs.replace(first, thread_id=new_id, relationships=relationships)
    seed.links += len(declared)
    seed.parent = thread_id
    b.gate()
    encoded = encode(b, new_id, [started], None)
    part = ThreadAppend(thread_id=new_id, events=encoded, expected=NO_STREAM, scope=store.scope, fresh_ids=True,
                        check_rules=store.check_rules,
                        fork=ForkSeed(parent=thread_id, at=at, head=seed, inherited=tuple(inh)))
    return b.submit((part,)).result()[0]
