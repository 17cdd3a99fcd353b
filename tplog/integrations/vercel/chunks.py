"""The UI message stream's vocabulary: tplog's ``data-tp-*`` chunk types, the stream errors,
chat ids and the SSE parser.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from datetime import UTC
from typing import Any, Final

from tplog.errors import InvalidInputError
from tplog.protocol.validate import THREAD_ID_NAMESPACE, thread_id_for

__all__ = [
    "CHAT_ID_KEY", "CHAT_NAMESPACE", "ChunkOrderError", "DONE", "ERRORED_TOOL_OUTPUT",
    "INTERRUPTED_TOOL_OUTPUT", "MESSAGE_ID_KEY", "MalformedChunkError", "TP_MESSAGE", "TP_NOTICES",
    "TP_TURN_END", "TP_TURN_START", "TP_USER_TURN", "UnknownToolCallError", "VercelStreamError", "now",
    "parse_sse", "req_field", "thread_id_for_chat",
]


TP_USER_TURN: Final = "data-tp-user_turn"
TP_TURN_START: Final = "data-tp-turn_start"
TP_MESSAGE: Final = "data-tp-message"
TP_TURN_END: Final = "data-tp-turn_end"
TP_NOTICES: Final = frozenset({TP_USER_TURN, TP_TURN_START, TP_MESSAGE, TP_TURN_END})
DONE: Final = "[DONE]"
#: The outputs Pydantic AI's adapter sends for tool calls still pending when a run is cancelled or
#: errors (its stream closeout): they are no tool returns.
INTERRUPTED_TOOL_OUTPUT: Final = "The tool call was interrupted before a result was produced."
ERRORED_TOOL_OUTPUT: Final = "Tool execution was interrupted by an error."


class VercelStreamError(InvalidInputError):
    """A UI message stream tplog cannot assemble."""


class MalformedChunkError(VercelStreamError):
    """A chunk that is not valid JSON, not an object, or lacks a required field."""


class ChunkOrderError(VercelStreamError):
    """A chunk out of order: a delta/end without its start, content after the stream ended, ..."""


class UnknownToolCallError(VercelStreamError):
    """A tool output or approval request for a tool call the stream never announced."""


#: Namespace of the UUIDv5 thread ids made from AI SDK chat ids (fixed: the same chat id gives the
#: same thread id in every tplog installation).
CHAT_NAMESPACE: Final = THREAD_ID_NAMESPACE
#: Thread metadata key holding the AI SDK chat id a thread was made for.
CHAT_ID_KEY: Final = "vercel:chat_id"
#: Key of a user turn and an agent turn (beside the protocol's fields) holding the AI SDK UI message
#: id it was shown as: the user message's id the client made, the assistant message's id the server
#: sent in ``start`` (a run that continues a message after approvals or tool results keeps its id).
MESSAGE_ID_KEY: Final = "vercel:message_id"


def thread_id_for_chat(chat_id: str) -> str:
    """The thread id for an AI SDK chat id: :func:`tplog.thread_id_for` (the chat id itself when
    it is a UUID, in canonical lower-case form, else a stable UUIDv5 of it).

    ThreadProtocol thread ids are UUIDs; ``useChat`` ids (and ``"chat-1"``) are not.
    """
    if not isinstance(chat_id, str) or not chat_id:
        raise MalformedChunkError(f"a chat id is a non-empty string, not {chat_id!r}")
    return thread_id_for(chat_id)


def now() -> str:
    from datetime import datetime

    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


# --------------------------------------------------------------------------- SSE


def parse_sse(text: str | bytes | Iterable[str]) -> Iterator[dict[str, Any] | str]:
    """Parse SSE text into chunk dicts (and ``"[DONE]"``). Non-``data:`` lines are ignored."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedChunkError(f"the stream is not UTF-8 text: {exc}") from exc
    lines = text.splitlines() if isinstance(text, str) else (ln for t in text for ln in t.splitlines())
    for line in lines:
        line = line.strip("\r")
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if not payload:
            continue
        if payload == DONE:
            yield DONE
            continue
        try:
            obj = json.loads(payload)
        except ValueError as exc:
            raise MalformedChunkError(f"SSE data line is not JSON: {payload[:80]!r}") from exc
        if not isinstance(obj, dict):
            raise MalformedChunkError(f"chunk is not a JSON object: {payload[:80]!r}")
        yield obj


def req_field(chunk: dict[str, Any], key: str, tp: type | tuple[type, ...] = str) -> Any:
    if key not in chunk:
        raise MalformedChunkError(f"{chunk.get('type')!r} chunk lacks {key!r}")
    v = chunk[key]
    if tp is not object and not isinstance(v, tp):
        raise MalformedChunkError(f"{chunk.get('type')!r} chunk field {key!r} has the wrong type")
    return v
