"""The ThreadProtocol v0.0.4 data model, as msgspec Structs.

Field names are exactly the protocol's. Optional fields default to ``UNSET``
(absent), which is kept apart from an explicit ``null`` so that a document
survives decode → encode unchanged.

Lossless extensions: every object has an ``extra`` dict holding the fields the
protocol does not define; part kinds and user-content kinds the protocol does
not define (``custom:*``, ``meta:*`` or anything else) decode to
:class:`ExtensionPart` / :class:`ExtensionContent`, which keep the whole object.
JSON in and out goes through :mod:`tplog.protocol.json`, which flattens ``extra`` back
into its object. The Structs themselves are also what the store persists as
msgpack (there ``extra`` is a nested map and extension objects carry a reserved
tag), so a stored event decodes straight into these types.
"""

from __future__ import annotations

from typing import Any, Final, TypeVar, Union

import msgspec
from msgspec import UNSET, UnsetType

__all__ = [
    "AGENT_HANDOFF",
    "AgentConfig",
    "AgentTurn",
    "AudioUrl",
    "BinaryContent",
    "ContentRef",
    "DocumentUrl",
    "ERROR_EVENT",
    "ExtensionContent",
    "ExtensionPart",
    "FilePart",
    "ImageUrl",
    "Interruption",
    "Message",
    "MessagePart",
    "NORMATIVE_EVENT_TYPES",
    "NORMATIVE_PART_KINDS",
    "RequestMessage",
    "ResponseMessage",
    "RetryPromptPart",
    "SystemMessage",
    "THREAD_END",
    "THREAD_MERGE",
    "THREAD_SPAWN",
    "TextPart",
    "ThinkingPart",
    "Thread",
    "ThreadLink",
    "ThreadMessage",
    "ThreadRelationships",
    "ToolCallPart",
    "ToolReturnPart",
    "Turn",
    "UNSET",
    "Usage",
    "UserContent",
    "UserPromptPart",
    "UserTurn",
    "VideoUrl",
]

T = TypeVar("T")
#: An optional protocol field: absent (``UNSET``), ``None`` (explicit null) or a value.
Opt = Union[T, None, UnsetType]

#: The reserved msgpack tag of extension objects in storage. It never appears
#: in JSON: there an extension object carries its own ``part_kind``/``kind``.
EXTENSION_TAG: Final = "\x00ext"


class _Base(msgspec.Struct, kw_only=True, omit_defaults=True, frozen=True, gc=False):
    """Common base: ``extra`` keeps the fields the protocol does not define.

    ``gc=False`` (every model and event Struct): instances are not tracked by
    the cyclic garbage collector. Loading a long thread allocates hundreds of
    thousands of them, and GC passes over them were half the decode time. They
    hold JSON data only, so they never form reference cycles.
    """

    extra: dict[str, Any] = {}


# --------------------------------------------------------------------------- small types


class Usage(_Base, kw_only=True, omit_defaults=True, frozen=True, gc=False):
    """Token usage. Other counters (cache reads, ...) survive in ``extra``."""

    input_tokens: Opt[int] = UNSET
    output_tokens: Opt[int] = UNSET
    thinking_tokens: Opt[int] = UNSET
    total_tokens: Opt[int] = UNSET


class ContentRef(_Base, kw_only=True, omit_defaults=True, frozen=True, gc=False):
    """A reference to large or external content instead of inlining it."""

    uri: str
    size_bytes: Opt[int] = UNSET
    hash: Opt[str] = UNSET
    media_type: Opt[str] = UNSET


class AgentConfig(_Base, kw_only=True, omit_defaults=True, frozen=True, gc=False):
    agent_id: str
    agent_name: str
    model_name: Opt[str] = UNSET
    provider_name: Opt[str] = UNSET
    created_at: str
    config_ref: Opt[str] = UNSET


class ThreadLink(_Base, kw_only=True, omit_defaults=True, frozen=True, gc=False):
    """An outgoing link: ``spawned_from``, ``merged_from``, ``referenced`` or custom."""

    thread_id: str
    relation: str
    metadata: Opt[Any] = UNSET


class ThreadRelationships(_Base, kw_only=True, omit_defaults=True, frozen=True, gc=False):
    links: Opt[list[ThreadLink]] = UNSET


