"""The backend contract (tplog.backends.contract), run over every backend in FACTORIES.

Each test states one rule of the contract; a backend passes the suite unchanged.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import T, agent_start, completed, exchange, link, register, response, spawn_message, started, user
from contract_helpers import (
    append,
    encode,
    part,
    rec_fixture,  # noqa: F401  (the `rec` fixture)
    tid,
    tombstone,
)

from tplog.backends.common import thread_key
from tplog.backends.contract import Handle, Recorder, ThreadAppend
from tplog.errors import (
    IdempotencyError,
    InvalidEventError,
    InvalidInputError,
    NotFoundError,
    StoreClosedError,
    ThreadDeletedError,
    WrongExpectedVersionError,
)
from tplog.events import AgentTurnStarted, MessageRecorded, ThreadDeleted
from tplog.projections.fold import ThreadState
from tplog.protocol import model as m


def everything(rec: Recorder, scope: str | None = None) -> list[tuple[int, str, int, int, str]]:
    """Every log's entries, log by log: (log, thread, seq, position, event id)."""
    return [(log, e.thread_id, e.seq, e.position, e.event_id)
            for log in range(rec.logs) for e in rec.read_log(log, scope=scope)]


def assert_gap_free(rec: Recorder) -> None:
    """Each log's positions run 1, 2, 3, … (no deletions yet), and match positions()."""
    for log in range(rec.logs):
        got = [e.position for e in rec.read_log(log)]
        assert got == list(range(1, len(got) + 1)), f"log {log}: {got}"
        assert rec.positions()[log] == len(got)


def test_is_a_recorder(rec: Recorder) -> None:
    assert isinstance(rec, Recorder)
    assert rec.logs >= 1
    assert rec.positions() == (0,) * rec.logs


def test_append_then_read_thread(rec: Recorder) -> None:
    a = tid()
    [r1] = append(rec, part(a, [started(a)], ids=["s"], expected="no_stream"))
    [r2] = append(rec, part(a, [user(), agent_start(), response()], expected=1))
    assert (r1.first_seq, r1.last_seq, r1.first_position, r1.last_position) == (1, 1, 1, 1)
    assert (r2.first_seq, r2.last_seq, r2.first_position, r2.last_position) == (2, 4, 2, 4)
    evs = rec.read_thread(a)
    assert [e.seq for e in evs] == [1, 2, 3, 4]
    assert [e.position for e in evs] == [1, 2, 3, 4]
    assert evs[0].event_id == "s" and evs[0].event == started(a)
    head = rec.head(a)
    assert head is not None
    assert (head.version, head.last_position, head.open_turn_agent, head.open_turn_seq) == (4, 4, "a1", 3)
    assert (head.user_turns, head.agent_turns, head.messages, head.status) == (1, 1, 1, "active")
    assert rec.positions()[rec.log_of(a)] == 4 and sum(rec.positions()) == 4


def test_read_thread_range_vocabulary(rec: Recorder) -> None:
    a = tid()
    append(rec, part(a, [started(a), user("1"), agent_start(), response("2"), completed(), user("3")]))
    seqs = lambda **kw: [e.seq for e in rec.read_thread(a, **kw)]  # noqa: E731
    assert seqs(after=2) == [3, 4, 5, 6]
    assert seqs(after=2, limit=2) == [3, 4]
    assert seqs(direction="backward") == [6, 5, 4, 3, 2, 1]
    assert seqs(direction="backward", after=4, limit=2) == [3, 2]
    assert seqs(direction="backward", after=1) == []
    assert seqs(after=6) == []
    with pytest.raises(NotFoundError):
        rec.read_thread(tid())
    assert rec.head(tid()) is None


def test_handles_are_futures(rec: Recorder) -> None:
    a = tid()
    h = rec.submit([part(a, [started(a)])])
    assert isinstance(h, Handle)
    seen: list[object] = []
    done = threading.Event()
    h.add_done_callback(lambda f: (seen.append(f.result()), done.set()))
    assert done.wait(10)
    assert h.done() and seen == [h.result()]
    bad = rec.submit([part(a, [started(a)], expected="no_stream")])
    with pytest.raises(WrongExpectedVersionError):
        bad.result(timeout=10)


