"""The public surface is pinned: adding or removing a name is a deliberate change."""

import tplog

EXPECTED = {
    "ANY", "AGENT_HANDOFF", "AgentConfig", "AgentRegistered", "AgentTurn", "AgentTurnCompleted",
    "AgentTurnInterrupted", "AgentTurnStarted", "AppendResult", "AsyncStore", "AudioUrl", "BinaryContent",
    "ConfirmationRequiredError", "ConflictError", "ContentRef", "CorruptionError", "DocumentUrl", "ERROR_EVENT",
    "EVENT_TYPES", "EXISTS", "Event", "ExtensionContent", "ExtensionPart", "FilePart", "Finding", "FoldResult",
    "HasForksError", "IdempotencyError", "ImageUrl", "InterruptState", "Interruption", "InvalidEventError",
    "InvalidInputError", "LimitExceededError", "Limits", "LinkAdded", "Message", "MessagePart", "MessageRecorded",
    "NORMATIVE_EVENT_TYPES", "NORMATIVE_PART_KINDS", "NO_STREAM", "NotFoundError", "PendingCall", "PendingState",
    "Pipeline", "PipelineError", "ProjectionError", "PruneReport", "ReadOnlyError", "RebuildInProgressError",
    "RebuildRequiredError",
    "RecordedEvent", "RequestMessage", "ResponseMessage", "RetentionPolicy", "RetryPromptPart", "StorageError",
    "StorageFullError", "Store", "StoreClosedError", "SystemMessage", "THREAD_END", "THREAD_MERGE", "THREAD_SPAWN",
    "TextPart", "ThinkingPart", "Thread", "ThreadDeleted", "ThreadDeletedError", "ThreadHead", "ThreadInfoChanged",
    "ThreadLink", "ThreadMessage", "ThreadPage", "ThreadRelationships", "ThreadStarted", "ToolCallPart",
    "ToolReturnPart", "TplogError", "Turn", "TurnInterrupt", "UNSET", "Usage", "UserContent", "UserPromptPart",
    "UserTurn", "UserTurnSubmitted", "ValidationError", "ValidationReport", "VideoUrl", "WrongExpectedVersionError",
    "canonical_form", "canonical_json", "downgrade", "from_builtins", "from_json", "hash_json", "thread_hash",
    "thread_id_for", "to_builtins", "to_json", "upgrade", "validate", "validate_json",
}


def test_all_is_pinned_and_sorted() -> None:
    assert set(tplog.__all__) == EXPECTED
    assert list(tplog.__all__) == sorted(tplog.__all__)


def test_every_name_resolves() -> None:
    for name in tplog.__all__:
        assert getattr(tplog, name) is not None or name == "UNSET", name


def test_errors_share_one_root() -> None:
    for name in tplog.__all__:
        obj = getattr(tplog, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, tplog.TplogError), name
