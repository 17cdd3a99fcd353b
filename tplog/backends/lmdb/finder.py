"""The ``finder`` table: threads by activity and by agent, each newest update first.

Keys (values empty), beside ``updated`` (scope tag + updated ns + thread key):

- ``b"a" + scope tag + activity code (1 byte) + updated ns + thread key``
- ``b"g" + scope tag + BLAKE2b-8(agent id) + updated ns + thread key``
- ``b"c" + scope tag + BLAKE2b-8(agent id) + activity code + updated ns + thread key``
  (both filters at once: a rare pair must not be found by scanning one of them)

Every head write replaces its thread's entries (:func:`reindex`), in the same
transaction, so a filtered listing reads only the matching threads' heads. All
three orders end in ``updated ns + thread key``: one cursor pages any of them.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
from collections.abc import Iterator
from typing import Final

from tplog.backends.contract import ThreadHead
from tplog.backends.lmdb.engine import ReadTxn, WriteTxn
from tplog.backends.lmdb.keys import u64
from tplog.lifecycle import ACTIVITY_CODE, ThreadFilter

__all__ = ["DONE", "candidates", "reindex"]

#: The ``meta`` key saying every head has its entries (set once, by the first writable open).
DONE: Final = b"finder-index"
_TAIL: Final = 8 + 16  # updated ns + thread key
_CODES: Final = [bytes([i]) for i in range(256)]


@functools.lru_cache(maxsize=4096)  # hashed twice per append (old and new entries), few distinct ids
def _agent(agent_id: str) -> bytes:
    return hashlib.blake2b(agent_id.encode(), digest_size=8).digest()


def _keys(tag: bytes, head: ThreadHead, tk: bytes) -> list[bytes]:
    tail = u64(head.updated_ns) + tk
    code = _CODES[ACTIVITY_CODE.get(head.activity, 0)]
    out = [b"a" + tag + code + tail]
    for a in head.agent_ids:
        h = _agent(a)
        out.append(b"g" + tag + h + tail)
        out.append(b"c" + tag + h + code + tail)
    return out


def reindex(txn: WriteTxn, tag: bytes, old: ThreadHead | None, new: ThreadHead, tk: bytes) -> None:
    """Replace the entries of ``old`` (the head as stored, if any) by those of ``new``."""
    after = _keys(tag, new, tk)
    if old is None:
        for k in after:
            txn.put("finder", k, b"")
        return
    before = _keys(tag, old, tk)
    if before == after:  # same update time, activity and agents (an append in the same ns)
        return
    keep = set(before).intersection(after)
    for k in before:
        if k not in keep:
            txn.delete("finder", k)
    for k in after:
        if k not in keep:
            txn.put("finder", k, b"")


def _range(txn: ReadTxn, table: str, prefix: bytes, lo: bytes, hi: bytes) -> Iterator[bytes]:
    for k, _ in txn.range(table, prefix + lo, prefix + hi, reverse=True):
        yield k[-_TAIL:]


def candidates(txn: ReadTxn, tag: bytes, where: ThreadFilter | None, lo: bytes, hi: bytes,
               indexed: bool) -> Iterator[bytes]:
    """``updated ns + thread key`` of the threads that may match, newest first, in
    [``lo``, ``hi``): through the agent+activity index when both are asked, the
    activity index when a status is, the agent index when an agent is, else ``updated`` (also when the store has no
    finder entries yet: ``indexed`` False)."""
    if indexed and where is not None and where.activity is not None:
        pre = b"a" + tag if where.agent is None else b"c" + tag + _agent(where.agent)
        runs = [_range(txn, "finder", pre + bytes([ACTIVITY_CODE[s]]), lo, hi) for s in where.activity]
        return runs[0] if len(runs) == 1 else heapq.merge(*runs, reverse=True)
    if indexed and where is not None and where.agent is not None:
        return _range(txn, "finder", b"g" + tag + _agent(where.agent), lo, hi)
    return _range(txn, "updated", tag, lo, hi)
