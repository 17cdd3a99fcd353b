"""A source store for the copy tests: every kind of thread content a copy must carry over."""

from __future__ import annotations

import uuid
from typing import Any

from conftest import T, agent_start, completed, exchange, link, register, response, spawn_message, started, user

from tplog import Store, ThreadInfoChanged, thread_hash
from tplog.errors import ThreadDeletedError
from tplog.integrations.demo import record


def fill(store: Store, *, extra: int = 8, events_per_thread: int = 2) -> dict[str, Any]:
    """Demo runs (turns, a spawned child, an interrupted run, a pending approval), threads with
    links, metadata changes and a large (blob) message, a fork and a fork of it, a deleted
    thread; what was written."""
    root, child = record(store)
    tids = [str(uuid.uuid4()) for _ in range(extra)]
    for i, t in enumerate(tids):
        store.append(t, [started(t, title=f"t{i}"), register()])
        for _ in range(events_per_thread):
            store.append(t, exchange(f"q{i}", f"a{i}"))
        store.append(t, [link(root, "spawned_from" if i % 2 else "referenced"), link(tids[0]),
                         ThreadInfoChanged(title=f"renamed {i}", metadata={"n": i, "nested": {"k": [1, 2]}},
                                           updated_at=T)])
    big = tids[1]
    store.append(big, exchange("big", "x" * (300 << 10)))  # over the blob threshold
    spawned = str(uuid.uuid4())  # named in a spawn fact only: a child the store never held
    store.append(tids[2], [user("spawn"), agent_start(), spawn_message(spawned), response(), completed()])
    # Forks share their parent's first events (copy-on-write): a copy must keep them forks.
    fork = store.fork(tids[0], 6, reason="copy me").thread_id
    store.append(fork, exchange("forked", "yes"))
    deeper = store.fork(fork, 10).thread_id
    store.append(deeper, exchange("deeper", "still"))
    store.append(tids[0], exchange("the parent goes on", "ok"))
    gone = tids[-1]
    store.delete_thread(gone, reason="test")
    return {"root": root, "child": child, "threads": tids, "deleted": gone, "big": big, "spawned": spawned,
            "forks": [fork, deeper]}


def digests(store: Store) -> dict[str, str]:
    """Every thread's export hash (every event included), ``deleted`` for a tombstone."""
    out = {}
    cursor = None
    while True:
        page = store.threads(limit=100, after=cursor, include_deleted=True)
        for h in page.threads:
            try:
                out[h.thread_id] = thread_hash(store.export(h.thread_id), exclude_noncanonical=False)
            except ThreadDeletedError:
                out[h.thread_id] = "deleted"
        if page.cursor is None:
            return out
        cursor = page.cursor


def views(store: Store, info: dict[str, Any]) -> dict[str, Any]:
    """What the projections answer about the source's threads (links, children, pending, heads)."""
    root = info["root"]
    out: dict[str, Any] = {"children": store.children(root), "incoming": store.incoming(root),
                           "incoming0": store.incoming(info["threads"][0]),
                           "spawned": store.children(info["threads"][2]), "pending": {}, "heads": {}}
    for t in [root, info["child"], *info["threads"][:-1], *info["forks"]]:
        out["pending"][t] = store.pending(t)
        h = store.head(t)
        out["heads"][t] = (h.version, h.status, h.user_turns, h.agent_turns, h.messages, h.links, h.fork_of, h.fork_at)
    h = store.head(info["deleted"])
    out["heads"][info["deleted"]] = h.status
    return out

