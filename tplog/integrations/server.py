"""Serve a tplog store over HTTP: Vercel AI SDK chat, thread reads, live tails (``tplog[server]``).

Why Starlette: Pydantic AI's own Vercel AI adapter (``VercelAIAdapter.dispatch_request``,
``UIEventStream.streaming_response``) is built on Starlette requests and
responses, so Starlette is already what the chat endpoint's stream machinery
speaks; it is a small ASGI toolkit (no ORM, no DI framework) and runs under any
ASGI server. Uvicorn runs it (``serve()`` / ``tplog serve``).

Endpoints
---------

``POST /api/chat``
    A Vercel AI SDK UI request (``{"trigger": "submit-message", "id": CHAT_ID,
    "messages": [...]}``; the chat id names the thread: a UUID is the thread id,
    any other id its :func:`~tplog.integrations.vercel.thread_id_for_chat` UUIDv5,
    kept in the new thread's metadata as ``"vercel:chat_id"``; every endpoint
    takes either). Runs the agent (the
    body's ``"agent"`` field or ``?agent=`` picks one of ``agents``; default: the
    first) on the *recorded* history of the thread (the store is the source of
    truth: only the request's last message is read -- the user's new message,
    or, SDK v6, its ``approval-responded`` tool parts and the client-side tool
    results of calls waiting for one, ``output-available``/``output-error``
    tool parts from ``addToolOutput``) and streams the UI
    message stream with tplog's ``data-tp-*`` chunks (see
    :mod:`tplog.integrations.vercel`) while recording the run message by
    message. A new thread is created (``ThreadStarted`` + ``AgentRegistered``)
    in the same atomic append as the first turn. ``If-Match: N`` makes the
    request conditional on the thread's version (``0``: the thread must not
    exist). The response starts only once the turn's first append committed, so
    a conflict is a clean ``409`` with nothing written. AI SDK v6 ``regenerate-message`` and
    edit-and-resend (``messageId`` naming the user message that ends ``messages``) answer on a
    new branch, a fork of the chat's thread; the chat id names its newest branch
    (:mod:`tplog.integrations.branches`).

    A client that goes away does not lose the run. ``on_disconnect="finish"``
    (default): the run goes on in the server and is recorded to its end;
    ``"interrupt"``: the run is cancelled and recorded as an interrupted turn
    (v0.0.4 ``AgentTurnInterrupted``, reason ``disconnect_reason``, default
    ``network_failure`` -- what a client assembling the broken stream records
    too); the complete cycles before it are kept. Runs still going at shutdown
    get ``shutdown_grace`` seconds, counted from the SIGTERM/SIGINT, then are
    interrupted (reason ``server_shutdown``) and their streams end.

``GET /api/chat/{id}/stream``
    What ``useChat({resume: true})`` calls on mount and after a dropped connection: 204 when
    the thread has no open turn; else the open turn's UI chunks from its ``start``, then live
    to its end, from the store's live table (beside the log), so any worker or server on the
    store answers (:mod:`tplog.integrations.resume`). A new message while a turn runs with its
    client gone (the user pressed stop) interrupts that run (``user_cancelled``) or waits for it
    (``after_stop``); while its client still reads it, it is a 409 ``turn_open``.

``GET /api/chat/{id}/messages``
    The thread as the AI SDK's UI messages (a JSON array; ``[]`` for a chat not started yet),
    with the ids the chat showed: what a reloaded ``useChat`` page starts from
    (:mod:`tplog.integrations.ui_messages`).

``POST /threads/{id}/approvals``
    ``{"approvals": {CALL_ID: true | false | {"approved": false, "reason": "..."}},
    "results": {CALL_ID: value}}``: decisions for every deferred tool call the
    thread's last turn ended on (see ``/pending``); continues the run, streamed
    like ``/api/chat``.

``GET /threads`` (``?limit=&after=&include_deleted=1``, filters ``status`` (repeatable), ``agent``,
``title``, ``meta=KEY=VALUE`` (repeatable), ``created_after`` … ``updated_before``, ``roots=1``,
``has_children=1|0``: as ``Store.threads``), ``GET /threads/{id}``
(ThreadProtocol v0.0.4 JSON), ``/threads/{id}/turns``, ``/pending``,
``/interrupts``, ``/children`` (``?limit=&after=&recursive=1&max_depth=``),
``/links`` (``?incoming=1&relation=``); ``POST /threads/{id}/fork`` (``{"at": SEQ, "thread_id": NEW,
"reason": ...}`` → 201 with the append result: ``Store.fork``)
    Read-only views, JSON. ``/children`` and ``/links?incoming=1`` also answer for
    a thread stored elsewhere that a stored thread links to; as ``Store.children``,
    a deleted thread is nobody's child.

``GET /threads/{id}/events``
    The thread's events as Server-Sent Events, then a live tail: ``id:`` is the
    event's seq, ``event:`` its type, ``data:`` ``{seq, position, event_id,
    recorded_at, type, event}``. Reconnect with ``Last-Event-ID`` (or
    ``?after=SEQ``) to resume exactly after the last event seen. New events are
    found through one watcher thread per worker blocked in
    :meth:`Store.wait_for_position` (woken at once by appends of this worker,
    polling the file for appends by other workers/processes). ``?follow=0``
    returns what is there and ends. A deleted thread's tail ends with its
    tombstone.

Errors are JSON ``{"error": {"status", "code", "message", ...}}``: malformed
JSON 400, a body of the wrong shape 422 (naming the field), unknown thread 404,
deleted thread 410, version/turn conflicts 409, body too large 413. A rejected
request writes nothing.

The store is opened per worker process, in the ASGI lifespan (after uvicorn
forked/spawned the worker): LMDB handles must not cross ``fork()``. With
several workers uvicorn needs an import string: :func:`app_from_env` is that
factory (``TPLOG_SERVER_STORE`` etc., see below).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import json
import logging
import os
import re
import signal
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Final, Literal

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tplog.backends.live import LiveStreams, MemoryLive
from tplog.backends.live_streams import live_streams
from tplog.errors import (
    InvalidEventError,
    InvalidInputError,
    NotFoundError,
    ThreadDeletedError,
    TplogError,
)
from tplog.events import (
    AgentRegistered,
    AgentTurnInterrupted,
    AgentTurnStarted,
    Event,
    RecordedEvent,
    ThreadDeleted,
    ThreadStarted,
    UserTurnSubmitted,
)
from tplog.integrations import branches
from tplog.integrations.browser import browser_routes
from tplog.integrations.http import SSE_HEADERS, UI_STREAM_HEADERS, HTTPError, http_error
from tplog.integrations.http import SSEResponse as _SSEResponse
from tplog.integrations.http import error_response as _error_response
from tplog.integrations.http import header_safe as _header_safe
from tplog.integrations.resume import AfterStop, LiveWriter, resume_response, settle_open_turn, sweeper
from tplog.integrations.scheduled_prune import ENV_PRUNE, PruneSchedule, prune_loop, schedule_from_env
from tplog.integrations.vercel import CHAT_ID_KEY, MESSAGE_ID_KEY, client_tool_results, thread_id_for_chat
from tplog.logs import log_config, set_thread_id
from tplog.protocol import model as m
from tplog.protocol.json import to_builtins, to_json
from tplog.store import NO_STREAM, AsyncStore, ExpectedVersion, Store

__all__ = [
    "ENV_AFTER_STOP",
    "ENV_AGENTS",
    "ENV_DURABILITY",
    "ENV_METRICS",
    "ENV_ON_DISCONNECT",
    "ENV_RESUMABLE",
    "ENV_SHUTDOWN_GRACE",
    "ENV_STORE",
    "ENV_TP_CHUNKS",
    "AppendTimings",
    "ServeError",
    "app_from_env",
    "create_app",
    "demo_agents",
    "serve",
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
_TAIL_PAGE: Final = 500  # events read per step of a tail


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


# --------------------------------------------------------------------------- state


class _Watcher:
    """One thread per worker: ``Store.wait_for_position`` in a loop; wakes the asyncio tails."""

    def __init__(self, store: Store, loop: asyncio.AbstractEventLoop, poll: float) -> None:
        self.store = store
        self.loop = loop
        self.poll = poll
        # Several logs (PostgreSQL, P > 1): the sum of their positions grows with every commit.
        self._logs = store.backend.logs
        self.pos = store.last_position if self._logs == 1 else sum(store.backend.positions())
        self._event = asyncio.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tplog-tail-watcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self._logs == 1:
                    pos = self.store.wait_for_position(self.pos + 1, timeout=0.5, poll=self.poll)
                else:
                    cursor = self.store.backend.positions()
                    pos = sum(cursor) if sum(cursor) > self.pos else sum(self.store.backend.wait(cursor, 0.5))
            except Exception:  # the store closed under us: stop
                return
            if pos > self.pos:
                self.pos = pos
                with contextlib.suppress(RuntimeError):  # loop closed
                    self.loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        ev, self._event = self._event, asyncio.Event()
        ev.set()

    async def wait(self, seen: int, timeout: float) -> int:
        """Return once the log is past ``seen`` (or after ``timeout``): the newest position known."""
        if self.pos > seen:
            return self.pos
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), timeout)
        return self.pos

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


class _Writer:
    """The recorder's ``append``: optimistic concurrency on the thread's version, the new
    thread's first events prepended to the first append, timings, reason overrides."""

    def __init__(self, server: _Server, thread_id: str, expected: int | str, prefix: list[Event]) -> None:
        self.server = server
        self.astore = server.astore
        self.thread_id = thread_id
        self.expected: ExpectedVersion = expected  # type: ignore[assignment]
        self.prefix = prefix
        self.first: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.first_failed = False
        self.reason_override: str | None = None
        self.ui_ids: tuple[str | None, str | None] = (None, None)  # the user and assistant UI message ids
        self.turn_seq: int | None = None  # the seq of the run's AgentTurnStarted
        self.live: LiveWriter | None = None
        self.append_seconds = 0.0
        self.appends = 0

    async def __call__(self, events: list[Event]) -> Any:
        if self.first_failed:  # the turn never opened: record nothing more of this run
            raise InvalidEventError(f"thread {self.thread_id}: the run's first append failed; nothing recorded")
        evs = list(events)
        if self.prefix:
            evs = self.prefix + evs
        if self.reason_override is not None:
            evs = [_with_reason(e, self.reason_override) for e in evs]
        t0 = time.perf_counter()
        fut = asyncio.ensure_future(self.astore.append(self.thread_id, evs, expected_version=self.expected))
        cancelled: asyncio.CancelledError | None = None
        try:
            try:
                res = await asyncio.shield(fut)
            except asyncio.CancelledError as exc:  # the append goes on: wait for it, then re-raise
                cancelled = exc
                res = await fut
        except BaseException as exc:
            if self.server.prom is not None:
                self.server.prom.append(len(evs), time.perf_counter() - t0, ok=False)
            if not self.first.done():
                self.first_failed = True
                self.first.set_exception(exc)
                self.first.exception()  # retrieved: no "never retrieved" warning
            raise
        finally:
            dt = time.perf_counter() - t0
            self.append_seconds += dt
            self.appends += 1
            if self.server.metrics is not None:
                self.server.metrics.append(self.thread_id, len(evs), dt)
        if self.server.prom is not None:
            self.server.prom.append(len(evs), dt, ok=True)
        self.prefix = []
        self.expected = res.last_seq
        for i, e in enumerate(evs):
            if isinstance(e, AgentTurnStarted):
                self.turn_seq = res.first_seq + i
                if self.live is not None and self.live.task is None:
                    self.live.start(self.turn_seq)  # the turn is open: its stream becomes resumable
        if not self.first.done():
            self.first.set_result(res)
        if cancelled is not None:
            raise cancelled
        return res


