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

from tplog.integrations.vercel.assembly import StreamAssembler, assemble_turn
from tplog.integrations.vercel.body import client_tool_results, load_user_message, user_turn_from_body
from tplog.integrations.vercel.chunks import CHAT_ID_KEY as CHAT_ID_KEY
from tplog.integrations.vercel.chunks import CHAT_NAMESPACE as CHAT_NAMESPACE
from tplog.integrations.vercel.chunks import DONE as DONE
from tplog.integrations.vercel.chunks import ERRORED_TOOL_OUTPUT as ERRORED_TOOL_OUTPUT
from tplog.integrations.vercel.chunks import INTERRUPTED_TOOL_OUTPUT as INTERRUPTED_TOOL_OUTPUT
from tplog.integrations.vercel.chunks import MESSAGE_ID_KEY as MESSAGE_ID_KEY
from tplog.integrations.vercel.chunks import TP_MESSAGE as TP_MESSAGE
from tplog.integrations.vercel.chunks import TP_TURN_END as TP_TURN_END
from tplog.integrations.vercel.chunks import TP_TURN_START as TP_TURN_START
from tplog.integrations.vercel.chunks import TP_USER_TURN as TP_USER_TURN
from tplog.integrations.vercel.chunks import (
    ChunkOrderError,
    MalformedChunkError,
    UnknownToolCallError,
    VercelStreamError,
    parse_sse,
    thread_id_for_chat,
)
from tplog.integrations.vercel.recorded import recorded_vercel_stream, ui_request

__all__ = [
    "ChunkOrderError",
    "MalformedChunkError",
    "StreamAssembler",
    "UnknownToolCallError",
    "VercelStreamError",
    "assemble_turn",
    "parse_sse",
    "client_tool_results",
    "load_user_message",
    "recorded_vercel_stream",
    "thread_id_for_chat",
    "ui_request",
    "user_turn_from_body",
]
