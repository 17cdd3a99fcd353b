"""Pydantic AI messages <-> ThreadProtocol: parts, messages, usage, user turns, histories
(the mapping the package docstring describes).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Final, Literal, Union, cast

import pydantic
from pydantic_ai import messages as pm

from tplog.errors import InvalidInputError
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
from tplog.integrations.pydantic_ai_fast import HistoryCache, fast_message, fast_message_to_tp, fast_user_turn
from tplog.protocol import model as m
from tplog.protocol.json import from_builtins, to_builtins
from tplog.protocol.validate import thread_id_for

__all__ = [
    "Append", "EXT_PREFIX", "PAI_KEY", "events_from_messages", "history_from_thread", "is_user_request",
    "load_history", "message_from_tp", "message_to_tp", "now_iso", "request_from_user_turn",
    "run_usage_to_tp", "user_turn_from_request",
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


_USAGE_TA: dict[type, pydantic.TypeAdapter[Any]] = {}


def _usage_adapter(cls: type) -> pydantic.TypeAdapter[Any]:
    """One adapter per usage class: building one is a schema build (~ms), not a dump."""
    ta = _USAGE_TA.get(cls)
    if ta is None:
        ta = _USAGE_TA[cls] = pydantic.TypeAdapter(cls)
    return ta


def run_usage_to_tp(usage: Any) -> m.Usage | None:
    """A Pydantic AI ``RunUsage`` (or ``RequestUsage``) as a protocol ``Usage`` (non-zero counters only)."""
    if usage is None:
        return None
    d = _usage_adapter(type(usage)).dump_python(usage, mode="json", exclude_defaults=True)
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

    With ``thread_id`` the list starts with ``ThreadStarted`` and the agent's
    ``AgentRegistered`` (named ``agent_name``, default ``agent_id``), so a fresh
    store takes it as it is; its id is
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
        name = agent_name if agent_name is not None else agent_id
        events.append(AgentRegistered(agent=m.AgentConfig(agent_id=agent_id, agent_name=name, created_at=first_ts)))
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
