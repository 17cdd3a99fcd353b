"""The memory backend's backup format: JSON lines a :class:`~tplog.backends.memory.MemoryRecorder`
writes with ``backup`` and reads back with ``restore`` (moved verbatim from memory.py, issue #39)."""

from __future__ import annotations

from typing import Final, Union

import msgspec

from tplog.backends.contract import ThreadHead
from tplog.codec import Facts
from tplog.projections.fold import ThreadState

__all__ = ["BACKUP_FILE", "BACKUP_FORMAT", "BackupEvent", "BackupRows", "BackupStart", "BackupThread", "backup_line",
           "decodes"]

#: The file :meth:`MemoryRecorder.backup` writes (JSON lines: a start line, one line per
#: thread with its head and events, bodies as base64 msgpack, then the projection rows).
BACKUP_FILE: Final = "memory.jsonl"
BACKUP_FORMAT: Final = "tplog-memory-backup-1"


class BackupStart(msgspec.Struct, tag="start"):
    format: str
    logs: int
    last: list[int]
    tracking: dict[str, tuple[str, int, list[int]]]


class BackupEvent(msgspec.Struct, array_like=True):
    seq: int
    position: int
    event_id: str
    recorded_at: int
    kind: int
    facts: Facts | None
    body: bytes  # the event's msgpack, as the codec writes it
    size: int


class BackupThread(msgspec.Struct, tag="thread"):
    key: bytes
    head: ThreadHead
    events: list[BackupEvent]


class BackupRows(msgspec.Struct, tag="rows"):
    links: list[tuple[bytes, bytes, bytes, int, str]]
    children: list[tuple[bytes, bytes, str, int]]
    states: list[tuple[bytes, ThreadState]]


backup_line = msgspec.json.Decoder(Union[BackupStart, BackupThread, BackupRows])


def decodes(line: bytes) -> bool:
    try:
        backup_line.decode(line)
    except msgspec.MsgspecError:
        return False
    return True
