"""Key layouts shared by the log and the projections (README "Storage format")."""

from __future__ import annotations

import hashlib
import struct
import uuid
from typing import Final

_U64 = struct.Struct(">Q")
TKEY_SIZE: Final = 16


def tkey(thread_id: str) -> bytes:
    """The 16-byte key of a thread id.

    A UUID in canonical text form (any case) keys by its 16 bytes, so the
    thread's events sort together and ids compare as UUIDs. Any other id keys
    by the first 16 bytes of ``BLAKE2b(b"tplog:" + id)``.
    """
    if len(thread_id) == 36:
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
