"""Events to bytes and back: msgpack, zstd (with trained dictionaries), checksum.

Never imports lmdb. A stored event value (format 3, written by this version) is::

    offset size  field
    0      1     format (3)
    1      1     flags: 1 = body zstd-compressed, 2 = body is a blob reference
    2      4     zstd dictionary id, big-endian (0 = no dictionary)
    6      4     header CRC: CRC-32 of the format byte, value[10:12+H] and the key
                 (so a value moved to another key is caught as well as a flipped bit)
    10     2     header length H, big-endian
    12     H     header: msgpack array [kind, event_id, recorded_at_ns, facts]
                 (agent-turn boundaries: [kind, event_id, recorded_at_ns, nil, turn])
    12+H   B     body: msgpack of the event (compressed if flag 1), or, with
                 flag 2, the 32-byte SHA-256 of the body kept in ``blobs``
    12+H+B 4     body CRC: CRC-32 of the body bytes followed by the key

Format 2 (still read; no longer written) is the same layout, but its header CRC
starts at the header length (not the format byte), and its headers are always
``[kind, event_id, recorded_at_ns, facts]``: an agent-turn boundary's fold fields
are read from its body. Format 1 (still read) has no body CRC: its
CRC at offset 6 covers value[10:] (header length, header and body) followed by
the key.

The header is never compressed and has a CRC of its own: the id-only
projections (links, pending tools, interrupts) read and verify ``kind`` and
``facts`` without touching the body.
``facts`` is ``None`` except for messages, where it lists tool-call ids and
names, tool-return ids and statuses, the finish reason, the system event
type and any spawned thread ids, and for user turns that carry tool returns.
``turn`` (format 3) holds what the folds read from an agent-turn boundary: the
agent id of ``AgentTurnStarted``, the deferred calls of ``AgentTurnCompleted``,
the reason and time of ``AgentTurnInterrupted``; so an id-only fold decodes no
body but a ``LinkAdded`` event's.

A blob value (table ``blobs``) is ``refcount u32 | flags u8 | dict u32 | crc u32
| data``, with the CRC over ``data`` + key.
"""

from __future__ import annotations

import functools
import hashlib
import struct
import threading
import types
import typing
import zlib
from typing import Any, Final, NoReturn

import msgspec
import zstandard

from tplog.errors import CorruptionError, InvalidInputError, LimitExceededError
from tplog.events import (
    EVENT_TYPES,
    KIND_CODE,
    AgentTurnCompleted,
    AgentTurnInterrupted,
    AgentTurnStarted,
    Event,
    MessageRecorded,
    UserTurnSubmitted,
)
from tplog.protocol import model as m

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

FORMAT: Final = 3  #: the format written
FORMATS: Final = (1, 2, 3)  #: the formats read
SPLIT_CRC: Final = (2, 3)  #: the formats with a header CRC and a body CRC
#: By format: the CRC-32 a header CRC starts from. Format 3's covers its format byte
#: (2 and 3 share a layout, so a flipped format bit must not read as the other).
HEADER_CRC_SEED: Final = (0, 0, 0, zlib.crc32(b"\x03"))
F_COMPRESSED: Final = 1
F_BLOB: Final = 2
PREFIX = struct.Struct(">BBIIH")  # format, flags, dict id, crc, header length
PREFIX_SIZE: Final = PREFIX.size  # 12
_PREFIX_UNPACK = PREFIX.unpack_from
_ALL_FLAGS: Final = F_COMPRESSED | F_BLOB
_SEED3: Final = HEADER_CRC_SEED[3]
_crc32 = zlib.crc32
_BLOB_PREFIX = struct.Struct(">IBII")  # refcount, flags, dict id, crc
_U32 = struct.Struct(">I")

MSG_KIND: Final = KIND_CODE[MessageRecorded]
ABORTED: Final = "aborted"
V3_SPAWN: Final = "thread.spawn"


class Facts(msgspec.Struct, array_like=True, frozen=True, omit_defaults=True, gc=False):
    """What the id-only projections need from a message, readable without the body."""

    message_type: str
    calls: list[tuple[str, str]] = []  # (tool_call_id, tool_name)
    returns: list[tuple[str, str]] = []  # (tool_call_id, status); retry prompts say "retry"
    finish_reason: str | None = None
    event_type: str | None = None
    spawned: list[str] = []


