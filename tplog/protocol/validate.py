"""Check a ThreadProtocol document against every rule of the protocol's documents.

:func:`validate` takes a decoded :class:`~tplog.protocol.model.Thread` and returns a
:class:`ValidationReport` listing every :class:`Finding`, never stopping at the
first; :func:`validate_json` takes the raw JSON and also turns a decode failure
(malformed JSON, a normative object of the wrong shape) into a finding, so a
report can always be printed. ``report.raise_for_errors()`` raises
:class:`~tplog.ValidationError` carrying the report.

Errors are violations of a MUST (or of a closed value set) in the documents;
warnings are SHOULDs, things the documents say to warn about, and schema hints
that real producers (Pydantic AI) do not follow. A document with only warnings
is valid (``report.ok``).

Sources: [S3] threadprotocol-v0.0.3-spec.md ("Validation Rules" 1-8 and the
schema), [G3] the v0.0.3 implementation guide, [A4] the v0.0.4 amendments
(which win where they differ), [R2] the rc2 research notes. A document whose
``version`` is ``"0.0.3"`` is checked by v0.0.3 rules, ``"0.0.4"`` by v0.0.4
rules, any other version by v0.0.4 rules after a ``version`` error.

The rule table (every id a key of :data:`RULES`) is in :mod:`tplog.protocol.findings`.

Timestamps: an ISO 8601 extended-format calendar date and time, i.e. the RFC
3339 profile: ``YYYY-MM-DDTHH:MM:SS`` with optional fractional seconds (any
number of digits; compared to the microsecond, extra digits truncated) and an
optional zone, ``Z`` or ``±HH:MM``. Lower-case ``t``/``z`` are accepted (RFC
3339); a space for ``T``, reduced precision, basic format and week/ordinal
dates are not. A leap second (``:60``) is accepted and ordered as ``:59.999999``.
A timestamp without a zone is valid (ISO 8601 local time; the v0.0.4 sample code
writes ``datetime.now().isoformat()``) but draws ``timestamp-timezone``, and is
only ordered against other zoneless timestamps: comparisons between a zoned and
a zoneless timestamp are skipped, never guessed. Comparisons use parsed
datetimes, never strings.

Paths: JSON paths from the root ``$``; object keys as ``.key`` when they are
identifiers, else ``["key"]``. A finding about a missing field names where the
field would be (``$.turns[1].interruption``).
"""

from __future__ import annotations

import json
import re
import typing
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Final

import msgspec
from msgspec import UNSET

from tplog.errors import InvalidInputError
from tplog.protocol import model as m
from tplog.protocol.findings import RULES, Finding, Rule, Severity, ValidationReport
from tplog.protocol.json import from_json

__all__ = [
    "RULES",
    "THREAD_ID_NAMESPACE",
    "Checker",
    "Finding",
    "Rule",
    "Severity",
    "ValidationReport",
    "is_uuid",
    "parse_timestamp",
    "thread_id_for",
    "validate",
    "validate_json",
]


# --------------------------------------------------------------------------- helpers

_TS_RE: Final = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?"
    r"(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))?"
)
_UUID_RE: Final = re.compile(r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}")
_IDENT_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SCHEME_RE: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):(.*)", re.DOTALL)
# RFC 3986 characters allowed after the scheme (unreserved, reserved, and "%" of pct-encoded).
_URI_REST_RE: Final = re.compile(r"(?:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})*")
_NAMESPACE_SEPARATORS: Final = frozenset(":./_-")

#: Schemes the spec lists for ContentRef.uri ("HTTP(S)" covers plain http).
KNOWN_URI_SCHEMES: Final = frozenset({"http", "https", "s3", "gs", "azure", "file"})
_AUTHORITY_SCHEMES: Final = frozenset({"http", "https", "s3", "gs", "azure"})