class Interruption(_Base, kw_only=True, omit_defaults=True, frozen=True, gc=False):
    """v0.0.4: why and when an agent turn was interrupted."""

    reason: str
    interrupted_at: str


# --------------------------------------------------------------------------- user content


class _Content(_Base, tag_field="kind", kw_only=True, omit_defaults=True, frozen=True, gc=False):
    pass


class _FileUrl(_Content, kw_only=True, omit_defaults=True, frozen=True, gc=False):
    url: str
    identifier: Opt[str] = UNSET
    force_download: Opt[bool] = UNSET
    vendor_metadata: Opt[Any] = UNSET
    media_type: Opt[str] = UNSET


class ImageUrl(_FileUrl, tag="image-url", kw_only=True, omit_defaults=True, frozen=True, gc=False):
    pass


class AudioUrl(_FileUrl, tag="audio-url", kw_only=True, omit_defaults=True, frozen=True, gc=False):
    pass


class VideoUrl(_FileUrl, tag="video-url", kw_only=True, omit_defaults=True, frozen=True, gc=False):
    pass


class DocumentUrl(_FileUrl, tag="document-url", kw_only=True, omit_defaults=True, frozen=True, gc=False):
    pass


class BinaryContent(_Content, tag="binary", kw_only=True, omit_defaults=True, frozen=True, gc=False):
    """Inline binary data; ``data`` is base64 text exactly as in the document."""

    data: str
    media_type: str
    identifier: Opt[str] = UNSET
    vendor_metadata: Opt[Any] = UNSET


class ExtensionContent(_Content, tag=EXTENSION_TAG, kw_only=True, omit_defaults=True, frozen=True, gc=False):
    """A user-content object whose ``kind`` the protocol does not define, kept whole."""

    kind_: str
    data: dict[str, Any]


UserContent = Union[str, ImageUrl, AudioUrl, VideoUrl, DocumentUrl, BinaryContent, ExtensionContent]
CONTENT_KINDS: Final[dict[str, type[_Content]]] = {
    "image-url": ImageUrl,
    "audio-url": AudioUrl,
    "video-url": VideoUrl,
    "document-url": DocumentUrl,
    "binary": BinaryContent,
}

# --------------------------------------------------------------------------- parts


class _Part(_Base, tag_field="part_kind", kw_only=True, omit_defaults=True, frozen=True, gc=False):
    pass


class UserPromptPart(_Part, tag="user-prompt", kw_only=True, omit_defaults=True, frozen=True, gc=False):
    content: Union[str, list[UserContent]]


class TextPart(_Part, tag="text", kw_only=True, omit_defaults=True, frozen=True, gc=False):
    content: str
    id: Opt[str] = UNSET


class ThinkingPart(_Part, tag="thinking", kw_only=True, omit_defaults=True, frozen=True, gc=False):
    content: Opt[str] = UNSET
    signature: Opt[str] = UNSET
    provider_name: str
    thinking_id: Opt[str] = UNSET


class ToolCallPart(_Part, tag="tool-call", kw_only=True, omit_defaults=True, frozen=True, gc=False):
    tool_name: str
    tool_call_id: str
    args: Any = UNSET


class ToolReturnPart(_Part, tag="tool-return", kw_only=True, omit_defaults=True, frozen=True, gc=False):
    tool_name: str
    tool_call_id: str
    status: str
    content: Any = UNSET
    content_ref: Opt[ContentRef] = UNSET
    metadata: Any = UNSET


class RetryPromptPart(_Part, tag="retry-prompt", kw_only=True, omit_defaults=True, frozen=True, gc=False):
    content: Union[str, list[Any]]
    tool_name: Opt[str] = UNSET
    tool_call_id: Opt[str] = UNSET


class FilePart(_Part, tag="file", kw_only=True, omit_defaults=True, frozen=True, gc=False):
    content: BinaryContent
    id: Opt[str] = UNSET


class ExtensionPart(_Part, tag=EXTENSION_TAG, kw_only=True, omit_defaults=True, frozen=True, gc=False):
    """A part whose ``part_kind`` is not normative (``custom:*``, ``meta:*``, other), kept whole.

    ``part_kind_`` is its kind; ``data`` holds every other field as decoded.
    """

    part_kind_: str
    data: dict[str, Any]


