"""The protocol objects' required and optional fields, as the v0.0.3 spec's interfaces and the
v0.0.4 amendments give them, enforced when a document is converted into the model.

mutmut makes no mutants of tplog/protocol/model.py (it has no functions: only class bodies and
constants), so these pin the model's declarations: for each object, a minimal one converts and
round-trips, and leaving out any one required field is refused, naming the field and the path.
"""

from __future__ import annotations

from typing import Any

import pytest

from tplog.errors import InvalidInputError
from tplog.protocol import model as m
from tplog.protocol.json import from_builtins, to_builtins

T = "2026-01-01T00:00:00Z"
_BIN = {"kind": "binary", "data": "AA==", "media_type": "image/png"}

# (type to convert into, minimal object, its required fields)
CASES: list[tuple[Any, dict[str, Any], list[str]]] = [
    (m.Thread, {"version": "0.0.4", "thread_id": "t", "created_at": T, "updated_at": T, "agents": {}, "turns": []},
     ["version", "thread_id", "created_at", "updated_at", "agents", "turns"]),
    (m.AgentConfig, {"agent_id": "a", "agent_name": "A", "created_at": T}, ["agent_id", "agent_name", "created_at"]),
    (m.Turn, {"turn_type": "user", "submitted_at": T, "parts": []}, ["submitted_at", "parts"]),
    # v0.0.4: completed_at may be absent (a turn still running or interrupted)
    (m.Turn, {"turn_type": "agent", "agent_id": "a", "started_at": T, "messages": []},
     ["agent_id", "started_at", "messages"]),
    (m.Message, {"message_type": "request", "timestamp": T, "agent_id": "a", "parts": []},
     ["timestamp", "agent_id", "parts"]),
    (m.Message, {"message_type": "response", "timestamp": T, "agent_id": "a", "parts": []},
     ["timestamp", "agent_id", "parts"]),
    (m.Message, {"message_type": "system", "timestamp": T, "event_type": "data-x"}, ["timestamp", "event_type"]),
    (m.MessagePart, {"part_kind": "text", "content": ""}, ["content"]),
    (m.MessagePart, {"part_kind": "thinking", "provider_name": "anthropic"}, ["provider_name"]),
    (m.MessagePart, {"part_kind": "tool-call", "tool_name": "f", "tool_call_id": "c"}, ["tool_name", "tool_call_id"]),
    (m.MessagePart, {"part_kind": "tool-return", "tool_name": "f", "tool_call_id": "c", "status": "success"},
     ["tool_name", "tool_call_id", "status"]),
    (m.MessagePart, {"part_kind": "retry-prompt", "content": "again"}, ["content"]),
    (m.MessagePart, {"part_kind": "file", "content": _BIN}, ["content"]),
    (m.MessagePart, {"part_kind": "user-prompt", "content": "hi"}, ["content"]),
    (m.ContentRef, {"uri": "s3://b/k"}, ["uri"]),
    (m.ThreadLink, {"thread_id": "t", "relation": "referenced"}, ["thread_id", "relation"]),
    (m.Interruption, {"reason": "user", "interrupted_at": T}, ["reason", "interrupted_at"]),
    (m.BinaryContent, {"kind": "binary", "data": "AA==", "media_type": "image/png"}, ["data", "media_type"]),
    (m.ThreadRelationships, {}, []),
    (m.Usage, {}, []),
]


def _case_id(case: tuple[Any, dict[str, Any], list[str]]) -> str:
    tp, minimal, _ = case
    return str(minimal.get("part_kind") or minimal.get("message_type") or minimal.get("turn_type") or tp.__name__)


@pytest.mark.parametrize(("tp", "minimal", "required"), CASES, ids=[_case_id(c) for c in CASES])
def test_a_minimal_object_converts_and_each_required_field_is_required(tp: Any, minimal: dict[str, Any],
                                                                       required: list[str]) -> None:
    got = from_builtins(minimal, tp)
    assert to_builtins(got) == minimal
    assert got.extra == {}
    for name in required:
        without = {k: v for k, v in minimal.items() if k != name}
        with pytest.raises(InvalidInputError) as info:
            from_builtins(without, tp)
        assert (str(info.value), info.value.path) == (f"Object missing required field `{name}` (at $)", "$")


@pytest.mark.parametrize("url_kind", ["image-url", "audio-url", "video-url", "document-url"])
def test_a_url_content_needs_its_url_only(url_kind: str) -> None:
    part = {"part_kind": "user-prompt", "content": [{"kind": url_kind, "url": "https://x/y"}]}
    assert to_builtins(from_builtins(part, m.MessagePart)) == part
    with pytest.raises(InvalidInputError) as info:
        from_builtins({"part_kind": "user-prompt", "content": [{"kind": url_kind}]}, m.MessagePart)
    assert (str(info.value), info.value.path) == ("Object missing required field `url` (at $.content[0])",
                                                  "$.content[0]")


def test_the_normative_kinds_and_event_types_are_the_protocols() -> None:
    part_kinds = {"text", "thinking", "tool-call", "tool-return", "retry-prompt", "user-prompt", "file"}
    assert set(m.NORMATIVE_PART_KINDS) == part_kinds
    assert set(m.CONTENT_KINDS) == {"image-url", "audio-url", "video-url", "document-url", "binary"}
    tier1 = {"data-tp-agent_handoff", "data-tp-thread_spawn", "data-tp-thread_merge", "data-tp-thread_end",
             "data-tp-error"}  # the v0.0.4 amendments' Tier 1
    assert set(m.NORMATIVE_EVENT_TYPES) == tier1
    assert (m.AGENT_HANDOFF, m.THREAD_SPAWN, m.THREAD_MERGE, m.THREAD_END, m.ERROR_EVENT) == (
        "data-tp-agent_handoff", "data-tp-thread_spawn", "data-tp-thread_merge", "data-tp-thread_end",
        "data-tp-error")
    for kind, cls in m.PART_KINDS.items():
        assert cls.__struct_config__.tag == kind
    for kind, ccls in m.CONTENT_KINDS.items():
        assert ccls.__struct_config__.tag == kind
