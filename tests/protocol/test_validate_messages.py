"""tplog.protocol.validate: the exact finding of every rule (rule id, JSON path and message).

test_validate.py pins each rule's id and path; the message is what a person reads (the CLI prints
it, ``raise_for_errors`` puts it in the error), so here every rule's complete finding is pinned:
the offending value, the registry or value set it is checked against, the earlier call or turn it
refers to. Written for the mutation run of validate.py (tests/MUTANTS.md): a message dropped or
changed, or naming the wrong call, turn or event, fails a case below.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from protocol.documents import (
    A1,
    A2,
    MSG,
    base,
    base_v3,
)

from tplog.protocol import model as m
from tplog.protocol.json import from_builtins
from tplog.protocol.validate import validate

Doc = dict[str, Any]
Got = list[tuple[str, str, str, str]]

#: Both agents as agent_ref lists them (sorted: A2 sorts first).
REGISTERED = f"{A2}, {A1}"
TS_FORM = "(YYYY-MM-DDTHH:MM:SS[.f][Z|±HH:MM])"


def report(doc: Doc | m.Thread, **kwargs: Any) -> Got:
    """(severity, rule, path, message) of every finding, errors first, each in document order."""
    thread = doc if isinstance(doc, m.Thread) else from_builtins(doc, m.Thread)
    rep = validate(thread, **kwargs)
    return [("error", f.rule, f.path, f.message) for f in rep.errors] + [
        ("warning", f.rule, f.path, f.message) for f in rep.warnings
    ]


def E(rule: str, path: str, message: str) -> tuple[str, str, str, str]:
    return ("error", rule, path, message)


def W(rule: str, path: str, message: str) -> tuple[str, str, str, str]:
    return ("warning", rule, path, message)


def edited(edit: Callable[[Doc], None], start: Callable[[], Doc] = base) -> Doc:
    doc = start()
    edit(doc)
    return doc


def _set(path: tuple[Any, ...], value: Any) -> Callable[[Doc], None]:
    def edit(doc: Doc) -> None:
        obj: Any = doc
        for key in path[:-1]:
            obj = obj[key]
        obj[path[-1]] = value

    return edit


def _del(path: tuple[Any, ...]) -> Callable[[Doc], None]:
    def edit(doc: Doc) -> None:
        obj: Any = doc
        for key in path[:-1]:
            obj = obj[key]
        del obj[path[-1]]

    return edit


def _msg(i: int, *rest: Any) -> tuple[Any, ...]:
    return ("turns", 1, "messages", i, *rest)


def _agents(doc: Doc) -> None:
    doc["agents"]["planner"] = {"agent_id": "bot", "agent_name": "p", "created_at": "2025-01-01T00:00:00Z"}
    doc["agents"]["agent-x"] = {"agent_id": "agent-x", "agent_name": "x", "created_at": "2025-01-01T00:00:00"}


def _duplicate_call(doc: Doc) -> None:
    doc["turns"][1]["messages"][3]["parts"][1]["tool_call_id"] = "call_1"
    doc["turns"][1]["messages"][4]["parts"][0]["tool_call_id"] = "call_1"
    doc["turns"][1]["messages"][4]["parts"][0]["tool_name"] = "generate_report"


def _answered_twice(doc: Doc) -> None:
    again = dict(doc["turns"][1]["messages"][1]["parts"][0])
    doc["turns"][1]["messages"][4]["parts"].append(again)


CASES: list[tuple[str, Doc, Got]] = [
    (
        "version",
        edited(_set(("version",), "0.0.5")),
        [E("version", "$.version", "unknown version '0.0.5'; expected '0.0.3' or '0.0.4' (checked by v0.0.4 rules)")],
    ),
    (
        "thread id",
        edited(_set(("thread_id",), "x")),
        [E("thread-id-uuid", "$.thread_id", "thread_id 'x' is not a UUID")],
    ),
    (
        "registry",
        edited(_agents),
        [
            W(
                "agent-registry-key",
                "$.agents.planner.agent_id",
                "agent_id 'bot' differs from its registry key 'planner'",
            ),
            W("agent-id-uuid", "$.agents.planner.agent_id", "agent_id 'bot' is not a UUID"),
            W("agent-id-uuid", '$.agents["agent-x"].agent_id', "agent_id 'agent-x' is not a UUID"),
            W(
                "timestamp-timezone",
                '$.agents["agent-x"].created_at',
                "'2025-01-01T00:00:00' has no time zone (add Z or an offset)",
            ),
        ],
    ),
    (
        "link",
        edited(_set(("relationships", "links", 0, "thread_id"), "t3")),
        [E("v3.8-link-uuid", "$.relationships.links[0].thread_id", "linked thread_id 't3' is not a UUID")],
    ),
    (
        "timestamp",
        edited(_set(("created_at",), "2025-01-20 10:00:00Z")),
        [E("v3.1-timestamp", "$.created_at", f"'2025-01-20 10:00:00Z' is not an ISO 8601 date-time {TS_FORM}")],
    ),
    (
        "agent ref",
        edited(_set(("turns", 1, "agent_id"), "ghost")),
        [
            E(
                "v3.3-agent-ref",
                "$.turns[1].agent_id",
                f"agent 'ghost' is not in the agents registry (registered: {REGISTERED})",
            )
        ],
    ),
    (
        "agent ref of an event",
        edited(_set(_msg(2, "target_agents"), [A2, "ghost"])),
        [
            W(
                "v3.3-agent-ref-event",
                f"{MSG}[2].target_agents[1]",
                f"agent 'ghost' is not in the agents registry (registered: {REGISTERED})",
            )
        ],
    ),
    (
        "explicit null",
        edited(_set(("title",), None)),
        [W("explicit-null", "$.title", "`title` is null; omit the field instead")],
    ),
    (
        "turn overlap",
        edited(_set(("turns", 2, "submitted_at"), "2025-01-20T10:00:05Z")),
        [
            E(
                "v3.4-turn-overlap",
                "$.turns[2].submitted_at",
                "turn 2 starts before turn 1 ended (2025-01-20 10:00:05+00:00 < 2025-01-20 10:00:10+00:00)",
            )
        ],
    ),
    (
        "client metadata",
        edited(_set(("turns", 0, "client_metadata"), {"mode": 1})),
        [
            W(
                "v3.6-client-metadata-namespace",
                "$.turns[0].client_metadata.mode",
                "client_metadata key 'mode' has no namespace separator (one of : . / _ -)",
            )
        ],
    ),
    (
        "v0.0.3 interrupted",
        edited(_set(("turns", 1, "completion_status"), "interrupted"), base_v3),
        [
            E(
                "v3-complete-turns-only",
                "$.turns[1].completion_status",
                "v0.0.3 keeps only complete turns; an interrupted turn needs a v0.0.4 document",
            )
        ],
    ),
    (
        "v0.0.3 completed_at",
        edited(_del(("turns", 1, "completed_at")), base_v3),
        [E("required-field", "$.turns[1].completed_at", "a v0.0.3 agent turn requires completed_at")],
    ),
    (
        "v0.0.4 completion_status",
        edited(_del(("turns", 1, "completion_status"))),
        [
            E(
                "required-field",
                "$.turns[1].completion_status",
                "a v0.0.4 agent turn requires completion_status ('complete' or 'interrupted')",
            )
        ],
    ),
    (
        "completion_status value",
        edited(_set(("turns", 1, "completion_status"), "done")),
        [
            E(
                "v4-completion-status-value",
                "$.turns[1].completion_status",
                "completion_status 'done' is not 'complete' or 'interrupted'",
            )
        ],
    ),
    (
        "interrupted without interruption",
        edited(_del(("turns", 3, "interruption"))),
        [
            E(
                "v4-interruption-iff-interrupted",
                "$.turns[3].interruption",
                "an interrupted turn needs an `interruption` object (reason, interrupted_at)",
            )
        ],
    ),
    (
        "interruption of a complete turn",
        edited(
            _set(("turns", 1, "interruption"), {"reason": "user_cancelled", "interrupted_at": "2025-01-20T10:00:10Z"})
        ),
        [
            E(
                "v4-interruption-iff-interrupted",
                "$.turns[1].interruption",
                "`interruption` is only allowed when completion_status is 'interrupted'",
            )
        ],
    ),
    (
        "completed_at of an interrupted turn",
        edited(_set(("turns", 3, "completed_at"), "2025-01-20T10:00:30Z")),
        [
            E(
                "v4-completed-at-only-complete",
                "$.turns[3].completed_at",
                "an interrupted turn has no completed_at (use interruption.interrupted_at)",
            )
        ],
    ),
    (
        "message outside its turn",
        edited(_set(("turns", 4, "completed_at"), "2025-01-20T10:00:31.5Z")),
        [
            W(
                "v3.5-message-outside-turn",
                "$.turns[4].messages[0].timestamp",
                "message time 2025-01-20 10:00:32+00:00 lies outside its turn "
                "(2025-01-20 10:00:31+00:00 .. 2025-01-20 10:00:31.500000+00:00)",
            )
        ],
    ),
    (
        "turn ends before it started",
        edited(_set(("turns", 4, "started_at"), "2025-01-20T10:00:41Z")),
        [
            E(
                "v3.4-turn-interval",
                "$.turns[4].completed_at",
                "the turn ends (2025-01-20 10:00:40+00:00) before it started (2025-01-20 10:00:41+00:00)",
            ),
            W(
                "v3.5-message-outside-turn",
                "$.turns[4].messages[0].timestamp",
                "message time 2025-01-20 10:00:32+00:00 lies outside its turn "
                "(2025-01-20 10:00:41+00:00 .. 2025-01-20 10:00:40+00:00)",
            ),
        ],
    ),
    (
        "message order",
        edited(_set(_msg(1, "timestamp"), "2025-01-20T10:00:01.5Z")),
        [
            E(
                "v3.5-message-order",
                f"{MSG}[1].timestamp",
                "message 1 (2025-01-20 10:00:01.500000+00:00) is earlier than the message before it "
                "(2025-01-20 10:00:02+00:00)",
            )
        ],
    ),
    (
        "unreturned call",
        edited(_del(("turns", 3, "messages", 1))),
        [
            E(
                "v4-no-unreturned-tool-call-in-interrupted-turn",
                "$.turns[3].messages[0].parts[0]",
                "tool call 'call_3' has no return in this interrupted turn; an interrupted turn keeps only complete "
                "request/response cycles",
            )
        ],
    ),
    (
        "interrupted turn without a response",
        edited(_set(("turns", 3, "messages"), [])),
        [
            W(
                "v4-interrupted-turn-has-cycle",
                "$.turns[3].messages",
                "an interrupted turn is kept only if it holds at least one complete cycle (a response)",
            )
        ],
    ),
    (
        "finish reason",
        edited(_set(_msg(5, "finish_reason"), "done")),
        [
            E(
                "v3-finish-reason",
                f"{MSG}[5].finish_reason",
                "finish_reason 'done' is not one of ['content_filter', 'error', 'length', 'stop', 'tool_call']",
            )
        ],
    ),
    (
        "message without parts",
        edited(_set(_msg(5, "parts"), [])),
        [
            E(
                "v4-message-has-parts",
                f"{MSG}[5].parts",
                "a message is complete only with at least one complete part; drop empty messages",
            )
        ],
    ),
    (
        "v0.0.3 event name in v0.0.4",
        edited(_set(_msg(2, "event_type"), "thread.spawn")),
        [
            W(
                "event-name-version",
                f"{MSG}[2].event_type",
                "'thread.spawn' is a v0.0.3 normative name, only a custom event in v0.0.4, which renamed it to "
                "'data-tp-thread_spawn'",
            )
        ],
    ),
    (
        "unknown data-tp event",
        edited(_set(_msg(2, "event_type"), "data-tp-bogus")),
        [
            E(
                "normative-event-name",
                f"{MSG}[2].event_type",
                "'data-tp-bogus' is in the reserved data-tp-* namespace but is not a ThreadProtocol event (one of "
                "['data-tp-agent_handoff', 'data-tp-error', 'data-tp-thread_end', 'data-tp-thread_merge', "
                "'data-tp-thread_spawn']); use data-app-* or data-sys-*",
            )
        ],
    ),
    (
        "event outside the namespace",
        edited(_set(_msg(2, "event_type"), "spawned")),
        [
            W(
                "event-type-namespace",
                f"{MSG}[2].event_type",
                "event_type 'spawned' is neither normative nor in the data-* namespace (data-app-*, data-sys-*)",
            )
        ],
    ),
    (
        "v0.0.4 event name in v0.0.3",
        edited(_set(_msg(2, "event_type"), "data-tp-thread_spawn"), base_v3),
        [
            W(
                "event-name-version",
                f"{MSG}[2].event_type",
                "'data-tp-thread_spawn' is a v0.0.4 name; in a v0.0.3 document it is a custom data-* event, not the "
                "normative 'thread.spawn'",
            )
        ],
    ),
    (
        "v0.0.3 event outside the namespaces",
        edited(_set(_msg(2, "event_type"), "spawned"), base_v3),
        [
            W(
                "event-type-namespace",
                f"{MSG}[2].event_type",
                "event_type 'spawned' is neither normative nor in the data-* / meta:* namespaces",
            )
        ],
    ),
    (
        "thread id in an event",
        edited(_set(_msg(2, "event_data"), {"spawned_thread_id": "t2"})),
        [W("event-thread-id-uuid", f"{MSG}[2].event_data.spawned_thread_id", "thread id 't2' is not a UUID")],
    ),
    (
        "thread id in a v0.0.3 event",
        edited(_set(_msg(2, "event_data"), {"spawned_thread_id": "t2"}), base_v3),
        [W("event-thread-id-uuid", f"{MSG}[2].event_data.spawned_thread_id", "thread id 't2' is not a UUID")],
    ),
    (
        # a v0.0.4 name is a custom event in v0.0.3: its payload is not looked into
        "thread id in a v0.0.3 custom event",
        edited(
            lambda d: (
                _set(_msg(2, "event_type"), "data-tp-thread_spawn")(d),
                _set(_msg(2, "event_data"), {"spawned_thread_id": "t2"})(d),
            ),
            base_v3,
        ),
        [
            W(
                "event-name-version",
                f"{MSG}[2].event_type",
                "'data-tp-thread_spawn' is a v0.0.4 name; in a v0.0.3 document it is a custom data-* event, not the "
                "normative 'thread.spawn'",
            )
        ],
    ),
    (
        "event without event_data",
        edited(_del(_msg(2, "event_data"))),
        [E("required-field", f"{MSG}[2].event_data", "a system message requires event_data")],
    ),
    (
        "duplicate call id",
        edited(_duplicate_call),
        [
            W(
                "v3.2-tool-call-id-duplicate",
                f"{MSG}[3].parts[1].tool_call_id",
                f"tool_call_id 'call_1' was already used by {MSG}[0].parts[2]",
            )
        ],
    ),
    (
        "call without args",
        edited(_del(_msg(0, "parts", 2, "args"))),
        [E("required-field", f"{MSG}[0].parts[2].args", "a tool-call requires args")],
    ),
    (
        "tool-return status",
        edited(_set(_msg(1, "parts", 0, "status"), "ok")),
        [
            E(
                "v3-tool-return-status",
                f"{MSG}[1].parts[0].status",
                "status 'ok' is not one of ['error', 'success', 'validation_error']",
            )
        ],
    ),
    (
        "answer to no call",
        edited(_set(_msg(1, "parts", 0, "tool_call_id"), "nope")),
        [
            E(
                "v3.2-tool-call-id",
                f"{MSG}[1].parts[0].tool_call_id",
                "tool_call_id 'nope' matches no earlier tool-call in the thread",
            )
        ],
    ),
    (
        "answered twice",
        edited(_answered_twice),
        [
            W(
                "v3.2-tool-return-duplicate",
                f"{MSG}[4].parts[1].tool_call_id",
                f"tool call 'call_1' ({MSG}[0].parts[2]) was already answered",
            )
        ],
    ),
    (
        "tool name",
        edited(_set(_msg(1, "parts", 0, "tool_name"), "other")),
        [
            W(
                "v3.2-tool-name",
                f"{MSG}[1].parts[0].tool_name",
                f"tool_name 'other' differs from its call's 'get_weather' ({MSG}[0].parts[2])",
            )
        ],
    ),
    (
        "part kind",
        edited(_set(_msg(3, "parts", 0, "part_kind"), "planning-step")),
        [
            W(
                "part-kind",
                f"{MSG}[3].parts[0].part_kind",
                "part_kind 'planning-step' is not normative and not namespaced (custom:* or meta:*)",
            )
        ],
    ),
    (
        "user content kind",
        edited(lambda d: d["turns"][0]["parts"][0]["content"].append({"kind": "hologram-url", "url": "x"})),
        [
            W(
                "user-content-kind",
                "$.turns[0].parts[0].content[2].kind",
                "content kind 'hologram-url' is not one of "
                "['audio-url', 'binary', 'document-url', 'image-url', 'video-url']",
            )
        ],
    ),
    (
        "content identifier",
        edited(_del(("turns", 0, "parts", 0, "content", 1, "identifier"))),
        [
            W(
                "content-identifier",
                "$.turns[0].parts[0].content[1].identifier",
                "media content should carry an identifier (for tool references)",
            )
        ],
    ),
    (
        "content-ref scheme",
        edited(_set(_msg(4, "parts", 0, "content_ref", "uri"), "ipfs://x/y")),
        [
            W(
                "v3.7-content-ref-scheme",
                f"{MSG}[4].parts[0].content_ref.uri",
                "uri scheme 'ipfs' is not one the spec lists (azure, file, gs, http, https, s3); pass documented "
                "custom schemes as content_ref_schemes",
            )
        ],
    ),
]


@pytest.mark.parametrize(("doc", "want"), [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_each_rule_names_the_value_and_what_it_is_checked_against(doc: Doc, want: Got) -> None:
    assert report(doc) == want


def test_an_agent_reference_with_no_agent_registered_says_none() -> None:
    doc = base()
    doc["agents"] = {}
    doc["turns"] = doc["turns"][4:]
    doc["turns"][0]["messages"][0]["parts"] = [{"part_kind": "text", "content": "hi"}]
    assert report(doc) == [
        E("v3.3-agent-ref", "$.turns[0].agent_id", f"agent '{A1}' is not in the agents registry (registered: none)"),
        E(
            "v3.3-agent-ref",
            "$.turns[0].messages[0].agent_id",
            f"agent '{A1}' is not in the agents registry (registered: none)",
        ),
    ]


def test_reserved_kinds_in_extension_objects_are_named() -> None:
    thread = from_builtins(base(), m.Thread)
    agent = thread.turns[1]
    user = thread.turns[0]
    assert isinstance(agent, m.AgentTurn) and isinstance(user, m.UserTurn)
    last = agent.messages[5]
    assert isinstance(last, m.ThreadMessage)
    last = msgspec.structs.replace(last, parts=[m.ExtensionPart(part_kind_="text", data={"content": 1})])
    agent = msgspec.structs.replace(agent, messages=[*agent.messages[:5], last])
    prompt = m.UserPromptPart(content=[m.ExtensionContent(kind_="image-url", data={"url": 3})])
    user = msgspec.structs.replace(user, parts=[prompt])
    thread = msgspec.structs.replace(thread, turns=[user, agent, *thread.turns[2:]])
    assert report(thread) == [
        E(
            "part-kind-reserved",
            "$.turns[0].parts[0].content[0].kind",
            "an extension content object may not use the normative kind 'image-url'",
        ),
        E(
            "part-kind-reserved",
            f"{MSG}[5].parts[0].part_kind",
            "an extension part may not use the normative part_kind 'text'",
        ),
    ]


@pytest.mark.parametrize(
    ("uri", "problem"),
    [
        ("reports/r.pdf", "has no scheme (expected `scheme:...`)"),
        ("s3:", "has nothing after its scheme"),
        ("https://exa mple.com/x", "holds characters a URI cannot (spaces, controls, bad %-escapes, ...)"),
        ("https:/example.com/x", "a https URI needs `https://host-or-bucket/...`"),
        ("s3:///key", "a s3 URI needs a host or bucket after `s3://`"),
    ],
)
def test_a_content_ref_uri_finding_says_what_is_wrong_with_it(uri: str, problem: str) -> None:
    doc = edited(_set(_msg(4, "parts", 0, "content_ref", "uri"), uri))
    assert report(doc) == [E("v3.7-content-ref-uri", f"{MSG}[4].parts[0].content_ref.uri", f"uri {uri!r} {problem}")]
