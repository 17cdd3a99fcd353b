"""The errors tplog raises.

Every error is a subclass of :class:`TplogError`, and also of the builtin that
best matches its cause, so ``except ValueError`` keeps working for callers who
do not know tplog::

    TplogError
    ├── InvalidInputError (ValueError)      bad JSON, wrong types, wrong shape
    │   ├── ValidationError                 a document broke protocol rules
    │   ├── ConfirmationRequiredError       removing every thread, asked without confirmation
    │   ├── LimitExceededError              an event, part count, depth or
    │   │                                   decompressed size over its limit
    │   ├── InvalidEventError               an event that does not fit the
    │   │                                   thread's state (no open turn, ...)
    │   ├── CanonicalizationError           no canonical JSON for it (protocol.canonical)
    │   │   ├── NonFiniteNumberError        NaN or ±Infinity
    │   │   └── IntegerDomainError          an integer beyond ±(2**53-1)
    │   ├── ImportFormatError               an import that is not its format (integrations.importers)
    │   │   ├── UnknownFormatError          no format recognised
    │   │   ├── PydanticAIImportError       a bad Pydantic AI message history
    │   │   └── VercelImportError           bad AI SDK UI messages or stream
    │   ├── SearchQueryError                a search query FTS5 cannot parse, empty or too long (search)
    │   └── VercelStreamError               a bad AI SDK stream (integrations.vercel.chunks)
    │       ├── MalformedChunkError         a chunk that does not parse
    │       ├── ChunkOrderError             a chunk out of its order
    │       └── UnknownToolCallError        a result for a call the stream never made
    ├── ConflictError                       the log is not as the caller expected
    │   ├── WrongExpectedVersionError       expected_version did not match
    │   ├── IdempotencyError                an event id reused for other content
    │   ├── PipelineError                   a pipelined append failed or came after one that did
    │   ├── HasForksError                   a thread forks still read from cannot go
    │   ├── CopyConflictError               the copy's destination holds other content (copy)
    │   ├── BranchConflictError             a chat's branch ids taken (integrations.branches)
    │   └── LockTimeoutError                PostgreSQL's lock wait ran out (backends.postgres.errors)
    ├── NotFoundError (LookupError)         no such thread
    ├── ThreadDeletedError                  the thread was deleted (tombstone)
    ├── CorruptionError                     a stored value failed its check
    ├── StoreClosedError (RuntimeError)     used after close() or across fork()
    ├── ReadOnlyError                       a write on a read-only store
    ├── StorageFullError (OSError)          the disk itself is full
    ├── StorageError                        any other failure of the engine
    │   ├── PostgresUnavailableError        unreachable, login refused (backends.postgres.errors)
    │   └── SchemaError                     no tplog schema, or another version's
    ├── ProjectionError                     a projection is missing or stale
    │   ├── RebuildRequiredError            its fold code changed: run rebuild
    │   └── RebuildInProgressError          another rebuild of it is running
    └── ServeError                          `tplog serve` cannot start as asked (integrations.server.config)

Errors defined beside the code that raises them say their module in brackets; every one is
in this tree (tests/test_errors_tree.py checks it).

Errors raised by a dependency (lmdb, msgspec, zstandard) are translated at the
boundary, with the original chained as ``__cause__``.
"""

from __future__ import annotations

__all__ = [
    "ConfirmationRequiredError",
    "ConflictError",
    "CorruptionError",
    "HasForksError",
    "IdempotencyError",
    "InvalidEventError",
    "InvalidInputError",
    "LimitExceededError",
    "NotFoundError",
    "PipelineError",
    "ProjectionError",
    "ReadOnlyError",
    "RebuildInProgressError",
    "RebuildRequiredError",
    "StorageError",
    "StorageFullError",
    "StoreClosedError",
    "ThreadDeletedError",
    "TplogError",
    "ValidationError",
    "WrongExpectedVersionError",
]

from typing import Any


