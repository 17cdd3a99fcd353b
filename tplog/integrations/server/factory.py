"""Start the server: :func:`app_from_env` (the factory uvicorn workers import) and :func:`serve`.
"""

from __future__ import annotations

import importlib
import logging
import os
import socket
from collections.abc import Mapping
from typing import Any

from starlette.applications import Starlette

from tplog.integrations.scheduled_prune import ENV_PRUNE, PruneSchedule, schedule_from_env
from tplog.integrations.server.app import create_app
from tplog.integrations.server.config import (
    ENV_AFTER_STOP,
    ENV_AGENTS,
    ENV_DURABILITY,
    ENV_METRICS,
    ENV_ON_DISCONNECT,
    ENV_RESUMABLE,
    ENV_SHUTDOWN_GRACE,
    ENV_STORE,
    ENV_TP_CHUNKS,
    AppendTimings,
    OnDisconnect,
    ServeError,
)
from tplog.integrations.server.demo_agents import demo_agents
from tplog.integrations.server.limits import ENV_LIMITS, H11_PROTOCOL, ServerLimits, limits_from_env
from tplog.integrations.server.security import Security, check_bind
from tplog.logs import log_config
from tplog.store import Store

__all__ = ["app_from_env", "serve"]


log = logging.getLogger("tplog.server")

# --------------------------------------------------------------------------- factory + serve


def _load_agents(spec: str | None) -> dict[str, Any]:
    """The agents ``spec`` (``module:attribute``) names; :class:`ServeError` naming the spec if it does not load."""
    if not spec:
        try:
            return demo_agents()
        except ImportError as exc:
            raise ServeError(f"the demo agent needs Pydantic AI: pip install 'tplog[server]' ({exc})") from exc
    mod, _, attr = spec.partition(":")
    if not mod or not attr:
        raise ServeError(f"agents {spec!r}: expected MODULE:ATTRIBUTE, e.g. myapp.agents:AGENTS")
    try:
        module = importlib.import_module(mod)
    except ModuleNotFoundError as exc:
        where = "" if exc.name == mod else f" (while importing {mod})"
        raise ServeError(f"agents {spec!r}: no module named {exc.name!r}{where}") from exc
    except Exception as exc:
        raise ServeError(f"agents {spec!r}: importing {mod} raised {type(exc).__name__}: {exc}") from exc
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise ServeError(f"agents {spec!r}: module {mod} has no attribute {attr!r}") from None
    if callable(obj) and not isinstance(obj, Mapping):
        try:
            agents = obj()
        except Exception as exc:
            raise ServeError(f"agents {spec!r}: calling {attr}() raised {type(exc).__name__}: {exc}") from exc
    else:
        agents = obj
    if not isinstance(agents, Mapping) or not agents:
        raise ServeError(f"agents {spec!r}: not a non-empty dict of agents (name -> Pydantic AI agent)")
    return dict(agents)


def _grace(value: str | None) -> float:
    if value is None or value == "":
        return 30.0
    try:
        grace = float(value)
    except ValueError:
        grace = -1.0
    if not grace >= 0:
        raise ServeError(f"the shutdown grace must be a number of seconds ≥ 0, not {value!r}")
    return grace


def app_from_env(agents: Mapping[str, Any] | None = None) -> Starlette:
    """The app factory for ``uvicorn --factory tplog.integrations.server:app_from_env`` (one per worker).

    ``TPLOG_SERVER_STORE`` (required): the store directory. ``TPLOG_SERVER_AGENTS``:
    ``module:attr`` of a dict of agents or a callable returning one (default: the demo agent;
    ``agents`` given here wins). ``TPLOG_SERVER_ON_DISCONNECT``: ``finish``/``interrupt``.
    ``TPLOG_SERVER_DURABILITY``: ``durable``/``relaxed``. ``TPLOG_SERVER_SHUTDOWN_GRACE``: seconds
    (default 30). ``TPLOG_SERVER_METRICS``: path prefix for per-worker append timings.
    ``TPLOG_SERVER_TP_CHUNKS``: ``transient`` (default) / ``parts``. ``TPLOG_SERVER_AFTER_STOP``:
    ``interrupt`` (default) / ``wait`` / ``reject``. ``TPLOG_SERVER_RESUMABLE``: ``1`` (default) / ``0``.
    ``TPLOG_SERVER_PRUNE``: a retention schedule (:mod:`tplog.integrations.scheduled_prune`).
    ``TPLOG_SERVER_AUTH_*``, ``…_TRUSTED_USER_HEADER``, ``…_ALLOWED_HOSTS``/``ORIGINS``: :meth:`Security.from_env`.
    ``TPLOG_SERVER_LIMITS``: the resource limits, a JSON object of
    :class:`~tplog.integrations.server.limits.ServerLimits` fields.
    """
    path = os.environ.get(ENV_STORE)
    if not path:
        raise RuntimeError(f"set {ENV_STORE} to the store directory")
    metrics_path = os.environ.get(ENV_METRICS) or None
    on_disc = os.environ.get(ENV_ON_DISCONNECT, "finish")
    if on_disc not in ("finish", "interrupt"):
        raise RuntimeError(f"{ENV_ON_DISCONNECT} must be finish or interrupt, not {on_disc!r}")
    tp_chunks = os.environ.get(ENV_TP_CHUNKS) or "transient"
    if tp_chunks not in ("transient", "parts"):
        raise RuntimeError(f"{ENV_TP_CHUNKS} must be transient or parts, not {tp_chunks!r}")
    after_stop = os.environ.get(ENV_AFTER_STOP) or "interrupt"
    if after_stop not in ("interrupt", "wait", "reject"):
        raise RuntimeError(f"{ENV_AFTER_STOP} must be interrupt, wait or reject, not {after_stop!r}")
    resumable = os.environ.get(ENV_RESUMABLE) or "1"
    if resumable not in ("0", "1"):
        raise RuntimeError(f"{ENV_RESUMABLE} must be 1 or 0, not {resumable!r}")
    return create_app(
        path,
        agents if agents is not None else _load_agents(os.environ.get(ENV_AGENTS)),
        on_disconnect=on_disc,  # type: ignore[arg-type]
        shutdown_grace=_grace(os.environ.get(ENV_SHUTDOWN_GRACE)),
        store_options={"durability": os.environ.get(ENV_DURABILITY, "durable")},
        metrics=AppendTimings() if metrics_path else None,
        metrics_path=metrics_path,
        tp_chunks=tp_chunks,  # type: ignore[arg-type]
        after_stop=after_stop,  # type: ignore[arg-type]
        resumable=resumable == "1",
        prune=schedule_from_env(os.environ.get(ENV_PRUNE)),
        security=Security.from_env(),
        limits=limits_from_env(os.environ.get(ENV_LIMITS)),
    )


