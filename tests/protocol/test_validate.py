"""tplog.protocol.validate: one test per rule, each breaking exactly that rule in an otherwise valid document.

Every test asserts the complete list of findings (severity, rule id, JSON path),
so a rule that also fires elsewhere, or a rule that goes silent, fails the test.
The documents they break are protocol/documents.py's.

Then validate at its edges (written for the mutation run of validate.py, tests/MUTANTS.md): which
end a turn has when its status and interruption disagree, a turn without known times between two
others, zone offsets at their limits, URIs whose authority is empty only before the first ``/ ? #``,
the error ``raise_for_errors`` raises for 1-4 errors, the one thread-id rule, and the explicit-null
field table built afresh; each case asserts the complete findings (rule, path) or the exact value a
mutant would change.
"""

from __future__ import annotations

import copy
import json
import re
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import msgspec
import pytest
from protocol.documents import (
    A1,
    A2,
    MSG,
    T1,
    TURN1,
    E,
    W,
    base,
    base_v3,
    findings,
)

from tplog.errors import InvalidInputError, ValidationError
from tplog.protocol import findings as _findings
from tplog.protocol import model as m
from tplog.protocol import validate as _validate
from tplog.protocol.json import from_builtins, from_json
from tplog.protocol.validate import (
    RULES,
    Finding,
    Rule,
    ValidationReport,
    parse_timestamp,
    thread_id_for,
    validate,
    validate_json,
)


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


# -------------------- at the edges (was protocol/test_validate.py)

T4 = "$.turns[4]"


# --------------------------------------------------------------------------- where a turn ends


def _last_turn(**fields: Any) -> dict[str, Any]:
    """base() with its last turn (an agent turn started at :31, one message at :32) changed."""
    doc = base()
    turn = doc["turns"][4]
    for key in ("completed_at", "completion_status"):
        turn.pop(key)
    turn.update({k: v for k, v in fields.items() if v is not None})
    return doc


INTERRUPTION_BEFORE_START = {"reason": "user_cancelled", "interrupted_at": "2025-01-20T10:00:30Z"}


def test_a_turn_without_a_status_but_with_an_interruption_ends_when_interrupted() -> None:
    # no completion_status: the interruption says when the turn ended, not completed_at
    doc = _last_turn(interruption=INTERRUPTION_BEFORE_START, completed_at="2025-01-20T10:00:40Z")
    assert findings(doc) == [
        E("required-field", f"{T4}.completion_status"),
        E("v3.4-turn-interval", f"{T4}.interruption.interrupted_at"),
        W("v3.5-message-outside-turn", f"{T4}.messages[0].timestamp"),
    ]


def test_an_interrupted_turn_without_an_interruption_has_no_known_end() -> None:
    # interrupted: its end is interruption.interrupted_at, absent here; completed_at (refused) is not used
    doc = _last_turn(completion_status="interrupted", completed_at="2025-01-20T10:00:30Z")
    doc["turns"][4]["messages"].append(
        {
            "message_type": "request",
            "timestamp": "2025-01-20T10:00:33Z",
            "agent_id": doc["turns"][4]["agent_id"],
            "parts": [
                {
                    "part_kind": "tool-return",
                    "tool_name": "delete_file",
                    "tool_call_id": "call_4",
                    "status": "success",
                    "content": "ok",
                }
            ],
        }
    )
    assert findings(doc) == [
        E("v4-interruption-iff-interrupted", f"{T4}.interruption"),
        E("v4-completed-at-only-complete", f"{T4}.completed_at"),
    ]


def test_a_turn_without_a_status_ends_at_completed_at() -> None:
    doc = _last_turn(completed_at="2025-01-20T10:00:30Z")
    assert findings(doc) == [
        E("required-field", f"{T4}.completion_status"),
        E("v3.4-turn-interval", f"{T4}.completed_at"),
        W("v3.5-message-outside-turn", f"{T4}.messages[0].timestamp"),
    ]


def test_a_complete_turn_with_an_interruption_ends_at_completed_at() -> None:
    doc = _last_turn(
        completion_status="complete", completed_at="2025-01-20T10:00:40Z", interruption=INTERRUPTION_BEFORE_START
    )
    assert findings(doc) == [E("v4-interruption-iff-interrupted", f"{T4}.interruption")]


