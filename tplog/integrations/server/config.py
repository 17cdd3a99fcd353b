"""The server's configuration: the environment variables :func:`app_from_env` reads, the option
types, the error it raises at start and the append-timings hook.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Final, Literal

from tplog.errors import TplogError

__all__ = [
    "AppendTimings", "ENV_AFTER_STOP", "ENV_AGENTS", "ENV_DURABILITY", "ENV_METRICS", "ENV_ON_DISCONNECT",
    "ENV_RESUMABLE", "ENV_SHUTDOWN_GRACE", "ENV_STORE", "ENV_TP_CHUNKS", "OnDisconnect", "ServeError",
    "TpChunks",
]


log = logging.getLogger("tplog.server")

#: Store directory for :func:`app_from_env` (required).
ENV_STORE: Final = "TPLOG_SERVER_STORE"
#: ``module:attribute`` naming a dict of agents, or a callable returning one (default: :func:`demo_agents`).
ENV_AGENTS: Final = "TPLOG_SERVER_AGENTS"
#: ``finish`` (default) or ``interrupt``.
ENV_ON_DISCONNECT: Final = "TPLOG_SERVER_ON_DISCONNECT"
#: ``durable`` (default) or ``relaxed``.
ENV_DURABILITY: Final = "TPLOG_SERVER_DURABILITY"
#: A path prefix: each worker writes its append timings to ``PREFIX.PID.json`` at shutdown.
ENV_METRICS: Final = "TPLOG_SERVER_METRICS"
#: Seconds runs get to finish at shutdown before they are interrupted (default 30).
ENV_SHUTDOWN_GRACE: Final = "TPLOG_SERVER_SHUTDOWN_GRACE"
#: ``transient`` (default) or ``parts``: how the ``data-tp-*`` chunks are sent (see :func:`create_app`).
ENV_TP_CHUNKS: Final = "TPLOG_SERVER_TP_CHUNKS"
#: ``interrupt`` (default), ``wait`` or ``reject``: a new message after a stop (see :func:`create_app`).
ENV_AFTER_STOP: Final = "TPLOG_SERVER_AFTER_STOP"
#: ``1`` (default) or ``0``: streams resumable from any worker (see :func:`create_app`).
ENV_RESUMABLE: Final = "TPLOG_SERVER_RESUMABLE"

OnDisconnect = Literal["finish", "interrupt"]
#: ``transient``: ``data-tp-*`` chunks are sent ``"transient": true`` (the client does not keep them in
#: its messages); ``parts``: kept as data parts of the assistant message (tplog before issue 28).
TpChunks = Literal["transient", "parts"]

# --------------------------------------------------------------------------- errors


class ServeError(TplogError):
    """The server cannot start: an agents spec that does not load, an address it cannot listen on."""


# --------------------------------------------------------------------------- metrics


class AppendTimings:
    """The metrics hook: how long each ``AsyncStore.append`` took, and per chat request the
    total time appends added to it (appends are awaited inline by the recorder).

    Pass one to :func:`create_app` (``metrics=``); or set ``TPLOG_SERVER_METRICS`` for
    :func:`app_from_env`, which dumps each worker's timings to ``PREFIX.PID.json``.
    """

    def __init__(self) -> None:
        self.appends: list[tuple[str, int, float]] = []  # (thread_id, events, seconds) per append
        self.requests: list[tuple[str, float, int, float]] = []  # (thread_id, append s, appends, request s)

    def append(self, thread_id: str, n_events: int, seconds: float) -> None:
        self.appends.append((thread_id, n_events, seconds))

    def request(self, thread_id: str, append_seconds: float, appends: int, seconds: float) -> None:
        self.requests.append((thread_id, append_seconds, appends, seconds))

    def to_dict(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "appends": self.appends, "requests": self.requests}

    def dump(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.to_dict(), f)