def _with_reason(ev: Event, reason: str) -> Event:
    if isinstance(ev, AgentTurnInterrupted) and ev.interruption.reason == "user_cancelled":
        return msgspec.structs.replace(ev, interruption=msgspec.structs.replace(ev.interruption, reason=reason))
    return ev


def _with_ui_id(ev: Event, user_id: str | None, assistant_id: str | None) -> Event:
    """The AI SDK UI message ids kept with the turns (``vercel:message_id``), so that ``/turns``, a
    resumed stream and a reloaded chat agree on them."""
    if isinstance(ev, UserTurnSubmitted) and user_id is not None:
        return msgspec.structs.replace(
            ev, turn=msgspec.structs.replace(ev.turn, extra={**ev.turn.extra, MESSAGE_ID_KEY: user_id})
        )
    if isinstance(ev, AgentTurnStarted) and assistant_id is not None:
        return msgspec.structs.replace(ev, extra={**ev.extra, MESSAGE_ID_KEY: assistant_id})
    return ev


@functools.cache
def _recorder_class(base: type[Any]) -> type[Any]:
    class _Recorder(base):  # type: ignore[misc]
        """Interruption reasons set by the server (disconnect, shutdown) apply to what the run's listeners
        see too, so the stream's ``data-tp-turn_end`` tells the client what the thread records."""

        async def emit(self, events: list[Event]) -> None:
            reason = self._append.reason_override
            events = [_with_ui_id(e, *self._append.ui_ids) for e in events]
            await super().emit(events if reason is None else [_with_reason(e, reason) for e in events])

    return _Recorder


class _Run:
    """One agent run, decoupled from the HTTP response that streams it."""

    def __init__(self, writer: _Writer) -> None:
        from pydantic_ai import CancellationToken

        self.writer = writer
        self.token = CancellationToken()  # stops the run inside Pydantic AI: its stream ends with `abort`
        self.queue: asyncio.Queue[str | None] = asyncio.Queue()
        self.attached = True
        self.task: asyncio.Task[None] | None = None
        self.started = time.perf_counter()
        self.live: LiveWriter | None = None

    def stop(self) -> None:
        """Stop the run as a user would (recorded ``user_cancelled``): a new message came after a stop."""
        self.token.cancel()


