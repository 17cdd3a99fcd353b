"""Chunk rows (format 5; format 4 still read): a closed turn's events re-stored as one value of ``events``.

Appends store one value per event (format 3, ``tplog.codec``), bodies uncompressed (the
codec's ``compress_bodies`` off: no zstd call per append). When an append closes an
agent turn, or crosses a multiple of :data:`OPEN_EVERY` seqs, :func:`compact` re-stores
the thread's events since its previous chunk as chunks, in the same write transaction,
compressing them once: two zstd frames and msgpack documents (an index section and a
bodies section) for many events, so a cold load decompresses and decodes twice per
chunk, not once per event, and the table holds fewer, fuller values.
A chunk is stored under the key of its LAST event (thread key + last seq), so the row
holding any seq is the first row at or after that seq's key (a cursor ``set_range``).
The log's indexes (``global``, ``eventids``) keep naming events by thread key + seq,
so nothing else changes.

A chunk value (format 5, written) is::

    offset size  field
    0      1     format (5)
    1      1     flags: 1 = index section zstd-compressed, 2 = bodies section zstd-compressed
    2      4     zstd dictionary id, big-endian (0 = none)
    6      4     index CRC: CRC-32 of value[0:6], value[10:22+L] and the key
    10     8     first seq, big-endian
    18     4     L: the index section's stored length, big-endian
    22     L     index section: msgpack [headers, bodies], one element each per seq
                 first..last: each header the msgpack array a format-3 value holds;
                 each body the event's msgpack map if its kind is one an id-only
                 read decodes (:data:`INDEX_KINDS`), else nil
    22+L   B     bodies section: msgpack [the other events' bodies, in seq order]
    22+L+B 4     bodies CRC: CRC-32 of the bodies section and the key

so an id-only read (a rebuild, ``items``, ``links``) verifies, decompresses and decodes
the small index section only, never a message body. Format 4 (still read, no longer
written) is the prefix's first 18 bytes, its CRC over value[0:6], value[10:] and the
key, then one payload: msgpack [headers, bodies] with every body.

:class:`EventRows` shows the table one event per row: a chunk's events come out as
format-3 values (raw bodies, fresh CRCs) after the chunk's CRC is verified, so every
reader that verified and decoded per-event values reads chunks unchanged. The hot
paths (loading a thread) decode a chunk's events in one call (:func:`chunk_events`).
"""

from __future__ import annotations

import struct
import zlib
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any, Final

import msgspec

from tplog.backends.lmdb.engine import ReadTxn, WriteTxn
from tplog.backends.lmdb.keys import TKEY_SIZE, event_key, from_u64
from tplog.codec import F_BLOB, F_COMPRESSED, HEADER_CRC_SEED, PREFIX, Codec, Header, header_end
from tplog.errors import CorruptionError
from tplog.events import (
    KIND_CODE,
    AgentTurnCompleted,
    AgentTurnInterrupted,
    AgentTurnStarted,
    Event,
    LinkAdded,
    ThreadStarted,
)

__all__ = ["CHUNK", "CHUNK_BYTES", "CHUNK_FORMATS", "CHUNK_PREFIX_SIZE", "INDEX_KINDS", "MAX_EVENTS", "OPEN_EVERY",
           "TURN_ENDS", "EventRows", "chunk_events", "chunk_index", "chunk_recorded", "compact", "due", "encode_chunk",
           "index_rows", "is_chunk"]

CHUNK: Final = 5  #: the chunk format written
CHUNK_FORMATS: Final = (4, 5)  #: the chunk formats read
CHUNK_PREFIX_SIZE: Final = 18  #: format 4's prefix (format 5's starts the same)
_PREFIX5: Final = 22
#: The kinds whose body a format-5 chunk keeps in its index section: those an id-only
#: read decodes (links, a ThreadStarted's declared links, turn boundaries).
INDEX_KINDS: Final = frozenset(KIND_CODE[c] for c in (ThreadStarted, LinkAdded, AgentTurnStarted,
                                                      AgentTurnCompleted, AgentTurnInterrupted))
