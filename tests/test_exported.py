"""The public surface is pinned: adding or removing a name is a deliberate change.

The top level holds what users import first (issue 39); every name it exported before the trim still
resolves there, warns with its new home, and is that home's object.
"""

import ast
import importlib
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import tplog
import tplog.protocol
import tplog.protocol.model

EXPECTED = {
    "AgentRegistered", "AgentTurnCompleted", "AgentTurnInterrupted", "AgentTurnStarted", "AsyncStore",
    "ConflictError", "InvalidEventError", "InvalidInputError", "LinkAdded", "MessageRecorded", "NotFoundError",
    "RetentionPolicy", "Store", "ThreadInfoChanged", "ThreadStarted", "TplogError", "UserTurnSubmitted",
    "WrongExpectedVersionError", "thread_hash", "thread_id_for", "validate",
}

#: What ``tplog.__all__`` held before the trim: 105 names, each still importable from ``tplog``.
BEFORE = EXPECTED | {
    "ANY", "AGENT_HANDOFF", "AgentConfig", "AgentTurn", "AppendResult", "AudioUrl", "BinaryContent",
    "ConfirmationRequiredError", "ContentRef", "CorruptionError", "DocumentUrl", "ERROR_EVENT", "EVENT_TYPES",
    "EXISTS", "Event", "ExtensionContent", "ExtensionPart", "FilePart", "Finding", "FoldResult", "HasForksError",
    "IdempotencyError", "ImageUrl", "InterruptState", "Interruption", "LimitExceededError", "Limits", "Message",
    "MessagePart", "NORMATIVE_EVENT_TYPES", "NORMATIVE_PART_KINDS", "NO_STREAM", "PendingCall", "PendingState",
    "Pipeline", "PipelineError", "ProjectionError", "PruneReport", "ReadOnlyError", "RebuildInProgressError",
    "RebuildRequiredError", "RecordedEvent", "RequestMessage", "ResponseMessage", "RetryPromptPart", "StorageError",
    "StorageFullError", "StoreClosedError", "SystemMessage", "THREAD_END", "THREAD_MERGE", "THREAD_SPAWN",
    "TextPart", "ThinkingPart", "Thread", "ThreadDeleted", "ThreadDeletedError", "ThreadHead", "ThreadLink",
    "ThreadMessage", "ThreadPage", "ThreadRelationships", "ToolCallPart", "ToolReturnPart", "Turn", "TurnInterrupt",
    "UNSET", "Usage", "UserContent", "UserPromptPart", "UserTurn", "ValidationError", "ValidationReport",
    "VideoUrl", "canonical_form", "canonical_json", "downgrade", "from_builtins", "from_json", "hash_json",
    "to_builtins", "to_json", "upgrade", "validate_json",
}


def test_all_is_pinned_and_sorted() -> None:
    assert set(tplog.__all__) == EXPECTED
    assert list(tplog.__all__) == sorted(tplog.__all__)
    assert len(BEFORE) == 105


def test_every_name_resolves() -> None:
    for name in tplog.__all__:
        assert getattr(tplog, name) is not None, name


def test_errors_share_one_root() -> None:
    for name in tplog.__all__:
        obj = getattr(tplog, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, tplog.TplogError), name


def test_the_moved_names_are_exactly_the_ones_dropped() -> None:
    assert set(tplog.MOVED) == BEFORE - EXPECTED
    assert set(tplog.protocol.__all__) == set(tplog.protocol.model.__all__)
    assert {n for n, home in tplog.MOVED.items() if home == "tplog.protocol"} == set(tplog.protocol.__all__)


@pytest.mark.parametrize("name", sorted(BEFORE - EXPECTED))
def test_a_moved_name_still_resolves_warns_and_is_its_homes_object(name: str) -> None:
    home = importlib.import_module(tplog.MOVED[name])
    assert name in home.__all__
    with pytest.warns(DeprecationWarning) as caught:
        obj = getattr(tplog, name)
    assert obj is getattr(home, name)
    (warning,) = caught
    assert tplog.MOVED[name] in str(warning.message) and name in str(warning.message)
    assert warning.filename == __file__  # stacklevel: the warning points at the caller's line
    with pytest.warns(DeprecationWarning):
        exec(f"from tplog import {name} as imported", namespace := {})
    assert namespace["imported"] is obj


def test_kept_names_do_not_warn_and_unknown_names_raise() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in EXPECTED:
            getattr(tplog, name)
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = tplog.no_such_name  # type: ignore[attr-defined]
    assert not hasattr(tplog, "no_such_name")


def test_the_package_never_uses_its_own_deprecated_names() -> None:
    """Importing every module of tplog with DeprecationWarning as an error: none imports a moved name
    from the top level (a fresh interpreter, so that nothing is imported yet)."""
    code = ("import pkgutil, importlib, tplog\n"
            "for m in pkgutil.walk_packages(tplog.__path__, 'tplog.'):\n"
            "    if m.name == 'tplog.__main__': continue\n"
            "    try:\n"
            "        importlib.import_module(m.name)\n"
            "    except ImportError as exc:\n"
            "        if 'tplog' in (exc.name or 'tplog'): raise\n")  # an optional extra not installed
    subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", code], check=True)


def test_no_source_of_the_package_names_a_moved_name_at_the_top() -> None:
    """The same, read from the source: imports inside functions too (``from tplog import X``, ``tplog.X``)."""
    found = []
    for path in sorted(Path(tplog.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "tplog" and not node.level:
                found += [f"{path.name}:{node.lineno} {a.name}" for a in node.names if a.name in tplog.MOVED]
            elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "tplog"
                  and node.attr in tplog.MOVED):
                found.append(f"{path.name}:{node.lineno} tplog.{node.attr}")
    assert not found, found
