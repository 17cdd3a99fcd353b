"""Pydantic AI <-> ThreadProtocol: message mapping, history, live recording.

Requires ``pydantic-ai-slim`` (written against 2.68). Nothing here mocks or
bypasses tplog: the recorder emits ordinary :mod:`tplog` history events through
an ``append`` callable (``store.append`` bound to a thread, sync or async).

Mapping (Pydantic AI JSON, as ``ModelMessagesTypeAdapter`` dumps it)
--------------------------------------------------------------------

Every Pydantic AI field the protocol has no field for is kept under the key
``"pydantic_ai"`` of the protocol object (it lands in the Struct's ``extra``),
so ``import -> export`` gives back equal messages, except for the documented
exclusions below. Fields at their Pydantic AI default are not stored.

Messages: ``ModelRequest`` -> ``RequestMessage``, ``ModelResponse`` ->
``ResponseMessage`` (``model_name``, ``provider_name``,
``provider_response_id``, ``finish_reason`` map 1:1; ``usage`` maps
``input_tokens``/``output_tokens``, ``output_reasoning_tokens`` ->
``thinking_tokens``, ``total_tokens`` is derived, every other counter stays in
the usage object as an unknown field). A ``None`` request timestamp becomes the
previous known time, with the ``None`` kept in ``pydantic_ai``.

Parts:

==========================  =================================================
Pydantic AI                 ThreadProtocol
==========================  =================================================
user-prompt                 user-prompt; ImageUrl/AudioUrl/VideoUrl/
                            DocumentUrl/BinaryContent are the protocol's
                            content kinds (unknown fields such as
                            ``force_download='allow-local'`` survive);
                            TextContent, CachePoint, UploadedFile, ... stay
                            as extension content objects with their own kind
text                        text (``provider_name``, ``provider_details``,
                            ``citations`` in ``pydantic_ai``)
thinking                    thinking: content, signature, provider_name
                            (``""`` when Pydantic AI has none), ``id`` ->
                            ``thinking_id``
tool-call                   tool-call; ``args`` is always the parsed JSON
                            object when Pydantic AI holds a JSON string (the
                            raw string is kept in ``pydantic_ai.args``), so a
                            server recording and a client that only sees the
                            parsed ``input`` agree
tool-return                 outcome ``success`` -> status ``success``;
                            ``failed`` -> ``error``; ``denied`` and
                            ``interrupted`` -> ``error`` with
                            ``pydantic_ai.outcome`` saying which (a denial is
                            a policy decision, not a tool fault, but the
                            protocol has no status for it);
                            ``retried`` -> **retry-prompt** with
                            ``tool_name``/``tool_call_id`` (this is exactly
                            Pydantic AI's own legacy translation: a stored
                            ``retry-prompt`` naming a tool loads as a
                            ``retried`` return, and tplog's fold counts a
                            retry-prompt naming a call as its return).
                            Importing a foreign ``validation_error`` status
                            gives ``outcome='retried'`` with
                            ``retry.cause='validation_error'``.
retry-feedback              retry-prompt without tool_name (``retry`` info in
                            ``pydantic_ai``)
file                        file (BinaryContent)
builtin-tool-call/-return,  extension parts ``custom:pai-<part_kind>`` with
compaction, speech, ...     every field: provider-executed tool calls are not
                            ``tool-call`` parts, because their return lives in
                            the same response and would otherwise look like
                            pending or unanswered calls
system-prompt               EXCLUDED (the protocol does not store system
                            prompts: they are agent configuration)
==========================  =================================================

Exclusions: ``SystemPromptPart`` parts and ``ModelRequest.instructions`` are
not stored (agent configuration, re-applied by the agent on the next run).
``ModelResponse`` objects whose ``state`` is not ``complete`` (partial
responses Pydantic AI keeps after a cancel) and ``ModelRequest`` objects with
``state='interrupted'`` are not recorded (v0.0.4: complete messages only).

Turns: a ``ModelRequest`` whose only (non-system) parts are user prompts is the
:class:`~tplog.UserTurn` (its request-level fields kept in the turn's
``pydantic_ai``); everything else of a run is an agent turn's messages. A
request that mixes user prompts with other parts (e.g. a deferred-tool resume
with a new prompt) stays a request message of the agent turn.

Multi-agent history: :func:`history_from_thread` with ``viewing_agent_id``
keeps other agents' messages but drops their thinking parts (signatures are
bound to the model that made them). System messages never reach Pydantic AI.

Cancellation, as current Pydantic AI does it (checked against 2.68): a
first-party cancel (``CancellationToken.cancel()``/``AgentRun.cancel()``)
raises :class:`pydantic_ai.exceptions.RunCancelled`, ``timeout=`` raises
``RunTimedOut`` (a subclass); both carry ``all_messages()`` including the
partial response with ``state='interrupted'`` -- with the text streamed so far
and even a ``ToolCallPart`` holding truncated JSON args (e.g. ``'{"ci'``). The
recorder drops those (not complete) and tplog's fold drops responses whose
tool calls got no returns. A model error mid-stream propagates as itself and
carries no messages; the recorder already holds every message completed
before it. External ``asyncio`` cancellation propagates as
``CancelledError``; the recorder records the interruption
(``user_cancelled``) and re-raises.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any, Final, Literal, Union, cast

import pydantic
from pydantic_ai import messages as pm
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.exceptions import RunCancelled, RunTimedOut
from pydantic_ai.run import AgentRunResultEvent

try:  # DeferredToolRequests lives in pydantic_ai.tools / pydantic_ai._deferred
    from pydantic_ai import DeferredToolRequests
except ImportError:  # pragma: no cover
    from pydantic_ai.tools import DeferredToolRequests

from tplog.errors import InvalidInputError
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
from tplog.integrations.pydantic_ai_fast import HistoryCache, fast_message, fast_message_to_tp, fast_user_turn
from tplog.protocol import model as m
from tplog.protocol.json import from_builtins, to_builtins
from tplog.protocol.validate import thread_id_for

__all__ = [
    "PAI_KEY",
    "HistoryCache",
    "RecordedRun",
    "ThreadRecorder",
    "events_from_messages",
    "history_from_thread",
    "is_user_request",
    "load_history",
    "message_from_tp",
    "message_to_tp",
    "request_from_user_turn",
    "run_usage_to_tp",
    "user_turn_from_request",
]

#: The key under which Pydantic AI-only fields are kept in a protocol object's ``extra``.
PAI_KEY: Final = "pydantic_ai"
#: Prefix of extension part kinds holding Pydantic AI parts the protocol lacks.
EXT_PREFIX: Final = "custom:pai-"

_MSG_TA: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(pm.ModelMessage)
_MSGS_TA = pm.ModelMessagesTypeAdapter

Append = Callable[[list[Event]], Union[Any, Awaitable[Any]]]


def now_iso() -> str:
    """The current UTC time in Pydantic AI's JSON form (``...T..:..:..ffffffZ``)."""
    return _iso(datetime.now(UTC))