class _Server:
    def __init__(
        self,
        store: str | os.PathLike[str] | Store | AsyncStore,
        agents: Mapping[str, Any],
        *,
        on_disconnect: OnDisconnect,
        disconnect_reason: str,
        shutdown_grace: float,
        store_options: Mapping[str, Any],
        sdk_version: int,
        tail_poll: float,
        heartbeat: float,
        max_body: int,
        metrics: AppendTimings | None,
        metrics_path: str | None,
        tp_chunks: TpChunks = "transient",
        after_stop: AfterStop = "interrupt",
        after_stop_wait: float = 30.0,
        live_flush: float = 0.05,
        resumable: bool = True,
        prune: PruneSchedule | None = None,
    ) -> None:
        if on_disconnect not in ("finish", "interrupt"):
            raise ValueError(f"on_disconnect must be 'finish' or 'interrupt', not {on_disconnect!r}")
        if tp_chunks not in ("transient", "parts"):
            raise ValueError(f"tp_chunks must be 'transient' or 'parts', not {tp_chunks!r}")
        if after_stop not in ("interrupt", "wait", "reject"):
            raise ValueError(f"after_stop must be 'interrupt', 'wait' or 'reject', not {after_stop!r}")
        if not after_stop_wait >= 0 or not live_flush >= 0:
            raise ValueError("after_stop_wait and live_flush must be ≥ 0 seconds")
        if not agents:
            raise ValueError("create_app needs at least one agent")
        self.store_arg = store
        self.history_cache: Any = None  # a pydantic_ai.HistoryCache, made on the first model call
        self.agents = dict(agents)
        self.default_agent = next(iter(self.agents))
        self.on_disconnect = on_disconnect
        self.disconnect_reason = disconnect_reason
        self.shutdown_grace = shutdown_grace
        self.store_options = dict(store_options)
        self.sdk_version = sdk_version
        self.tail_poll = tail_poll
        self.heartbeat = heartbeat
        self.max_body = max_body
        self.metrics = metrics
        self.metrics_path = metrics_path
        self.tp_chunks = tp_chunks
        self.after_stop: AfterStop = after_stop
        self.after_stop_wait = after_stop_wait
        self.live_flush = live_flush
        self.resumable = resumable
        if prune is not None:
            prune.check()
        self.prune = prune
        self._live: LiveStreams | None = None
        self.live_tasks: set[asyncio.Task[None]] = set()
        self._astore: AsyncStore | None = None
        self._watcher: _Watcher | None = None
        self.runs: set[_Run] = set()
        self.closing = False
        self._draining: asyncio.Task[None] | None = None
        self.prom = _prometheus(self)

    @property
    def astore(self) -> AsyncStore:
        if self._astore is None:
            raise HTTPError(503, "unavailable", "the store is not open (lifespan not started)")
        return self._astore

    @property
    def store(self) -> Store:
        return self.astore.store

    @property
    def live(self) -> LiveStreams:
        """The store's live table (in-flight stream chunks); a process-local one when the backend
        has none (then only this worker can resume its streams)."""
        if self._live is None:
            self._live = live_streams(self.store.backend) or MemoryLive()
        return self._live

    @property
    def watcher(self) -> _Watcher:
        assert self._watcher is not None
        return self._watcher

    # -- lifespan

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        owned = False
        arg = self.store_arg
        if isinstance(arg, AsyncStore):
            self._astore = arg
        elif isinstance(arg, Store):
            self._astore = AsyncStore(arg)
        else:
            self._astore = await AsyncStore.open(arg, **self.store_options)
            owned = True
        self._watcher = _Watcher(self._astore.store, asyncio.get_running_loop(), self.tail_poll)
        self._watcher.start()
        if self.resumable:
            self.live_tasks.add(asyncio.get_running_loop().create_task(sweeper(self.live)))
        if self.prune is not None:  # cancelled at shutdown with the sweeper
            self.live_tasks.add(asyncio.get_running_loop().create_task(prune_loop(self._astore.store, self.prune)))
        unhook = self._hook_signals(asyncio.get_running_loop())
        try:
            yield
        finally:
            unhook()
            self.begin_shutdown()
            assert self._draining is not None
            await self._draining
            for t in list(self.live_tasks):  # the sweeper, and live writers that did not finish
                t.cancel()
            if self.live_tasks:
                await asyncio.wait(list(self.live_tasks), timeout=5)
            self._watcher.stop()
            if owned:
                await self._astore.close()
            if self.metrics is not None and self.metrics_path:
                self.metrics.dump(f"{self.metrics_path}.{os.getpid()}.json")
            if self.prom is not None:
                self.prom.process_exit()

    def _hook_signals(self, loop: asyncio.AbstractEventLoop) -> Callable[[], None]:
        """Start the shutdown grace when the ASGI server gets SIGTERM/SIGINT, not at the lifespan's end.

        The ASGI server (uvicorn) first waits for open responses to finish and only then runs the
        lifespan shutdown: a run streaming to its client would keep that wait going, and the grace
        would only start after it. So the handler the server installed is wrapped: the grace starts
        at the signal, and the streams end within it. Only in the main thread (where handlers live),
        and only over a Python handler (a server that handles the signal).
        """
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        hooked: dict[int, tuple[Callable[[int, Any], Any], Callable[[int, Any], Any]]] = {}

        def wrap(prev: Callable[[int, Any], Any]) -> Callable[[int, Any], Any]:
            def handler(signum: int, frame: Any) -> Any:
                with contextlib.suppress(RuntimeError):  # the loop is closed
                    loop.call_soon_threadsafe(self.begin_shutdown)
                return prev(signum, frame)

            return handler

        for sig in (signal.SIGTERM, signal.SIGINT):
            prev = signal.getsignal(sig)
            if callable(prev):
                mine = wrap(prev)
                signal.signal(sig, mine)
                hooked[sig] = (mine, prev)

        def unhook() -> None:
            for sig, (mine, prev) in hooked.items():
                if signal.getsignal(sig) is mine:
                    signal.signal(sig, prev)

        return unhook

    def begin_shutdown(self) -> None:
        """Refuse new runs, wake the event tails (they end), and give the running runs
        ``shutdown_grace`` seconds before they are interrupted (``server_shutdown``). Idempotent."""
        if self._draining is not None:
            return
        self.closing = True
        if self._watcher is not None:
            self._watcher._wake()
        self._draining = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        def live() -> list[_Run]:
            return [r for r in self.runs if r.task is not None and not r.task.done()]

        if runs := live():
            await asyncio.wait([r.task for r in runs if r.task is not None], timeout=self.shutdown_grace)
        for r in live():
            r.writer.reason_override = "server_shutdown"
            with contextlib.suppress(Exception):
                r.token.cancel()
        if runs := live():  # each records its interruption; its client gets the end of the turn and `abort`
            await asyncio.wait([r.task for r in runs if r.task is not None], timeout=5)
        for r in live():  # a run that did not stop on its token: cancel its task (the client's stream is cut)
            if r.task is not None:
                r.task.cancel()
        if runs := live():
            await asyncio.wait([r.task for r in runs if r.task is not None], timeout=10)

    # -- chat runs

    def agent(self, name: Any) -> tuple[str, Any]:
        if name is None:
            name = self.default_agent
        if not isinstance(name, str) or name not in self.agents:
            raise HTTPError(422, "unknown_agent", f"unknown agent {name!r}; this server has {sorted(self.agents)}")
        return name, self.agents[name]

    async def start_run(
        self,
        thread_id: str,
        agent_name: str,
        agent: Any,
        body: dict[str, Any],
        *,
        if_match: int | None,
        user_text: str | None,
        deferred: tuple[dict[str, Any], dict[str, Any]] | None,
        client_results: bool = False,
        metadata: dict[str, Any] | None = None,
        ui_ids: tuple[str | None, str | None] = (None, None),
    ) -> _Run:
        """Check the thread, start the run, wait for its first append. Raises HTTPError.

        ``client_results``: the results in ``deferred`` are the tool parts of a UI message, which
        also holds the results of calls answered long ago: only those of pending calls count.
        ``metadata``: the new thread's metadata (the AI SDK chat id). ``ui_ids``: the UI message ids
        of the user's message and of the assistant's (sent in ``start``), kept with the turns.
        """
        if self.closing:
            raise HTTPError(503, "shutting_down", "the server is shutting down")
        from tplog.integrations.pydantic_ai import HistoryCache, ThreadRecorder, history_from_thread

        store = self.store
        try:
            head = await asyncio.to_thread(store.head, thread_id)
        except NotFoundError:
            head = None
        if head is not None and head.status == "deleted":
            raise HTTPError(410, "thread_deleted", f"thread {thread_id} was deleted; its id cannot be reused")
        if head is not None and head.open_turn_agent is not None:  # e.g. the user pressed stop, then sent this
            head = await settle_open_turn(self, thread_id, head)
        version = head.version if head is not None else 0
        if if_match is not None and if_match != version:
            raise HTTPError(
                409,
                "version_conflict",
                f"thread {thread_id}: If-Match expected version {if_match}, but the thread is at version {version}",
                expected=if_match,
                actual=version,
            )
        prefix: list[Event] = []
        history: list[Any] | None = None
        now = _now()
        if head is None:
            title = (user_text or "").strip().splitlines()[0][:80] if (user_text or "").strip() else None
            prefix.append(
                ThreadStarted(
                    thread_id=thread_id,
                    created_at=now,
                    title=title if title else m.UNSET,
                    metadata=metadata if metadata else m.UNSET,
                )
            )
            registered: Mapping[str, Any] = {}
        else:
            thread = await asyncio.to_thread(store.thread, thread_id)
            if self.history_cache is None:  # converted messages kept: the next call converts only new ones
                self.history_cache = HistoryCache()
            history = history_from_thread(thread, cache=self.history_cache) or None
            registered = thread.agents
            waiting = await asyncio.to_thread(store.pending, thread_id)
            calls = [c for c in waiting.pending if c.state == "deferred"]
            if calls and deferred is None:
                raise HTTPError(
                    409,
                    "awaiting_tool_results",
                    f"thread {thread_id} waits for decisions on deferred tool calls "
                    f"{[c.tool_call_id for c in calls]}; send them (POST /threads/{{id}}/approvals, or the SDK's "
                    "tool approval responses / client-side tool results) before a new message",
                    pending=[{"tool_call_id": c.tool_call_id, "tool_name": c.tool_name, "kind": c.kind} for c in calls],
                )
            if deferred is not None and client_results:
                external = {c.tool_call_id for c in calls if c.kind != "approval"}
                deferred = (deferred[0], {k: v for k, v in deferred[1].items() if k in external})
            if deferred is not None:
                _check_decisions(thread_id, calls, *deferred)
        if head is None and deferred is not None:
            raise HTTPError(404, "not_found", f"thread {thread_id} does not exist")
        if agent_name not in registered:
            model = getattr(agent, "model", None)
            prefix.append(
                AgentRegistered(
                    agent=m.AgentConfig(
                        agent_id=agent_name,
                        agent_name=getattr(agent, "name", None) or agent_name,
                        model_name=getattr(model, "model_name", None) or m.UNSET,
                        provider_name=getattr(model, "system", None) or m.UNSET,
                        created_at=now,
                    )
                )
            )
        writer = _Writer(self, thread_id, version if head is not None else NO_STREAM, prefix)
        writer.ui_ids = ui_ids
        run = _Run(writer)
        if self.resumable:
            run.live = writer.live = LiveWriter(
                self.live, thread_id, interval=self.live_flush, on_stop=run.stop, tasks=self.live_tasks
            )
        recorder = _recorder_class(ThreadRecorder)(writer, thread_id)
        kwargs: dict[str, Any] = {"cancellation_token": run.token}
        if history:
            kwargs["message_history"] = history
        if deferred is not None:
            from pydantic_ai import DeferredToolResults, ToolDenied

            approvals: dict[str, Any] = {}
            for cid, dec in deferred[0].items():
                if dec is True or dec is False:
                    approvals[cid] = dec
                elif dec.get("approved"):
                    approvals[cid] = True
                else:
                    approvals[cid] = ToolDenied(dec["reason"]) if dec.get("reason") else False
            kwargs["deferred_tool_results"] = DeferredToolResults(approvals=approvals, calls=dict(deferred[1]))
        run.task = asyncio.get_running_loop().create_task(self._produce(run, recorder, agent, body, agent_name, kwargs))
        self.runs.add(run)
        run.task.add_done_callback(lambda _t: self.runs.discard(run))
        try:
            await asyncio.shield(writer.first)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            raise http_error(exc) from exc
        return run

    async def _produce(
        self, run: _Run, recorder: Any, agent: Any, body: dict[str, Any], agent_id: str, kwargs: dict[str, Any]
    ) -> None:
        from tplog.integrations.vercel import recorded_vercel_stream

        error: BaseException | None = None
        try:
            async for line in recorded_vercel_stream(
                recorder,
                agent,
                body,
                agent_id=agent_id,
                sdk_version=self.sdk_version,
                transient=self.tp_chunks == "transient",
                message_id=run.writer.ui_ids[1],
                **kwargs,
            ):
                if run.attached:
                    run.queue.put_nowait(line)
                if run.live is not None:
                    run.live.push(line)
        except asyncio.CancelledError as exc:  # interrupted by us (disconnect / shutdown): recorded
            error = exc
        except Exception as exc:  # model/tool error: recorded as interrupted, sent as an `error` chunk
            error = exc
            if run.writer.first.done() and not run.writer.first_failed:
                log.warning("run on thread %s ended with %s: %s", recorder.thread_id, type(exc).__name__, exc)
        finally:
            run.queue.put_nowait(None)
            if run.live is not None:
                run.live.close()
            w = run.writer
            if not w.first.done():
                w.first.set_exception(
                    error if isinstance(error, Exception) else RuntimeError("the run ended before recording anything")
                )
                w.first.exception()
            if self.metrics is not None and not w.first_failed:
                self.metrics.request(recorder.thread_id, w.append_seconds, w.appends, time.perf_counter() - run.started)

    def detach(self, run: _Run) -> None:
        """The client went away before the end of the stream."""
        if run.task is None or run.task.done():
            return
        run.attached = False
        if run.live is not None:
            run.live.detach()
        while not run.queue.empty():
            run.queue.get_nowait()
        if self.on_disconnect == "interrupt":
            run.writer.reason_override = self.disconnect_reason
            run.task.cancel()

    def stream(self, run: _Run) -> StreamingResponse:
        async def body() -> AsyncIterator[str]:
            done = False
            try:
                while True:
                    line = await run.queue.get()
                    if line is None:
                        done = True
                        return
                    yield line
            finally:
                if not done:
                    self.detach(run)

        return _SSEResponse(
            body(),
            media_type="text/event-stream",
            headers={
                **UI_STREAM_HEADERS,
                "x-tplog-thread": _header_safe(run.writer.thread_id),
                "x-tplog-worker": str(os.getpid()),
            },
        )


