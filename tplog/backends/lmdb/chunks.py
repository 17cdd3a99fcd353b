"""Chunk rows (format 4): a closed turn's events re-stored as one value of ``events``.

Appends store one value per event (format 3, ``tplog.codec``), bodies uncompressed (the
codec's ``compress_bodies`` off: no zstd call per append). When an append closes an
agent turn, or crosses a multiple of :data:`OPEN_EVERY` seqs, :func:`compact` re-stores
the thread's events since its previous chunk as chunks, in the same write transaction,
compressing them once: one zstd frame and one msgpack document
for many events, so a cold load decompresses and decodes once per chunk, not once per
event, and the table holds fewer, fuller values. A chunk is stored under the key of
its LAST event (thread key + last seq), so the row holding any seq is the first row at
or after that seq's key (a cursor ``set_range``). The log's indexes (``global``,
``eventids``) keep naming events by thread key + seq, so nothing else changes.

A chunk value is::

    offset size  field
    0      1     format (4)
    1      1     flags: 1 = payload zstd-compressed
    2      4     zstd dictionary id, big-endian (0 = none)
    6      4     CRC-32 of value[0:6], value[10:] and the key
    10     8     first seq, big-endian
    18     ...   payload: msgpack [headers, bodies], one element each per seq
                 first..last: each header the msgpack array a format-3 value holds,
                 each body the event's msgpack map (never a blob reference)

:class:`EventRows` shows the table one event per row: a chunk's events come out as
format-3 values (raw bodies, fresh CRCs) after the chunk's CRC is verified, so every
reader that verified and decoded per-event values reads chunks unchanged. The hot
paths (loading a thread) decode a chunk's events in one call (:func:`chunk_events`).
"""

from __future__ import annotations

import zlib
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any, Final

import msgspec

from tplog.backends.lmdb.engine import ReadTxn, WriteTxn
from tplog.backends.lmdb.keys import TKEY_SIZE, event_key, from_u64
from tplog.codec import F_BLOB, F_COMPRESSED, HEADER_CRC_SEED, PREFIX, Codec, Header, header_end
from tplog.errors import CorruptionError
from tplog.events import KIND_CODE, AgentTurnCompleted, AgentTurnInterrupted, Event

__all__ = ["CHUNK", "CHUNK_PREFIX_SIZE", "MAX_EVENTS", "OPEN_EVERY", "TURN_ENDS", "EventRows", "chunk_events",
           "chunk_recorded", "compact", "due", "encode_chunk", "is_chunk"]

CHUNK: Final = 4
CHUNK_PREFIX_SIZE: Final = 18
MAX_EVENTS: Final = 256  #: events per chunk: a point read decompresses at most this many
MAX_BYTES: Final = 1 << 20  #: raw payload bytes per chunk
_MAX_SCAN: Final = 4096  #: single rows a compaction looks back over
#: an append crossing a multiple of this seq compacts even inside a turn: appends store
#: bodies raw, so a turn left open (or a thread without turns) holds at most this many
#: raw rows before they are compressed as a chunk
OPEN_EVERY: Final = 32
TURN_ENDS: Final = frozenset({KIND_CODE[AgentTurnCompleted], KIND_CODE[AgentTurnInterrupted]})
_SEED3: Final = HEADER_CRC_SEED[3]
_CHUNK_BYTE: Final = b"\x04"
_BARRIERS: Final = (_CHUNK_BYTE, b"\x01", b"\x02")
_crc32 = zlib.crc32

_raw_pair = msgspec.msgpack.Decoder(tuple[list[msgspec.Raw], list[msgspec.Raw]])
_events_only = msgspec.msgpack.Decoder(tuple[msgspec.Raw, list[Event]])
_headers_events = msgspec.msgpack.Decoder(tuple[list[Header], list[Event]])
_DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, TypeError)


def is_chunk(value: bytes) -> bool:
    return value[:1] == _CHUNK_BYTE


