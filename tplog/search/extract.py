"""What the search index holds of an event: its searchable text, field by field (pure).

A row is ``(field, text)``; an event gives zero or more rows (a response with a text
part and a tool call gives a ``response`` row and a ``tool_call`` row, both at its seq).
Fields: ``title``, ``metadata`` (thread level, turn 0), ``prompt`` (user prompts and retry
prompts), ``response`` (text parts), ``thinking`` (only with ``thinking=True``), ``tool_call``
(the tool's name, then its arguments) and ``tool_return`` (the tool's name, then what it
returned). Structured values are indexed as their JSON text. A row's text is cut at
:data:`MAX_TEXT` characters, so one huge tool return cannot bloat the index.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from tplog.events import MessageRecorded, ThreadInfoChanged, ThreadStarted, UserTurnSubmitted
from tplog.protocol import model as m

__all__ = ["FIELDS", "MAX_TEXT", "rows_of"]

FIELDS: Final = ("title", "metadata", "prompt", "response", "thinking", "tool_call", "tool_return")
MAX_TEXT: Final = 32_768

_json = msgspec.json.Encoder()


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is msgspec.UNSET or value is None:
        return ""
    try:
        return _json.encode(msgspec.to_builtins(value)).decode()
    except (TypeError, msgspec.EncodeError):  # pragma: no cover - stored values always encode
        return str(value)


def _metadata(md: Any) -> str:
    """Metadata as ``key: value`` lines (values as JSON unless strings)."""
    return "\n".join(f"{k}: {_text(v)}" for k, v in md.items()) if isinstance(md, dict) else ""


def _content(content: Any) -> str:
    """A prompt's content: its text, and the text items of a multi-part one (media is not text)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(c for c in content if isinstance(c, str))
    return _text(content)


def _parts(parts: list[Any], thinking: bool) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for p in parts:
        if isinstance(p, (m.UserPromptPart, m.RetryPromptPart)):
            out.append(("prompt", _content(p.content)))
        elif isinstance(p, m.TextPart):
            out.append(("response", p.content))
        elif isinstance(p, m.ThinkingPart):
            if thinking and isinstance(p.content, str):
                out.append(("thinking", p.content))
        elif isinstance(p, m.ToolCallPart):
            out.append(("tool_call", f"{p.tool_name} {_text(p.args)}".rstrip()))
        elif isinstance(p, m.ToolReturnPart):
            out.append(("tool_return", f"{p.tool_name} {_text(p.content)}".rstrip()))
    return out


def _merged(rows: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """One row per field (the event's parts of one field joined), in first-seen order, empty ones dropped."""
    by: dict[str, list[str]] = {}
    for f, t in rows:
        if t.strip():
            by.setdefault(f, []).append(t)
    return [(f, "\n".join(ts)[:MAX_TEXT]) for f, ts in by.items()]


def rows_of(event: Any, *, thinking: bool = False) -> list[tuple[str, str]]:
    """The ``(field, text)`` rows ``event`` gives the index (none for events without text)."""
    if isinstance(event, (ThreadStarted, ThreadInfoChanged)):
        return _merged([("title", _text(event.title)), ("metadata", _metadata(event.metadata))])
    if isinstance(event, UserTurnSubmitted):
        return _merged(_parts(event.turn.parts, thinking))
    if isinstance(event, MessageRecorded):
        msg = event.message
        if isinstance(msg, (m.RequestMessage, m.ResponseMessage)):
            return _merged(_parts(msg.parts, thinking))
    return []