def _check_address(host: str, port: int) -> None:
    """Bind the address once, as uvicorn will, so that a port in use is a one-line error, not a log record."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise ServeError(f"cannot listen on {host}:{port}: {getattr(exc, 'strerror', None) or exc}") from exc
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            sock.bind(addr)
        except OSError as exc:
            import errno

            why = "the port is already in use" if exc.errno == errno.EADDRINUSE else exc.strerror or str(exc)
            raise ServeError(f"cannot listen on {host}:{port}: {why}") from exc


def serve(
    store_path: str | os.PathLike[str],
    host: str = "127.0.0.1",
    port: int = 8000,
    workers: int = 1,
    *,
    agents: str | None = None,
    on_disconnect: OnDisconnect = "finish",
    durability: str = "durable",
    log_level: str = "info",
    shutdown_grace: float = 30.0,
    log_format: str = "text",
    prune: PruneSchedule | None = None,
    security: Security | None = None,
    allow_unauthenticated: bool = False,
    limits: ServerLimits | None = None,
) -> None:
    """Serve ``store_path`` with uvicorn (``tplog serve``); blocks until stopped (SIGINT/SIGTERM).

    ``agents``: ``module:attr`` naming the agents (default: :func:`demo_agents`); loaded here
    first, so a spec that does not load, or an address in use, is a :class:`ServeError` before
    anything starts. One worker runs in this process; with more, every worker builds the app
    with :func:`app_from_env` and opens the store after it started. At shutdown running runs get
    ``shutdown_grace`` seconds, then are recorded as interrupted (``server_shutdown``).
    ``log_format="json"``: every log line (tplog's and uvicorn's, access lines included) is one
    JSON object naming the thread it is about (:mod:`tplog.logs`); ``"text"``: uvicorn's default.
    ``prune``: apply a retention policy on a schedule (:mod:`tplog.integrations.scheduled_prune`).
    ``security``: a token, users, allowed Hosts and Origins (:class:`Security`); a ``host`` beyond
    loopback without authentication is a :class:`ServeError` unless ``allow_unauthenticated``.
    ``limits``: the resource limits (:class:`~tplog.integrations.server.limits.ServerLimits`);
    its ``header_timeout`` is the deadline uvicorn's protocol gives a request's headers.
    """
    import uvicorn

    if log_format not in ("text", "json"):
        raise ServeError(f"the log format must be 'text' or 'json', not {log_format!r}")

    grace = _grace(str(shutdown_grace))
    path = os.fspath(store_path)
    if "://" not in path or path.startswith("lmdb://"):  # a server's URL (postgresql://…) stays as it is
        path = os.path.abspath(path.removeprefix("lmdb://"))
    security = security or Security()
    loaded = _load_agents(agents)
    _check_address(host, port)
    check_bind(host, security, allow_unauthenticated)
    Store(path, durability=durability).close()  # create it once, before the workers race to
    os.environ[ENV_STORE] = path
    os.environ[ENV_ON_DISCONNECT] = on_disconnect
    os.environ[ENV_DURABILITY] = durability
    os.environ[ENV_SHUTDOWN_GRACE] = repr(grace)
    if agents:
        os.environ[ENV_AGENTS] = agents
    os.environ.update(security.to_env())  # the workers' app_from_env reads them back
    if prune is not None:
        prune.check()
        os.environ[ENV_PRUNE] = prune.to_env()
    os.environ[ENV_LIMITS] = (limits or ServerLimits()).to_env()  # the workers' app and protocol read it
    # text: uvicorn's own default configuration (passing log_config=None would turn it off)
    logging_options: dict[str, Any] = {} if log_format == "text" else {"log_config": log_config(log_format, log_level)}
    uvicorn.run(
        app_from_env(loaded) if workers == 1 else "tplog.integrations.server:app_from_env",
        factory=workers != 1,
        host=host,
        port=port,
        workers=workers,
        log_level=log_level,
        **logging_options,
        # Runs end within the grace (the app starts it at the signal); this is only the
        # backstop for a response that ignores its cancellation.
        timeout_graceful_shutdown=int(grace) + 15,
        # Idle keep-alive connections are closed by the server only after the clients and
        # proxies in front would have (httpx 5 s, nginx 60-75 s): a server closing first
        # races with a new request sent on that connection, which then fails before it
        # reaches the app (benchmarks.server_load: 0-2 of 400 chats per run at uvicorn's
        # default 5 s, none in 5 runs at 60 s).
        timeout_keep_alive=75,
        http=H11_PROTOCOL,  # h11 with a deadline on a request's headers (limits.header_timeout)
    )
