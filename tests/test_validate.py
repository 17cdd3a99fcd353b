"""tplog.protocol.validate: one test per rule, each breaking exactly that rule in an otherwise valid document.

Every test asserts the complete list of findings (severity, rule id, JSON path),
so a rule that also fires elsewhere, or a rule that goes silent, fails the test.
"""

from __future__ import annotations

import copy
import json
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import msgspec
import pytest

from tplog.errors import InvalidInputError, ValidationError
from tplog.protocol import findings as _findings
from tplog.protocol import model as m
from tplog.protocol import validate as _validate
from tplog.protocol.json import from_builtins, from_json
from tplog.protocol.validate import RULES, Finding, ValidationReport, parse_timestamp, validate, validate_json

T1 = "550e8400-e29b-41d4-a716-446655440000"  # the thread
T2 = "550e8400-e29b-41d4-a716-446655440001"  # a spawned thread
T3 = "550e8400-e29b-41d4-a716-446655440002"  # the thread this one was spawned from
A1 = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
A2 = "16fd2706-8baf-433b-82eb-8c7fada847da"


def base() -> dict[str, Any]:
    """A valid v0.0.4 thread using every part of the protocol the rules look at."""
    return {
        "version": "0.0.4",
        "thread_id": T1,
        "created_at": "2025-01-20T10:00:00Z",
        "updated_at": "2025-01-20T10:00:40Z",
        "title": "weather",
        "agents": {
            A1: {"agent_id": A1, "agent_name": "planner", "created_at": "2025-01-01T00:00:00Z"},
            A2: {"agent_id": A2, "agent_name": "researcher", "created_at": "2025-01-01T00:00:00+01:00"},
        },
        "relationships": {"links": [{"thread_id": T3, "relation": "spawned_from"}]},
        "turns": [
            {  # 0
                "turn_type": "user",
                "submitted_at": "2025-01-20T10:00:00Z",
                "parts": [
                    {
                        "part_kind": "user-prompt",
                        "content": [
                            "What's the weather where this photo was taken?",
                            {"kind": "image-url", "url": "https://example.com/p.png", "identifier": "img_1"},
                        ],
                    }
                ],
                "client_metadata": {"ui:mode": "creative", "session_id": "abc", "app/feature": True},
            },
            {  # 1
                "turn_type": "agent",
                "agent_id": A1,
                "started_at": "2025-01-20T10:00:01Z",
                "completed_at": "2025-01-20T10:00:10Z",
                "completion_status": "complete",
                "messages": [
                    {  # 0
                        "message_type": "response",
                        "timestamp": "2025-01-20T10:00:02Z",
                        "agent_id": A1,
                        "model_name": "claude",
                        "finish_reason": "tool_call",
                        "parts": [
                            {"part_kind": "thinking", "content": "Paris?", "provider_name": "anthropic"},
                            {"part_kind": "text", "content": "Let me check."},
                            {
                                "part_kind": "tool-call",
                                "tool_name": "get_weather",
                                "tool_call_id": "call_1",
                                "args": {"city": "Paris"},
                            },
                        ],
                    },
                    {  # 1
                        "message_type": "request",
                        "timestamp": "2025-01-20T10:00:03Z",
                        "agent_id": A1,
                        "parts": [
                            {
                                "part_kind": "tool-return",
                                "tool_name": "get_weather",
                                "tool_call_id": "call_1",
                                "status": "success",
                                "content": {"temp": "72F"},
                            }
                        ],
                    },
                    {  # 2
                        "message_type": "system",
                        "timestamp": "2025-01-20T10:00:04Z",
                        "event_type": "data-tp-thread_spawn",
                        "event_data": {"spawned_thread_id": T2},
                        "source_agent": A1,
                        "target_agents": [A2],
                    },
                    {  # 3
                        "message_type": "response",
                        "timestamp": "2025-01-20T10:00:05Z",
                        "agent_id": A1,
                        "finish_reason": "tool_call",
                        "parts": [
                            {"part_kind": "custom:planning-step", "step_id": "plan_42"},
                            {
                                "part_kind": "tool-call",
                                "tool_name": "generate_report",
                                "tool_call_id": "call_2",
                                "args": "{}",
                            },
                        ],
                    },
                    {  # 4
                        "message_type": "request",
                        "timestamp": "2025-01-20T10:00:07Z",
                        "agent_id": A1,
                        "parts": [
                            {
                                "part_kind": "tool-return",
                                "tool_name": "generate_report",
                                "tool_call_id": "call_2",
                                "status": "success",
                                "content_ref": {"uri": "s3://reports/2025/r.pdf", "media_type": "application/pdf"},
                            }
                        ],
                    },
                    {  # 5
                        "message_type": "response",
                        "timestamp": "2025-01-20T10:00:09Z",
                        "agent_id": A1,
                        "finish_reason": "stop",
                        "parts": [{"part_kind": "text", "content": "It is 72F."}],
                    },
                ],
            },
            {  # 2
                "turn_type": "user",
                "submitted_at": "2025-01-20T10:00:20Z",
                "parts": [{"part_kind": "user-prompt", "content": "And Berlin?"}],
            },
            {  # 3
                "turn_type": "agent",
                "agent_id": A2,
                "started_at": "2025-01-20T10:00:21Z",
                "completion_status": "interrupted",
                "interruption": {"reason": "user_cancelled", "interrupted_at": "2025-01-20T10:00:30Z"},
                "messages": [
                    {  # 0
                        "message_type": "response",
                        "timestamp": "2025-01-20T10:00:22Z",
                        "agent_id": A2,
                        "parts": [
                            {
                                "part_kind": "tool-call",
                                "tool_name": "get_weather",
                                "tool_call_id": "call_3",
                                "args": {"city": "Berlin"},
                            }
                        ],
                    },
                    {  # 1
                        "message_type": "request",
                        "timestamp": "2025-01-20T10:00:25Z",
                        "agent_id": A2,
                        "parts": [
                            {
                                "part_kind": "tool-return",
                                "tool_name": "get_weather",
                                "tool_call_id": "call_3",
                                "status": "error",
                                "content": "service down",
                            }
                        ],
                    },
                ],
            },
            {  # 4: a deferred tool (approval needed): a call without a return in a complete turn
                "turn_type": "agent",
                "agent_id": A1,
                "started_at": "2025-01-20T10:00:31Z",
                "completed_at": "2025-01-20T10:00:40Z",
                "completion_status": "complete",
                "messages": [
                    {
                        "message_type": "response",
                        "timestamp": "2025-01-20T10:00:32Z",
                        "agent_id": A1,
                        "finish_reason": "tool_call",
                        "parts": [
                            {
                                "part_kind": "tool-call",
                                "tool_name": "delete_file",
                                "tool_call_id": "call_4",
                                "args": {"path": "/tmp/x"},
                            }
                        ],
                    }
                ],
            },
        ],
    }


