"""Events to bytes and back: msgpack, zstd (with trained dictionaries), checksum.

Never imports lmdb. The stored value's layout, its header and facts: :mod:`tplog.value_format`;
the input limits and the append's depth and schema checks: :mod:`tplog.limits` (both re-exported here).
"""

from __future__ import annotations

import hashlib
import struct
import threading
import zlib
from typing import Any, NoReturn

import msgspec
import zstandard

from tplog.errors import CorruptionError, InvalidInputError, LimitExceededError
from tplog.events import EVENT_TYPES, KIND_CODE, Event, MessageRecorded
from tplog.limits import NOT_CONTAINER_BYTES, Limits, check_type, depth_ok
from tplog.protocol import model as m
from tplog.value_format import (
    ABORTED,
    BLOB_PREFIX,
    F_BLOB,
    F_COMPRESSED,
    FORMAT,
    FORMATS,
    HEADER_CRC_SEED,
    MSG_KIND,
    PEEK_FACTS,
    PREFIX,
    PREFIX_SIZE,
    SPLIT_CRC,
    V3_SPAWN,
    Facts,
    Header,
    TurnFacts,
    blob_refcount,
    blob_with_refcount,
    facts_of,
    header_end,
    peek_header,
    stored_body,
    turn_facts_of,
    value_ok,
    verified_header_end,
)

__all__ = [
    "ABORTED",
    "Codec",
    "Encoded",
    "FORMAT",
    "FORMATS",
    "F_BLOB",
    "F_COMPRESSED",
    "Facts",
    "HEADER_CRC_SEED",
    "Header",
    "Limits",
    "MSG_KIND",
    "PEEK_FACTS",
    "PREFIX",
    "PREFIX_SIZE",
    "SPLIT_CRC",
    "TurnFacts",
    "V3_SPAWN",
    "blob_refcount",
    "blob_with_refcount",
    "facts_of",
    "header_end",
    "peek_header",
    "stored_body",
    "turn_facts_of",
    "value_ok",
    "verified_header_end",
]

_U32 = struct.Struct(">I")