def _iso(dt: datetime) -> str:
    s: str = _DT_TA.dump_python(dt, mode="json")
    return s


_DT_TA: pydantic.TypeAdapter[datetime] = pydantic.TypeAdapter(datetime)


# --------------------------------------------------------------------------- dump helpers


def _dump(msg: pm.ModelMessage) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(full, slim)`` JSON dumps: slim leaves out fields at their default."""
    full = _MSG_TA.dump_python(msg, mode="json")
    slim = _MSG_TA.dump_python(msg, mode="json", exclude_defaults=True)
    return full, slim


def _kept(full: dict[str, Any], slim: dict[str, Any], tag: str) -> dict[str, Any]:
    """The non-default fields of an object, with full (discriminator-bearing) nested values."""
    out = {k: full[k] for k in slim if k in full}
    out[tag] = full[tag]
    return out


def _content_item(full: Any, slim: Any) -> Any:
    if not isinstance(full, dict):
        return full
    out = {k: full[k] for k in (slim if isinstance(slim, dict) else full) if k in full}
    out["kind"] = full.get("kind")
    fd = out.get("force_download")
    if fd is not None and not isinstance(fd, bool):
        out.pop("force_download")
        out[PAI_KEY] = {"force_download": fd}
    return out


def _with_pai(d: dict[str, Any], leftovers: dict[str, Any]) -> dict[str, Any]:
    if leftovers:
        d[PAI_KEY] = leftovers
    return d


def _parse_args(args: Any) -> tuple[Any, bool]:
    """``(protocol args, raw string kept?)``."""
    if isinstance(args, str):
        try:
            parsed = json.loads(args) if args.strip() else {}
        except ValueError:
            return args, False
        if isinstance(parsed, dict):
            return parsed, True
        return args, False
    return args, False


_STATUS: Final = {"success": "success", "failed": "error", "denied": "error", "interrupted": "error"}


def _part_to_tp(full: dict[str, Any], slim: dict[str, Any]) -> dict[str, Any] | None:
    kind = full.get("part_kind")
    d = _kept(full, slim, "part_kind")
    d.pop("part_kind")
    if kind == "system-prompt":
        return None
    if kind == "user-prompt":
        content = d.pop("content", full.get("content"))
        if isinstance(content, list):
            slim_content = slim.get("content")
            sc: list[Any] = slim_content if isinstance(slim_content, list) else content
            content = [_content_item(f, s) for f, s in zip(content, sc, strict=False)]
        return _with_pai({"part_kind": "user-prompt", "content": content}, d)
    if kind == "text":
        out = {"part_kind": "text", "content": d.pop("content", "")}
        if "id" in d:
            out["id"] = d.pop("id")
        return _with_pai(out, d)
    if kind == "thinking":
        out = {"part_kind": "thinking", "content": d.pop("content", full.get("content"))}
        for src, dst in (("signature", "signature"), ("id", "thinking_id")):
            if src in d:
                out[dst] = d.pop(src)
        pn = d.pop("provider_name", None)
        out["provider_name"] = pn if isinstance(pn, str) else ""
        if pn == "":
            d["provider_name"] = ""
        return _with_pai(out, d)
    if kind == "tool-call":
        out = {"part_kind": "tool-call", "tool_name": d.pop("tool_name"), "tool_call_id": d.pop("tool_call_id")}
        if "args" in d:
            raw = d.pop("args")
            args, keep_raw = _parse_args(raw)
            out["args"] = args
            if keep_raw:
                d["args"] = raw
        return _with_pai(out, d)
    if kind == "tool-return":
        outcome = d.get("outcome", "success")
        if outcome == "retried":
            out = {
                "part_kind": "retry-prompt",
                "content": d.pop("content", None),
                "tool_name": d.pop("tool_name"),
                "tool_call_id": d.pop("tool_call_id"),
            }
            return _with_pai(out, d)
        out = {
            "part_kind": "tool-return",
            "tool_name": d.pop("tool_name"),
            "tool_call_id": d.pop("tool_call_id"),
            "status": _STATUS.get(outcome, "error"),
            "content": d.pop("content", full.get("content")),
        }
        if "metadata" in d:
            out["metadata"] = d.pop("metadata")
        return _with_pai(out, d)
    if kind == "retry-feedback":
        return _with_pai({"part_kind": "retry-prompt", "content": d.pop("content")}, d)
    if kind == "file":
        content = _content_item(full["content"], slim.get("content", full["content"]))
        d.pop("content", None)
        out = {"part_kind": "file", "content": content}
        if "id" in d:
            out["id"] = d.pop("id")
        return _with_pai(out, d)
    # Anything else (builtin-tool-call/-return, compaction, speech, ...) is kept whole.
    return {"part_kind": f"{EXT_PREFIX}{kind}", **d}


def _part_from_tp(part: dict[str, Any], *, side: Literal["request", "response"]) -> dict[str, Any]:
    part = dict(part)
    kind = part.pop("part_kind")
    pai = part.pop(PAI_KEY, None) or {}
    if kind.startswith(EXT_PREFIX):
        return {"part_kind": kind[len(EXT_PREFIX) :], **part}
    if kind == "user-prompt":
        content = part.get("content")
        if isinstance(content, list):
            content = [_content_from_tp(c) for c in content]
        out: dict[str, Any] = {"part_kind": "user-prompt", "content": content}
    elif kind == "text":
        out = {"part_kind": "text", "content": part.get("content", "")}
        if "id" in part:
            out["id"] = part["id"]
    elif kind == "thinking":
        out = {"part_kind": "thinking", "content": part.get("content") or ""}
        if "signature" in part:
            out["signature"] = part["signature"]
        if "thinking_id" in part:
            out["id"] = part["thinking_id"]
        if part.get("provider_name"):
            out["provider_name"] = part["provider_name"]
    elif kind == "tool-call":
        out = {"part_kind": "tool-call", "tool_name": part["tool_name"], "tool_call_id": part["tool_call_id"]}
        if "args" in part:
            out["args"] = part["args"]
    elif kind == "tool-return":
        out = {
            "part_kind": "tool-return",
            "tool_name": part["tool_name"],
            "tool_call_id": part["tool_call_id"],
            "content": part.get("content"),
        }
        status = part.get("status")
        if status == "error":
            out["outcome"] = "failed"
        elif status == "validation_error":
            out["outcome"] = "retried"
            out["retry"] = {"cause": "validation_error"}
        if "metadata" in part:
            out["metadata"] = part["metadata"]
    elif kind == "retry-prompt":
        content = part.get("content")
        if isinstance(part.get("tool_name"), str):
            out = {
                "part_kind": "tool-return",
                "tool_name": part["tool_name"],
                "content": content,
                "outcome": "retried",
            }
            if "tool_call_id" in part:
                out["tool_call_id"] = part["tool_call_id"]
            if not isinstance(content, str):
                out["retry"] = {"cause": "validation_error"}
        else:
            cause = "model_retry" if isinstance(content, str) else "validation_error"
            out = {"part_kind": "retry-feedback", "content": content, "retry": {"cause": cause}}
    elif kind == "file":
        out = {"part_kind": "file", "content": _content_from_tp(part["content"])}
        if "id" in part:
            out["id"] = part["id"]
    else:
        raise InvalidInputError(f"part kind {kind!r} has no Pydantic AI equivalent")
    out.update(pai)
    return out


def _content_from_tp(item: Any) -> Any:
    if not isinstance(item, dict):
        return item
    item = dict(item)
    pai = item.pop(PAI_KEY, None) or {}
    item.update(pai)
    return item


def _usage_to_tp(usage: dict[str, Any] | None) -> dict[str, Any] | None:
    if not usage:
        return None
    u = dict(usage)
    out: dict[str, Any] = {}
    for k in ("input_tokens", "output_tokens"):
        if k in u:
            out[k] = u.pop(k)
    if "output_reasoning_tokens" in u:
        out["thinking_tokens"] = u.pop("output_reasoning_tokens")
    if "input_tokens" in out or "output_tokens" in out:
        out["total_tokens"] = out.get("input_tokens", 0) + out.get("output_tokens", 0)
    out.update(u)
    return out


def _usage_from_tp(usage: dict[str, Any]) -> dict[str, Any]:
    u = dict(usage)
    u.pop("total_tokens", None)
    if "thinking_tokens" in u:
        u["output_reasoning_tokens"] = u.pop("thinking_tokens")
    return u


def run_usage_to_tp(usage: Any) -> m.Usage | None:
    """A Pydantic AI ``RunUsage`` (or ``RequestUsage``) as a protocol ``Usage`` (non-zero counters only)."""
    if usage is None:
        return None
    d = pydantic.TypeAdapter(type(usage)).dump_python(usage, mode="json", exclude_defaults=True)
    tp = _usage_to_tp(d)
    return from_builtins(tp, m.Usage) if tp else None


# --------------------------------------------------------------------------- messages


_RESPONSE_FIELDS: Final = ("model_name", "provider_name", "provider_response_id", "finish_reason")


def message_to_tp(
    msg: pm.ModelMessage, agent_id: str, *, default_timestamp: str | None = None
) -> m.RequestMessage | m.ResponseMessage:
    """One Pydantic AI message as a protocol message attributed to ``agent_id``."""
    fast = fast_message_to_tp(msg, agent_id, _iso, lambda: default_timestamp or now_iso())
    if fast is not None:  # the common shapes, built directly; the rest through pydantic's dump below
        return fast
    full, slim = _dump(msg)
    d = _kept(full, slim, "kind")
    kind = d.pop("kind")
    parts = []
    for pf, ps in zip(full["parts"], slim.get("parts", [{}] * len(full["parts"])), strict=False):
        tp = _part_to_tp(pf, ps)
        if tp is not None:
            parts.append(tp)
    d.pop("parts", None)
    d.pop("instructions", None)  # excluded: agent configuration
    ts = d.pop("timestamp", None)
    if ts is None:
        d["timestamp"] = None
        ts = default_timestamp or now_iso()
    out: dict[str, Any] = {"message_type": kind, "timestamp": ts, "parts": parts, "agent_id": agent_id}
    if kind == "response":
        for f in _RESPONSE_FIELDS:
            if f in d:
                out[f] = d.pop(f)
        d.pop("usage", None)
        usage = _usage_to_tp(slim.get("usage"))
        if usage:
            out["usage"] = usage
    _with_pai(out, d)
    return cast("m.RequestMessage | m.ResponseMessage", _message_from_builtins(out))


def message_from_tp(msg: m.RequestMessage | m.ResponseMessage) -> pm.ModelMessage:
    """A protocol request/response message back as a Pydantic AI message."""
    d = to_builtins(msg)
    out: pm.ModelMessage = _MSG_TA.validate_python(_message_dict_from_tp(d))
    return out


def _message_from_builtins(d: dict[str, Any]) -> m.Message:
    """A protocol message (request, response or system) from its JSON builtins."""
    msg: m.Message = from_builtins(d, cast(Any, m.Message))
    return msg


def _message_dict_from_tp(d: dict[str, Any]) -> dict[str, Any]:
    kind = d["message_type"]
    if kind not in ("request", "response"):
        raise InvalidInputError(f"message_type {kind!r} has no Pydantic AI equivalent")
    pai = d.get(PAI_KEY) or {}
    out: dict[str, Any] = {
        "kind": kind,
        "timestamp": d.get("timestamp"),
        "parts": [_part_from_tp(p, side=kind) for p in d.get("parts", [])],
    }
    if kind == "response":
        for f in _RESPONSE_FIELDS:
            if f in d:
                out[f] = d[f]
        if isinstance(d.get("usage"), dict):
            out["usage"] = _usage_from_tp(d["usage"])
    out.update(pai)
    return out


def is_user_request(msg: pm.ModelMessage) -> bool:
    """Whether ``msg`` is a user's request: only user-prompt parts (system prompts aside), so a user turn."""
    if not isinstance(msg, pm.ModelRequest):
        return False
    kinds = [p.part_kind for p in msg.parts if p.part_kind != "system-prompt"]
    return bool(kinds) and all(k == "user-prompt" for k in kinds)


