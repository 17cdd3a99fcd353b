"""tplog.protocol.versions: v0.0.3 <-> v0.0.4 conversion, by properties, then example by example.

The examples: which ``completed_at`` downgrade fills in (and where it fails), that interruptions go,
that untouched turns are shared, and the exact errors for a wrong version or a wrong type.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from msgspec import UNSET
from strategies import EVENT_TYPES_V003_NORMATIVE, EVENT_TYPES_V004_NORMATIVE, THREAD_SETTINGS, threads, threads_v003

from tplog.errors import InvalidInputError, TplogError
from tplog.protocol.json import from_builtins, to_builtins
from tplog.protocol.model import NORMATIVE_EVENT_TYPES, AgentTurn, Interruption, SystemMessage, Thread
from tplog.protocol.versions import (
    EVENT_TYPES_V003_TO_V004,
    EVENT_TYPES_V004_TO_V003,
    SUPPORTED_VERSIONS,
    downgrade,
    upgrade,
)


def _t(doc: dict[str, Any]) -> Thread:
    return from_builtins(doc, Thread)


# --------------------------------------------------------------------------- reference transforms on builtins


def _upgrade_ref(doc: dict[str, Any]) -> dict[str, Any]:
    d = copy.deepcopy(doc)
    d["version"] = "0.0.4"
    for turn in d["turns"]:
        if turn["turn_type"] == "agent":
            if turn.get("completion_status") is None:
                turn["completion_status"] = "complete"
            for m in turn["messages"]:
                if m["message_type"] == "system" and m["event_type"] in EVENT_TYPES_V003_NORMATIVE:
                    m["event_type"] = EVENT_TYPES_V004_NORMATIVE[EVENT_TYPES_V003_NORMATIVE.index(m["event_type"])]
    return d


def _completed_at_ref(turn: dict[str, Any]) -> str:
    """v0.0.3 requires completed_at: interruption time, else last message's timestamp, else started_at."""
    if isinstance(turn.get("completed_at"), str):
        return str(turn["completed_at"])
    if isinstance(turn.get("interruption"), dict):
        return str(turn["interruption"]["interrupted_at"])
    if turn["messages"]:
        return str(turn["messages"][-1]["timestamp"])
    return str(turn["started_at"])


def _fill_completed_at(doc: dict[str, Any]) -> dict[str, Any]:
    d = copy.deepcopy(doc)
    for turn in d["turns"]:
        if turn["turn_type"] == "agent":
            turn["completed_at"] = _completed_at_ref(turn)
    return d


def _downgrade_ref(doc: dict[str, Any]) -> dict[str, Any]:
    d = copy.deepcopy(doc)
    d["version"] = "0.0.3"
    turns = []
    for turn in d["turns"]:
        if turn["turn_type"] == "agent":
            if turn.get("completion_status") == "interrupted":
                continue
            turn["completed_at"] = _completed_at_ref(turn)
            turn.pop("completion_status", None)
            turn.pop("interruption", None)
            for m in turn["messages"]:
                if m["message_type"] == "system" and m["event_type"] in EVENT_TYPES_V004_NORMATIVE:
                    m["event_type"] = EVENT_TYPES_V003_NORMATIVE[EVENT_TYPES_V004_NORMATIVE.index(m["event_type"])]
        turns.append(turn)
    d["turns"] = turns
    return d


# --------------------------------------------------------------------------- properties


@THREAD_SETTINGS
@given(threads_v003(allow_v004_names=True))
def test_upgrade_matches_reference(doc: dict[str, Any]) -> None:
    t = _t(doc)
    up = upgrade(t)
    assert up.version == "0.0.4"
    assert to_builtins(up) == _upgrade_ref(doc)
    assert all(turn.completion_status == "complete" for turn in up.turns if isinstance(turn, AgentTurn))
    assert to_builtins(t) == doc  # input untouched


@THREAD_SETTINGS
@given(threads())
def test_downgrade_matches_reference(doc: dict[str, Any]) -> None:
    t = _t(doc)
    down = downgrade(t)
    assert down.version == "0.0.3"
    assert to_builtins(down) == _downgrade_ref(doc)
    n_interrupted = sum(1 for x in doc["turns"] if x.get("completion_status") == "interrupted")
    assert len(down.turns) == len(doc["turns"]) - n_interrupted
    for turn in down.turns:
        if isinstance(turn, AgentTurn):
            assert "completion_status" not in to_builtins(turn)
            assert "interruption" not in to_builtins(turn)
            assert isinstance(turn.completed_at, str)  # v0.0.3 requires it
    assert to_builtins(t) == doc


