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

from tplog import _model as m

__all__ = ["HistoryCache", "fast_message", "fast_user_turn"]

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


def _request_part(part: Any) -> Any:
    cls = type(part)
    if cls is m.UserPromptPart:
        content = part.content
        if not isinstance(content, str):
            raise _Unsupported
        pai = _pai(part)
        if not pai:
            return pm.UserPromptPart(content)
        if pai.keys() - {"timestamp"}:
            raise _Unsupported
        return pm.UserPromptPart(content, timestamp=_ts(pai["timestamp"]))
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
            kw["metadata"] = part.metadata
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
            part.tool_name,
            _content(None if content is UNSET else content),
            part.tool_call_id,
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
        return pm.ToolReturnPart(part.tool_name, content, outcome="retried", **kw)
    raise _Unsupported


def _response_part(part: Any) -> Any:
    cls = type(part)
    if cls is m.TextPart:
        kw: dict[str, Any] = {}
        if part.id is not UNSET:
            kw["id"] = part.id
        pai = _pai(part)
        for k, v in pai.items():
            if not _simple(k, v, _PROVIDER):
                raise _Unsupported
            kw[k] = v
        return pm.TextPart(part.content, **kw)
    if cls is m.ToolCallPart:
        args = part.args
        kw = {}
        pai = _pai(part)
        for k, v in pai.items():
            if k == "args" and isinstance(v, str):
                args = v
            elif _simple(k, v, _CALL):
                kw[k] = v
            else:
                raise _Unsupported
        if args is UNSET:
            args = None
        elif isinstance(args, dict):
            args = dict(args)  # the stored object is shared with the fold cache
        elif not isinstance(args, str):
            raise _Unsupported
        return pm.ToolCallPart(part.tool_name, args, part.tool_call_id, **kw)
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
            kw[k] = v
        return pm.ThinkingPart("" if content is UNSET or not content else content, **kw)
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


def fast_user_turn(turn: m.UserTurn) -> pm.ModelMessage | None:
    """The ``ModelRequest`` a user turn stands for, or ``None`` (see :func:`fast_message`)."""
    pai = turn.extra.get(PAI_KEY) if turn.extra else None
    msg = m.RequestMessage(
        timestamp=turn.submitted_at, parts=turn.parts, agent_id="", extra={} if pai is None else {PAI_KEY: pai}
    )
    return fast_message(msg)


def fast_message(msg: Any, drop_thinking: bool = False) -> pm.ModelMessage | None:
    """``msg`` (a protocol request or response) as a Pydantic AI message, or ``None``
    when it has a shape only the validating path handles. With ``drop_thinking`` its
    thinking parts are left out (the caller skips a message left with no parts)."""
    try:
        cls = type(msg)
        if cls is m.RequestMessage:
            parts = [_request_part(p) for p in msg.parts]
            kw: dict[str, Any] = {}
            ts: Any = _ts(msg.timestamp)
            for k, v in _pai(msg).items():
                if k == "timestamp":
                    ts = None if v is None else _ts(v)
                elif _simple(k, v, _REQUEST):
                    kw[k] = v
                else:
                    raise _Unsupported
            return pm.ModelRequest(parts, timestamp=ts, **kw)
        if cls is m.ResponseMessage:
            src = [p for p in msg.parts if type(p) is not m.ThinkingPart] if drop_thinking else msg.parts
            parts = [_response_part(p) for p in src]
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
                    kw[k] = v
                else:
                    raise _Unsupported
            return pm.ModelResponse(parts, timestamp=ts, **kw)
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
    time). Thread-safe."""

    def __init__(self, max_messages: int = 100_000) -> None:
        if isinstance(max_messages, bool) or not isinstance(max_messages, int) or max_messages < 0:
            from tplog._errors import InvalidInputError

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
