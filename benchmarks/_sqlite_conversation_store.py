"""A Pydantic AI ``ConversationStore`` on SQLite, written as a user following Pydantic AI's docs would.

The five primitives of :class:`pydantic_ai.conversation_store.ConversationStore`, mirroring
``InMemoryConversationStore``: one row per entry (its message as ``ModelMessagesTypeAdapter``
JSON), one row per record, WAL with ``synchronous=FULL`` (an acknowledged save survives a power
cut, as tplog's durable default does). ``read_history`` is overridden with one recursive query,
as the base class's docstring advises a database backend to do. One connection, used from
``asyncio.to_thread`` under a lock (a sqlite3 connection is not safe to share between threads
at once); each write is one ``BEGIN IMMEDIATE`` transaction, so a conflict leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from collections.abc import Sequence
from typing import Any

import pydantic
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
)
from pydantic_ai.messages import ModelMessagesTypeAdapter

_RECORD = pydantic.TypeAdapter(ConversationRecord)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (id TEXT PRIMARY KEY, parent_id TEXT, message BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS records (
    conversation_id TEXT PRIMARY KEY, scope TEXT, updated_at TEXT NOT NULL, revision TEXT NOT NULL,
    head_id TEXT, branches TEXT NOT NULL, record BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS records_by_time ON records (updated_at);
"""


class SQLiteConversationStore(ConversationStore):
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()

    def close(self) -> None:
        self._db.close()

    async def _run(self, fn: Any, *args: Any) -> Any:
        def locked() -> Any:
            with self._lock:
                return fn(*args)

        return await asyncio.to_thread(locked)

    # ------------------------------------------------------------------ records

    def _sync_read_record(self, conversation_id: str) -> ConversationRecord | None:
        row = self._db.execute("SELECT record FROM records WHERE conversation_id = ?", (conversation_id,)).fetchone()
        return None if row is None else _RECORD.validate_json(row[0])

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        return await self._run(self._sync_read_record, conversation_id)  # type: ignore[no-any-return]

    def _sync_read_records(self, scope: str | None, limit: int | None) -> list[ConversationRecord]:
        sql = "SELECT record FROM records" + (" WHERE scope = ?" if scope is not None else "")
        sql += " ORDER BY updated_at DESC" + (f" LIMIT {int(limit)}" if limit is not None else "")
        rows = self._db.execute(sql, (scope,) if scope is not None else ()).fetchall()
        return [_RECORD.validate_json(r[0]) for r in rows]

    async def read_records(self, *, scope: str | None = None, limit: int | None = None) -> Sequence[ConversationRecord]:
        return await self._run(self._sync_read_records, scope, limit)  # type: ignore[no-any-return]

    def _sync_write_record(
        self, record: ConversationRecord, new_entries: list[ConversationEntry], expected_revision: str | None
    ) -> None:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            cid = record.conversation_id
            row = db.execute("SELECT revision FROM records WHERE conversation_id = ?", (cid,)).fetchone()
            if (row[0] if row is not None else None) != expected_revision:
                raise ConversationConflict(record.conversation_id)
            new_ids = {e.id for e in new_entries}
            if (
                record.head_id is not None
                and record.head_id not in new_ids
                and db.execute("SELECT 1 FROM entries WHERE id = ?", (record.head_id,)).fetchone() is None
            ):
                raise ConversationConflict(record.conversation_id)
            db.executemany(
                "INSERT INTO entries (id, parent_id, message) VALUES (?, ?, ?)",
                [(e.id, e.parent_id, ModelMessagesTypeAdapter.dump_json([e.message])) for e in new_entries],
            )
            db.execute(
                "INSERT OR REPLACE INTO records VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    record.conversation_id,
                    record.scope,
                    record.updated_at.isoformat(),
                    record.revision,
                    record.head_id,
                    pydantic.TypeAdapter(list[str]).dump_json(record.branches).decode(),
                    _RECORD.dump_json(record),
                ),
            )
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        await self._run(self._sync_write_record, record, list(new_entries), expected_revision)

    def _sync_delete_record(self, conversation_id: str, expected_revision: str) -> None:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            cur = db.execute(
                "DELETE FROM records WHERE conversation_id = ? AND revision = ?", (conversation_id, expected_revision)
            )
            if cur.rowcount != 1:
                raise ConversationConflict(conversation_id)
            # As InMemoryConversationStore does: drop the entries no remaining record's history reaches.
            db.execute(
                """WITH RECURSIVE reach(id) AS (
                       SELECT head_id FROM records WHERE head_id IS NOT NULL
                       UNION SELECT j.value FROM records, json_each(records.branches) AS j
                       UNION SELECT e.parent_id FROM entries e JOIN reach r ON e.id = r.id
                             WHERE e.parent_id IS NOT NULL)
                   DELETE FROM entries WHERE id NOT IN (SELECT id FROM reach)"""
            )
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        await self._run(self._sync_delete_record, conversation_id, expected_revision)

    # ------------------------------------------------------------------ entries

    @staticmethod
    def _entry(row: Any) -> ConversationEntry:
        return ConversationEntry(id=row[0], parent_id=row[1], message=ModelMessagesTypeAdapter.validate_json(row[2])[0])

    def _sync_read_entry(self, entry_id: str) -> ConversationEntry:
        row = self._db.execute("SELECT id, parent_id, message FROM entries WHERE id = ?", (entry_id,)).fetchone()
        if row is None:
            raise KeyError(entry_id)
        return self._entry(row)

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        return await self._run(self._sync_read_entry, entry_id)  # type: ignore[no-any-return]

    def _sync_read_history(self, head_id: str | None, limit: int | None) -> list[ConversationEntry]:
        if head_id is None or limit == 0:
            return []
        rows = self._db.execute(
            """WITH RECURSIVE chain(id, parent_id, message, n) AS (
                   SELECT id, parent_id, message, 1 FROM entries WHERE id = ?
                   UNION ALL SELECT e.id, e.parent_id, e.message, c.n + 1 FROM entries e
                       JOIN chain c ON e.id = c.parent_id WHERE ? IS NULL OR c.n < ?)
               SELECT id, parent_id, message FROM chain""",
            (head_id, limit, limit),
        ).fetchall()
        # A missing entry (released by a concurrent delete) ends the chain early: LookupError, as
        # the base class's read_entry walk would raise.
        if not rows or (rows[-1][1] is not None and (limit is None or len(rows) < limit)):
            raise KeyError(head_id)
        return [self._entry(r) for r in reversed(rows)]

    async def read_history(self, head_id: str | None, *, limit: int | None = None) -> list[ConversationEntry]:
        return await self._run(self._sync_read_history, head_id, limit)  # type: ignore[no-any-return]
