"""Protocol messages -> Pydantic AI messages built directly, and a cache of them.

:func:`tplog.integrations.pydantic_ai.history_from_thread` used to dump each
stored message to JSON builtins, reshape the dict and validate it with
pydantic; the store validated those messages when they were appended, so that
work is done twice. Here the common shapes -- requests of user prompts and tool
returns, responses of text, thinking and tool calls, with the leftover Pydantic
AI fields the recorder keeps -- become Pydantic AI dataclasses directly.
Anything else (multimodal prompts, files, extension parts, retry prompts,
leftovers of other types) returns ``None`` and the caller takes the validating
path, so both give equal messages (checked over the recorded fixtures by
``tests/integrations/test_history_fast.py``).

:class:`HistoryCache` keeps the converted messages of recently loaded threads,
keyed by the stored message objects themselves: the fold cache hands back the
same objects for turns already folded, so the next model call converts only
the messages appended since.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from datetime import datetime
from typing import Any, Final

import msgspec
from pydantic_ai import messages as pm
from pydantic_ai.usage import RequestUsage

from tplog.protocol import model as m

__all__ = ["HistoryCache", "fast_message", "fast_message_to_tp", "fast_user_turn", "parse_args"]

PAI_KEY: Final = "pydantic_ai"
UNSET = m.UNSET

# Leftover fields taken as they are: (those typed ``str | None``, those typed ``dict | None``).
_MSG_STRS: Final = frozenset({"run_id", "conversation_id", "model_id", "provider_url", "canonical_system",
                              "history_digest"})
_REQUEST: Final = (_MSG_STRS, frozenset({"metadata"}))
_RESPONSE: Final = (_MSG_STRS, frozenset({"metadata", "provider_details"}))
_PROVIDER: Final = (frozenset({"provider_name"}), frozenset({"provider_details"}))
_CALL: Final = (frozenset({"id", "provider_name"}), frozenset({"provider_details"}))
_USAGE_FIELDS: Final = frozenset(
    f for f in RequestUsage.__dataclass_fields__ if f not in ("details", "cost")
)
_OUTCOMES: Final = frozenset({"success", "failed", "denied", "interrupted"})
_fromiso = datetime.fromisoformat
_encode = msgspec.json.Encoder().encode


def _content(value: Any) -> Any:
    """Tool-return content as it is, if Pydantic AI's validation gives it back equal: decoded
    JSON without a ``"kind"`` key anywhere (one C-level encode finds out). A mapping with a
    ``kind`` may be a file item, rebuilt or not by the part's file record: validating path."""
    if value is None or isinstance(value, str | int | float):
        return value
    if b'"kind"' in _encode(value):
        raise _Unsupported
    return value


def _simple(k: str, v: Any, kinds: tuple[frozenset[str], frozenset[str]]) -> bool:
    strs, dicts = kinds
    return (k in strs and (v is None or isinstance(v, str))) or (k in dicts and (v is None or isinstance(v, dict)))


def _same(value: Any) -> Any:
    return value


_pack, _unpack = msgspec.msgpack.Encoder().encode, msgspec.msgpack.Decoder().decode


def _copy(value: Any) -> Any:
    """A deep copy of stored JSON builtins (msgpack keeps every scalar as it is; C speed)."""
    return _unpack(_pack(value)) if isinstance(value, dict | list) else value


class _Unsupported(Exception):
    """This message takes the validating path."""


def _ts(value: Any) -> datetime:
    if not isinstance(value, str):
        raise _Unsupported
    try:
        return _fromiso(value)
    except ValueError:
        raise _Unsupported from None


def _pai(obj: Any) -> dict[str, Any]:
    extra = obj.extra
    if not extra:
        return {}
    pai = extra.get(PAI_KEY)
    if pai is None:
        return {}
    if not isinstance(pai, dict):
        raise _Unsupported
    return pai