def test_expected_versions(rec: Recorder) -> None:
    a = tid()
    with pytest.raises(WrongExpectedVersionError):
        append(rec, part(a, [started(a)], expected="exists"))
    with pytest.raises(WrongExpectedVersionError):
        append(rec, part(a, [started(a)], expected=3))
    append(rec, part(a, [started(a)], expected="no_stream"))
    with pytest.raises(WrongExpectedVersionError) as info:
        append(rec, part(a, [user()], expected=0))
    assert info.value.actual == 1
    append(rec, part(a, [user()], expected="exists"))
    append(rec, part(a, [user()], expected=2))
    assert [e.seq for e in rec.read_thread(a)] == [1, 2, 3]


def test_order_rules_write_nothing(rec: Recorder) -> None:
    a = tid()
    with pytest.raises(InvalidEventError):
        append(rec, part(a, [user()]))
    with pytest.raises(InvalidEventError):
        append(rec, part(a, [started(tid())]))
    append(rec, part(a, [started(a)]))
    for bad in ([started(a)], [response()], [completed()], [agent_start(), user()],
                [MessageRecorded(message=m.ResponseMessage(timestamp="t", agent_id="x", parts=[])), user()],
                [ThreadDeleted()]):
        with pytest.raises(InvalidEventError):
            append(rec, part(a, bad))
    assert everything(rec) == [(rec.log_of(a), a, 1, 1, rec.read_thread(a)[0].event_id)]
    head = rec.head(a)
    assert head is not None and head.version == 1 and head.open_turn_agent is None


def test_validation_rules_are_checked_when_asked(rec: Recorder) -> None:
    """``check_rules=True``: the validation rules (tplog.protocol.rules) too, each refusal typed with
    its rule, seq and JSON path, nothing written; the head keeps the values they compare."""
    a = tid()

    def refused(events: list[Any], rule: str, seq: int, path: str) -> None:
        before = everything(rec)
        with pytest.raises(InvalidEventError) as exc:
            append(rec, part(a, events, check_rules=True))
        assert (exc.value.rule, exc.value.thread_id, exc.value.seq, exc.value.path) == (rule, a, seq, path)
        assert everything(rec) == before

    with pytest.raises(InvalidEventError) as exc:
        append(rec, part("toy", [started("toy")], check_rules=True))
    assert exc.value.rule == "thread-id-uuid" and rec.head("toy") is None
    append(rec, part(a, [started(a)], check_rules=True))
    refused([agent_start()], "v3.3-agent-ref", 2, "$.agent_id")
    refused([register(), agent_start(), at(response(), "2025-01-20T09:00:00Z"),
             at(response(), "2025-01-20T08:00:00Z")], "v3.5-message-order", 5, "$.message.timestamp")
    refused([register(), agent_start(), tool_answer("nope")], "v3.2-tool-call-id", 4,
            "$.message.parts[0].tool_call_id")
    append(rec, part(a, [register(), *exchange()], check_rules=True))
    head = rec.head(a)
    assert head is not None and (head.version, head.agents, head.rules, head.open_turn_start) == (6, ["a1"], 1, None)
    assert head.turn_end is not None
    # an unchecked append keeps no rule values; the next checked one folds them from the log
    append(rec, part(a, [agent_start(), completed()]))
    head = rec.head(a)
    assert head is not None and (head.rules, head.agents) == (0, [])
    refused([at(user(), "2025-01-20T09:00:00Z")], "v3.4-turn-overlap", 9, "$.turn.submitted_at")
    append(rec, part(a, [user(), agent_start(), completed()], check_rules=True))
    head = rec.head(a)
    assert head is not None and (head.version, head.agents, head.rules) == (11, ["a1"], 1)


def at(ev: Any, when: str) -> Any:
    """``ev`` (a message or a user turn) at time ``when``."""
    import msgspec

    if isinstance(ev, MessageRecorded):
        return MessageRecorded(message=msgspec.structs.replace(ev.message, timestamp=when))
    return msgspec.structs.replace(ev, turn=msgspec.structs.replace(ev.turn, submitted_at=when))


def tool_answer(call_id: str) -> MessageRecorded:
    part_ = m.ToolReturnPart(tool_name="f", tool_call_id=call_id, content="r", status="success")
    return MessageRecorded(message=m.RequestMessage(timestamp=T, agent_id="a1", parts=[part_]))


