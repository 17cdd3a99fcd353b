"""Resumable chat streams and a clean stop, for the AI SDK's ``useChat`` (issue 28).

- :class:`LiveWriter`: while a run streams, its UI chunks are written, in batches, to the
  store's live table (:mod:`tplog.backends.live`: beside the log, not in it), so that any worker
  process can replay them; :func:`sweeper` drops them some seconds after the turn ended. It also carries
  the run's "attached" state and picks up stop requests made by other workers.
- :func:`resume_response`: ``GET /api/chat/{id}/stream`` -- 204 when the thread has no open turn
  (or none whose stream this store holds); else the open turn's chunks from its ``start``, then
  live to its end, through :class:`Replay` (every part it continues is started in it).
- :func:`settle_open_turn`: a new message while a turn is open. A run whose client went away
  (the user pressed stop: the SDK aborts the fetch) is interrupted (``user_cancelled``) or waited
  for, per ``after_stop``; a run whose client is still reading is a conflict (409 ``turn_open``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Final, Literal

from tplog.backends.live import LiveHeader, LiveStreams
from tplog.errors import NotFoundError
from tplog.integrations.http import UI_STREAM_HEADERS, HTTPError, SSEResponse, header_safe

if TYPE_CHECKING:
    from starlette.responses import Response

__all__ = ["AfterStop", "LiveWriter", "Replay", "resume_response", "settle_open_turn", "sweeper"]

log = logging.getLogger("tplog.server")

#: ``interrupt``: a new message interrupts an abandoned run (recorded ``user_cancelled``), then runs;
#: ``wait``: it waits (bounded) for the abandoned run to end; ``reject``: 409 ``turn_open`` at once.
AfterStop = Literal["interrupt", "wait", "reject"]
OWNER: Final = f"{socket.gethostname()}:{os.getpid()}"
#: How often a run that streams nothing looks for a stop request from another worker.
_IDLE_POLL: Final = 0.25
#: How long a finished stream's entries stay (at least), for readers still catching up.
_LINGER: Final = 10.0
#: A stream not written for this long and not ended lost its writer (a worker killed mid-turn).
_STALE: Final = 24 * 3600.0
#: How long a new message waits for the client of a running turn to go away (the stop-then-send
#: race: the SDK's stop aborts the fetch, the server notices a moment later) before it is a conflict.
_DETACH_GRACE: Final = 1.5
#: The least time between two sends of a resumed stream: a batch is written every live_flush
#: (50 ms); 200 readers of a turn sending each one took a fifth of a core, this a fifth of that.
_RESUME_GAP: Final = 0.2
#: How long a resume request waits for the open turn's first batch before answering 204.
_RESUME_WAIT: Final = 2.0


class LiveWriter:
    """The live-table side of one run: :meth:`push` each SSE frame, :meth:`start` once the turn
    is open (its ``AgentTurnStarted`` seq known), :meth:`close` at the end of the stream.

    A flusher task writes what was pushed since its last write, in one batch, at most every
    ``interval`` seconds (a batch is one store transaction). A failing live write never fails
    the run: the stream just stops being resumable (logged). It stops writing once a newer turn
    of the thread streams (the run was stopped and the next one began), and writes its stream
    again, whole, if an older turn's late write replaced it.
    """

    def __init__(self, live: LiveStreams, thread_id: str, *, interval: float,
                 on_stop: Callable[[], None], tasks: set[asyncio.Task[None]]) -> None:
        self.live = live
        self.thread_id = thread_id
        self.interval = interval
        self.on_stop = on_stop
        self.turn_seq: int | None = None
        self.attached = True
        self._buf: list[str] = []
        self._closed = False
        self._wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.tasks = tasks  # the server's: it cancels those still going at shutdown
        self.writes = 0

    def push(self, frame: str) -> None:
        self._buf.append(frame)
        if len(self._buf) == 1:
            self._wake.set()

    def detach(self) -> None:
        self.attached = False
        self._wake.set()

    def start(self, turn_seq: int) -> None:
        self.turn_seq = turn_seq
        self.task = asyncio.get_running_loop().create_task(self._run())
        self.tasks.add(self.task)
        self.task.add_done_callback(self.tasks.discard)

    def close(self) -> None:
        self._closed = True
        self._wake.set()

    async def _run(self) -> None:
        assert self.turn_seq is not None
        loop = asyncio.get_running_loop()
        last = -self.interval
        stopped = False
        attached_written = True
        sent: list[str] = []  # every frame written: what a replaced stream is written again from
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), _IDLE_POLL)
                self._wake.clear()
                wait = last + self.interval - loop.time()
                if wait > 0 and not self._closed:
                    await asyncio.sleep(wait)
                batch, self._buf = self._buf, []
                done = self._closed
                attached = self.attached
                last = loop.time()
                hdr: LiveHeader | None
                hdr, _ = await asyncio.to_thread(self.live.read, self.thread_id, after=0, limit=0)
                # A write for another turn replaces the thread's entries, and a stopped run's last
                # writes can come after the next run's first (its replay would start mid-text):
                if hdr is not None and hdr.turn_seq > self.turn_seq:
                    break  # a newer turn streams now (ours ended): leave its entries alone
                if sent and (hdr is None or hdr.turn_seq != self.turn_seq):
                    batch = sent + batch  # an older turn's late write replaced ours: ours again, whole
                if batch or done or attached != attached_written:
                    sent += batch
                    data = ["".join(batch).encode()] if batch else []
                    hdr = await asyncio.to_thread(
                        self.live.write, self.thread_id, self.turn_seq, data, done=done, attached=attached,
                        owner=OWNER)
                    self.writes += 1
                    attached_written = attached
                if hdr is not None and hdr.stop and not stopped and not done:
                    stopped = True
                    self.on_stop()
                if done:
                    break
        except Exception as exc:  # the run goes on; its stream is just not resumable any more
            log.warning("thread %s: the live stream table failed (%s: %s); the stream cannot be resumed",
                        self.thread_id, type(exc).__name__, exc)



async def sweeper(live: LiveStreams, *, every: float = _LINGER, stale: float = _STALE) -> None:
    """Drop ended streams ``every`` seconds after they ended (readers still catching up have that
    long), and streams whose writer died (not written for ``stale`` seconds). Runs until cancelled."""
    while True:
        await asyncio.sleep(every)
        now = time.time_ns()
        try:
            await asyncio.to_thread(live.sweep, done_before=now - int(every * 1e9), stale_before=now - int(stale * 1e9))
        except Exception as exc:  # pragma: no cover - the store closed under us, a full disk: try again later
            log.warning("sweeping the live stream table failed: %s: %s", type(exc).__name__, exc)


async def resume_response(srv: Any, thread_id: str) -> Response:
    """``GET /api/chat/{id}/stream``: 204, or the open turn's UI stream from its start, then live."""
    from starlette.responses import Response

    store = srv.store
    live: LiveStreams = srv.live
    no_content = Response(status_code=204, headers={"x-tplog-worker": str(os.getpid())})
    try:
        head = await asyncio.to_thread(store.head, thread_id)
    except NotFoundError:  # a chat that has not sent anything yet
        return no_content
    if head.status == "deleted" or head.open_turn_agent is None:
        return no_content
    seq = head.open_turn_seq
    deadline = time.monotonic() + _RESUME_WAIT
    while True:  # the run's first batch may not be written yet
        hdr, _ = await asyncio.to_thread(live.read, thread_id, after=0, limit=0)
        if hdr is not None and hdr.turn_seq == seq:
            break
        if time.monotonic() > deadline:
            return no_content  # an open turn nobody streams (recorded by another program): nothing to resume
        head = await asyncio.to_thread(store.head, thread_id)
        if head.open_turn_agent is None or head.open_turn_seq != seq:
            return no_content
        await asyncio.sleep(srv.tail_poll)

    async def body() -> AsyncIterator[str]:
        # Woken by this worker's live writes of the thread (srv.live_wakeups); a run in another
        # worker is polled every tail_poll. The readers of a thread share their reads (srv.live_reads),
        # by the live table's key: the thread's in this request's scope.
        loop = asyncio.get_running_loop()
        wakeups = srv.live_wakeups
        key = srv.live_key(thread_id)
        replay = Replay()
        with srv.live_reads.reading(key), wakeups.watching(key):
            after = 0
            sent = loop.time()
            while True:
                woken = wakeups.event(key)  # before the read: a write after it wakes us
                h, batches = await srv.live_reads.read(key, after=after)
                if h is None or h.turn_seq != seq:  # expired: the turn ended long ago
                    return
                if batches:  # one send for all of them
                    yield replay.frames(b"".join(batches).decode())
                after += len(batches)
                if h.done and after >= h.batches:
                    return
                if srv.closing:
                    return
                now = loop.time()
                if batches:
                    sent = now
                elif now - sent >= srv.heartbeat:
                    sent = now
                    yield ": keep-alive\n\n"
                local = bool(srv.runs_of(thread_id))
                if batches:  # what arrives meanwhile goes out in one send
                    await asyncio.sleep(_RESUME_GAP)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), max(0.0, srv.heartbeat - (now - sent)) if local else
                                           srv.tail_poll)

    return SSEResponse(
        body(),
        media_type="text/event-stream",
        headers={**UI_STREAM_HEADERS, "x-tplog-thread": header_safe(thread_id), "x-tplog-worker": str(os.getpid())},
    )


