"""The demo's recording (real Pydantic AI runs into a real Store) gives the state the README promises."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tplog import Store, thread_hash, validate
from tplog.integrations import demo
from tplog.protocol import model as m

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, str, str]]:
    store = Store(tmp_path_factory.mktemp("demo") / "store")
    root, child = demo.record(store)
    yield store, root, child
    store.close()


def test_multi_turn_conversation(recorded: tuple[Store, str, str]) -> None:
    store, root, _ = recorded
    thread = store.thread(root)
    assert thread.title == "Weather in Europe"
    assert [t.parts[0].content for t in thread.turns if isinstance(t, m.UserTurn)] == list(demo.PROMPTS)  # type: ignore[union-attr]
    agent_turns = [t for t in thread.turns if isinstance(t, m.AgentTurn)]
    assert [t.completion_status for t in agent_turns] == ["complete", "complete", "interrupted", "complete"]
    assert all(t.agent_id == demo.AGENT_ID for t in agent_turns)
    # run 1: tool call, its return, the answer -- as Pydantic AI made them
    first = agent_turns[0].messages
    assert [type(x).__name__ for x in first] == ["ResponseMessage", "RequestMessage", "ResponseMessage"]
    call = first[0].parts[0]  # type: ignore[union-attr]
    assert isinstance(call, m.ToolCallPart) and call.args == {"city": "Paris"}
    assert first[2].parts[0].content == "It is 21 °C and sunny in Paris."  # type: ignore[union-attr]
    assert first[2].model_name == "scripted-weather"  # type: ignore[union-attr]
    assert validate(thread).errors == []


def test_interrupted_turn(recorded: tuple[Store, str, str]) -> None:
    store, root, _ = recorded
    thread = store.thread(root)
    turn = thread.turns[5]
    assert isinstance(turn, m.AgentTurn) and turn.completion_status == "interrupted"
    assert isinstance(turn.interruption, m.Interruption) and turn.interruption.reason == "user_cancelled"
    # the complete tool cycle is kept; the response cut off mid-stream is not
    assert [type(x).__name__ for x in turn.messages] == ["ResponseMessage", "RequestMessage"]
    assert not any(
        isinstance(p, m.TextPart) and p.content.startswith("Paris is warmer")
        for x in turn.messages
        for p in getattr(x, "parts", [])
    )
    intr = store.interrupts(root)
    assert intr.last is not None and intr.last.turn == 5 and intr.last.reason == "user_cancelled"
    assert len(intr.facts) == 1


def test_pending_approval(recorded: tuple[Store, str, str]) -> None:
    store, root, _ = recorded
    pend = store.pending(root)
    assert [(c.tool_name, c.tool_call_id, c.state, c.kind) for c in pend.pending] == [
        ("book_train", "call_train", "deferred", "approval")
    ]
    last = store.thread(root).turns[-1]
    assert isinstance(last, m.AgentTurn) and last.completion_status == "complete"


def test_child_thread_linked(recorded: tuple[Store, str, str]) -> None:
    store, root, child = recorded
    assert store.children(root) == [child]
    assert [(lk.relation, lk.thread_id) for lk in store.links(child)] == [("spawned_from", root)]
    assert store.incoming(root, relation="spawned_from") == [(child, "spawned_from")]
    spawn = [
        x
        for t in store.thread(root).turns
        if isinstance(t, m.AgentTurn)
        for x in t.messages
        if isinstance(x, m.SystemMessage)
    ]
    assert [(s.event_type, s.event_data) for s in spawn] == [(m.THREAD_SPAWN, {"spawned_thread_id": child})]
    sub = store.thread(child)
    assert list(sub.agents) == [demo.WORKER_ID]
    assert [type(t).__name__ for t in sub.turns] == ["UserTurn", "AgentTurn"]
    assert validate(sub).errors == []


def test_export_import_round_trip(recorded: tuple[Store, str, str], tmp_path: Path) -> None:
    store, root, _ = recorded
    thread = store.export(root)
    with Store(tmp_path / "copy") as other:
        other.import_thread(thread)
        assert thread_hash(other.export(root)) == thread_hash(thread)


def test_tools_demo_prints_all_four(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools/demo.py"), str(tmp_path / "d")],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert "real Pydantic AI runs" in out
    assert "interrupted (user_cancelled" in out
    assert "Pending tool calls: book_train (call_train, deferred, approval)" in out
    assert "spawned_from" in out
    assert "8 canonical turns" in out


def test_tools_demo_keeps_a_directory_it_did_not_make(tmp_path: Path) -> None:
    """`make demo` recreates ./demo-store only if the demo made it (its marker file); anything else stays."""
    mine = tmp_path / "demo-store"
    mine.mkdir()
    (mine / "notes.txt").write_text("my data")
    r = subprocess.run([sys.executable, str(ROOT / "tools/demo.py"), str(mine)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith(f"error: {mine} exists and was not made by the demo") and "Traceback" not in r.stderr
    assert (mine / "notes.txt").read_text() == "my data" and sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    # A directory the demo made is recreated on the next run; an empty one is used.
    made = tmp_path / "made"
    for _ in range(2):
        subprocess.run([sys.executable, str(ROOT / "tools/demo.py"), str(made)], capture_output=True, check=True,
                       timeout=60)
        assert (made / ".made-by-tplog-demo").is_file()
    empty = tmp_path / "empty"
    empty.mkdir()
    subprocess.run([sys.executable, str(ROOT / "tools/demo.py"), str(empty)], capture_output=True, check=True,
                   timeout=60)
