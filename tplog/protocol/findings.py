"""The rules :mod:`tplog.protocol.validate` checks, and the findings it reports.

Sources: [S3] threadprotocol-v0.0.3-spec.md ("Validation Rules" 1-8 and the
schema), [G3] the v0.0.3 implementation guide, [A4] the v0.0.4 amendments
(which win where they differ), [R2] the rc2 research notes. A document whose
``version`` is ``"0.0.3"`` is checked by v0.0.3 rules, ``"0.0.4"`` by v0.0.4
rules, any other version by v0.0.4 rules after a ``version`` error.

Rule table: ``rule id (severity) [source]`` and what it checks. Every id is a
key of :data:`RULES`.

Thread and registry
  version (error) [S3 Thread, A4]
      ``version`` is "0.0.3" or "0.0.4".
  thread-id-uuid (error) [S3 Thread "UUID"; rule 8]
      Thread.thread_id is a UUID (links to a thread must be UUIDs, rule 8).
  agent-registry-key (warning) [S3 Thread/AgentConfig]
      ``agents[key].agent_id == key``.
  agent-id-uuid (warning) [S3 AgentConfig]
      AgentConfig.agent_id is a UUID: only a schema comment, which the
      documents' own examples ("agent_001", "agent-B") do not follow.
  v3.8-link-uuid (error) [S3 rule 8]
      ThreadLink.thread_id is a UUID.

Timestamps and ordering
  v3.1-timestamp (error) [S3 rule 1]
      Every timestamp field is an ISO 8601 date-time (see "Timestamps").
  timestamp-timezone (warning) [S3 rules 1, 4, 5]
      A timestamp has ``Z`` or an offset. Zoneless is valid ISO 8601 but
      cannot be ordered against zoned times.
  v3.4-turn-overlap (error) [S3 rule 4; A4]
      A turn starts no earlier than the previous turn ended. Start: user
      ``submitted_at``, agent ``started_at``. End: user ``submitted_at``;
      agent ``completed_at``, or ``interruption.interrupted_at`` when
      interrupted (a turn with no known end counts from its start). Equal
      times touch, they do not overlap: the rule's "completed_at < next
      started_at" is read as not-later-than, as timestamps are often whole
      seconds.
  v3.4-turn-interval (error) [S3 rule 4, implied]
      An agent turn does not end before it started.
  v3.5-message-order (error) [S3 rule 5]
      The messages of a turn have non-decreasing timestamps.
  v3.5-message-outside-turn (warning) [S3 rule 5; S3 fromAgentRun]
      A message's timestamp lies within its turn's [start, end].

Tool calls
  v3.2-tool-call-id (error) [S3 rule 2; R2]
      A tool-return or retry-prompt with a tool_call_id refers to a tool-call
      earlier in the thread (any earlier turn). A call without an answer is
      not an error in a complete turn: deferred tools (approval, external
      execution) leave calls pending across runs.
  v3.2-tool-call-id-duplicate (warning) [S3 rule 2]
      Two tool-calls share a tool_call_id (answers become ambiguous).
  v3.2-tool-return-duplicate (warning) [S3 rule 2]
      A tool-call is answered (tool-return / retry-prompt) more than once.
  v3.2-tool-name (warning) [S3 rule 2]
      An answer's tool_name, when given, equals its call's.
  v4-no-unreturned-tool-call-in-interrupted-turn (error) [A4 core invariant]
      Every tool-call of an interrupted turn is answered later in that turn.

Agents
  v3.3-agent-ref (error) [S3 rule 3]
      AgentTurn.agent_id and ThreadMessage.agent_id are keys of ``agents``.
  v3.3-agent-ref-event (warning) [S3 rule 3, by analogy]
      SystemMessage.source_agent / target_agents are keys of ``agents`` (the
      rule names only ``agent_id``).

Turn completion
  required-field (error) [S3 schema; A4 AgentTurn]
      Fields the schema requires but the model keeps optional are present
      (and not null): AgentTurn.completed_at in v0.0.3, AgentTurn.
      completion_status in v0.0.4, ToolCallPart.args, SystemMessage.event_data.
  v3-complete-turns-only (error) [S3 "Complete Turns Only"]
      A v0.0.3 document has no interrupted turn (status or interruption).
  v4-completion-status-value (error) [A4 AgentTurn]
      completion_status is "complete" or "interrupted" (a closed union; the
      schema marks extensible unions, e.g. InterruptionReason, with
      ``| string``).
  v4-interruption-iff-interrupted (error) [A4 AgentTurn]
      ``interruption`` is present exactly when completion_status is
      "interrupted".
  v4-completed-at-only-complete (error) [A4 AgentTurn]
      An interrupted turn has no completed_at ("only present if complete").
  v4-interrupted-turn-has-cycle (warning) [A4]
      An interrupted turn holds at least one response ("can be preserved if it
      contains at least one complete cycle": permission, not a MUST).
  v4-message-has-parts (error) [A4 AgentTurn]
      In v0.0.4, a request/response message has at least one part ("a message
      is complete if it has at least one complete part"; only complete
      messages are kept).

Events, parts, content, values
  normative-event-name (error) [A4 namespace taxonomy]
      In v0.0.4, a ``data-tp-*`` event_type is one the protocol defines:
      the namespace is reserved for ThreadProtocol's canonical events.
  event-name-version (warning) [S3; A4 migration]
      A v0.0.3 normative name (``agent.handoff``, ...) in a v0.0.4 document,
      or a v0.0.4 ``data-tp-*`` name in a v0.0.3 document. Legal there as a
      custom event, but almost surely an unmigrated normative event whose
      meaning a reader will miss.
  event-type-namespace (warning) [S3 extension namespaces; G3]
      A non-normative event_type uses an extension namespace: v0.0.3 ``data-*``
      or ``meta:*``; v0.0.4 ``data-*`` (G3's reference code warns on others).
  event-thread-id-uuid (warning) [S3 Thread; A4 examples]
      A ``*thread_id`` string in the event_data of a normative thread event
      (spawn, merge, end) is a UUID (event payloads are not normative).
  part-kind (warning) [S3 extension namespaces; G3]
      A non-normative part_kind is ``custom:*`` or ``meta:*``.
  part-kind-reserved (error) [S3 "MUST NOT redefine or repurpose"]
      An ExtensionPart / ExtensionContent does not carry a normative kind.
  user-content-kind (warning) [S3 MultiModalContent]
      A user content ``kind`` is one the spec defines.
  content-identifier (warning) [S3 (required); R2 (Pydantic AI: optional)]
      ImageUrl/AudioUrl/VideoUrl/DocumentUrl/BinaryContent have an identifier.
  v3-tool-return-status (error) [S3 ToolReturnPart]
      status is success | error | validation_error (closed union).
  v3-finish-reason (error) [S3 FinishReason]
      finish_reason is stop | length | content_filter | tool_call | error.
  v3.6-client-metadata-namespace (warning) [S3 rule 6, "SHOULD generate a warning (but not error)"]
      Each client_metadata key contains one of ``: . / _ -``.
  v3.7-content-ref-uri (error) [S3 rule 7]
      ContentRef.uri is a valid URI (RFC 3986 scheme and characters; the
      listed hierarchical schemes need ``scheme://authority``).
  v3.7-content-ref-scheme (warning) [S3 rule 7, "Custom schemes allowed with documentation"]
      The scheme is one the spec lists (http, https, s3, gs, azure, file) or
      one passed in ``content_ref_schemes``.
  explicit-null (warning) [S3 schema]
      An optional, typed field is null (``field?: T`` allows absent, not
      null); fields of type ``any`` may be null.

Decode failures (only from :func:`validate_json`)
  json-syntax (error) [RFC 8259]
      The bytes are not JSON; path ``$``.
  json-shape (error) [S3/A4 schema]
      A normative object has the wrong shape (missing or mistyped field);
      decoding stops at the first, whose path is given.

"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from tplog.errors import ValidationError

__all__ = ["RULES", "Finding", "Rule", "Severity", "ValidationReport"]


Severity = Literal["error", "warning"]


class Rule(msgspec.Struct, frozen=True, kw_only=True):
    """One validation rule: its ``severity``, what it ``checks`` and its ``source`` document."""

    severity: Severity
    checks: str
    source: str


def _r(severity: Severity, checks: str, source: str) -> Rule:
    return Rule(severity=severity, checks=checks, source=source)


_S3 = "threadprotocol-v0.0.3-spec"
_G3 = "threadprotocol-v0.0.3-implementation-guide"
_A4 = "threadprotocol-v0.0.4-amendments"
_R2 = "threadprotocol-rc2-research-multimodal-deferred-tools"

#: Every rule :func:`validate` / :func:`validate_json` can report, by id.
RULES: Final[dict[str, Rule]] = {
    "version": _r("error", 'version is "0.0.3" or "0.0.4"', f"{_S3} Thread; {_A4}"),
    "thread-id-uuid": _r("error", "Thread.thread_id is a UUID", f"{_S3} Thread, rule 8"),
    "v3.1-timestamp": _r("error", "every timestamp is an ISO 8601 date-time", f"{_S3} rule 1"),
    "timestamp-timezone": _r("warning", "a timestamp carries Z or an offset", f"{_S3} rules 1, 4, 5"),
    "required-field": _r("error", "a field the schema requires is present", f"{_S3} schema; {_A4} AgentTurn"),
    "explicit-null": _r("warning", "an optional typed field is absent rather than null", f"{_S3} schema"),
    "v3.2-tool-call-id": _r("error", "an answer's tool_call_id names an earlier tool-call", f"{_S3} rule 2; {_R2}"),
    "v3.2-tool-call-id-duplicate": _r("warning", "tool-call ids are unique", f"{_S3} rule 2"),
    "v3.2-tool-return-duplicate": _r("warning", "a tool-call is answered at most once", f"{_S3} rule 2"),
    "v3.2-tool-name": _r("warning", "an answer's tool_name is its call's", f"{_S3} rule 2"),
    "v3.3-agent-ref": _r("error", "agent_id references a key of agents", f"{_S3} rule 3"),
    "v3.3-agent-ref-event": _r("warning", "source_agent/target_agents reference keys of agents", f"{_S3} rule 3"),
    "agent-registry-key": _r("warning", "agents[key].agent_id == key", f"{_S3} Thread"),
    "agent-id-uuid": _r("warning", "AgentConfig.agent_id is a UUID", f"{_S3} AgentConfig"),
    "v3.4-turn-overlap": _r("error", "a turn starts no earlier than the previous one ended", f"{_S3} rule 4; {_A4}"),
    "v3.4-turn-interval": _r("error", "an agent turn ends no earlier than it started", f"{_S3} rule 4"),
    "v3.5-message-order": _r("error", "messages of a turn are chronologically ordered", f"{_S3} rule 5"),
    "v3.5-message-outside-turn": _r("warning", "a message lies within its turn's interval", f"{_S3} rule 5"),
    "v3.6-client-metadata-namespace": _r("warning", "client_metadata keys are namespaced", f"{_S3} rule 6"),
    "v3.7-content-ref-uri": _r("error", "ContentRef.uri is a valid URI", f"{_S3} rule 7"),
    "v3.7-content-ref-scheme": _r("warning", "ContentRef.uri has a recognized scheme", f"{_S3} rule 7"),
    "v3.8-link-uuid": _r("error", "ThreadLink.thread_id is a UUID", f"{_S3} rule 8"),
    "event-thread-id-uuid": _r("warning", "thread ids in normative thread events are UUIDs", f"{_S3}; {_A4}"),
    "v3-complete-turns-only": _r("error", "a v0.0.3 document has no interrupted turn", f"{_S3} Complete Turns Only"),
    "v4-completion-status-value": _r("error", "completion_status is complete|interrupted", f"{_A4} AgentTurn"),
    "v4-interruption-iff-interrupted": _r("error", "interruption present iff interrupted", f"{_A4} AgentTurn"),
    "v4-completed-at-only-complete": _r("error", "no completed_at on an interrupted turn", f"{_A4} AgentTurn"),
    "v4-no-unreturned-tool-call-in-interrupted-turn": _r(
        "error", "every tool-call of an interrupted turn is answered in it", f"{_A4} core invariant"
    ),
    "v4-interrupted-turn-has-cycle": _r("warning", "an interrupted turn holds a response", f"{_A4} summary"),
    "v4-message-has-parts": _r("error", "a request/response has at least one part", f"{_A4} AgentTurn"),
    "normative-event-name": _r("error", "a data-tp-* event_type is one the protocol defines", _A4),
    "event-name-version": _r("warning", "no normative event name of the other version", f"{_S3}; {_A4}"),
    "event-type-namespace": _r("warning", "custom event types use an extension namespace", f"{_S3}; {_G3}"),
    "part-kind": _r("warning", "custom part kinds use custom:* or meta:*", f"{_S3}; {_G3}"),
    "part-kind-reserved": _r("error", "extension objects do not use normative kinds", f"{_S3} Normative Core"),
    "user-content-kind": _r("warning", "user content kinds are the spec's", f"{_S3} MultiModalContent"),
    "content-identifier": _r("warning", "media content has an identifier", f"{_S3}; {_R2}"),
    "v3-tool-return-status": _r("error", "tool-return status is success|error|validation_error", _S3),
    "v3-finish-reason": _r("error", "finish_reason is a FinishReason", f"{_S3} FinishReason"),
    "json-syntax": _r("error", "the document is JSON", "RFC 8259"),
    "json-shape": _r("error", "normative objects have the schema's shape", f"{_S3}; {_A4}"),
}


class Finding(msgspec.Struct, frozen=True, kw_only=True):
    """One broken rule: its ``rule`` id (a key of :data:`RULES`), the JSON ``path`` and a ``message``."""

    rule: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message} [{self.rule}]"


class ValidationReport(msgspec.Struct, frozen=True, kw_only=True):
    """Every finding of one validation, in document order. ``ok`` when there are no errors."""

    errors: list[Finding] = []
    warnings: list[Finding] = []

    @property
    def ok(self) -> bool:
        """True when the document broke no rule of error severity (warnings allowed)."""
        return not self.errors

    def raise_for_errors(self, prefix: str = "") -> None:
        """Raise :class:`~tplog.ValidationError` (with ``report=self``) if there are errors;
        its message starts with ``prefix`` and names the first errors' paths and rule ids."""
        if self.errors:
            n = len(self.errors)
            head = "; ".join(str(f) for f in self.errors[:3])
            more = f"; and {n - 3} more" if n > 3 else ""
            raise ValidationError(f"{prefix}{n} validation error{'s' if n != 1 else ''}: {head}{more}", report=self)