def base_v3() -> dict[str, Any]:
    """The same conversation as a valid v0.0.3 thread: no interrupted turn, v0.0.3 event names."""
    doc = base()
    doc["version"] = "0.0.3"
    del doc["turns"][3]
    for turn in doc["turns"]:
        turn.pop("completion_status", None)
    doc["turns"][1]["messages"][2]["event_type"] = "thread.spawn"
    return doc


Found = list[tuple[str, str, str]]


def findings(doc: dict[str, Any] | m.Thread, **kwargs: Any) -> Found:
    """(severity, rule, path) of every finding, errors first, each in document order."""
    thread = doc if isinstance(doc, m.Thread) else from_builtins(doc, m.Thread)
    report = validate(thread, **kwargs)
    out = [("error", f.rule, f.path) for f in report.errors] + [("warning", f.rule, f.path) for f in report.warnings]
    for severity, rule, _ in out:
        assert RULES[rule].severity == severity, rule
    assert report.ok == (not report.errors)
    return out


def E(rule: str, path: str) -> tuple[str, str, str]:
    return ("error", rule, path)


def W(rule: str, path: str) -> tuple[str, str, str]:
    return ("warning", rule, path)


TURN1 = "$.turns[1]"
MSG = "$.turns[1].messages"


# --------------------------------------------------------------------------- valid documents


def test_valid_v004_document_has_no_findings() -> None:
    assert findings(base()) == []


def test_valid_v003_document_has_no_findings() -> None:
    assert findings(base_v3()) == []


def test_empty_thread_is_valid() -> None:
    doc = base()
    doc["turns"] = []
    doc["agents"] = {}
    del doc["relationships"]
    assert findings(doc) == []


def test_validate_json_of_a_valid_document() -> None:
    report = validate_json(json.dumps(base()).encode())
    assert report == ValidationReport()
    assert report.ok


# --------------------------------------------------------------------------- thread and registry


def test_version() -> None:
    doc = base()
    doc["version"] = "0.0.5"
    assert findings(doc) == [E("version", "$.version")]


def test_unknown_version_is_checked_by_v004_rules() -> None:
    doc = base()
    doc["version"] = "1.0"
    doc["turns"][1]["messages"][2]["event_type"] = "data-tp-nonsense"
    assert findings(doc) == [E("version", "$.version"), E("normative-event-name", f"{MSG}[2].event_type")]


def test_thread_id_uuid() -> None:
    doc = base()
    doc["thread_id"] = "thread-456"
    assert findings(doc) == [E("thread-id-uuid", "$.thread_id")]


@pytest.mark.parametrize("value", [T1.upper(), "00000000-0000-0000-0000-000000000000"])
def test_thread_id_uuid_accepts_any_case_and_version(value: str) -> None:
    doc = base()
    doc["thread_id"] = value
    assert findings(doc) == []


@pytest.mark.parametrize("value", [T1.replace("-", ""), "{" + T1 + "}", "urn:uuid:" + T1, T1 + " ", T1[:-1] + "g"])
def test_thread_id_uuid_rejects_other_forms(value: str) -> None:
    doc = base()
    doc["thread_id"] = value
    assert findings(doc) == [E("thread-id-uuid", "$.thread_id")]


def test_agent_registry_key() -> None:
    doc = base()
    doc["agents"][A2]["agent_id"] = A1
    assert findings(doc) == [W("agent-registry-key", f'$.agents["{A2}"].agent_id')]


def test_agent_id_uuid() -> None:
    doc = json.loads(json.dumps(base()).replace(A2, "agent_002"))
    assert findings(doc) == [W("agent-id-uuid", "$.agents.agent_002.agent_id")]