_NIL: Final = b"\xc0"
MAX_EVENTS: Final = 256  #: events per chunk: a point read decompresses at most this many
MAX_BYTES: Final = 1 << 20  #: raw payload bytes per chunk
_MAX_SCAN: Final = 4096  #: single rows a compaction looks back over
#: an append crossing a multiple of this seq compacts even inside a turn: appends store
#: bodies raw, so a turn left open (or a thread without turns) holds at most this many
#: raw rows before they are compressed as a chunk
OPEN_EVERY: Final = 32
TURN_ENDS: Final = frozenset({KIND_CODE[AgentTurnCompleted], KIND_CODE[AgentTurnInterrupted]})
_SEED3: Final = HEADER_CRC_SEED[3]
CHUNK_BYTES: Final = (b"\x04", b"\x05")  #: a chunk row's first byte
_BARRIERS: Final = (*CHUNK_BYTES, b"\x01", b"\x02")
_crc32 = zlib.crc32
_U64: Final = struct.Struct(">Q")
_U32: Final = struct.Struct(">I")

_raw_pair = msgspec.msgpack.Decoder(tuple[list[msgspec.Raw], list[msgspec.Raw]])
_events_only = msgspec.msgpack.Decoder(tuple[msgspec.Raw, list[Event]])
_headers_events = msgspec.msgpack.Decoder(tuple[list[Header], list[Event]])
_headers_raw = msgspec.msgpack.Decoder(tuple[list[Header], list[msgspec.Raw]])
_raw_list = msgspec.msgpack.Decoder(list[msgspec.Raw])
_events_or_nil = msgspec.msgpack.Decoder(tuple[msgspec.Raw, list[Event | None]])
_headers_events_or_nil = msgspec.msgpack.Decoder(tuple[list[Header], list[Event | None]])
_event_list = msgspec.msgpack.Decoder(list[Event])
_DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, TypeError)


def is_chunk(value: bytes) -> bool:
    return value[:1] in CHUNK_BYTES


def _array_header(n: int) -> bytes:
    if n < 16:
        return bytes([0x90 | n])
    if n < 0x10000:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def _index_kind(header: bytes | memoryview) -> bool:
    """Whether a stored header (msgpack fixarray, kind a positive fixint first) names a kind
    whose body goes in the index section; an unexpected shape goes there too (it is read back
    as it was written, wherever it is)."""
    return len(header) < 2 or header[0] not in (0x94, 0x95) or header[1] in INDEX_KINDS


def encode_chunk(codec: Codec, key: bytes, first_seq: int, headers: list[bytes | memoryview],
                 bodies: list[bytes | memoryview]) -> bytes:
    """The chunk value (format 5) for events ``first_seq``.. stored under ``key`` (the last one's)."""
    n = len(headers)
    kept: list[bytes | memoryview] = []
    rest: list[bytes | memoryview] = []
    for h, b in zip(headers, bodies, strict=True):
        if _index_kind(h):
            kept.append(b)
        else:
            kept.append(_NIL)
            rest.append(b)
    # both sections with one dictionary, read once (the header has one id; a dictionary trained
    # in another thread between two reads of the current one made the sections disagree)
    d = codec.current_dict
    iflags, idict, index = codec.pack(b"".join([b"\x92", _array_header(n), *headers, _array_header(n), *kept]), d)
    bflags, bdict, others = codec.pack(b"".join([_array_header(len(rest)), *rest]), d)
    head = bytes([CHUNK, iflags | (bflags << 1)]) + (idict or bdict).to_bytes(4, "big")
    rest_of_index = first_seq.to_bytes(8, "big") + len(index).to_bytes(4, "big") + index
    crc = _crc32(key, _crc32(rest_of_index, _crc32(head)))
    return b"".join([head, crc.to_bytes(4, "big"), rest_of_index, others,
                     _crc32(key, _crc32(others)).to_bytes(4, "big")])


def _damaged(key: bytes, name: str | None, what: str) -> CorruptionError:
    last = from_u64(key, TKEY_SIZE)
    return CorruptionError(f"stored chunk (events up to seq {last}) {what}",
                           thread_id=name or key[:TKEY_SIZE].hex(), seq=last)


def _first_seq(key: bytes, value: bytes, name: str | None, bodies: bool = True) -> int:
    """The chunk's first seq, once its CRC holds (a damaged prefix must not steer reads);
    ``bodies=False``: a format-5 chunk's bodies section is not checked (nor read)."""
    last = from_u64(key, TKEY_SIZE)
    mv = memoryview(value)
    if value[:1] == b"\x04":
        if (len(value) < CHUNK_PREFIX_SIZE or value[1] & ~F_COMPRESSED
                or _crc32(key, _crc32(mv[10:], _crc32(mv[:6]))) != int.from_bytes(value[6:10], "big")):
            raise _damaged(key, name, "is truncated or failed its CRC-32 check")
    else:
        end = _PREFIX5 + int.from_bytes(value[18:22], "big") if len(value) >= _PREFIX5 + 4 else len(value)
        n = len(value) - 4
        if (end > n or value[1] & ~3
                or _crc32(key, _crc32(mv[10:end], _crc32(mv[:6]))) != int.from_bytes(value[6:10], "big")):
            raise _damaged(key, name, "is truncated or its index section failed its CRC-32 check")
        if bodies and _crc32(key, _crc32(mv[end:n])) != int.from_bytes(value[n:], "big"):
            raise _damaged(key, name, "bodies section failed its CRC-32 check")
    first = from_u64(value, 10)
    if not 1 <= first <= last or last - first >= 1 << 20:
        raise _damaged(key, name, f"names first seq {first}")
    return first