async def _thread_for(srv: _Server, chat_id: str) -> str:
    """The thread an id names: a UUID names itself; any other id (an AI SDK chat id) names its
    :func:`~tplog.integrations.vercel.thread_id_for_chat` UUID -- unless a thread is stored under
    exactly that id (made before chat ids were mapped), which keeps its id. The rest of the
    request logs with that thread id (tplog.logs)."""
    tid = thread_id_for_chat(chat_id)
    if tid != chat_id:
        try:
            await asyncio.to_thread(srv.store.head, chat_id)
        except (NotFoundError, InvalidInputError):
            pass
        else:
            tid = chat_id
    set_thread_id(tid)
    return tid


async def _chat_branch(srv: _Server, root: str) -> str:
    """The chat's newest branch (:mod:`tplog.integrations.branches`): what its chat endpoints answer for."""
    tid, k = await asyncio.to_thread(branches.current, srv.store, root)
    if k:
        set_thread_id(tid)
    return tid


async def _path_thread(srv: _Server, request: Request) -> str:
    return await _thread_for(srv, request.path_params["thread_id"])


def _check_decisions(thread_id: str, calls: list[Any], approvals: dict[str, Any], results: dict[str, Any]) -> None:
    if not calls:
        raise HTTPError(409, "nothing_pending", f"thread {thread_id} has no deferred tool calls awaiting a decision")
    kinds = {c.tool_call_id: c.kind or "external" for c in calls}
    unknown = sorted(set(approvals) - set(kinds)) + sorted(set(results) - set(kinds))
    if unknown:
        raise HTTPError(
            409,
            "not_pending",
            f"thread {thread_id}: tool calls {unknown} are not awaiting a decision; pending: {sorted(kinds)}",
        )
    wrong = [c for c in approvals if kinds[c] != "approval"] + [c for c in results if kinds[c] == "approval"]
    if wrong:
        raise HTTPError(
            422,
            "wrong_decision_kind",
            f"thread {thread_id}: {sorted(wrong)}: approval calls take 'approvals', external calls 'results'",
            kinds=kinds,
        )
    missing = sorted(set(kinds) - set(approvals) - set(results))
    if missing:
        raise HTTPError(
            422, "missing_decisions", f"thread {thread_id}: no decision for deferred tool calls {missing}", kinds=kinds
        )


