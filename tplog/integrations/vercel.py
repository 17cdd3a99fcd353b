"""Vercel AI SDK UI message streams <-> ThreadProtocol turns.

Two halves:

- **Client assembly** (:class:`StreamAssembler`, :func:`assemble_turn`):
  feed it the UI message stream (SSE text ``data: {json}`` lines, or parsed
  chunk dicts) plus the UI request body the client sent (the user's message,
  tool approvals and client-side tool results are not in the stream); get the
  tplog events of the turn (``UserTurnSubmitted``, ``AgentTurnStarted``,
  ``MessageRecorded``..., ``AgentTurnCompleted``/``AgentTurnInterrupted``).
- **Server wrapper** (:func:`recorded_vercel_stream`): runs an agent through
  a :class:`~tplog.integrations.pydantic_ai.ThreadRecorder` and Pydantic AI's
  own ``VercelAIEventStream`` and injects ``data-tp-*`` chunks, so the client
  assembly reproduces *exactly* the events the server recorded (equal
  canonical thread, equal ``thread_hash``).

What Pydantic AI's Vercel adapter emits (checked against 2.68)
--------------------------------------------------------------

``start`` once. A *step* (``start-step``, the previous step closed by
``finish-step``) opens at the run's first model response and at each response
after a tool call: the adapter starts a step only when it turns from the
request side to the response side, and only a tool call takes it to the
request side. A response that follows a response *without* tool calls -- the
retry after an output validator's ``ModelRetry``, or after a text reply where
output was required otherwise -- streams into the same step, and the retry
request between them sends no chunk. The response's parts stream inside the
step (consecutive text parts of one response are merged into one UI text part;
each thinking part is its own ``reasoning-*`` part; tool calls stream
``tool-input-start``/``-delta`` but their ``tool-input-available`` is only sent
when the call is validated -- after the response is complete, or never for
calls with invalid args under SDK v6, which get ``tool-input-error`` instead).
Tool results (``tool-output-available``/``-error``/``-denied``, then any
``source-*``/``data-*`` chunks a tool return's metadata carries) follow inside
the same step, so a step is "response(s) + the tool results answering them".
``finish`` is the end of the whole run (= the agent turn), preceded by one
``message-metadata`` chunk (the last response's timestamp only) and, for
deferred approvals (v6), ``tool-approval-request`` chunks. A run resumed with
deferred results first announces each *approved* call again
(``tool-input-available``), then sends the outputs, before its first step.

Cancellation gives ``abort`` (reason "The agent run was cancelled." or
"...timed out."), a model or tool error ``error``. Before either, the adapter
closes what was open: the open text/reasoning part gets its ``*-end`` (so an
ended part proves nothing), and each call still running gets a synthetic
output -- ``tool-output-available`` "The tool call was interrupted before a
result was produced." on a cancel, ``tool-output-error`` "Tool execution was
interrupted by an error." on an error -- which is not a tool return. Both are
followed by ``finish-step`` and ``[DONE]``; after ``abort`` there is no
``finish``, after ``error`` Pydantic AI still sends ``finish`` (finishReason
``error``), which the assembler accepts and ignores. The user's prompt, system
prompts and request timestamps are never streamed.

Injected chunks (all at the end of the turn, before ``finish``/``abort``/
``error``): ``data-tp-user_turn``, ``data-tp-turn_start``,
``data-tp-message`` (one per recorded message), ``data-tp-turn_end``. A
message's parts are sent whole, except that content the stream already
carried is replaced by a reference ``{"$from": "stream", ...}`` (text and
reasoning by length, tool args/outputs by call id, files by order) and user
content the request body carries by ``{"$from": "body"}``; the server checks
each reference against the chunks it actually sent, so a reference is only
used where it resolves to the identical value. They are sent at the end
because a response's ``tool-input-available`` chunks only come after it.

Plain streams (no ``data-tp-*``): assembled as far as the wire allows -- a
step's completed parts form a response (two responses when a text part follows
a text part: one response's consecutive text parts are one UI part), the tool
results in the step a request, in the order the calls were made. A step the
run's end cut off (it never reached ``finish-step`` or the next
``start-step`` before ``abort``/``error``/the end of the input) is kept only if
one of its calls got an output, which proves its response complete, and the
closeout outputs above are dropped: exactly what the server records (v0.0.4
complete cycles). A re-announced call of an earlier turn (an id of the request
body's tool parts or of ``known_tool_calls``) is that call, not a new one.
Timestamps are the assembler's clock, never decreasing; ``data-*`` chunks
become system messages, ``source-*`` chunks system messages
``source.url``/``source.document``, after their step's messages.

What a plain stream cannot carry (the ``data-tp-*`` chunks carry all of it):
which agent and model answered (the turn is ``agent_id``'s), usage, finish
reasons and provider ids; the retry request between two responses of one step
(its content is never sent), and two such responses at all unless the second
starts with text right after the first's text; a tool's ``ModelRetry`` versus
its failure (both ``tool-output-error``: stored as an ``error`` return).

Rules and errors
----------------

Parts that never completed (no ``*-end``/``tool-input-available``) are
discarded. ``abort`` -> interrupted ``user_cancelled`` (``timeout`` when the
reason says it timed out); ``error`` -> interrupted ``error``; input ending
without ``finish``/``abort``/``error`` -> interrupted ``network_failure``
(the recovery for a stream breaking off anywhere). Unknown chunk types are
ignored wherever they come (forward compatibility); ``{"type": "done"}`` (Pydantic
AI's ``DoneChunk`` written as a JSON line) is ``[DONE]``. Typed errors, all
:class:`~tplog.InvalidInputError`: :class:`MalformedChunkError` (not JSON, not
an object, no ``type``, a required field missing or of the wrong type, bad
``data-tp-*`` payload), :class:`ChunkOrderError` (a delta/end for a part never
started, content after the end of the stream, a step before ``start``),
:class:`UnknownToolCallError` (a tool output/approval for a call never
announced), :class:`~tplog.ValidationError` (the assembled turn, as a thread of
its own, breaks a protocol rule, e.g. message order: it must not be stored).
Malformed JSON in streamed tool-input deltas is never parsed: a call counts
only once ``tool-input-available`` gives its parsed ``input``; without it the
call is incomplete and dropped.

Chat ids: AI SDK chat ids (``useChat``'s generated ids, ``"chat-1"``) are not
UUIDs; :func:`thread_id_for_chat` maps one to a stable UUIDv5 thread id (a UUID
maps to itself), and the chat id is kept in the thread's ``metadata`` under
``"vercel:chat_id"`` (:data:`CHAT_ID_KEY`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from datetime import UTC
from typing import Any, Final, cast

from tplog.errors import InvalidInputError, ValidationError
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
from tplog.projections.fold import fold
from tplog.protocol import model as m
from tplog.protocol.json import from_builtins, to_builtins
from tplog.protocol.validate import THREAD_ID_NAMESPACE, ValidationReport, thread_id_for, validate

__all__ = [
    "ChunkOrderError",
    "MalformedChunkError",
    "StreamAssembler",
    "UnknownToolCallError",
    "VercelStreamError",
    "assemble_turn",
    "parse_sse",
    "client_tool_results",
    "recorded_vercel_stream",
    "thread_id_for_chat",
    "ui_request",
    "user_turn_from_body",
]

TP_USER_TURN: Final = "data-tp-user_turn"
TP_TURN_START: Final = "data-tp-turn_start"
TP_MESSAGE: Final = "data-tp-message"
TP_TURN_END: Final = "data-tp-turn_end"
_TP_NOTICES: Final = frozenset({TP_USER_TURN, TP_TURN_START, TP_MESSAGE, TP_TURN_END})
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


def _now() -> str:
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


def _req(chunk: dict[str, Any], key: str, tp: type | tuple[type, ...] = str) -> Any:
    if key not in chunk:
        raise MalformedChunkError(f"{chunk.get('type')!r} chunk lacks {key!r}")
    v = chunk[key]
    if tp is not object and not isinstance(v, tp):
        raise MalformedChunkError(f"{chunk.get('type')!r} chunk field {key!r} has the wrong type")
    return v


# --------------------------------------------------------------------------- stream state


class _Call:
    __slots__ = (
        "approval",
        "available",
        "earlier",
        "error_input",
        "input",
        "name",
        "output",
        "output_kind",
        "provider_executed",
        "started",
        "synthetic",
    )

    def __init__(self, name: str, provider_executed: bool) -> None:
        self.name = name
        self.provider_executed = provider_executed
        self.available = False
        self.input: Any = None
        self.error_input = False
        self.output: Any = None
        self.output_kind: str | None = None  # available | error | denied
        self.approval = False
        self.earlier = False  # announced in an earlier stream (a deferred call resolved now)
        self.started = False  # its tool-input-start was in this stream (its place in the response)
        self.synthetic = False  # its output is the adapter's closeout of a run that broke off


class _StreamState:
    """What a stream carried: completed parts per step, calls by id, terminal state."""

    def __init__(self, known_calls: dict[str, str] | None = None, *, lenient: bool = False) -> None:
        self.known_calls = dict(known_calls or {})
        self.lenient = lenient
        self.started = False
        self.ended = False  # finish / abort / error seen
        self.done = False  # [DONE]
        self.terminal: tuple[str, str | None] | None = None  # ("finish"|"abort"|"error", reason)
        self.open_text: dict[str, list[str]] = {}
        self.open_reasoning: dict[str, list[str]] = {}
        self.texts: list[str] = []  # completed UI text parts, in order
        self.reasonings: list[str] = []
        self.files: list[dict[str, Any]] = []
        self.calls: dict[str, _Call] = {}
        self.input_deltas: dict[str, list[str]] = {}
        self.notices: list[tuple[str, Any]] = []
        # plain mode: ordered items per step, and whether the step reached its finish-step (or the
        # next start-step) before the stream ended
        self.steps: list[list[tuple[str, Any]]] = []
        self.steps_complete: list[bool] = []
        self.step_open = False
        self.in_step_items: list[tuple[str, Any]] = []
        self.message_metadata: Any = None
        self.finish_reason: Any = None

    def _item(self, kind: str, value: Any) -> None:
        self.in_step_items.append((kind, value))

    def feed(self, chunk: dict[str, Any] | str) -> None:
        if chunk == DONE:
            self.done = True
            return
        if not isinstance(chunk, dict):
            raise MalformedChunkError(f"chunk is not an object: {chunk!r}")
        ctype = chunk.get("type")
        if not isinstance(ctype, str):
            raise MalformedChunkError("chunk lacks its 'type'")
        if ctype == "done":  # Pydantic AI's DoneChunk as a JSON line: it is sent as [DONE]
            self.done = True
            return
        if ctype not in _KNOWN_CHUNKS and not ctype.startswith("data-"):
            return  # unknown chunk types are ignored wherever they come (forward compatibility)
        if self.done:
            raise ChunkOrderError(f"{ctype!r} chunk after [DONE]")
        if ctype == "start":
            if self.started:
                raise ChunkOrderError("second 'start' chunk")
            self.started = True
            return
        if not self.started and not ctype.startswith("data-"):
            raise ChunkOrderError(f"{ctype!r} chunk before 'start'")
        if ctype == "finish" and self.terminal is not None and self.terminal[0] == "error":
            self.finish_reason = chunk.get("finishReason")  # Pydantic AI: error, then finish(error)
            return
        if self.ended and ctype not in ("finish-step", "message-metadata") and not ctype.startswith("data-"):
            where = self.terminal[0] if self.terminal else ""
            raise ChunkOrderError(f"{ctype!r} chunk after the stream ended ({where})")
        if ctype == "start-step":
            self._close_step()
            self.step_open = True
        elif ctype == "finish-step":
            self._close_step()
        elif ctype == "text-start":
            self.open_text[_req(chunk, "id")] = []
        elif ctype == "text-delta":
            pid = _req(chunk, "id")
            if pid not in self.open_text:
                raise ChunkOrderError(f"text-delta for unknown text part {pid!r}")
            self.open_text[pid].append(_req(chunk, "delta"))
        elif ctype == "text-end":
            pid = _req(chunk, "id")
            if pid not in self.open_text:
                raise ChunkOrderError(f"text-end for unknown text part {pid!r}")
            text = "".join(self.open_text.pop(pid))
            self.texts.append(text)
            self._item("text", text)
        elif ctype == "reasoning-start":
            self.open_reasoning[_req(chunk, "id")] = []
        elif ctype == "reasoning-delta":
            pid = _req(chunk, "id")
            if pid not in self.open_reasoning:
                raise ChunkOrderError(f"reasoning-delta for unknown reasoning part {pid!r}")
            self.open_reasoning[pid].append(_req(chunk, "delta"))
        elif ctype == "reasoning-end":
            pid = _req(chunk, "id")
            if pid not in self.open_reasoning:
                raise ChunkOrderError(f"reasoning-end for unknown reasoning part {pid!r}")
            text = "".join(self.open_reasoning.pop(pid))
            self.reasonings.append(text)
            self._item("reasoning", (text, chunk.get("providerMetadata")))
        elif ctype == "tool-input-start":
            cid = _req(chunk, "toolCallId")
            new = self.calls[cid] = _Call(_req(chunk, "toolName"), bool(chunk.get("providerExecuted")))
            new.started = True
            self.input_deltas[cid] = []
            # the call's place in the response: its input is only announced once the response is
            # complete (tool-input-available), after later parts of the same response
            self._item("call", cid)
        elif ctype == "tool-input-delta":
            cid = _req(chunk, "toolCallId")
            if cid not in self.input_deltas:
                raise ChunkOrderError(f"tool-input-delta for unknown tool call {cid!r}")
            self.input_deltas[cid].append(_req(chunk, "inputTextDelta"))
        elif ctype in ("tool-input-available", "tool-input-error"):
            cid = _req(chunk, "toolCallId")
            name = _req(chunk, "toolName")
            call = self.calls.get(cid)
            announced = call is not None and call.started
            if call is None and ctype == "tool-input-available" and cid in self.known_calls:
                # a resumed run announces approved calls of an earlier turn again: no new call
                call = self.calls[cid] = _Call(name, bool(chunk.get("providerExecuted")))
                call.earlier = announced = True
            elif call is None:
                call = self.calls[cid] = _Call(name, bool(chunk.get("providerExecuted")))
            call.available = True
            call.input = _req(chunk, "input", object)
            call.provider_executed = call.provider_executed or bool(chunk.get("providerExecuted"))
            if ctype == "tool-input-error":
                call.error_input = True
                call.output_kind = "input-error"
                call.output = _req(chunk, "errorText")
            if not announced:
                self._item("call", cid)
            if ctype == "tool-input-error":
                self._item("result", cid)
        elif ctype in ("tool-output-available", "tool-output-error", "tool-output-denied"):
            cid = _req(chunk, "toolCallId")
            call = self.calls.get(cid)
            if call is None and (cid in self.known_calls or self.lenient):
                call = self.calls[cid] = _Call(self.known_calls.get(cid, ""), False)
                call.available = True
                call.earlier = True
            if call is None or not call.available:
                raise UnknownToolCallError(f"{ctype} for unknown tool call {cid!r}")
            if ctype == "tool-output-available":
                call.output, call.output_kind = _req(chunk, "output", object), "available"
                call.synthetic = call.output == INTERRUPTED_TOOL_OUTPUT
            elif ctype == "tool-output-error":
                call.output, call.output_kind = _req(chunk, "errorText"), "error"
                call.synthetic = call.output == ERRORED_TOOL_OUTPUT
            else:
                call.output_kind = "denied"
            self._item("result", cid)
        elif ctype == "tool-approval-request":
            cid = _req(chunk, "toolCallId")
            if cid not in self.calls:
                raise UnknownToolCallError(f"tool-approval-request for unknown tool call {cid!r}")
            self.calls[cid].approval = True
        elif ctype == "file":
            f = {"url": _req(chunk, "url"), "media_type": _req(chunk, "mediaType")}
            self.files.append(f)
            self._item("file", f)
        elif ctype in ("source-url", "source-document"):
            self._item("source", dict(chunk))
        elif ctype == "message-metadata":
            self.message_metadata = chunk.get("messageMetadata")
        elif ctype == "finish":
            self._close_step()
            self.ended = True
            self.terminal = ("finish", None)
            self.finish_reason = chunk.get("finishReason")
        elif ctype == "abort":
            self._close_step(complete=False)
            self.ended = True
            self.terminal = ("abort", chunk.get("reason"))
        elif ctype == "error":
            self._close_step(complete=False)
            self.ended = True
            self.terminal = ("error", chunk.get("errorText"))
        elif ctype.startswith("data-"):
            if ctype in _TP_NOTICES:
                self.notices.append((ctype, chunk.get("data")))
            else:
                self._item("data", (ctype, chunk.get("data")))
        # unknown chunk types: ignored

    def _close_step(self, *, complete: bool = True) -> None:
        if self.in_step_items or self.step_open:
            self.steps.append(self.in_step_items)
            self.steps_complete.append(complete)
        self.in_step_items = []
        self.step_open = False


_KNOWN_CHUNKS: Final = frozenset(
    {
        "start",
        "start-step",
        "finish-step",
        "text-start",
        "text-delta",
        "text-end",
        "reasoning-start",
        "reasoning-delta",
        "reasoning-end",
        "tool-input-start",
        "tool-input-delta",
        "tool-input-available",
        "tool-input-error",
        "tool-output-available",
        "tool-output-error",
        "tool-output-denied",
        "tool-approval-request",
        "file",
        "source-url",
        "source-document",
        "message-metadata",
        "finish",
        "abort",
        "error",
    }
)


class _Cursor:
    """Consumes stream content in order for reference resolution."""

    def __init__(self, st: _StreamState) -> None:
        self.st = st
        self.texts = list(st.texts)
        self.reasonings = list(st.reasonings)
        self.files = list(st.files)

    @staticmethod
    def _take(queue: list[str], n: int) -> str | None:
        if not queue or len(queue[0]) < n:
            return None
        head = queue[0]
        out, rest = head[:n], head[n:]
        if rest:
            queue[0] = rest
        else:
            queue.pop(0)
        return out

    def text(self, n: int) -> str | None:
        return self._take(self.texts, n)

    def reasoning(self, n: int) -> str | None:
        return self._take(self.reasonings, n)

    def file(self) -> dict[str, Any] | None:
        return self.files.pop(0) if self.files else None


_MISSING = object()


def _resolve_part(part: dict[str, Any], cur: _Cursor, body_parts: list[dict[str, Any]] | None) -> Any:
    """A notice part with its ``$from`` reference filled in, or ``_MISSING``."""
    src = part.get("$from")
    if src is None:
        return part
    out = {k: v for k, v in part.items() if not k.startswith("$")}
    kind = part.get("part_kind")
    if src == "body":
        idx = part.get("$index")
        # from the stream, so outside input: a negative index must not count from the end
        if body_parts is None or type(idx) is not int or not 0 <= idx < len(body_parts):
            return _MISSING
        out["content"] = body_parts[idx].get("content")
        return out
    if src != "stream":
        raise MalformedChunkError(f"unknown reference source {src!r}")
    if kind in ("text", "thinking"):
        n = part.get("$len")
        if not isinstance(n, int):
            raise MalformedChunkError("text/thinking reference lacks $len")
        s = cur.text(n) if kind == "text" else cur.reasoning(n)
        if s is None:
            return _MISSING
        out["content"] = s
        return out
    if kind == "tool-call":
        call = cur.st.calls.get(part.get("tool_call_id", ""))
        if call is None or not call.available:
            return _MISSING
        out["args"] = call.input
        return out
    if kind == "tool-return":
        call = cur.st.calls.get(part.get("tool_call_id", ""))
        if call is None or call.output_kind != "available":
            return _MISSING
        out["content"] = call.output
        return out
    if kind == "file":
        f = cur.file()
        if f is None:
            return _MISSING
        content = dict(out.get("content") or {})
        content["data"] = _data_uri_payload(f["url"])
        out["content"] = content
        return out
    raise MalformedChunkError(f"part kind {kind!r} cannot reference the stream")


def _data_uri_payload(url: str) -> str:
    head, sep, data = url.partition(",")
    if not sep or not head.startswith("data:"):
        return url
    return data


# --------------------------------------------------------------------------- request body


def _last_user_message(body: dict[str, Any] | None) -> dict[str, Any] | None:
    if not body:
        return None
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        return None
    last = msgs[-1]
    if isinstance(last, dict) and last.get("role") == "user":
        return last
    return None


def user_turn_from_body(body: dict[str, Any] | None, *, submitted_at: str) -> m.UserTurn | None:
    """The user turn in a UI request body (its last message, if it is the user's), via Pydantic AI's loader."""
    msg = _last_user_message(body)
    if msg is None:
        return None
    import pydantic
    from pydantic_ai.ui.vercel_ai import VercelAIAdapter
    from pydantic_ai.ui.vercel_ai.request_types import UIMessage

    from tplog.integrations.pydantic_ai import is_user_request, user_turn_from_request

    ui = pydantic.TypeAdapter(UIMessage).validate_python(msg)
    loaded = VercelAIAdapter.load_messages([ui])
    if not loaded or not is_user_request(loaded[-1]):
        return None
    return user_turn_from_request(loaded[-1], submitted_at=submitted_at)  # type: ignore[arg-type]


def _body_tool_calls(body: dict[str, Any] | None) -> dict[str, str]:
    """``tool_call_id -> tool_name`` of the tool parts in a UI request body's messages."""
    out: dict[str, str] = {}
    for msg in (body or {}).get("messages") or []:
        for part in (msg.get("parts") or []) if isinstance(msg, dict) else []:
            if not isinstance(part, dict) or not isinstance(part.get("toolCallId"), str):
                continue
            ptype = part.get("type", "")
            name = part.get("toolName") if ptype == "dynamic-tool" else ptype[5:] if ptype.startswith("tool-") else None
            if isinstance(name, str):
                out[part["toolCallId"]] = name
    return out


def client_tool_results(body: dict[str, Any] | None) -> dict[str, tuple[str, Any]]:
    """Tool results the client made (AI SDK v6 ``addToolOutput``/``addToolResult``):
    ``tool_call_id -> ("output", value) | ("error", text)`` from the ``output-available`` /
    ``output-error`` tool parts of the body's last message when it is the assistant's.

    Server-run tools of earlier steps show up there too: only the ids of calls still waiting for
    a result are client results (the caller knows which those are).
    """
    msgs = (body or {}).get("messages")
    last = msgs[-1] if isinstance(msgs, list) and msgs else None
    if not isinstance(last, dict) or last.get("role") != "assistant":
        return {}
    out: dict[str, tuple[str, Any]] = {}
    for part in last.get("parts") or []:
        if not isinstance(part, dict) or not isinstance(part.get("toolCallId"), str):
            continue
        ptype = part.get("type", "")
        if not (isinstance(ptype, str) and (ptype.startswith("tool-") or ptype == "dynamic-tool")):
            continue
        if part.get("providerExecuted"):
            continue
        if part.get("state") == "output-available" and "output" in part:
            out[part["toolCallId"]] = ("output", part["output"])
        elif part.get("state") == "output-error" and isinstance(part.get("errorText"), str):
            out[part["toolCallId"]] = ("error", part["errorText"])
    return out


def _unanswered_calls(history: Any) -> set[str]:
    """Ids of the tool calls of a Pydantic AI history's last response that no later request answers."""
    from pydantic_ai import messages as pm

    if not history:
        return set()
    calls: set[str] = set()
    for msg in history:
        if isinstance(msg, pm.ModelResponse):
            calls = {p.tool_call_id for p in msg.parts if isinstance(p, pm.ToolCallPart)}
        else:
            calls -= {p.tool_call_id for p in msg.parts if isinstance(p, pm.ToolReturnPart | pm.RetryPromptPart)}
    return calls


def _body_parts(body: dict[str, Any] | None) -> list[dict[str, Any]] | None:
    turn = user_turn_from_body(body, submitted_at="")
    return None if turn is None else to_builtins(turn)["parts"]


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
        self.clock = clock or _now
        known = _body_tool_calls(request_body)
        known.update(known_tool_calls or {})
        self.state = _StreamState(known)
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
        cur = _Cursor(st)
        body_parts = _body_parts(self.body)
        out: list[Event] = []
        dropped = False
        for kind, data in st.notices:
            if not isinstance(data, dict):
                raise MalformedChunkError(f"{kind} payload is not an object")
            try:
                if kind == TP_USER_TURN:
                    turn = dict(data["turn"])
                    parts = [_resolve_part(p, cur, body_parts) for p in turn.get("parts", [])]
                    if any(p is _MISSING for p in parts):
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
                        parts = [_resolve_part(p, cur, body_parts) for p in msg["parts"]]
                        if any(p is _MISSING for p in parts):
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
                                "data": _data_uri_payload(value["url"]),
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


def _complete_part_of(items: list[tuple[str, Any]], st: _StreamState) -> list[tuple[str, Any]]:
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


def _result_part(cid: str, call: _Call) -> dict[str, Any]:
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


# --------------------------------------------------------------------------- server wrapper


def _notices(events: list[Event], st: _StreamState, body_parts: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The ``data-tp-*`` chunks for a turn's recorded events, using stream references where exact."""
    cur = _Cursor(st)
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
        got = _resolve_part(cand, trial, body_parts)
        if got is not _MISSING and got == part:
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
    ``deferred_tool_results`` unless given. The recorder is a
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
    if user_prompt is None and _last_user_message(body) is not None:
        loaded = VercelAIAdapter.load_messages([run_input.messages[-1]])
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
        waiting = _unanswered_calls(run_kwargs.get("message_history"))
        calls: dict[str, Any] = {
            cid: (ToolFailed(value) if kind == "error" else value)
            for cid, (kind, value) in client_tool_results(body).items()
            if cid in waiting and cid not in approvals
        }
        if approvals or calls:
            run_kwargs["deferred_tool_results"] = DeferredToolResults(approvals=approvals, calls=calls)
    body_parts = _body_parts(body)
    stream = VercelAIEventStream(run_input, sdk_version=sdk_version, server_message_id=message_id)  # type: ignore[arg-type]
    recorded: list[Event] = []
    ended = False
    state = _StreamState(lenient=True)

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