def _unpack(codec: Codec, key: bytes, value: bytes, stored: memoryview, compressed: int, txn: Any,
            name: str | None, first: int) -> bytes | memoryview:
    if compressed:
        return codec.unpack(int.from_bytes(value[2:6], "big"), stored, txn,
                            where=(name or key[:TKEY_SIZE].hex(), first))
    return stored


def _payload(codec: Codec, key: bytes, value: bytes, txn: Any, name: str | None) -> tuple[int, bytes | memoryview]:
    """A format-4 chunk's payload, verified and decompressed."""
    first = _first_seq(key, value, name)
    return first, _unpack(codec, key, value, memoryview(value)[CHUNK_PREFIX_SIZE:], value[1] & 1, txn, name, first)


def _sections(codec: Codec, key: bytes, value: bytes, txn: Any, name: str | None,
              bodies: bool = True) -> tuple[int, bytes | memoryview, bytes | memoryview]:
    """A format-5 chunk's (first seq, index section, bodies section), verified and
    decompressed; ``bodies=False``: the bodies section is neither (it comes back empty)."""
    first = _first_seq(key, value, name, bodies)
    mv = memoryview(value)
    end = _PREFIX5 + int.from_bytes(value[18:22], "big")
    index = _unpack(codec, key, value, mv[_PREFIX5:end], value[1] & 1, txn, name, first)
    if not bodies:
        return first, index, b""
    return first, index, _unpack(codec, key, value, mv[end:-4], value[1] & 2, txn, name, first)


def _undecodable(key: bytes, first: int, name: str | None, what: object) -> CorruptionError:
    return CorruptionError(f"stored chunk (seqs {first}..{from_u64(key, TKEY_SIZE)}) does not decode: {what}",
                           thread_id=name or key[:TKEY_SIZE].hex(), seq=first)


def _count_ok(key: bytes, first: int, *lists: list[Any]) -> bool:
    n = from_u64(key, TKEY_SIZE) - first + 1
    return all(len(x) == n for x in lists)


def _decode(dec: Any, data: bytes | memoryview, key: bytes, first: int, name: str | None,
            counted: tuple[int, ...] = (0, 1)) -> Any:
    """``dec``'s decode of a section, its lists at ``counted`` checked to hold one element per seq."""
    try:
        out = dec.decode(data)
    except _DECODE_ERRORS as exc:
        raise _undecodable(key, first, name, exc) from exc
    if not _count_ok(key, first, *(out[i] for i in counted)):
        raise _undecodable(key, first, name, "wrong number of events")
    return out


def _merged(key: bytes, first: int, name: str | None, slots: list[Any], rest: list[Any],
            empty: Any = None) -> list[Any]:
    """The index section's bodies with each ``empty`` slot filled from the bodies section, in order."""
    it = iter(rest)
    take = it.__next__
    try:
        out = [x if x is not empty else take() for x in slots]
    except StopIteration:
        raise _undecodable(key, first, name, "fewer bodies than the index leaves out") from None
    if next(it, None) is not None:
        raise _undecodable(key, first, name, "more bodies than the index leaves out")
    return out


def _events5(codec: Codec, key: bytes, value: bytes, txn: Any,
             name: str | None) -> tuple[int, list[Header], list[Event]]:
    """(first seq, headers, events) of a format-5 chunk, every part verified."""
    first, index, others = _sections(codec, key, value, txn, name)
    try:
        hs, slots = _headers_events_or_nil.decode(index)
        rest = _event_list.decode(others)
    except _DECODE_ERRORS as exc:
        raise _undecodable(key, first, name, exc) from exc
    if not _count_ok(key, first, slots, hs):
        raise _undecodable(key, first, name, "wrong number of events")
    return first, hs, _merged(key, first, name, slots, rest)


