"""Event ids: time-ordered UUIDv7 strings (:func:`new_event_id`), drawn from per-thread entropy."""

from __future__ import annotations

import os
import threading
import time

__all__ = ["new_event_id"]


class _Entropy(threading.local):
    """Per-thread random bytes from ``os.urandom``, drawn 4 KB at a time: each
    ``os.urandom`` call releases the GIL, and with many appending threads every
    release is a thread switch (measured: benchmarks/RESULTS.md). Refilled, never
    shared, and dropped in a forked child."""

    def __init__(self) -> None:
        self.buf = b""
        self.at = 0

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.buf):
            self.buf, self.at = os.urandom(4096), 0
        self.at += n
        return self.buf[self.at - n : self.at]


_entropy = _Entropy()


def _fresh_entropy() -> None:  # a child must not reuse its parent's random bytes
    global _entropy
    _entropy = _Entropy()


os.register_at_fork(after_in_child=_fresh_entropy)


def new_event_id() -> str:
    """A new event id: a UUIDv7 (RFC 9562) string, time-ordered, so that new ids
    land at the end of the ``eventids`` index (a random UUIDv4 dirties a random
    leaf page per event, which made each commit's fsync measurably longer). Its
    12 ``rand_a`` bits carry the time below the millisecond (RFC 9562 §6.2,
    method 3: ~244 ns steps), so the ids of one millisecond are in order too and
    fill the index's pages (LMDB splits a page in the middle unless the new key
    goes last: ids in random order within a millisecond left it about half
    full). Its 62 random bits come from ``os.urandom`` (see :class:`_Entropy`)."""
    ms, sub = divmod(time.time_ns(), 1_000_000)
    r = int.from_bytes(_entropy.take(8), "big")
    n = (ms & 0xFFFF_FFFF_FFFF) << 80 | 0x7 << 76 | (sub * 4096 // 1_000_000) << 64 | 0b10 << 62 | (r >> 2)
    h = f"{n:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