class _Header4(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """The header every other event writes (no ``turn`` element: as format 2 wrote it)."""

    kind: int
    event_id: str
    recorded_at: int
    facts: Facts | None


class Encoded(msgspec.Struct):
    """An event encoded outside the writer: all but the key-dependent CRC."""

    event: Any
    event_id: str
    kind: int
    facts: Facts | None
    head_and_body: bytes  # header length, header and body, i.e. value[10:-4]
    prefix_flags: int
    dict_id: int
    crc_partial: int  # CRC-32 of value[10:12+H] (the key is added by finish())
    body_crc_partial: int  # CRC-32 of the stored body (the key is added by finish())
    blob: tuple[bytes, bytes] | None  # (sha256, blob value) for large bodies
    size: int  # raw msgpack body size

    def finish(self, key: bytes) -> bytes:
        crc = zlib.crc32(key, self.crc_partial)
        return (PREFIX.pack(FORMAT, self.prefix_flags, self.dict_id, crc, 0)[:10] + self.head_and_body
                + zlib.crc32(key, self.body_crc_partial).to_bytes(4, "big"))


class Codec:
    """Encodes and decodes events; thread-safe (per-thread zstd contexts)."""

    def __init__(self, limits: Limits | None = None, *, compress_bodies: bool = True) -> None:
        self.limits = limits or Limits()
        #: False: bodies are stored raw (a store that compresses them later, many at a
        #: time: LMDB's chunk rows); blobs are compressed either way (never chunked)
        self.compress_bodies = compress_bodies
        self._enc = msgspec.msgpack.Encoder()
        self._event_dec: msgspec.msgpack.Decoder[Event] = msgspec.msgpack.Decoder(Event)
        #: The schema check of an append: ``Event`` with ``Any`` left undecoded.
        self._check_dec: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(check_type())
        self.header_decoder = msgspec.msgpack.Decoder(Header)
        self._dicts: dict[int, zstandard.ZstdCompressionDict] = {}
        self._dict_bytes: dict[int, bytes] = {}
        self.current_dict = 0
        self._local = threading.local()

    # ------------------------------------------------------------------ dictionaries

    def add_dictionary(self, dict_id: int, data: bytes, *, use: bool = True) -> None:
        """Know dictionary ``dict_id``; with ``use``, new values are compressed with
        it when it is the newest known."""
        if dict_id in self._dict_bytes:
            if use and dict_id > self.current_dict:
                self.current_dict = dict_id
            return
        self._dicts[dict_id] = zstandard.ZstdCompressionDict(data)
        self._dict_bytes[dict_id] = data
        if use and dict_id > self.current_dict:
            self.current_dict = dict_id

    def has_dictionary(self, dict_id: int) -> bool:
        return dict_id == 0 or dict_id in self._dicts

    def _compressor(self, dict_id: int) -> zstandard.ZstdCompressor:
        cache = self._local.__dict__.setdefault("c", {})
        c = cache.get(dict_id)
        if c is None:
            d = self._dicts.get(dict_id)
            c = zstandard.ZstdCompressor(level=self.limits.level, dict_data=d, write_content_size=True)
            cache[dict_id] = c
        return c  # type: ignore[no-any-return]

    def _decompressor(self, dict_id: int) -> zstandard.ZstdDecompressor:
        cache = self._local.__dict__.setdefault("d", {})
        d = cache.get(dict_id)
        if d is None:
            d = zstandard.ZstdDecompressor(dict_data=self._dicts.get(dict_id))
            cache[dict_id] = d
        return d  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ encode

    def encode_body(self, event: Event) -> bytes:
        try:
            return self._enc.encode(event)
        except (msgspec.EncodeError, OverflowError, TypeError) as exc:
            raise InvalidInputError(f"event cannot be encoded: {exc}") from exc
        except RecursionError as exc:
            raise LimitExceededError(f"event nests deeper than max_depth={self.limits.max_depth}") from exc

    def encode(self, event: Event, event_id: str, recorded_at: int, body: bytes | None = None) -> Encoded:
        """The stored form of ``event``, checked against the limits and the schema.
        ``body``: its :meth:`encode_body`, if the caller has it already."""
        kind = KIND_CODE.get(type(event))
        if kind is None:
            raise InvalidInputError(
                f"unknown event type {type(event).__name__}; expected one of "
                f"{[c.__name__ for c in EVENT_TYPES]}"
            )
        self._check_limits(event)
        if body is None:
            body = self.encode_body(event)
        # Every container encodes to one header byte of these values, so a body with
        # few of them cannot nest deep (most events): only the others are walked.
        if len(body.translate(None, NOT_CONTAINER_BYTES)) > self.limits.max_depth + 8 and not depth_ok(
            event, self.limits.max_depth + 8
        ):
            raise LimitExceededError(f"event nests deeper than max_depth={self.limits.max_depth}")
        if len(body) > self.limits.max_event_bytes:
            raise LimitExceededError(
                f"event {event_id} is {len(body)} bytes encoded; the limit (max_event_bytes) is "
                f"{self.limits.max_event_bytes}"
            )
        # msgspec does not check field types when a Struct is built, so a wrongly typed
        # field (an int where the protocol says str) encodes fine and then never decodes:
        # decode it now, as every reader will, and refuse it before anything is written.
        # ``Any`` values are left undecoded: whatever msgspec encoded there decodes.
        try:
            self._check_dec.decode(body)
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:
            msg, _, at = str(exc).partition(" - at `")
            raise InvalidInputError(
                f"{type(event).__name__} does not match the event schema: {msg}", path=at.rstrip("`") or "$"
            ) from exc
        facts = facts_of(event)
        turn = turn_facts_of(event)
        header = self._enc.encode(Header(kind, event_id, recorded_at, None, turn) if turn is not None
                                  else _Header4(kind, event_id, recorded_at, facts))
        if len(header) > 0xFFFF:
            raise LimitExceededError(f"event {event_id}: too many tool calls/returns in one message")
        flags, dict_id, stored, blob = self._pack_body(body)
        hlen = struct.pack(">H", len(header))
        crc = zlib.crc32(header, zlib.crc32(hlen, HEADER_CRC_SEED[FORMAT]))
        return Encoded(
            event=event,
            event_id=event_id,
            kind=kind,
            facts=facts,
            head_and_body=hlen + header + stored,
            prefix_flags=flags,
            dict_id=dict_id,
            crc_partial=crc,
            body_crc_partial=zlib.crc32(stored),
            blob=blob,
            size=len(body),
        )

    def _pack_body(self, body: bytes) -> tuple[int, int, bytes, tuple[bytes, bytes] | None]:
        flags = 0
        dict_id = 0
        stored = body
        big = len(body) > self.limits.blob_threshold
        if len(body) >= self.limits.compress_min_bytes and (big or self.compress_bodies):
            dict_id = self.current_dict
            comp = self._compressor(dict_id).compress(body)
            if len(comp) + 4 < len(body):
                stored = comp
                flags = F_COMPRESSED
            else:
                dict_id = 0
        if big:
            sha = hashlib.sha256(body).digest()
            bflags, bdict = flags, dict_id
            crc = zlib.crc32(sha, zlib.crc32(stored))
            blob_value = BLOB_PREFIX.pack(1, bflags, bdict, crc) + stored
            return F_BLOB, 0, sha, (sha, blob_value)
        return flags, dict_id, stored, None

    def _check_limits(self, event: Event) -> None:
        lim = self.limits
        parts: list[Any] | None = None
        if isinstance(event, MessageRecorded) and not isinstance(event.message, m.SystemMessage):
            parts = event.message.parts
        elif hasattr(event, "turn"):
            parts = event.turn.parts
        if parts is not None and len(parts) > lim.max_parts:
            raise LimitExceededError(f"{len(parts)} parts in one message; the limit (max_parts) is {lim.max_parts}")

    # ------------------------------------------------------------------ decode

    def check(self, key: bytes, value: bytes, *, where: tuple[str | None, int | None] = (None, None)) -> None:
        """Verify the whole value (header and body) against its CRCs."""
        mv = memoryview(value)
        if value_ok(key, value, mv):
            return
        self._fail(value, where)

    def check_header(self, key: bytes, value: bytes, *,
                     where: tuple[str | None, int | None] = (None, None)) -> None:
        """Verify what :meth:`header` reads: a format-2/3 value's header CRC (the body is
        verified when it is read); a format-1 value has one CRC, over everything."""
        end = PREFIX_SIZE + ((value[10] << 8) | value[11]) if len(value) >= PREFIX_SIZE + 4 else len(value)
        if (value[:1] in (b"\x03", b"\x02") and not value[1] & ~(F_COMPRESSED | F_BLOB) and end <= len(value) - 4
                and zlib.crc32(key, zlib.crc32(value[10:end], HEADER_CRC_SEED[value[0]]))
                == _U32.unpack_from(value, 6)[0]):
            return
        if value[:1] == b"\x01":
            self.check(key, value, where=where)
            return
        self._fail(value, where, body=False)

    @staticmethod
    def _fail(value: bytes, where: tuple[str | None, int | None], *, body: bool = True) -> NoReturn:
        split = value[:1] in (b"\x03", b"\x02")
        if len(value) < PREFIX_SIZE + (4 if split else 0) or value[0] not in FORMATS or (
            value[1] & ~(F_COMPRESSED | F_BLOB)
        ) or 12 + ((value[10] << 8) | value[11]) > len(value) - (4 if split else 0):
            raise CorruptionError("stored value is truncated or of an unknown format", thread_id=where[0], seq=where[1])
        what = "header " if split and not body else ""
        raise CorruptionError(f"stored value failed its {what}CRC-32 check", thread_id=where[0], seq=where[1])

    def header(self, value: bytes, *, where: tuple[str | None, int | None] = (None, None)) -> Header:
        hlen = int.from_bytes(value[10:12], "big")
        try:
            return self.header_decoder.decode(value[PREFIX_SIZE : PREFIX_SIZE + hlen])
        except (msgspec.DecodeError, UnicodeDecodeError, TypeError) as exc:  # TypeError: see decode_event
            raise CorruptionError(f"event header does not decode: {exc}", thread_id=where[0], seq=where[1]) from exc

    def body_bytes(
        self, value: bytes, txn: Any = None, *, where: tuple[str | None, int | None] = (None, None)
    ) -> bytes | memoryview:
        """The event's msgpack body: decompressed, or (uncompressed) a zero-copy view of ``value``.

        ``txn`` (a read transaction: ``get(table, key)``) resolves blob references
        and loads a dictionary this codec has not seen yet (another process may
        have trained it since this one opened the store)."""
        flags = value[1]
        dict_id = int.from_bytes(value[2:6], "big")
        stored: Any = stored_body(value)
        if flags & F_BLOB:
            if txn is None:
                raise CorruptionError("blob reference without a blob reader", thread_id=where[0], seq=where[1])
            blob = txn.get("blobs", bytes(stored))
            if blob is None:
                raise CorruptionError("the event's shared blob is missing", thread_id=where[0], seq=where[1])
            if len(blob) < BLOB_PREFIX.size:
                raise CorruptionError("the event's shared blob is truncated", thread_id=where[0], seq=where[1])
            _, flags, dict_id, crc = BLOB_PREFIX.unpack_from(blob)
            stored = memoryview(blob)[BLOB_PREFIX.size :]
            if zlib.crc32(stored_body(value), zlib.crc32(stored)) != crc:
                raise CorruptionError("shared blob failed its CRC-32 check", thread_id=where[0], seq=where[1])
        if flags & F_COMPRESSED:
            return self.unpack(dict_id, stored, txn, where=where)
        return stored  # type: ignore[no-any-return]

    def pack(self, data: bytes, dict_id: int | None = None) -> tuple[int, int, bytes]:
        """(flags, dict id, stored) for ``data`` as a body is packed: compressed with
        dictionary ``dict_id`` (default: the current one) when it is long enough and
        shrinks, else as it is. The id is read once: a dictionary trained meanwhile (another
        thread) must not make the returned id differ from the one compressed with."""
        if len(data) >= self.limits.compress_min_bytes:
            d = self.current_dict if dict_id is None else dict_id
            comp = self._compressor(d).compress(data)
            if len(comp) + 4 < len(data):
                return F_COMPRESSED, d, comp
        return 0, 0, data

    def unpack(self, dict_id: int, stored: bytes | memoryview, txn: Any = None, *,
               where: tuple[str | None, int | None] = (None, None)) -> bytes:
        """Decompress a stored zstd frame (with dictionary ``dict_id``), bounded by
        ``max_decompressed_bytes``; ``txn`` loads a dictionary this codec has not seen."""
        if not self.has_dictionary(dict_id) and txn is not None:
            data = txn.get("dicts", dict_id.to_bytes(8, "big"))
            if data is not None:  # and compress with it from now on, if it is the newest
                self.add_dictionary(dict_id, bytes(data))
        if not self.has_dictionary(dict_id):
            raise CorruptionError(f"value needs zstd dictionary {dict_id}, which the store does not have",
                                  thread_id=where[0], seq=where[1])
        try:
            declared = zstandard.frame_content_size(stored)
        except zstandard.ZstdError as exc:
            raise CorruptionError(f"stored body is not a zstd frame: {exc}", thread_id=where[0],
                                  seq=where[1]) from exc
        if declared > self.limits.max_decompressed_bytes:  # -1 (unknown) is bounded below
            raise CorruptionError(
                f"stored body declares {declared} bytes, over max_decompressed_bytes="
                f"{self.limits.max_decompressed_bytes}", thread_id=where[0], seq=where[1])
        try:
            return self._decompressor(dict_id).decompress(
                stored, max_output_size=self.limits.max_decompressed_bytes
            )
        except zstandard.ZstdError as exc:
            raise CorruptionError(
                f"stored body does not decompress within max_decompressed_bytes="
                f"{self.limits.max_decompressed_bytes}: {exc}", thread_id=where[0], seq=where[1]
            ) from exc

    def decode_value(self, key: bytes, value: bytes, txn: Any = None, *,
                     where: tuple[str | None, int | None] = (None, None)) -> Event:
        """``check`` + ``body_bytes`` + ``decode_event`` in one call, with a fast path for
        the common value (inline, compressed with a known dictionary): reading a thread
        does this for every event."""
        mv = memoryview(value)
        n = len(value) - 4
        if n > PREFIX_SIZE and value[0] in SPLIT_CRC and not value[1] & ~(F_COMPRESSED | F_BLOB):  # inlined
            end = PREFIX_SIZE + ((value[10] << 8) | value[11])
            crc32 = zlib.crc32
            if (end > n or crc32(key, crc32(mv[10:end], HEADER_CRC_SEED[value[0]])) != _U32.unpack_from(value, 6)[0]
                    or crc32(key, crc32(mv[end:n])) != _U32.unpack_from(value, n)[0]):
                self._fail(value, where)
            stored = mv[end:n]
        elif value_ok(key, value, mv):
            stored = stored_body(value)
        else:
            self._fail(value, where)
        if value[1] == F_COMPRESSED:
            d = self._local.__dict__.get("d")
            dec = d.get(_U32.unpack_from(value, 2)[0]) if d is not None else None
            if dec is not None:
                limit = self.limits.max_decompressed_bytes
                try:
                    declared = zstandard.frame_content_size(stored)
                    if declared <= limit:  # else: the slow path reports it
                        return self.decode_event(dec.decompress(stored, max_output_size=limit), where=where)
                except zstandard.ZstdError:
                    pass  # the slow path reports it
        elif not value[1]:  # stored raw
            return self.decode_event(stored, where=where)
        return self.decode_event(self.body_bytes(value, txn, where=where), where=where)

    def decode_event(self, body: bytes | memoryview, *, where: tuple[str | None, int | None] = (None, None)) -> Event:
        try:
            return self._event_dec.decode(body)
        # msgspec 0.19 raises a bare TypeError for an unhashable map key (a map as the key of a map)
        except (msgspec.DecodeError, UnicodeDecodeError, TypeError) as exc:
            raise CorruptionError(f"stored event does not decode: {exc}", thread_id=where[0], seq=where[1]) from exc

    # ------------------------------------------------------------------ dictionaries

    @staticmethod
    def train(samples: list[bytes], size: int = 64 << 10) -> bytes:
        buffers: list[bytes | bytearray | memoryview] = list(samples)  # the stub's list is invariant
        try:
            d = zstandard.train_dictionary(size, buffers, level=3)
        except zstandard.ZstdError as exc:
            raise InvalidInputError(f"cannot train a zstd dictionary from these {len(samples)} samples: {exc}") from exc
        return d.as_bytes()