def test_link_uuid() -> None:
    doc = base()
    doc["relationships"]["links"].append({"thread_id": "thread-123", "relation": "referenced"})
    assert findings(doc) == [E("v3.8-link-uuid", "$.relationships.links[1].thread_id")]


# --------------------------------------------------------------------------- timestamps


@pytest.mark.parametrize(
    "value",
    [
        "2025-01-20 10:00:02Z",  # space instead of T
        "2025-01-20",  # date only
        "10:00:02Z",  # time only
        "2025-01-20T10:00Z",  # reduced precision
        "20250120T100002Z",  # basic format
        "2025-13-01T10:00:02Z",  # month 13
        "2025-02-30T10:00:02Z",  # no such day
        "2025-01-20T24:00:00Z",  # hour 24
        "2025-01-20T10:60:00Z",  # minute 60
        "2025-01-20T10:00:02+0100",  # offset without colon
        "2025-01-20T10:00:02+24:00",  # offset out of range
        "2025-01-20T10:00:02.Z",  # empty fraction
        "2025-01-20T10:00:02,5Z",  # comma fraction
        "2025-01-20T10:00:02ZZ",
        " 2025-01-20T10:00:02Z",
        "2025-01-20T10:00:02Z\n",
        "\uff12\uff10\uff12\uff15-01-20T10:00:02Z",  # non-ASCII (fullwidth) digits
        "yesterday",
        "",
    ],
)
def test_timestamp(value: str) -> None:
    doc = base()
    doc["turns"][1]["messages"][0]["timestamp"] = value
    assert findings(doc) == [E("v3.1-timestamp", f"{MSG}[0].timestamp")]


@pytest.mark.parametrize(
    "value",
    [
        "2025-01-20T10:00:02Z",
        "2025-01-20t10:00:02z",
        "2025-01-20T10:00:02.5Z",
        "2025-01-20T10:00:02.123456789Z",
        "2025-01-20T11:00:02+01:00",
        "2025-01-20T05:30:02-04:30",
        "2025-01-20T10:00:02-00:00",
    ],
)
def test_timestamp_accepted_forms(value: str) -> None:
    doc = base()
    doc["turns"][1]["messages"][0]["timestamp"] = value
    assert findings(doc) == []


def test_every_timestamp_field_is_checked() -> None:
    doc = base()
    doc["created_at"] = "x"
    doc["updated_at"] = "x"
    doc["agents"][A1]["created_at"] = "x"
    doc["turns"][0]["submitted_at"] = "x"
    doc["turns"][1]["started_at"] = "x"
    doc["turns"][1]["completed_at"] = "x"
    doc["turns"][3]["interruption"]["interrupted_at"] = "x"
    doc["turns"][3]["messages"][1]["timestamp"] = "x"
    assert findings(doc) == [
        E("v3.1-timestamp", "$.created_at"),
        E("v3.1-timestamp", "$.updated_at"),
        E("v3.1-timestamp", f'$.agents["{A1}"].created_at'),
        E("v3.1-timestamp", "$.turns[0].submitted_at"),
        E("v3.1-timestamp", "$.turns[1].started_at"),
        E("v3.1-timestamp", "$.turns[1].completed_at"),
        E("v3.1-timestamp", "$.turns[3].interruption.interrupted_at"),
        E("v3.1-timestamp", "$.turns[3].messages[1].timestamp"),
    ]


def test_timestamp_timezone() -> None:
    doc = base()
    # 09:00 local time is not compared with its zoned neighbours: no ordering error is guessed.
    doc["turns"][1]["messages"][1]["timestamp"] = "2025-01-20T09:00:00.123456"
    assert findings(doc) == [W("timestamp-timezone", f"{MSG}[1].timestamp")]


def test_zoneless_timestamps_are_ordered_among_themselves() -> None:
    doc = base()
    msgs = doc["turns"][1]["messages"]
    msgs[3]["timestamp"] = "2025-01-20T10:00:05"
    msgs[4]["timestamp"] = "2025-01-20T10:00:04"
    assert findings(doc) == [
        E("v3.5-message-order", f"{MSG}[4].timestamp"),
        W("timestamp-timezone", f"{MSG}[3].timestamp"),
        W("timestamp-timezone", f"{MSG}[4].timestamp"),
    ]


