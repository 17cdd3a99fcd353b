"""The history rules' values and fast paths (tplog.protocol.rules), each seen through appends.

A head written without the rules' values (``check_rules=False``, or a store older than them)
gets them folded from the log at the next checked append (``rules_from_log``): where the last
turn ended, for every kind of last turn, and the open turn's start. The tool-call check answers
the common cases from the ``state`` projection's row and folds the thread only for the rare ones
(an answer to a call of a turn interrupted in the same append); both must give validate's answer.
Written to kill the surviving mutants of tests/MUTANTS.md (tplog/protocol/rules.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_rules import T0, _agent_turn, _new_thread_events, _user_answer, ts
from test_validate import A1

import tplog.backends.common as common
from tplog.errors import InvalidEventError
from tplog.events import (
    AgentRegistered,
    AgentTurnCompleted,
    AgentTurnInterrupted,
    AgentTurnStarted,
    Event,
    LinkAdded,
    MessageRecorded,
    ThreadInfoChanged,
    ThreadStarted,
    UserTurnSubmitted,
)
from tplog.protocol import model as m
from tplog.protocol.validate import validate
from tplog.store import Store


def _response(at: int, *parts: m.MessagePart) -> MessageRecorded:
    return MessageRecorded(message=m.ResponseMessage(timestamp=ts(at), agent_id=A1, parts=list(parts)))


def _request(at: int, *parts: m.MessagePart) -> MessageRecorded:
    return MessageRecorded(message=m.RequestMessage(timestamp=ts(at), agent_id=A1, parts=list(parts)))


def _call(cid: str) -> m.ToolCallPart:
    return m.ToolCallPart(tool_name="f", tool_call_id=cid, args={})


def _ret(cid: str) -> m.ToolReturnPart:
    return m.ToolReturnPart(tool_name="f", tool_call_id=cid, content="r", status="success")


def _interrupted(at: int) -> AgentTurnInterrupted:
    return AgentTurnInterrupted(interruption=m.Interruption(reason="user_cancelled", interrupted_at=ts(at)))


def _refused(store: Store, tid: str, events: list[Event]) -> InvalidEventError:
    version = store.head(tid).version
    with pytest.raises(InvalidEventError) as exc:
        store.append(tid, events)
    assert store.head(tid).version == version  # nothing written
    return exc.value


# --------------------------------------------------------------------------- values folded from the log

# (the thread after its registration, where its last turn ended: a probe turn starting one second
# earlier is refused, one starting then is accepted)
LAST_TURNS: dict[str, tuple[list[Event], int]] = {
    "complete agent turn": (_agent_turn([], [], at=10), 13),  # ends at completed_at, not started_at
    "interrupted agent turn": (_agent_turn([], [], at=10, end="interrupted"), 13),  # at interrupted_at
    "user turn after an agent turn": (
        [*_agent_turn([], [], at=10), UserTurnSubmitted(turn=m.UserTurn(submitted_at=ts(20), parts=[
            m.UserPromptPart(content="go on")]))], 20),
    # completed_at that is no timestamp (written unchecked): the turn counts as ending when it started
    "agent turn whose completed_at does not parse": (
        [UserTurnSubmitted(turn=m.UserTurn(submitted_at=ts(5), parts=[m.UserPromptPart(content="hi")])),
         AgentTurnStarted(agent_id=A1, started_at=ts(10)), AgentTurnCompleted(completed_at="soon")], 10),
}


@pytest.mark.parametrize("last", sorted(LAST_TURNS))
@pytest.mark.parametrize("probe", ["agent", "user"])
def test_where_the_last_turn_ended_is_folded_from_an_unchecked_log(tmp_path: Path, last: str, probe: str) -> None:
    events, end = LAST_TURNS[last]
    tid = str(uuid.uuid4())
    path = tmp_path / "s"
    with Store(path, check_rules=False) as raw:
        raw.append(tid, [*_new_thread_events(tid), *events])
        assert raw.head(tid).rules == 0  # the rules' values are not kept: the next checked append folds them

    def turn(at: int) -> Event:
        if probe == "agent":
            return AgentTurnStarted(agent_id=A1, started_at=ts(at))
        return UserTurnSubmitted(turn=m.UserTurn(submitted_at=ts(at), parts=[m.UserPromptPart(content="x")]))

    with Store(path) as store:
        version = store.head(tid).version
        exc = _refused(store, tid, [turn(end - 1)])
        where = "$.started_at" if probe == "agent" else "$.turn.submitted_at"
        assert (exc.rule, exc.thread_id, exc.seq, exc.path) == ("v3.4-turn-overlap", tid, version + 1, where)
        assert str(exc) == (f"thread {tid}, events[0] (would be seq {version + 1}): the turn starts before the "
                            f"previous turn ended [v3.4-turn-overlap] (at {where})")
        store.append(tid, [turn(end)])  # not earlier: accepted
        assert store.head(tid).rules == 1


def test_the_open_turn_is_folded_from_an_unchecked_log(tmp_path: Path) -> None:
    tid = str(uuid.uuid4())
    path = tmp_path / "s"
    with Store(path, check_rules=False) as raw:
        raw.append(tid, [*_new_thread_events(tid), *_agent_turn([], [], at=2),
                         AgentTurnStarted(agent_id=A1, started_at=ts(10)), _response(12, m.TextPart(content="a"))])
    with Store(path) as store:
        exc = _refused(store, tid, [AgentTurnCompleted(completed_at=ts(9))])
        assert (exc.rule, exc.seq, exc.path) == ("v3.4-turn-interval", 7, "$.completed_at")
        exc = _refused(store, tid, [_interrupted(9)])
        assert (exc.rule, exc.seq, exc.path) == ("v3.4-turn-interval", 7, "$.interruption.interrupted_at")
        exc = _refused(store, tid, [_response(11, m.TextPart(content="b"))])
        assert (exc.rule, exc.seq, exc.path) == ("v3.5-message-order", 7, "$.message.timestamp")
        store.append(tid, [AgentTurnCompleted(completed_at=ts(10))])  # at its start: not before it
        assert validate(store.export(tid)).ok


def test_a_thread_with_no_turn_gets_no_turn_values(tmp_path: Path) -> None:
    tid = str(uuid.uuid4())
    path = tmp_path / "s"
    with Store(path, check_rules=False) as raw:
        raw.append(tid, _new_thread_events(tid))
    with Store(path) as store:
        store.append(tid, [AgentTurnStarted(agent_id=A1, started_at="2000-01-01T00:00:00Z")])
        h = store.head(tid)
        assert (h.rules, h.agents, h.turn_end, h.open_turn_last) == (1, [A1], None, None)


# --------------------------------------------------------------------------- tool-call answers: fast and slow paths


@pytest.fixture
def folds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times an append's tool-call check folded the thread (the slow path): the real
    fold, counted."""
    calls: list[int] = []
    real = common.exported_calls

    def counted(events: list[Event]) -> set[str]:
        calls.append(len(events))
        return real(events)

    monkeypatch.setattr(common, "exported_calls", counted)
    return calls