def test_idempotent_retry(rec: Recorder) -> None:
    a, b = tid(), tid()
    [first] = append(rec, part(a, [started(a), user()], ids=["e1", "e2"]))
    [again] = append(rec, part(a, [started(a), user()], ids=["e1", "e2"], expected="no_stream"))
    assert again.duplicate and not first.duplicate
    assert (again.first_seq, again.last_seq, again.first_position, again.last_position) == (1, 2, 1, 2)
    with pytest.raises(IdempotencyError):  # only some ids stored
        append(rec, part(a, [user(), user()], ids=["e2", "e3"]))
    with pytest.raises(IdempotencyError):  # not in the stored order
        append(rec, part(a, [user(), started(a)], ids=["e2", "e1"]))
    append(rec, part(b, [started(b)], ids=["b1"]))
    with pytest.raises(IdempotencyError):  # stored in another thread
        append(rec, part(a, [user()], ids=["b1"]))
    assert len(everything(rec)) == 3
    # Ids are per scope: the same id in another scope is another event.
    [other] = append(rec, part(a, [started(a)], ids=["e1"], scope="tenant"))
    assert not other.duplicate and other.first_seq == 1


def test_append_touching_several_threads_is_atomic(rec: Recorder) -> None:
    a, b, c = tid(), tid(), tid()
    append(rec, part(a, [started(a)]))
    results = append(rec, part(b, [started(b), link(a, "spawned_from")]), part(a, [user()], expected=1),
                     part(c, [started(c)], expected="no_stream"))
    assert [r.thread_id for r in results] == [b, a, c]
    for r in results:  # each part's events, at the positions its result names, in its thread's log
        evs = rec.read_thread(r.thread_id)[r.first_seq - 1:]
        assert [e.position for e in evs] == list(range(r.first_position, r.last_position + 1))
    assert_gap_free(rec)
    assert rec.children(a) == [b]
    before = everything(rec)
    with pytest.raises(WrongExpectedVersionError):
        append(rec, part(a, [user()], expected=2), part(b, [user()], expected=2), part(c, [user()], expected=0))
    with pytest.raises(InvalidEventError):
        append(rec, part(a, [user()]), part(b, [completed()]))
    assert everything(rec) == before
    assert rec.head(a).version == 2  # type: ignore[union-attr]


def test_bad_appends_are_refused_before_storage(rec: Recorder) -> None:
    a = tid()
    for bad in ([], [part(a, [started(a)]), part(a, [user()])],
                [part(a, [started(a), user()], ids=["x", "x"])],
                [part(a, [started(a)], ids=["x"]), part(tid(), [started("q")], ids=["x"])],
                [ThreadAppend(thread_id=a, events=[])]):
        with pytest.raises(InvalidInputError):
            rec.submit(bad).result(timeout=10)
    assert rec.positions() == (0,) * rec.logs


def test_concurrent_appends_get_gap_free_positions(rec: Recorder) -> None:
    threads = [tid() for _ in range(8)]
    errors: list[BaseException] = []

    def writer(t: str) -> None:
        try:
            append(rec, part(t, [started(t)]))
            for _ in range(10):
                append(rec, part(t, [user()]))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    ws = [threading.Thread(target=writer, args=(t,)) for t in threads]
    for w in ws:
        w.start()
    for w in ws:
        w.join()
    assert not errors
    assert_gap_free(rec)
    log = everything(rec)
    assert len(log) == 88
    for t in threads:
        assert [s for _, th, s, _, _ in log if th == t] == list(range(1, 12))


def test_concurrent_no_stream_creates_exactly_one(rec: Recorder) -> None:
    a = tid()
    handles = [rec.submit([part(a, [started(a)], expected="no_stream")]) for _ in range(6)]
    outcomes = []
    for h in handles:
        try:
            outcomes.append(h.result(timeout=10))
        except WrongExpectedVersionError:
            outcomes.append(None)
    assert sum(o is not None for o in outcomes) == 1