def _request_part(part: Any, dup: Any) -> Any:
    cls = type(part)
    if cls is m.UserPromptPart:
        content = part.content
        if not isinstance(content, str):
            raise _Unsupported
        pai = _pai(part)
        if not pai:
            return pm.UserPromptPart(content=content)
        if pai.keys() - {"timestamp"}:
            raise _Unsupported
        return pm.UserPromptPart(content=content, timestamp=_ts(pai["timestamp"]))
    if cls is m.ToolReturnPart:
        status = part.status
        outcome: Any
        if status == "success":
            outcome = "success"
        elif status == "error":
            outcome = "failed"
        else:
            raise _Unsupported
        content = part.content
        kw: dict[str, Any] = {}
        if part.metadata is not UNSET:
            kw["metadata"] = dup(part.metadata)
        pai = _pai(part)
        if pai:
            for k, v in pai.items():
                if k == "timestamp":
                    kw["timestamp"] = _ts(v)
                elif k == "outcome" and v in _OUTCOMES:
                    outcome = v
                elif k == "content_file_digests" and v == []:
                    pass  # no file items in the content: nothing to rebuild
                else:
                    raise _Unsupported
        return pm.ToolReturnPart(
            tool_name=part.tool_name,
            content=dup(_content(None if content is UNSET else content)),
            tool_call_id=part.tool_call_id,
            outcome=outcome,
            **kw,
        )
    if cls is m.RetryPromptPart:
        # Naming a tool, it is a retried tool return (Pydantic AI's own legacy translation);
        # without one, or with validation errors as content, it takes the validating path.
        content = part.content
        if not isinstance(part.tool_name, str) or not isinstance(content, str):
            raise _Unsupported
        kw = {}
        if part.tool_call_id is not UNSET:
            kw["tool_call_id"] = part.tool_call_id
        for k, v in _pai(part).items():
            if k == "timestamp":
                kw["timestamp"] = _ts(v)
            elif k != "outcome" or v != "retried":
                raise _Unsupported
        return pm.ToolReturnPart(tool_name=part.tool_name, content=content, outcome="retried", **kw)
    raise _Unsupported


def _response_part(part: Any, dup: Any) -> Any:
    cls = type(part)
    if cls is m.TextPart:
        kw: dict[str, Any] = {}
        if part.id is not UNSET:
            kw["id"] = part.id
        pai = _pai(part)
        for k, v in pai.items():
            if not _simple(k, v, _PROVIDER):
                raise _Unsupported
            kw[k] = dup(v)
        return pm.TextPart(content=part.content, **kw)
    if cls is m.ToolCallPart:
        args = part.args
        kw = {}
        pai = _pai(part)
        for k, v in pai.items():
            if k == "args" and isinstance(v, str):
                args = v
            elif _simple(k, v, _CALL):
                kw[k] = dup(v)
            else:
                raise _Unsupported
        if args is UNSET:
            args = None
        elif isinstance(args, dict):
            args = dup(args) if dup is not _same else dict(args)  # the stored object is shared with the fold cache
        elif not isinstance(args, str):
            raise _Unsupported
        return pm.ToolCallPart(tool_name=part.tool_name, args=args, tool_call_id=part.tool_call_id, **kw)
    if cls is m.ThinkingPart:
        content = part.content
        kw = {}
        if part.signature is not UNSET:
            kw["signature"] = part.signature
        if part.thinking_id is not UNSET:
            kw["id"] = part.thinking_id
        if part.provider_name:
            kw["provider_name"] = part.provider_name
        pai = _pai(part)
        for k, v in pai.items():
            if not _simple(k, v, _PROVIDER):
                raise _Unsupported
            kw[k] = dup(v)
        return pm.ThinkingPart(content="" if content is UNSET or not content else content, **kw)
    raise _Unsupported


def _usage(u: Any) -> RequestUsage:
    kw: dict[str, Any] = {}
    for src, dst in (
        (u.input_tokens, "input_tokens"),
        (u.output_tokens, "output_tokens"),
        (u.thinking_tokens, "output_reasoning_tokens"),
    ):
        if src is not UNSET:
            if type(src) is not int:
                raise _Unsupported
            kw[dst] = src
    for k, v in (u.extra or {}).items():
        if k in _USAGE_FIELDS and isinstance(v, int) and not isinstance(v, bool):
            kw[k] = v
        elif k == "details" and isinstance(v, dict) and all(isinstance(x, int) for x in v.values()):
            kw[k] = dict(v)
        else:
            raise _Unsupported
    return RequestUsage(**kw)


def fast_user_turn(turn: m.UserTurn, *, own: bool = False) -> pm.ModelMessage | None:
    """The ``ModelRequest`` a user turn stands for, or ``None`` (see :func:`fast_message`)."""
    pai = turn.extra.get(PAI_KEY) if turn.extra else None
    msg = m.RequestMessage(
        timestamp=turn.submitted_at, parts=turn.parts, agent_id="", extra={} if pai is None else {PAI_KEY: pai}
    )
    return fast_message(msg, own=own)


