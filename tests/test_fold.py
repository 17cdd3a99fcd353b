"""The fold: history events → ThreadProtocol v0.0.4 document + the turn in progress.

Hand-built event sequences for each v0.0.4 interruption scenario of the
amendments, plus properties: ``fold(events_from_thread(t)).thread == t`` and
``complete_cycles`` is idempotent.
"""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st
from msgspec import UNSET
from msgspec.structs import replace
from strategies import THREAD_SETTINGS, threads

from tplog.events import (
    AgentRegistered,
    AgentTurnCompleted,
    AgentTurnInterrupted,
    AgentTurnStarted,
    Event,
    LinkAdded,
    MessageRecorded,
    ThreadDeleted,
    ThreadInfoChanged,
    ThreadStarted,
    UserTurnSubmitted,
)
from tplog.projections.fold import Folder, complete_cycles, events_from_thread, fold
from tplog.protocol import model as m
from tplog.protocol.json import from_builtins, to_builtins

TID = "6f1c7a4e-3b1d-4c55-9d7e-111111111111"
T0 = "2025-01-20T10:00:00Z"


def ts(sec: int) -> str:
    return f"2025-01-20T10:{sec // 60:02d}:{sec % 60:02d}Z"


# --------------------------------------------------------------------------- builders


def req(*parts: m.MessagePart, t: int = 1, agent: str = "a1", **kw: Any) -> m.RequestMessage:
    return m.RequestMessage(timestamp=ts(t), agent_id=agent, parts=list(parts), **kw)


def resp(*parts: m.MessagePart, t: int = 2, agent: str = "a1", **kw: Any) -> m.ResponseMessage:
    return m.ResponseMessage(timestamp=ts(t), agent_id=agent, parts=list(parts), **kw)


def sysmsg(event_type: str = "data-app-note", t: int = 3, data: Any = None) -> m.SystemMessage:
    return m.SystemMessage(timestamp=ts(t), event_type=event_type, event_data=data if data is not None else {})


def prompt(text: str) -> m.UserPromptPart:
    return m.UserPromptPart(content=text)


def text(s: str) -> m.TextPart:
    return m.TextPart(content=s)


def call(cid: str, name: str = "get_weather", **args: Any) -> m.ToolCallPart:
    return m.ToolCallPart(tool_name=name, tool_call_id=cid, args=args or {"city": cid})


def ret(cid: str, name: str = "get_weather", status: str = "success", content: Any = "72F") -> m.ToolReturnPart:
    return m.ToolReturnPart(tool_name=name, tool_call_id=cid, status=status, content=content)


def rec(msg: m.Message) -> MessageRecorded:
    return MessageRecorded(message=msg)


def start_thread(**kw: Any) -> list[Event]:
    return [
        ThreadStarted(thread_id=TID, created_at=T0, **kw),
        AgentRegistered(agent=m.AgentConfig(agent_id="a1", agent_name="A1", created_at=T0)),
    ]


def user_turn(text_: str = "What's the weather?", t: int = 0) -> UserTurnSubmitted:
    return UserTurnSubmitted(turn=m.UserTurn(submitted_at=ts(t), parts=[prompt(text_)]))


def agent_turn(*msgs: m.Message, t: int = 1, agent: str = "a1") -> list[Event]:
    return [AgentTurnStarted(agent_id=agent, started_at=ts(t)), *(rec(x) for x in msgs)]


def interrupted(t: int = 15, reason: str = "user_cancelled") -> AgentTurnInterrupted:
    return AgentTurnInterrupted(interruption=m.Interruption(reason=reason, interrupted_at=ts(t)))


def done(t: int = 10, **kw: Any) -> AgentTurnCompleted:
    return AgentTurnCompleted(completed_at=ts(t), **kw)


def only_agent_turn(events: list[Event]) -> m.AgentTurn:
    res = fold(events)
    assert res.thread is not None
    agent_turns = [x for x in res.thread.turns if isinstance(x, m.AgentTurn)]
    assert len(agent_turns) == 1
    return agent_turns[0]


