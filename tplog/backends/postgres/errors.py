"""Errors only the PostgreSQL backend raises (all ``tplog.TplogError`` subclasses)."""

from __future__ import annotations

from tplog.errors import ConflictError, StorageError

__all__ = ["LockTimeoutError", "PostgresUnavailableError", "SchemaError"]


class PostgresUnavailableError(StorageError):
    """The server could not be reached, refused the login, or dropped the connection.

    ``retryable``: a retry may succeed (the server restarting, a lost connection) —
    for an append, resend the same event ids: one that did commit comes back as its
    original result. False for a refused login."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class LockTimeoutError(ConflictError):
    """An append waited longer than ``lock_timeout`` for a thread's or a log's lock; nothing was written."""


class SchemaError(StorageError):
    """The database has no tplog schema, or one of another version: the message names the command that fixes it."""
