"""The id-only state fold (tplog.projections.fold.step) fed from stored headers: a rebuild of the
``state`` projection folds an interrupted turn from its header's facts, as the live fold folded
the event itself; ``complete_cycles`` and the document fold field by field. Written to kill
surviving mutants of tests/MUTANTS.md (projections/fold.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import ToyStore as Store
from conftest import agent_start, started, user
from protocol.documents import A1, A2, T3, base

from tplog.events import (
    AgentRegistered,
    AgentTurnInterrupted,
    AgentTurnStarted,
    LinkAdded,
    MessageRecorded,
    ThreadInfoChanged,
    ThreadStarted,
)
from tplog.projections.fold import TurnInterrupt, complete_cycles, events_from_thread, fold
from tplog.protocol import model as m
from tplog.protocol.json import from_builtins
from tplog.protocol.model import UNSET

T = "2025-01-20T10:00:05Z"
S = "2025-01-20T10:00:01Z"


def test_a_rebuild_folds_an_interrupted_turn_from_its_header_as_the_live_fold_did(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        s.append("t", [started("t"), user("go"), agent_start(),
                       MessageRecorded(message=m.ResponseMessage(timestamp=T, agent_id="a1", parts=[
                           m.ToolCallPart(tool_name="f", tool_call_id="c1", args={})])),
                       AgentTurnInterrupted(interruption=m.Interruption(reason="timeout", interrupted_at=T))])
        fact = TurnInterrupt(turn=1, agent_id="a1", source="turn", reason="timeout", interrupted_at=T, seq=5)
        live = s.interrupts("t")
        assert (live.interrupted, live.facts) == (True, [fact])
        assert [c.tool_call_id for c in s.pending("t").abandoned] == ["c1"]
        assert [r.differences for r in s.rebuild(verify=True)] == [[], []]  # the headers' fold: the same rows
        s.rebuild()
        assert s.interrupts("t") == live
        assert [c.tool_call_id for c in s.pending("t").abandoned] == ["c1"]


# --------------------------------------------------------------------------- the document fold, field by field


def _resp(*parts: m.MessagePart) -> m.ResponseMessage:
    return m.ResponseMessage(timestamp=T, agent_id="a1", parts=list(parts))


def _req(*parts: m.MessagePart) -> m.RequestMessage:
    return m.RequestMessage(timestamp=T, agent_id="a1", parts=list(parts))


def test_complete_cycles_goes_on_past_every_message_it_drops_or_keeps() -> None:
    call = m.ToolCallPart(tool_name="f", tool_call_id="c1", args={})
    retry = _req(m.RetryPromptPart(content="again"))
    late = _req(m.ToolReturnPart(tool_name="f", tool_call_id="c1", content="r", status="success"))
    text, after = _resp(m.TextPart(content="plain")), _resp(m.TextPart(content="after"))
    # c1's response is not answered by the next request: it goes, and later the answer alone with it
    assert complete_cycles([text, _resp(call), retry, late, _resp(), after]) == [text, retry, after]


def test_the_fold_keeps_every_field_of_the_thread_and_its_turns() -> None:
    linked = [m.ThreadLink(thread_id="00000000-0000-4000-8000-000000000001", relation="referenced")]
    added = m.ThreadLink(thread_id="00000000-0000-4000-8000-000000000002", relation="spawned_from")
    res = fold([started("t", extra={"x-app": 1}, relationships=m.ThreadRelationships(links=linked)),
                LinkAdded(link=added), user("go"), AgentTurnStarted(agent_id="a1", started_at=S),
                AgentTurnInterrupted(interruption=m.Interruption(reason="timeout", interrupted_at=T)),
                AgentTurnStarted(agent_id="a2", started_at=T, extra={"x-turn": 2})])
    th = res.thread
    assert th is not None and res.deleted is False
    assert (th.extra, th.title, th.metadata) == ({"x-app": 1}, UNSET, UNSET)
    assert isinstance(th.relationships, m.ThreadRelationships) and th.relationships.links == [*linked, added]
    turn = th.turns[1]
    assert isinstance(turn, m.AgentTurn)
    assert (turn.agent_id, turn.started_at, turn.completion_status) == ("a1", S, "interrupted")
    assert res.in_progress is not None
    assert (res.in_progress.agent_id, res.in_progress.extra) == ("a2", {"x-turn": 2})


def _rich(updated_at: str, relationships: dict[str, Any] | None) -> m.Thread:
    """test_validate's base document with every field events_from_thread must carry over set."""
    doc = base()
    doc.update(updated_at=updated_at, metadata={"k": 1}, **{"x-thread": {"kept": True}})
    doc["agents"] = {"planner-key": doc["agents"][A1], A2: doc["agents"][A2]}  # a key other than the id
    if relationships is None:
        del doc["relationships"]
    else:
        doc["relationships"] = relationships
    agent_turns = [t for t in doc["turns"] if t["turn_type"] == "agent"]
    for t in agent_turns:
        t["total_usage"] = {"input_tokens": 3, "output_tokens": 4}
    agent_turns[0]["x-turn"] = "kept"
    return from_builtins(doc, m.Thread)


@pytest.mark.parametrize(("updated", "relationships"), [
    ("2025-01-20T11:00:00Z", {"links": [{"thread_id": T3, "relation": "spawned_from"}], "x-rel": 1}),
    ("2025-01-20T11:00:00Z", {"x-rel": 1}),  # a relationships object without links
    ("2025-01-20T11:00:00Z", None),
    (None, {"links": []}),  # updated_at: the last event's time, so no ThreadInfoChanged is needed
])
def test_events_from_thread_fold_back_into_the_same_document(updated: str | None,
                                                             relationships: dict[str, Any] | None) -> None:
    thread = _rich(updated or "2025-01-20T10:00:00Z", relationships)
    events = events_from_thread(thread)
    if updated is None:  # the time the events end at, found by folding them once
        last = fold(events[:-1] if isinstance(events[-1], ThreadInfoChanged) else events).thread
        assert last is not None
        thread = msgspec.structs.replace(thread, updated_at=last.updated_at)
        events = events_from_thread(thread)
        assert not any(isinstance(e, ThreadInfoChanged) for e in events)
    else:
        assert isinstance(events[-1], ThreadInfoChanged) and events[-1].updated_at == updated
    assert isinstance(events[0], ThreadStarted) and events[0].version == "0.0.4"
    assert [e.key for e in events if isinstance(e, AgentRegistered)] == ["planner-key", UNSET]
    assert fold(events).thread == thread
