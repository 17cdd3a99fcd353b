"""A fork's append through the recorder contract, on every backend in FACTORIES: the head it
leaves takes every lifecycle value from its seed (:func:`tplog.backends.common.apply_fork`),
and a parent that is missing, deleted or too short is refused with an error naming it
(:func:`tplog.backends.common.check_fork_parent`), with nothing written.

Written for the survivors of tplog/backends/contract.py's mutation run (tests/MUTANTS.md): the
contract suite's forks had seeds whose values the fork's own ThreadStarted gave the head anyway.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from conftest import T, agent_start, completed, exchange, register, response, started, user
from contract_helpers import (
    append,
    encode,
    part,
    rec_fixture,  # noqa: F401  (the `rec` fixture)
    tid,
    tombstone,
)

from tplog import Store
from tplog.backends.contract import ForkSeed, Recorder, ThreadAppend, ThreadHead
from tplog.errors import InvalidInputError, NotFoundError, ThreadDeletedError
from tplog.events import AgentTurnInterrupted, ThreadInfoChanged
from tplog.protocol import model as m


def fork_append(fork_id: str, parent: str, at: int, seed_head: ThreadHead, *, check_rules: bool = False,
                **started_kw: object) -> ThreadAppend:
    """A fork's append (its ThreadStarted alone, the seed); the ThreadStarted declares no link
    unless given ``relationships``, so the head's values can only come from the seed."""
    ts = started(fork_id, **started_kw)
    return ThreadAppend(thread_id=fork_id, events=encode([ts]), expected="no_stream",
                        fork=ForkSeed(parent=parent, at=at, head=seed_head), check_rules=check_rules)


@pytest.mark.parametrize("check_rules", [False, True])
def test_a_forks_head_is_its_seeds_values_at_the_fork_point(rec: Recorder, check_rules: bool) -> None:
    p, f = tid(), tid()
    append(rec, part(p, [started(p), register(), *exchange(), *exchange()]))  # seqs 1..10
    seed = ThreadHead(thread_id="", user_turns=2, agent_turns=3, messages=4, links=5, activity="interrupted",
                      title="seeded", metadata={"from": "seed"}, agent_ids=["a1", "a2"], parent="seed-parent",
                      agent_names={"a1": "Writer"},
                      # rule values and an open turn in the seed are not the fork's: it keeps none
                      agents=["x"], turn_end=7, open_turn_start=8, open_turn_last=9, rules=1,
                      open_turn_agent="a9", open_turn_seq=3)
    # the fork's own ThreadStarted says otherwise about each of them
    [res] = append(rec, fork_append(f, p, 6, seed, check_rules=check_rules, title="own", metadata={"own": 1},
                                    relationships=m.ThreadRelationships(links=[
                                        m.ThreadLink(thread_id=p, relation="spawned_from")])))
    assert (res.thread_id, res.first_seq, res.last_seq) == (f, 1, 6)
    head = rec.head(f)
    assert head is not None
    got = msgspec.structs.asdict(head)
    for volatile in ("last_position", "created_ns", "updated_ns", "stored_bytes"):
        got.pop(volatile)
    assert got == {
        "thread_id": f, "version": 6, "status": "active", "open_turn_agent": None, "open_turn_seq": 0,
        "user_turns": 2, "agent_turns": 3, "messages": 4, "links": 5, "scope": None,
        # not kept (rules 0): the next checked append folds them from the spliced log
        "agents": [], "turn_end": None, "open_turn_start": None, "open_turn_last": None, "rules": 0,
        "activity": "interrupted", "title": "seeded", "metadata": {"from": "seed"}, "agent_ids": ["a1", "a2"],
        "parent": "seed-parent", "fork_of": p, "fork_at": 6, "agent_names": {"a1": "Writer"}}
    assert head.stored_bytes > 0 and head.created_ns > 0 and head.updated_ns >= head.created_ns


