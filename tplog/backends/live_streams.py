"""The live table (:mod:`tplog.backends.live`) of a store's backend: which implementation, one per backend."""

from __future__ import annotations

import threading
import weakref
from typing import Any

from tplog.backends.live import LiveStreams, MemoryLive

__all__ = ["live_streams"]

_LIVE: weakref.WeakKeyDictionary[Any, LiveStreams] = weakref.WeakKeyDictionary()
_LIVE_LOCK = threading.Lock()


def live_streams(backend: Any) -> LiveStreams | None:
    """The live table of a store's backend (``Store.backend``), one per backend (views of a store
    share it); None for a backend without one."""
    with _LIVE_LOCK:
        live = _LIVE.get(backend)
        if live is not None:
            return live
        name = type(backend).__name__
        if name == "MemoryRecorder":
            live = MemoryLive()
        elif name == "LmdbRecorder":
            from tplog.backends.lmdb.live import open_live
            from tplog.errors import StorageError

            try:
                live = open_live(backend.engine.path)
            except StorageError:  # e.g. a read-only store directory: no live table
                return None
        elif name == "PostgresRecorder":
            from tplog.backends.postgres.live import PostgresLive

            live = PostgresLive(backend)
        else:
            return None
        _LIVE[backend] = live
        return live