def _new_message_id() -> str:
    """A server-made UI message id (for the assistant's message, sent in ``start``)."""
    return f"msg-{uuid.uuid4().hex}"


def _now() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


# --------------------------------------------------------------------------- request helpers


async def _json_body(request: Request, limit: int) -> dict[str, Any]:
    cl = request.headers.get("content-length")
    if cl is not None and cl.isdigit() and int(cl) > limit:
        raise HTTPError(413, "too_large", f"request body is {cl} bytes; at most {limit} are accepted")
    from starlette.requests import ClientDisconnect

    raw = b""
    try:
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > limit:
                raise HTTPError(413, "too_large", f"request body is over {limit} bytes")
    except ClientDisconnect:
        raise HTTPError(400, "client_disconnected", "the client went away while sending the body") from None
    if not raw.strip():
        raise HTTPError(400, "empty_body", "the request needs a JSON body")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise HTTPError(400, "malformed_json", f"the body is not valid JSON: {exc}") from exc
    except RecursionError:  # json's decoder recurses per nesting level
        raise HTTPError(400, "malformed_json", "the body's JSON is nested too deeply") from None
    if not isinstance(data, dict):
        raise HTTPError(422, "invalid_body", f"the body must be a JSON object, not {type(data).__name__}")
    return data


def _if_match(request: Request) -> int | None:
    v = request.headers.get("if-match")
    if v is None:
        return None
    v = v.strip().strip('"')
    if not v.isdigit():
        raise HTTPError(400, "bad_if_match", f"If-Match must be a thread version (an integer ≥ 0), not {v!r}")
    return int(v)


def _thread_filters(request: Request) -> dict[str, Any]:
    """``Store.threads`` filters from the query string (bad values: the store's InvalidInputError)."""
    from tplog.lifecycle import parse_meta, parse_time

    q = request.query_params
    hc = q.get("has_children")
    return {"status": q.getlist("status") or None, "agent": q.get("agent") or None, "title": q.get("title") or None,
            "metadata": parse_meta("meta", q.getlist("meta")), "roots": _flag(request, "roots"),
            "has_children": None if hc is None or hc == "" else _flag(request, "has_children"),
            **{n: parse_time(n, q.get(n)) for n in ("created_after", "created_before", "updated_after",
                                                    "updated_before")}}


def _int_param(request: Request, name: str, default: int | None, *, lo: int = 0, hi: int | None = None) -> int | None:
    v = request.query_params.get(name)
    if v is None or v == "":
        return default
    try:
        n = int(v)
    except ValueError:
        raise HTTPError(422, "invalid_parameter", f"query parameter {name!r} must be an integer, not {v!r}") from None
    if n < lo or (hi is not None and n > hi):
        rng = f"{lo}..{hi}" if hi is not None else f"≥ {lo}"
        raise HTTPError(422, "invalid_parameter", f"query parameter {name!r} must be in {rng}, not {n}")
    return n


def _flag(request: Request, name: str) -> bool:
    v = request.query_params.get(name, "")
    if v.lower() in ("", "0", "false", "no"):
        return False
    if v.lower() in ("1", "true", "yes"):
        return True
    raise HTTPError(422, "invalid_parameter", f"query parameter {name!r} must be 1/0/true/false, not {v!r}")


def _plain(obj: Any) -> Any:
    """Result structs as JSON objects (heads are msgpack arrays on disk, objects here)."""
    if isinstance(obj, m._Base):
        return to_builtins(obj)
    if isinstance(obj, msgspec.Struct):
        return {f: _plain(getattr(obj, f)) for f in obj.__struct_fields__}
    if isinstance(obj, (list, tuple)):
        return [_plain(o) for o in obj]
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    return msgspec.to_builtins(obj)


def _json(obj: Any, status: int = 200) -> Response:
    return Response(msgspec.json.encode(obj), status_code=status, media_type="application/json")


def _ui_errors(exc: Any) -> list[dict[str, Any]]:
    return [
        {"loc": ".".join(str(p) for p in e.get("loc", ())), "msg": e.get("msg"), "type": e.get("type")}
        for e in exc.errors(include_url=False, include_context=False, include_input=False)[:20]
    ]


def _event_row(e: RecordedEvent) -> dict[str, Any]:
    return {
        "seq": e.seq,
        "position": e.position,
        "event_id": e.event_id,
        "recorded_at": e.recorded_at,
        "type": e.event.__struct_config__.tag,
        "event": to_builtins(e.event),
    }


def _prometheus(srv: _Server) -> Any:
    """The app's :class:`~tplog.integrations.metrics.ServerMetrics`, or None without prometheus-client."""
    try:
        from tplog.integrations.metrics import ServerMetrics
    except ImportError:
        return None
    return ServerMetrics(lambda: srv._astore.store if srv._astore is not None else None, lambda: len(srv.runs))


# --------------------------------------------------------------------------- the app