def test_delete_thread(rec: Recorder) -> None:
    a, b = tid(), tid()
    append(rec, part(a, [started(a), link(b, "referenced")]))
    append(rec, part(b, [started(b), link(a, "spawned_from")], ids=["b1", "b2"]))
    assert rec.incoming(b) == [(a, "referenced")]
    la = rec.log_of(a)
    last = rec.positions()[la]
    kept = [e.position for e in rec.read_log(la) if e.thread_id != a]
    res = rec.delete_thread(a, tombstone("gone")).result(timeout=10)
    assert (res.first_seq, res.first_position) == (3, last + 1)  # positions are never reused
    evs = rec.read_thread(a)
    assert [(e.seq, e.position) for e in evs] == [(3, last + 1)] and isinstance(evs[0].event, ThreadDeleted)
    head = rec.head(a)
    assert head is not None and head.status == "deleted" and head.version == 3 and head.stored_bytes == 0
    assert [e.position for e in rec.read_log(la)] == [*kept, last + 1]  # its other positions are gaps now
    assert rec.incoming(b) == []  # its links went with it
    assert rec.children(a) == [b]  # b's link to a stays: it is b's
    with pytest.raises(ThreadDeletedError):
        append(rec, part(a, [user()]))
    with pytest.raises(ThreadDeletedError):
        rec.delete_thread(a, tombstone()).result(timeout=10)
    with pytest.raises(NotFoundError):
        rec.delete_thread(tid(), tombstone()).result(timeout=10)
    rec.delete_thread(b, tombstone()).result(timeout=10)
    assert rec.children(a) == []
    with pytest.raises(ThreadDeletedError):  # a deleted thread's ids are gone: a retry finds it deleted
        append(rec, part(b, [started(b), link(a, "spawned_from")], ids=["b1", "b2"]))
    assert sum(rec.positions()) == 6


def test_read_log_and_scopes(rec: Recorder) -> None:
    a, b = tid(), tid()
    append(rec, part(a, [started(a), user()]))
    append(rec, part(b, [started(b)], scope="s1"))
    append(rec, part(a, [started(a)], scope="s1"))  # the same id in a scope is another thread
    append(rec, part(a, [agent_start()]))
    assert sorted((t, s) for _, t, s, _, _ in everything(rec)) == sorted([(a, 1), (a, 2), (a, 3)])
    assert sorted((t, s) for _, t, s, _, _ in everything(rec, "s1")) == sorted([(b, 1), (a, 1)])
    mine = rec.read_thread(a)
    la = rec.log_of(a)
    assert rec.read_log(la, after=mine[1].position, limit=1) == [mine[2]]  # the scoped events are passed over
    assert rec.read_log(la, after=mine[2].position) == []
    assert [h.thread_id for h in rec.threads(scope="s1").threads] == [a, b]
    assert rec.head(b) is None and rec.head(b, scope="s1") is not None
    assert rec.log_of(a) == rec.log_of(a) < rec.logs


def test_wait(rec: Recorder) -> None:
    zero = (0,) * rec.logs
    assert rec.wait(zero, timeout=0.05) == zero
    a = tid()
    t = threading.Timer(0.1, lambda: append(rec, part(a, [started(a)])))
    t.start()
    t0 = time.monotonic()
    got = rec.wait(zero, timeout=300)
    assert sum(got) == 1 and got[rec.log_of(a)] == 1
    assert time.monotonic() - t0 < 150  # woken by the append, not by the timeout
    t.join()


def test_threads_listing_pages(rec: Recorder) -> None:
    ts = [tid() for _ in range(7)]
    for t in ts:
        append(rec, part(t, [started(t)]))
    append(rec, part(ts[2], [user()]))
    rec.delete_thread(ts[4], tombstone()).result(timeout=10)
    want = [ts[4], ts[2], ts[6], ts[5], ts[3], ts[1], ts[0]]
    got: list[str] = []
    after = None
    while True:
        page = rec.threads(limit=3, after=after, include_deleted=True)
        got += [h.thread_id for h in page.threads]
        if page.cursor is None:
            break
        after = page.cursor
    assert got == want
    assert [h.thread_id for h in rec.threads(limit=50).threads] == [t for t in want if t != ts[4]]
    with pytest.raises(InvalidInputError):
        rec.threads(after="not-a-cursor")