def _array_header(n: int) -> bytes:
    if n < 16:
        return bytes([0x90 | n])
    if n < 0x10000:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def encode_chunk(codec: Codec, key: bytes, first_seq: int, headers: list[bytes | memoryview],
                 bodies: list[bytes | memoryview]) -> bytes:
    """The chunk value for events ``first_seq``.. stored under ``key`` (the last one's)."""
    payload = b"".join([b"\x92", _array_header(len(headers)), *headers, _array_header(len(bodies)), *bodies])
    flags, dict_id, stored = codec.pack(payload)
    head = bytes([CHUNK, flags]) + dict_id.to_bytes(4, "big")
    rest = first_seq.to_bytes(8, "big") + stored
    crc = _crc32(key, _crc32(rest, _crc32(head)))
    return head + crc.to_bytes(4, "big") + rest


def _first_seq(key: bytes, value: bytes, name: str | None) -> int:
    """The chunk's first seq, once its CRC holds (a damaged prefix must not steer reads)."""
    last = from_u64(key, TKEY_SIZE)
    if (len(value) < CHUNK_PREFIX_SIZE or value[1] & ~F_COMPRESSED
            or _crc32(key, _crc32(memoryview(value)[10:], _crc32(value[:6]))) != int.from_bytes(value[6:10], "big")):
        raise CorruptionError(f"stored chunk (events up to seq {last}) is truncated or failed its CRC-32 check",
                              thread_id=name or key[:TKEY_SIZE].hex(), seq=last)
    first = from_u64(value, 10)
    if not 1 <= first <= last or last - first >= 1 << 20:
        raise CorruptionError(f"stored chunk (events up to seq {last}) names first seq {first}",
                              thread_id=name or key[:TKEY_SIZE].hex(), seq=last)
    return first


def _payload(codec: Codec, key: bytes, value: bytes, txn: Any, name: str | None) -> tuple[int, bytes | memoryview]:
    first = _first_seq(key, value, name)
    stored = memoryview(value)[CHUNK_PREFIX_SIZE:]
    if value[1] & F_COMPRESSED:
        return first, codec.unpack(int.from_bytes(value[2:6], "big"), stored, txn,
                                   where=(name or key[:TKEY_SIZE].hex(), first))
    return first, stored


def _undecodable(key: bytes, first: int, name: str | None, what: object) -> CorruptionError:
    return CorruptionError(f"stored chunk (seqs {first}..{from_u64(key, TKEY_SIZE)}) does not decode: {what}",
                           thread_id=name or key[:TKEY_SIZE].hex(), seq=first)


def _count_ok(key: bytes, first: int, *lists: list[Any]) -> bool:
    n = from_u64(key, TKEY_SIZE) - first + 1
    return all(len(x) == n for x in lists)


def chunk_events(codec: Codec, key: bytes, value: bytes, txn: Any, name: str | None, after: int = 0) -> list[Event]:
    """The chunk's events with seq > ``after``, verified and decoded in one call."""
    first, payload = _payload(codec, key, value, txn, name)
    try:
        _, events = _events_only.decode(payload)
    except _DECODE_ERRORS as exc:
        raise _undecodable(key, first, name, exc) from exc
    if not _count_ok(key, first, events):
        raise _undecodable(key, first, name, "wrong number of events")
    return events[after - first + 1:] if after >= first else events


def chunk_recorded(codec: Codec, key: bytes, value: bytes, txn: Any,
                   name: str | None) -> tuple[int, list[Header], list[Event]]:
    """(first seq, headers, events) of a chunk, verified and decoded in one call."""
    first, payload = _payload(codec, key, value, txn, name)
    try:
        headers, events = _headers_events.decode(payload)
    except _DECODE_ERRORS as exc:
        raise _undecodable(key, first, name, exc) from exc
    if not _count_ok(key, first, headers, events):
        raise _undecodable(key, first, name, "wrong number of events")
    return first, headers, events