def user_turn_from_request(
    request: pm.ModelRequest,
    *,
    submitted_at: str | None = None,
    client_metadata: dict[str, Any] | None = None,
) -> m.UserTurn:
    """The user turn a user-prompt-only ``ModelRequest`` stands for (request fields kept in ``pydantic_ai``)."""
    tp = to_builtins(message_to_tp(request, "", default_timestamp=submitted_at))
    pai = dict(tp.get(PAI_KEY) or {})
    if submitted_at is not None and "timestamp" not in pai and submitted_at != tp["timestamp"]:
        pai["timestamp"] = tp["timestamp"]
    out: dict[str, Any] = {
        "turn_type": "user",
        "submitted_at": submitted_at if submitted_at is not None else tp["timestamp"],
        "parts": tp["parts"],
    }
    if client_metadata is not None:
        out["client_metadata"] = client_metadata
    _with_pai(out, pai)
    return from_builtins(out, m.UserTurn)


def request_from_user_turn(turn: m.UserTurn) -> pm.ModelRequest:
    """The ``ModelRequest`` a user turn stands for (``client_metadata`` is not passed to Pydantic AI)."""
    d = to_builtins(turn)
    msg = {"message_type": "request", "timestamp": d["submitted_at"], "parts": d.get("parts", [])}
    if PAI_KEY in d:
        msg[PAI_KEY] = d[PAI_KEY]
    out: pm.ModelRequest = _MSG_TA.validate_python(_message_dict_from_tp(msg))
    return out