MessagePart = Union[
    UserPromptPart, TextPart, ThinkingPart, ToolCallPart, ToolReturnPart, RetryPromptPart, FilePart, ExtensionPart
]
PART_KINDS: Final[dict[str, type[_Part]]] = {
    "user-prompt": UserPromptPart,
    "text": TextPart,
    "thinking": ThinkingPart,
    "tool-call": ToolCallPart,
    "tool-return": ToolReturnPart,
    "retry-prompt": RetryPromptPart,
    "file": FilePart,
}
NORMATIVE_PART_KINDS: Final = frozenset(PART_KINDS)

# --------------------------------------------------------------------------- messages


class _Msg(_Base, tag_field="message_type", kw_only=True, omit_defaults=True, frozen=True, gc=False):
    timestamp: str


class ThreadMessage(_Msg, kw_only=True, omit_defaults=True, frozen=True, gc=False):
    """A Pydantic AI ModelRequest/ModelResponse with agent attribution."""

    parts: list[MessagePart]
    agent_id: str
    model_name: Opt[str] = UNSET
    provider_name: Opt[str] = UNSET
    provider_response_id: Opt[str] = UNSET
    usage: Opt[Usage] = UNSET
    finish_reason: Opt[str] = UNSET


class RequestMessage(ThreadMessage, tag="request", kw_only=True, omit_defaults=True, frozen=True, gc=False):
    """``message_type: "request"``."""


class ResponseMessage(ThreadMessage, tag="response", kw_only=True, omit_defaults=True, frozen=True, gc=False):
    """``message_type: "response"``."""


class SystemMessage(_Msg, tag="system", kw_only=True, omit_defaults=True, frozen=True, gc=False):
    """An event outside Pydantic AI's scope (handoffs, spawns, ``data-*``, ``meta:*``)."""

    event_type: str
    event_data: Any = UNSET
    source_agent: Opt[str] = UNSET
    target_agents: Opt[list[str]] = UNSET


Message = Union[RequestMessage, ResponseMessage, SystemMessage]
MESSAGE_TYPES: Final[dict[str, type[_Msg]]] = {
    "request": RequestMessage,
    "response": ResponseMessage,
    "system": SystemMessage,
}

# v0.0.4 normative system events (v0.0.3 names in tplog.protocol.versions).
AGENT_HANDOFF: Final = "data-tp-agent_handoff"
THREAD_SPAWN: Final = "data-tp-thread_spawn"
THREAD_MERGE: Final = "data-tp-thread_merge"
THREAD_END: Final = "data-tp-thread_end"
ERROR_EVENT: Final = "data-tp-error"
NORMATIVE_EVENT_TYPES: Final = frozenset({AGENT_HANDOFF, THREAD_SPAWN, THREAD_MERGE, THREAD_END, ERROR_EVENT})

# --------------------------------------------------------------------------- turns


class _Turn(_Base, tag_field="turn_type", kw_only=True, omit_defaults=True, frozen=True, gc=False):
    pass


class UserTurn(_Turn, tag="user", kw_only=True, omit_defaults=True, frozen=True, gc=False):
    submitted_at: str
    parts: list[MessagePart]
    client_metadata: Opt[dict[str, Any]] = UNSET


class AgentTurn(_Turn, tag="agent", kw_only=True, omit_defaults=True, frozen=True, gc=False):
    """One ``agent.run()``. v0.0.4: ``completion_status`` and ``interruption``."""

    agent_id: str
    started_at: str
    completed_at: Opt[str] = UNSET
    messages: list[Message]
    completion_status: Opt[str] = UNSET
    interruption: Opt[Interruption] = UNSET
    total_usage: Opt[Usage] = UNSET


Turn = Union[UserTurn, AgentTurn]
TURN_TYPES: Final[dict[str, type[_Turn]]] = {"user": UserTurn, "agent": AgentTurn}

# --------------------------------------------------------------------------- thread


class Thread(_Base, kw_only=True, omit_defaults=True, frozen=True, gc=False):
    """A whole ThreadProtocol document."""

    version: str
    thread_id: str
    created_at: str
    updated_at: str
    title: Opt[str] = UNSET
    metadata: Opt[dict[str, Any]] = UNSET
    agents: dict[str, AgentConfig]
    turns: list[Turn]
    relationships: Opt[ThreadRelationships] = UNSET
