"""Pydantic AI <-> ThreadProtocol: message mapping, history, live recording.

Requires ``pydantic-ai-slim`` (written against 2.68). Nothing here mocks or
bypasses tplog: the recorder emits ordinary :mod:`tplog` history events through
an ``append`` callable (``store.append`` bound to a thread, sync or async).

:class:`TplogConversationStore` is Pydantic AI's ``ConversationStore`` on tplog: each
conversation a thread, each save one append (see
:mod:`tplog.integrations.pydantic_ai.conversation_store`). It keeps what the mapping below
excludes as extension data, so a load gives back exactly what was saved.

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

from tplog.integrations.pydantic_ai.conversation_store import TplogConversationStore
from tplog.integrations.pydantic_ai.mapping import EXT_PREFIX as EXT_PREFIX
from tplog.integrations.pydantic_ai.mapping import (
    PAI_KEY,
    events_from_messages,
    history_from_thread,
    is_user_request,
    load_history,
    message_from_tp,
    message_to_tp,
    request_from_user_turn,
    run_usage_to_tp,
    user_turn_from_request,
)
from tplog.integrations.pydantic_ai.mapping import Append as Append
from tplog.integrations.pydantic_ai.mapping import now_iso as now_iso
from tplog.integrations.pydantic_ai.recorder import RecordedRun, ThreadRecorder
from tplog.integrations.pydantic_ai.recorder import pm_capture as pm_capture
from tplog.integrations.pydantic_ai.unstreamed import can_stream
from tplog.integrations.pydantic_ai_fast import HistoryCache

__all__ = [
    "PAI_KEY",
    "HistoryCache",
    "RecordedRun",
    "ThreadRecorder",
    "can_stream",
    "TplogConversationStore",
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

