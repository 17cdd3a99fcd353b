"""tplog: an event-sourced, append-only LMDB log store for ThreadProtocol threads.

Read top-down: the protocol model (``_model``) and its lossless JSON
(``_json``), validation, canonical hash and versions; the history events a
thread's log is made of (``_events``); the value codec (``_codec``, no lmdb);
the storage engine (``_storage``, the only lmdb importer); the store with
group commit (``_store``); the folds that answer questions (``_fold``); the
CLI (``_cli``). Integrations live in ``tplog.integrations`` (optional extras).
"""

from tplog._canonical import canonical_form, canonical_json, hash_json, thread_hash
from tplog._codec import Limits
from tplog._errors import *  # noqa: F403
from tplog._errors import __all__ as _errors_all
from tplog._events import *  # noqa: F403
from tplog._events import __all__ as _events_all
from tplog._fold import FoldResult, InterruptState, PendingCall, PendingState, TurnInterrupt
from tplog._json import from_builtins, from_json, to_builtins, to_json
from tplog._model import *  # noqa: F403
from tplog._model import __all__ as _model_all
from tplog._store import ANY, EXISTS, NO_STREAM, AppendResult, AsyncStore, Store, ThreadHead, ThreadPage
from tplog._validate import Finding, ValidationReport, validate, validate_json
from tplog._versions import downgrade, upgrade

__version__ = "0.1.0"
__all__ = sorted(
    {
        *_errors_all,
        *_events_all,
        *_model_all,
        "ANY",
        "AppendResult",
        "AsyncStore",
        "EXISTS",
        "Finding",
        "FoldResult",
        "InterruptState",
        "Limits",
        "NO_STREAM",
        "PendingCall",
        "PendingState",
        "Store",
        "ThreadHead",
        "ThreadPage",
        "TurnInterrupt",
        "ValidationReport",
        "canonical_form",
        "canonical_json",
        "downgrade",
        "from_builtins",
        "from_json",
        "hash_json",
        "thread_hash",
        "to_builtins",
        "to_json",
        "upgrade",
        "validate",
        "validate_json",
    }
)
