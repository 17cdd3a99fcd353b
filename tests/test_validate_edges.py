"""tplog.protocol.validate at its edges: which end a turn has when its status and interruption
disagree, a turn without known times between two others, zone offsets at their limits, URIs whose
authority is empty only before the first ``/ ? #``, the error ``raise_for_errors`` raises for 1-4
errors, the one thread-id rule, and the explicit-null field table built afresh.

Written for the mutation run of validate.py (tests/MUTANTS.md); each case asserts the complete
findings (rule, path) or the exact value a mutant would change.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import msgspec
import pytest
from test_validate import E, W, base, findings

from tplog.errors import InvalidInputError, ValidationError
from tplog.protocol import validate as _validate
from tplog.protocol.validate import RULES, Finding, Rule, ValidationReport, parse_timestamp, thread_id_for

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
