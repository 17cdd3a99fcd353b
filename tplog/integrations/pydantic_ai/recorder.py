"""The live recorder: :class:`ThreadRecorder` records Pydantic AI runs into a thread, message by
message, as they happen (:class:`RecordedRun` is what a run returns).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from pydantic_ai import messages as pm
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.exceptions import RunCancelled, RunTimedOut
from pydantic_ai.run import AgentRunResultEvent

try:  # DeferredToolRequests lives in pydantic_ai.tools / pydantic_ai._deferred
    from pydantic_ai import DeferredToolRequests
except ImportError:  # pragma: no cover
    from pydantic_ai.tools import DeferredToolRequests

from tplog.errors import InvalidInputError, TplogError
from tplog.events import (
    AgentRegistered,
    AgentTurnCompleted,
    AgentTurnInterrupted,
    AgentTurnStarted,
    Event,
    LinkAdded,
    MessageRecorded,
    ThreadStarted,
    UserTurnSubmitted,
)
from tplog.integrations.pydantic_ai.mapping import (
    Append,
    is_user_request,
    message_to_tp,
    now_iso,
    run_usage_to_tp,
    user_turn_from_request,
)
from tplog.integrations.pydantic_ai.unstreamed import can_stream, node_events, run_model
from tplog.protocol import model as m

__all__ = ["RecordedRun", "ThreadRecorder", "pm_capture"]

log = logging.getLogger("tplog.recorder")


# --------------------------------------------------------------------------- live recorder


class RecordedRun:
    """What :meth:`ThreadRecorder.run` returns.

    ``result`` is the ``AgentRunResult`` (``None`` if interrupted);
    ``interruption`` the recorded :class:`~tplog.Interruption` (``None`` if the
    turn completed); ``deferred`` the ``tool_call_id -> "approval"|"external"``
    map recorded on completion; ``error`` the exception that interrupted it.
    """

    def __init__(self) -> None:
        self.result: Any = None
        self.interruption: m.Interruption | None = None
        self.deferred: dict[str, str] = {}
        self.error: BaseException | None = None
        self.events: list[Event] = []

    @property
    def output(self) -> Any:
        return None if self.result is None else self.result.output


class ThreadRecorder:
    """Records Pydantic AI runs into a thread, message by message, as they happen.

    ``append(events)`` writes events to the thread (e.g. ``lambda evs:
    store.append(thread_id, evs)``, or an async equivalent). ``clock()``
    returns ISO-8601 strings (default: now, UTC). ``listeners`` receive every
    list of events right after it was appended (the Vercel wrapper uses this).

    One run at a time per recorder. Per run the recorder appends: the user turn
    (when a prompt is given) with ``AgentTurnStarted``; each ``ModelRequest`` /
    ``ModelResponse`` as ``MessageRecorded`` once it is complete; then
    ``AgentTurnCompleted`` (``deferred`` lists tool calls the run ended on:
    ``"approval"`` or ``"external"``) or ``AgentTurnInterrupted`` with reason
    ``user_cancelled`` (``RunCancelled`` / ``CancelledError``), ``timeout``
    (``RunTimedOut``) or ``error`` (any other exception, re-raised).
    """

    def __init__(
        self,
        append: Append,
        thread_id: str,
        *,
        clock: Callable[[], str] | None = None,
    ) -> None:
        self._append = append
        self.thread_id = thread_id
        self.clock = clock or now_iso
        self.listeners: list[Callable[[list[Event]], Any]] = []
        self._turn_open = False
        self._agent_id: str | None = None
        #: Every message of the last run (Pydantic AI's own, including partial ones), for inspection.
        self.last_run_messages: list[pm.ModelMessage] = []

    # -- plumbing

    async def emit(self, events: list[Event]) -> None:
        """Append ``events`` (awaiting an async ``append``) and tell the listeners."""
        if not events:
            return
        res = self._append(list(events))
        if inspect.isawaitable(res):
            await res
        for listener in list(self.listeners):
            r = listener(list(events))
            if inspect.isawaitable(r):
                await r

    # -- thread-level facts

    async def start_thread(
        self,
        *,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        created_at: str | None = None,
    ) -> None:
        ev = ThreadStarted(
            thread_id=self.thread_id,
            created_at=created_at or self.clock(),
            title=title if title is not None else m.UNSET,
            metadata=metadata if metadata is not None else m.UNSET,
        )
        await self.emit([ev])

    async def register_agent(
        self,
        agent_id: str,
        agent_name: str,
        *,
        model_name: str | None = None,
        provider_name: str | None = None,
        created_at: str | None = None,
    ) -> None:
        cfg = m.AgentConfig(
            agent_id=agent_id,
            agent_name=agent_name,
            model_name=model_name if model_name is not None else m.UNSET,
            provider_name=provider_name if provider_name is not None else m.UNSET,
            created_at=created_at or self.clock(),
        )
        await self.emit([AgentRegistered(agent=cfg)])

    async def add_link(self, thread_id: str, relation: str, metadata: Any = m.UNSET) -> None:
        await self.emit(
            [LinkAdded(link=m.ThreadLink(thread_id=thread_id, relation=relation, metadata=metadata), at=self.clock())]
        )

    async def system_message(
        self,
        event_type: str,
        event_data: Any = m.UNSET,
        *,
        agent_id: str | None = None,
        source_agent: str | None = None,
        target_agents: list[str] | None = None,
    ) -> m.SystemMessage:
        """Record a system message in the open agent turn (or in a turn of its own if none is open)."""
        msg = m.SystemMessage(
            timestamp=self.clock(),
            event_type=event_type,
            event_data=event_data,
            source_agent=source_agent if source_agent is not None else m.UNSET,
            target_agents=target_agents if target_agents is not None else m.UNSET,
        )
        if self._turn_open:
            await self.emit([MessageRecorded(message=msg)])
        else:
            aid = agent_id or source_agent or self._agent_id
            if aid is None:
                raise InvalidInputError("no agent turn is open: pass agent_id")
            await self.emit(
                [
                    AgentTurnStarted(agent_id=aid, started_at=msg.timestamp),
                    MessageRecorded(message=msg),
                    AgentTurnCompleted(completed_at=msg.timestamp),
                ]
            )
        return msg

    async def spawn(
        self,
        child_append: Append,
        *,
        child_thread_id: str | None = None,
        agent_id: str | None = None,
        title: str | None = None,
        metadata: Any = m.UNSET,
    ) -> ThreadRecorder:
        """Spawn a child thread: ``data-tp-thread_spawn`` here, ``LinkAdded(spawned_from)`` there.

        Returns the child's recorder (same clock).
        """
        child_id = child_thread_id or str(uuid.uuid4())
        await self.system_message(
            m.THREAD_SPAWN, {"spawned_thread_id": child_id}, agent_id=agent_id, source_agent=agent_id
        )
        child = ThreadRecorder(child_append, child_id, clock=self.clock)
        await child.start_thread(title=title)
        await child.emit(
            [
                LinkAdded(
                    link=m.ThreadLink(thread_id=self.thread_id, relation="spawned_from", metadata=metadata),
                    at=self.clock(),
                )
            ]
        )
        return child

    # -- runs

    async def run(self, agent: AbstractAgent[Any, Any], user_prompt: Any = None, **kwargs: Any) -> RecordedRun:
        """Run ``agent`` and record it. Same keywords as :meth:`iter_events`.

        ``RunCancelled``/``RunTimedOut`` are recorded and swallowed (see
        ``RecordedRun.interruption``); other exceptions are recorded and re-raised.
        """
        rec = RecordedRun()
        async with self.iter_events(agent, user_prompt, recorded=rec, **kwargs) as events:
            async for _ in events:
                pass
        return rec

    @asynccontextmanager
    async def iter_events(
        self,
        agent: AbstractAgent[Any, Any],
        user_prompt: Any = None,
        *,
        agent_id: str,
        message_history: Sequence[pm.ModelMessage] | None = None,
        deferred_tool_results: Any = None,
        client_metadata: dict[str, Any] | None = None,
        handoff_from: str | None = None,
        recorded: RecordedRun | None = None,
        raise_cancelled: bool = False,
        **run_kwargs: Any,
    ) -> AsyncIterator[AsyncIterator[Any]]:
        """Run ``agent`` with ``run_stream_events`` and record it; yields the native event stream.

        A model that cannot stream (:func:`~tplog.integrations.pydantic_ai.can_stream`: e.g.
        ``FunctionModel(fn)`` without a ``stream_function``) runs node by node (``agent.iter``),
        recorded the same way; its stream gives each response's parts whole, without deltas.

        The stream is what ``UIEventStream.transform_stream`` consumes (it ends
        with the ``AgentRunResultEvent``). On ``RunCancelled`` the turn is
        recorded as interrupted and the exception re-raised inside the stream
        only when ``raise_cancelled`` (the Vercel wrapper sets it, so
        Pydantic AI's adapter emits its ``abort`` chunk).
        """
        rec = recorded if recorded is not None else RecordedRun()
        run_id = run_kwargs.pop("run_id", None) or str(uuid.uuid4())
        stream = self._record_stream(
            agent,
            user_prompt,
            agent_id=agent_id,
            run_id=run_id,
            message_history=message_history,
            deferred_tool_results=deferred_tool_results,
            client_metadata=client_metadata,
            handoff_from=handoff_from,
            rec=rec,
            raise_cancelled=raise_cancelled,
            run_kwargs=run_kwargs,
        )
        try:
            yield stream
        finally:
            await stream.aclose()

    async def _record_stream(
        self,
        agent: AbstractAgent[Any, Any],
        user_prompt: Any,
        *,
        agent_id: str,
        run_id: str,
        message_history: Sequence[pm.ModelMessage] | None,
        deferred_tool_results: Any,
        client_metadata: dict[str, Any] | None,
        handoff_from: str | None,
        rec: RecordedRun,
        raise_cancelled: bool,
        run_kwargs: dict[str, Any],
    ) -> AsyncGenerator[Any, None]:
        if self._turn_open:
            raise InvalidInputError("a run is already being recorded on this recorder")
        started_at = self.clock()
        state = _RunState(agent_id=agent_id, run_id=run_id, started_at=started_at)
        state.user_prompt = user_prompt
        state.client_metadata = client_metadata
        state.handoff_from = handoff_from
        self._agent_id = agent_id
        captured: list[pm.ModelMessage] = []
        result: Any = None
        try:
            with pm_capture() as captured:
                self.last_run_messages = captured
                kw: dict[str, Any] = dict(
                    message_history=message_history,
                    deferred_tool_results=deferred_tool_results,
                    run_id=run_id,
                    **run_kwargs,
                )
                # a model that cannot stream runs node by node: the same events, minus the deltas
                if can_stream(run_model(agent, run_kwargs.get("model"))):
                    native = agent.run_stream_events(user_prompt, **kw)
                else:
                    native = node_events(agent, user_prompt, **kw)
                async with native as events:
                    async for ev in events:
                        await self._sync(state, captured)
                        if isinstance(ev, AgentRunResultEvent):
                            result = ev.result
                        yield ev
                await self._sync(state, captured)
        except RunCancelled as exc:
            await self._sync_last(state, captured)
            reason = "timeout" if isinstance(exc, RunTimedOut) else "user_cancelled"
            await self._interrupt(state, rec, reason, exc, usage=exc.usage)
            if raise_cancelled:
                raise
            return
        except asyncio.CancelledError as exc:
            await self._sync_last(state, captured)
            rc = RunCancelled.from_cancellation(exc)
            await self._interrupt(state, rec, "user_cancelled", exc, usage=rc.usage if rc else None)
            raise
        except GeneratorExit:
            # The consumer stopped reading (e.g. the HTTP client went away).
            await self._sync_last(state, captured)
            await self._interrupt(state, rec, "user_cancelled", None, usage=None)
            raise
        except Exception as exc:
            await self._sync_last(state, captured)
            await self._interrupt(state, rec, "error", exc, usage=None)
            raise
        await self._complete(state, rec, result)

    async def _open(self, state: _RunState, first: pm.ModelMessage | None) -> None:
        events: list[Event] = []
        if state.user_prompt is not None:
            if first is not None and is_user_request(first):
                turn = user_turn_from_request(
                    first,  # type: ignore[arg-type]
                    submitted_at=state.started_at,
                    client_metadata=state.client_metadata,
                )
            else:
                turn = _user_turn_from_prompt(state.user_prompt, state.started_at, state.client_metadata)
            events.append(UserTurnSubmitted(turn=turn))
        events.append(AgentTurnStarted(agent_id=state.agent_id, started_at=state.started_at))
        if state.handoff_from is not None:
            events.append(
                MessageRecorded(
                    message=m.SystemMessage(
                        timestamp=state.started_at,
                        event_type=m.AGENT_HANDOFF,
                        event_data={"from_agent": state.handoff_from, "to_agent": state.agent_id},
                        source_agent=state.handoff_from,
                        target_agents=[state.agent_id],
                    )
                )
            )
        try:
            await self.emit(events)
        except BaseException:
            state.open_failed = True  # nothing of the turn was recorded: do not try to close it
            raise
        state.opened = True
        self._turn_open = True

    async def _sync_last(self, state: _RunState, captured: list[pm.ModelMessage]) -> None:
        """The last sync of a run that failed or stopped: a message the store refuses (maybe the
        run's very error) is left out, so the turn's interruption is still recorded."""
        try:
            await self._sync(state, captured, final=True)
        except TplogError as exc:
            log.warning("thread %s: a message of the ended run was not recorded: %s", self.thread_id, exc)

    async def _sync(self, state: _RunState, captured: list[pm.ModelMessage], *, final: bool = False) -> None:
        """Record the run's messages that are complete and not yet recorded."""
        mine = [msg for msg in captured if msg.run_id == state.run_id]
        while state.n < len(mine):
            msg = mine[state.n]
            if msg.state != "complete":
                if isinstance(msg, pm.ModelResponse) and msg.state == "incomplete" and not final:
                    break
                state.n += 1  # interrupted: never recorded
                continue
            if not state.opened:
                state.n += 1
                await self._open(state, msg)
                if is_user_request(msg) and state.user_prompt is not None:
                    continue
            else:
                state.n += 1
            tp = message_to_tp(msg, state.agent_id, default_timestamp=state.last_ts)
            state.last_ts = tp.timestamp
            await self.emit([MessageRecorded(message=tp)])
        if final and not state.opened:
            await self._open(state, None)

    async def _complete(self, state: _RunState, rec: RecordedRun, result: Any) -> None:
        if not state.opened:
            await self._open(state, None)
        deferred: dict[str, str] = {}
        output = getattr(result, "output", None)
        if isinstance(output, DeferredToolRequests):
            for call in output.approvals:
                deferred[call.tool_call_id] = "approval"
            for call in output.calls:
                deferred[call.tool_call_id] = "external"
        usage = run_usage_to_tp(result.usage) if result is not None else None
        ev = AgentTurnCompleted(
            completed_at=self.clock(), total_usage=usage if usage is not None else m.UNSET, deferred=deferred
        )
        self._turn_open = False
        await self.emit([ev])
        rec.result = result
        rec.deferred = deferred
        rec.events.append(ev)

    async def _interrupt(
        self, state: _RunState, rec: RecordedRun, reason: str, exc: BaseException | None, *, usage: Any
    ) -> None:
        if state.open_failed:
            return
        if not state.opened:
            await self._open(state, None)
        tp_usage = run_usage_to_tp(usage) if usage is not None else None
        interruption = m.Interruption(reason=reason, interrupted_at=self.clock())
        ev = AgentTurnInterrupted(interruption=interruption, total_usage=tp_usage if tp_usage is not None else m.UNSET)
        self._turn_open = False
        await self.emit([ev])
        rec.interruption = interruption
        rec.error = exc
        rec.events.append(ev)


class _RunState:
    open_failed = False

    def __init__(self, *, agent_id: str, run_id: str, started_at: str) -> None:
        self.agent_id = agent_id
        self.run_id = run_id
        self.started_at = started_at
        self.last_ts = started_at
        self.n = 0
        self.opened = False
        self.user_prompt: Any = None
        self.client_metadata: dict[str, Any] | None = None
        self.handoff_from: str | None = None


def _user_turn_from_prompt(prompt: Any, submitted_at: str, client_metadata: dict[str, Any] | None) -> m.UserTurn:
    req = pm.ModelRequest(parts=[pm.UserPromptPart(prompt if isinstance(prompt, str) else list(prompt))])
    return user_turn_from_request(req, submitted_at=submitted_at, client_metadata=client_metadata)


def pm_capture() -> Any:
    from pydantic_ai import capture_run_messages

    return capture_run_messages()
