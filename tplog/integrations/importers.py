"""Import foreign conversation formats as ThreadProtocol threads (``tplog import --format ...``).

Formats:

``pydantic-ai``
    A Pydantic AI message history: the JSON list ``ModelMessagesTypeAdapter``
    dumps (``result.all_messages_json()``). One thread. Each user-prompt-only
    request is a user turn; everything else of a run is the agent turn's
    messages; a change of ``run_id`` starts a new agent turn; a response that
    is not ``complete`` (kept by Pydantic AI after a cancel) ends its turn as
    interrupted (reason ``"interrupted"``). See
    :mod:`tplog.integrations.pydantic_ai` for the part mapping.

``vercel-ui``
    Either a Vercel AI SDK **UI message stream** -- SSE text (``data: {...}``
    lines) or JSON lines (one chunk object per line, ``[DONE]`` allowed) --
    plus, in ``request``, the UI request body the client sent (the user's
    message, earlier messages, tool approvals and client-side tool results are
    only there); or a **stored UIMessage array** (a JSON list of UI messages,
    e.g. what ``useChat`` persists or ``VercelAIAdapter.dump_messages`` gives).
    A stream gives one thread: the request body's earlier messages (everything
    before its last user message, or all of them when the last one is not the
    user's) as the turns before it, then the stream's turn, assembled exactly
    from the ``data-tp-*`` chunks when the server sent them
    (:func:`~tplog.integrations.vercel.recorded_vercel_stream`), best effort
    otherwise (:func:`~tplog.integrations.vercel.assemble_turn`). A UIMessage
    array is loaded with Pydantic AI's own ``VercelAIAdapter.load_messages``
    and then mapped as ``pydantic-ai``.

Every thread gets a new UUID thread id unless ``thread_id`` is given (any
non-empty string: it goes through :func:`tplog.thread_id_for`, the one id rule,
so a non-UUID id such as an AI SDK chat id becomes its stable UUIDv5), and
registers every agent its turns name (``agent_name``, default ``"assistant"``;
the model and provider names of the agent's first response). The result is validated: a thread
with validation errors raises :class:`~tplog.ValidationError`.

Errors (all :class:`~tplog.InvalidInputError`, nothing written):
:class:`UnknownFormatError`, :class:`PydanticAIImportError` (not UTF-8, not
JSON, not a message list, a message Pydantic AI rejects),
:class:`VercelImportError` (bad request body, bad UIMessage array, empty
stream) and the stream errors of :mod:`tplog.integrations.vercel`
(:class:`~tplog.integrations.vercel.MalformedChunkError`,
:class:`~tplog.integrations.vercel.ChunkOrderError`,
:class:`~tplog.integrations.vercel.UnknownToolCallError`).
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any, Final

import pydantic
from pydantic_ai import messages as pm

from tplog.errors import InvalidInputError
from tplog.events import (
    AgentRegistered,
    AgentTurnStarted,
    Event,
    MessageRecorded,
    ThreadStarted,
    UserTurnSubmitted,
)
from tplog.integrations.pydantic_ai import events_from_messages, now_iso
from tplog.integrations.vercel import DONE, MalformedChunkError, StreamAssembler, client_tool_results, parse_sse
from tplog.projections.fold import fold
from tplog.protocol import model as m
from tplog.protocol.validate import thread_id_for, validate

__all__ = [
    "FORMATS",
    "ImportFormatError",
    "PydanticAIImportError",
    "UnknownFormatError",
    "VercelImportError",
    "load",
    "load_events",
]

#: The formats :func:`load` reads.
FORMATS: Final = ("pydantic-ai", "vercel-ui")

DEFAULT_AGENT_NAME: Final = "assistant"


class ImportFormatError(InvalidInputError):
    """Input that is not valid in the format it was declared to be."""


class UnknownFormatError(ImportFormatError):
    """A format name :func:`load` does not know."""


class PydanticAIImportError(ImportFormatError):
    """Not a Pydantic AI ``ModelMessagesTypeAdapter`` JSON message list."""


class VercelImportError(ImportFormatError):
    """Not a Vercel AI UI message stream (with its request body) or a stored UIMessage array."""


# --------------------------------------------------------------------------- entry points


def load(
    fmt: str,
    data: bytes,
    *,
    request: bytes | None = None,
    thread_id: str | None = None,
    agent_id: str | None = None,
    agent_name: str | None = None,
    title: str | None = None,
    clock: Callable[[], str] | None = None,
) -> list[m.Thread]:
    """The threads ``data`` (in format ``fmt``) holds, as ThreadProtocol v0.0.4 documents.

    ``request`` is the UI request body (``vercel-ui`` streams only).
    ``agent_id`` names the agent of turns the input does not attribute
    (default: a new UUID); ``clock`` gives the times the input lacks (default:
    now). Store them with ``Store.import_thread``.
    """
    out: list[m.Thread] = []
    for events in load_events(
        fmt,
        data,
        request=request,
        thread_id=thread_id,
        agent_id=agent_id,
        agent_name=agent_name,
        title=title,
        clock=clock,
    ):
        thread = fold(events).thread
        if thread is None:  # pragma: no cover - load_events always starts with ThreadStarted
            raise ImportFormatError("nothing to import")
        out.append(thread)
    return out


def load_events(
    fmt: str,
    data: bytes,
    *,
    request: bytes | None = None,
    thread_id: str | None = None,
    agent_id: str | None = None,
    agent_name: str | None = None,
    title: str | None = None,
    clock: Callable[[], str] | None = None,
) -> list[list[Event]]:
    """Like :func:`load`, as each thread's history events (``Store.append`` them to a new thread).

    The events keep what a document cannot hold (e.g. ``AgentTurnCompleted.deferred``,
    so ``Store.pending`` tells approvals from external calls).
    """
    clock = clock or now_iso
    tid = thread_id_for(thread_id) if thread_id is not None else str(uuid.uuid4())
    aid = agent_id or str(uuid.uuid4())
    if fmt == "pydantic-ai":
        if request is not None:
            raise PydanticAIImportError("a request body only goes with --format vercel-ui")
        msgs = _pai_messages(data)
        body = events_from_messages(msgs, agent_id=aid)
    elif fmt == "vercel-ui":
        body = _vercel_events(data, request, aid, clock)
    else:
        raise UnknownFormatError(f"unknown import format {fmt!r} (known: {', '.join(FORMATS)})")
    return [_finish(tid, body, agent_name, title, clock)]


# --------------------------------------------------------------------------- common


def _finish(
    thread_id: str, body: list[Event], agent_name: str | None, title: str | None, clock: Callable[[], str]
) -> list[Event]:
    """``ThreadStarted`` + one ``AgentRegistered`` per agent the turns name + ``body``; validated."""
    if not any(isinstance(ev, UserTurnSubmitted | AgentTurnStarted | MessageRecorded) for ev in body):
        raise ImportFormatError("the input holds no messages")
    created = next((t for t in (ev.time() for ev in body) if isinstance(t, str)), None) or clock()
    agents: list[str] = []
    for ev in body:
        ids: list[str] = []
        if isinstance(ev, AgentTurnStarted):
            ids.append(ev.agent_id)
        elif isinstance(ev, MessageRecorded) and isinstance(ev.message, m.RequestMessage | m.ResponseMessage):
            ids.append(ev.message.agent_id)
        agents += [a for a in ids if a not in agents]
    model_names: dict[str, Any] = {}
    provider_names: dict[str, Any] = {}
    for ev in body:
        if isinstance(ev, MessageRecorded) and isinstance(ev.message, m.ResponseMessage):
            model_names.setdefault(ev.message.agent_id, ev.message.model_name)
            provider_names.setdefault(ev.message.agent_id, ev.message.provider_name)
    events: list[Event] = [
        ThreadStarted(thread_id=thread_id, created_at=created, title=title if title is not None else m.UNSET)
    ]
    for a in agents:
        mn, pn = model_names.get(a), provider_names.get(a)
        events.append(
            AgentRegistered(
                agent=m.AgentConfig(
                    agent_id=a,
                    agent_name=agent_name or DEFAULT_AGENT_NAME,
                    model_name=mn if isinstance(mn, str) else m.UNSET,
                    provider_name=pn if isinstance(pn, str) else m.UNSET,
                    created_at=created,
                )
            )
        )
    events += body
    folded = fold(events)
    if folded.thread is None:  # pragma: no cover
        raise ImportFormatError("nothing to import")
    if folded.in_progress is not None:  # pragma: no cover - both formats close every turn
        raise ImportFormatError("the input ends inside an agent turn")
    validate(folded.thread).raise_for_errors()
    return events


def _text(data: bytes, err: type[ImportFormatError]) -> str:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise err(f"expected bytes, got {type(data).__name__}")
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise err(f"input is not UTF-8 (byte {exc.start})") from exc


def _pydantic_error(exc: pydantic.ValidationError, raw: Any) -> tuple[str, str]:
    """The first error's message and JSON path (pydantic's tagged-union tags left out of the path)."""
    first = exc.errors()[0]
    path, node = "$", raw
    for p in first.get("loc", ()):
        if isinstance(p, int) and isinstance(node, list) and 0 <= p < len(node):
            path, node = f"{path}[{p}]", node[p]
        elif isinstance(p, str) and isinstance(node, dict) and p in node:
            path, node = f"{path}.{p}", node[p]
        elif isinstance(p, str) and isinstance(node, dict) and _tag_of(node) == p:
            continue  # a tagged union's tag, not a key
        else:
            path, node = (f"{path}[{p}]" if isinstance(p, int) else f"{path}.{p}"), None
    return f"{exc.error_count()} error(s), first: {first.get('msg')}", path


def _tag_of(node: dict[str, Any]) -> Any:
    for key in ("kind", "part_kind", "type", "role"):
        if key in node:
            return node[key]
    return None


# --------------------------------------------------------------------------- pydantic-ai


def _pai_messages(data: bytes) -> list[pm.ModelMessage]:
    text = _text(data, PydanticAIImportError)
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise PydanticAIImportError(f"not JSON: {exc}") from exc
    if not isinstance(raw, list):
        raise PydanticAIImportError(f"expected a JSON list of Pydantic AI messages, got a JSON {_jtype(raw)}")
    try:
        msgs: list[pm.ModelMessage] = pm.ModelMessagesTypeAdapter.validate_python(raw)
    except pydantic.ValidationError as exc:
        msg, path = _pydantic_error(exc, raw)
        raise PydanticAIImportError(f"not a Pydantic AI message list: {msg}", path=path) from exc
    return msgs


def _jtype(v: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(type(v), "number")


# --------------------------------------------------------------------------- vercel-ui


def _vercel_events(data: bytes, request: bytes | None, agent_id: str, clock: Callable[[], str]) -> list[Event]:
    text = _text(data, VercelImportError)
    stripped = text.strip()
    if stripped.startswith("[") and stripped != DONE:
        if request is not None:
            raise VercelImportError("a request body only goes with a UI message stream, not a UIMessage array")
        try:
            raw = json.loads(stripped)
        except ValueError as exc:
            raise VercelImportError(f"not a JSON UIMessage array: {exc}") from exc
        msgs = _ui_messages(raw, "$")
        return events_from_messages(msgs, agent_id=agent_id)
    body = _request_body(request)
    asm = StreamAssembler(body, agent_id=agent_id, clock=clock)  # knows the body's tool calls itself
    n = 0
    for chunk in _chunks(text):
        asm.feed(chunk)
        n += 1
    if n == 0:
        raise VercelImportError("the input holds no UI stream chunks (SSE 'data:' lines or JSON lines)")
    turn = asm.events()
    history: list[Event] = []
    prior = _without_results(_prior_messages(body), set(client_tool_results(body)) & _answered_in(turn))
    if prior:
        # Body messages the client made carry no time: they get the stream turn's start time.
        t0 = next((t for t in (ev.time() for ev in turn) if isinstance(t, str)), None) or clock()
        history = events_from_messages(_ui_messages(prior, "$.messages", untimed_at=t0), agent_id=agent_id)
    return history + turn


def _chunks(text: str) -> Any:
    """Stream chunks from SSE text or JSON lines."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    sse = any(ln.startswith(("data:", "event:", "id:", "retry:", ":")) for ln in lines[:1])
    if sse:
        yield from parse_sse(text)
        return
    for i, line in enumerate(lines, 1):
        s = line.strip()
        if s in (DONE, json.dumps(DONE)):
            yield DONE
            continue
        try:
            obj = json.loads(s)
        except ValueError as exc:
            raise MalformedChunkError(f"JSON line {i} is not JSON: {s[:80]!r}") from exc
        if not isinstance(obj, dict):
            raise MalformedChunkError(f"JSON line {i} is not a chunk object: {s[:80]!r}")
        yield obj