def fast_message(msg: Any, drop_thinking: bool = False, *, own: bool = False) -> pm.ModelMessage | None:
    """``msg`` (a protocol request or response) as a Pydantic AI message, or ``None``
    when it has a shape only the validating path handles. With ``drop_thinking`` its
    thinking parts are left out (the caller skips a message left with no parts). With
    ``own`` the message shares no dict or list with ``msg`` (a caller may change it)."""
    dup = _copy if own else _same
    try:
        cls = type(msg)
        if cls is m.RequestMessage:
            parts = [_request_part(p, dup) for p in msg.parts]
            kw: dict[str, Any] = {}
            ts: Any = _ts(msg.timestamp)
            for k, v in _pai(msg).items():
                if k == "timestamp":
                    ts = None if v is None else _ts(v)
                elif _simple(k, v, _REQUEST):
                    kw[k] = dup(v)
                else:
                    raise _Unsupported
            return pm.ModelRequest(parts=parts, timestamp=ts, **kw)
        if cls is m.ResponseMessage:
            src = [p for p in msg.parts if type(p) is not m.ThinkingPart] if drop_thinking else msg.parts
            parts = [_response_part(p, dup) for p in src]
            kw = {}
            for f in ("model_name", "provider_name", "provider_response_id", "finish_reason"):
                v = getattr(msg, f)
                if v is not UNSET:
                    kw[f] = v
            if msg.usage is not UNSET:
                kw["usage"] = _usage(msg.usage)
            ts = _ts(msg.timestamp)
            for k, v in _pai(msg).items():
                if k == "timestamp":
                    ts = _ts(v)
                elif _simple(k, v, _RESPONSE):
                    kw[k] = dup(v)
                else:
                    raise _Unsupported
            return pm.ModelResponse(parts=parts, timestamp=ts, **kw)
    except _Unsupported:
        pass
    return None


class HistoryCache:
    """Converted Pydantic AI messages of recently loaded threads (LRU, at most
    ``max_messages``), keyed by the identity of the stored message objects.

    Pass one to :func:`~tplog.integrations.pydantic_ai.history_from_thread` (or
    :func:`~tplog.integrations.pydantic_ai.load_history`) for every model call of
    a server: the fold cache hands back the same message objects for what it has
    folded, so only new messages are converted. The messages handed out are
    shared between calls: treat them as read-only (the list is a new one each
    time). The default bound matches the store's default ``fold_cache``: the stored
    messages it holds are mostly the fold cache's own, and the converted ones share
    their content (tool returns, arguments) with them. Thread-safe."""

    def __init__(self, max_messages: int = 20_000) -> None:
        if isinstance(max_messages, bool) or not isinstance(max_messages, int) or max_messages < 0:
            from tplog.errors import InvalidInputError

            raise InvalidInputError(f"max_messages must be an int ≥ 0, not {max_messages!r}")
        self.max_messages = max_messages
        # id(stored message), drop_thinking -> (stored message, converted or None)
        self._entries: OrderedDict[tuple[int, bool], tuple[Any, Any]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, msg: Any, drop_thinking: bool) -> tuple[bool, Any]:
        key = (id(msg), drop_thinking)
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None and hit[0] is msg:
                self._entries.move_to_end(key)
                self.hits += 1
                return True, hit[1]
            self.misses += 1
        return False, None

    def put(self, msg: Any, drop_thinking: bool, converted: Any) -> None:
        if not self.max_messages:
            return
        with self._lock:
            entries = self._entries
            entries[(id(msg), drop_thinking)] = (msg, converted)  # holding msg keeps its id unique
            while len(entries) > self.max_messages:
                entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


# --------------------------------------------------------------------------- recording: Pydantic AI -> protocol

_dec = msgspec.json.Decoder().decode
_STATUS: Final = {"success": "success", "failed": "error", "denied": "error", "interrupted": "error"}
_iso_cache: dict[datetime, str] = {}


def _plain(value: Any) -> Any:
    """``value`` as the JSON builtins Pydantic AI would dump, if it already is plain JSON
    (anything else -- datetimes, bytes, dataclasses -- takes the validating path)."""
    try:
        out = _dec(_encode(value))
    except (TypeError, ValueError, msgspec.EncodeError, msgspec.DecodeError):
        raise _Unsupported from None
    if out != value:
        raise _Unsupported
    return out


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def parse_args(args: Any) -> tuple[Any, bool]:
    """``(protocol args, raw string kept?)`` of a tool call's args."""
    if isinstance(args, str):
        try:
            parsed = _json_loads(args) if args.strip() else {}
        except ValueError:
            return args, False
        if isinstance(parsed, dict):
            return parsed, True
        return args, False
    return args, False


