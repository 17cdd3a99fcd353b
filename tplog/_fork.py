"""Forking a thread at a turn boundary (``Store.fork``).

A fork is a new thread whose history is the parent's events up to seq ``at``, started
by its own ``ThreadStarted`` that declares a ``spawned_from`` link to the parent with
the branch point in its metadata (ThreadProtocol: ``{"branch_point": "turn_N"}``,
plus ``seq`` and ``reason``). It is written as one ordinary append (all or nothing,
``no_stream``), so every read, projection, export, rebuild, verify, backup and copy
treats it as any thread, on every backend. The prefix's events are copied (new event
ids, same content): this is not yet copy-on-write (large payloads are shared as blobs
by the LMDB backend all the same).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import msgspec

from tplog import _model as m
from tplog._errors import InvalidInputError, NotFoundError, ThreadDeletedError
from tplog._events import (
    AgentTurnCompleted,
    AgentTurnInterrupted,
    AgentTurnStarted,
    ThreadStarted,
    UserTurnSubmitted,
)

if TYPE_CHECKING:
    from tplog._store import Store
    from tplog.backends.contract import AppendResult

__all__ = ["SPAWNED_FROM", "fork"]

SPAWNED_FROM = "spawned_from"


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
    head = store.backend.head(thread_id, scope=store.scope)
    if head is None:
        raise NotFoundError(f"thread {thread_id} does not exist")
    if head.status == "deleted":
        raise ThreadDeletedError(f"thread {thread_id} was deleted; it cannot be forked")
    if at > head.version:
        raise InvalidInputError(f"fork of thread {thread_id}: at={at} is past its last seq {head.version}")
    if store._tk(new_id) == store._tk(thread_id):
        raise InvalidInputError(f"fork of thread {thread_id}: new_thread_id names the thread itself")
    prefix = store.read(thread_id, limit=at)
    events = [r.event for r in prefix]
    open_at = 0
    turns = 0
    for r in prefix:
        ev = r.event
        if isinstance(ev, AgentTurnStarted):
            open_at = r.seq
        elif isinstance(ev, (AgentTurnCompleted, AgentTurnInterrupted)):
            open_at = 0
            turns += 1
        elif isinstance(ev, UserTurnSubmitted):
            turns += 1
    if open_at:
        raise InvalidInputError(
            f"fork of thread {thread_id}: seq {at} is not a turn boundary (the agent turn opened at seq "
            f"{open_at} is still open there); fork at a seq where no agent turn is open")
    first = events[0]
    if not isinstance(first, ThreadStarted):  # pragma: no cover - the order rules put it first
        raise InvalidInputError(f"thread {thread_id}: seq 1 is not ThreadStarted")
    meta: dict[str, Any] = {"branch_point": f"turn_{turns}", "seq": at}
    if reason is not None:
        meta["reason"] = reason
    rel = first.relationships if isinstance(first.relationships, m.ThreadRelationships) else None
    kept = [lk for lk in (rel.links if rel is not None and isinstance(rel.links, list) else [])
            if lk.relation != SPAWNED_FROM]
    links = [m.ThreadLink(thread_id=thread_id, relation=SPAWNED_FROM, metadata=meta), *kept]
    relationships = (msgspec.structs.replace(rel, links=links) if rel is not None
                     else m.ThreadRelationships(links=links))
    started = msgspec.structs.replace(first, thread_id=new_id, relationships=relationships)
    return store.append(new_id, [started, *events[1:]], expected_version="no_stream")