# --------------------------------------------------------------------------- basics


def test_empty_log_folds_to_nothing() -> None:
    res = fold([])
    assert res.thread is None and res.in_progress is None and not res.deleted and res.seq == 0


def test_thread_started_only() -> None:
    res = fold([ThreadStarted(thread_id=TID, created_at=T0, title="t", metadata={"k": 1})])
    assert res.thread is not None
    th = res.thread
    assert (th.thread_id, th.version, th.created_at, th.updated_at) == (TID, "0.0.4", T0, T0)
    assert th.title == "t" and th.metadata == {"k": 1}
    assert th.turns == [] and th.agents == {}
    assert th.relationships is UNSET
    assert res.in_progress is None and res.seq == 1


def test_user_and_completed_agent_turns() -> None:
    usage = m.Usage(input_tokens=10, output_tokens=5)
    events = [
        *start_thread(),
        user_turn("hi", t=0),
        *agent_turn(req(prompt("hi"), t=1), resp(text("hello"), t=2, finish_reason="stop"), t=1),
        done(t=3, total_usage=usage),
        user_turn("again", t=4),
    ]
    res = fold(events)
    assert res.thread is not None and res.in_progress is None
    turns = res.thread.turns
    assert [type(x) for x in turns] == [m.UserTurn, m.AgentTurn, m.UserTurn]
    a = turns[1]
    assert isinstance(a, m.AgentTurn)
    assert a.agent_id == "a1" and a.started_at == ts(1) and a.completed_at == ts(3)
    assert a.completion_status == "complete" and a.interruption is UNSET
    assert a.total_usage == usage
    assert [type(x) for x in a.messages] == [m.RequestMessage, m.ResponseMessage]
    assert res.thread.agents == {"a1": m.AgentConfig(agent_id="a1", agent_name="A1", created_at=T0)}
    assert res.seq == len(events)


def test_completed_turn_keeps_unreturned_tool_calls() -> None:
    """The v0.0.4 cycle rule applies to interrupted turns only: a complete turn is kept as recorded
    (a deferred tool call legitimately ends a completed run)."""
    msgs = [req(prompt("delete it")), resp(call("c1", "delete_file"))]
    turn = only_agent_turn([*start_thread(), *agent_turn(*msgs), done(deferred={"c1": "approval"})])
    assert turn.messages == msgs and turn.completion_status == "complete"


def test_agent_turn_extra_fields_survive() -> None:
    events = [*start_thread(), AgentTurnStarted(agent_id="a1", started_at=ts(1), extra={"x-run": 7}),
              rec(resp(text("ok"))), done()]
    assert only_agent_turn(events).extra == {"x-run": 7}


def test_agent_registered_again_replaces_config_and_custom_key() -> None:
    cfg1 = m.AgentConfig(agent_id="a1", agent_name="old", created_at=T0)
    cfg2 = m.AgentConfig(agent_id="a1", agent_name="new", created_at=T0)
    cfg3 = m.AgentConfig(agent_id="a2", agent_name="other", created_at=T0)
    res = fold([ThreadStarted(thread_id=TID, created_at=T0), AgentRegistered(agent=cfg1),
                AgentRegistered(agent=cfg3, key="helper"), AgentRegistered(agent=cfg2)])
    assert res.thread is not None
    assert res.thread.agents == {"a1": cfg2, "helper": cfg3}


# --------------------------------------------------------------------------- v0.0.4 interruption scenarios


def test_cancel_mid_final_response_after_complete_tool_cycle_keeps_calls_and_returns() -> None:
    """Amendments "Example Interruption Scenario": calls + returns are kept, the partial final
    response (no complete part) is not."""
    calls = resp(text("Let me check both."), call("paris"), call("berlin"), t=2, finish_reason="tool_call")
    returns = req(ret("paris", content={"temp": "72F"}), ret("berlin", content={"temp": "68F"}), t=5)
    partial_final = resp(t=8)  # cancelled mid-stream: no complete parts
    first = req(prompt("What's the weather in Paris and Berlin?"), t=1)
    events = [
        *start_thread(),
        user_turn("What's the weather in Paris and Berlin?"),
        *agent_turn(first, calls, returns, partial_final),
        interrupted(t=15),
    ]
    turn = only_agent_turn(events)
    assert turn.completion_status == "interrupted"
    assert turn.interruption == m.Interruption(reason="user_cancelled", interrupted_at=ts(15))
    assert turn.completed_at is UNSET
    assert turn.messages == [first, calls, returns]