class TplogError(Exception):
    """Root of every error tplog raises."""


class InvalidInputError(TplogError, ValueError):
    """Input that tplog cannot accept; nothing was written.

    ``path`` is the JSON path of the offending value (``$.turns[2].parts[0]``)
    when the input was a document, else ``None``.
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message if path is None else f"{message} (at {path})")
        self.path = path


class ValidationError(InvalidInputError):
    """A document broke the protocol's rules. ``report`` lists every finding."""

    def __init__(self, message: str, *, report: Any = None) -> None:
        super().__init__(message)
        self.report = report


class ConfirmationRequiredError(InvalidInputError):
    """An operation that would remove every thread was asked without explicit confirmation."""


class LimitExceededError(InvalidInputError):
    """An input went over one of the store's configured limits."""


class InvalidEventError(InvalidInputError):
    """An event that does not fit the thread's current state.

    When the event breaks a validation rule (``tplog.validate``'s rule ids),
    ``rule`` names it, ``thread_id`` and ``seq`` the event (``seq`` it would
    have had) and ``path`` the offending value, as a JSON path in the event
    (``$.message.parts[0].status``); otherwise they are ``None``.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        rule: str | None = None,
        thread_id: str | None = None,
        seq: int | None = None,
    ) -> None:
        super().__init__(message, path=path)
        self.rule = rule
        self.thread_id = thread_id
        self.seq = seq


class ConflictError(TplogError):
    """The log is not in the state the caller expected; nothing was written."""


class WrongExpectedVersionError(ConflictError):
    """``expected_version`` did not match the thread's current version."""

    def __init__(self, thread_id: str, expected: object, actual: int) -> None:
        super().__init__(
            f"thread {thread_id}: expected version {expected!r}, but the thread is at "
            f"version {actual}; re-read the thread and retry with expected_version={actual}"
        )
        self.thread_id = thread_id
        self.expected = expected
        self.actual = actual


class IdempotencyError(ConflictError):
    """An event id that is already stored was re-used for different events."""


class PipelineError(ConflictError):
    """An earlier append of a :class:`~tplog.pipeline.Pipeline` failed (its error is
    the ``__cause__``); nothing the pipeline queued after it was written."""


class HasForksError(ConflictError):
    """A thread whose events live forks read cannot be deleted alone (``cascade=True``
    deletes the forks too). ``forks`` names them."""

    def __init__(self, message: str, forks: list[str]) -> None:
        super().__init__(message)
        self.forks = forks


class NotFoundError(TplogError, LookupError):
    """The thread (or other named object) does not exist."""


class ThreadDeletedError(TplogError):
    """The thread was deleted; its id is kept as a tombstone and not reused."""


class CorruptionError(TplogError):
    """A stored value failed its integrity check or could not be decoded.

    ``thread_id`` and ``seq`` name the damaged event when known.
    """

    def __init__(self, message: str, *, thread_id: str | None = None, seq: int | None = None) -> None:
        where = ""
        if thread_id is not None:
            where = f" (thread {thread_id}" + (f", seq {seq})" if seq is not None else ")")
        super().__init__(message + where)
        self.thread_id = thread_id
        self.seq = seq


class StoreClosedError(TplogError, RuntimeError):
    """The store was closed, or this process forked after opening it."""


class ReadOnlyError(TplogError):
    """A write was attempted on a store opened read-only (or on a read-only disk)."""


class StorageFullError(TplogError, OSError):
    """The disk holding the store is full. Nothing of the failed write was kept."""


class StorageError(TplogError):
    """The storage engine failed for a reason not covered by another error."""


class ProjectionError(TplogError):
    """A projection is missing or cannot answer."""


class RebuildRequiredError(ProjectionError):
    """A projection's fold code changed since it was built: run ``tplog rebuild``."""


class RebuildInProgressError(ProjectionError):
    """Another rebuild of the projection is running (in this process or another one
    on this host), or took over this one; nothing of this rebuild was swapped in."""
