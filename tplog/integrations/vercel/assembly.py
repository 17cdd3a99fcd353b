"""Client assembly: a UI message stream (plus its request body) -> the turn's tplog events
(:class:`StreamAssembler`, :func:`assemble_turn`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final, cast

from tplog.errors import ValidationError
from tplog.events import (
    AgentRegistered,
    AgentTurnCompleted,
    AgentTurnInterrupted,
    AgentTurnStarted,
    Event,
    MessageRecorded,
    ThreadStarted,
    UserTurnSubmitted,
)
from tplog.integrations.vercel.body import body_tool_calls, parts_of_body, user_turn_from_body
from tplog.integrations.vercel.chunks import (
    TP_MESSAGE,
    TP_TURN_END,
    TP_TURN_START,
    TP_USER_TURN,
    MalformedChunkError,
    now,
    parse_sse,
)
from tplog.integrations.vercel.stream import MISSING, Call, Cursor, StreamState, data_uri_payload, resolve_part
from tplog.projections.fold import fold
from tplog.protocol import model as m
from tplog.protocol.json import from_builtins
from tplog.protocol.validate import ValidationReport, validate

__all__ = ["StreamAssembler", "assemble_turn"]


# --------------------------------------------------------------------------- assembly


class StreamAssembler:
    """Assembles one agent turn (plus its user turn) from a UI message stream.

    ``feed()`` chunk dicts or ``"[DONE]"``; ``feed_sse()`` raw SSE text; then
    ``events()``. ``agent_id`` and ``clock`` are only used for streams without
    ``data-tp-*`` chunks.
    """

    def __init__(
        self,
        request_body: dict[str, Any] | None = None,
        *,
        agent_id: str = "agent",
        clock: Callable[[], str] | None = None,
        known_tool_calls: dict[str, str] | None = None,
    ) -> None:
        if request_body is not None and not isinstance(request_body, dict):
            raise MalformedChunkError(
                f"the UI request body must be a JSON object, not {type(request_body).__name__}")
        self.body = request_body
        self.agent_id = agent_id
        self.clock = clock or now
        known = body_tool_calls(request_body)
        known.update(known_tool_calls or {})
        self.state = StreamState(known)
        self._start_time: str | None = None

    def feed(self, chunk: dict[str, Any] | str) -> None:
        if self._start_time is None:
            self._start_time = self.clock()
        self.state.feed(chunk)

    def feed_sse(self, text: str | bytes) -> None:
        for chunk in parse_sse(text):
            self.feed(chunk)

    def events(self) -> list[Event]:
        """The turn's events. Call once the input is over (complete or broken off)."""
        st = self.state
        st._close_step(complete=st.terminal is not None and st.terminal[0] == "finish")
        has_end = any(k == TP_TURN_END for k, _ in st.notices)
        out = self._from_notices() if st.notices and has_end else self._plain()
        _check_turn(out)
        return out

    # -- exact mode

    def _from_notices(self) -> list[Event]:
        st = self.state
        cur = Cursor(st)
        body_parts = parts_of_body(self.body)
        out: list[Event] = []
        dropped = False
        for kind, data in st.notices:
            if not isinstance(data, dict):
                raise MalformedChunkError(f"{kind} payload is not an object")
            try:
                if kind == TP_USER_TURN:
                    turn = dict(data["turn"])
                    parts = [resolve_part(p, cur, body_parts) for p in turn.get("parts", [])]
                    if any(p is MISSING for p in parts):
                        raise MalformedChunkError("user turn references content the request body lacks")
                    turn["parts"] = parts
                    out.append(UserTurnSubmitted(turn=from_builtins(turn, m.UserTurn)))
                elif kind == TP_TURN_START:
                    out.append(
                        AgentTurnStarted(
                            agent_id=data["agent_id"], started_at=data["started_at"], extra=data.get("extra") or {}
                        )
                    )
                elif kind == TP_MESSAGE:
                    if dropped:
                        continue
                    msg = dict(data["message"])
                    if "parts" in msg:
                        parts = [resolve_part(p, cur, body_parts) for p in msg["parts"]]
                        if any(p is MISSING for p in parts):
                            dropped = True  # the stream broke off before it; keep no gap
                            continue
                        msg["parts"] = parts
                    out.append(MessageRecorded(message=_message(msg)))
                elif kind == TP_TURN_END:
                    if "interruption" in data:
                        out.append(
                            AgentTurnInterrupted(
                                interruption=from_builtins(data["interruption"], m.Interruption),
                                total_usage=_usage(data.get("total_usage")),
                            )
                        )
                    else:
                        out.append(
                            AgentTurnCompleted(
                                completed_at=data.get("completed_at", m.UNSET),
                                total_usage=_usage(data.get("total_usage")),
                                deferred=dict(data.get("deferred") or {}),
                            )
                        )
            except (KeyError, TypeError) as exc:
                raise MalformedChunkError(f"{kind} payload lacks a field: {exc}") from exc
        return out

    # -- plain mode

    def _plain(self) -> list[Event]:
        st = self.state
        start = self._start_time or self.clock()
        out: list[Event] = []
        turn = user_turn_from_body(self.body, submitted_at=start)
        if turn is not None:
            out.append(UserTurnSubmitted(turn=turn))
        if not st.started:
            return out
        out.append(AgentTurnStarted(agent_id=self.agent_id, started_at=start))
        order = {cid: i for i, cid in enumerate([*st.known_calls, *st.calls])}
        last_ts = start
        for items, complete in zip(st.steps, st.steps_complete, strict=True):
            if not complete:
                items = _complete_part_of(items, st)
            ts = max(self.clock(), last_ts)  # message order must hold even for a clock that steps back
            last_ts = ts
            responses: list[list[dict[str, Any]]] = [[]]
            req: list[tuple[int, dict[str, Any]]] = []
            sys_msgs: list[m.SystemMessage] = []
            prev: str | None = None
            for kind, value in items:
                if kind in ("text", "reasoning", "call", "file"):
                    if kind == "call" and not st.calls[value].available:
                        continue  # its input never completed
                    if kind == "text" and prev == "text" and responses[-1]:
                        # one response's consecutive text parts stream as one UI text part, so a
                        # second text part right after a text part is the next response's (a
                        # retry after an output validator shares the step, see the module doc)
                        responses.append([])
                    prev = kind
                if kind == "text":
                    responses[-1].append({"part_kind": "text", "content": value})
                elif kind == "reasoning":
                    responses[-1].append(_thinking_part(*value))
                elif kind == "call":
                    call = st.calls[value]
                    part_kind = "custom:pai-builtin-tool-call" if call.provider_executed else "tool-call"
                    responses[-1].append(
                        {"part_kind": part_kind, "tool_name": call.name, "tool_call_id": value, "args": call.input}
                    )
                elif kind == "result":
                    call = st.calls[value]
                    if call.provider_executed:
                        responses[-1].append(
                            {
                                "part_kind": "custom:pai-builtin-tool-return",
                                "tool_name": call.name,
                                "tool_call_id": value,
                                "content": call.output,
                            }
                        )
                    else:
                        req.append((order.get(value, len(order)), _result_part(value, call)))
                elif kind == "file":
                    responses[-1].append(
                        {
                            "part_kind": "file",
                            "content": {
                                "kind": "binary",
                                "media_type": value["media_type"],
                                "data": data_uri_payload(value["url"]),
                            },
                        }
                    )
                elif kind == "source":
                    ev_type = "source.url" if value.get("type") == "source-url" else "source.document"
                    data = {k: v for k, v in value.items() if k != "type"}
                    sys_msgs.append(m.SystemMessage(timestamp=ts, event_type=ev_type, event_data=data))
                elif kind == "data":
                    sys_msgs.append(m.SystemMessage(timestamp=ts, event_type=value[0], event_data=value[1]))
            for resp in responses:
                if resp:
                    msg = {"message_type": "response", "timestamp": ts, "parts": resp, "agent_id": self.agent_id}
                    out.append(MessageRecorded(message=_message(msg)))
            if req:
                # Pydantic AI answers calls in the order they were made, whatever order they finished in
                parts = [p for _, p in sorted(req, key=lambda x: x[0])]
                msg = {"message_type": "request", "timestamp": ts, "parts": parts, "agent_id": self.agent_id}
                out.append(MessageRecorded(message=_message(msg)))
            out.extend(MessageRecorded(message=s) for s in sys_msgs)
        end = max(self.clock(), last_ts)
        if st.terminal is None:
            out.append(AgentTurnInterrupted(interruption=m.Interruption(reason="network_failure", interrupted_at=end)))
        elif st.terminal[0] == "abort":
            reason = "timeout" if "timed out" in (st.terminal[1] or "") else "user_cancelled"
            out.append(AgentTurnInterrupted(interruption=m.Interruption(reason=reason, interrupted_at=end)))
        elif st.terminal[0] == "error":
            out.append(AgentTurnInterrupted(interruption=m.Interruption(reason="error", interrupted_at=end)))
        else:
            deferred: dict[str, str] = {}
            for cid, call in st.calls.items():
                if call.available and call.output_kind is None and not call.provider_executed:
                    deferred[cid] = "approval" if call.approval else "external"
            out.append(AgentTurnCompleted(completed_at=end, deferred=deferred))
        return out