def expand(codec: Codec, key: bytes, value: bytes, txn: Any, name: str | None) -> list[tuple[bytes, bytes]]:
    """The chunk's events as (key, format-3 value) rows, its CRC verified first."""
    first, payload = _payload(codec, key, value, txn, name)
    try:
        headers, bodies = _raw_pair.decode(payload)
    except _DECODE_ERRORS as exc:
        raise _undecodable(key, first, name, exc) from exc
    if not _count_ok(key, first, headers, bodies):
        raise _undecodable(key, first, name, "wrong number of events")
    tk = key[:TKEY_SIZE]
    out = []
    pack = PREFIX.pack
    for i, (h, b) in enumerate(zip(headers, bodies, strict=True)):
        k = event_key(tk, first + i)
        hl = len(memoryview(h))
        hcrc = _crc32(k, _crc32(h, _crc32(hl.to_bytes(2, "big"), _SEED3)))
        out.append((k, b"".join([pack(3, 0, 0, hcrc, hl), h, b, _crc32(k, _crc32(b)).to_bytes(4, "big")])))
    return out


class EventRows:
    """The ``events`` table of one transaction seen one event per row (chunks expanded):
    ``range``, ``get`` and ``exists`` answer as the table's own would if every event
    had a format-3 row. Recently expanded chunks are kept (a log-order read visits the
    same chunk once per event it holds)."""

    __slots__ = ("_cache", "_codec", "_txn")

    def __init__(self, txn: ReadTxn, codec: Codec) -> None:
        self._txn = txn
        self._codec = codec
        self._cache: OrderedDict[bytes, list[tuple[bytes, bytes]]] = OrderedDict()

    def _expand(self, key: bytes, value: bytes, name: str | None) -> list[tuple[bytes, bytes]]:
        key = bytes(key)
        rows = self._cache.get(key)
        if rows is None:
            rows = self._cache[key] = expand(self._codec, key, value, self._txn, name)
            if len(self._cache) > 16:
                self._cache.popitem(last=False)
        return rows

    def _straddles(self, key: bytes, value: bytes, end: bytes, name: str | None) -> bool:
        """Whether chunk row ``key`` (>= ``end``) holds events before ``end``."""
        return (len(end) >= TKEY_SIZE + 8 and key[:TKEY_SIZE] == end[:TKEY_SIZE]
                and event_key(key[:TKEY_SIZE], _first_seq(key, value, name)) < end)

    def range(self, start: bytes = b"", end: bytes | None = None, *, reverse: bool = False,
              name: str | None = None) -> Iterator[tuple[bytes, bytes]]:
        """The events with ``start <= key < end``, in key order (``reverse``: backwards)."""
        if reverse:
            return self._backward(start, end, name)
        return self._forward(start, end, name)

    def _forward(self, start: bytes, end: bytes | None, name: str | None) -> Iterator[tuple[bytes, bytes]]:
        for k, v in self._txn.range("events", start):
            if v[:1] != _CHUNK_BYTE:
                if end is not None and k >= end:
                    return
                yield k, v
                continue
            if end is not None and k >= end and not self._straddles(k, v, end, name):
                return
            for ek, ev in self._expand(k, v, name):
                if ek < start:
                    continue
                if end is not None and ek >= end:
                    return
                yield ek, ev

    def _backward(self, start: bytes, end: bytes | None, name: str | None) -> Iterator[tuple[bytes, bytes]]:
        if end is not None:  # the first row at or after ``end`` may be a chunk reaching below it
            for k, v in self._txn.range("events", end):
                if v[:1] == _CHUNK_BYTE and self._straddles(k, v, end, name):
                    rows = [(ek, ev) for ek, ev in self._expand(k, v, name) if start <= ek < end]
                    yield from reversed(rows)
                break
        for k, v in self._txn.range("events", start, end, reverse=True):
            if v[:1] != _CHUNK_BYTE:
                yield k, v
                continue
            for ek, ev in reversed(self._expand(k, v, name)):
                if ek < start:
                    return
                yield ek, ev

    def _holder(self, key: bytes) -> tuple[bytes, bytes] | None:
        """The chunk row of ``key``'s thread at or after ``key``, if the next row is one."""
        for k, v in self._txn.range("events", key):
            if v[:1] == _CHUNK_BYTE and k[:TKEY_SIZE] == key[:TKEY_SIZE]:
                return k, v
            return None
        return None

    def get(self, key: bytes, *, name: str | None = None) -> bytes | None:
        """Event ``key``'s value (a chunk's event as a format-3 value), or ``None``."""
        v = self._txn.get("events", key)
        if v is not None and v[:1] != _CHUNK_BYTE:
            return v
        found = (key, v) if v is not None else self._holder(key)
        if found is None:
            return None
        for ek, ev in self._expand(found[0], found[1], name):
            if ek == key:
                return ev
        return None

    def exists(self, key: bytes) -> bool:
        """Whether event ``key`` has a row (alone or in a chunk); reads no value's body."""
        if self._txn.get("events", key) is not None:
            return True
        found = self._holder(key)
        return found is not None and len(found[1]) >= CHUNK_PREFIX_SIZE and from_u64(found[1], 10) <= from_u64(
            key, TKEY_SIZE)

    def raw_keys(self, start: bytes, end: bytes) -> list[bytes]:
        """The table's own keys in [start, end) (what deleting a thread removes)."""
        return [bytes(k) for k, _ in self._txn.range("events", start, end)]


