"""Key layouts shared by the log and the projections (tplog/FORMAT.md)."""

from __future__ import annotations

import hashlib
import struct
from typing import Final

from tplog.backends.common import thread_key

__all__ = ["TKEY_SIZE", "UNSCOPED_TAG", "eid_key", "event_key", "from_u64", "scope_tag", "tkey", "u64"]

_U64 = struct.Struct(">Q")
TKEY_SIZE: Final = 16
tkey = thread_key  # a thread's key is its contract identity: every backend orders by it


def u64(n: int) -> bytes:
    return _U64.pack(n)


def from_u64(b: bytes, offset: int = 0) -> int:
    return int(_U64.unpack_from(b, offset)[0])


def event_key(tk: bytes, seq: int) -> bytes:
    return tk + _U64.pack(seq)


UNSCOPED_TAG: Final = b"\x00" * 8


def scope_tag(scope: str | None) -> bytes:
    """8 bytes prefixing a scope's entries in ``updated`` (zeros when unscoped)."""
    if scope is None:
        return UNSCOPED_TAG
    return hashlib.blake2b(b"tplog-scope-tag:" + scope.encode(), digest_size=8).digest()


def eid_key(event_id: str, scope: str | None) -> bytes:
    """The ``eventids`` key: the id's UTF-8 (unscoped) or 0xFF + scope tag + id (never valid UTF-8)."""
    if scope is None:
        return event_id.encode()
    return b"\xff" + scope_tag(scope) + event_id.encode()