#: Rules a turn checked on its own cannot judge: its returns may answer calls of earlier turns.
_NEEDS_EARLIER_TURNS: Final = frozenset({"v3.2-tool-call-id"})
_CHECK_THREAD: Final = "00000000-0000-4000-8000-000000000000"


def _check_turn(events: list[Event]) -> None:
    """Raise :class:`~tplog.ValidationError` if the assembled turn, as a thread of its own, breaks a
    protocol rule (message order, turn times, ...): such a turn must never be stored."""
    times = [t for t in (ev.time() for ev in events) if isinstance(t, str)]
    if not times:
        return
    agents: list[str] = []
    for ev in events:
        aid = ev.agent_id if isinstance(ev, AgentTurnStarted) else None
        if isinstance(ev, MessageRecorded) and isinstance(ev.message, m.RequestMessage | m.ResponseMessage):
            aid = ev.message.agent_id
        if aid is not None and aid not in agents:
            agents.append(aid)
    head: list[Event] = [ThreadStarted(thread_id=_CHECK_THREAD, created_at=times[0])]
    head += [AgentRegistered(agent=m.AgentConfig(agent_id=a, agent_name=a, created_at=times[0])) for a in agents]
    thread = fold([*head, *events]).thread
    if thread is None:  # pragma: no cover - ThreadStarted is first
        return
    errors = [f for f in validate(thread).errors if f.rule not in _NEEDS_EARLIER_TURNS]
    if errors:
        where = "; ".join(str(f).replace("$.turns", "$.turn") for f in errors[:3])
        raise ValidationError(
            f"the assembled turn breaks {len(errors)} protocol rule(s): {where}",
            report=ValidationReport(errors=errors),
        )