@THREAD_SETTINGS
@given(threads())
def test_same_version_is_identity(doc: dict[str, Any]) -> None:
    t = _t(doc)
    assert upgrade(t) is t
    v3 = downgrade(t)
    assert downgrade(v3) is v3


@THREAD_SETTINGS
@given(threads(interrupted=False, allow_v003_names=False))
def test_upgrade_after_downgrade_is_identity_without_interruptions(doc: dict[str, Any]) -> None:
    """Identity up to the completed_at downgrade fills in (v0.0.3 requires it; upgrade keeps it)."""
    t = _t(doc)
    assert to_builtins(upgrade(downgrade(t))) == _fill_completed_at(doc)
    if all(isinstance(x.get("completed_at"), str) for x in doc["turns"] if x["turn_type"] == "agent"):
        assert upgrade(downgrade(t)) == t


@THREAD_SETTINGS
@given(threads_v003())
def test_downgrade_after_upgrade_is_identity_for_v003(doc: dict[str, Any]) -> None:
    t = _t(doc)
    assert downgrade(upgrade(t)) == t


@THREAD_SETTINGS
@given(threads())
def test_downgrade_is_idempotent_through_upgrade(doc: dict[str, Any]) -> None:
    once = downgrade(_t(doc))
    assert downgrade(upgrade(once)) == once


# --------------------------------------------------------------------------- examples


def _doc(version: str, turns: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "version": version,
        "thread_id": "t",
        "created_at": "c",
        "updated_at": "u",
        "agents": {"a": {"agent_id": "a", "agent_name": "A", "created_at": "c"}},
        "turns": turns,
    }


def _sys(event: str) -> dict[str, Any]:
    return {"message_type": "system", "timestamp": "t", "event_type": event, "event_data": {"x": 1}}


def test_upgrade_example() -> None:
    v3 = _doc(
        "0.0.3",
        [
            {"turn_type": "user", "submitted_at": "s", "parts": [{"part_kind": "user-prompt", "content": "hi"}]},
            {
                "turn_type": "agent",
                "agent_id": "a",
                "started_at": "s",
                "completed_at": "e",
                "x-extra": [1],
                "messages": [
                    _sys(e)
                    for e in (
                        "agent.handoff",
                        "thread.spawn",
                        "thread.merge",
                        "thread.end",
                        "error",
                        "data-app-x",
                        "tool.grant",
                    )
                ],
            },
            {
                "turn_type": "agent",
                "agent_id": "a",
                "started_at": "s",
                "completed_at": "e",
                "completion_status": None,
                "messages": [],
            },
        ],
    )
    up = to_builtins(upgrade(_t(v3)))
    assert up["version"] == "0.0.4"
    assert up["turns"][0] == v3["turns"][0]
    assert up["turns"][1]["completion_status"] == "complete"
    assert up["turns"][1]["x-extra"] == [1]
    assert "interruption" not in up["turns"][1]
    assert [m["event_type"] for m in up["turns"][1]["messages"]] == [
        "data-tp-agent_handoff",
        "data-tp-thread_spawn",
        "data-tp-thread_merge",
        "data-tp-thread_end",
        "data-tp-error",
        "data-app-x",
        "tool.grant",
    ]
    assert up["turns"][2]["completion_status"] == "complete"  # explicit null counts as missing


def test_downgrade_example() -> None:
    v4 = _doc(
        "0.0.4",
        [
            {"turn_type": "user", "submitted_at": "s", "parts": [{"part_kind": "user-prompt", "content": "hi"}]},
            {
                "turn_type": "agent",
                "agent_id": "a",
                "started_at": "s",
                "completion_status": "interrupted",
                "interruption": {"reason": "user_cancelled", "interrupted_at": "i"},
                "messages": [_sys("data-tp-error")],
            },
            {"turn_type": "user", "submitted_at": "s2", "parts": [{"part_kind": "user-prompt", "content": "again"}]},
            {
                "turn_type": "agent",
                "agent_id": "a",
                "started_at": "s",
                "completed_at": "e",
                "completion_status": "complete",
                "messages": [_sys("data-tp-agent_handoff"), _sys("data-app-y")],
            },
        ],
    )
    down = to_builtins(downgrade(_t(v4)))
    assert down["version"] == "0.0.3"
    assert [t["turn_type"] for t in down["turns"]] == ["user", "user", "agent"]
    agent = down["turns"][2]
    assert "completion_status" not in agent
    assert agent["completed_at"] == "e"
    assert [m["event_type"] for m in agent["messages"]] == ["agent.handoff", "data-app-y"]


