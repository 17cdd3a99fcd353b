"""The server's per-worker state: the store, the live-tail watcher, the writers, the runs
(``Server``) and the chat/thread helpers the routes share.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse

from tplog.aio import AsyncStore
from tplog.backends.live import LiveStreams, MemoryLive, NotifyingLive
from tplog.backends.live_streams import live_streams
from tplog.errors import InvalidEventError, InvalidInputError, NotFoundError
from tplog.events import (
    AgentRegistered,
    AgentTurnInterrupted,
    AgentTurnStarted,
    Event,
    ThreadStarted,
    UserTurnSubmitted,
)
from tplog.integrations.http import UI_STREAM_HEADERS, HTTPError, http_error
from tplog.integrations.http import SSEResponse as _SSEResponse
from tplog.integrations.http import header_safe as _header_safe
from tplog.integrations.resume import AfterStop, LiveWriter, settle_open_turn, sweeper
from tplog.integrations.scheduled_prune import PruneSchedule, prune_loop
from tplog.integrations.server.config import AppendTimings, OnDisconnect, TpChunks
from tplog.integrations.server.limits import Admission, ServerLimits
from tplog.integrations.server.security import ScopedLive, live_key, request_scope
from tplog.integrations.server.wakeups import SharedLiveReads, Wakeups
from tplog.integrations.vercel import MESSAGE_ID_KEY, thread_id_for_chat
from tplog.logs import set_thread_id
from tplog.protocol import model as m
from tplog.store import NO_STREAM, ExpectedVersion, Store

__all__ = ["Server", "new_message_id", "path_thread", "thread_for"]


log = logging.getLogger("tplog.server")

# --------------------------------------------------------------------------- state


#: Log entries the watcher reads to learn which threads an append touched; past that it wakes every tail.
_FANOUT_PAGE = 256


class _Watcher:
    """One thread per worker: ``Store.wait_for_position`` in a loop; wakes the asyncio tails of
    the threads the new log entries belong to (``wakeups``), and whoever waits for any append."""

    def __init__(self, store: Store, loop: asyncio.AbstractEventLoop, poll: float, wakeups: Wakeups) -> None:
        self.store = store
        self.loop = loop
        self.poll = poll
        self.wakeups = wakeups
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
                touched = self._touched(self.pos, pos)
                self.pos = pos
                with contextlib.suppress(RuntimeError):  # loop closed
                    self.loop.call_soon_threadsafe(self._wake, touched)

    def _touched(self, old: int, new: int) -> set[str] | None:
        """The threads of log positions ``old``..``new`` (one read, in this thread), or None
        (everyone) when that is not known cheaply: several logs, or more entries than a page."""
        if self._logs != 1 or new - old > _FANOUT_PAGE:
            return None
        try:
            page = self.store.backend.read_log(0, after=old, limit=_FANOUT_PAGE, scope=self.store.scope)
        except Exception:  # the store closed under us, or an unreadable entry: wake everyone
            return None
        return {e.thread_id for e in page}

    def _wake(self, touched: set[str] | None = None) -> None:
        self.wakeups.wake(touched)
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

    def __init__(self, server: Server, thread_id: str, expected: int | str, prefix: list[Event]) -> None:
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


_ERROR_CHUNK = 'data: {"type":"error"'


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
        self.scope = request_scope.get()  # the same thread id in another scope is another thread
        self.token = CancellationToken()  # stops the run inside Pydantic AI: its stream ends with `abort`
        self.queue: asyncio.Queue[str | None] = asyncio.Queue()
        self.attached = True
        self.task: asyncio.Task[None] | None = None
        self.started = time.perf_counter()
        self.live: LiveWriter | None = None

    def stop(self) -> None:
        """Stop the run as a user would (recorded ``user_cancelled``): a new message came after a stop."""
        self.token.cancel()


class Server:
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
        limits: ServerLimits | None = None,
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
        self.limits = limits if limits is not None else ServerLimits()
        lim = self.limits
        self.run_slots = Admission("runs", lim.max_runs)
        self.stream_slots = Admission("streams", lim.max_streams, lim.max_streams_per_client)
        self.wakeups = Wakeups()  # event tails, by thread (the watcher wakes them)
        self.live_wakeups = Wakeups()  # resumed chat streams, by thread (this worker's live writes wake them)
        self._live: LiveStreams | None = None
        self._live_reads: SharedLiveReads | None = None
        self.live_tasks: set[asyncio.Task[None]] = set()
        self._astore: AsyncStore | None = None
        self._watcher: _Watcher | None = None
        self.runs: set[_Run] = set()
        self.closing = False
        self._draining: asyncio.Task[None] | None = None
        self.prom = _prometheus(self)

    @property
    def astore(self) -> AsyncStore:
        """The store, as the request's user sees it (their scope, :mod:`.security`)."""
        if self._astore is None:
            raise HTTPError(503, "unavailable", "the store is not open (lifespan not started)")
        user = request_scope.get()
        return self._astore if user is None else self._astore.scoped(user)

    @property
    def store(self) -> Store:
        return self.astore.store

    @property
    def live(self) -> LiveStreams:
        """The store's live table (in-flight stream chunks); a process-local one when the backend
        has none (then only this worker can resume its streams)."""
        if self._live is None:
            loop = asyncio.get_running_loop()

            def written(thread_id: str) -> None:  # in the writer's thread
                with contextlib.suppress(RuntimeError):  # loop closed
                    loop.call_soon_threadsafe(self.live_wakeups.wake, (thread_id,))

            self._live = NotifyingLive(live_streams(self.store.backend) or MemoryLive(), written)
        user = request_scope.get()
        return self._live if user is None else ScopedLive(self._live, user)

    def runs_of(self, thread_id: str) -> list[_Run]:
        """This worker's runs of ``thread_id`` in this request's scope."""
        user = request_scope.get()
        return [r for r in self.runs if r.writer.thread_id == thread_id and r.scope == user]

    def live_key(self, thread_id: str) -> str:
        """``thread_id``'s key in the live table for this request's user (what :class:`ScopedLive`
        writes under, what the wake-ups and shared reads go by)."""
        user = request_scope.get()
        return thread_id if user is None else live_key(user, thread_id)

    @property
    def live_reads(self) -> SharedLiveReads:
        """The live table's reads shared by the resumed streams of a thread."""
        if self._live_reads is None:  # over the unscoped table: readers come by key (live_key)
            self.live  # noqa: B018 - made on first use
            assert self._live is not None
            self._live_reads = SharedLiveReads(self._live)
        return self._live_reads

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
        self._watcher = _Watcher(self._astore.store, asyncio.get_running_loop(), self.tail_poll, self.wakeups)
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
        self.live_wakeups.wake(None)
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
        release = self.run_slots.acquire()  # held until the run's task ends; refused: nothing written
        try:
            run = await self._start_run(thread_id, agent_name, agent, body, if_match=if_match, user_text=user_text,
                                        deferred=deferred, client_results=client_results, metadata=metadata,
                                        ui_ids=ui_ids)
        except BaseException:
            release()
            raise
        assert run.task is not None
        run.task.add_done_callback(lambda _t: release())
        return run

    async def _start_run(
        self,
        thread_id: str,
        agent_name: str,
        agent: Any,
        body: dict[str, Any],
        *,
        if_match: int | None,
        user_text: str | None,
        deferred: tuple[dict[str, Any], dict[str, Any]] | None,
        client_results: bool,
        metadata: dict[str, Any] | None,
        ui_ids: tuple[str | None, str | None],
    ) -> _Run:
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
        if self.limits.max_run_seconds > 0:  # past it Pydantic AI stops the run: recorded `timeout`
            kwargs["timeout"] = self.limits.max_run_seconds
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
                if line.startswith(_ERROR_CHUNK) and run.writer.reason_override is None:
                    # the UI stream failed (e.g. encoding a result): the run is then closed from outside,
                    # which the recorder takes for a client that stopped reading: record what happened
                    run.writer.reason_override = "error"
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


async def thread_for(srv: Server, chat_id: str) -> str:
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


async def path_thread(srv: Server, request: Request) -> str:
    return await thread_for(srv, request.path_params["thread_id"])


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


def new_message_id() -> str:
    """A server-made UI message id (for the assistant's message, sent in ``start``)."""
    return f"msg-{uuid.uuid4().hex}"


def _now() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).isoformat().replace("+00:00", "Z")

def _prometheus(srv: Server) -> Any:
    """The app's :class:`~tplog.integrations.metrics.ServerMetrics`, or None without prometheus-client."""
    try:
        from tplog.integrations.metrics import ServerMetrics
    except ImportError:
        return None
    return ServerMetrics(lambda: srv._astore.store if srv._astore is not None else None, lambda: len(srv.runs))
