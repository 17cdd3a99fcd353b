"""tplog: an event-sourced, append-only LMDB log store for ThreadProtocol threads."""

from tplog._errors import *  # noqa: F403
from tplog._errors import __all__ as _errors_all
from tplog._events import *  # noqa: F403
from tplog._events import __all__ as _events_all
from tplog._json import from_builtins, from_json, to_builtins, to_json
from tplog._model import *  # noqa: F403
from tplog._model import __all__ as _model_all

__version__ = "0.1.0"
__all__ = sorted({*_errors_all, *_events_all, *_model_all, "from_builtins", "from_json", "to_builtins", "to_json"})