class Replay:
    """Keeps a replayed stream processable by the AI SDK (its processor refuses a delta or end of a
    part it never saw start): a text/reasoning part whose start the stored stream lacks (its first
    batches were lost, e.g. replaced by a late write of the previous turn) gets its ``*-start``
    before its first chunk; tool input deltas of a call never started are dropped (its
    ``tool-input-available`` carries the whole input), as are outputs of calls never announced."""

    _STARTS: Final = {"text-start": "text", "reasoning-start": "reasoning", "tool-input-start": "tool"}
    _CONTINUES: Final = {"text-delta": "text", "text-end": "text", "reasoning-delta": "reasoning",
                         "reasoning-end": "reasoning"}
    _NEEDS_CALL: Final = frozenset({"tool-input-delta", "tool-output-available", "tool-output-error",
                                    "tool-output-denied", "tool-approval-request"})

    def __init__(self) -> None:
        self.opened: set[tuple[str, str]] = set()

    def frames(self, text: str) -> str:
        """``text`` (whole SSE frames) with what a client needs before each frame."""
        out: list[str] = []
        for frame in text.split("\n\n"):
            chunk = _chunk(frame)
            kind = chunk.get("type") if chunk is not None else None
            if chunk is None or not isinstance(kind, str):
                pass
            elif kind in self._STARTS or kind == "tool-input-available":
                self.opened.add((self._STARTS.get(kind, "tool"), str(chunk.get("id", chunk.get("toolCallId")))))
            elif kind in self._CONTINUES and (self._CONTINUES[kind], str(chunk.get("id"))) not in self.opened:
                self.opened.add((self._CONTINUES[kind], str(chunk.get("id"))))
                start = {"type": f"{self._CONTINUES[kind]}-start", "id": chunk.get("id")}
                out.append(f"data: {json.dumps(start, separators=(',', ':'))}\n\n")
            elif kind in self._NEEDS_CALL and ("tool", str(chunk.get("toolCallId"))) not in self.opened:
                continue
            if frame:
                out.append(frame + "\n\n")
        return "".join(out)


