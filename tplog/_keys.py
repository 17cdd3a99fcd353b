"""Key layouts shared by the log and the projections (tplog/FORMAT.md)."""

from __future__ import annotations

import hashlib
import struct
import uuid
from typing import Final

_U64 = struct.Struct(">Q")
_fromhex = bytes.fromhex
TKEY_SIZE: Final = 16


def tkey(thread_id: str, scope: str | None = None) -> bytes:
    """The 16-byte key of a thread id (within ``scope``, if given).

    Unscoped: a UUID in canonical text form (any case) keys by its 16 bytes,
    so ids compare as UUIDs; any other id keys by the first 16 bytes of
    ``BLAKE2b(b"tplog:" + id)``. Scoped: ``BLAKE2b(b"tplog-scope:" + scope +
    0x00 + id)``, so each scope is its own key space.
    """
    if scope is not None:
        return hashlib.blake2b(b"tplog-scope:" + scope.encode() + b"\x00" + thread_id.encode(),
                               digest_size=16).digest()
    if len(thread_id) == 36 and type(thread_id) is str:
        # Fast path, same answer as the uuid.UUID check below (about 8x cheaper: this is
        # on every append and every query). Canonical = 32 ASCII hex digits, any case,
        # as 8-4-4-4-12 around hyphens. ``bytes.fromhex`` rejects anything else that
        # uuid.UUID would parse (signs, underscores, non-ASCII digits, "urn:"/braces,
        # hyphens elsewhere all leave no canonical form): a non-hex character raises,
        # and whitespace (skipped between byte pairs) leaves fewer than 16 bytes.
        if thread_id[8] == thread_id[13] == thread_id[18] == thread_id[23] == "-":
            try:
                b = _fromhex(thread_id.replace("-", ""))
            except ValueError:
                pass
            else:
                if len(b) == 16:
                    return b
    elif len(thread_id) == 36:  # not exactly str: the reference check (its errors included)
        try:
            u = uuid.UUID(thread_id)
        except ValueError:
            pass
        else:
            if str(u) == thread_id.lower():
                return u.bytes
    return hashlib.blake2b(b"tplog:" + thread_id.encode(), digest_size=16).digest()


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
