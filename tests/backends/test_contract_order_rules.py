"""The order rules every backend checks with :func:`tplog.backends.common.advance`, on every
backend in FACTORIES: each refusal's whole message (the thread, the event's index in the append,
the seq it would have had, what to append instead), nothing written, and the head's counters
after the events that pass.

Written for the survivors of tplog/backends/contract.py's mutation run (tests/MUTANTS.md): the
suite checked these refusals by type only.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from conftest import agent_start, completed, link, register, response, started, user
from contract_helpers import (
    append,
    encode,
    part,
    rec_fixture,  # noqa: F401  (the `rec` fixture)
    tid,
)

from tplog.backends.contract import Recorder, ThreadAppend
from tplog.errors import InvalidEventError
from tplog.events import AgentTurnInterrupted, ThreadDeleted, ThreadInfoChanged
from tplog.protocol import model as m

#: (what the thread holds, the refused append, the message with {a} for the thread id)
CASES: dict[str, tuple[Callable[[str], list[Any]], Callable[[str], list[Any]], str]] = {
    "started twice": (lambda a: [started(a)], lambda a: [user(), started(a)],
                      "thread {a}, events[1] (would be seq 3): ThreadStarted must be the first event of a thread"),
    "started for another thread": (
        lambda a: [], lambda a: [started("other")],
        "thread {a}, events[0] (would be seq 1): ThreadStarted names thread 'other' but is appended to '{a}'"),
    "no ThreadStarted first": (
        lambda a: [], lambda a: [user()],
        "thread {a}, events[0] (would be seq 1): the first event of a thread must be ThreadStarted, "
        "not UserTurnSubmitted"),
    "a message with no open turn": (
        lambda a: [started(a)], lambda a: [user(), response()],
        "thread {a}, events[1] (would be seq 3): MessageRecorded needs an open agent turn; "
        "append AgentTurnStarted first"),
    "a completion with no open turn": (
        lambda a: [started(a), agent_start(), completed()], lambda a: [completed()],
        "thread {a}, events[0] (would be seq 4): AgentTurnCompleted needs an open agent turn; "
        "append AgentTurnStarted first"),
    "a user turn in an open agent turn": (
        lambda a: [started(a), user()], lambda a: [agent_start("a7"), response(agent="a7"), user()],
        "thread {a}, events[2] (would be seq 5): the agent turn of 'a7' opened at seq 3 is still open; "
        "append AgentTurnCompleted or AgentTurnInterrupted first"),
    "a second agent turn in an open one": (
        lambda a: [started(a), agent_start("a2")], lambda a: [agent_start()],
        "thread {a}, events[0] (would be seq 3): the agent turn of 'a2' opened at seq 2 is still open; "
        "append AgentTurnCompleted or AgentTurnInterrupted first"),
    "a tombstone appended": (
        lambda a: [started(a)], lambda a: [user(), ThreadDeleted()],
        "thread {a}, events[1] (would be seq 3): delete a thread with Store.delete_thread(), not by appending"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_append_against_the_order_rules_is_refused_naming_the_event(rec: Recorder, case: str) -> None:
    held, refused, message = CASES[case]
    a = tid()
    if held(a):
        append(rec, part(a, held(a)))
    before = (rec.head(a), rec.positions())
    with pytest.raises(InvalidEventError, match=f"^{re.escape(message.format(a=a))}$"):
        append(rec, part(a, refused(a)))
    assert (rec.head(a), rec.positions()) == before


def test_the_head_counts_what_the_order_rules_let_through(rec: Recorder) -> None:
    a, b = tid(), tid()
    declared = m.ThreadRelationships(links=[m.ThreadLink(thread_id=b, relation="cites"),
                                            m.ThreadLink(thread_id=b, relation="answers")])
    interrupted = AgentTurnInterrupted(interruption=m.Interruption(reason="user_cancel", interrupted_at="t"))
    append(rec, part(a, [started(a, relationships=declared), register(), ThreadInfoChanged(title="t")]))
    head = rec.head(a)
    assert head is not None
    assert (head.version, head.links, head.user_turns, head.agent_turns, head.messages) == (3, 2, 0, 0, 0)
    append(rec, part(a, [user(), agent_start("a3"), response(), response(), link(b)]))
    head = rec.head(a)
    assert head is not None
    assert (head.version, head.links, head.user_turns, head.agent_turns, head.messages) == (8, 3, 1, 1, 2)
    assert (head.open_turn_agent, head.open_turn_seq, head.activity) == ("a3", 5, "active")
    append(rec, part(a, [interrupted, user(), agent_start(), completed()]))
    head = rec.head(a)
    assert head is not None
    assert (head.version, head.links, head.user_turns, head.agent_turns, head.messages) == (12, 3, 2, 2, 2)
    assert (head.open_turn_agent, head.open_turn_seq, head.activity) == (None, 0, "idle")


def test_a_checked_append_to_an_unchecked_thread_folds_the_rules_values_first(rec: Recorder) -> None:
    """A thread written without the validation rules keeps none of their values (rules 0); the
    first checked append folds them from its log, then keeps them."""
    a = tid()
    append(rec, part(a, [started(a), register()]))
    head = rec.head(a)
    assert head is not None and (head.rules, head.agents) == (0, [])
    append(rec, part(a, [user()], check_rules=True))
    head = rec.head(a)
    assert head is not None and (head.rules, head.agents) == (1, ["a1"])
    # and the registry it folded is what the rules check against: an unregistered agent is refused
    refusal = (rf"^thread {a}, events\[1\] \(would be seq 5\): agent 'nobody' is not in the thread's agent "
               r"registry \(registered: a1, a2\).*\[v3.3-agent-ref\]")
    with pytest.raises(InvalidEventError, match=refusal) as e:
        append(rec, part(a, [register("a2"), agent_start("nobody")], check_rules=True))
    assert (e.value.seq, e.value.thread_id, e.value.rule) == (5, a, "v3.3-agent-ref")
    head = rec.head(a)
    assert head is not None and (head.version, head.agents) == (3, ["a1"])


def test_an_append_with_several_threads_names_the_refused_one(rec: Recorder) -> None:
    a, b = tid(), tid()
    with pytest.raises(InvalidEventError, match=rf"^thread {b}, events\[0\] \(would be seq 1\): the first event"):
        append(rec, part(a, [started(a)]), ThreadAppend(thread_id=b, events=encode([user()])))
    assert rec.head(a) is None and rec.head(b) is None