class TurnFacts(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """What the id-only folds need from an agent-turn boundary (format 3 headers):
    the agent of ``AgentTurnStarted``, the deferred calls of ``AgentTurnCompleted``,
    the interruption of ``AgentTurnInterrupted`` (the other fields keep their defaults)."""

    agent_id: str = ""
    deferred: dict[str, str] = {}
    reason: str = ""
    interrupted_at: str = ""


class Header(msgspec.Struct, array_like=True, frozen=True, gc=False):
    kind: int
    event_id: str
    recorded_at: int
    facts: Facts | None = None
    turn: TurnFacts | None = None  # format 3, agent-turn boundaries only


class _Header4(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """The header every other event writes (no ``turn`` element: as format 2 wrote it)."""

    kind: int
    event_id: str
    recorded_at: int
    facts: Facts | None


class Limits(msgspec.Struct, frozen=True, kw_only=True):
    """Configurable input limits; going over one is a :class:`LimitExceededError`.

    ``max_event_bytes``: msgpack size of one event. ``max_parts``: parts in one
    message or user turn. ``max_decompressed_bytes``: the most a stored value may
    inflate to (a zstd bomb is refused). ``blob_threshold``: events whose body is
    larger are stored once in ``blobs``, content-addressed and shared.
    ``max_depth``: nesting depth of JSON values inside an event.
    """

    max_event_bytes: int = 16 << 20
    max_parts: int = 10_000
    max_depth: int = 64
    max_decompressed_bytes: int = 64 << 20
    blob_threshold: int = 256 << 10
    compress_min_bytes: int = 96
    level: int = 3


def _returns(parts: list[Any]) -> list[tuple[str, str]]:
    returns: list[tuple[str, str]] = []
    for p in parts:
        if isinstance(p, m.ToolReturnPart):
            returns.append((p.tool_call_id, p.status))
        elif isinstance(p, m.RetryPromptPart) and isinstance(p.tool_call_id, str):
            returns.append((p.tool_call_id, "retry"))
    return returns


def facts_of(event: Event) -> Facts | None:
    """What the id-only folds need from ``event``, or ``None`` when it holds nothing
    they use (no tool calls or returns, no spawned thread, not an aborted response):
    a rebuild recognises such a message by its header's bytes and skips it."""
    if isinstance(event, UserTurnSubmitted):
        returns = _returns(event.turn.parts)
        return Facts(message_type="user", returns=returns) if returns else None
    if not isinstance(event, MessageRecorded):
        return None
    msg = event.message
    if isinstance(msg, m.SystemMessage):
        spawned: list[str] = []
        if msg.event_type in (m.THREAD_SPAWN, V3_SPAWN) and isinstance(msg.event_data, dict):
            sid = msg.event_data.get("spawned_thread_id", msg.event_data.get("thread_id"))
            if isinstance(sid, str):
                spawned.append(sid)
        return Facts(message_type="system", event_type=msg.event_type, spawned=spawned) if spawned else None
    calls = [(p.tool_call_id, p.tool_name) for p in msg.parts if isinstance(p, m.ToolCallPart)]
    returns = _returns(msg.parts)
    fr = msg.finish_reason if isinstance(msg.finish_reason, str) else None
    if fr is None and isinstance(msg.extra.get("stop_reason"), str):
        fr = msg.extra["stop_reason"]  # the peer design's stop_reason, kept as an extension field
    mt = "request" if isinstance(msg, m.RequestMessage) else "response"
    if not calls and not returns and not (mt == "response" and fr == ABORTED):
        return None
    return Facts(message_type=mt, calls=calls, returns=returns, finish_reason=fr)


def turn_facts_of(event: Event) -> TurnFacts | None:
    """What the id-only folds read from an agent-turn boundary, or ``None`` for any other event."""
    if isinstance(event, AgentTurnStarted):
        return TurnFacts(agent_id=event.agent_id)
    if isinstance(event, AgentTurnCompleted):
        return TurnFacts(deferred=event.deferred)
    if isinstance(event, AgentTurnInterrupted):
        return TurnFacts(reason=event.interruption.reason, interrupted_at=event.interruption.interrupted_at)
    return None


_LEAVES: Final = frozenset({str, int, float, bool, type(None), bytes})
_SCALAR_TYPES: Final = frozenset({str, int, float, bool, type(None), bytes, msgspec.UnsetType})
_NESTED_FIELDS: dict[type, tuple[str, ...]] = {}


def _nested_fields(cls: type) -> tuple[str, ...]:
    """The fields of Struct ``cls`` whose declared type can hold a container (a
    Struct, list, dict or ``Any``); scalar-typed fields cannot nest. A value whose
    type breaks its declaration is refused later by the schema check."""
    names = _NESTED_FIELDS.get(cls)
    if names is None:
        out = []
        for f in msgspec.structs.fields(cls):
            t = f.type
            origin = typing.get_origin(t)
            args: tuple[Any, ...] = typing.get_args(t) if origin in (typing.Union, types.UnionType) else (t,)
            if not all(a in _SCALAR_TYPES or typing.get_origin(a) is typing.Literal for a in args):
                out.append(f.name)
        names = _NESTED_FIELDS[cls] = tuple(out)
    return names


#: Every byte value except msgpack's container headers (fixmap, fixarray, array 16/32,
#: map 16/32): ``len(body.translate(None, _NOT_CONTAINER_BYTES))`` bounds how many
#: containers, and so how deep a nesting, ``body`` can hold.
_NOT_CONTAINER_BYTES: Final = bytes(b for b in range(256) if not (0x80 <= b <= 0x9F or 0xDC <= b <= 0xDF))


def _depth_ok(obj: Any, limit: int) -> bool:
    """Whether ``obj`` nests at most ``limit`` deep. Runs on every append: only
    containers are pushed, leaves are skipped by their exact type."""
    stack = [(obj, 1)]
    pop, push = stack.pop, stack.append
    leaves = _LEAVES
    struct = msgspec.Struct
    while stack:
        o, d = pop()
        if d > limit:
            return False
        t = type(o)
        if t is dict:
            vals: Any = o.values()
        elif t is list or t is tuple:
            vals = o
        elif isinstance(o, struct):
            vals = [getattr(o, f) for f in _nested_fields(t)]
        elif isinstance(o, (dict, list, tuple)):  # subclasses
            vals = o.values() if isinstance(o, dict) else o
        else:
            continue
        d += 1
        for v in vals:
            if type(v) not in leaves:
                push((v, d))
    return True


def _raw_mirror(tp: Any, made: dict[type, Any]) -> Any:
    """``tp`` with every ``Any`` replaced by :class:`msgspec.Raw` and every Struct by a
    mirror of it (same tag, field names, encoded names, defaults and field order):
    decoding into it checks every typed field exactly as decoding into ``tp`` does,
    but leaves ``Any`` values (tool arguments and returns, metadata: the bulk of a
    large event) as undecoded slices instead of building them."""
    if tp is Any:
        return msgspec.Raw
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        if tp in made:
            if made[tp] is None:
                raise TypeError(f"{tp.__name__} refers to itself")  # not in tplog's schema
            return made[tp]
        made[tp] = None
        cfg = tp.__struct_config__
        fields = []
        for f in msgspec.structs.fields(tp):
            default = (msgspec.field(default=f.default, name=f.encode_name) if f.default is not msgspec.NODEFAULT
                       else msgspec.field(default_factory=f.default_factory, name=f.encode_name)
                       if f.default_factory is not msgspec.NODEFAULT else msgspec.field(name=f.encode_name))
            fields.append((f.name, _raw_mirror(f.type, made), default))
        mirror = msgspec.defstruct(tp.__name__, fields, kw_only=True, tag=cfg.tag, tag_field=cfg.tag_field,
                                   array_like=cfg.array_like, forbid_unknown_fields=cfg.forbid_unknown_fields)
        made[tp] = mirror
        return mirror
    origin = typing.get_origin(tp)
    if origin is None or origin is typing.Literal:
        return tp
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return typing.Annotated[(_raw_mirror(args[0], made), *tp.__metadata__)]
    if origin in (typing.Union, types.UnionType) and Any in args:
        return msgspec.Raw  # a union with Any takes anything (msgspec ignores Raw in a union)
    new = tuple(a if a is Ellipsis else _raw_mirror(a, made) for a in args)
    if origin in (typing.Union, types.UnionType):
        return typing.Union[new]
    return origin[new if len(new) > 1 else new[0]]


@functools.cache
def _check_type() -> Any:
    """The append's schema-check type: ``Event`` mirrored by :func:`_raw_mirror` (built once)."""
    return _raw_mirror(Event, {})


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
        self._check_dec: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(_check_type())
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
        if len(body.translate(None, _NOT_CONTAINER_BYTES)) > self.limits.max_depth + 8 and not _depth_ok(
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
            blob_value = _BLOB_PREFIX.pack(1, bflags, bdict, crc) + stored
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
            if len(blob) < _BLOB_PREFIX.size:
                raise CorruptionError("the event's shared blob is truncated", thread_id=where[0], seq=where[1])
            _, flags, dict_id, crc = _BLOB_PREFIX.unpack_from(blob)
            stored = memoryview(blob)[_BLOB_PREFIX.size :]
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


#: Added to :func:`peek_header`'s answer when the header carries facts.
PEEK_FACTS: Final = 0x100


def peek_header(value: bytes) -> int:
    """A stored value's kind (format 2 or 3), read off its header's bytes without
    decoding it, plus :data:`PEEK_FACTS` when the header carries facts; ``-1`` when
    the header is not the plain ``[kind, event_id, recorded_at, facts]`` form (a turn
    boundary's 5 elements): decode it with :meth:`Codec.header` then. Verify the
    header CRC first. One int, not a tuple: a rebuild asks this of every event.

    The header is a msgpack fixarray(4) (0x94) whose first element is the kind (a
    positive fixint); ``facts`` is its last element, nil (0xC0) when absent (an
    encoded Facts ends with its ``spawned`` list, never with 0xC0)."""
    if value[12] != 0x94:
        return -1
    return value[13] | (PEEK_FACTS if value[11 + ((value[10] << 8) | value[11])] != 0xC0 else 0)


def verified_header_end(key: bytes, value: bytes) -> int:
    """Where a format-3 value's header ends (its slice is ``value[PREFIX_SIZE:end]``), if
    the prefix and the header CRC check out; 0 if not: an older format or damage, which
    :meth:`Codec.check_header` tells apart (raising the typed error). The rebuild's fast
    path, asked of every event of the log, so it allocates nothing."""
    if len(value) < PREFIX_SIZE + 4:
        return 0
    fmt, flags, _, crc, hlen = _PREFIX_UNPACK(value)
    end: int = PREFIX_SIZE + hlen
    if fmt == 3 and flags <= _ALL_FLAGS and end <= len(value) - 4 and _crc32(key, _crc32(value[10:end], _SEED3)) == crc:
        return end
    return 0


def header_end(value: bytes) -> int:
    """Where a (well-formed) value's header ends."""
    return PREFIX_SIZE + ((value[10] << 8) | value[11])


def value_ok(key: bytes, value: bytes, mv: memoryview) -> bool:
    """Whether ``value`` (``mv`` = its memoryview) is well-formed and matches its CRCs."""
    if len(value) < PREFIX_SIZE or value[1] & ~(F_COMPRESSED | F_BLOB):
        return False
    crc32 = zlib.crc32
    if value[0] in SPLIT_CRC:
        end = 12 + ((value[10] << 8) | value[11])
        n = len(value) - 4
        return (end <= n
                and crc32(key, crc32(mv[10:end], HEADER_CRC_SEED[value[0]])) == int.from_bytes(value[6:10], "big")
                and crc32(key, crc32(mv[end:n])) == int.from_bytes(value[n:], "big"))
    return value[0] == 1 and crc32(key, crc32(mv[10:])) == int.from_bytes(value[6:10], "big")


def stored_body(value: bytes) -> memoryview:
    """The stored body of a well-formed value (compressed, raw, or a blob's SHA-256): a view."""
    start = PREFIX_SIZE + ((value[10] << 8) | value[11])
    return memoryview(value)[start : len(value) - 4] if value[0] in SPLIT_CRC else memoryview(value)[start:]


def blob_refcount(blob: bytes) -> int:
    return int(_BLOB_PREFIX.unpack_from(blob)[0])


def blob_with_refcount(blob: bytes, refcount: int) -> bytes:
    return struct.pack(">I", refcount) + blob[4:]