def test_cancel_after_response_whose_tools_never_ran_drops_the_response() -> None:
    first = req(prompt("Get weather for Paris and Berlin"), t=1)
    unrun = resp(call("paris"), call("berlin"), t=2)
    events = [*start_thread(), *agent_turn(first, unrun), interrupted()]
    turn = only_agent_turn(events)
    assert turn.messages == [first]
    assert not any(isinstance(p, m.ToolCallPart) for x in turn.messages if not isinstance(x, m.SystemMessage)
                   for p in x.parts)


def test_unreturned_call_carried_by_a_request_is_dropped_from_an_interrupted_turn() -> None:
    """Found by test_rules' one-by-one property (CI, 2026-11-27): a request carrying a tool call that
    nothing returns was kept, so the store accepted a turn whose export failed
    v4-no-unreturned-tool-call-in-interrupted-turn. It goes as a response's would, with later returns."""
    q = req(prompt("q"), call("odd"), t=1)
    late = req(ret("odd"), prompt("more"), t=3)
    events = [*start_thread(), *agent_turn(q, resp(text("hm"), t=2), late), interrupted()]
    turn = only_agent_turn(events)
    assert turn.messages == [req(prompt("q"), t=1), resp(text("hm"), t=2), req(prompt("more"), t=3)]
    alone = [*start_thread(), *agent_turn(req(prompt("q"), t=1), req(call("x"), t=2)), interrupted()]
    assert only_agent_turn(alone).messages == [req(prompt("q"), t=1)]
    answered = [*start_thread(), *agent_turn(req(call("y"), t=1), req(ret("y"), t=2)), interrupted()]
    assert only_agent_turn(answered).messages == [req(call("y"), t=1), req(ret("y"), t=2)]


def test_text_only_response_before_interrupt_is_kept() -> None:
    first = req(prompt("Explain quantum computing"), t=1)
    answer = resp(m.ThinkingPart(content="hmm", provider_name="anthropic"), text("Quantum computing uses..."), t=2)
    events = [*start_thread(), *agent_turn(first, answer), interrupted()]
    assert only_agent_turn(events).messages == [first, answer]


def test_text_before_unrun_tool_call_in_a_later_cycle() -> None:
    """Complete cycle, then a text-only response, then a response with an unrun call: only the last goes."""
    q = req(prompt("q"), t=1)
    c1 = resp(call("a"), t=2)
    r1 = req(ret("a"), t=3)
    talk = resp(text("interim"), t=4)
    c2 = resp(call("b"), t=5)
    events = [*start_thread(), *agent_turn(q, c1, r1, talk, c2), interrupted()]
    assert only_agent_turn(events).messages == [q, c1, r1, talk]


def test_partially_returned_parallel_calls_drop_response_and_that_request() -> None:
    q = req(prompt("Compare Paris, Berlin and Tokyo"), t=1)
    calls = resp(call("paris"), call("berlin"), call("tokyo"), t=2)
    partial = req(ret("paris"), ret("berlin"), t=5)  # tokyo never returned
    events = [*start_thread(), *agent_turn(q, calls, partial), interrupted()]
    kept = only_agent_turn(events).messages
    assert kept == [q]
    returned = {p.tool_call_id for x in kept if not isinstance(x, m.SystemMessage) for p in x.parts
                if isinstance(p, m.ToolReturnPart)}
    assert returned == set()


