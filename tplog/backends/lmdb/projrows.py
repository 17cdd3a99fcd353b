"""The layout of the projections' rows (tplog/FORMAT.md), shared by their maintenance
(:mod:`tplog.backends.lmdb.projections`) and the live-vs-shadow comparison
(:mod:`tplog.backends.lmdb.compare`): below both, so neither imports the other's way."""

from __future__ import annotations

from typing import Final

import msgspec

from tplog.backends.common import decode_head
from tplog.backends.lmdb.engine import ReadTxn

__all__ = ["SPAWNER_PREFIX", "STATE_PREFIX", "child_dec", "enc", "thread_deleted"]

STATE_PREFIX: Final = b"state\x00"
SPAWNER_PREFIX: Final = b"spawner\x00"

enc = msgspec.msgpack.Encoder()
child_dec = msgspec.msgpack.Decoder(tuple[str, int])  # a ``children`` value: (child's spelling, flags)


def thread_deleted(txn: ReadTxn, tk: bytes) -> bool:
    raw = txn.get("heads", tk)
    return raw is not None and decode_head(raw).status == "deleted"