def _all_events5(codec: Codec, key: bytes, value: bytes, txn: Any, name: str | None) -> tuple[int, list[Event]]:
    """(first seq, events) of a format-5 chunk, both sections verified, decompressed and
    decoded: :func:`_events5` without the headers, its helpers inlined (a cold load of a
    short thread is one chunk, and their calls were a tenth of it)."""
    first = _first_seq(key, value, name)
    mv = memoryview(value)
    end = _PREFIX5 + _U32.unpack_from(value, 18)[0]
    index: bytes | memoryview = mv[_PREFIX5:end]
    others: bytes | memoryview = mv[end:-4]
    flags = value[1]
    if flags:
        dict_id = _U32.unpack_from(value, 2)[0]
        where = (name or key[:TKEY_SIZE].hex(), first)
        if flags & 1:
            index = codec.unpack(dict_id, index, txn, where=where)
        if flags & 2:
            others = codec.unpack(dict_id, others, txn, where=where)
    try:
        slots = _events_or_nil.decode(index)[1]
        rest = _event_list.decode(others)
    except _DECODE_ERRORS as exc:
        raise _undecodable(key, first, name, exc) from exc
    if len(slots) != from_u64(key, TKEY_SIZE) - first + 1:
        raise _undecodable(key, first, name, "wrong number of events")
    return first, _merged(key, first, name, slots, rest)


def chunk_events(codec: Codec, key: bytes, value: bytes, txn: Any, name: str | None, after: int = 0) -> list[Event]:
    """The chunk's events with seq > ``after``, verified and decoded in one call (a section)."""
    if value[:1] == b"\x05":
        first, events = _all_events5(codec, key, value, txn, name)
    else:
        first, payload = _payload(codec, key, value, txn, name)
        _, events = _decode(_events_only, payload, key, first, name, (1,))
    return events[after - first + 1:] if after >= first else events


def chunk_recorded(codec: Codec, key: bytes, value: bytes, txn: Any,
                   name: str | None) -> tuple[int, list[Header], list[Event]]:
    """(first seq, headers, events) of a chunk, verified and decoded in one call (a section)."""
    if value[:1] == b"\x05":
        return _events5(codec, key, value, txn, name)
    first, payload = _payload(codec, key, value, txn, name)
    headers, events = _decode(_headers_events, payload, key, first, name)
    return first, headers, events


def chunk_index(codec: Codec, key: bytes, value: bytes, txn: Any,
                name: str | None) -> tuple[int, list[Header], list[msgspec.Raw]]:
    """(first seq, headers, bodies) of a chunk for an id-only read: only what the headers
    and the index section hold is verified and decompressed. ``bodies[i]`` is the msgpack
    body of event first+i if its kind is in :data:`INDEX_KINDS` (any other may be nil)."""
    if value[:1] == b"\x05":
        first, payload, _ = _sections(codec, key, value, txn, name, bodies=False)
    else:
        first, payload = _payload(codec, key, value, txn, name)
    headers, bodies = _decode(_headers_raw, payload, key, first, name)
    return first, headers, bodies


def _raw_rows(codec: Codec, key: bytes, value: bytes, txn: Any,
              name: str | None) -> tuple[int, list[msgspec.Raw], list[msgspec.Raw]]:
    """(first seq, raw headers, raw bodies) of a chunk, every part verified."""
    if value[:1] == b"\x05":
        first, index, others = _sections(codec, key, value, txn, name)
        try:
            headers, slots = _raw_pair.decode(index)
            rest = _raw_list.decode(others)
        except _DECODE_ERRORS as exc:
            raise _undecodable(key, first, name, exc) from exc
        if not _count_ok(key, first, headers, slots):
            raise _undecodable(key, first, name, "wrong number of events")
        nil = [len(b) == 1 and bytes(b) == _NIL for b in slots]
        return first, headers, _merged(key, first, name, [None if x else b for x, b in zip(nil, slots, strict=True)],
                                       rest)
    first, payload = _payload(codec, key, value, txn, name)
    headers, bodies = _decode(_raw_pair, payload, key, first, name)
    return first, headers, bodies


def expand(codec: Codec, key: bytes, value: bytes, txn: Any, name: str | None) -> list[tuple[bytes, bytes]]:
    """The chunk's events as (key, format-3 value) rows, its CRCs verified first."""
    first, headers, bodies = _raw_rows(codec, key, value, txn, name)
    tk = key[:TKEY_SIZE]
    out = []
    pack = PREFIX.pack
    for i, (h, b) in enumerate(zip(headers, bodies, strict=True)):
        k = event_key(tk, first + i)
        hl = len(memoryview(h))
        hcrc = _crc32(k, _crc32(h, _crc32(hl.to_bytes(2, "big"), _SEED3)))
        out.append((k, b"".join([pack(3, 0, 0, hcrc, hl), h, b, _crc32(k, _crc32(b)).to_bytes(4, "big")])))
    return out