def _open_turn(tid: str, store: Store, *messages: Event, start: int = 10) -> None:
    store.append(tid, [AgentTurnStarted(agent_id=A1, started_at=ts(start)), *messages])


# (what is stored after the registration, the append that answers, whether validate's answer is
# "refused", how many folds the check takes on LMDB and on the memory backend, which keeps no
# state row: there every answer the append itself cannot tell comes from the fold, the same answers)
Case = tuple[Callable[[], list[list[Event]]], list[Event], bool, tuple[int, int]]
ANSWERS: dict[str, Case] = {
    "call and answer in the same append": (lambda: [], _agent_turn(["c1"], ["c1"], at=10), False, (0, 0)),
    "deferred call of an earlier turn of the append, answered in a message": (
        lambda: [], [*_agent_turn(["d1"], [], at=10), AgentTurnStarted(agent_id=A1, started_at=ts(20)),
                     _request(21, _ret("d1")), AgentTurnCompleted(completed_at=ts(22))], False, (0, 0)),
    "deferred calls of two turns of the append": (
        lambda: [], [*_agent_turn(["d1"], [], at=10), *_agent_turn(["d2"], [], at=20), _user_answer("d1", 30)],
        False, (0, 0)),
    # the common cases: the state projection's row answers, no fold
    "second answer in the open turn": (
        lambda: [[AgentTurnStarted(agent_id=A1, started_at=ts(10)), _response(11, _call("c1")),
                  _request(12, _ret("c1"))]], [_request(13, _ret("c1"))], False, (0, 1)),
    "answer after the open turn completes": (
        lambda: [[AgentTurnStarted(agent_id=A1, started_at=ts(10)), _response(11, _call("c1")),
                  _request(12, _ret("c1"))]], [AgentTurnCompleted(completed_at=ts(13)), _user_answer("c1", 14)],
        False, (0, 1)),
    "deferred call of an earlier turn": (
        lambda: [_agent_turn(["d1"], [], at=10)], [_user_answer("d1", 20)], False, (0, 1)),
    "deferred call, answered after an open turn is interrupted": (
        lambda: [_agent_turn(["d1"], [], at=10), [AgentTurnStarted(agent_id=A1, started_at=ts(20))]],
        [_interrupted(21), _user_answer("d1", 22)], False, (0, 1)),
    # the open turn is interrupted in the answering append: only the fold knows which cycles it keeps
    "answered call of a turn interrupted in the append": (
        lambda: [[AgentTurnStarted(agent_id=A1, started_at=ts(10)), _response(11, _call("c1")),
                  _request(12, _ret("c1"))]], [_interrupted(13), _user_answer("c1", 14)], False, (1, 1)),
    "unanswered call of a turn interrupted in the append": (
        lambda: [[AgentTurnStarted(agent_id=A1, started_at=ts(10)), _response(11, _call("c1")),
                  _request(12, _ret("c1")), _response(13, _call("c2")),
                  _request(14, m.RetryPromptPart(content="later"))]],
        [_interrupted(15), _user_answer("c2", 16)], True, (1, 1)),
}


