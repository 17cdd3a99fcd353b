"""v0.0.3 <-> v0.0.4 conversion (tplog.protocol.versions), example by example: which ``completed_at``
downgrade fills in (and where it fails), that interruptions go, that untouched turns are shared,
and the exact errors for a wrong version or a wrong type. The properties are in tests/test_versions.py."""

from __future__ import annotations

from typing import Any

import pytest
from msgspec import UNSET

from tplog.errors import InvalidInputError, TplogError
from tplog.protocol.json import from_builtins, to_builtins
from tplog.protocol.model import AgentTurn, Interruption, SystemMessage, Thread
from tplog.protocol.versions import downgrade, upgrade

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


def _sys(ts: str, event: str = "data-app-x") -> dict[str, Any]:
    return {"message_type": "system", "timestamp": ts, "event_type": event}


def _agent(**fields: Any) -> dict[str, Any]:
    return {"turn_type": "agent", "agent_id": "a", "started_at": "st", "messages": [], **fields}


# --------------------------------------------------------------------------- completed_at on downgrade


def test_a_present_completed_at_is_kept_and_the_turn_shared() -> None:
    t = _thread("0.0.4", _agent(completed_at="done", messages=[_sys("m1")]))
    down = downgrade(t)
    assert down.version == "0.0.3"
    assert to_builtins(down)["turns"][1]["completed_at"] == "done"
    assert down.turns[1] is t.turns[1]  # nothing to change: the same Struct, messages not copied


def test_a_missing_completed_at_comes_from_the_interruption_time_first() -> None:
    """Only an extension ``completion_status`` keeps a turn with an interruption (``interrupted`` ones go)."""
    t = _thread("0.0.4", _agent(completion_status="x-partial",
                                interruption={"reason": "timeout", "interrupted_at": "cut"},
                                messages=[_sys("m1"), _sys("m2")]))
    agent = to_builtins(downgrade(t))["turns"][1]
    assert agent["completed_at"] == "cut"
    assert "interruption" not in agent and "completion_status" not in agent
    turn = downgrade(t).turns[1]
    assert isinstance(turn, AgentTurn) and turn.interruption is UNSET and turn.completion_status is UNSET


@pytest.mark.parametrize("stamps", [["m1", "m2"], ["m1", "m2", "m3"], ["m1", "m2", "m3", "m4"]])
def test_else_from_the_last_messages_timestamp(stamps: list[str]) -> None:
    t = _thread("0.0.4", _agent(messages=[_sys(s) for s in stamps]))
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
    t = _thread("0.0.3", _agent(completed_at="e", completion_status="complete", messages=[_sys("m1")]),
                _agent(completed_at="e", messages=[]))
    up = upgrade(t)
    assert up.turns[0] is t.turns[0] and up.turns[1] is t.turns[1]
    second = up.turns[2]
    assert isinstance(second, AgentTurn) and second.completion_status == "complete"
    assert second.messages == [] and second.messages is t.turns[2].messages  # type: ignore[union-attr]


def test_a_renamed_event_copies_the_list_and_only_that_message() -> None:
    t = _thread("0.0.3", _agent(completed_at="e", completion_status="complete",
                                messages=[_sys("m1"), _sys("m2", "thread.end")]))
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
