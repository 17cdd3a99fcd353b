"""The reads behind ``tplog tail`` (follow new events live) and ``tplog tree`` (descendants as a tree).

Both are compositions of public Store methods (``wait_for_position``, ``read_all``, ``read``,
``children``, ``head``); they live here rather than in the Store because they are views for the
command line, not new storage queries.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from tplog.errors import InvalidInputError, NotFoundError

if TYPE_CHECKING:
    from tplog.events import RecordedEvent
    from tplog.store import Store

__all__ = ["descendants_tree", "follow"]

_BATCH = 256  # events read per catch-up step (a large backlog streams out without one huge read)


def _row(e: RecordedEvent) -> dict[str, Any]:
    from tplog.protocol.json import to_builtins

    return {"thread_id": e.thread_id, "seq": e.seq, "position": e.position, "event_id": e.event_id,
            "recorded_at": e.recorded_at, "type": e.event.__struct_config__.tag, "event": to_builtins(e.event)}


def follow(store: Store, thread_id: str | None, *, after: int | None = None, limit: int | None = None,
           timeout: float | None = None) -> Iterator[dict[str, Any]]:
    """Yield events as ``tplog read`` rows (plus ``thread_id``) as they are appended, oldest first.

    Without ``thread_id`` the store-wide log, from position ``after`` (exclusive); with it that
    thread's events, from seq ``after``. ``after`` None starts at the current end (only new events).
    Stops after ``limit`` events, or when nothing new came for ``timeout`` seconds; else never
    (Ctrl-C). Another process's appends are seen by polling the log position.
    """
    for name, value in (("--after", after), ("--limit", limit)):
        if value is not None and value < 0:
            raise InvalidInputError(f"{name} must be ≥ 0, not {value}")
    if timeout is not None and timeout < 0:
        raise InvalidInputError(f"--timeout must be ≥ 0 seconds, not {timeout}")
    if limit == 0:
        return
    sent = 0
    position = store.last_position  # the log position read up to
    if thread_id is None:
        cursor = position if after is None else after
    else:
        cursor = _thread_version(store, thread_id) if after is None else after
    quiet_since = time.monotonic()
    while True:
        batch = _next(store, thread_id, cursor)
        if batch:
            for e in batch:
                yield _row(e)
                sent += 1
                if limit is not None and sent >= limit:
                    return
            cursor = batch[-1].position if thread_id is None else batch[-1].seq
            quiet_since = time.monotonic()
            continue
        wait = 0.5 if timeout is None else max(0.0, min(0.5, quiet_since + timeout - time.monotonic()))
        if timeout is not None and wait == 0.0:
            return
        if thread_id is None:
            position = store.wait_for_position(cursor + 1, timeout=wait)
        else:  # any append may be this thread's: wake on the log's next position, then read the thread
            position = store.wait_for_position(position + 1, timeout=wait)


def _thread_version(store: Store, thread_id: str) -> int:
    try:
        return store.head(thread_id).version
    except NotFoundError:  # not created yet: follow it from its first event
        return 0


def _next(store: Store, thread_id: str | None, cursor: int) -> list[RecordedEvent]:
    if thread_id is None:
        return store.read_all(after=cursor, limit=_BATCH)
    try:
        return store.read(thread_id, after=cursor, limit=_BATCH)
    except NotFoundError:
        return []


def descendants_tree(store: Store, thread_id: str, *, max_depth: int | None = None) -> dict[str, Any]:
    """``thread_id`` and its spawned children, recursively: ``{"thread_id", "head", "children": [...]}``.

    ``head`` is the child's :class:`ThreadHead` as an object (None for a child that is linked but
    not stored). A thread reached twice (a cycle, or two parents) is listed again with
    ``"seen": true`` and not expanded, so the walk ends.
    """
    if max_depth is not None and max_depth < 0:
        raise InvalidInputError(f"--max-depth must be ≥ 0, not {max_depth}")
    seen: set[str] = set()

    def node(tid: str, depth: int) -> dict[str, Any]:
        try:
            head: Any = store.head(tid)
        except NotFoundError:
            head = None
        out: dict[str, Any] = {"thread_id": tid, "head": head, "children": []}
        if tid in seen:
            out["seen"] = True
            return out
        seen.add(tid)
        if max_depth is None or depth < max_depth:
            out["children"] = [node(c, depth + 1) for c in _all_children(store, tid)]
        return out

    store.children(thread_id, limit=0)  # a thread neither stored nor linked to: NotFoundError, as `children`
    return node(thread_id, 0)


def _all_children(store: Store, tid: str) -> list[str]:
    out: list[str] = []
    while True:
        page = store.children(tid, limit=500, after=out[-1] if out else None)
        out += page
        if len(page) < 500:
            return out
