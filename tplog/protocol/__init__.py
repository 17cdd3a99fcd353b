"""The ThreadProtocol itself, independent of storage; this package exports its document model.

- :mod:`tplog.protocol.model`: the document model (msgspec structs, v0.0.4), re-exported here
  (``from tplog.protocol import Thread, TextPart``);
- :mod:`tplog.protocol.json`: lossless JSON in and out (unknown fields kept);
- :mod:`tplog.protocol.validate`: the spec's rules over a whole document;
- :mod:`tplog.protocol.canonical`: the canonical form and the thread hash;
- :mod:`tplog.protocol.versions`: upgrade v0.0.3 → v0.0.4 and back;
- :mod:`tplog.protocol.rules`: the same rules checked event by event at append.

Only the model is re-exported (it imports nothing of tplog), so that importing one submodule
does not import the others.
"""

from tplog.protocol.model import (
    AGENT_HANDOFF,
    ERROR_EVENT,
    NORMATIVE_EVENT_TYPES,
    NORMATIVE_PART_KINDS,
    THREAD_END,
    THREAD_MERGE,
    THREAD_SPAWN,
    UNSET,
    AgentConfig,
    AgentTurn,
    AudioUrl,
    BinaryContent,
    ContentRef,
    DocumentUrl,
    ExtensionContent,
    ExtensionPart,
    FilePart,
    ImageUrl,
    Interruption,
    Message,
    MessagePart,
    RequestMessage,
    ResponseMessage,
    RetryPromptPart,
    SystemMessage,
    TextPart,
    ThinkingPart,
    Thread,
    ThreadLink,
    ThreadMessage,
    ThreadRelationships,
    ToolCallPart,
    ToolReturnPart,
    Turn,
    Usage,
    UserContent,
    UserPromptPart,
    UserTurn,
    VideoUrl,
)

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