# --------------------------------------------------------------------------- turns without known times


def test_a_turn_with_only_an_end_time_sets_where_the_next_may_start() -> None:
    doc = base()
    doc["turns"][1]["started_at"] = "soon"  # not a time: the turn's end (10:00:10) still counts
    doc["turns"][2]["submitted_at"] = "2025-01-20T10:00:05Z"
    assert findings(doc) == [
        E("v3.1-timestamp", "$.turns[1].started_at"),
        E("v3.4-turn-overlap", "$.turns[2].submitted_at"),
    ]


def test_a_turn_without_any_time_keeps_the_end_of_the_turn_before_it() -> None:
    doc = base()
    doc["turns"][1]["started_at"] = "soon"
    doc["turns"][1]["completed_at"] = "later"
    doc["turns"][2]["submitted_at"] = "2025-01-19T10:00:00Z"  # before turn 0
    assert findings(doc) == [
        E("v3.1-timestamp", "$.turns[1].started_at"),
        E("v3.1-timestamp", "$.turns[1].completed_at"),
        E("v3.4-turn-overlap", "$.turns[2].submitted_at"),
    ]


# --------------------------------------------------------------------------- timestamps


@pytest.mark.parametrize(("offset", "minutes"), [("+23:59", 23 * 60 + 59), ("-23:00", -23 * 60), ("+05:59", 359)])
def test_zone_offsets_up_to_23_59_are_read(offset: str, minutes: int) -> None:
    got = parse_timestamp(f"2025-01-20T10:00:00{offset}")
    assert got == datetime(2025, 1, 20, 10, tzinfo=timezone(timedelta(minutes=minutes)))
    assert got is not None and got.utcoffset() == timedelta(minutes=minutes)


@pytest.mark.parametrize("offset", ["+24:00", "-24:00", "+05:60", "+00:99"])
def test_zone_offsets_beyond_23_59_are_not_timestamps(offset: str) -> None:
    assert parse_timestamp(f"2025-01-20T10:00:00{offset}") is None
    doc = base()
    doc["created_at"] = f"2025-01-20T10:00:00{offset}"
    assert findings(doc) == [E("v3.1-timestamp", "$.created_at")]


# --------------------------------------------------------------------------- URIs


@pytest.mark.parametrize(
    "uri",
    [
        "https:///a/b",  # the authority ends at the first "/", even with more after it
        "https://?a?b",  # ... at the first "?"
        "https://#a#b",  # ... at the first "#"
        "https://?x",
        "https://#x",
    ],
)
def test_an_authority_empty_before_its_first_delimiter_is_missing(uri: str) -> None:
    doc = base()
    doc["turns"][1]["messages"][4]["parts"][0]["content_ref"]["uri"] = uri
    report = _validate.validate(_thread(doc))
    assert report.errors == [
        Finding(
            rule="v3.7-content-ref-uri",
            path="$.turns[1].messages[4].parts[0].content_ref.uri",
            message=f"uri {uri!r} a https URI needs a host or bucket after `https://`",
        )
    ]


@pytest.mark.parametrize("uri", ["https://example.com:8443/r.pdf", "s3://bucket/a:b", "file:///C:/r.pdf"])
def test_the_scheme_is_what_comes_before_the_first_colon(uri: str) -> None:
    doc = base()
    doc["turns"][1]["messages"][4]["parts"][0]["content_ref"]["uri"] = uri
    assert findings(doc) == []


def _thread(doc: dict[str, Any]) -> Any:
    from tplog.protocol import model as m
    from tplog.protocol.json import from_builtins

    return from_builtins(doc, m.Thread)


# --------------------------------------------------------------------------- raise_for_errors


def _errors(n: int) -> ValidationReport:
    return ValidationReport(
        errors=[Finding(rule="v3.1-timestamp", path=f"$.p{i}", message=f"bad {i}") for i in range(n)]
    )