def test_partially_returned_cycle_after_a_complete_one() -> None:
    q = req(prompt("q"), t=1)
    c1 = resp(call("a"), t=2)
    r1 = req(ret("a"), t=3)
    c2 = resp(call("b"), call("c"), t=4)
    r2 = req(ret("b"), t=5)
    events = [*start_thread(), *agent_turn(q, c1, r1, c2, r2), interrupted()]
    assert only_agent_turn(events).messages == [q, c1, r1]


def test_retry_prompt_naming_the_call_counts_as_its_return() -> None:
    q = req(prompt("q"), t=1)
    c = resp(call("a"), call("b"), t=2)
    r = req(ret("a"), m.RetryPromptPart(content="bad args", tool_name="get_weather", tool_call_id="b"), t=3)
    events = [*start_thread(), *agent_turn(q, c, r), interrupted()]
    assert only_agent_turn(events).messages == [q, c, r]


def test_system_messages_are_kept_in_interrupted_turn() -> None:
    q = req(prompt("q"), t=1)
    handoff = sysmsg("data-tp-agent_handoff", t=2, data={"from": "a1", "to": "a2"})
    c = resp(call("a"), t=3)
    note = sysmsg("data-app-note", t=4)
    r = req(ret("a"), t=5)
    unrun = resp(call("b"), t=6)
    telemetry = sysmsg("data-sys-latency_ms", t=7, data={"ms": 12})
    events = [*start_thread(), *agent_turn(q, handoff, c, note, r, unrun, telemetry), interrupted()]
    # The system message between a response and its returns does not break the cycle.
    assert only_agent_turn(events).messages == [q, handoff, c, note, r, telemetry]


def test_system_message_between_partial_response_and_its_request() -> None:
    q = req(prompt("q"), t=1)
    c = resp(call("a"), call("b"), t=2)
    note = sysmsg(t=3)
    r = req(ret("a"), t=4)
    events = [*start_thread(), *agent_turn(q, c, note, r), interrupted()]
    assert only_agent_turn(events).messages == [q, note]


def test_interrupted_turn_with_no_messages() -> None:
    turn = only_agent_turn([*start_thread(), *agent_turn(), interrupted(reason="timeout")])
    assert turn.messages == [] and turn.interruption.reason == "timeout"  # type: ignore[union-attr]


def test_interrupted_turn_keeps_total_usage_and_extra() -> None:
    usage = m.Usage(input_tokens=3)
    events = [*start_thread(), AgentTurnStarted(agent_id="a1", started_at=ts(1), extra={"x": 1}),
              rec(resp(text("x"))),
              AgentTurnInterrupted(interruption=m.Interruption(reason="error", interrupted_at=ts(9)),
                                   total_usage=usage)]
    turn = only_agent_turn(events)
    assert turn.total_usage == usage and turn.extra == {"x": 1}


def test_complete_cycles_never_leaves_a_return_without_its_call() -> None:
    """Module doc: "no return is left without its call". A response whose calls are answered only
    after an intervening response (never a complete cycle) must not leave the returns behind."""
    q = req(prompt("q"), t=1)
    c = resp(call("a"), t=2)
    talk = resp(text("still thinking"), t=3)
    r = req(ret("a"), t=4)
    kept = complete_cycles([q, c, talk, r])
    calls = {p.tool_call_id for x in kept if not isinstance(x, m.SystemMessage) for p in x.parts
             if isinstance(p, m.ToolCallPart)}
    returns = {p.tool_call_id for x in kept if not isinstance(x, m.SystemMessage) for p in x.parts
               if isinstance(p, m.ToolReturnPart)}
    assert returns <= calls, f"orphan returns {returns - calls} in {kept}"


def test_complete_cycles_keeps_the_returns_of_a_kept_response() -> None:
    """R1 (call a) is cut off by R2 (call b); one request returns both. R2 is a complete cycle and
    must keep its return; R1's call is dropped, so its return must not stay behind either."""
    q = req(prompt("q"), t=1)
    r1 = resp(call("a"), t=2)
    r2 = resp(call("b"), t=3)
    both = req(ret("a"), ret("b"), t=4)
    kept = complete_cycles([q, r1, r2, both])
    assert r1 not in kept and r2 in kept
    calls = [p.tool_call_id for x in kept if not isinstance(x, m.SystemMessage) for p in x.parts
             if isinstance(p, m.ToolCallPart)]
    returns = [p.tool_call_id for x in kept if not isinstance(x, m.SystemMessage) for p in x.parts
               if isinstance(p, m.ToolReturnPart)]
    assert calls == ["b"] and returns == ["b"], kept


