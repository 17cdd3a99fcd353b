"""Every JSON example of the protocol documents that is a thread, turn, message, part or event.

The fixtures in ``tests/fixtures/spec`` are the examples of the protocol documents
(copied into ``tests/fixtures/spec/docs``).
The ``json`` blocks of the v0.0.3 spec are copied verbatim; the rest are
TypeScript / Python object literals made literal JSON, and each record below says
what had to change ("literal: ..."). Examples that are not ThreadProtocol objects
are listed in NOT_EXTRACTED with the reason.

Each example must:

1. decode with ``tplog.protocol.json.from_builtins`` into the right model type (or fail
   with the decode error its omissions imply, at the stated path);
2. re-encode with ``to_builtins`` to JSON equal to the fixture;
3. validate with exactly the findings written in its record. Whole threads are
   validated as they are; a turn, message, part, client_metadata or
   relationships example is placed into a minimal valid thread (see
   ``in_thread``) of the version whose document it comes from, and the findings
   are those of the whole thread. For tool-returns the minimal thread holds the
   matching tool-call first, so only the example itself is judged.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tplog.errors import InvalidInputError
from tplog.protocol import model as m
from tplog.protocol.json import from_builtins, to_builtins
from tplog.protocol.validate import RULES, validate, validate_json

FIXTURES = Path(__file__).parent.parent / "fixtures" / "spec"

S3 = "threadprotocol-v0.0.3-spec.md"
G3 = "threadprotocol-v0.0.3-implementation-guide.md"
A4 = "threadprotocol-v0.0.4-amendments.md"

AGENT = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
THREAD = "550e8400-e29b-41d4-a716-446655440000"
T0 = "2025-01-20T10:00:00Z"

Finding = tuple[str, str, str]  # (severity, rule, path)


def E(rule: str, path: str) -> Finding:
    return ("error", rule, path)


def W(rule: str, path: str) -> Finding:
    return ("warning", rule, path)


@dataclass(frozen=True)
class Example:
    fixture: str
    source: str  # document and section, and what was made literal
    kind: str  # thread | turn | message | part | client_metadata | relationships | interruption
    cls: type  # the model type it decodes to
    version: str = "0.0.3"  # the rules it is judged by (its document's version)
    decode_error: tuple[str, str] | None = None  # (path, fragment of the message)
    findings: tuple[Finding, ...] | None = ()  # None: a fragment, not validated


MSG0 = "$.turns[0].messages[0]"

EXAMPLES = [
    # ------------------------------------------------------------------ v0.0.3 spec (```json, verbatim)
    Example("v003-spec-client-metadata", f"{S3} UserTurn Client Metadata > Examples", "client_metadata", m.UserTurn),
    Example("v003-spec-content-ref-tool-return", f"{S3} ContentRef Usage > Example", "part", m.ToolReturnPart),
    Example("v003-spec-relationships", f"{S3} Thread Relationships > Example", "relationships", m.ThreadRelationships),
    # ------------------------------------------------------------------ v0.0.3 implementation guide
    Example("v003-guide-event-routing-decision", f"{G3} Custom System Events (1st)", "message", m.SystemMessage),
    Example("v003-guide-event-embeddings-generated", f"{G3} Custom System Events (2nd)", "message", m.SystemMessage),
    Example("v003-guide-event-thread-spawned", f"{G3} Custom System Events (3rd)", "message", m.SystemMessage),
    Example(
        "v003-guide-event-thread-spawned",
        f"{G3} Custom System Events (3rd), read as v0.0.4: data-* stays valid (tier 3)",
        "message",
        m.SystemMessage,
        version="0.0.4",
    ),
    Example(
        "v003-guide-part-custom-planning-step",
        f"{G3} Custom Message Parts (1st); literal: `// tokens` comment dropped",
        "part",
        m.ExtensionPart,
    ),
    Example(
        "v003-guide-part-custom-vector-search",
        f"{G3} Custom Message Parts (2nd); literal: query_vector `[...]` -> []",
        "part",
        m.ExtensionPart,
    ),
    Example(
        "v003-guide-event-meta-performance",
        f"{G3} Implementation Metadata (1st); literal: `// ms` comment dropped",
        "message",
        m.SystemMessage,
    ),
    Example(
        "v003-guide-event-meta-performance",
        f"{G3} Implementation Metadata (1st), read as v0.0.4: meta:* became data-sys-*",
        "message",
        m.SystemMessage,
        version="0.0.4",
        findings=(W("event-type-namespace", f"{MSG0}.event_type"),),
    ),
    Example("v003-guide-event-meta-retry-info", f"{G3} Implementation Metadata (2nd)", "message", m.SystemMessage),
    Example(
        "v003-guide-part-text-from-text-end",
        f"{G3} Handling Streaming Events, `text-end` handler; literal: accumulated content 'Hello', id 'text_1'",
        "part",
        m.TextPart,
    ),
    Example(
        "v003-guide-event-stream-interrupted",
        f"{G3} Recovery Strategy 2; literal: timestamp, reason, partial_content, stream_id values",
        "message",
        m.SystemMessage,
        # "stream.interrupted" is neither normative nor data-*/meta:* (G3's own processSystemMessage warns on it)
        findings=(W("event-type-namespace", f"{MSG0}.event_type"),),
    ),
    Example(
        "v003-guide-turn-error-turn",
        f"{G3} Recovery Strategy 3 ('DON'T DO THIS'); literal: agent id, times, `...partial_messages` dropped",
        "turn",
        m.AgentTurn,
        # The guide's objection (an interrupted turn dressed up as complete) is semantic: the document is
        # structurally a valid complete turn holding a normative `error` event, so no rule can see it.
        findings=(),
    ),
    Example(
        "v003-guide-turn-error-turn",
        f"{G3} Recovery Strategy 3, read as v0.0.4",
        "turn",
        m.AgentTurn,
        version="0.0.4",
        findings=(
            E("required-field", "$.turns[0].completion_status"),
            W("event-name-version", f"{MSG0}.event_type"),
        ),
    ),
    Example(
        "v003-guide-part-tool-return-inline",
        f"{G3} ContentRef Implementation, inline branch; literal: content value (names stay '...')",
        "part",
        m.ToolReturnPart,
    ),
    Example(
        "v003-guide-part-tool-return-content-ref",
        f"{G3} ContentRef Implementation, external branch; literal: uri, size_bytes, hash, preview values",
        "part",
        m.ToolReturnPart,
    ),
    Example("v003-guide-part-text-consistency-hello", f"{G3} Consistency Testing, serverEvents[0]", "part", m.TextPart),
    Example("v003-guide-part-text-consistency-sunny", f"{G3} Consistency Testing, serverEvents[3]", "part", m.TextPart),
    # ------------------------------------------------------------------ v0.0.4 amendments
    Example(
        "v004-boundary-event-thread-spawn",
        f"{A4} Philosophy > The Boundary (1st, canonical); verbatim after the comment",
        "message",
        m.SystemMessage,
        version="0.0.4",
        # the example puts `timestamp` inside event_data; a SystemMessage requires its own timestamp
        decode_error=("$", "Object missing required field `timestamp`"),
    ),
    Example(
        "v004-boundary-event-app-spawn-config",
        f"{A4} Philosophy > The Boundary (1st, not canonical); comments dropped",
        "message",
        m.SystemMessage,
        version="0.0.4",
        decode_error=("$", "Object missing required field `timestamp`"),
    ),
    Example(
        "v004-boundary-agent-turn",
        f"{A4} Philosophy > The Boundary (2nd, canonical); comment and trailing comma dropped",
        "turn",
        m.AgentTurn,
        version="0.0.4",
        decode_error=("$", "Object missing required field `messages`"),
    ),
    Example(
        "v004-boundary-event-app-routing-decision",
        f"{A4} Philosophy > The Boundary (2nd, not canonical); comments dropped",
        "message",
        m.SystemMessage,
        version="0.0.4",
        decode_error=("$", "Object missing required field `timestamp`"),
    ),
    Example(
        "v004-interruption-fact",
        f"{A4} Implications for v0.0.4 (a fragment of an AgentTurn)",
        "interruption",
        m.Interruption,
        version="0.0.4",
        findings=None,
    ),
    Example(
        "v004-spawn-example-event-tp",
        f"{A4} Example: Recording a Spawned Thread (1st); comment dropped",
        "message",
        m.SystemMessage,
        version="0.0.4",
        # a spawned thread's id is a thread_id, which is a UUID; "thread-456" is not
        findings=(W("event-thread-id-uuid", f"{MSG0}.event_data.spawned_thread_id"),),
    ),
    Example(
        "v004-spawn-example-event-app",
        f"{A4} Example: Recording a Spawned Thread (2nd)",
        "message",
        m.SystemMessage,
        version="0.0.4",
    ),
    Example(
        "v004-spawn-example-event-sys",
        f"{A4} Example: Recording a Spawned Thread (3rd)",
        "message",
        m.SystemMessage,
        version="0.0.4",
    ),
    Example(
        "v004-building-interrupted-turn",
        f"{A4} Building an Interrupted Turn (Python dict); literal: agent id, started_at, "
        "interrupted_at as datetime.now().isoformat() writes it (no zone), messages [] for "
        "convert_to_thread_messages(...)",
        "turn",
        m.AgentTurn,
        version="0.0.4",
        findings=(
            W("timestamp-timezone", "$.turns[0].interruption.interrupted_at"),
            # an artifact of `messages: []`, but also what the text says: keep an interrupted turn only with a cycle
            W("v4-interrupted-turn-has-cycle", "$.turns[0].messages"),
        ),
    ),
    Example(
        "v004-client-side-handling",
        f"{A4} Client-Side Handling > No Special Prepending Needed; literal: `{{...}}` -> {{}}, comments dropped",
        "thread",
        m.Thread,
        version="0.0.4",
        # only `turns` is shown: the thread envelope (version, thread_id, ...) is missing
        decode_error=("$", "Object missing required field `version`"),
    ),
    Example(
        "v004-client-side-handling-completed",
        f"{A4} Client-Side Handling, completed with what the schema requires and the example leaves out: "
        "the envelope with an empty agents registry, message agent_id 'agent_001', tool_call_id 'call_1', "
        "status 'success'",
        "thread",
        m.Thread,
        version="0.0.4",
        # "agent_001" is used but no agents registry declares it
        findings=(
            E("v3.3-agent-ref", "$.turns[1].agent_id"),
            E("v3.3-agent-ref", "$.turns[1].messages[0].agent_id"),
            E("v3.3-agent-ref", "$.turns[1].messages[1].agent_id"),
        ),
    ),
]

#: Blocks of the documents that hold JSON-like objects but are not ThreadProtocol objects.
NOT_EXTRACTED = {
    f"{S3} schema blocks, ThreadProtocol -> Pydantic AI, SystemEventType": "TypeScript types and code, not instances",
    f"{G3} StreamingTurn / ClientStreamingState / processModelEvent current_tool_calls entries": (
        "streaming state (a Partial<ToolCallPart> has no part_kind), not canonical objects"
    ),
    f"{G3} Consistency Testing clientEvents, text-start/-delta handlers": "Vercel AI SDK stream events",
    f"{A4} VSP Streaming Format, streamData(...) calls": "VSP data stream parts, not SystemMessages",
    f"{A4} Python ModelRequest(...) / ModelResponse(...) examples": "Pydantic AI objects, not JSON",
    "threadprotocol-rc2-research-multimodal-deferred-tools.md MediaContent, SystemMessage tool.resolved": (
        "TypeScript interfaces of proposals, no instances"
    ),
    "peer-design-notes-message-part-refactor.md": "no JSON examples",
}


def load(name: str) -> Any:
    return json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))


def envelope(version: str, turns: list[Any], **extra: Any) -> dict[str, Any]:
    return {
        "version": version,
        "thread_id": THREAD,
        "created_at": "2025-01-20T00:00:00Z",
        "updated_at": "2025-01-20T23:59:59Z",
        "agents": {AGENT: {"agent_id": AGENT, "agent_name": "agent", "created_at": "2025-01-01T00:00:00Z"}},
        "turns": turns,
        **extra,
    }


def agent_turn(version: str, messages: list[Any], start: str, end: str) -> dict[str, Any]:
    turn: dict[str, Any] = {
        "turn_type": "agent",
        "agent_id": AGENT,
        "started_at": start,
        "completed_at": end,
        "messages": messages,
    }
    if version == "0.0.4":
        turn["completion_status"] = "complete"
    return turn


def in_thread(ex: Example, obj: Any) -> dict[str, Any]:
    """The smallest valid thread of ``ex.version`` holding the example."""
    v = ex.version
    if ex.kind == "thread":
        return dict(copy.deepcopy(obj))
    if ex.kind == "turn":
        return envelope(v, [copy.deepcopy(obj)])
    if ex.kind == "relationships":
        return envelope(v, [], **copy.deepcopy(obj))
    if ex.kind == "client_metadata":
        return envelope(v, [user_turn(obj)])
    if ex.kind == "message":
        when = obj.get("timestamp", T0)  # (an example without its timestamp does not decode anyway)
        return envelope(v, [agent_turn(v, [copy.deepcopy(obj)], when, when)])
    assert ex.kind == "part", ex.kind
    messages = []
    if obj["part_kind"] == "tool-return":
        call = {
            "part_kind": "tool-call",
            "tool_name": obj["tool_name"],
            "tool_call_id": obj["tool_call_id"],
            "args": {},
        }
        messages.append({"message_type": "response", "timestamp": T0, "agent_id": AGENT, "parts": [call]})
    message_type = "request" if obj["part_kind"] == "tool-return" else "response"
    messages.append({"message_type": message_type, "timestamp": T0, "agent_id": AGENT, "parts": [copy.deepcopy(obj)]})
    return envelope(v, [agent_turn(v, messages, T0, T0)])


def location(ex: Example) -> str:
    """The JSON path of the example inside ``in_thread(ex, ...)``."""
    if ex.kind == "part":
        return "$.turns[0].messages[1].parts[0]" if ex.cls is m.ToolReturnPart else "$.turns[0].messages[0].parts[0]"
    return {
        "thread": "$",
        "turn": "$.turns[0]",
        "message": MSG0,
        "client_metadata": "$.turns[0].client_metadata",
        "relationships": "$.relationships",
    }[ex.kind]


def user_turn(client_metadata: Any) -> dict[str, Any]:
    return {
        "turn_type": "user",
        "submitted_at": T0,
        "parts": [{"part_kind": "user-prompt", "content": "hi"}],
        "client_metadata": copy.deepcopy(client_metadata),
    }


def decode(ex: Example, obj: Any) -> tuple[Any, Any]:
    """(the decoded object, the builtins it must re-encode to)."""
    if ex.kind == "thread":
        return from_builtins(obj, m.Thread), obj
    if ex.kind == "turn":
        return from_builtins(obj, m.Turn), obj  # type: ignore[arg-type]
    if ex.kind == "message":
        return from_builtins(obj, m.Message), obj  # type: ignore[arg-type]
    if ex.kind == "part":
        return from_builtins(obj, m.MessagePart), obj  # type: ignore[arg-type]
    if ex.kind == "relationships":
        return from_builtins(obj["relationships"], m.ThreadRelationships), obj["relationships"]
    if ex.kind == "interruption":
        return from_builtins(obj["interruption"], m.Interruption), obj["interruption"]
    assert ex.kind == "client_metadata", ex.kind
    wrapped = user_turn(obj)
    return from_builtins(wrapped, m.Turn), wrapped  # type: ignore[arg-type]


def example_id(ex: Example) -> str:
    return f"{ex.fixture}@{ex.version}"


@pytest.mark.parametrize("ex", EXAMPLES, ids=example_id)
def test_example_decodes_to_its_type_and_round_trips(ex: Example) -> None:
    obj = load(ex.fixture)
    if ex.decode_error is not None:
        path, message = ex.decode_error
        with pytest.raises(InvalidInputError) as info:
            decode(ex, obj)
        assert info.value.path == path
        assert message in str(info.value)
        return
    value, expected = decode(ex, obj)
    assert type(value) is ex.cls
    assert to_builtins(value) == expected
    # and the same through JSON text, to be sure nothing Python-only slipped in
    assert json.loads(json.dumps(to_builtins(value))) == expected


@pytest.mark.parametrize("ex", [e for e in EXAMPLES if e.findings is not None], ids=example_id)
def test_example_validates_with_exactly_the_implied_findings(ex: Example) -> None:
    assert ex.findings is not None
    doc = in_thread(ex, load(ex.fixture))
    if ex.decode_error is not None:
        # validate_json turns the decode failure into the report's only finding
        report = validate_json(json.dumps(doc).encode())
        path, message = ex.decode_error
        # (for an example placed in a thread, at the example's place there)
        assert [(f.rule, f.path) for f in report.errors] == [("json-shape", location(ex) + path[1:])]
        assert report.warnings == []
        assert message in report.errors[0].message
        return
    report = validate(from_builtins(doc, m.Thread))
    got = [("error", f.rule, f.path) for f in report.errors] + [("warning", f.rule, f.path) for f in report.warnings]
    assert got == list(ex.findings)
    assert report.ok == (not any(sev == "error" for sev, _, _ in ex.findings))
    # and validate_json agrees with validate on the JSON text
    assert validate_json(json.dumps(doc)) == report


def test_every_fixture_is_an_example_and_every_example_has_a_fixture() -> None:
    files = {p.stem for p in FIXTURES.glob("*.json")}
    used = {ex.fixture for ex in EXAMPLES}
    assert files == used


def test_fixtures_are_json_objects() -> None:
    for path in FIXTURES.glob("*.json"):
        assert isinstance(json.loads(path.read_text(encoding="utf-8")), dict), path.name


def test_expected_findings_use_known_rules_with_their_severity() -> None:
    for ex in EXAMPLES:
        for severity, rule, _ in ex.findings or ():
            assert RULES[rule].severity == severity, (ex.fixture, rule)


def test_the_wrappers_alone_are_valid() -> None:
    """The context an example is placed in adds no finding of its own."""
    for version in ("0.0.3", "0.0.4"):
        doc = envelope(version, [user_turn({"ui:x": 1}), agent_turn(version, [], T0, T0)])
        report = validate(from_builtins(doc, m.Thread))
        assert report.errors == [] and report.warnings == []


def test_examples_of_decode_errors_also_fail_inside_a_thread() -> None:
    """A message example that cannot decode makes its whole thread undecodable, at its own path."""
    ex = next(e for e in EXAMPLES if e.fixture == "v004-boundary-event-thread-spawn")
    report = validate_json(json.dumps(in_thread(ex, load(ex.fixture))))
    assert [(f.rule, f.path) for f in report.errors] == [("json-shape", MSG0)]
    assert report.errors[0].message == "Object missing required field `timestamp`"
