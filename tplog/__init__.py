"""tplog: an event-sourced, append-only LMDB log store for ThreadProtocol threads.

Read top-down: the protocol model (``_model``) and its lossless JSON
(``_json``), validation, canonical hash and versions; the history events a
thread's log is made of (``_events``); the value codec (``_codec``, no lmdb);
the storage engine (``_storage``, the only lmdb importer); the store with
group commit (``_store``); the folds that answer questions (``_fold``); the
CLI (``_cli``). Integrations live in ``tplog.integrations`` (optional extras).
"""

from tplog._canonical import canonical_form as canonical_form
from tplog._canonical import canonical_json as canonical_json
from tplog._canonical import hash_json as hash_json
from tplog._canonical import thread_hash as thread_hash
from tplog._codec import Limits as Limits
from tplog._errors import *  # noqa: F403
from tplog._errors import __all__ as _errors_all
from tplog._events import *  # noqa: F403
from tplog._events import __all__ as _events_all
from tplog._fold import FoldResult as FoldResult
from tplog._fold import InterruptState as InterruptState
from tplog._fold import PendingCall as PendingCall
from tplog._fold import PendingState as PendingState
from tplog._fold import TurnInterrupt as TurnInterrupt
from tplog._json import from_builtins as from_builtins
from tplog._json import from_json as from_json
from tplog._json import to_builtins as to_builtins
from tplog._json import to_json as to_json
from tplog._model import *  # noqa: F403
from tplog._model import __all__ as _model_all
from tplog._retire import PruneReport as PruneReport
from tplog._retire import RetentionPolicy as RetentionPolicy
from tplog._store import ANY as ANY
from tplog._store import EXISTS as EXISTS
from tplog._store import NO_STREAM as NO_STREAM
from tplog._store import AppendResult as AppendResult
from tplog._store import AsyncStore as AsyncStore
from tplog._store import Store as Store
from tplog._store import ThreadHead as ThreadHead
from tplog._store import ThreadPage as ThreadPage
from tplog._validate import Finding as Finding
from tplog._validate import ValidationReport as ValidationReport
from tplog._validate import thread_id_for as thread_id_for
from tplog._validate import validate as validate
from tplog._validate import validate_json as validate_json
from tplog._versions import downgrade as downgrade
from tplog._versions import upgrade as upgrade

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
        "PruneReport",
        "RetentionPolicy",
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
        "thread_id_for",
        "to_builtins",
        "to_json",
        "upgrade",
        "validate",
        "validate_json",
    }
)