def history_from_thread(
    thread: m.Thread, viewing_agent_id: str | None = None, *, cache: HistoryCache | None = None
) -> list[pm.ModelMessage]:
    """The ``message_history`` for the next run, from a (folded, canonical) thread.

    User turns become requests; agent turns contribute their request/response
    messages (interrupted turns hold only complete cycles, as folded). System
    messages are skipped. With ``viewing_agent_id``, other agents' thinking
    parts are dropped.

    Messages are built directly from the stored (already validated) objects;
    shapes the direct path does not cover go through pydantic's validation, with
    equal results. With ``cache`` (a :class:`HistoryCache` kept beside the store)
    a message converted by an earlier call is reused, so a server's next model
    call converts only the messages appended since (see :func:`load_history`).
    """
    out: list[pm.ModelMessage] = []
    get = cache.get if cache is not None else None
    for turn in thread.turns:
        if isinstance(turn, m.UserTurn):
            if get is not None:
                hit, conv = get(turn, False)
                if hit:
                    out.append(conv)
                    continue
            conv = fast_user_turn(turn)
            if conv is None:
                conv = request_from_user_turn(turn)
            if cache is not None:
                cache.put(turn, False, conv)
            out.append(conv)
            continue
        other = viewing_agent_id is not None and turn.agent_id != viewing_agent_id
        for msg in turn.messages:
            if isinstance(msg, m.SystemMessage):
                continue
            drop = other and msg.agent_id != viewing_agent_id
            if drop and all(isinstance(p, m.ThinkingPart) for p in msg.parts):
                continue
            if get is not None:
                hit, conv = get(msg, drop)
                if hit:
                    out.append(conv)
                    continue
            conv = fast_message(msg, drop)
            if conv is None:
                conv = _message_validated(msg, drop)
            if cache is not None:
                cache.put(msg, drop, conv)
            out.append(conv)
    return out


