"""The server wrapper: an agent run through a recorder, streamed as UI chunks with tplog's
``data-tp-*`` notices (:func:`recorded_vercel_stream`, :func:`ui_request`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from typing import Any

from tplog.errors import InvalidInputError
from tplog.events import (
    AgentTurnCompleted,
    AgentTurnInterrupted,
    AgentTurnStarted,
    Event,
    MessageRecorded,
    UserTurnSubmitted,
)
from tplog.integrations.vercel.body import (
    check_user_message,
    client_tool_results,
    load_user_message,
    parts_of_body,
    unanswered_calls,
)
from tplog.integrations.vercel.chunks import TP_MESSAGE, TP_TURN_END, TP_TURN_START, TP_USER_TURN, parse_sse
from tplog.integrations.vercel.stream import MISSING, Cursor, StreamState, resolve_part
from tplog.protocol import model as m
from tplog.protocol.json import to_builtins

__all__ = ["recorded_vercel_stream", "ui_request"]


# --------------------------------------------------------------------------- server wrapper


def _notices(events: list[Event], st: StreamState, body_parts: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The ``data-tp-*`` chunks for a turn's recorded events, using stream references where exact."""
    cur = Cursor(st)
    chunks: list[dict[str, Any]] = []

    def ref(part: dict[str, Any], body: bool = False, index: int = 0) -> dict[str, Any]:
        kind = part.get("part_kind")
        cand: dict[str, Any] | None = None
        if body:
            cand = {k: v for k, v in part.items() if k != "content"}
            cand.update({"$from": "body", "$index": index})
        elif kind in ("text", "thinking") and isinstance(part.get("content"), str):
            cand = {k: v for k, v in part.items() if k != "content"}
            cand.update({"$from": "stream", "$len": len(part["content"])})
        elif kind == "tool-call" and "args" in part:
            cand = {k: v for k, v in part.items() if k != "args"}
            cand["$from"] = "stream"
        elif kind == "tool-return" and "content" in part:
            cand = {k: v for k, v in part.items() if k != "content"}
            cand["$from"] = "stream"
        elif kind == "file" and isinstance(part.get("content"), dict):
            content = {k: v for k, v in part["content"].items() if k != "data"}
            cand = {**part, "content": content, "$from": "stream"}
        if cand is None:
            return part
        trial = copy.copy(cur)
        trial.texts, trial.reasonings, trial.files = list(cur.texts), list(cur.reasonings), list(cur.files)
        got = resolve_part(cand, trial, body_parts)
        if got is not MISSING and got == part:
            cur.texts, cur.reasonings, cur.files = trial.texts, trial.reasonings, trial.files
            return cand
        return part

    for ev in events:
        if isinstance(ev, UserTurnSubmitted):
            turn = to_builtins(ev.turn)
            turn["parts"] = [ref(p, body=True, index=i) for i, p in enumerate(turn.get("parts", []))]
            chunks.append({"type": TP_USER_TURN, "data": {"turn": turn}})
        elif isinstance(ev, AgentTurnStarted):
            data: dict[str, Any] = {"agent_id": ev.agent_id, "started_at": ev.started_at}
            if ev.extra:
                data["extra"] = ev.extra
            chunks.append({"type": TP_TURN_START, "data": data})
        elif isinstance(ev, MessageRecorded):
            msg = to_builtins(ev.message)
            if "parts" in msg:
                msg["parts"] = [ref(p) for p in msg["parts"]]
            chunks.append({"type": TP_MESSAGE, "data": {"message": msg}})
        elif isinstance(ev, AgentTurnCompleted):
            data = {"deferred": ev.deferred}
            if isinstance(ev.completed_at, str):
                data["completed_at"] = ev.completed_at
            if ev.total_usage is not m.UNSET and ev.total_usage is not None:
                data["total_usage"] = to_builtins(ev.total_usage)
            chunks.append({"type": TP_TURN_END, "data": data})
        elif isinstance(ev, AgentTurnInterrupted):
            data = {"interruption": to_builtins(ev.interruption)}
            if ev.total_usage is not m.UNSET and ev.total_usage is not None:
                data["total_usage"] = to_builtins(ev.total_usage)
            chunks.append({"type": TP_TURN_END, "data": data})
    return chunks


def ui_request(body: Any) -> dict[str, Any]:
    """``body`` as a Vercel AI UI request, checked: ``trigger`` defaults to ``"submit-message"``
    (as ``tplog serve`` does); :class:`~tplog.InvalidInputError` naming the field otherwise.

    Call it before writing anything for the request (e.g. before starting the thread):
    :func:`recorded_vercel_stream` checks the body only once it is iterated.
    """
    import pydantic
    from pydantic_ai.ui.vercel_ai.request_types import RequestData

    if not isinstance(body, dict):
        raise InvalidInputError(f"a UI request body must be a JSON object, not {type(body).__name__}")
    checked: dict[str, Any] = {"trigger": "submit-message", **body}
    try:
        pydantic.TypeAdapter(RequestData).validate_python(checked)
    except pydantic.ValidationError as exc:
        err = exc.errors(include_url=False, include_input=False)[0]
        # pydantic's location also names the union members it tried (the trigger, model classes): not JSON keys
        keys = [p for i, p in enumerate(err["loc"])
                if not (i == 0 and p == checked.get("trigger")) and not (isinstance(p, str) and p[:1].isupper())]
        loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in keys)
        raise InvalidInputError(f"not a Vercel AI UI request: {err['msg']}", path=f"${loc}") from None
    check_user_message(checked)
    return checked