def test_complete_cycles_with_a_reused_call_id() -> None:
    """A dropped response's call id re-used by a later, complete cycle: that cycle keeps its return
    (and the rule stays idempotent)."""
    cut_off = resp(call("b"), t=2)
    again = resp(call("b"), t=3)
    answer = req(ret("b"), t=4)
    kept = complete_cycles([cut_off, again, answer])
    assert kept == [again, answer]
    assert complete_cycles(kept) == kept


def test_folded_interrupted_turn_validates() -> None:
    """The same sequence through fold: the document must pass the validator (no return whose
    tool_call_id matches no earlier call)."""
    from tplog.protocol.validate import validate

    q = req(prompt("q"), t=1)
    c = resp(call("a"), t=2)
    empty = resp(t=3)
    talk = resp(text("still thinking"), t=4)
    r = req(ret("a"), t=5)
    th = fold([*start_thread(), user_turn(t=0), *agent_turn(q, c, empty, talk, r), interrupted(t=6)]).thread
    assert th is not None
    errors = [e for e in validate(th).errors if e.rule == "v3.2-tool-call-id"]
    assert errors == []


# --------------------------------------------------------------------------- in progress


def test_in_progress_turn_is_reported_separately_never_in_turns() -> None:
    q = req(prompt("q"), t=1)
    c = resp(call("a"), t=2)
    events = [*start_thread(), user_turn(t=0), *agent_turn(q, c, t=1)]
    res = fold(events)
    assert res.thread is not None
    assert [type(x) for x in res.thread.turns] == [m.UserTurn]
    ip = res.in_progress
    assert ip is not None
    assert ip.agent_id == "a1" and ip.started_at == ts(1)
    assert ip.messages == [q, c]  # unfiltered: the turn has not ended
    assert ip.completion_status is UNSET and ip.interruption is UNSET and ip.completed_at is UNSET


def test_in_progress_after_completed_turns_then_closed() -> None:
    base = [*start_thread(), *agent_turn(resp(text("one")), t=1), done(t=2)]
    res = fold([*base, *agent_turn(resp(text("two"), t=4), t=3)])
    assert res.thread is not None and len(res.thread.turns) == 1 and res.in_progress is not None
    res2 = fold([*base, *agent_turn(resp(text("two"), t=4), t=3), done(t=5)])
    assert res2.thread is not None and len(res2.thread.turns) == 2 and res2.in_progress is None


def test_in_progress_turn_started_with_no_messages() -> None:
    res = fold([*start_thread(), AgentTurnStarted(agent_id="a1", started_at=ts(1))])
    assert res.thread is not None and res.thread.turns == []
    assert res.in_progress is not None and res.in_progress.messages == []


# --------------------------------------------------------------------------- updated_at


def test_updated_at_is_the_last_timed_event() -> None:
    events: list[Event] = [*start_thread(), user_turn(t=5)]
    assert fold(events).thread.updated_at == ts(5)  # type: ignore[union-attr]
    events += agent_turn(resp(text("x"), t=7), t=6)
    assert fold(events).thread.updated_at == ts(7)  # type: ignore[union-attr]
    events.append(done(t=9))
    assert fold(events).thread.updated_at == ts(9)  # type: ignore[union-attr]
    # Untimed events (no completed_at, registry, link without `at`) leave it alone.
    events += [*agent_turn(resp(text("y"), t=10), t=10), AgentTurnCompleted()]
    events.append(AgentRegistered(agent=m.AgentConfig(agent_id="a2", agent_name="A2", created_at=ts(59))))
    events.append(LinkAdded(link=m.ThreadLink(thread_id="x", relation="referenced")))
    assert fold(events).thread.updated_at == ts(10)  # type: ignore[union-attr]
    events.append(LinkAdded(link=m.ThreadLink(thread_id="y", relation="referenced"), at=ts(20)))
    assert fold(events).thread.updated_at == ts(20)  # type: ignore[union-attr]
    events.append(ThreadInfoChanged(updated_at=ts(30)))
    assert fold(events).thread.updated_at == ts(30)  # type: ignore[union-attr]
    events += [*agent_turn(t=31), interrupted(t=40)]
    assert fold(events).thread.updated_at == ts(40)  # type: ignore[union-attr]