def _request_body(request: bytes | None) -> dict[str, Any] | None:
    if request is None:
        return None
    text = _text(request, VercelImportError)
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise VercelImportError(f"request body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise VercelImportError(f"request body is a JSON {_jtype(body)}, not an object")
    msgs = body.get("messages", [])
    if not isinstance(msgs, list):
        raise VercelImportError("request body 'messages' is not a list", path="$.messages")
    _ui_messages(msgs, "$.messages")  # checked whole, so a bad message is a typed error here
    return body


def _prior_messages(body: dict[str, Any] | None) -> list[Any]:
    msgs = list((body or {}).get("messages") or [])
    if msgs and isinstance(msgs[-1], dict) and msgs[-1].get("role") == "user":
        msgs = msgs[:-1]
    return msgs


def _answered_in(turn: list[Event]) -> set[str]:
    """Ids of the tool calls the turn's request messages answer."""
    out: set[str] = set()
    for ev in turn:
        if isinstance(ev, MessageRecorded) and isinstance(ev.message, m.RequestMessage):
            for p in ev.message.parts:
                if isinstance(p, m.ToolReturnPart | m.RetryPromptPart) and isinstance(p.tool_call_id, str):
                    out.add(p.tool_call_id)
    return out


def _without_results(msgs: list[Any], call_ids: set[str]) -> list[Any]:
    """``msgs`` with the client's tool results for ``call_ids`` taken out of its last message: the
    stream's turn records them as the tool returns that resumed the run (AI SDK v6 ``addToolOutput``
    puts them in the assistant message that made the calls)."""
    if not call_ids or not msgs or not isinstance(msgs[-1], dict):
        return msgs
    last = dict(msgs[-1])
    parts = []
    for part in last.get("parts") or []:
        if isinstance(part, dict) and part.get("toolCallId") in call_ids:
            part = {k: v for k, v in part.items() if k not in ("output", "errorText")}
            part["state"] = "input-available"
        parts.append(part)
    last["parts"] = parts
    return [*msgs[:-1], last]


def _ui_messages(raw: Any, where: str, *, untimed_at: str | None = None) -> list[pm.ModelMessage]:
    """UI messages loaded by Pydantic AI; with ``untimed_at``, messages without a recorded time get that time."""
    from pydantic_ai.ui.vercel_ai import VercelAIAdapter
    from pydantic_ai.ui.vercel_ai.request_types import UIMessage

    if not isinstance(raw, list):
        raise VercelImportError(f"expected a list of UI messages, got a JSON {_jtype(raw)}", path=where)
    try:
        ui = pydantic.TypeAdapter(list[UIMessage]).validate_python(raw)
    except pydantic.ValidationError as exc:
        msg, path = _pydantic_error(exc, raw)
        raise VercelImportError(f"not a UIMessage array: {msg}", path=where + path[1:]) from exc
    try:
        loaded: list[pm.ModelMessage] = VercelAIAdapter.load_messages(ui)
    except (ValueError, TypeError, KeyError) as exc:
        raise VercelImportError(f"Pydantic AI cannot load these UI messages: {exc}", path=where) from exc
    if untimed_at is None:
        return loaded
    untimed = {u.id for u in ui if not _has_time(u.metadata)}
    when = _DT_TA.validate_python(untimed_at)
    out: list[pm.ModelMessage] = []
    for loaded_msg in loaded:
        md = loaded_msg.metadata
        meta = md.get("__pydantic_ai__") if isinstance(md, dict) else None
        src = meta.get("ui_message_id") if isinstance(meta, dict) else None
        if src in untimed and loaded_msg.timestamp is not None:
            loaded_msg = dataclasses.replace(loaded_msg, timestamp=when)
        out.append(loaded_msg)
    return out


def _has_time(metadata: Any) -> bool:
    pai = metadata.get("pydantic_ai") if isinstance(metadata, dict) else None
    return isinstance(pai, dict) and isinstance(pai.get("timestamp"), str)


_DT_TA: pydantic.TypeAdapter[datetime] = pydantic.TypeAdapter(datetime)
