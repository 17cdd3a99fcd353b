"""The id-only state fold (tplog.projections.fold.step) fed from stored headers: a rebuild of the
``state`` projection folds an interrupted turn from its header's facts, as the live fold folded
the event itself. Written to kill a surviving mutant of tests/MUTANTS.md (projections/fold.py).
"""

from __future__ import annotations

from pathlib import Path

from conftest import ToyStore as Store
from conftest import agent_start, started, user

from tplog.events import AgentTurnInterrupted, MessageRecorded
from tplog.projections.fold import TurnInterrupt
from tplog.protocol import model as m

T = "2025-01-20T10:00:05Z"


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