TOOL_RETURN_STATUSES: Final = frozenset({"success", "error", "validation_error"})
FINISH_REASONS: Final = frozenset({"stop", "length", "content_filter", "tool_call", "error"})
COMPLETION_STATUSES: Final = frozenset({"complete", "interrupted"})
V3_EVENT_TYPES: Final = frozenset({"agent.handoff", "thread.spawn", "thread.merge", "thread.end", "error"})
V4_EVENT_TYPES: Final = m.NORMATIVE_EVENT_TYPES
_V3_TO_V4: Final = {
    "agent.handoff": m.AGENT_HANDOFF,
    "thread.spawn": m.THREAD_SPAWN,
    "thread.merge": m.THREAD_MERGE,
    "thread.end": m.THREAD_END,
    "error": m.ERROR_EVENT,
}
_THREAD_EVENTS: Final = frozenset(
    {"thread.spawn", "thread.merge", "thread.end", m.THREAD_SPAWN, m.THREAD_MERGE, m.THREAD_END}
)
_PART_NAMESPACES: Final = ("custom:", "meta:")


def parse_timestamp(value: str) -> datetime | None:
    """The datetime of a protocol timestamp (see the module docstring), or None if it is not one.

    Zoneless timestamps come back naive; ``-00:00`` is read as UTC.
    """
    match = _TS_RE.fullmatch(value)
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in match.group(1, 2, 3, 4, 5, 6))
    frac = match.group(7)
    micro = int((frac + "000000")[:6]) if frac else 0
    leap = second == 60
    if leap:
        second, micro = 59, 999999
    tz: timezone | None = None
    if match.group(8):
        tz = UTC
    elif match.group(9):
        oh, om = int(match.group(10)), int(match.group(11))
        if oh > 23 or om > 59:
            return None
        delta = timedelta(hours=oh, minutes=om)
        tz = timezone(-delta if match.group(9) == "-" else delta)
    try:
        return datetime(year, month, day, hour, minute, second, micro, tzinfo=tz)
    except ValueError:
        return None


def is_uuid(value: str) -> bool:
    """True for a UUID in its canonical 8-4-4-4-12 hex form (any case, any version)."""
    return _UUID_RE.fullmatch(value) is not None


#: The UUIDv5 namespace of :func:`thread_id_for` (fixed forever: it decides stored thread ids;
#: the same as ``tplog.integrations.vercel``'s chat-id namespace, so both give the same ids).
THREAD_ID_NAMESPACE: Final = uuid.UUID("6f2c8a54-3d1b-5e7a-9c40-7b1d2e3f4a50")


def thread_id_for(external_id: str) -> str:
    """The thread id for an id from outside (a chat id, a caller's name): the one id rule.

    A thread id must be a UUID (``thread-id-uuid``; the store refuses any other
    ``ThreadStarted.thread_id``). A UUID (8-4-4-4-12 hex) maps to itself in its
    canonical lower-case form; any other non-empty string to the UUIDv5 of it in
    :data:`THREAD_ID_NAMESPACE`, so the same outside id always names the same
    thread. Entry points that take an id from outside (the importers,
    ``events_from_messages``, the server's chat ids) call this.
    """
    if not isinstance(external_id, str) or not external_id:
        raise InvalidInputError(f"a thread id must be a non-empty string, not {external_id!r}")
    if is_uuid(external_id):
        return external_id.lower()
    return str(uuid.uuid5(THREAD_ID_NAMESPACE, external_id))


def _key(path: str, key: str) -> str:
    return f"{path}.{key}" if _IDENT_RE.fullmatch(key) else f"{path}[{json.dumps(key)}]"


def _comparable(a: datetime, b: datetime) -> bool:
    return (a.tzinfo is None) == (b.tzinfo is None)


def _earlier(a: datetime | None, b: datetime | None) -> bool:
    """``a < b``, when both are known and comparable."""
    return a is not None and b is not None and _comparable(a, b) and a < b


