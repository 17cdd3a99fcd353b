"""tplog: an event-sourced, append-only log store for ThreadProtocol threads.

The top level holds what a user imports first: the stores, the history events one appends, the
errors' root and the errors callers catch most, the id rule, and the validation and hash of a
thread. Everything else has one public home (msgspec keeps its top level as small): the protocol
model in ``tplog.protocol``; JSON, canonical form, validation and versions in
``tplog.protocol.json`` / ``.canonical`` / ``.validate`` / ``.versions``; every error in
``tplog.errors``; every event in ``tplog.events``; ``tplog.store``, ``tplog.retire``,
``tplog.limits``, ``tplog.pipeline``, ``tplog.projections.fold``. The names this module used to
export from those homes still resolve here, with a ``DeprecationWarning`` naming the home.

Read the package bottom-up: ``tplog.protocol`` (the ThreadProtocol model, its lossless JSON,
validation, canonical hash, versions and the append-time rules); ``tplog.events`` (the history
events a thread's log is made of); ``tplog.codec`` (the stored value format);
``tplog.projections`` (pure folds from events to answers); ``tplog.backends`` (the recorder
contract and its engines: memory, LMDB, PostgreSQL); ``tplog.store`` and ``tplog.aio`` (the
facades users call); ``tplog.cli``. Integrations live in ``tplog.integrations`` (optional
extras) and import only public names.
"""

import importlib
import warnings
from typing import Any

from tplog import protocol
from tplog.aio import AsyncStore
from tplog.errors import (
    ConflictError,
    InvalidEventError,
    InvalidInputError,
    NotFoundError,
    TplogError,
    WrongExpectedVersionError,
)
from tplog.events import (
    AgentRegistered,
    AgentTurnCompleted,
    AgentTurnInterrupted,
    AgentTurnStarted,
    LinkAdded,
    MessageRecorded,
    ThreadInfoChanged,
    ThreadStarted,
    UserTurnSubmitted,
)
from tplog.protocol.canonical import thread_hash
from tplog.protocol.validate import thread_id_for, validate
from tplog.retire import RetentionPolicy
from tplog.store import Store

__version__ = "0.1.0"
__all__ = [
    "AgentRegistered",
    "AgentTurnCompleted",
    "AgentTurnInterrupted",
    "AgentTurnStarted",
    "AsyncStore",
    "ConflictError",
    "InvalidEventError",
    "InvalidInputError",
    "LinkAdded",
    "MessageRecorded",
    "NotFoundError",
    "RetentionPolicy",
    "Store",
    "ThreadInfoChanged",
    "ThreadStarted",
    "TplogError",
    "UserTurnSubmitted",
    "WrongExpectedVersionError",
    "thread_hash",
    "thread_id_for",
    "validate",
]

_ERRORS = ("ConfirmationRequiredError", "CorruptionError", "HasForksError", "IdempotencyError", "LimitExceededError",
           "PipelineError", "ProjectionError", "ReadOnlyError", "RebuildInProgressError", "RebuildRequiredError",
           "StorageError", "StorageFullError", "StoreClosedError", "ThreadDeletedError", "ValidationError")
#: Every name this module exported before the trim (issue 39) and no longer does -> its home.
MOVED: dict[str, str] = {
    **dict.fromkeys(protocol.__all__, "tplog.protocol"),
    **dict.fromkeys(_ERRORS, "tplog.errors"),
    **dict.fromkeys(("EVENT_TYPES", "Event", "RecordedEvent", "ThreadDeleted"), "tplog.events"),
    **dict.fromkeys(("ANY", "EXISTS", "NO_STREAM", "AppendResult", "ThreadHead", "ThreadPage"), "tplog.store"),
    **dict.fromkeys(("FoldResult", "InterruptState", "PendingCall", "PendingState", "TurnInterrupt"),
                    "tplog.projections.fold"),
    **dict.fromkeys(("canonical_form", "canonical_json", "hash_json"), "tplog.protocol.canonical"),
    **dict.fromkeys(("from_builtins", "from_json", "to_builtins", "to_json"), "tplog.protocol.json"),
    **dict.fromkeys(("Finding", "ValidationReport", "validate_json"), "tplog.protocol.validate"),
    **dict.fromkeys(("downgrade", "upgrade"), "tplog.protocol.versions"),
    "Limits": "tplog.limits",
    "Pipeline": "tplog.pipeline",
    "PruneReport": "tplog.retire",
}


def __getattr__(name: str) -> Any:
    """A name moved off the top level: still there, with a warning that names its home."""
    home = MOVED.get(name)
    if home is None:
        raise AttributeError(f"module 'tplog' has no attribute {name!r}")
    warnings.warn(f"tplog.{name} is deprecated: import it from {home} (from {home} import {name})",
                  DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(home), name)