def _chunk(frame: str) -> dict[str, Any] | None:
    """The chunk of an SSE ``data:`` frame (``None`` for comments, ``[DONE]``, anything else)."""
    if not frame.startswith("data: {"):
        return None
    try:
        value: dict[str, Any] = json.loads(frame[6:])  # an object: it starts with "{"
    except ValueError:  # not ours to judge: passed on as it is
        return None
    return value


async def settle_open_turn(srv: Any, thread_id: str, head: Any) -> Any:
    """A new message for a thread whose turn ``head`` shows open: return the head once the turn is
    closed; :class:`~tplog.integrations.server.HTTPError` 409 ``turn_open`` if it stays open."""
    mode: AfterStop = srv.after_stop
    seq = head.open_turn_seq

    def conflict(why: str) -> HTTPError:
        return HTTPError(
            409,
            "turn_open",
            f"thread {thread_id}: the agent turn of {head.open_turn_agent!r} opened at seq {seq} {why}; wait for it "
            "(GET /api/chat/{id}/stream or /threads/{id}/events) before sending another message",
        )

    if mode == "reject":
        raise conflict("is still running")
    start = time.monotonic()
    stop_sent = False
    while True:
        local = [r for r in srv.runs_of(thread_id) if r.task is not None and not r.task.done()]
        if local:
            attached = any(r.attached for r in local)
        else:
            hdr, _ = await asyncio.to_thread(srv.live.read, thread_id, after=0, limit=0)
            mine = hdr is not None and hdr.turn_seq == seq and not hdr.done
            attached = bool(mine and hdr is not None and hdr.attached)
        waited = time.monotonic() - start
        if attached and waited > _DETACH_GRACE:
            raise conflict("is still streaming to its client")
        if not attached and mode == "interrupt" and not stop_sent:
            if local:
                for r in local:
                    r.stop()
                stop_sent = True
            else:
                stop_sent = await asyncio.to_thread(srv.live.request_stop, thread_id, seq)
        if waited > srv.after_stop_wait:
            raise conflict(f"did not end within {srv.after_stop_wait:g} s")
        mark = srv.watcher.pos
        cur = await asyncio.to_thread(srv.store.head, thread_id)
        if cur.open_turn_agent is None:
            return cur
        if cur.open_turn_seq != seq:
            raise conflict("ended, and another turn is running now")
        await srv.watcher.wait(mark, 0.1)