def _json_loads(s: str) -> Any:
    import json

    return json.loads(s)


def _pai_extra(leftovers: dict[str, Any]) -> dict[str, Any]:
    return {PAI_KEY: leftovers} if leftovers else {}


def _tp_request_part(p: Any, iso: Any) -> Any:
    cls = type(p)
    if cls is pm.UserPromptPart:
        if not isinstance(p.content, str):
            raise _Unsupported
        return m.UserPromptPart(content=p.content, extra={PAI_KEY: {"timestamp": iso(p.timestamp)}})
    if cls is pm.ToolReturnPart:
        outcome = p.outcome
        if outcome not in _STATUS or p.tool_kind is not None or p.retry is not None:
            raise _Unsupported
        content = p.content
        scalar = _scalar(content)
        if not scalar:
            content = _plain(content)
            if b'"kind"' in _encode(content):
                raise _Unsupported  # file items: their digests are Pydantic AI's to record
        left: dict[str, Any] = {"timestamp": iso(p.timestamp)}
        if outcome != "success":
            left["outcome"] = outcome
        if not scalar:
            left["content_file_digests"] = []
        return m.ToolReturnPart(
            tool_name=p.tool_name,
            tool_call_id=p.tool_call_id,
            status=_STATUS[outcome],
            content=content,
            metadata=UNSET if p.metadata is None else _plain(p.metadata),
            extra={PAI_KEY: left},
        )
    raise _Unsupported


def _tp_response_part(p: Any) -> Any:
    cls = type(p)
    if cls is pm.TextPart:
        if p.citations is not None:
            raise _Unsupported
        left: dict[str, Any] = {}
        if p.provider_name is not None:
            left["provider_name"] = p.provider_name
        if p.provider_details is not None:
            left["provider_details"] = _plain(p.provider_details)
        return m.TextPart(content=p.content, id=UNSET if p.id is None else p.id, extra=_pai_extra(left))
    if cls is pm.ToolCallPart:
        if p.tool_kind is not None:
            raise _Unsupported
        left = {}
        for k in ("id", "provider_name"):
            v = getattr(p, k)
            if v is not None:
                left[k] = v
        if p.provider_details is not None:
            left["provider_details"] = _plain(p.provider_details)
        args: Any = UNSET
        if p.args is not None:
            raw = p.args if isinstance(p.args, str) else _plain(p.args)
            args, keep_raw = parse_args(raw)
            if keep_raw:  # after the others, as message_to_tp adds it
                left["args"] = raw
        return m.ToolCallPart(tool_name=p.tool_name, tool_call_id=p.tool_call_id, args=args, extra=_pai_extra(left))
    if cls is pm.ThinkingPart:
        left = {}
        pn = p.provider_name
        if p.provider_details is not None:
            left["provider_details"] = _plain(p.provider_details)
        if pn == "":  # after the others, as message_to_tp adds it
            left["provider_name"] = ""
        return m.ThinkingPart(
            content=p.content,
            signature=UNSET if p.signature is None else p.signature,
            provider_name=pn if isinstance(pn, str) else "",
            thinking_id=UNSET if p.id is None else p.id,
            extra=_pai_extra(left),
        )
    raise _Unsupported


_USAGE_ORDER: Final = tuple(RequestUsage.__dataclass_fields__)
_USAGE_KEYS: Final = frozenset(_USAGE_ORDER)  # extra counters live in the instance's __dict__ too


def _tp_usage(u: Any) -> Any:
    if (
        u.cost is not None
        or u.unmeasured_requests
        or not isinstance(u.audio_seconds, int)
        or not _USAGE_KEYS.issuperset(u.__dict__)
    ):
        raise _Unsupported
    inp, out, reasoning = u.input_tokens, u.output_tokens, u.output_reasoning_tokens
    extra: dict[str, Any] = {}
    for f in _USAGE_ORDER:
        if f in ("input_tokens", "output_tokens", "output_reasoning_tokens", "cost", "unmeasured_requests"):
            continue
        v = getattr(u, f)
        if f == "details":
            if v:
                extra[f] = _plain(v)
        elif v != 0:
            extra[f] = v
    if not (inp or out or reasoning or extra):
        return UNSET
    return m.Usage(
        input_tokens=inp if inp else UNSET,
        output_tokens=out if out else UNSET,
        thinking_tokens=reasoning if reasoning else UNSET,
        total_tokens=(inp + out) if (inp or out) else UNSET,
        extra=extra,
    )