@pytest.mark.parametrize("version", ["0.0.2", "0.0.5", "", "1.0"])
def test_unknown_version_refused(version: str) -> None:
    t = _t(_doc(version, []))
    for fn in (upgrade, downgrade):
        with pytest.raises(InvalidInputError) as info:
            fn(t)
        assert info.value.path == "$.version"


def test_non_thread_refused() -> None:
    with pytest.raises(TypeError):
        upgrade({"version": "0.0.3"})  # type: ignore[arg-type]


def test_name_maps() -> None:
    assert dict(EVENT_TYPES_V003_TO_V004) == dict(
        zip(EVENT_TYPES_V003_NORMATIVE, EVENT_TYPES_V004_NORMATIVE, strict=True)
    )
    assert {v: k for k, v in EVENT_TYPES_V003_TO_V004.items()} == dict(EVENT_TYPES_V004_TO_V003)
    assert set(EVENT_TYPES_V004_TO_V003) == NORMATIVE_EVENT_TYPES
    assert {"0.0.3", "0.0.4"} == SUPPORTED_VERSIONS
    with pytest.raises(TypeError):
        EVENT_TYPES_V003_TO_V004["x"] = "y"  # type: ignore[index]


# -------------------- example by example (was protocol/test_versions.py)

USER = {"turn_type": "user", "submitted_at": "s0", "parts": [{"part_kind": "user-prompt", "content": "hi"}]}


def _thread(version: str, *turns: dict[str, Any]) -> Thread:
    return from_builtins({
        "version": version,
        "thread_id": "t1",
        "created_at": "c",
        "updated_at": "u",
        "agents": {"a": {"agent_id": "a", "agent_name": "A", "created_at": "c"}},
        "turns": [USER, *turns],
    }, Thread)


def _sys_at(ts: str, event: str = "data-app-x") -> dict[str, Any]:
    return {"message_type": "system", "timestamp": ts, "event_type": event}


def _agent(**fields: Any) -> dict[str, Any]:
    return {"turn_type": "agent", "agent_id": "a", "started_at": "st", "messages": [], **fields}


# --------------------------------------------------------------------------- completed_at on downgrade


def test_a_present_completed_at_is_kept_and_the_turn_shared() -> None:
    t = _thread("0.0.4", _agent(completed_at="done", messages=[_sys_at("m1")]))
    down = downgrade(t)
    assert down.version == "0.0.3"
    assert to_builtins(down)["turns"][1]["completed_at"] == "done"
    assert down.turns[1] is t.turns[1]  # nothing to change: the same Struct, messages not copied


def test_a_missing_completed_at_comes_from_the_interruption_time_first() -> None:
    """Only an extension ``completion_status`` keeps a turn with an interruption (``interrupted`` ones go)."""
    t = _thread("0.0.4", _agent(completion_status="x-partial",
                                interruption={"reason": "timeout", "interrupted_at": "cut"},
                                messages=[_sys_at("m1"), _sys_at("m2")]))
    agent = to_builtins(downgrade(t))["turns"][1]
    assert agent["completed_at"] == "cut"
    assert "interruption" not in agent and "completion_status" not in agent
    turn = downgrade(t).turns[1]
    assert isinstance(turn, AgentTurn) and turn.interruption is UNSET and turn.completion_status is UNSET


@pytest.mark.parametrize("stamps", [["m1", "m2"], ["m1", "m2", "m3"], ["m1", "m2", "m3", "m4"]])
def test_else_from_the_last_messages_timestamp(stamps: list[str]) -> None:
    t = _thread("0.0.4", _agent(messages=[_sys_at(s) for s in stamps]))
    assert to_builtins(downgrade(t))["turns"][1]["completed_at"] == stamps[-1]


def test_else_from_started_at_for_a_turn_without_messages() -> None:
    t = _thread("0.0.4", _agent(started_at="began"), _agent(started_at="again", completed_at=None))
    turns = to_builtins(downgrade(t))["turns"]
    assert (turns[1]["completed_at"], turns[2]["completed_at"]) == ("began", "again")