def _uri_problem(uri: str) -> str | None:
    match = _SCHEME_RE.fullmatch(uri)
    if match is None:
        return "has no scheme (expected `scheme:...`)"
    scheme, rest = match.group(1).lower(), match.group(2)
    if not rest:
        return "has nothing after its scheme"
    if _URI_REST_RE.fullmatch(rest) is None:
        return "holds characters a URI cannot (spaces, controls, bad %-escapes, ...)"
    if scheme in _AUTHORITY_SCHEMES:
        if not rest.startswith("//"):
            return f"a {scheme} URI needs `{scheme}://host-or-bucket/...`"
        authority = rest[2:].split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
        if not authority:
            return f"a {scheme} URI needs a host or bucket after `{scheme}://`"
    return None


_hints_cache: dict[type, list[tuple[str, bool]]] = {}


def _typed_fields(cls: type) -> list[tuple[str, bool]]:
    """(field name, may be null) for a Struct's fields; fields typed ``any`` may be null."""
    got = _hints_cache.get(cls)
    if got is None:
        hints = typing.get_type_hints(cls)
        got = []
        for name in cls.__struct_fields__:  # type: ignore[attr-defined]
            if name == "extra":
                continue
            tp = hints[name]
            got.append((name, tp is Any or Any in typing.get_args(tp)))
        _hints_cache[cls] = got
    return got


# --------------------------------------------------------------------------- the checker


