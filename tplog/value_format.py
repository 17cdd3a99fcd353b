"""The stored event value's bytes: its layout, its header and the facts the id-only folds read
from it, and the readers that work on the bytes without a :class:`~tplog.codec.Codec`.

A stored event value (format 3, written by this version) is::

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

import struct
import zlib
from typing import Any, Final

import msgspec

from tplog.events import (
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
    "BLOB_PREFIX",
    "FORMAT",
    "FORMATS",
    "F_BLOB",
    "F_COMPRESSED",
    "Facts",
    "HEADER_CRC_SEED",
    "Header",
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
BLOB_PREFIX = struct.Struct(">IBII")  # refcount, flags, dict id, crc

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
    return int(BLOB_PREFIX.unpack_from(blob)[0])


def blob_with_refcount(blob: bytes, refcount: int) -> bytes:
    return struct.pack(">I", refcount) + blob[4:]