def test_incoming_pages_by_relation_then_source_key(rec: Recorder) -> None:
    target = tid()
    append(rec, part(target, [started(target)]))
    sources = [tid() for _ in range(6)]
    want: list[tuple[bytes, str, str]] = []
    for i, s in enumerate(sources):
        rels = ["b-rel", "a-rel"] if i % 2 else ["a-rel", "a-rel"]
        append(rec, part(s, [started(s)] + [link(target, r) for r in rels]))
        want += [(r.encode(), thread_key(s).hex(), s) for r in rels]
    want.sort()
    assert rec.incoming(target) == [(s, r.decode()) for r, _, s in want]
    assert rec.incoming(target, relation="b-rel") == [(s, "b-rel") for r, _, s in want if r == b"b-rel"]
    pages: list[list[tuple[str, str]]] = []
    after = None
    while True:
        page = rec.incoming(target, limit=2, after=after)
        if not page:
            break
        pages.append(page)
        after = page[-1]
    assert [x for p in pages for x in p] == rec.incoming(target)
    assert all(len(p) <= 3 for p in pages)  # a pair's two links never split across pages
    with pytest.raises(NotFoundError):  # never stored, and nothing links to it
        rec.incoming(tid())
    with pytest.raises(NotFoundError):
        rec.children(tid())
    with pytest.raises(NotFoundError):
        rec.descendants(tid())
    assert rec.descendants(tid(), max_depth=0) == []  # no walk, no question asked
    elsewhere = tid()  # never stored here, but linked to: known, with its links
    s = tid()
    append(rec, part(s, [started(s), link(elsewhere, "referenced")]))
    assert rec.incoming(elsewhere) == [(s, "referenced")] and rec.children(elsewhere) == []


def test_children_from_links_and_spawn_facts(rec: Recorder) -> None:
    parent = tid()
    kids = [tid() for _ in range(5)]
    append(rec, part(parent, [started(parent), agent_start(), *(spawn_message(k) for k in kids[:2]), completed()]))
    for k in kids[1:]:
        append(rec, part(k, [started(k), link(parent, "spawned_from")]))
    by_key = sorted(kids, key=thread_key)
    assert rec.children(parent) == by_key
    assert rec.children(parent, limit=2) == by_key[:2]
    assert rec.children(parent, after=by_key[1], limit=2) == by_key[2:4]
    assert rec.children(kids[0]) == []


def test_state_projection_rows(rec: Recorder) -> None:
    a = tid()
    call = m.ToolCallPart(tool_name="search", tool_call_id="c1", args={})
    append(rec, part(a, [started(a), user(), agent_start(),
                         MessageRecorded(message=m.ResponseMessage(timestamp="t", agent_id="a1", parts=[call]))]))
    st = rec.thread_state(a)
    assert st is not None and list(st.open_calls) == ["c1"]
    with pytest.raises(NotFoundError):
        rec.thread_state(tid())
    b = tid()
    append(rec, part(b, [started(b)]))
    assert rec.thread_state(b) == ThreadState()  # no facts yet: an empty state


def test_tracking_and_rebuild(rec: Recorder) -> None:
    a, b = tid(), tid()
    append(rec, part(a, [started(a)]))
    append(rec, part(b, [started(b), link(a, "spawned_from"), agent_start()]))
    before = (rec.incoming(a), rec.children(a), rec.thread_state(b))
    tracking = rec.tracking()
    assert [t.name for t in tracking] == ["links", "state"]
    assert all(t.status == "live" and t.position == rec.positions() and t.version == t.code_version
               for t in tracking)
    reports = rec.rebuild(["links", "state"])
    assert [r.projection for r in reports] == ["links", "state"]
    assert (rec.incoming(a), rec.children(a), rec.thread_state(b)) == before
    assert all(not r.differences for r in rec.rebuild(["links", "state"], verify=True))
    assert rec.verify().problems == []
    with pytest.raises(InvalidInputError):
        rec.rebuild(["nope"])


def test_named_locks_are_exclusive(rec: Recorder) -> None:
    held = rec.try_lock("rebuild-x")
    assert held is not None
    assert rec.try_lock("other") is not None
    # A second claim from this process must fail while the first is held (flock is per open file).
    second = rec.try_lock("rebuild-x")
    assert second is None
    held.release()
    again = rec.try_lock("rebuild-x")
    assert again is not None
    again.release()
    with pytest.raises(InvalidInputError):
        rec.try_lock("bad name!")


def test_stats_backup_sync(rec: Recorder, tmp_path: Path) -> None:
    a = tid()
    append(rec, part(a, [started(a), user()]))
    st = rec.stats()
    assert (st["threads"], st["events"], st["logs"]) == (1, 2, rec.logs)
    rec.sync()
    rec.backup(str(tmp_path / "copy"))
    assert any((tmp_path / "copy").iterdir())


def test_closed_recorder_refuses(rec: Recorder) -> None:
    a = tid()
    append(rec, part(a, [started(a)]))
    rec.close()
    with pytest.raises(StoreClosedError):
        rec.submit([part(a, [user()])]).result(timeout=10)
    with pytest.raises(StoreClosedError):
        rec.read_thread(a)