class Checker:
    """The rules' checks, run over one thread by :func:`validate`; tplog.protocol.rules reuses
    them per event at append time."""

    def __init__(self, thread: m.Thread | None, schemes: frozenset[str]) -> None:
        self.thread = thread
        self.schemes = schemes
        self.errors: list[Finding] = []
        self.warnings: list[Finding] = []
        self.v4 = True
        self.agents = set(thread.agents) if thread is not None else set()
        # tool_call_id -> (tool_name, path of the call part); answers counted per call id
        self.calls: dict[str, tuple[str, str]] = {}
        self.answered: set[str] = set()

    def add(self, rule: str, path: str, message: str) -> None:
        finding = Finding(rule=rule, path=path, message=message)
        (self.errors if RULES[rule].severity == "error" else self.warnings).append(finding)

    # ----------------------------------------------------------------- leaves

    def ts(self, value: Any, path: str) -> datetime | None:
        if not isinstance(value, str):
            return None  # absent or null: required-field / explicit-null report it
        parsed = parse_timestamp(value)
        if parsed is None:
            self.add(
                "v3.1-timestamp", path, f"{value!r} is not an ISO 8601 date-time (YYYY-MM-DDTHH:MM:SS[.f][Z|±HH:MM])"
            )
        elif parsed.tzinfo is None:
            self.add("timestamp-timezone", path, f"{value!r} has no time zone (add Z or an offset)")
        return parsed

    def agent_ref(self, agent_id: str, path: str, rule: str = "v3.3-agent-ref") -> None:
        if agent_id not in self.agents:
            known = ", ".join(sorted(self.agents)) or "none"
            self.add(rule, path, f"agent {agent_id!r} is not in the agents registry (registered: {known})")

    def nulls(self, obj: Any, path: str) -> None:
        """Warn on explicit nulls in optional typed fields, recursively."""
        if isinstance(obj, (m.ExtensionPart, m.ExtensionContent)):
            return
        if isinstance(obj, msgspec.Struct):
            for name, nullable in _typed_fields(type(obj)):
                value = getattr(obj, name)
                sub = f"{path}.{name}"
                if value is None and not nullable:
                    self.add("explicit-null", sub, f"`{name}` is null; omit the field instead")
                elif not nullable:
                    self.nulls(value, sub)
        elif isinstance(obj, list):
            for i, item in enumerate(obj):
                if isinstance(item, (msgspec.Struct, list)):
                    self.nulls(item, f"{path}[{i}]")
        elif isinstance(obj, dict):
            for k, item in obj.items():
                if isinstance(item, msgspec.Struct):
                    self.nulls(item, _key(path, k))

    # ----------------------------------------------------------------- thread

    def run(self) -> None:
        t = self.thread
        assert t is not None
        if t.version == "0.0.3":
            self.v4 = False
        elif t.version != "0.0.4":
            self.add(
                "version",
                "$.version",
                f"unknown version {t.version!r}; expected '0.0.3' or '0.0.4' (checked by v0.0.4 rules)",
            )
        if not is_uuid(t.thread_id):
            self.add("thread-id-uuid", "$.thread_id", f"thread_id {t.thread_id!r} is not a UUID")
        self.ts(t.created_at, "$.created_at")
        self.ts(t.updated_at, "$.updated_at")
        for key, cfg in t.agents.items():
            p = _key("$.agents", key)
            if cfg.agent_id != key:
                self.add(
                    "agent-registry-key",
                    f"{p}.agent_id",
                    f"agent_id {cfg.agent_id!r} differs from its registry key {key!r}",
                )
            if not is_uuid(cfg.agent_id):
                self.add("agent-id-uuid", f"{p}.agent_id", f"agent_id {cfg.agent_id!r} is not a UUID")
            self.ts(cfg.created_at, f"{p}.created_at")
        if isinstance(t.relationships, m.ThreadRelationships) and isinstance(t.relationships.links, list):
            for i, link in enumerate(t.relationships.links):
                if not is_uuid(link.thread_id):
                    self.add(
                        "v3.8-link-uuid",
                        f"$.relationships.links[{i}].thread_id",
                        f"linked thread_id {link.thread_id!r} is not a UUID",
                    )
        prev_end: datetime | None = None
        for i, turn in enumerate(t.turns):
            p = f"$.turns[{i}]"
            if isinstance(turn, m.UserTurn):
                start = end = self.ts(turn.submitted_at, f"{p}.submitted_at")
                start_path = f"{p}.submitted_at"
                self.user_turn(turn, p)
            else:
                start_path = f"{p}.started_at"
                start, end = self.agent_turn(turn, p)
            if _earlier(start, prev_end):
                self.add(
                    "v3.4-turn-overlap", start_path, f"turn {i} starts before turn {i - 1} ended ({start} < {prev_end})"
                )
            if end is not None or start is not None:
                prev_end = end if end is not None else start
        self.nulls(t, "$")

    # ----------------------------------------------------------------- turns

    def user_turn(self, turn: m.UserTurn, p: str) -> None:
        for j, part in enumerate(turn.parts):
            self.part(part, f"{p}.parts[{j}]", None)
        if isinstance(turn.client_metadata, dict):
            for key in turn.client_metadata:
                if not (_NAMESPACE_SEPARATORS & set(key)):
                    self.add(
                        "v3.6-client-metadata-namespace",
                        _key(f"{p}.client_metadata", key),
                        f"client_metadata key {key!r} has no namespace separator (one of : . / _ -)",
                    )

    def agent_turn(self, turn: m.AgentTurn, p: str) -> tuple[datetime | None, datetime | None]:
        self.agent_ref(turn.agent_id, f"{p}.agent_id")
        start = self.ts(turn.started_at, f"{p}.started_at")
        completed = self.ts(turn.completed_at, f"{p}.completed_at")
        status = turn.completion_status
        has_interruption = isinstance(turn.interruption, m.Interruption)
        interrupted_at = None
        if isinstance(turn.interruption, m.Interruption):
            interrupted_at = self.ts(turn.interruption.interrupted_at, f"{p}.interruption.interrupted_at")
        interrupted = status == "interrupted"
        if not self.v4:
            if interrupted or has_interruption:
                self.add(
                    "v3-complete-turns-only",
                    f"{p}.completion_status" if interrupted else f"{p}.interruption",
                    "v0.0.3 keeps only complete turns; an interrupted turn needs a v0.0.4 document",
                )
            if turn.completed_at is UNSET or turn.completed_at is None:
                self.add("required-field", f"{p}.completed_at", "a v0.0.3 agent turn requires completed_at")
        else:
            if status is UNSET or status is None:
                self.add(
                    "required-field",
                    f"{p}.completion_status",
                    "a v0.0.4 agent turn requires completion_status ('complete' or 'interrupted')",
                )
            elif status not in COMPLETION_STATUSES:
                self.add(
                    "v4-completion-status-value",
                    f"{p}.completion_status",
                    f"completion_status {status!r} is not 'complete' or 'interrupted'",
                )
            if status in COMPLETION_STATUSES:
                if interrupted and not has_interruption:
                    self.add(
                        "v4-interruption-iff-interrupted",
                        f"{p}.interruption",
                        "an interrupted turn needs an `interruption` object (reason, interrupted_at)",
                    )
                elif not interrupted and turn.interruption is not UNSET:
                    self.add(
                        "v4-interruption-iff-interrupted",
                        f"{p}.interruption",
                        "`interruption` is only allowed when completion_status is 'interrupted'",
                    )
                if interrupted and turn.completed_at is not UNSET:
                    self.add(
                        "v4-completed-at-only-complete",
                        f"{p}.completed_at",
                        "an interrupted turn has no completed_at (use interruption.interrupted_at)",
                    )
        if interrupted or (has_interruption and status != "complete"):
            end, end_path = interrupted_at, f"{p}.interruption.interrupted_at"
        else:
            end, end_path = completed, f"{p}.completed_at"
        if _earlier(end, start):
            self.add("v3.4-turn-interval", end_path, f"the turn ends ({end}) before it started ({start})")

        turn_calls: dict[str, str] = {}  # unanswered calls of this turn -> part path
        prev: datetime | None = None
        has_response = False
        for j, msg in enumerate(turn.messages):
            mp = f"{p}.messages[{j}]"
            when = self.ts(msg.timestamp, f"{mp}.timestamp")
            if _earlier(when, prev):
                self.add(
                    "v3.5-message-order",
                    f"{mp}.timestamp",
                    f"message {j} ({when}) is earlier than the message before it ({prev})",
                )
            if _earlier(when, start) or _earlier(end, when):
                self.add(
                    "v3.5-message-outside-turn",
                    f"{mp}.timestamp",
                    f"message time {when} lies outside its turn ({start} .. {end})",
                )
            if when is not None:
                prev = when
            self.message(msg, mp, turn_calls)
            has_response = has_response or isinstance(msg, m.ResponseMessage)
        if self.v4 and interrupted:
            for call_id, call_path in turn_calls.items():
                self.add(
                    "v4-no-unreturned-tool-call-in-interrupted-turn",
                    call_path,
                    f"tool call {call_id!r} has no return in this interrupted turn; an interrupted turn keeps "
                    "only complete request/response cycles",
                )
            if not has_response:
                self.add(
                    "v4-interrupted-turn-has-cycle",
                    f"{p}.messages",
                    "an interrupted turn is kept only if it holds at least one complete cycle (a response)",
                )
        return start, end

    # ----------------------------------------------------------------- messages and parts

    def message(self, msg: m.Message, mp: str, turn_calls: dict[str, str] | None) -> None:
        """A message's own rules (not its place in the turn: time order is the turn's)."""
        if isinstance(msg, m.SystemMessage):
            self.system_message(msg, mp)
            return
        self.agent_ref(msg.agent_id, f"{mp}.agent_id")
        if isinstance(msg.finish_reason, str) and msg.finish_reason not in FINISH_REASONS:
            self.add(
                "v3-finish-reason",
                f"{mp}.finish_reason",
                f"finish_reason {msg.finish_reason!r} is not one of {sorted(FINISH_REASONS)}",
            )
        if self.v4 and not msg.parts:
            self.add(
                "v4-message-has-parts",
                f"{mp}.parts",
                "a message is complete only with at least one complete part; drop empty messages",
            )
        for k, part in enumerate(msg.parts):
            self.part(part, f"{mp}.parts[{k}]", turn_calls)

    def system_message(self, msg: m.SystemMessage, mp: str) -> None:
        ev = msg.event_type
        path = f"{mp}.event_type"
        if self.v4:
            if ev in V4_EVENT_TYPES:
                pass
            elif ev in V3_EVENT_TYPES:
                self.add(
                    "event-name-version",
                    path,
                    f"{ev!r} is a v0.0.3 normative name, only a custom event in v0.0.4, which renamed it to "
                    f"{_V3_TO_V4[ev]!r}",
                )
            elif ev.startswith("data-tp-"):
                self.add(
                    "normative-event-name",
                    path,
                    f"{ev!r} is in the reserved data-tp-* namespace but is not a ThreadProtocol event "
                    f"(one of {sorted(V4_EVENT_TYPES)}); use data-app-* or data-sys-*",
                )
            elif not ev.startswith("data-"):
                self.add(
                    "event-type-namespace",
                    path,
                    f"event_type {ev!r} is neither normative nor in the data-* namespace (data-app-*, data-sys-*)",
                )
        elif ev in V4_EVENT_TYPES:
            self.add(
                "event-name-version",
                path,
                f"{ev!r} is a v0.0.4 name; in a v0.0.3 document it is a custom data-* event, not the normative "
                f"{next(k for k, v in _V3_TO_V4.items() if v == ev)!r}",
            )
        elif ev not in V3_EVENT_TYPES and not ev.startswith(("data-", "meta:")):
            self.add(
                "event-type-namespace",
                path,
                f"event_type {ev!r} is neither normative nor in the data-* / meta:* namespaces",
            )
        normative = V4_EVENT_TYPES if self.v4 else V3_EVENT_TYPES
        if ev in normative and ev in _THREAD_EVENTS and isinstance(msg.event_data, dict):
            for k, v in msg.event_data.items():
                if isinstance(k, str) and k.endswith("thread_id") and isinstance(v, str) and not is_uuid(v):
                    self.add("event-thread-id-uuid", _key(f"{mp}.event_data", k), f"thread id {v!r} is not a UUID")
        if msg.event_data is UNSET:
            self.add("required-field", f"{mp}.event_data", "a system message requires event_data")
        if isinstance(msg.source_agent, str):
            self.agent_ref(msg.source_agent, f"{mp}.source_agent", "v3.3-agent-ref-event")
        if isinstance(msg.target_agents, list):
            for i, a in enumerate(msg.target_agents):
                self.agent_ref(a, f"{mp}.target_agents[{i}]", "v3.3-agent-ref-event")

    def part(self, part: m.MessagePart, pp: str, turn_calls: dict[str, str] | None) -> None:
        if isinstance(part, m.ToolCallPart):
            if part.tool_call_id in self.calls:
                self.add(
                    "v3.2-tool-call-id-duplicate",
                    f"{pp}.tool_call_id",
                    f"tool_call_id {part.tool_call_id!r} was already used by {self.calls[part.tool_call_id][1]}",
                )
                self.answered.discard(part.tool_call_id)
            self.calls[part.tool_call_id] = (part.tool_name, pp)
            if turn_calls is not None:
                turn_calls[part.tool_call_id] = pp
            if part.args is UNSET:
                self.add("required-field", f"{pp}.args", "a tool-call requires args")
        elif isinstance(part, (m.ToolReturnPart, m.RetryPromptPart)):
            if isinstance(part, m.ToolReturnPart):
                if part.status not in TOOL_RETURN_STATUSES:
                    self.add(
                        "v3-tool-return-status",
                        f"{pp}.status",
                        f"status {part.status!r} is not one of {sorted(TOOL_RETURN_STATUSES)}",
                    )
                if isinstance(part.content_ref, m.ContentRef):
                    self.content_ref(part.content_ref, f"{pp}.content_ref")
            call_id = part.tool_call_id
            if isinstance(call_id, str):
                call = self.calls.get(call_id)
                if call is None:
                    self.add(
                        "v3.2-tool-call-id",
                        f"{pp}.tool_call_id",
                        f"tool_call_id {call_id!r} matches no earlier tool-call in the thread",
                    )
                else:
                    if call_id in self.answered:
                        self.add(
                            "v3.2-tool-return-duplicate",
                            f"{pp}.tool_call_id",
                            f"tool call {call_id!r} ({call[1]}) was already answered",
                        )
                    self.answered.add(call_id)
                    if turn_calls is not None:
                        turn_calls.pop(call_id, None)
                    if isinstance(part.tool_name, str) and part.tool_name != call[0]:
                        self.add(
                            "v3.2-tool-name",
                            f"{pp}.tool_name",
                            f"tool_name {part.tool_name!r} differs from its call's {call[0]!r} ({call[1]})",
                        )
        elif isinstance(part, m.UserPromptPart):
            if isinstance(part.content, list):
                for n, item in enumerate(part.content):
                    self.content(item, f"{pp}.content[{n}]")
        elif isinstance(part, m.FilePart):
            self.content(part.content, f"{pp}.content")
        elif isinstance(part, m.ExtensionPart):
            kind = part.part_kind_
            if kind in m.NORMATIVE_PART_KINDS:
                self.add(
                    "part-kind-reserved",
                    f"{pp}.part_kind",
                    f"an extension part may not use the normative part_kind {kind!r}",
                )
            elif not kind.startswith(_PART_NAMESPACES):
                self.add(
                    "part-kind",
                    f"{pp}.part_kind",
                    f"part_kind {kind!r} is not normative and not namespaced (custom:* or meta:*)",
                )

    def content(self, item: m.UserContent, cp: str) -> None:
        if isinstance(item, str):
            return
        if isinstance(item, m.ExtensionContent):
            if item.kind_ in m.CONTENT_KINDS:
                self.add(
                    "part-kind-reserved",
                    f"{cp}.kind",
                    f"an extension content object may not use the normative kind {item.kind_!r}",
                )
            else:
                self.add(
                    "user-content-kind",
                    f"{cp}.kind",
                    f"content kind {item.kind_!r} is not one of {sorted(m.CONTENT_KINDS)}",
                )
        elif item.identifier is UNSET:
            self.add(
                "content-identifier",
                f"{cp}.identifier",
                "media content should carry an identifier (for tool references)",
            )

    def content_ref(self, ref: m.ContentRef, rp: str) -> None:
        problem = _uri_problem(ref.uri)
        if problem is not None:
            self.add("v3.7-content-ref-uri", f"{rp}.uri", f"uri {ref.uri!r} {problem}")
            return
        scheme = ref.uri.split(":", 1)[0].lower()
        if scheme not in KNOWN_URI_SCHEMES and scheme not in self.schemes:
            self.add(
                "v3.7-content-ref-scheme",
                f"{rp}.uri",
                f"uri scheme {scheme!r} is not one the spec lists ({', '.join(sorted(KNOWN_URI_SCHEMES))}); "
                "pass documented custom schemes as content_ref_schemes",
            )