def due(kinds: list[int], first_seq: int, last_seq: int, raw: bool) -> bool:
    """Whether an append of events ``first_seq..last_seq`` (of ``kinds``) compacts: it
    closes a turn, or (``raw``: bodies are appended uncompressed) it crosses a multiple
    of :data:`OPEN_EVERY`."""
    return (raw and last_seq // OPEN_EVERY != (first_seq - 1) // OPEN_EVERY) or any(k in TURN_ENDS for k in kinds)


def compact(txn: WriteTxn, codec: Codec, tk: bytes, last_seq: int, name: str) -> int:
    """Re-store thread ``tk``'s single rows up to ``last_seq`` (back to its previous
    chunk or format-1/2 row) as chunks; returns the change in stored bytes. Runs of consecutive seqs of
    format-3 values are chunked (a fork's seq 1 and its own rows after the fork point
    are not consecutive; blob references and older formats stay single rows); each
    value's CRCs are verified before its event is re-stored."""
    rows: list[tuple[bytes, bytes]] = []
    for k, v in txn.range("events", tk, event_key(tk, last_seq + 1), reverse=True):
        # older formats stay single rows and end the scan too: a store written before chunk
        # rows must not be re-read back to its start at every turn end
        if v[:1] in _BARRIERS or len(rows) >= _MAX_SCAN:
            break
        rows.append((bytes(k), v))
    rows.reverse()
    delta = 0
    run: list[tuple[bytes, bytes]] = []
    size = 0
    for k, v in rows:
        ok = v[:1] == b"\x03" and not v[1] & F_BLOB
        if (ok and run and len(run) < MAX_EVENTS and size + len(v) < MAX_BYTES
                and from_u64(run[-1][0], TKEY_SIZE) + 1 == from_u64(k, TKEY_SIZE)):
            run.append((k, v))
            size += len(v)
            continue
        delta += _store_run(txn, codec, run, name)
        run, size = ([(k, v)], len(v)) if ok else ([], 0)
    return delta + _store_run(txn, codec, run, name)


def _store_run(txn: WriteTxn, codec: Codec, run: list[tuple[bytes, bytes]], name: str) -> int:
    if len(run) < 2:
        return 0
    headers: list[bytes | memoryview] = []
    bodies: list[bytes | memoryview] = []
    for k, v in run:
        where = (name, from_u64(k, TKEY_SIZE))
        codec.check(k, v, where=where)  # never launder a damaged value into a chunk with a fresh CRC
        headers.append(memoryview(v)[12:header_end(v)])
        bodies.append(codec.body_bytes(v, txn, where=where))
    last_key = run[-1][0]
    chunk = encode_chunk(codec, last_key, from_u64(run[0][0], TKEY_SIZE), headers, bodies)
    old = sum(len(v) for _, v in run)
    if len(chunk) >= old:
        return 0
    for k, _ in run:
        txn.delete("events", k)
    txn.put("events", last_key, chunk)
    return len(chunk) - old
