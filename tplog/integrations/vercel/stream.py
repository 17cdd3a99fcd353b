"""Stream state: what one UI message stream has said so far (calls, parts, the cursor over the
request body's parts) while it is assembled into a turn.
"""

from __future__ import annotations

from typing import Any, Final

from tplog.integrations.vercel.chunks import (
    DONE,
    ERRORED_TOOL_OUTPUT,
    INTERRUPTED_TOOL_OUTPUT,
    TP_NOTICES,
    ChunkOrderError,
    MalformedChunkError,
    UnknownToolCallError,
    req_field,
)

__all__ = ["Call", "Cursor", "MISSING", "StreamState", "data_uri_payload", "resolve_part"]


# --------------------------------------------------------------------------- stream state


class Call:
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


class StreamState:
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
        self.calls: dict[str, Call] = {}
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
            self.open_text[req_field(chunk, "id")] = []
        elif ctype == "text-delta":
            pid = req_field(chunk, "id")
            if pid not in self.open_text:
                raise ChunkOrderError(f"text-delta for unknown text part {pid!r}")
            self.open_text[pid].append(req_field(chunk, "delta"))
        elif ctype == "text-end":
            pid = req_field(chunk, "id")
            if pid not in self.open_text:
                raise ChunkOrderError(f"text-end for unknown text part {pid!r}")
            text = "".join(self.open_text.pop(pid))
            self.texts.append(text)
            self._item("text", text)
        elif ctype == "reasoning-start":
            self.open_reasoning[req_field(chunk, "id")] = []
        elif ctype == "reasoning-delta":
            pid = req_field(chunk, "id")
            if pid not in self.open_reasoning:
                raise ChunkOrderError(f"reasoning-delta for unknown reasoning part {pid!r}")
            self.open_reasoning[pid].append(req_field(chunk, "delta"))
        elif ctype == "reasoning-end":
            pid = req_field(chunk, "id")
            if pid not in self.open_reasoning:
                raise ChunkOrderError(f"reasoning-end for unknown reasoning part {pid!r}")
            text = "".join(self.open_reasoning.pop(pid))
            self.reasonings.append(text)
            self._item("reasoning", (text, chunk.get("providerMetadata")))
        elif ctype == "tool-input-start":
            cid = req_field(chunk, "toolCallId")
            new = self.calls[cid] = Call(req_field(chunk, "toolName"), bool(chunk.get("providerExecuted")))
            new.started = True
            self.input_deltas[cid] = []
            # the call's place in the response: its input is only announced once the response is
            # complete (tool-input-available), after later parts of the same response
            self._item("call", cid)
        elif ctype == "tool-input-delta":
            cid = req_field(chunk, "toolCallId")
            if cid not in self.input_deltas:
                raise ChunkOrderError(f"tool-input-delta for unknown tool call {cid!r}")
            self.input_deltas[cid].append(req_field(chunk, "inputTextDelta"))
        elif ctype in ("tool-input-available", "tool-input-error"):
            cid = req_field(chunk, "toolCallId")
            name = req_field(chunk, "toolName")
            call = self.calls.get(cid)
            announced = call is not None and call.started
            if call is None and ctype == "tool-input-available" and cid in self.known_calls:
                # a resumed run announces approved calls of an earlier turn again: no new call
                call = self.calls[cid] = Call(name, bool(chunk.get("providerExecuted")))
                call.earlier = announced = True
            elif call is None:
                call = self.calls[cid] = Call(name, bool(chunk.get("providerExecuted")))
            call.available = True
            call.input = req_field(chunk, "input", object)
            call.provider_executed = call.provider_executed or bool(chunk.get("providerExecuted"))
            if ctype == "tool-input-error":
                call.error_input = True
                call.output_kind = "input-error"
                call.output = req_field(chunk, "errorText")
            if not announced:
                self._item("call", cid)
            if ctype == "tool-input-error":
                self._item("result", cid)
        elif ctype in ("tool-output-available", "tool-output-error", "tool-output-denied"):
            cid = req_field(chunk, "toolCallId")
            call = self.calls.get(cid)
            if call is None and (cid in self.known_calls or self.lenient):
                call = self.calls[cid] = Call(self.known_calls.get(cid, ""), False)
                call.available = True
                call.earlier = True
            if call is None or not call.available:
                raise UnknownToolCallError(f"{ctype} for unknown tool call {cid!r}")
            if ctype == "tool-output-available":
                call.output, call.output_kind = req_field(chunk, "output", object), "available"
                call.synthetic = call.output == INTERRUPTED_TOOL_OUTPUT
            elif ctype == "tool-output-error":
                call.output, call.output_kind = req_field(chunk, "errorText"), "error"
                call.synthetic = call.output == ERRORED_TOOL_OUTPUT
            else:
                call.output_kind = "denied"
            self._item("result", cid)
        elif ctype == "tool-approval-request":
            cid = req_field(chunk, "toolCallId")
            if cid not in self.calls:
                raise UnknownToolCallError(f"tool-approval-request for unknown tool call {cid!r}")
            self.calls[cid].approval = True
        elif ctype == "file":
            f = {"url": req_field(chunk, "url"), "media_type": req_field(chunk, "mediaType")}
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
            if ctype in TP_NOTICES:
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


class Cursor:
    """Consumes stream content in order for reference resolution."""

    def __init__(self, st: StreamState) -> None:
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


MISSING = object()


def resolve_part(part: dict[str, Any], cur: Cursor, body_parts: list[dict[str, Any]] | None) -> Any:
    """A notice part with its ``$from`` reference filled in, or ``MISSING``."""
    src = part.get("$from")
    if src is None:
        return part
    out = {k: v for k, v in part.items() if not k.startswith("$")}
    kind = part.get("part_kind")
    if src == "body":
        idx = part.get("$index")
        # from the stream, so outside input: a negative index must not count from the end
        if body_parts is None or type(idx) is not int or not 0 <= idx < len(body_parts):
            return MISSING
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
            return MISSING
        out["content"] = s
        return out
    if kind == "tool-call":
        call = cur.st.calls.get(part.get("tool_call_id", ""))
        if call is None or not call.available:
            return MISSING
        out["args"] = call.input
        return out
    if kind == "tool-return":
        call = cur.st.calls.get(part.get("tool_call_id", ""))
        if call is None or call.output_kind != "available":
            return MISSING
        out["content"] = call.output
        return out
    if kind == "file":
        f = cur.file()
        if f is None:
            return MISSING
        content = dict(out.get("content") or {})
        content["data"] = data_uri_payload(f["url"])
        out["content"] = content
        return out
    raise MalformedChunkError(f"part kind {kind!r} cannot reference the stream")


def data_uri_payload(url: str) -> str:
    head, sep, data = url.partition(",")
    if not sep or not head.startswith("data:"):
        return url
    return data