def test_a_message_without_a_timestamp_is_passed_over_for_started_at() -> None:
    """A Struct built with wrong types (msgspec does not check at construction): the last "message"
    has no timestamp, so started_at fills completed_at rather than an AttributeError."""
    t = _thread("0.0.4", _agent(started_at="began"))
    bad = AgentTurn(agent_id="a", started_at="began", messages=[{"not": "a message"}])  # type: ignore[list-item]
    down = downgrade(Thread(version="0.0.4", thread_id="t1", created_at="c", updated_at="u",
                            agents=t.agents, turns=[t.turns[0], bad]))
    turn = down.turns[1]
    assert isinstance(turn, AgentTurn) and turn.completed_at == "began"


def test_a_turn_with_no_time_to_fill_from_is_an_error_at_its_path() -> None:
    t = _thread("0.0.4", _agent(completed_at="e"))
    bad = AgentTurn(agent_id="a", started_at=None, messages=[], completed_at=None)  # type: ignore[arg-type]
    wrong = Thread(version="0.0.4", thread_id="t1", created_at="c", updated_at="u", agents=t.agents,
                   turns=[t.turns[0], t.turns[1], bad])
    with pytest.raises(InvalidInputError) as info:
        downgrade(wrong)
    assert isinstance(info.value, TplogError)
    assert info.value.path == "$.turns[2].completed_at"
    assert str(info.value) == (
        "Agent turn has no completed_at, and no interruption time, message timestamp or started_at "
        "to fill it from for v0.0.3 (which requires it) (at $.turns[2].completed_at)")


# --------------------------------------------------------------------------- what downgrade removes


def test_downgrade_removes_an_interruption_and_an_extension_status() -> None:
    t = _thread("0.0.4", _agent(completed_at="e", completion_status="x-partial",
                                interruption={"reason": "timeout", "interrupted_at": "cut"}))
    turn = downgrade(t).turns[1]
    assert isinstance(turn, AgentTurn)
    assert turn.completed_at == "e"  # its own, not the interruption's
    assert turn.interruption is UNSET and turn.completion_status is UNSET
    assert "interruption" not in to_builtins(turn) and "completion_status" not in to_builtins(turn)
    assert upgrade(downgrade(t)).turns[1] == AgentTurn(agent_id="a", started_at="st", completed_at="e",
                                                       messages=[], completion_status="complete")
    assert isinstance(t.turns[1], AgentTurn) and isinstance(t.turns[1].interruption, Interruption)  # input kept


# --------------------------------------------------------------------------- untouched turns are shared


def test_upgrade_shares_a_turn_it_does_not_change_and_keeps_its_messages() -> None:
    t = _thread("0.0.3", _agent(completed_at="e", completion_status="complete", messages=[_sys_at("m1")]),
                _agent(completed_at="e", messages=[]))
    up = upgrade(t)
    assert up.turns[0] is t.turns[0] and up.turns[1] is t.turns[1]
    second = up.turns[2]
    assert isinstance(second, AgentTurn) and second.completion_status == "complete"
    assert second.messages == [] and second.messages is t.turns[2].messages  # type: ignore[union-attr]


def test_a_renamed_event_copies_the_list_and_only_that_message() -> None:
    t = _thread("0.0.3", _agent(completed_at="e", completion_status="complete",
                                messages=[_sys_at("m1"), _sys_at("m2", "thread.end")]))
    up = upgrade(t)
    before, after = t.turns[1], up.turns[1]
    assert isinstance(before, AgentTurn) and isinstance(after, AgentTurn)
    assert after.messages is not before.messages and after.messages[0] is before.messages[0]
    assert isinstance(after.messages[1], SystemMessage) and after.messages[1].event_type == "data-tp-thread_end"
    assert isinstance(before.messages[1], SystemMessage) and before.messages[1].event_type == "thread.end"


# --------------------------------------------------------------------------- errors


def test_a_wrong_version_is_named_with_the_supported_ones() -> None:
    t = _thread("0.0.5")
    for fn in (upgrade, downgrade):
        with pytest.raises(InvalidInputError) as info:
            fn(t)
        assert str(info.value) == ("Unsupported ThreadProtocol version '0.0.5'; expected one of "
                                   "['0.0.3', '0.0.4'] (at $.version)")


def test_a_non_thread_is_a_type_error_naming_its_type() -> None:
    for fn in (upgrade, downgrade):
        with pytest.raises(TypeError, match=r"^expected a tplog\.Thread, not dict$"):
            fn({"version": "0.0.3"})  # type: ignore[arg-type]