@pytest.mark.parametrize("backend", ["lmdb", "memory"])
@pytest.mark.parametrize("case", sorted(ANSWERS))
def test_tool_call_answers_take_the_fast_path_unless_a_fold_must_decide(
        tmp_path: Path, folds: list[int], case: str, backend: str) -> None:
    stored, append, refused, n_folds = ANSWERS[case]
    tid = str(uuid.uuid4())
    with Store("memory:" if backend == "memory" else tmp_path / "s") as store:
        store.append(tid, _new_thread_events(tid))
        for batch in stored():
            store.append(tid, batch)
        version = store.head(tid).version
        del folds[:]
        if refused:
            exc = _refused(store, tid, append)
            answer = len(append) - 1  # the answer is the append's last event
            assert (exc.rule, exc.thread_id, exc.seq, exc.path) == (
                "v3.2-tool-call-id", tid, version + 1 + answer, "$.turn.parts[0].tool_call_id")
            assert str(exc) == (f"thread {tid}, events[{answer}] (would be seq {exc.seq}): tool_call_id 'c2' matches "
                                "no earlier tool-call the thread holds [v3.2-tool-call-id] "
                                "(at $.turn.parts[0].tool_call_id)")
        else:
            store.append(tid, append)
            assert validate(store.export(tid)).ok
        assert len(folds) == n_folds[backend == "memory"], folds


def test_one_fold_answers_every_answer_of_one_event(tmp_path: Path, folds: list[int]) -> None:
    tid = str(uuid.uuid4())
    with Store(tmp_path / "s") as store:
        store.append(tid, _new_thread_events(tid))
        _open_turn(tid, store, _response(11, _call("c1"), _call("c2")), _request(12, _ret("c1"), _ret("c2")))
        del folds[:]
        store.append(tid, [_interrupted(13), UserTurnSubmitted(turn=m.UserTurn(submitted_at=ts(14), parts=[
            _ret("c1"), _ret("c2")]))])
        assert len(folds) == 1
        del folds[:]
        # an unknown id after a known one in the same event: refused, with the second part's path
        _open_turn(tid, store, _response(21, _call("c3")), _request(22, _ret("c3")), start=20)
        exc = _refused(store, tid, [_interrupted(23), UserTurnSubmitted(turn=m.UserTurn(submitted_at=ts(24), parts=[
            _ret("c3"), _ret("c9")]))])
        assert (exc.rule, exc.path) == ("v3.2-tool-call-id", "$.turn.parts[1].tool_call_id")
        assert len(folds) == 1


# --------------------------------------------------------------------------- exact messages


def test_a_link_to_a_non_uuid_thread_is_refused_with_the_rule_and_id(store: Store) -> None:
    tid = str(uuid.uuid4())
    store.append(tid, _new_thread_events(tid))
    link: Any = m.ThreadLink(thread_id="parent-7", relation="spawned_from")
    exc = _refused(store, tid, [LinkAdded(link=link, at=T0)])
    assert (exc.rule, exc.seq, exc.path) == ("v3.8-link-uuid", 3, "$.link.thread_id")
    assert str(exc) == (f"thread {tid}, events[0] (would be seq 3): linked thread_id 'parent-7' is not a UUID "
                        "[v3.8-link-uuid] (at $.link.thread_id)")


