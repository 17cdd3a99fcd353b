"""Pipelined appends (tplog.pipeline): acknowledged when queued, turn ends durable with
everything before them, a failure stops everything queued after it, crash semantics."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import CountingStore, agent_start, completed, response, started, user
from conftest import ToyStore as Store

from tplog import (
    AgentTurnInterrupted,
    AsyncStore,
    InvalidEventError,
    InvalidInputError,
    WrongExpectedVersionError,
)
from tplog.errors import PipelineError
from tplog.pipeline import ends_turn
from tplog.protocol.model import Interruption

ROOT = Path(__file__).resolve().parent.parent


def _texts(s: Store, tid: str) -> list[str]:
    out = []
    for r in s.read(tid):
        msg = getattr(r.event, "message", None)
        if msg is not None:
            out.append(msg.parts[0].content)
    return out


@pytest.mark.parametrize("where", ["lmdb", "memory"])
def test_turn_end_waits_for_everything_queued_before_it(tmp_path: Path, where: str) -> None:
    with Store(tmp_path / "s" if where == "lmdb" else "memory:") as s:
        p = s.pipeline("t")
        handles = [p.append([started("t"), user("q"), agent_start()])]
        handles += [p.append([response(f"r{i}")]) for i in range(5)]
        end = p.append([completed()])
        # The turn's end returned: it and every append queued before it are committed.
        assert all(h.done() and h.exception() is None for h in [*handles, end])
        assert [h.result()[0].last_seq for h in handles] == [3, 4, 5, 6, 7, 8]
        assert end.result()[0].first_seq == 9
        assert s.head("t").version == 9
        assert _texts(s, "t") == [f"r{i}" for i in range(5)]
        assert p.commit() is not None and p.commit().last_seq == 9  # type: ignore[union-attr]


def test_queued_appends_share_group_commits(tmp_path: Path) -> None:
    CountingStore.gate = 20
    s = CountingStore(tmp_path / "s")
    try:
        with s.pipeline("t") as p:
            p.append([started("t"), user(), agent_start()])
            for i in range(19):
                p.append([response(f"r{i}")])
        # The first group waited until all 20 were queued: the rest went in at most one more commit.
        assert sum(len(g) for g in s.groups) == 20
        assert len(s.groups) <= 2
        assert s.head("t").version == 22
    finally:
        s.close()


def test_a_failure_stops_everything_queued_after_it(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        s.append("t", [started("t"), user(), agent_start(), response("kept"), completed()])
        p = s.pipeline("t")
        ok = p.append([user("u2"), agent_start()])
        bad = p.append([response("x"), user("bad")])  # a user turn inside an open agent turn: refused at commit
        later = p.append([response("never")])  # queued behind the failure
        with pytest.raises(PipelineError) as ei:
            p.commit()
        assert isinstance(ei.value.__cause__, InvalidEventError)
        assert "seq 8..9" in str(ei.value) and "thread t" in str(ei.value)
        assert ok.exception() is None and ok.result()[0].last_seq == 7
        assert isinstance(bad.exception(), InvalidEventError)
        assert isinstance(later.exception(), WrongExpectedVersionError)
        # Nothing after the failure was written, and the pipeline refuses further appends.
        assert s.head("t").version == 7
        with pytest.raises(PipelineError):
            p.append([response("after")])
        assert s.head("t").version == 7
        s.append("t", [completed()])  # the thread itself is fine for other writers
        assert s.head("t").version == 8


def test_bad_input_raises_at_once_and_queues_nothing(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        p = s.pipeline("t")
        p.append([started("t"), user(), agent_start()])
        with pytest.raises(InvalidInputError, match="not a tplog event"):
            p.append([response(), "nope"])  # type: ignore[list-item]
        p.append([response("r"), completed()])
        assert s.head("t").version == 5
        assert _texts(s, "t") == ["r"]


def test_another_writer_in_between_breaks_the_pipeline(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        p = s.pipeline("t")
        p.append([started("t"), user(), agent_start(), completed()])  # a turn end: durable
        s.append("t", [user("other writer")])
        p.append([user("mine")])
        with pytest.raises(PipelineError) as ei:
            p.commit()
        assert isinstance(ei.value.__cause__, WrongExpectedVersionError)
        assert s.head("t").version == 5


def test_expected_version_of_the_first_append(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        with pytest.raises(WrongExpectedVersionError):
            s.pipeline("t", expected_version="exists").append([started("t")])
        s.pipeline("t", expected_version="no_stream").append([started("t"), user(), agent_start(), completed()])
        with pytest.raises(PipelineError), s.pipeline("t", expected_version="no_stream") as p:
            p.append([user()])
        with pytest.raises(InvalidInputError):
            s.pipeline("t", expected_version=-1)
        with s.pipeline("t", expected_version=4) as p:
            p.append([user()])
        assert s.head("t").version == 5


def test_ends_turn() -> None:
    assert ends_turn([response(), completed()])
    cut = AgentTurnInterrupted(interruption=Interruption(reason="error", interrupted_at="2025-01-01T00:00:00Z"))
    assert ends_turn([cut])
    assert not ends_turn([user(), agent_start(), response()])


def test_asyncio_pipeline(tmp_path: Path) -> None:
    async def main() -> None:
        a = await AsyncStore.open(tmp_path / "s", check_rules=False)
        try:
            p = a.pipeline("t")
            first = await p.aappend([started("t"), user(), agent_start()])
            rest = [await p.aappend([response(f"r{i}")]) for i in range(10)]
            end = await p.aappend([completed()])
            assert all(h.done() for h in [first, *rest, end])
            assert (await p.acommit()).last_seq == 14  # type: ignore[union-attr]
            assert (await a.head("t")).version == 14
        finally:
            a.store.close()

    asyncio.run(main())


_CHILD = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    from conftest import ToyStore, started, user, agent_start, response, completed
    s = ToyStore({path!r})
    p = s.pipeline("t")
    if not s.exists("t"):
        p.append([started("t")])
    k = 0
    while True:
        p.append([user(f"u{{k}}"), agent_start()])
        for j in range(4):
            p.append([response(f"{round}.{{k}}m{{j}}")])
        res = p.append([completed()]).result()[0]
        print(f"durable {{k}} {{res.last_seq}}", flush=True)
        k += 1
""")