def _message_validated(msg: m.RequestMessage | m.ResponseMessage, drop_thinking: bool) -> pm.ModelMessage:
    """The validating path: JSON builtins, reshaped, validated by pydantic."""
    d = to_builtins(msg)
    if drop_thinking:
        d["parts"] = [p for p in d["parts"] if p.get("part_kind") != "thinking"]
    out: pm.ModelMessage = _MSG_TA.validate_python(_message_dict_from_tp(d))
    return out


def load_history(
    store: Any, thread_id: str, viewing_agent_id: str | None = None, *, cache: HistoryCache | None = None
) -> list[pm.ModelMessage]:
    """``history_from_thread(store.thread(thread_id), ...)``: the store's fold cache folds
    only new events and ``cache`` converts only new messages."""
    return history_from_thread(store.thread(thread_id), viewing_agent_id, cache=cache)


# --------------------------------------------------------------------------- import a flat history


def events_from_messages(
    messages: Sequence[pm.ModelMessage],
    *,
    agent_id: str,
    thread_id: str | None = None,
    created_at: str | None = None,
    agent_name: str | None = None,
) -> list[Event]:
    """Events that record a Pydantic AI message history (e.g. a ``ModelMessagesTypeAdapter`` JSON).

    With ``thread_id`` the list starts with ``ThreadStarted`` (and
    ``AgentRegistered`` when ``agent_name`` is given); its id is
    ``tplog.thread_id_for(thread_id)`` (the one id rule: a UUID stays as it is, any
    other id becomes its UUIDv5), the id to append the events under. A user-prompt-only
    request opens a user turn and a new agent turn; a change of ``run_id``
    opens a new agent turn. A response that is not ``complete`` ends its turn
    as interrupted (reason ``"interrupted"``) and is dropped.
    """
    events: list[Event] = []
    first_ts = created_at
    if first_ts is None:
        for msg in messages:
            if msg.timestamp is not None:
                first_ts = _iso(msg.timestamp)
                break
        first_ts = first_ts or now_iso()
    if thread_id is not None:
        events.append(ThreadStarted(thread_id=thread_id_for(thread_id), created_at=first_ts))
        if agent_name is not None:
            events.append(
                AgentRegistered(agent=m.AgentConfig(agent_id=agent_id, agent_name=agent_name, created_at=first_ts))
            )
    open_run: object = None
    is_open = False
    last_ts = first_ts
    interrupted = False

    def close() -> None:
        nonlocal is_open, interrupted
        if is_open:
            if interrupted:
                events.append(
                    AgentTurnInterrupted(interruption=m.Interruption(reason="interrupted", interrupted_at=last_ts))
                )
            else:
                events.append(AgentTurnCompleted(completed_at=last_ts))
        is_open = False
        interrupted = False

    for msg in messages:
        run_id = msg.run_id
        if is_user_request(msg):
            close()
            turn = user_turn_from_request(msg, submitted_at=None if msg.timestamp else last_ts)  # type: ignore[arg-type]
            last_ts = turn.submitted_at
            events.append(UserTurnSubmitted(turn=turn))
            events.append(AgentTurnStarted(agent_id=agent_id, started_at=last_ts))
            is_open, open_run = True, run_id
            continue
        if is_open and run_id is not None and open_run is not None and run_id != open_run:
            close()
        if isinstance(msg, pm.ModelResponse) and msg.state != "complete":
            interrupted = True
            continue
        if isinstance(msg, pm.ModelRequest) and msg.state != "complete":
            interrupted = True
            continue
        tp = message_to_tp(msg, agent_id, default_timestamp=last_ts)
        if not is_open:
            events.append(AgentTurnStarted(agent_id=agent_id, started_at=tp.timestamp))
            is_open, open_run = True, run_id
        last_ts = tp.timestamp
        events.append(MessageRecorded(message=tp))
    close()
    return events


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
                async with agent.run_stream_events(
                    user_prompt,
                    message_history=message_history,
                    deferred_tool_results=deferred_tool_results,
                    run_id=run_id,
                    **run_kwargs,
                ) as events:
                    async for ev in events:
                        await self._sync(state, captured)
                        if isinstance(ev, AgentRunResultEvent):
                            result = ev.result
                        yield ev
                await self._sync(state, captured)
        except RunCancelled as exc:
            await self._sync(state, captured, final=True)
            reason = "timeout" if isinstance(exc, RunTimedOut) else "user_cancelled"
            await self._interrupt(state, rec, reason, exc, usage=exc.usage)
            if raise_cancelled:
                raise
            return
        except asyncio.CancelledError as exc:
            await self._sync(state, captured, final=True)
            rc = RunCancelled.from_cancellation(exc)
            await self._interrupt(state, rec, "user_cancelled", exc, usage=rc.usage if rc else None)
            raise
        except GeneratorExit:
            # The consumer stopped reading (e.g. the HTTP client went away).
            await self._sync(state, captured, final=True)
            await self._interrupt(state, rec, "user_cancelled", None, usage=None)
            raise
        except Exception as exc:
            await self._sync(state, captured, final=True)
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
