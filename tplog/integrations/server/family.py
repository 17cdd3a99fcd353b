"""``GET /threads/{id}/family``: the thread's family as one tree, for the browser's side panel.

The tree starts at the thread's oldest ancestor reached by ``spawned_from`` (at most ``up``
steps up) and holds the descendants of that ancestor (spawned children and forks) down to
``down`` levels below the thread, ``limit`` nodes in all (plus the path down to the thread,
which is always there); ``truncated`` says a bound cut it.
Each node carries what its head says (title, activity, agents by name) and, for a fork,
its fork point and reason (from its ``spawned_from`` link's metadata, :mod:`tplog.fork`).
The thread's other links (not ``spawned_from``), both ways, come beside the tree. Every read
goes through the request's scoped store: a thread of another scope is a 404, and a parent
stored in another scope shows as ``missing`` (its id only), as a parent never stored does.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Final

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from tplog.errors import NotFoundError
from tplog.fork import SPAWNED_FROM
from tplog.integrations.http import HTTPError
from tplog.integrations.server.state import Server, path_thread
from tplog.store import Store

__all__ = ["BOUNDS", "family", "family_route"]

#: name -> (default, max) of the query parameters
BOUNDS: Final = {"up": (8, 32), "down": (3, 8), "limit": (200, 1000)}
_LINKS: Final = 100  # other links listed each way


def _node(store: Store, tid: str, cache: dict[str, dict[str, Any]]) -> dict[str, Any]:
    if tid in cache:
        return cache[tid]
    try:
        h = store.head(tid)
    except NotFoundError:
        node: dict[str, Any] = {"thread_id": tid, "missing": True, "children": []}
    else:
        node = {
            "thread_id": h.thread_id,
            "title": h.title,
            "activity": h.activity,
            "deleted": h.status == "deleted",
            "agents": [h.agent_names.get(a, a) for a in h.agent_ids],
            "updated_ns": h.updated_ns,
            "parent": h.parent,
            "children": [],
        }
        if h.fork_of is not None:
            node["fork"] = _fork_info(store, h.thread_id, h.fork_of, h.fork_at)
    cache[tid] = cache[node["thread_id"]] = node  # by the id asked and as the head spells it
    return node


def _fork_info(store: Store, tid: str, parent: str, at: int) -> dict[str, Any]:
    info: dict[str, Any] = {"of": parent, "seq": at, "branch_point": None, "reason": None}
    for lk in store.links(tid):
        md = lk.metadata
        if lk.relation == SPAWNED_FROM and lk.thread_id == parent and isinstance(md, dict):
            info["branch_point"] = md.get("branch_point")
            info["reason"] = md.get("reason")
            break
    return info


def family(store: Store, thread_id: str, *, up: int, down: int, limit: int) -> dict[str, Any]:
    """The family tree of ``thread_id`` (``NotFoundError`` if the scope has no such thread)."""
    cache: dict[str, dict[str, Any]] = {}
    me = _node(store, thread_id, cache)
    if me.get("missing"):
        raise NotFoundError(f"thread {thread_id} does not exist")
    tid = me["thread_id"]
    truncated = False
    chain = [tid]  # the thread, then its ancestors
    while len(chain) <= up:
        parent = cache[chain[-1]].get("parent")
        if parent is None or parent in chain:  # a root, or a cycle of spawned_from links
            break
        _node(store, parent, cache)
        chain.append(cache[parent]["thread_id"] if not cache[parent].get("missing") else parent)
    else:
        truncated = cache[chain[-1]].get("parent") is not None
    root = cache[chain[-1]]
    # each ancestor's child toward the thread: kept even past the limit, so the thread is in its tree
    toward = {chain[i + 1]: chain[i] for i in range(len(chain) - 1)}
    max_level = len(chain) - 1 + down
    seen = {root["thread_id"]}
    queue = deque([(root, 0)])
    while queue:
        node, level = queue.popleft()
        if node.get("missing") or node.get("deleted"):
            continue
        if level >= max_level:
            truncated = truncated or _has_children(store, node["thread_id"])
            continue
        room = limit - len(seen)
        kids = store.children(node["thread_id"], limit=room + 1) if room > 0 else []
        if len(kids) > room or (room <= 0 and _has_children(store, node["thread_id"])):
            truncated = True
        take = kids[: max(room, 0)]
        path = toward.get(node["thread_id"])
        if path is not None and path not in take:
            take.append(path)
        for kid in take:
            if kid in seen:
                continue
            seen.add(kid)
            child = _node(store, kid, cache)
            node["children"].append(child)
            queue.append((child, level + 1))
    outgoing = [lk for lk in store.links(tid) if lk.relation != SPAWNED_FROM][:_LINKS]
    incoming = [(s, r) for s, r in store.incoming(tid, limit=_LINKS) if r != SPAWNED_FROM]
    for n in cache.values():
        n.pop("parent", None)
    return {
        "thread_id": tid,
        "root": root,
        "ancestors": chain[1:],
        "truncated": truncated,
        "links": [{"thread_id": lk.thread_id, "relation": lk.relation} for lk in outgoing],
        "incoming": [{"thread_id": s, "relation": r} for s, r in incoming],
    }


def _has_children(store: Store, tid: str) -> bool:
    return bool(store.children(tid, limit=1))


def _bound(request: Request, name: str) -> int:
    default, hi = BOUNDS[name]
    v = request.query_params.get(name)
    if v is None or v == "":
        return default
    if not v.isascii() or not v.isdigit() or not 0 <= int(v) <= hi:
        raise HTTPError(422, "invalid_parameter", f"query parameter {name!r} must be an integer in 0..{hi}, not {v!r}")
    return int(v)


def family_route(srv: Server) -> Callable[[Request], Awaitable[Response]]:
    """The handler (the app wraps it in its error translation)."""

    async def family_of(request: Request) -> Response:
        tid = await path_thread(srv, request)
        up, down, limit = (_bound(request, n) for n in ("up", "down", "limit"))
        body = await asyncio.to_thread(family, srv.store, tid, up=up, down=down, limit=max(limit, 1))
        return Response(msgspec.json.encode(body), media_type="application/json")

    return family_of