_RESPONSE_LEFTOVERS: Final = (
    "model_id", "provider_url", "canonical_system", "provider_details", "run_id", "conversation_id", "metadata",
)


#: The fields this mapping knows (pydantic-ai-slim 2.68). A release that adds one would have it
#: kept by message_to_tp's dump path but dropped here, so then only that path records.
_KNOWN_FIELDS: Final = {
    pm.ModelRequest: ("parts", "timestamp", "instructions", "kind", "run_id", "conversation_id", "metadata", "state"),
    pm.ModelResponse: (
        "parts", "usage", "model_name", "model_id", "timestamp", "kind", "provider_name", "provider_url",
        "canonical_system", "provider_details", "provider_response_id", "finish_reason", "run_id",
        "conversation_id", "metadata", "workspace_ref", "history_digest", "failed_attempts", "state",
    ),
    pm.UserPromptPart: ("content", "timestamp", "part_kind"),
    pm.TextPart: ("content", "id", "provider_name", "provider_details", "citations", "part_kind"),
    pm.ThinkingPart: ("content", "id", "signature", "provider_name", "provider_details", "part_kind"),
    pm.ToolCallPart: (
        "tool_name", "args", "tool_call_id", "tool_kind", "id", "provider_name", "provider_details", "_kind",
        "part_kind",
    ),
    pm.ToolReturnPart: (
        "_content_field", "tool_name", "content", "tool_call_id", "tool_kind", "metadata", "timestamp", "outcome",
        "_kind", "retry", "part_kind",
    ),
    RequestUsage: (
        "input_tokens", "cache_write_tokens", "cache_write_1h_tokens", "cache_read_tokens", "output_tokens",
        "unmeasured_requests", "output_reasoning_tokens", "input_audio_tokens", "cache_audio_read_tokens",
        "output_audio_tokens", "audio_seconds", "details", "cost",
    ),
}
RECORDING_FAST: Final = all(
    tuple(getattr(c, "__dataclass_fields__", ())) == f for c, f in _KNOWN_FIELDS.items()
)


def fast_message_to_tp(
    msg: Any, agent_id: str, iso: Any, default_timestamp: Any
) -> m.RequestMessage | m.ResponseMessage | None:
    """A Pydantic AI message as the protocol message :func:`message_to_tp` makes, built
    directly, or ``None`` for shapes only that path handles (and with a Pydantic AI whose
    messages have fields this mapping does not know). ``iso`` formats a datetime as
    Pydantic AI's JSON does; ``default_timestamp()`` gives a request without one its time."""
    if not RECORDING_FAST:
        return None
    try:
        cls = type(msg)
        if cls is pm.ModelRequest:
            if msg.state != "complete":
                raise _Unsupported
            parts = [_tp_request_part(p, iso) for p in msg.parts if type(p) is not pm.SystemPromptPart]
            left: dict[str, Any] = {}
            for k in ("run_id", "conversation_id"):
                v = getattr(msg, k)
                if v is not None:
                    left[k] = v
            if msg.metadata is not None:
                left["metadata"] = _plain(msg.metadata)
            if msg.timestamp is None:
                left["timestamp"] = None
                ts = default_timestamp()
            else:
                ts = iso(msg.timestamp)
            return m.RequestMessage(timestamp=ts, parts=parts, agent_id=agent_id, extra=_pai_extra(left))
        if cls is pm.ModelResponse:
            if (
                msg.state != "complete"
                or msg.workspace_ref is not None
                or msg.failed_attempts is not None
                or msg.history_digest is not None
            ):
                raise _Unsupported
            parts = [_tp_response_part(p) for p in msg.parts]
            left = {}
            for k in _RESPONSE_LEFTOVERS:
                v = getattr(msg, k)
                if v is not None:
                    left[k] = _plain(v) if isinstance(v, dict) else v
            return m.ResponseMessage(
                timestamp=iso(msg.timestamp),
                parts=parts,
                agent_id=agent_id,
                model_name=UNSET if msg.model_name is None else msg.model_name,
                provider_name=UNSET if msg.provider_name is None else msg.provider_name,
                provider_response_id=UNSET if msg.provider_response_id is None else msg.provider_response_id,
                finish_reason=UNSET if msg.finish_reason is None else msg.finish_reason,
                usage=_tp_usage(msg.usage),
                extra=_pai_extra(left),
            )
    except _Unsupported:
        pass
    return None