def _complete_part_of(items: list[tuple[str, Any]], st: StreamState) -> list[tuple[str, Any]]:
    """What of a step cut off by the end of the run (abort, error, a broken stream) was complete.

    Pydantic AI closes the open text/reasoning part (``*-end``) before ``abort``/``error``, so an
    ended part proves nothing. A tool output (real or the closeout's) proves the response was
    complete: calls are only run once it is. Without one, the step's response is dropped, as the
    server drops the partial response. Closeout outputs are dropped: the call stays unanswered and
    the fold drops it with its response (v0.0.4), exactly as on the server.
    """
    response_done = any(kind == "result" for kind, _ in items)
    kept: list[tuple[str, Any]] = []
    for kind, value in items:
        if kind in ("text", "reasoning", "call", "file") and not response_done:
            continue
        if kind == "result" and st.calls[value].synthetic:
            continue
        kept.append((kind, value))
    return kept


def _thinking_part(text: str, pmeta: Any) -> dict[str, Any]:
    meta = (pmeta or {}).get("pydantic_ai", {}) if isinstance(pmeta, dict) else {}
    p: dict[str, Any] = {"part_kind": "thinking", "content": text, "provider_name": meta.get("provider_name") or ""}
    if meta.get("signature"):
        p["signature"] = meta["signature"]
    if meta.get("id"):
        p["thinking_id"] = meta["id"]
    return p


def _result_part(cid: str, call: Call) -> dict[str, Any]:
    """The request part answering a (not provider-executed) call."""
    if call.output_kind == "input-error":
        return {"part_kind": "retry-prompt", "tool_name": call.name, "tool_call_id": cid, "content": call.output}
    if call.output_kind == "available":
        status, content = "success", call.output
    elif call.output_kind == "error":
        status, content = "error", call.output
    else:
        status, content = "error", "The tool call was denied."
    return {
        "part_kind": "tool-return",
        "tool_name": call.name,
        "tool_call_id": cid,
        "status": status,
        "content": content,
    }


def _message(d: dict[str, Any]) -> m.Message:
    msg: m.Message = from_builtins(d, cast(Any, m.Message))
    return msg


def _usage(u: Any) -> Any:
    return from_builtins(u, m.Usage) if isinstance(u, dict) else m.UNSET


def assemble_turn(
    stream: str | bytes | Iterable[dict[str, Any] | str],
    request_body: dict[str, Any] | None = None,
    *,
    agent_id: str = "agent",
    clock: Callable[[], str] | None = None,
    known_tool_calls: dict[str, str] | None = None,
) -> list[Event]:
    """Assemble the events of one turn from a whole stream (SSE text or chunk dicts).

    ``known_tool_calls`` (``tool_call_id -> tool_name``) names calls announced
    before this stream (deferred calls resolved now); the tool parts of the
    request body's messages are known too.
    """
    asm = StreamAssembler(request_body, agent_id=agent_id, clock=clock, known_tool_calls=known_tool_calls)
    if isinstance(stream, str | bytes):
        asm.feed_sse(stream)
    else:
        for chunk in stream:
            asm.feed(chunk)
    return asm.events()
