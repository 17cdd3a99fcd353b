"""The live table (:mod:`tplog.backends.live`) in LMDB: the named table ``live`` of the store's
environment, beside the log's tables and not part of the store's format (``verify``, ``rebuild``
and backups of the log ignore it; a store without it opens as before).

Keys: the thread key (16 bytes) + a big-endian u64: 0 the header (msgpack), 1.. the batches.
Every call is one transaction; a batch write is a durable commit like an append's, which is
why the server writes batches (many chunks each), not chunks.
"""

from __future__ import annotations

import time

import msgspec

from tplog.backends.live import LiveHeader, expired
from tplog.backends.lmdb.engine import LmdbEngine, ReadTxn, WriteTxn
from tplog.backends.lmdb.keys import TKEY_SIZE, from_u64, tkey, u64

__all__ = ["LIVE_TABLE", "LmdbLive"]

LIVE_TABLE = "live"
_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder(LiveHeader)
_LAST = u64(2**64 - 1)


class LmdbLive:
    """:class:`~tplog.backends.live.LiveStreams` in the store's LMDB environment."""

    def __init__(self, engine: LmdbEngine) -> None:
        self.engine = engine
        engine.side_table(LIVE_TABLE)

    @staticmethod
    def _header(txn: ReadTxn, tk: bytes) -> LiveHeader | None:
        raw = txn.get(LIVE_TABLE, tk + u64(0))
        return None if raw is None else _dec.decode(raw)

    @staticmethod
    def _drop(txn: WriteTxn, tk: bytes) -> None:
        keys = [k for k, _ in txn.range(LIVE_TABLE, tk + u64(0), tk + _LAST)]
        for k in keys:
            txn.delete(LIVE_TABLE, k)

    def write(self, thread_id: str, turn_seq: int, batches: list[bytes], *, done: bool = False,
              attached: bool = True, owner: str = "") -> LiveHeader:
        tk = tkey(thread_id)

        def fn(txn: WriteTxn) -> LiveHeader:
            hdr = self._header(txn, tk)
            if hdr is None or hdr.turn_seq != turn_seq:
                self._drop(txn, tk)
                hdr = LiveHeader(turn_seq=turn_seq, owner=owner)
            for b in batches:
                hdr.batches += 1
                txn.put(LIVE_TABLE, tk + u64(hdr.batches), b)
            hdr.done = hdr.done or done
            hdr.attached = attached
            hdr.updated_ns = time.time_ns()
            txn.put(LIVE_TABLE, tk + u64(0), _enc.encode(hdr))
            return hdr

        return self.engine.run_write(fn)

    def read(self, thread_id: str, *, after: int = 0, limit: int | None = None) -> tuple[LiveHeader | None,
                                                                                          list[bytes]]:
        tk = tkey(thread_id)
        with self.engine.read() as txn:
            hdr = self._header(txn, tk)
            if hdr is None:
                return None, []
            out: list[bytes] = []
            if limit is not None and limit <= 0:
                return hdr, out
            for k, v in txn.range(LIVE_TABLE, tk + u64(after + 1), tk + _LAST):
                if len(k) != TKEY_SIZE + 8 or from_u64(k, TKEY_SIZE) <= after:  # pragma: no cover - by key
                    continue
                out.append(bytes(v))
                if limit is not None and len(out) >= limit:
                    break
            return hdr, out

    def request_stop(self, thread_id: str, turn_seq: int) -> bool:
        tk = tkey(thread_id)

        def fn(txn: WriteTxn) -> bool:
            hdr = self._header(txn, tk)
            if hdr is None or hdr.turn_seq != turn_seq or hdr.done:
                return False
            hdr.stop = True
            txn.put(LIVE_TABLE, tk + u64(0), _enc.encode(hdr))
            return True

        return self.engine.run_write(fn)

    def expire(self, thread_id: str, turn_seq: int) -> None:
        tk = tkey(thread_id)

        def fn(txn: WriteTxn) -> None:
            hdr = self._header(txn, tk)
            if hdr is not None and hdr.turn_seq == turn_seq:
                self._drop(txn, tk)

        self.engine.run_write(fn)

    def sweep(self, *, done_before: int, stale_before: int) -> int:
        with self.engine.read() as txn:  # most sweeps find nothing: no write transaction for them
            gone = [k[:TKEY_SIZE] for k, v in txn.range(LIVE_TABLE)
                    if k[TKEY_SIZE:] == u64(0) and expired(_dec.decode(v), done_before, stale_before)]
        if not gone:
            return 0

        def fn(txn: WriteTxn) -> int:
            n = 0
            for tk in gone:
                hdr = self._header(txn, tk)
                if hdr is not None and expired(hdr, done_before, stale_before):  # not rewritten since
                    self._drop(txn, tk)
                    n += 1
            return n

        return self.engine.run_write(fn)