# ------------------------------------------------------------- timestamps: to the microsecond, zones apart


def test_message_order_compares_to_the_microsecond_and_never_zoned_with_zoneless(store: Store) -> None:
    """validate orders zoned times among themselves and zoneless ones among themselves, never
    one against the other; the store's stamps must refuse exactly the same messages."""
    tid = str(uuid.uuid4())
    store.append(tid, [*_new_thread_events(tid), AgentTurnStarted(agent_id=A1, started_at="2025-01-20T10:00:00Z")])

    def msg(at: str) -> list[Event]:
        return [MessageRecorded(message=m.ResponseMessage(timestamp=at, agent_id=A1,
                                                          parts=[m.TextPart(content=at)]))]

    def refused(at: str) -> None:
        exc = _refused(store, tid, msg(at))
        assert (exc.rule, exc.seq, exc.path) == ("v3.5-message-order", store.head(tid).version + 1,
                                                 "$.message.timestamp")
        assert str(exc).endswith(f"{at!r} is earlier than the turn's message before it [v3.5-message-order] "
                                 "(at $.message.timestamp)")

    store.append(tid, msg("2025-01-20T10:00:05.200000Z"))
    store.append(tid, msg("2025-01-20T10:00:05.500001Z"))  # later by the fraction alone
    refused("2025-01-20T10:00:05.400000Z")  # an even microsecond count after an odd one
    store.append(tid, msg("2025-01-20T10:00:05.600000Z"))
    refused("2025-01-20T10:00:05.500001Z")  # an odd one after an even one
    store.append(tid, msg("2025-01-20T10:00:04"))  # zoneless: not ordered against the zoned ones
    refused("2025-01-20T10:00:03.999999")  # ... but against the zoneless one before it
    store.append(tid, msg("2025-01-20T10:00:04.000001"))
    store.append(tid, msg("2025-01-20T10:00:01Z"))  # zoned after zoneless: not ordered either
    store.append(tid, [AgentTurnCompleted(completed_at="2025-01-20T10:00:06Z")])
    report = validate(store.export(tid))
    assert report.ok and {f.rule for f in report.warnings} == {"timestamp-timezone"}


# --------------------------------------------------------------------------- per-event rules of every event kind

_OK = "2025-01-20T10:00:00Z"
_LINKED = str(uuid.uuid4())


def _first(tid: str, **fields: Any) -> list[Event]:
    return [ThreadStarted(thread_id=tid, created_at=_OK, **fields)]


# (events appended to a new thread (None: after its start and registration, at seq 3), the rule, the path)
PER_EVENT: dict[str, tuple[Callable[[str], list[Event]], str, str]] = {
    "ThreadStarted updated_at": (lambda t: _first(t, updated_at="later"), "v3.1-timestamp", "$.updated_at"),
    "ThreadStarted's second link": (lambda t: _first(t, relationships=m.ThreadRelationships(links=[
        m.ThreadLink(thread_id=_LINKED, relation="referenced"), m.ThreadLink(thread_id="p", relation="spawned_from")])),
        "v3.8-link-uuid", "$.relationships.links[1].thread_id"),
    "AgentTurnStarted started_at": (lambda t: [AgentTurnStarted(agent_id=A1, started_at="x")], "v3.1-timestamp",
                                    "$.started_at"),
    "ThreadInfoChanged updated_at": (lambda t: [ThreadInfoChanged(title="t", updated_at="x")], "v3.1-timestamp",
                                     "$.updated_at"),
    "LinkAdded at": (lambda t: [LinkAdded(link=m.ThreadLink(thread_id=_LINKED, relation="referenced"), at="x")],
                     "v3.1-timestamp", "$.at"),
    "a user turn's tool-return status": (lambda t: [UserTurnSubmitted(turn=m.UserTurn(submitted_at=_OK, parts=[
        m.ToolReturnPart(tool_name="f", tool_call_id="c1", content="r", status="ok")]))],
        "v3-tool-return-status", "$.turn.parts[0].status"),
}


@pytest.mark.parametrize("case", sorted(PER_EVENT))
def test_each_event_kind_is_checked_with_its_own_paths(store: Store, case: str) -> None:
    make, rule, path = PER_EVENT[case]
    tid = str(uuid.uuid4())
    events = make(tid)
    if not isinstance(events[0], ThreadStarted):
        store.append(tid, _new_thread_events(tid))
    seq = store.head(tid).version + 1 if store.exists(tid) else 1
    with pytest.raises(InvalidEventError) as exc:
        store.append(tid, events)
    assert (exc.value.rule, exc.value.thread_id, exc.value.seq, exc.value.path) == (rule, tid, seq, path)
    assert str(exc.value).startswith(f"thread {tid}, events[0] (would be seq {seq}): ")
    assert str(exc.value).endswith(f"[{rule}] (at {path})")