def test_updated_at_from_thread_started() -> None:
    res = fold([ThreadStarted(thread_id=TID, created_at=T0, updated_at=ts(50))])
    assert res.thread is not None and res.thread.updated_at == ts(50)


def test_updated_at_counts_the_in_progress_turn() -> None:
    res = fold([*start_thread(), *agent_turn(resp(text("x"), t=44), t=43)])
    assert res.thread is not None and res.thread.updated_at == ts(44)


# --------------------------------------------------------------------------- info, links, deletion


def test_thread_info_changed() -> None:
    events: list[Event] = [ThreadStarted(thread_id=TID, created_at=T0, title="first", metadata={"a": 1})]
    events.append(ThreadInfoChanged(title="second"))
    th = fold(events).thread
    assert th is not None and th.title == "second" and th.metadata == {"a": 1}
    events.append(ThreadInfoChanged(metadata={"b": 2}))
    th = fold(events).thread
    assert th is not None and th.title == "second" and th.metadata == {"b": 2}
    events.append(ThreadInfoChanged(title=None))
    th = fold(events).thread
    assert th is not None and th.title is None and th.metadata == {"b": 2}
    events.append(ThreadInfoChanged(updated_at=ts(33)))
    th = fold(events).thread
    assert th is not None and th.title is None and th.updated_at == ts(33)


def test_links_added_in_order_after_relationship_shell() -> None:
    shell = m.ThreadRelationships(links=[], extra={"x-graph": "g"})
    l1 = m.ThreadLink(thread_id="p", relation="spawned_from")
    l2 = m.ThreadLink(thread_id="q", relation="merged_from", metadata={"why": "x"})
    l3 = m.ThreadLink(thread_id="r", relation="referenced")
    events = [ThreadStarted(thread_id=TID, created_at=T0, relationships=shell),
              LinkAdded(link=l1), LinkAdded(link=l2), LinkAdded(link=l3)]
    th = fold(events).thread
    assert th is not None
    assert th.relationships == m.ThreadRelationships(links=[l1, l2, l3], extra={"x-graph": "g"})


def test_links_without_shell() -> None:
    l1 = m.ThreadLink(thread_id="p", relation="spawned_from")
    th = fold([ThreadStarted(thread_id=TID, created_at=T0), LinkAdded(link=l1)]).thread
    assert th is not None and th.relationships == m.ThreadRelationships(links=[l1])


def test_deletion() -> None:
    res = fold([*start_thread(), user_turn(), ThreadDeleted(reason="gdpr")])
    assert res.deleted
    # After a hard delete only the tombstone is left in the log.
    res = fold([ThreadDeleted(reason="gdpr")])
    assert res.deleted and res.thread is None and res.seq == 1


# --------------------------------------------------------------------------- properties


def _thread_with_cycles_only(doc: dict[str, Any]) -> m.Thread:
    """The drawn thread, with every interrupted turn's messages cut to complete cycles."""
    t = from_builtins(doc, m.Thread)
    turns = [
        replace(x, messages=complete_cycles(x.messages))
        if isinstance(x, m.AgentTurn) and x.completion_status == "interrupted"
        else x
        for x in t.turns
    ]
    return replace(t, turns=turns)