def test_recorded_at_and_ids_come_from_the_encoded_events(rec: Recorder) -> None:
    a = tid()
    evs = encode([started(a), AgentTurnStarted(agent_id="z", started_at="t")], ["i1", "i2"], now=123_456)
    append(rec, ThreadAppend(thread_id=a, events=evs, check_rules=False))
    got = rec.read_thread(a)
    assert [(e.event_id, e.recorded_at) for e in got] == [("i1", 123_456), ("i2", 123_456)]


def fork_part(fork_id: str, parent: str, at_seq: int, *, check_rules: bool = False) -> ThreadAppend:
    """A fork's append as the facade builds it (tplog.fork): its ThreadStarted alone, with the seed."""
    from tplog.backends.contract import ForkSeed, ThreadHead

    ts = started(fork_id, relationships=m.ThreadRelationships(
        links=[m.ThreadLink(thread_id=parent, relation="spawned_from", metadata={"seq": at_seq})]))
    seed = ForkSeed(parent=parent, at=at_seq, head=ThreadHead(thread_id="", user_turns=1, agent_turns=1,
                                                               messages=1, links=1, agent_ids=["a1"], parent=parent))
    return ThreadAppend(thread_id=fork_id, events=encode([ts]), expected="no_stream", fork=seed,
                        check_rules=check_rules)


def test_fork_append_creates_a_fork_head(rec: Recorder) -> None:
    """A fork's append writes its ThreadStarted at seq 1 and a head at the fork point; its own rows
    are seq 1 and what follows the fork point; the parent cannot be deleted while the fork lives."""
    from tplog.errors import HasForksError

    p, f = tid(), tid()
    append(rec, part(p, [started(p), register(), *exchange(), user()]))  # seq 1..7
    before = everything(rec)
    for bad, err in ((fork_part(f, tid(), 2), NotFoundError), (fork_part(f, p, 8), InvalidInputError)):
        with pytest.raises(err):
            append(rec, bad)
        assert everything(rec) == before and rec.head(f) is None
    [res] = append(rec, fork_part(f, p, 6))
    assert (res.first_seq, res.last_seq) == (1, 6)  # one event written, the head at the fork point
    assert res.first_position == res.last_position == rec.positions()[rec.log_of(f)]
    head = rec.head(f)
    assert head is not None
    assert (head.version, head.fork_of, head.fork_at, head.user_turns, head.parent) == (6, p, 6, 1, p)
    assert rec.thread_state(f) is None  # the facade folds a fork's state with its parent's prefix
    assert rec.children(p) == [f]
    [more] = append(rec, part(f, [user(), agent_start(), response(), completed()]))
    assert (more.first_seq, more.last_seq) == (7, 10)
    assert [e.seq for e in rec.read_thread(f)] == [1, 7, 8, 9, 10]  # own rows only: the splice is the facade's
    with pytest.raises(HasForksError) as refused:
        rec.delete_thread(p, tombstone()).result(timeout=30)
    assert refused.value.forks == [f]
    assert rec.verify().problems == []
    rec.delete_thread(f, tombstone()).result(timeout=30)
    rec.delete_thread(p, tombstone()).result(timeout=30)
    gone = tid()
    with pytest.raises(ThreadDeletedError):
        append(rec, fork_part(gone, p, 2))


def test_fork_appends_are_checked_against_the_spliced_history(rec: Recorder) -> None:
    """The validation rules see a fork's prefix: a tool return in the fork answers a call made
    before the fork point; one answering no call is refused."""
    p, f = tid(), tid()
    call = m.ToolCallPart(tool_name="f", tool_call_id="c1", args={})
    append(rec, part(p, [started(p), register(), user(), agent_start(),
                         MessageRecorded(message=m.ResponseMessage(timestamp=T, agent_id="a1", parts=[call])),
                         completed()], check_rules=True))
    append(rec, fork_part(f, p, 6, check_rules=True))
    with pytest.raises(InvalidEventError) as exc:
        append(rec, part(f, [user(), agent_start(), tool_answer("c2")], check_rules=True))
    assert exc.value.rule == "v3.2-tool-call-id" and exc.value.seq == 9
    [ok] = append(rec, part(f, [user(), agent_start(), tool_answer("c1"), completed()], check_rules=True))
    assert (ok.first_seq, ok.last_seq) == (7, 10)
