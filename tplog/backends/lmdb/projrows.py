"""The layout of the projections' rows (tplog/FORMAT.md), shared by their maintenance
(:mod:`tplog.backends.lmdb.projections`) and the live-vs-shadow comparison
(:mod:`tplog.backends.lmdb.compare`): below both, so neither imports the other's way."""

from __future__ import annotations

from typing import Final

import msgspec

from tplog.backends.contract import ThreadHead
from tplog.backends.lmdb.engine import ReadTxn

__all__ = ["C_LINK", "C_SPAWN", "SPAWNER_PREFIX", "STATE_PREFIX", "child_dec", "enc", "head_dec", "thread_deleted"]

C_LINK: Final = 1  # children flag: the child has a spawned_from link to the parent
C_SPAWN: Final = 2  # children flag: the parent recorded a thread_spawn event naming the child
STATE_PREFIX: Final = b"state\x00"
SPAWNER_PREFIX: Final = b"spawner\x00"

enc = msgspec.msgpack.Encoder()
child_dec = msgspec.msgpack.Decoder(tuple[str, int])  # a ``children`` value: (child's spelling, flags)
head_dec = msgspec.msgpack.Decoder(ThreadHead)


def thread_deleted(txn: ReadTxn, tk: bytes) -> bool:
    raw = txn.get("heads", tk)
    return raw is not None and head_dec.decode(raw).status == "deleted"