def test_a_call_and_its_answer_in_one_message_with_a_custom_uri_scheme(store: Store) -> None:
    """Accepted with warnings only (validate agrees): the per-event check keeps what it needs for
    the answer's call and the scheme."""
    tid = str(uuid.uuid4())
    store.append(tid, [*_new_thread_events(tid), AgentTurnStarted(agent_id=A1, started_at=ts(1)),
                       _response(2, _call("c1"), m.ToolReturnPart(tool_name="f", tool_call_id="c1", content="r",
                                                                  status="success",
                                                                  content_ref=m.ContentRef(uri="custom:thing"))),
                       AgentTurnCompleted(completed_at=ts(3))])
    report = validate(store.export(tid))
    assert report.ok and [f.rule for f in report.warnings] == ["v3.7-content-ref-scheme"]


def test_the_history_rules_name_the_event_and_say_what_is_wrong(store: Store) -> None:
    tid = str(uuid.uuid4())
    store.append(tid, [ThreadStarted(thread_id=tid, created_at=T0)])

    def refused(events: list[Event], i: int, message: str, rule: str, path: str) -> None:
        exc = _refused(store, tid, events)
        seq = store.head(tid).version + 1 + i
        assert (exc.rule, exc.seq, exc.path) == (rule, seq, path)
        assert str(exc) == f"thread {tid}, events[{i}] (would be seq {seq}): {message} [{rule}] (at {path})"

    start = AgentTurnStarted(agent_id=A1, started_at=ts(10))
    refused([ThreadInfoChanged(title="t"), start], 1, f"agent {A1!r} is not in the thread's agent registry "
            "(registered: none); append AgentRegistered first", "v3.3-agent-ref", "$.agent_id")
    store.append(tid, [AgentRegistered(agent=m.AgentConfig(agent_id="b", agent_name="b", created_at=T0)),
                       AgentRegistered(agent=m.AgentConfig(agent_id="a", agent_name="a", created_at=T0))])
    refused([ThreadInfoChanged(title="t"), start], 1, f"agent {A1!r} is not in the thread's agent registry "
            "(registered: a, b); append AgentRegistered first", "v3.3-agent-ref", "$.agent_id")
    store.append(tid, [AgentRegistered(agent=m.AgentConfig(agent_id=A1, agent_name="a1", created_at=T0)), start,
                       _response(12, m.TextPart(content="x"))])
    refused([_response(13, m.TextPart(content="y")), _response(11, m.TextPart(content="z"))], 1,
            f"{ts(11)!r} is earlier than the turn's message before it", "v3.5-message-order", "$.message.timestamp")
    refused([_response(13, m.TextPart(content="y")), AgentTurnCompleted(completed_at=ts(9))], 1,
            "the agent turn ends before it started", "v3.4-turn-interval", "$.completed_at")
    refused([_response(13, _call("c1")), _request(14, _ret("c9"))], 1,
            "tool_call_id 'c9' matches no earlier tool-call the thread holds", "v3.2-tool-call-id",
            "$.message.parts[0].tool_call_id")


@pytest.mark.parametrize("end", ["completed without completed_at", "interrupted"])
def test_a_turn_without_an_end_time_ends_when_it_started(store: Store, end: str) -> None:
    """completed_at is optional: such a turn counts as ending at its start, for the store as for
    validate (the next turn may not start before it)."""
    from tplog.projections.fold import fold

    tid = str(uuid.uuid4())
    closing: Event = AgentTurnCompleted() if end != "interrupted" else _interrupted(10)
    store.append(tid, [*_new_thread_events(tid), AgentTurnStarted(agent_id=A1, started_at=ts(10)), closing])
    early = AgentTurnStarted(agent_id=A1, started_at=ts(9))
    exc = _refused(store, tid, [early])
    assert (exc.rule, exc.seq, exc.path) == ("v3.4-turn-overlap", 5, "$.started_at")
    doc = fold([*(e.event for e in store.read(tid)), early, AgentTurnCompleted(completed_at=ts(9))]).thread
    assert doc is not None and "v3.4-turn-overlap" in {f.rule for f in validate(doc).errors}
    store.append(tid, [AgentTurnStarted(agent_id=A1, started_at=ts(10))])