# --------------------------------------------------------------------------- entry points


def validate(thread: m.Thread, *, content_ref_schemes: Iterable[str] = ()) -> ValidationReport:
    """Check ``thread`` against every rule in :data:`RULES`; never raises for a bad document.

    ``content_ref_schemes`` adds documented custom URI schemes (lower case) that
    ContentRef.uri may use without a ``v3.7-content-ref-scheme`` warning.
    """
    checker = Checker(thread, frozenset(s.lower() for s in content_ref_schemes))
    checker.run()
    return ValidationReport(errors=checker.errors, warnings=checker.warnings)


def validate_json(data: bytes | str, *, content_ref_schemes: Iterable[str] = ()) -> ValidationReport:
    """Decode ``data`` as a Thread and validate it; a decode failure becomes a single error finding.

    Malformed JSON is ``json-syntax`` at ``$``; a normative object of the wrong
    shape is ``json-shape`` at the path of the first offending value (decoding
    stops there, so later problems are not reported until it is fixed).
    """
    try:
        thread = from_json(data, m.Thread)
    except InvalidInputError as exc:
        message = str(exc.args[0]) if exc.args else str(exc)
        if exc.path is not None:
            suffix = f" (at {exc.path})"
            if message.endswith(suffix):
                message = message[: -len(suffix)]
            finding = Finding(rule="json-shape", path=exc.path, message=message)
        else:
            finding = Finding(rule="json-syntax", path="$", message=message)
        return ValidationReport(errors=[finding])
    return validate(thread, content_ref_schemes=content_ref_schemes)