def index_rows(txn: ReadTxn, codec: Codec, start: bytes = b"", end: bytes | None = None,
               name: str | None = None) -> Iterator[tuple[bytes, bytes | None, Header | None, msgspec.Raw | None]]:
    """The events with ``start <= key < end`` in key order, for an id-only read: a single
    row as (key, value, None, None); a chunk's event as (key, None, header, body), its
    chunk's headers verified and decoded in one call (:func:`chunk_index`: ``body`` is
    nil for kinds outside :data:`INDEX_KINDS` in a format-5 chunk). ``name`` names the
    thread in errors (else a damaged chunk's thread is looked up in ``heads``)."""
    pack = _U64.pack
    for k, v in txn.range("events", start):
        if end is not None and k >= end and not (v[:1] in CHUNK_BYTES and _straddles(k, v, end, name)):
            return
        if v[:1] not in CHUNK_BYTES:
            yield k, v, None, None
            continue
        tk = bytes(k[:TKEY_SIZE])
        try:
            first, headers, bodies = chunk_index(codec, bytes(k), v, txn, name)
        except CorruptionError:
            if name is not None:
                raise
            # named by the thread's head (looked up only now: a rebuild reads every chunk)
            chunk_index(codec, bytes(k), v, txn, _thread_name(txn, tk))
            raise
        skip = 0
        if start[:TKEY_SIZE] == tk:  # the first row may be a chunk reaching below ``start``
            while skip < len(headers) and event_key(tk, first + skip) < start:
                skip += 1
        for i in range(skip, len(headers)):
            ek = tk + pack(first + i)  # event_key, inlined: once per event of the log
            if end is not None and ek >= end:
                return
            yield ek, None, headers[i], bodies[i]


def _straddles(key: bytes, value: bytes, end: bytes, name: str | None) -> bool:
    """Whether chunk row ``key`` (>= ``end``) holds events before ``end``."""
    return (len(end) >= TKEY_SIZE + 8 and key[:TKEY_SIZE] == end[:TKEY_SIZE]
            and event_key(key[:TKEY_SIZE], _first_seq(key, value, name, bodies=False)) < end)


def _thread_name(txn: ReadTxn, tk: bytes) -> str | None:
    """A thread's id as its head names it (for errors), or ``None``."""
    raw = txn.get("heads", tk)
    if raw is None:
        return None
    try:
        return str(msgspec.msgpack.decode(raw)[0])
    except (msgspec.DecodeError, IndexError, KeyError, TypeError):
        return None


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
        return _straddles(key, value, end, name)

    def range(self, start: bytes = b"", end: bytes | None = None, *, reverse: bool = False,
              name: str | None = None) -> Iterator[tuple[bytes, bytes]]:
        """The events with ``start <= key < end``, in key order (``reverse``: backwards)."""
        if reverse:
            return self._backward(start, end, name)
        return self._forward(start, end, name)

    def _forward(self, start: bytes, end: bytes | None, name: str | None) -> Iterator[tuple[bytes, bytes]]:
        for k, v in self._txn.range("events", start):
            if v[:1] not in CHUNK_BYTES:
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
                if v[:1] in CHUNK_BYTES and self._straddles(k, v, end, name):
                    rows = [(ek, ev) for ek, ev in self._expand(k, v, name) if start <= ek < end]
                    yield from reversed(rows)
                break
        for k, v in self._txn.range("events", start, end, reverse=True):
            if v[:1] not in CHUNK_BYTES:
                yield k, v
                continue
            for ek, ev in reversed(self._expand(k, v, name)):
                if ek < start:
                    return
                yield ek, ev

    def _holder(self, key: bytes) -> tuple[bytes, bytes] | None:
        """The chunk row of ``key``'s thread at or after ``key``, if the next row is one."""
        for k, v in self._txn.range("events", key):
            if v[:1] in CHUNK_BYTES and k[:TKEY_SIZE] == key[:TKEY_SIZE]:
                return k, v
            return None
        return None

    def get(self, key: bytes, *, name: str | None = None) -> bytes | None:
        """Event ``key``'s value (a chunk's event as a format-3 value), or ``None``."""
        v = self._txn.get("events", key)
        if v is not None and v[:1] not in CHUNK_BYTES:
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