def test_sigkill_keeps_every_turn_whose_end_returned(tmp_path: Path) -> None:
    path = str(tmp_path / "s")
    for round_ in range(3):
        proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD.format(tests=str(ROOT / "tests"), path=path, round=round_)],
            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert proc.stdout is not None
        acked: list[tuple[int, int]] = []
        watchdog = threading.Timer(300, proc.kill)  # a hung writer fails the test instead of hanging it
        watchdog.start()
        try:
            for line in proc.stdout:
                _, k, seq = line.split()
                acked.append((int(k), int(seq)))
                if len(acked) >= 5 + 3 * round_:
                    break
        finally:
            watchdog.cancel()
            proc.send_signal(signal.SIGKILL)
            proc.wait(60)
        assert acked, "the writer acknowledged no turn end"
        with Store(path) as s:
            assert s.verify().ok
            recs = s.read("t")
            # A prefix of what was queued: gap-free, and every acknowledged turn end in it.
            assert [r.seq for r in recs] == list(range(1, len(recs) + 1))
            assert len(recs) >= acked[-1][1]
            texts = _texts(s, "t")
            for k, _ in acked:
                assert [f"{round_}.{k}m{j}" for j in range(4)] == [x for x in texts if x.startswith(f"{round_}.{k}m")]
            # The next round's writer continues the thread from what survived.
            if s.head("t").open_turn_agent is not None:
                s.append("t", [completed()])


def test_thread_recorder_through_a_pipeline(tmp_path: Path) -> None:
    """The live recorder's path: the same thread as direct appends, every turn durable when the run returns."""
    from pydantic_ai import Agent
    from pydantic_ai.models.test import TestModel

    from tplog import Store as RulesStore
    from tplog.integrations.pydantic_ai import ThreadRecorder

    tid = "0193f0c4-2d1e-7a00-8000-000000000001"
    agent_id = "7d9f3c2e-0000-4000-8000-000000000001"
    clock = iter(f"2025-01-01T00:00:{i:02d}Z" for i in range(60))

    async def record(s: RulesStore, append: Any) -> None:
        rec = ThreadRecorder(append, tid, clock=lambda: next(clock))
        await rec.start_thread(title="t")
        await rec.register_agent(agent_id, "bot", model_name="test")
        await rec.run(Agent(TestModel()), "Hello!", agent_id=agent_id)
        await rec.run(Agent(TestModel(call_tools=[])), "Again", agent_id=agent_id)

    with RulesStore(tmp_path / "pipe") as s:
        p = s.pipeline(tid)
        asyncio.run(record(s, p.aappend))
        assert not p._pending  # the run's turn end waited for everything
        piped = [type(r.event).__name__ for r in s.read(tid)]
        turns = [type(t).__name__ for t in s.thread(tid).turns]
    clock = iter(f"2025-01-01T00:00:{i:02d}Z" for i in range(60))
    with RulesStore(tmp_path / "direct") as s:
        asyncio.run(record(s, lambda evs: s.append(tid, evs)))
        assert [type(r.event).__name__ for r in s.read(tid)] == piped
    assert turns == ["UserTurn", "AgentTurn", "UserTurn", "AgentTurn"]