def test_parse_timestamp() -> None:
    assert parse_timestamp("2025-01-20T10:00:00Z") == datetime(2025, 1, 20, 10, tzinfo=UTC)
    assert parse_timestamp("2025-01-20T11:00:00+01:00") == datetime(2025, 1, 20, 10, tzinfo=UTC)
    assert parse_timestamp("2025-01-20T10:00:00.1234567Z") == datetime(2025, 1, 20, 10, 0, 0, 123456, tzinfo=UTC)
    assert parse_timestamp("2025-01-20T10:00:00-00:30") == datetime(
        2025, 1, 20, 10, tzinfo=timezone(-timedelta(minutes=30))
    )
    assert parse_timestamp("2016-12-31T23:59:60Z") == datetime(2016, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    naive = parse_timestamp("2025-01-20T10:00:00")
    assert naive == datetime(2025, 1, 20, 10) and naive.tzinfo is None
    assert parse_timestamp("2025-01-20T10:00:00+01") is None


def test_timestamps_compare_as_instants_not_strings() -> None:
    doc = base()
    # "10:00:07+01:00" is 09:00:07Z: as a string it sorts after 10:00:05Z, as a time it is earlier.
    doc["turns"][1]["messages"][4]["timestamp"] = "2025-01-20T10:00:07+01:00"
    assert findings(doc) == [
        E("v3.5-message-order", f"{MSG}[4].timestamp"),
        W("v3.5-message-outside-turn", f"{MSG}[4].timestamp"),
    ]
    doc = base()
    # "11:00:06+01:00" sorts after "10:00:07Z" as a string, but is 10:00:06Z: in order.
    doc["turns"][1]["messages"][4]["timestamp"] = "2025-01-20T11:00:06+01:00"
    assert findings(doc) == []


# --------------------------------------------------------------------------- required fields and nulls


def test_required_field_completed_at_in_v003() -> None:
    doc = base_v3()
    del doc["turns"][1]["completed_at"]
    assert findings(doc) == [E("required-field", f"{TURN1}.completed_at")]


def test_completed_at_is_optional_in_a_complete_v004_turn() -> None:
    doc = base()
    del doc["turns"][1]["completed_at"]
    assert findings(doc) == []


def test_required_field_completion_status_in_v004() -> None:
    doc = base()
    del doc["turns"][1]["completion_status"]
    assert findings(doc) == [E("required-field", f"{TURN1}.completion_status")]


def test_required_field_completion_status_null_in_v004() -> None:
    doc = base()
    doc["turns"][1]["completion_status"] = None
    assert findings(doc) == [
        E("required-field", f"{TURN1}.completion_status"),
        W("explicit-null", f"{TURN1}.completion_status"),
    ]


def test_required_field_tool_call_args() -> None:
    doc = base()
    del doc["turns"][1]["messages"][0]["parts"][2]["args"]
    assert findings(doc) == [E("required-field", f"{MSG}[0].parts[2].args")]


def test_tool_call_args_may_be_null() -> None:
    doc = base()
    doc["turns"][1]["messages"][0]["parts"][2]["args"] = None
    assert findings(doc) == []


def test_required_field_event_data() -> None:
    doc = base()
    del doc["turns"][1]["messages"][2]["event_data"]
    assert findings(doc) == [E("required-field", f"{MSG}[2].event_data")]


def test_explicit_null() -> None:
    doc = base()
    doc["title"] = None
    doc["turns"][1]["completed_at"] = None
    doc["turns"][1]["messages"][0]["model_name"] = None
    doc["turns"][1]["messages"][4]["parts"][0]["content_ref"]["size_bytes"] = None
    doc["turns"][1]["messages"][1]["parts"][0]["metadata"] = None  # `any`: null is a value
    doc["agents"][A1]["model_name"] = None
    assert findings(doc) == [
        W("explicit-null", "$.title"),
        W("explicit-null", f'$.agents["{A1}"].model_name'),
        W("explicit-null", f"{TURN1}.completed_at"),
        W("explicit-null", f"{MSG}[0].model_name"),
        W("explicit-null", f"{MSG}[4].parts[0].content_ref.size_bytes"),
    ]


# --------------------------------------------------------------------------- tool calls


def test_tool_call_id() -> None:
    doc = base()
    doc["turns"][1]["messages"][1]["parts"][0]["tool_call_id"] = "call_9"
    assert findings(doc) == [E("v3.2-tool-call-id", f"{MSG}[1].parts[0].tool_call_id")]


def test_tool_call_id_refers_to_an_earlier_call() -> None:
    doc = base()
    msgs = doc["turns"][1]["messages"]
    # the return of call_2 moved before its call
    msgs[1]["parts"].append(msgs[4]["parts"].pop())
    msgs[4]["parts"].append({"part_kind": "text", "content": "…"})
    assert findings(doc) == [E("v3.2-tool-call-id", f"{MSG}[1].parts[1].tool_call_id")]


def test_tool_call_id_of_a_retry_prompt() -> None:
    doc = base()
    doc["turns"][1]["messages"][1]["parts"].append(
        {"part_kind": "retry-prompt", "content": "bad args", "tool_name": "get_weather", "tool_call_id": "nope"}
    )
    assert findings(doc) == [E("v3.2-tool-call-id", f"{MSG}[1].parts[1].tool_call_id")]


def test_retry_prompt_without_tool_call_id_is_fine() -> None:
    doc = base()
    doc["turns"][1]["messages"][1]["parts"].append({"part_kind": "retry-prompt", "content": [{"msg": "no"}]})
    assert findings(doc) == []


def test_deferred_tool_answered_in_a_later_turn() -> None:
    doc = base()
    doc["turns"].append(
        {
            "turn_type": "agent",
            "agent_id": A1,
            "started_at": "2025-01-20T10:01:00Z",
            "completed_at": "2025-01-20T10:01:05Z",
            "completion_status": "complete",
            "messages": [
                {
                    "message_type": "request",
                    "timestamp": "2025-01-20T10:01:00Z",
                    "agent_id": A1,
                    "parts": [
                        {
                            "part_kind": "tool-return",
                            "tool_name": "delete_file",
                            "tool_call_id": "call_4",
                            "status": "error",
                            "content": "Deleting files is not allowed",
                        }
                    ],
                }
            ],
        }
    )
    assert findings(doc) == []


def test_tool_call_id_duplicate() -> None:
    doc = base()
    doc["turns"][1]["messages"][3]["parts"][1]["tool_call_id"] = "call_1"
    doc["turns"][1]["messages"][4]["parts"][0]["tool_call_id"] = "call_1"
    assert findings(doc) == [W("v3.2-tool-call-id-duplicate", f"{MSG}[3].parts[1].tool_call_id")]


def test_tool_return_duplicate() -> None:
    doc = base()
    doc["turns"][1]["messages"][4]["parts"].append(copy.deepcopy(doc["turns"][1]["messages"][1]["parts"][0]))
    assert findings(doc) == [W("v3.2-tool-return-duplicate", f"{MSG}[4].parts[1].tool_call_id")]


def test_tool_name() -> None:
    doc = base()
    doc["turns"][1]["messages"][1]["parts"][0]["tool_name"] = "get_forecast"
    assert findings(doc) == [W("v3.2-tool-name", f"{MSG}[1].parts[0].tool_name")]


def test_no_unreturned_tool_call_in_interrupted_turn() -> None:
    doc = base()
    del doc["turns"][3]["messages"][1]
    assert findings(doc) == [
        E("v4-no-unreturned-tool-call-in-interrupted-turn", "$.turns[3].messages[0].parts[0]"),
    ]


def test_unreturned_tool_call_among_answered_ones_in_interrupted_turn() -> None:
    doc = base()
    msgs = doc["turns"][3]["messages"]
    msgs[0]["parts"].append({"part_kind": "tool-call", "tool_name": "t", "tool_call_id": "call_5", "args": {}})
    msgs[0]["parts"].append({"part_kind": "tool-call", "tool_name": "t", "tool_call_id": "call_6", "args": {}})
    # a retry prompt answers a call too (the call ran and failed validation)
    msgs[1]["parts"].append(
        {"part_kind": "retry-prompt", "content": "again", "tool_name": "t", "tool_call_id": "call_6"}
    )
    assert findings(doc) == [
        E("v4-no-unreturned-tool-call-in-interrupted-turn", "$.turns[3].messages[0].parts[1]"),
    ]


# --------------------------------------------------------------------------- agents


def test_agent_ref() -> None:
    doc = base()
    doc["turns"][1]["agent_id"] = "agent_001"
    doc["turns"][3]["messages"][1]["agent_id"] = "agent_001"
    assert findings(doc) == [
        E("v3.3-agent-ref", f"{TURN1}.agent_id"),
        E("v3.3-agent-ref", "$.turns[3].messages[1].agent_id"),
    ]


def test_agent_ref_event() -> None:
    doc = base()
    doc["turns"][1]["messages"][2]["source_agent"] = "router"
    doc["turns"][1]["messages"][2]["target_agents"] = [A2, "nobody"]
    assert findings(doc) == [
        W("v3.3-agent-ref-event", f"{MSG}[2].source_agent"),
        W("v3.3-agent-ref-event", f"{MSG}[2].target_agents[1]"),
    ]


# --------------------------------------------------------------------------- turn and message order


def test_turn_overlap_agent_starts_before_user_turn() -> None:
    doc = base()
    doc["turns"][1]["started_at"] = "2025-01-19T23:59:59Z"
    assert findings(doc) == [
        E("v3.4-turn-overlap", f"{TURN1}.started_at"),
    ]


def test_turn_overlap_user_turn_before_agent_completed() -> None:
    doc = base()
    doc["turns"][1]["completed_at"] = "2025-01-20T10:00:20.000001Z"
    assert findings(doc) == [E("v3.4-turn-overlap", "$.turns[2].submitted_at")]


def test_turn_overlap_uses_interrupted_at_for_interrupted_turns() -> None:
    doc = base()
    doc["turns"][3]["interruption"]["interrupted_at"] = "2025-01-20T10:00:31.5Z"
    assert findings(doc) == [E("v3.4-turn-overlap", "$.turns[4].started_at")]


def test_turns_may_touch() -> None:
    doc = base()
    doc["turns"][1]["completed_at"] = "2025-01-20T10:00:20Z"
    doc["turns"][3]["started_at"] = "2025-01-20T10:00:20Z"
    assert findings(doc) == []


def test_turn_overlap_without_completed_at_counts_from_start() -> None:
    doc = base()
    del doc["turns"][1]["completed_at"]
    doc["turns"][2]["submitted_at"] = "2025-01-20T10:00:00.5Z"
    assert findings(doc) == [
        E("v3.4-turn-overlap", "$.turns[2].submitted_at"),
    ]


def test_turn_interval() -> None:
    doc = base()
    doc["turns"][4]["completed_at"] = "2025-01-20T10:00:30Z"
    assert findings(doc) == [
        E("v3.4-turn-interval", "$.turns[4].completed_at"),
        W("v3.5-message-outside-turn", "$.turns[4].messages[0].timestamp"),
    ]


def test_turn_interval_of_an_interrupted_turn() -> None:
    doc = base()
    doc["turns"][3]["interruption"]["interrupted_at"] = "2025-01-20T10:00:20.5Z"
    assert findings(doc) == [
        E("v3.4-turn-interval", "$.turns[3].interruption.interrupted_at"),
        W("v3.5-message-outside-turn", "$.turns[3].messages[0].timestamp"),
        W("v3.5-message-outside-turn", "$.turns[3].messages[1].timestamp"),
    ]


def test_message_order() -> None:
    doc = base()
    doc["turns"][1]["messages"][2]["timestamp"] = "2025-01-20T10:00:02.5Z"
    assert findings(doc) == [E("v3.5-message-order", f"{MSG}[2].timestamp")]


def test_message_order_allows_equal_times() -> None:
    doc = base()
    for msg in doc["turns"][1]["messages"]:
        msg["timestamp"] = "2025-01-20T10:00:05Z"
    assert findings(doc) == []


def test_message_outside_turn() -> None:
    doc = base()
    doc["turns"][1]["messages"][5]["timestamp"] = "2025-01-20T10:00:11Z"
    assert findings(doc) == [W("v3.5-message-outside-turn", f"{MSG}[5].timestamp")]


# --------------------------------------------------------------------------- client metadata, content refs


def test_client_metadata_namespace() -> None:
    doc = base()
    doc["turns"][0]["client_metadata"].update({"mode": 1, "my key": 2, "a.b": 3, "c-d": 4, "e/f": 5})
    assert findings(doc) == [
        W("v3.6-client-metadata-namespace", "$.turns[0].client_metadata.mode"),
        W("v3.6-client-metadata-namespace", '$.turns[0].client_metadata["my key"]'),
    ]


@pytest.mark.parametrize(
    "uri",
    [
        "reports/r.pdf",  # no scheme
        "1s3://bucket/key",  # scheme must start with a letter
        "s3:",  # nothing after the scheme
        "s3:///key",  # no bucket
        "https:/example.com/x",  # no authority
        "https://exa mple.com/x",  # space
        "https://example.com/%zz",  # bad escape
        "https://example.com/\u00e9",  # non-ASCII (an IRI, not a URI)
    ],
)
def test_content_ref_uri(uri: str) -> None:
    doc = base()
    doc["turns"][1]["messages"][4]["parts"][0]["content_ref"]["uri"] = uri
    assert findings(doc) == [E("v3.7-content-ref-uri", f"{MSG}[4].parts[0].content_ref.uri")]


@pytest.mark.parametrize(
    "uri",
    [
        "https://example.com/a%20b?x=1#f",
        "http://example.com/x",
        "gs://bucket/key",
        "azure://account/container/blob",
        "file:///tmp/report.pdf",
        "S3://bucket/key",
    ],
)
def test_content_ref_uri_accepted(uri: str) -> None:
    doc = base()
    doc["turns"][1]["messages"][4]["parts"][0]["content_ref"]["uri"] = uri
    assert findings(doc) == []


def test_content_ref_scheme() -> None:
    doc = base()
    doc["turns"][1]["messages"][4]["parts"][0]["content_ref"]["uri"] = "ipfs://bafybeigdyrzt/report.pdf"
    assert findings(doc) == [W("v3.7-content-ref-scheme", f"{MSG}[4].parts[0].content_ref.uri")]
    assert findings(doc, content_ref_schemes=["IPFS"]) == []


# --------------------------------------------------------------------------- completion (v0.0.3 / v0.0.4)


def test_complete_turns_only() -> None:
    doc = base()
    doc["version"] = "0.0.3"
    for turn in doc["turns"]:
        if turn["turn_type"] == "agent" and turn["completion_status"] == "complete":
            del turn["completion_status"]
    doc["turns"][1]["messages"][2]["event_type"] = "thread.spawn"
    assert findings(doc) == [
        E("v3-complete-turns-only", "$.turns[3].completion_status"),
        E("required-field", "$.turns[3].completed_at"),
    ]


def test_complete_turns_only_interruption_object() -> None:
    doc = base_v3()
    doc["turns"][1]["interruption"] = {"reason": "timeout", "interrupted_at": "2025-01-20T10:00:10Z"}
    assert findings(doc) == [E("v3-complete-turns-only", f"{TURN1}.interruption")]


def test_completion_status_value() -> None:
    doc = base()
    doc["turns"][1]["completion_status"] = "streaming"
    assert findings(doc) == [E("v4-completion-status-value", f"{TURN1}.completion_status")]


def test_interruption_iff_interrupted_missing_interruption() -> None:
    doc = base()
    del doc["turns"][3]["interruption"]
    assert findings(doc) == [E("v4-interruption-iff-interrupted", "$.turns[3].interruption")]


def test_interruption_iff_interrupted_interruption_on_complete_turn() -> None:
    doc = base()
    doc["turns"][1]["interruption"] = {"reason": "timeout", "interrupted_at": "2025-01-20T10:00:10Z"}
    assert findings(doc) == [E("v4-interruption-iff-interrupted", f"{TURN1}.interruption")]


def test_completed_at_only_complete() -> None:
    doc = base()
    doc["turns"][3]["completed_at"] = "2025-01-20T10:00:30Z"
    assert findings(doc) == [E("v4-completed-at-only-complete", "$.turns[3].completed_at")]


def test_interrupted_turn_has_cycle() -> None:
    doc = base()
    doc["turns"][3]["messages"] = []
    assert findings(doc) == [W("v4-interrupted-turn-has-cycle", "$.turns[3].messages")]


def test_message_has_parts() -> None:
    doc = base()
    doc["turns"][1]["messages"][5]["parts"] = []
    assert findings(doc) == [E("v4-message-has-parts", f"{MSG}[5].parts")]
    doc3 = base_v3()
    doc3["turns"][1]["messages"][5]["parts"] = []
    assert findings(doc3) == []


# --------------------------------------------------------------------------- events


def test_normative_event_name() -> None:
    doc = base()
    doc["turns"][1]["messages"][2]["event_type"] = "data-tp-thread_fork"
    assert findings(doc) == [E("normative-event-name", f"{MSG}[2].event_type")]


@pytest.mark.parametrize("event_type", sorted(_validate.V4_EVENT_TYPES))
def test_every_v004_normative_event_name_is_valid(event_type: str) -> None:
    doc = base()
    doc["turns"][1]["messages"][2]["event_type"] = event_type
    assert findings(doc) == []


@pytest.mark.parametrize("event_type", sorted(_validate.V3_EVENT_TYPES))
def test_event_name_version_v003_name_in_v004(event_type: str) -> None:
    doc = base()
    doc["turns"][1]["messages"][2]["event_type"] = event_type
    assert findings(doc) == [W("event-name-version", f"{MSG}[2].event_type")]


def test_event_name_version_v004_name_in_v003() -> None:
    doc = base_v3()
    doc["turns"][1]["messages"][2]["event_type"] = "data-tp-agent_handoff"
    assert findings(doc) == [W("event-name-version", f"{MSG}[2].event_type")]


@pytest.mark.parametrize(
    ("version", "event_type", "warns"),
    [
        ("0.0.4", "data-app-user_feedback", False),
        ("0.0.4", "data-sys-cache_hit", False),
        ("0.0.4", "data-routing-decision", False),  # unrecognized data-* is tier 3
        ("0.0.4", "meta:performance", True),  # v0.0.4 moved metadata to data-sys-*
        ("0.0.4", "tool.grant", True),
        ("0.0.3", "meta:performance", False),
        ("0.0.3", "data-embeddings-generated", False),
        ("0.0.3", "tool.grant", True),
        ("0.0.3", "stream.interrupted", True),
    ],
)
def test_event_type_namespace(version: str, event_type: str, warns: bool) -> None:
    doc = base() if version == "0.0.4" else base_v3()
    doc["turns"][1]["messages"][2]["event_type"] = event_type
    expected = [W("event-type-namespace", f"{MSG}[2].event_type")] if warns else []
    assert findings(doc) == expected


def test_event_thread_id_uuid() -> None:
    doc = base()
    doc["turns"][1]["messages"][2]["event_data"] = {"spawned_thread_id": "thread-456", "note": "thread-456"}
    assert findings(doc) == [W("event-thread-id-uuid", f"{MSG}[2].event_data.spawned_thread_id")]
    # only normative thread events are looked into
    doc["turns"][1]["messages"][2]["event_type"] = "data-app-spawn_config"
    assert findings(doc) == []


# --------------------------------------------------------------------------- parts, content, enum values


def test_part_kind() -> None:
    doc = base()
    doc["turns"][1]["messages"][3]["parts"][0]["part_kind"] = "planning-step"
    doc["turns"][1]["messages"][5]["parts"].append({"part_kind": "meta:trace", "id": 1})
    assert findings(doc) == [W("part-kind", f"{MSG}[3].parts[0].part_kind")]


def _replace_part(thread: m.Thread, turn: int, msg: int, part: int, new: Any) -> m.Thread:
    t = thread.turns[turn]
    assert isinstance(t, m.AgentTurn)
    message = t.messages[msg]
    assert isinstance(message, m.ThreadMessage)
    parts = list(message.parts)
    parts[part] = new
    messages = list(t.messages)
    messages[msg] = msgspec.structs.replace(message, parts=parts)
    turns = list(thread.turns)
    turns[turn] = msgspec.structs.replace(t, messages=messages)
    return msgspec.structs.replace(thread, turns=turns)


def test_part_kind_reserved() -> None:
    thread = from_builtins(base(), m.Thread)
    thread = _replace_part(thread, 1, 5, 0, m.ExtensionPart(part_kind_="text", data={"content": 1}))
    user = thread.turns[0]
    assert isinstance(user, m.UserTurn)
    prompt = m.UserPromptPart(content=[m.ExtensionContent(kind_="image-url", data={"url": 3})])
    turns = [msgspec.structs.replace(user, parts=[prompt]), *thread.turns[1:]]
    thread = msgspec.structs.replace(thread, turns=turns)
    assert findings(thread) == [
        E("part-kind-reserved", "$.turns[0].parts[0].content[0].kind"),
        E("part-kind-reserved", f"{MSG}[5].parts[0].part_kind"),
    ]


def test_user_content_kind() -> None:
    doc = base()
    doc["turns"][0]["parts"][0]["content"].append({"kind": "hologram-url", "url": "https://example.com/h"})
    assert findings(doc) == [W("user-content-kind", "$.turns[0].parts[0].content[2].kind")]


def test_content_identifier() -> None:
    doc = base()
    del doc["turns"][0]["parts"][0]["content"][1]["identifier"]
    doc["turns"][1]["messages"][5]["parts"].append(
        {"part_kind": "file", "content": {"kind": "binary", "data": "aGk=", "media_type": "text/plain"}}
    )
    assert findings(doc) == [
        W("content-identifier", "$.turns[0].parts[0].content[1].identifier"),
        W("content-identifier", f"{MSG}[5].parts[1].content.identifier"),
    ]


def test_tool_return_status() -> None:
    doc = base()
    doc["turns"][1]["messages"][1]["parts"][0]["status"] = "aborted"
    assert findings(doc) == [E("v3-tool-return-status", f"{MSG}[1].parts[0].status")]


def test_finish_reason() -> None:
    doc = base()
    doc["turns"][1]["messages"][5]["finish_reason"] = "end_turn"
    assert findings(doc) == [E("v3-finish-reason", f"{MSG}[5].finish_reason")]


# --------------------------------------------------------------------------- validate_json, the report


def test_json_syntax() -> None:
    report = validate_json(b'{"version": "0.0.4",')
    assert [(f.rule, f.path) for f in report.errors] == [("json-syntax", "$")]
    assert report.warnings == [] and not report.ok
    assert report.errors[0].message.startswith("Malformed JSON")


def test_json_shape() -> None:
    doc = base()
    doc["turns"][1]["messages"][1]["parts"][0]["tool_call_id"] = 7
    report = validate_json(json.dumps(doc))
    path = f"{MSG}[1].parts[0].tool_call_id"
    with pytest.raises(InvalidInputError) as info:  # the message is the converter's (msgspec's words), without its path
        from_json(json.dumps(doc))
    message = str(info.value).removesuffix(f" (at {path})")
    assert report.errors == [Finding(rule="json-shape", path=path, message=message)]
    assert report.errors[0].message and path not in report.errors[0].message


def test_json_shape_missing_field() -> None:
    doc = base()
    del doc["turns"][1]["messages"][0]["agent_id"]
    report = validate_json(json.dumps(doc).encode())
    assert [(f.rule, f.path) for f in report.errors] == [("json-shape", f"{MSG}[0]")]
    assert "agent_id" in report.errors[0].message


def test_json_shape_of_a_non_object() -> None:
    report = validate_json(b"[]")
    assert [(f.rule, f.path) for f in report.errors] == [("json-shape", "$")]


def test_validate_json_passes_content_ref_schemes() -> None:
    doc = base()
    doc["turns"][1]["messages"][4]["parts"][0]["content_ref"]["uri"] = "ipfs://x/y"
    assert validate_json(json.dumps(doc)).warnings
    assert validate_json(json.dumps(doc), content_ref_schemes=["ipfs"]) == ValidationReport()


def test_findings_are_reported_all_at_once_in_document_order() -> None:
    doc = base()
    doc["thread_id"] = "x"
    doc["turns"][1]["messages"][1]["parts"][0]["tool_call_id"] = "nope"
    doc["turns"][1]["messages"][5]["finish_reason"] = "bad"
    doc["turns"][0]["client_metadata"]["mode"] = 1
    report = validate(from_builtins(doc, m.Thread))
    assert [f.path for f in report.errors] == [
        "$.thread_id",
        f"{MSG}[1].parts[0].tool_call_id",
        f"{MSG}[5].finish_reason",
    ]
    assert [f.path for f in report.warnings] == ["$.turns[0].client_metadata.mode"]


def test_raise_for_errors() -> None:
    ValidationReport().raise_for_errors()
    warning = Finding(rule="part-kind", path="$.x", message="m")
    ValidationReport(warnings=[warning]).raise_for_errors()
    doc = base()
    doc["thread_id"] = "x"
    report = validate(from_builtins(doc, m.Thread))
    with pytest.raises(ValidationError) as info:
        report.raise_for_errors()
    assert info.value.report is report
    assert isinstance(info.value, InvalidInputError) and isinstance(info.value, ValueError)
    assert "$.thread_id" in str(info.value) and "thread-id-uuid" in str(info.value)


def test_raise_for_errors_summarises_many() -> None:
    errors = [Finding(rule="v3.1-timestamp", path=f"$.p{i}", message="bad") for i in range(5)]
    with pytest.raises(ValidationError, match=r"^5 validation errors: .*\$\.p2: bad .*; and 2 more$"):
        ValidationReport(errors=errors).raise_for_errors()


def test_report_is_a_msgspec_struct_that_encodes() -> None:
    report = validate_json(b"{")
    assert msgspec.json.decode(msgspec.json.encode(report), type=ValidationReport) == report


def test_validate_does_not_mutate_or_depend_on_call_order() -> None:
    thread = from_builtins(base(), m.Thread)
    before = msgspec.json.encode(thread)
    assert validate(thread) == validate(thread)
    assert msgspec.json.encode(thread) == before


# --------------------------------------------------------------------------- the rule table


def test_every_rule_has_a_test() -> None:
    names = {n for n in globals() if n.startswith("test_")}
    slugs = {r: "test_" + re.sub(r"^v\d(\.\d)?-", "", r).replace("-", "_") for r in RULES}
    missing = [r for r, s in slugs.items() if not any(n == s or n.startswith(s + "_") for n in names)]
    assert missing == []


def test_module_docstring_lists_every_rule_with_its_severity() -> None:
    doc = _findings.__doc__ or ""  # the rule table moved with RULES (issue #39)
    listed = dict(re.findall(r"^  ([a-z0-9.\-]+) \((error|warning)\)", doc, flags=re.M))
    assert listed == {rule: r.severity for rule, r in RULES.items()}