@pytest.mark.parametrize(
    ("n", "message"),
    [
        (1, "in t: 1 validation error: $.p0: bad 0 [v3.1-timestamp]"),
        (2, "in t: 2 validation errors: $.p0: bad 0 [v3.1-timestamp]; $.p1: bad 1 [v3.1-timestamp]"),
        (
            3,
            "in t: 3 validation errors: $.p0: bad 0 [v3.1-timestamp]; $.p1: bad 1 [v3.1-timestamp]; "
            "$.p2: bad 2 [v3.1-timestamp]",
        ),
        (
            4,
            "in t: 4 validation errors: $.p0: bad 0 [v3.1-timestamp]; $.p1: bad 1 [v3.1-timestamp]; "
            "$.p2: bad 2 [v3.1-timestamp]; and 1 more",
        ),
    ],
)
def test_the_error_names_the_first_three_findings_and_counts_the_rest(n: int, message: str) -> None:
    report = _errors(n)
    with pytest.raises(ValidationError) as info:
        report.raise_for_errors("in t: ")
    assert str(info.value) == message
    assert info.value.report is report


# --------------------------------------------------------------------------- the thread-id rule


def test_thread_id_for_keeps_a_uuid_in_lower_case_and_maps_any_other_id_to_a_fixed_uuid5() -> None:
    upper = "550E8400-E29B-41D4-A716-44665544000A"
    assert thread_id_for(upper) == upper.lower()
    # fixed forever: stored thread ids depend on it (the namespace and this value)
    assert thread_id_for("chat-1") == str(uuid.uuid5(uuid.UUID("6f2c8a54-3d1b-5e7a-9c40-7b1d2e3f4a50"), "chat-1"))
    assert thread_id_for("chat-1") == "0d8c8122-1a17-5046-94e0-95d684859a74"


@pytest.mark.parametrize("bad", ["", None, 3, b"chat-1"])
def test_thread_id_for_refuses_what_is_not_a_non_empty_string(bad: Any) -> None:
    with pytest.raises(InvalidInputError) as info:
        thread_id_for(bad)
    assert str(info.value) == f"a thread id must be a non-empty string, not {bad!r}"


# --------------------------------------------------------------------------- explicit nulls, table rebuilt


def test_the_explicit_null_check_builds_its_field_table_right(monkeypatch: pytest.MonkeyPatch) -> None:
    # The table is cached per class on first use; an empty cache makes this test build it.
    monkeypatch.setattr(_validate, "_hints_cache", {})
    doc = base()
    doc["title"] = None  # a typed field: warned
    doc["relationships"]["links"][0]["metadata"] = None  # typed `Any`: may be null
    doc["turns"][0]["parts"][0]["content"][1]["vendor_metadata"] = None  # typed `Any`: may be null
    doc["turns"][1]["messages"][0]["parts"][2]["args"] = None  # typed `Any`: may be null
    doc["turns"][1]["messages"][0]["model_name"] = None  # a typed field of a nested object: warned
    assert findings(doc) == [
        W("explicit-null", "$.title"),
        W("explicit-null", "$.turns[1].messages[0].model_name"),
    ]
    assert _validate._hints_cache  # and kept it
    assert findings(doc) == [
        W("explicit-null", "$.title"),
        W("explicit-null", "$.turns[1].messages[0].model_name"),
    ]


# --------------------------------------------------------------------------- the rule table


DOCUMENTS = (
    "threadprotocol-v0.0.3-spec",
    "threadprotocol-v0.0.3-implementation-guide",
    "threadprotocol-v0.0.4-amendments",
    "threadprotocol-rc2-research-multimodal-deferred-tools",
    "RFC 8259",
)


def test_every_rule_says_what_it_checks_and_cites_a_document() -> None:
    for rule_id, rule in RULES.items():
        assert rule.severity in ("error", "warning"), rule_id
        assert isinstance(rule.checks, str) and len(rule.checks) > 10, rule_id
        assert isinstance(rule.source, str) and rule.source.startswith(DOCUMENTS), rule_id
    assert RULES["v3.2-tool-call-id"] == Rule(
        severity="error",
        checks="an answer's tool_call_id names an earlier tool-call",
        source="threadprotocol-v0.0.3-spec rule 2; threadprotocol-rc2-research-multimodal-deferred-tools",
    )
    # the table is public: it encodes as JSON and decodes to the same rules
    assert msgspec.json.decode(msgspec.json.encode(RULES), type=dict[str, Rule]) == RULES