async def recorded_vercel_stream(
    recorder: Any,
    agent: Any,
    request_body: dict[str, Any] | None = None,
    *,
    agent_id: str,
    user_prompt: Any = None,
    sdk_version: int = 6,
    transient: bool = True,
    message_id: str | None = None,
    **run_kwargs: Any,
) -> AsyncIterator[str]:
    """Run ``agent`` for a UI request, record it with ``recorder`` and yield the SSE stream with ``data-tp-*``.

    ``transient`` (default): the ``data-tp-*`` chunks are sent ``"transient": true``, so the AI SDK
    client hands them to ``onData`` and does not keep them as parts of the assistant message (which
    it would otherwise send back with every request); ``False`` keeps them as message parts.
    ``message_id``: the assistant message's id, sent in the ``start`` chunk (``messageId``).

    The user prompt is taken from the request body's last message when it is
    the user's (``user_prompt`` overrides); for a continuation (its last
    message the assistant's) the approvals in the body (sdk v6) and the
    client's tool results (:func:`client_tool_results`, for calls of
    ``message_history``'s last response still unanswered) become
    ``deferred_tool_results`` unless given (without ``message_history``, which
    holds the calls they answer: :class:`~tplog.InvalidInputError`). The recorder is a
    :class:`~tplog.integrations.pydantic_ai.ThreadRecorder`; remaining
    keywords go to the run (``message_history``, ``cancellation_token``,
    ``timeout``, ``handoff_from``, ...).
    """
    import pydantic
    from pydantic_ai.messages import UserPromptPart
    from pydantic_ai.ui.vercel_ai import VercelAIAdapter, VercelAIEventStream
    from pydantic_ai.ui.vercel_ai.request_types import RequestData

    body = ui_request(request_body or {"id": "tplog", "messages": []})
    run_input = pydantic.TypeAdapter(RequestData).validate_python(body)
    if user_prompt is None and check_user_message(body) is not None:
        loaded = load_user_message(run_input.messages[-1])
        prompts = [p for p in loaded[-1].parts if isinstance(p, UserPromptPart)] if loaded else []
        if prompts:
            user_prompt = prompts[0].content
    if "deferred_tool_results" not in run_kwargs:
        from pydantic_ai import DeferredToolResults, ToolFailed

        approvals: dict[str, Any] = {}
        if sdk_version >= 6:
            adapter = VercelAIAdapter(agent=agent, run_input=run_input, sdk_version=sdk_version)  # type: ignore[arg-type]
            dtr = adapter.deferred_tool_results
            approvals = dict(dtr.approvals) if dtr is not None else {}
        results = client_tool_results(body)
        if (approvals or results) and not run_kwargs.get("message_history"):
            # the calls these answer are in the thread's history: without it the run cannot resume them
            raise InvalidInputError(
                f"the request answers tool calls {sorted({*approvals, *results})} but no message_history was "
                "given: pass the thread's (history_from_thread), which holds the calls waiting for them",
                path=f"$.messages[{len(body['messages']) - 1}]")
        waiting = unanswered_calls(run_kwargs.get("message_history"))
        calls: dict[str, Any] = {
            cid: (ToolFailed(value) if kind == "error" else value)
            for cid, (kind, value) in results.items()
            if cid in waiting and cid not in approvals
        }
        if approvals or calls:
            run_kwargs["deferred_tool_results"] = DeferredToolResults(approvals=approvals, calls=calls)
    body_parts = parts_of_body(body)
    stream = VercelAIEventStream(run_input, sdk_version=sdk_version, server_message_id=message_id)  # type: ignore[arg-type]
    recorded: list[Event] = []
    ended = False
    state = StreamState(lenient=True)

    def listener(events: list[Event]) -> None:
        nonlocal ended
        for ev in events:
            if isinstance(
                ev, UserTurnSubmitted | AgentTurnStarted | MessageRecorded | AgentTurnCompleted | AgentTurnInterrupted
            ):
                recorded.append(ev)
            if isinstance(ev, AgentTurnCompleted | AgentTurnInterrupted):
                ended = True

    recorder.listeners.append(listener)
    flushed = False
    try:
        async with recorder.iter_events(
            agent, user_prompt, agent_id=agent_id, raise_cancelled=True, **run_kwargs
        ) as native:
            ui = stream.transform_stream(native)
            try:
                async for chunk in ui:
                    if (
                        ended
                        and not flushed
                        and getattr(chunk, "type", None) in ("finish", "abort", "error", "finish-step", "done")
                    ):
                        flushed = True
                        for notice in _notices(recorded, state, body_parts):
                            if transient:
                                notice["transient"] = True
                            line = json.dumps(notice, separators=(",", ":"))
                            state.feed(json.loads(line))
                            yield f"data: {line}\n\n"
                    encoded = stream.encode_event(chunk)
                    for c in parse_sse(encoded):
                        state.feed(c)
                    yield encoded
            finally:
                # closed here, inside the run's context: left to the garbage collector, its own
                # cleanup would close the native stream a second time, from another task
                await ui.aclose()  # type: ignore[attr-defined]
    finally:
        recorder.listeners.remove(listener)