def create_app(
    store: str | os.PathLike[str] | Store | AsyncStore,
    agents: Mapping[str, Any],
    *,
    on_disconnect: OnDisconnect = "finish",
    disconnect_reason: str = "network_failure",
    shutdown_grace: float = 30.0,
    store_options: Mapping[str, Any] | None = None,
    sdk_version: int = 6,
    tail_poll: float = 0.05,
    heartbeat: float = 15.0,
    max_body: int = 16 << 20,
    metrics: AppendTimings | None = None,
    metrics_path: str | None = None,
    tp_chunks: TpChunks = "transient",
    after_stop: AfterStop = "interrupt",
    after_stop_wait: float = 30.0,
    live_flush: float = 0.05,
    resumable: bool = True,
    prune: PruneSchedule | None = None,
) -> Starlette:
    """The ASGI app serving ``store`` (a directory, opened per worker in the lifespan, or an
    open ``Store``/``AsyncStore`` the caller keeps owning) with ``agents`` (name -> Pydantic AI agent).

    ``on_disconnect``: ``"finish"`` -- a run whose client went away is run and recorded to its
    end; ``"interrupt"`` -- it is cancelled and recorded as interrupted with ``disconnect_reason``.
    ``store_options`` go to :class:`Store` (e.g. ``durability``). ``tail_poll``: how often event
    tails look for appends by other processes; ``heartbeat``: SSE keep-alive comment interval.
    ``metrics``: an :class:`AppendTimings` (or anything with its ``append``/``request`` methods)
    timing every append; dumped to ``metrics_path.PID.json`` at shutdown when given.
    ``shutdown_grace``: seconds running runs get at shutdown before they are interrupted
    (``server_shutdown``), counted from the SIGTERM/SIGINT when the ASGI server runs the app in
    its main thread with its own signal handlers (uvicorn does), else from the lifespan's end.
    Under your own uvicorn, set its ``timeout_graceful_shutdown`` above the grace (``serve`` uses
    grace + 15 s): uvicorn cuts the responses still open when it runs out.
    ``tp_chunks``: ``"transient"`` (default) sends the ``data-tp-*`` chunks transient (the AI SDK
    client passes them to ``onData`` and keeps them out of its messages, which it sends back with
    every request); ``"parts"`` keeps them as data parts of the assistant message, for clients that
    assemble the thread from stored UI messages.

    Resumable streams (``GET /api/chat/{id}/stream``, ``useChat({resume: true})``): a run's UI
    chunks are written to the store's live table beside the log (batched, at most one write per
    ``live_flush`` seconds), so any worker can replay the open turn; ``resumable=False`` writes
    none (the endpoint then always answers 204, and a stop request reaches only this worker's runs).
    ``after_stop``: what a new message does while the thread's turn is still running with its
    client gone (the user pressed stop, which aborts the request, and ``on_disconnect="finish"``
    kept the run going):
    ``"interrupt"`` (default) stops that run (recorded ``user_cancelled``) and then answers;
    ``"wait"`` waits for it to end; either gives up after ``after_stop_wait`` seconds with 409
    ``turn_open``, as ``"reject"`` does at once. A run whose client is still reading it is never
    disturbed: the new message is a 409 ``turn_open``.
    """
    srv = _Server(
        store,
        agents,
        on_disconnect=on_disconnect,
        disconnect_reason=disconnect_reason,
        shutdown_grace=shutdown_grace,
        store_options=store_options or {},
        sdk_version=sdk_version,
        tail_poll=tail_poll,
        heartbeat=heartbeat,
        max_body=max_body,
        metrics=metrics,
        metrics_path=metrics_path,
        tp_chunks=tp_chunks,
        after_stop=after_stop,
        after_stop_wait=after_stop_wait,
        live_flush=live_flush,
        resumable=resumable,
        prune=prune,
    )

    async def chat(request: Request) -> Response:
        import pydantic
        from pydantic_ai.ui.vercel_ai import VercelAIAdapter
        from pydantic_ai.ui.vercel_ai.request_types import RequestData

        body = await _json_body(request, srv.max_body)
        body.setdefault("trigger", "submit-message")
        try:
            run_input = pydantic.TypeAdapter(RequestData).validate_python(body)
        except pydantic.ValidationError as exc:
            errs = _ui_errors(exc)
            first = errs[0] if errs else {"loc": "", "msg": "invalid"}
            raise HTTPError(
                422,
                "invalid_body",
                f"not a Vercel AI UI request: {first['loc'] or 'body'}: {first['msg']}",
                errors=errs,
            ) from None
        regenerate = body.get("trigger") == "regenerate-message"
        chat_id = run_input.id
        if not chat_id or len(chat_id.encode()) > 512:
            raise HTTPError(422, "invalid_body", "id (the chat/thread id) must be a non-empty string ≤ 512 bytes")
        root = await _thread_for(srv, chat_id)
        thread_id, branch_no = await asyncio.to_thread(branches.current, srv.store, root)
        agent_name, agent = srv.agent(body.get("agent", request.query_params.get("agent")))
        if_match = _if_match(request)
        msgs = run_input.messages
        last = msgs[-1] if msgs else None
        if regenerate and (last is None or last.role != "user"):
            raise HTTPError(422, "invalid_body", "regenerate-message: the messages must end with the user message "
                            "to answer again (what the AI SDK's regenerate() sends)")
        if regenerate or (last is not None and last.role == "user" and last.id and body.get("messageId") == last.id):
            # AI SDK v6 regenerate / edit-and-resend: the answer goes on a new branch (tplog.integrations.branches)
            assert last is not None
            at = await asyncio.to_thread(branches.point, srv.store, thread_id, last.id)
            if at is None and regenerate:
                raise HTTPError(409, "unknown_message", f"regenerate-message: thread {thread_id} has no user "
                                f"message {last.id!r} to answer again")
            if at is not None:
                head = await asyncio.to_thread(srv.store.head, thread_id)
                if if_match is not None and if_match != head.version:
                    raise HTTPError(409, "version_conflict", f"thread {thread_id}: If-Match expected version "
                                    f"{if_match}, but the thread is at version {head.version}",
                                    expected=if_match, actual=head.version)
                reason = branches.REASON_REGENERATE if regenerate else branches.REASON_EDIT
                try:
                    thread_id = await asyncio.to_thread(branches.branch, srv.store, root, branch_no, thread_id, at,
                                                        reason)
                except TplogError as exc:
                    raise http_error(exc) from exc
                set_thread_id(thread_id)
                if_match = at
        deferred: tuple[dict[str, Any], dict[str, Any]] | None = None
        client_results = False
        user_text: str | None = None
        ui_ids: tuple[str | None, str | None] = (None, None)
        if last is not None and last.role == "user":
            user_text = " ".join(getattr(p, "text", "") for p in last.parts if getattr(p, "type", "") == "text")
            ui_ids = (last.id or None, _new_message_id())
        elif last is not None and last.role == "assistant":
            ui_ids = (None, last.id or None)  # the run continues the message the client shows
            from pydantic_ai import ToolFailed

            adapter = VercelAIAdapter(agent=agent, run_input=run_input, sdk_version=6)
            dtr = adapter.deferred_tool_results
            appr: dict[str, Any] = {}
            for cid, dec in (dtr.approvals if dtr is not None else {}).items():
                appr[cid] = (
                    dec if isinstance(dec, bool) else {"approved": False, "reason": getattr(dec, "message", None)}
                )
            # AI SDK v6 addToolOutput: the browser ran the tool; its result is in the assistant message
            results = {
                cid: ToolFailed(value) if kind == "error" else value
                for cid, (kind, value) in client_tool_results(body).items()
                if cid not in appr
            }
            if appr or results:
                deferred = (appr, results)
                client_results = bool(results)
        if user_text is None and deferred is None:
            raise HTTPError(
                422,
                "nothing_to_run",
                "the request's last message must be the user's new message, or an assistant message with "
                "tool approval responses or client-side tool results (output-available / output-error tool parts)",
            )
        # The run sees only the last message; the history is the thread's recorded one.
        run_body = {
            "trigger": "submit-message",
            "id": thread_id,
            "messages": [body["messages"][-1]] if user_text is not None else [],
        }
        run = await srv.start_run(
            thread_id,
            agent_name,
            agent,
            run_body,
            if_match=if_match,
            user_text=user_text,
            deferred=deferred,
            client_results=client_results,
            metadata={CHAT_ID_KEY: chat_id} if chat_id != thread_id else None,
            ui_ids=ui_ids,
        )
        return srv.stream(run)

    async def fork(request: Request) -> Response:
        thread_id = await _path_thread(srv, request)
        body = await _json_body(request, srv.max_body)
        unknown_keys = sorted(set(body) - {"at", "thread_id", "reason"})
        if unknown_keys:
            raise HTTPError(422, "invalid_body", f"unknown fields {unknown_keys}; expected at, thread_id, reason")
        res = await srv.astore.fork(thread_id, body.get("at"), new_thread_id=body.get("thread_id"),  # type: ignore[arg-type]
                                    reason=body.get("reason"))
        return _json(res, status=201)
    async def chat_messages(request: Request) -> Response:
        from tplog.integrations.ui_messages import ui_messages

        tid = await _chat_branch(srv, await _path_thread(srv, request))
        try:
            res = await asyncio.to_thread(srv.store.load, tid)
        except NotFoundError:  # a chat that has not sent anything yet
            return _json([])
        if res.deleted or res.thread is None:
            raise HTTPError(410, "thread_deleted", f"thread {tid} was deleted")
        return _json(await asyncio.to_thread(ui_messages, res.thread))

    async def chat_stream(request: Request) -> Response:
        tid = await _chat_branch(srv, await _path_thread(srv, request))
        if not srv.resumable:
            return Response(status_code=204, headers={"x-tplog-worker": str(os.getpid())})
        return await resume_response(srv, tid)

    async def approvals(request: Request) -> Response:
        thread_id = await _path_thread(srv, request)
        body = await _json_body(request, srv.max_body)
        appr = body.get("approvals", {})
        results = body.get("results", {})
        if not isinstance(appr, dict) or not isinstance(results, dict):
            raise HTTPError(422, "invalid_body", "'approvals' and 'results' must be objects keyed by tool_call_id")
        if not appr and not results:
            raise HTTPError(422, "invalid_body", "give 'approvals' and/or 'results' for the pending tool calls")
        for cid, dec in appr.items():
            ok = isinstance(dec, bool) or (
                isinstance(dec, dict)
                and isinstance(dec.get("approved"), bool)
                and isinstance(dec.get("reason", ""), str | None)
            )
            if not ok:
                raise HTTPError(
                    422,
                    "invalid_body",
                    f'approvals[{cid!r}] must be true, false or {{"approved": bool, "reason": str}}',
                    path=f"$.approvals[{json.dumps(cid)}]",
                )
        unknown_keys = sorted(set(body) - {"approvals", "results", "agent"})
        if unknown_keys:
            raise HTTPError(422, "invalid_body", f"unknown fields {unknown_keys}; expected approvals, results, agent")
        store = srv.store
        try:
            res = await asyncio.to_thread(store.load, thread_id)
        except TplogError as exc:
            raise http_error(exc) from exc
        if res.deleted:
            raise HTTPError(410, "thread_deleted", f"thread {thread_id} was deleted")
        name = body.get("agent")
        agent_turns = [t for t in res.thread.turns if isinstance(t, m.AgentTurn)] if res.thread is not None else []
        # the continued run streams into the assistant message the previous run began
        message_id = agent_turns[-1].extra.get(MESSAGE_ID_KEY) if agent_turns else None
        if name is None and res.thread is not None:
            name = agent_turns[-1].agent_id if agent_turns else None
            if name not in srv.agents:
                name = None
        agent_name, agent = srv.agent(name)
        run_body = {"trigger": "submit-message", "id": thread_id, "messages": []}
        run = await srv.start_run(
            thread_id,
            agent_name,
            agent,
            run_body,
            if_match=_if_match(request),
            user_text=None,
            deferred=(appr, results),
            ui_ids=(None, message_id if isinstance(message_id, str) else _new_message_id()),
        )
        return srv.stream(run)

    async def metrics_route(request: Request) -> Response:
        if srv.prom is None:
            raise HTTPError(501, "metrics_unavailable", "/metrics needs prometheus-client: pip install 'tplog[server]'")
        body = await asyncio.to_thread(srv.prom.render)
        from tplog.integrations.metrics import CONTENT_TYPE

        return Response(body, media_type=CONTENT_TYPE, headers={"x-tplog-worker": str(os.getpid())})

    async def health(request: Request) -> Response:
        return _json({"ok": True, "pid": os.getpid(), "last_position": srv.watcher.pos})

    async def threads(request: Request) -> Response:
        limit = _int_param(request, "limit", 50, lo=1, hi=1000)
        assert limit is not None
        page = await srv.astore.threads(
            limit=limit,
            after=request.query_params.get("after") or None,
            include_deleted=_flag(request, "include_deleted"),
            **_thread_filters(request),
        )
        return _json({"threads": _plain(page.threads), "next_cursor": page.cursor})

    async def thread(request: Request) -> Response:
        th = await asyncio.to_thread(srv.store.thread, await _path_thread(srv, request))
        return Response(to_json(th), media_type="application/json")

    async def turns(request: Request) -> Response:
        tid = await _path_thread(srv, request)
        res = await asyncio.to_thread(srv.store.load, tid)
        if res.deleted or res.thread is None:
            raise HTTPError(410, "thread_deleted", f"thread {tid} was deleted")
        return _json(
            {
                "thread_id": res.thread.thread_id,
                "version": res.seq,
                "turns": to_builtins(res.thread.turns),
                "in_progress": to_builtins(res.in_progress) if res.in_progress is not None else None,
            }
        )

    async def pending(request: Request) -> Response:
        return _json(_plain(await asyncio.to_thread(srv.store.pending, await _path_thread(srv, request))))

    async def interrupts(request: Request) -> Response:
        return _json(_plain(await asyncio.to_thread(srv.store.interrupts, await _path_thread(srv, request))))

    async def children(request: Request) -> Response:
        tid = await _path_thread(srv, request)
        store = srv.store  # its queries raise NotFoundError (404) for a thread neither stored nor linked to
        max_depth = _int_param(request, "max_depth", None, lo=1)
        if _flag(request, "recursive") or max_depth is not None:
            rows = await asyncio.to_thread(store.descendants, tid, max_depth=max_depth)
            return _json({"thread_id": tid, "descendants": [{"thread_id": t, "depth": d} for t, d in rows]})
        limit = _int_param(request, "limit", None, lo=1)
        kids = await asyncio.to_thread(store.children, tid, limit=limit, after=request.query_params.get("after"))
        return _json({"thread_id": tid, "children": kids})

    async def links(request: Request) -> Response:
        tid = await _path_thread(srv, request)
        store = srv.store
        relation = request.query_params.get("relation") or None
        if _flag(request, "incoming"):
            limit = _int_param(request, "limit", None, lo=1)
            after_id = request.query_params.get("after") or None
            after_rel = request.query_params.get("after_relation") or relation
            if after_id is not None and after_rel is None:
                raise HTTPError(400, "bad_after", "after needs after_relation (or relation): the pair to resume after")
            after = (after_id, after_rel) if after_id is not None and after_rel is not None else None
            rows = await asyncio.to_thread(store.incoming, tid, relation=relation, limit=limit, after=after)
            return _json({"thread_id": tid, "incoming": [{"thread_id": t, "relation": r} for t, r in rows]})
        lks = await asyncio.to_thread(store.links, tid)
        return _json(
            {"thread_id": tid, "links": [to_builtins(lk) for lk in lks if relation is None or lk.relation == relation]}
        )

    async def events(request: Request) -> Response:
        tid = await _path_thread(srv, request)
        last_id = request.headers.get("last-event-id")
        if last_id is not None and last_id.strip():
            if not last_id.strip().isdigit():
                raise HTTPError(400, "bad_last_event_id", f"Last-Event-ID must be an event seq, not {last_id!r}")
            after = int(last_id.strip())
        else:
            after = _int_param(request, "after", 0) or 0
        follow = request.query_params.get("follow") is None or _flag(request, "follow")
        store = srv.store
        await asyncio.to_thread(store.head, tid)  # 404 before the stream starts
        watcher = srv.watcher
        heartbeat = srv.heartbeat

        async def gen() -> AsyncIterator[str]:
            if srv.prom is not None:
                srv.prom.sse.inc()
            try:
                async for chunk in tail():
                    yield chunk
            finally:
                if srv.prom is not None:
                    srv.prom.sse.dec()

        async def tail() -> AsyncIterator[str]:
            last = after
            yield "retry: 1000\n\n"
            while True:
                mark = watcher.pos
                evs = await asyncio.to_thread(store.read, tid, after=last, limit=_TAIL_PAGE)
                for e in evs:
                    if e.seq <= last:  # pragma: no cover - reads are by seq
                        continue
                    last = e.seq
                    data = msgspec.json.encode(_event_row(e)).decode()
                    yield f"id: {e.seq}\nevent: {e.event.__struct_config__.tag}\ndata: {data}\n\n"
                    if isinstance(e.event, ThreadDeleted):
                        return
                if len(evs) >= _TAIL_PAGE:
                    continue  # more of the backlog: no waiting
                if not follow or srv.closing:
                    return
                got = await watcher.wait(mark, heartbeat)
                if got == mark:
                    yield ": keep-alive\n\n"

        return _SSEResponse(
            gen(), media_type="text/event-stream", headers={**SSE_HEADERS, "x-tplog-worker": str(os.getpid())}
        )

    def guarded(fn: Callable[[Request], Any]) -> Callable[[Request], Any]:
        async def wrapper(request: Request) -> Response:
            path_id = request.path_params.get("thread_id")
            if isinstance(path_id, str):  # this request's log lines (uvicorn's access line too) name it
                set_thread_id(path_id)
            resp = await handle(request)
            if resp.status_code >= 400 and srv.prom is not None:
                srv.prom.error(resp.status_code, getattr(resp, "tplog_code", "error"))
            return resp

        async def handle(request: Request) -> Response:
            try:
                resp: Response = await fn(request)
                return resp
            except HTTPError as exc:
                return _error_response(exc)
            except TplogError as exc:
                err = http_error(exc)
                path_id = request.path_params.get("thread_id")
                if isinstance(path_id, str) and isinstance(exc, (NotFoundError, ThreadDeletedError)):
                    # name the id the client sent, not the UUIDv5 a chat id was mapped to
                    err = HTTPError(err.status, err.code, err.message.replace(thread_id_for_chat(path_id), path_id),
                                    **err.extra)
                return _error_response(err)

        wrapper.__name__ = fn.__name__
        return wrapper

    routes = [
        Route("/api/chat", guarded(chat), methods=["POST"]),
        Route("/api/chat/{thread_id}/stream", guarded(chat_stream), methods=["GET"]),
        Route("/api/chat/{thread_id}/messages", guarded(chat_messages), methods=["GET"]),
        Route("/health", guarded(health), methods=["GET"]),
        Route("/threads", guarded(threads), methods=["GET"]),
        Route("/threads/{thread_id}", guarded(thread), methods=["GET"]),
        Route("/threads/{thread_id}/turns", guarded(turns), methods=["GET"]),
        Route("/threads/{thread_id}/pending", guarded(pending), methods=["GET"]),
        Route("/threads/{thread_id}/interrupts", guarded(interrupts), methods=["GET"]),
        Route("/threads/{thread_id}/children", guarded(children), methods=["GET"]),
        Route("/threads/{thread_id}/links", guarded(links), methods=["GET"]),
        Route("/threads/{thread_id}/events", guarded(events), methods=["GET"]),
        Route("/threads/{thread_id}/approvals", guarded(approvals), methods=["POST"]),
        Route("/threads/{thread_id}/fork", guarded(fork), methods=["POST"]),
        Route("/metrics", guarded(metrics_route), methods=["GET"]),
        *browser_routes(),
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        code = getattr(exc, "status_code", 404)
        if code == 405:
            err = HTTPError(405, "method_not_allowed", f"{request.method} is not allowed on {request.url.path}")
        else:
            err = HTTPError(
                code, "not_found" if code == 404 else "http_error", f"no route {request.method} {request.url.path}"
            )
        if srv.prom is not None:
            srv.prom.error(err.status, err.code)
        return _error_response(err)

    async def internal(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        err = http_error(exc)
        if srv.prom is not None:
            srv.prom.error(err.status, err.code)
        return _error_response(err)

    from starlette.exceptions import HTTPException

    app = Starlette(
        routes=routes, lifespan=srv.lifespan, exception_handlers={HTTPException: not_found, Exception: internal}
    )
    app.state.tplog = srv
    return app


# --------------------------------------------------------------------------- demo agent


def demo_agents() -> dict[str, Any]:
    """A scripted Pydantic AI agent (``FunctionModel``, no API key), for ``tplog serve`` and the tests.

    What it does, by the user's message:

    - ``weather in CITY`` -> calls the ``get_weather`` tool, then answers with its result;
    - ``delete PATH`` -> calls ``delete_file``, which **requires approval**: the turn ends
      deferred; approve/deny it (``POST /threads/{id}/approvals``) and it goes on;
    - ``where am i`` -> calls ``get_location``, a client-side tool: the turn ends deferred; the
      browser's result (AI SDK v6 ``addToolOutput``, or ``results`` of ``/approvals``) resumes it;
    - ``slow N [MS]`` -> streams N words, one per MS milliseconds (default 20 x 50 ms);
    - ``fail`` -> streams a little, then the model raises (recorded as an ``error`` interruption);
    - anything else -> ``You said: ...``.
    """
    from pydantic_ai import Agent, CallDeferred, DeferredToolRequests
    from pydantic_ai import messages as pm
    from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

    async def stream(messages: list[pm.ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        last = messages[-1]
        returns = (
            [p for p in last.parts if isinstance(p, pm.ToolReturnPart)] if isinstance(last, pm.ModelRequest) else []
        )
        if returns:
            yield " ".join(f"{p.tool_name}: {p.content}." for p in returns)
            return
        prompt = ""
        for p in last.parts:
            if isinstance(p, pm.UserPromptPart):
                prompt = (
                    p.content if isinstance(p.content, str) else " ".join(c for c in p.content if isinstance(c, str))
                )
        low = prompt.lower().strip()
        if mt := re.search(r"weather in ([\w \-]+)", low):
            city = mt.group(1).strip().title()
            yield {
                0: DeltaToolCall(
                    name="get_weather",
                    json_args=json.dumps({"city": city}),
                    tool_call_id=f"call_{uuid.uuid4().hex[:12]}",
                )
            }
        elif "where am i" in low:
            yield {0: DeltaToolCall(name="get_location", json_args="{}", tool_call_id=f"call_{uuid.uuid4().hex[:12]}")}
        elif mt := re.search(r"delete (\S+)", low):
            yield {
                0: DeltaToolCall(
                    name="delete_file",
                    json_args=json.dumps({"path": mt.group(1)}),
                    tool_call_id=f"call_{uuid.uuid4().hex[:12]}",
                )
            }
        elif mt := re.match(r"slow(?: (\d+))?(?: (\d+))?", low):
            n, ms = int(mt.group(1) or 20), int(mt.group(2) or 50)
            for i in range(n):
                yield f"word{i} "
                await asyncio.sleep(ms / 1000)
        elif low.startswith("fail"):
            yield "Something is "
            raise RuntimeError("the demo model failed on purpose")
        else:
            yield f"You said: {prompt}"

    agent: Any = Agent(
        FunctionModel(stream_function=stream, model_name="tplog-demo"),
        output_type=[str, DeferredToolRequests],
        name="demo",
    )

    @agent.tool_plain  # type: ignore[untyped-decorator]
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny and {len(city) + 15} °C in {city}"

    @agent.tool_plain(requires_approval=True)  # type: ignore[untyped-decorator]
    def delete_file(path: str) -> str:
        """Delete a file (needs the user's approval)."""
        return f"deleted {path}"

    @agent.tool_plain  # type: ignore[untyped-decorator]
    def get_location() -> str:
        """Where the user is (a client-side tool: the browser runs it and sends the result)."""
        raise CallDeferred

    return {"demo": agent}


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
    """
    import uvicorn

    if log_format not in ("text", "json"):
        raise ServeError(f"the log format must be 'text' or 'json', not {log_format!r}")

    grace = _grace(str(shutdown_grace))
    path = os.fspath(store_path)
    if "://" not in path or path.startswith("lmdb://"):  # a server's URL (postgresql://…) stays as it is
        path = os.path.abspath(path.removeprefix("lmdb://"))
    loaded = _load_agents(agents)
    _check_address(host, port)
    Store(path, durability=durability).close()  # create it once, before the workers race to
    os.environ[ENV_STORE] = path
    os.environ[ENV_ON_DISCONNECT] = on_disconnect
    os.environ[ENV_DURABILITY] = durability
    os.environ[ENV_SHUTDOWN_GRACE] = repr(grace)
    if agents:
        os.environ[ENV_AGENTS] = agents
    if prune is not None:
        prune.check()
        os.environ[ENV_PRUNE] = prune.to_env()
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
    )