@THREAD_SETTINGS
@given(threads(interrupted=False))
def test_roundtrip_without_interrupted_turns(doc: dict[str, Any]) -> None:
    t = from_builtins(doc, m.Thread)
    res = fold(events_from_thread(t))
    assert res.in_progress is None and not res.deleted
    assert res.thread is not None
    assert to_builtins(res.thread) == to_builtins(t) == doc


@THREAD_SETTINGS
@given(threads(interrupted=True))
def test_roundtrip_with_interrupted_turns_of_complete_cycles(doc: dict[str, Any]) -> None:
    t = _thread_with_cycles_only(doc)
    res = fold(events_from_thread(t))
    assert res.thread is not None and res.in_progress is None
    assert to_builtins(res.thread) == to_builtins(t)


@THREAD_SETTINGS
@given(threads(interrupted=True))
def test_roundtrip_is_stable(doc: dict[str, Any]) -> None:
    """Import of an export gives the same events again (fold ∘ events_from_thread is a projection)."""
    t = from_builtins(doc, m.Thread)
    once = fold(events_from_thread(t)).thread
    assert once is not None
    twice = fold(events_from_thread(once)).thread
    assert twice is not None and to_builtins(twice) == to_builtins(once)


_MSG_IDS = st.sampled_from(["a", "b", "c"])
_parts = st.lists(
    st.one_of(
        st.builds(call, _MSG_IDS),
        st.builds(ret, _MSG_IDS),
        st.builds(lambda c: m.RetryPromptPart(content="retry", tool_call_id=c), _MSG_IDS),
        st.just(text("t")),
        st.just(prompt("p")),
    ),
    max_size=3,
)
_messages = st.lists(
    st.one_of(
        st.builds(lambda ps: req(*ps), _parts),
        st.builds(lambda ps: resp(*ps), _parts),
        st.just(sysmsg()),
    ),
    max_size=8,
)


@settings(max_examples=400)
@given(_messages)
@example([resp(call("b")), resp(call("b")), req(ret("b"))])
def test_complete_cycles_is_idempotent_small_alphabet(msgs: list[m.Message]) -> None:
    once = complete_cycles(msgs)
    assert complete_cycles(once) == once


@THREAD_SETTINGS
@given(threads(interrupted=True))
def test_complete_cycles_is_idempotent_on_drawn_threads(doc: dict[str, Any]) -> None:
    t = from_builtins(doc, m.Thread)
    for x in t.turns:
        if isinstance(x, m.AgentTurn):
            once = complete_cycles(x.messages)
            assert complete_cycles(once) == once


@settings(max_examples=400)
@given(_messages)
@example([resp(call("b")), resp(call("b")), req(ret("b"))])
@example([req(prompt("q")), resp(call("a")), resp(call("b")), req(ret("a"), ret("b"))])
def test_complete_cycles_keeps_order_requests_and_system_messages(msgs: list[m.Message]) -> None:
    out = complete_cycles(msgs)

    # A subsequence of the input, in order (a kept request may lose returns of dropped calls).
    def kept_from(x: m.Message, y: m.Message) -> bool:
        if x is y:
            return True
        return (isinstance(x, m.RequestMessage) and isinstance(y, m.RequestMessage) and bool(x.parts)
                and x == replace(y, parts=[p for p in y.parts if p in x.parts]))

    where: list[int] = []
    j = 0
    for x in out:
        while j < len(msgs) and not kept_from(x, msgs[j]):
            j += 1
        assert j < len(msgs), f"{x} is not from the input, in order"
        where.append(j)
        j += 1
    # System messages are always kept.
    assert [x for x in out if isinstance(x, m.SystemMessage)] == [x for x in msgs if isinstance(x, m.SystemMessage)]
    thread_msgs = [x for x in out if not isinstance(x, m.SystemMessage)]
    # No kept response has an unreturned call: the next kept message is a request returning all.
    for i, x in enumerate(thread_msgs):
        if isinstance(x, m.ResponseMessage):
            assert x.parts
            ids = {p.tool_call_id for p in x.parts if isinstance(p, m.ToolCallPart)}
            if ids:
                nxt = thread_msgs[i + 1] if i + 1 < len(thread_msgs) else None
                assert isinstance(nxt, m.RequestMessage)
                answered = {p.tool_call_id for p in nxt.parts
                            if isinstance(p, (m.ToolReturnPart, m.RetryPromptPart))}
                assert ids <= answered
    # No return is left without its call: a request's return naming a call made earlier in the
    # input has that call kept before it.
    kept_calls: set[str] = set()
    for x, j in zip(out, where, strict=True):
        if isinstance(x, m.SystemMessage):
            continue
        made_before = {p.tool_call_id for y in msgs[:j] if not isinstance(y, m.SystemMessage) for p in y.parts
                       if isinstance(p, m.ToolCallPart)}
        if isinstance(x, m.RequestMessage):  # tool results travel in requests
            for p in x.parts:
                if isinstance(p, (m.ToolReturnPart, m.RetryPromptPart)) and p.tool_call_id in made_before:
                    assert p.tool_call_id in kept_calls, f"return of dropped call {p.tool_call_id} kept: {out}"
        kept_calls |= {p.tool_call_id for p in x.parts if isinstance(p, m.ToolCallPart)}