def test_a_seed_without_lifecycle_values_clears_the_started_events(rec: Recorder) -> None:
    p, f = tid(), tid()
    append(rec, part(p, [started(p), *exchange()]))
    append(rec, fork_append(f, p, 5, ThreadHead(thread_id=""), title="own", metadata={"own": 1},
                            relationships=m.ThreadRelationships(links=[
                                m.ThreadLink(thread_id=p, relation="spawned_from")])))
    head = rec.head(f)
    assert head is not None
    assert (head.title, head.metadata, head.parent, head.agent_ids, head.activity) == (None, None, None, [], "idle")
    assert (head.version, head.fork_of, head.fork_at) == (5, p, 5)


def test_a_fork_of_a_missing_parent_is_refused_naming_it(rec: Recorder) -> None:
    p, f = tid(), tid()
    with pytest.raises(NotFoundError, match=rf"^thread {p} does not exist$"):
        append(rec, fork_append(f, p, 1, ThreadHead(thread_id="")))
    assert rec.head(f) is None and rec.positions() == (0,) * rec.logs


def test_a_fork_past_the_parents_end_is_refused_naming_both(rec: Recorder) -> None:
    p, f = tid(), tid()
    append(rec, part(p, [started(p), user()]))
    before = rec.positions()
    with pytest.raises(InvalidInputError, match=rf"^fork of thread {p}: at=3 is past its last seq 2$"):
        append(rec, fork_append(f, p, 3, ThreadHead(thread_id="")))
    assert rec.head(f) is None and rec.positions() == before
    append(rec, fork_append(f, p, 2, ThreadHead(thread_id="")))  # its last seq itself: a fork
    head = rec.head(f)
    assert head is not None and (head.version, head.fork_at) == (2, 2)


def test_a_fork_of_a_deleted_parent_is_refused_naming_it(rec: Recorder) -> None:
    p, f = tid(), tid()
    append(rec, part(p, [started(p), user()]))
    rec.delete_thread(p, tombstone()).result(timeout=30)
    before = rec.positions()
    with pytest.raises(ThreadDeletedError, match=rf"^thread {p} was deleted; it cannot be forked$"):
        append(rec, fork_append(f, p, 1, ThreadHead(thread_id="")))
    assert rec.head(f) is None and rec.positions() == before


@pytest.mark.parametrize("backend", ["memory:", "lmdb"])
def test_a_fork_lists_with_the_lifecycle_its_parent_had_at_the_fork_point(tmp_path: Path, backend: str) -> None:
    """Through the Store: a renamed parent, an interrupted turn, a second agent: the fork is
    listed by the values of the parent's first events, not by its own copied ThreadStarted."""
    interrupted = AgentTurnInterrupted(interruption=m.Interruption(reason="user_cancel", interrupted_at=T))
    with Store(backend if backend == "memory:" else tmp_path / "s") as s:
        p = tid()
        s.append(p, [started(p, title="first", metadata={"v": 1}), register(), register("a2")])
        s.append(p, [ThreadInfoChanged(title="renamed", metadata={"v": 2}), user(), agent_start("a2"), response(
            agent="a2"), interrupted])  # seqs 4..8
        s.append(p, [user(), agent_start(), response(), completed()])  # 9..12: idle again, title kept
        s.append(p, [ThreadInfoChanged(title="later", metadata={"v": 3})])  # 13
        f = s.fork(p, 8).thread_id
        head = s.backend.head(f)
        assert head is not None
        assert (head.title, head.metadata, head.activity, head.agent_ids, head.parent) == (
            "renamed", {"v": 2}, "interrupted", ["a1", "a2"], p)
        assert (head.user_turns, head.agent_turns, head.messages) == (1, 1, 1)
        assert [h.thread_id for h in s.threads(activity="interrupted").threads] == [f]
        assert [h.thread_id for h in s.threads(title="renamed").threads] == [f]
        assert [h.thread_id for h in s.threads(metadata={"v": 2}).threads] == [f]
        assert f not in [h.thread_id for h in s.threads(roots=True).threads]