def _fold_one_by_one(events: list[Event]) -> Any:
    f = Folder()
    for ev in events:
        f.feed(ev)
    return f


@THREAD_SETTINGS
@given(threads(interrupted=True), st.data())
def test_feed_all_folds_as_feed_does(doc: dict[str, Any], data: st.DataObject) -> None:
    """``Folder.feed_all`` (the load path: common kinds by exact type, fields in locals) leaves
    the folder as ``feed`` one event at a time does, including on orders a store never holds
    (a completed turn with none open, a message outside a turn) and when fed in pieces."""
    events: list[Event] = list(events_from_thread(from_builtins(doc, m.Thread)))
    stray = data.draw(st.lists(st.sampled_from([
        AgentTurnCompleted(completed_at=ts(5)), AgentTurnCompleted(),
        MessageRecorded(message=m.RequestMessage(parts=[m.UserPromptPart(content="x")], agent_id="a", timestamp=ts(7))),
        AgentTurnStarted(agent_id="a", started_at=ts(9)), ThreadInfoChanged(title="t", updated_at=ts(11)),
    ]), max_size=4))
    for ev in stray:
        events.insert(data.draw(st.integers(0, len(events))), ev)
    cut = data.draw(st.integers(0, len(events)))
    one = _fold_one_by_one(events)
    many = Folder()
    many.feed_all(events[:cut])
    assert to_builtins(many.result()) == to_builtins(_fold_one_by_one(events[:cut]).result())
    many.feed_all(iter(events[cut:]))
    assert to_builtins(many.result()) == to_builtins(one.result())
    assert (many.seq, many.updated, many.turns, many.current is None) == (
        one.seq, one.updated, one.turns, one.current is None)


def test_feed_all_on_untimed_and_stray_events() -> None:
    msg = m.RequestMessage(parts=[m.UserPromptPart(content="x")], agent_id="a", timestamp=ts(3))
    events: list[Event] = [
        ThreadStarted(thread_id=TID, created_at=T0),
        MessageRecorded(message=msg),  # outside a turn: dropped, but its time counts
        AgentTurnStarted(agent_id="a", started_at=ts(4)),
        MessageRecorded(message=replace(msg, timestamp=ts(5))),
        AgentTurnCompleted(),  # no time: updated_at stays the message's
        AgentTurnCompleted(completed_at=ts(9)),  # none open: nothing folded, its time counts
        AgentTurnStarted(agent_id="a", started_at=ts(10)),
    ]
    for cut in range(len(events) + 1):
        f = Folder()
        f.feed_all(events[:cut])
        one = _fold_one_by_one(events[:cut])
        assert to_builtins(f.result()) == to_builtins(one.result())
        assert (f.seq, f.updated) == (one.seq, one.updated)
    res = Folder()
    res.feed_all(events[:5])
    assert res.updated == ts(5) and len(res.turns) == 1 and res.current is None
