"""tplog.protocol.rules: one validation rule for every entry point, what the store accepts, ``validate`` accepts.

The store refuses, at append, an event that would make the thread's document
break an error rule of ``tplog.validate`` (``InvalidEventError`` naming the rule
id, thread id, seq and JSON path; nothing written); ``import_thread`` and
``tplog import`` succeed exactly when ``validate`` reports no error. Shown by
properties over generated (and mutated) thread documents, one case per rule,
the tool-call id paths, heads written before the rules were kept, the CLI and
each importer with a non-UUID id.

Then the history rules' values and fast paths, each seen through appends (written to kill the
surviving mutants of tests/MUTANTS.md): a head written without the rules' values
(``check_rules=False``, or a store older than them) gets them folded from the log at the next
checked append (``rules_from_log``): where the last turn ended, for every kind of last turn, and the
open turn's start. The tool-call check answers the common cases from the ``state`` projection's row
and folds the thread only for the rare ones (an answer to a call of a turn interrupted in the same
append); both must give validate's answer.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import snapshot
from hypothesis import event, given
from hypothesis import strategies as st
from protocol.documents import (
    A1,
    A2,
    T0,
    T1,
    _agent_turn,
    _new_thread_events,
    _user_answer,
    base,
    base_v3,
    ts,
)
from strategies import THREAD_SETTINGS, threads

import tplog
import tplog.backends.common as common
from tplog.backends.common import decode_head, thread_key
from tplog.errors import InvalidEventError, InvalidInputError, ValidationError
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
from tplog.projections.fold import events_from_thread, fold
from tplog.protocol import model as m
from tplog.protocol.json import from_builtins, to_json
from tplog.protocol.validate import RULES, thread_id_for, validate
from tplog.store import Store, ThreadHead

#: What the fold repairs: an interrupted turn keeps only its complete cycles, so a
#: document breaking this rule becomes, appended event by event, a valid thread.
REPAIRED_BY_FOLD = frozenset({"v4-no-unreturned-tool-call-in-interrupted-turn"})


def doc_thread(doc: dict[str, Any]) -> m.Thread:
    return from_builtins(doc, m.Thread)


def append_one_by_one(store: Store, thread: m.Thread) -> InvalidEventError | None:
    """Append the document's events one per call; the first refusal, or None."""
    for ev in events_from_thread(thread):
        try:
            store.append(thread.thread_id, [ev])
        except InvalidEventError as exc:
            return exc
    return None


# --------------------------------------------------------------------------- mutated documents


def _agent_turns(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in doc["turns"] if t.get("turn_type") == "agent"]


def _messages(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [msg for t in _agent_turns(doc) for msg in t.get("messages", [])]


def _parts(doc: dict[str, Any]) -> list[dict[str, Any]]:
    out = [p for msg in _messages(doc) for p in msg.get("parts", []) if isinstance(p, dict)]
    return out + [p for t in doc["turns"] if t.get("turn_type") == "user" for p in t["parts"]]


def _set_first(items: list[dict[str, Any]], key: str, value: Any) -> None:
    if items:
        items[0][key] = value


MUTATIONS: dict[str, Callable[[dict[str, Any]], None]] = {
    "thread id not a UUID": lambda d: d.__setitem__("thread_id", "chat-1"),
    "agent dropped from the registry": lambda d: d["agents"].pop(next(iter(d["agents"])), None),
    "bad created_at": lambda d: d.__setitem__("created_at", "yesterday"),
    "bad started_at": lambda d: _set_first(_agent_turns(d), "started_at", "2025-13-01T00:00:00Z"),
    "bad message timestamp": lambda d: _set_first(_messages(d), "timestamp", "10:00"),
    "bad finish_reason": lambda d: _set_first(
        [x for x in _messages(d) if x.get("message_type") == "response"], "finish_reason", "done"),
    "bad tool-return status": lambda d: _set_first(
        [p for p in _parts(d) if p.get("part_kind") == "tool-return"], "status", "ok"),
    "unknown data-tp-* event": lambda d: _set_first(
        [x for x in _messages(d) if x.get("message_type") == "system"], "event_type", "data-tp-bogus"),
    "empty parts": lambda d: _set_first(
        [x for x in _messages(d) if x.get("message_type") != "system"], "parts", []),
    "link not a UUID": lambda d: d.__setitem__(
        "relationships", {"links": [{"thread_id": "parent", "relation": "spawned_from"}]}),
    "bad content_ref uri": lambda d: _set_first(
        [p for p in _parts(d) if p.get("part_kind") == "tool-return"], "content_ref", {"uri": "no scheme here"}),
    "answer to no call": lambda d: _set_first(
        [p for p in _parts(d) if p.get("part_kind") == "tool-return"], "tool_call_id", "call-nobody-made"),
    "turns reversed": lambda d: d["turns"].reverse(),
    "messages reversed": lambda d: [t.get("messages", []).reverse() for t in _agent_turns(d)],
}


@st.composite
def documents(draw: st.DrawFn) -> dict[str, Any]:
    """Generated documents (about a third valid), a third of them mutated by one of MUTATIONS."""
    doc = draw(threads())
    if draw(st.integers(0, 2)) == 0:
        doc = copy.deepcopy(doc)
        MUTATIONS[draw(st.sampled_from(sorted(MUTATIONS)))](doc)
    return doc


# --------------------------------------------------------------------------- properties


@THREAD_SETTINGS
@given(doc=documents())
def test_import_succeeds_exactly_when_validate_reports_no_error(tmp_path_factory: pytest.TempPathFactory,
                                                               doc: dict[str, Any]) -> None:
    thread = doc_thread(doc)
    report = validate(thread)
    with Store(str(tmp_path_factory.mktemp("s"))) as store:
        try:
            store.import_thread(thread)
        except ValidationError as exc:
            event("import refused")
            assert not report.ok
            assert exc.report == report
            assert not store.exists(thread.thread_id)  # nothing written
            assert store.last_position == 0
            return
        assert report.ok, report.errors
        assert validate(store.export(thread.thread_id)).ok


@THREAD_SETTINGS
@given(doc=documents())
def test_appending_the_events_one_by_one_is_refused_exactly_when_validate_says_so(
    tmp_path_factory: pytest.TempPathFactory, doc: dict[str, Any]
) -> None:
    thread = doc_thread(doc)
    errors = {f.rule for f in validate(thread).errors}
    with Store(str(tmp_path_factory.mktemp("s"))) as store:
        before = store.last_position
        refused = append_one_by_one(store, thread)
        event(f"refused: {refused.rule}" if refused is not None else "accepted")
        if refused is None:
            # accepted: the stored thread is valid, and the document was, but for what the fold repairs
            assert errors <= REPAIRED_BY_FOLD, errors
            assert validate(store.export(thread.thread_id)).ok
            return
        # refused: the document breaks a rule, and the store names one by id, where and which event
        assert errors - REPAIRED_BY_FOLD, (refused, errors)
        assert refused.rule in RULES and RULES[refused.rule].severity == "error"
        assert refused.thread_id == thread.thread_id
        assert refused.path is not None and refused.path.startswith("$")
        assert refused.seq == (store.head(thread.thread_id).version + 1 if store.exists(thread.thread_id) else 1)
        assert store.last_position - before == (refused.seq - 1)  # the refused event was not written


# --------------------------------------------------------------------------- one case per rule


def _case(mutate: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    doc = base()
    mutate(doc)
    return doc


def _turn(i: int) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda d: d["turns"][i]


def _msg(t: int, i: int) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda d: d["turns"][t]["messages"][i]


def _put(get: Callable[[dict[str, Any]], Any], key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: get(d).__setitem__(key, value)


# (validate's rule, mutation of base(), the rule the store refuses with, the path in the refused event)
RULE_CASES: list[tuple[str, Callable[[dict[str, Any]], None], str, str]] = [
    ("thread-id-uuid", _put(lambda d: d, "thread_id", "chat-1"), "thread-id-uuid", "$.thread_id"),
    ("v3.1-timestamp", _put(lambda d: d, "created_at", "soon"), "v3.1-timestamp", "$.created_at"),
    ("v3.1-timestamp", _put(lambda d: d["agents"][A2], "created_at", "2025-01-01"), "v3.1-timestamp",
     "$.agent.created_at"),
    ("v3.1-timestamp", _put(_turn(0), "submitted_at", "x"), "v3.1-timestamp", "$.turn.submitted_at"),
    ("v3.1-timestamp", _put(_msg(1, 2), "timestamp", "x"), "v3.1-timestamp", "$.message.timestamp"),
    ("v3.1-timestamp", _put(_turn(1), "completed_at", "x"), "v3.1-timestamp", "$.completed_at"),
    ("v3.1-timestamp", _put(lambda d: d["turns"][3]["interruption"], "interrupted_at", "x"), "v3.1-timestamp",
     "$.interruption.interrupted_at"),
    ("v3.8-link-uuid", _put(lambda d: d["relationships"]["links"][0], "thread_id", "p"), "v3.8-link-uuid",
     "$.link.thread_id"),
    ("required-field", lambda d: d["turns"][1]["messages"][0]["parts"][2].pop("args"), "required-field",
     "$.message.parts[2].args"),
    ("required-field", lambda d: d["turns"][1]["messages"][2].pop("event_data"), "required-field",
     "$.message.event_data"),
    ("v3.2-tool-call-id", _put(lambda d: d["turns"][1]["messages"][1]["parts"][0], "tool_call_id", "nope"),
     "v3.2-tool-call-id", "$.message.parts[0].tool_call_id"),
    ("v3.3-agent-ref", lambda d: d["agents"].pop(A2), "v3.3-agent-ref", "$.agent_id"),
    ("v3.3-agent-ref", _put(_msg(1, 0), "agent_id", "ghost"), "v3.3-agent-ref", "$.message.agent_id"),
    ("v3.4-turn-overlap", _put(_turn(2), "submitted_at", "2025-01-20T10:00:09Z"), "v3.4-turn-overlap",
     "$.turn.submitted_at"),
    ("v3.4-turn-overlap", _put(_turn(3), "started_at", "2025-01-20T10:00:19Z"), "v3.4-turn-overlap",
     "$.started_at"),
    ("v3.4-turn-interval", _put(_turn(1), "completed_at", "2025-01-20T10:00:00.5Z"), "v3.4-turn-interval",
     "$.completed_at"),
    ("v3.5-message-order", _put(_msg(1, 4), "timestamp", "2025-01-20T10:00:04.5Z"), "v3.5-message-order",
     "$.message.timestamp"),
    ("v3.7-content-ref-uri", _put(lambda d: d["turns"][1]["messages"][4]["parts"][0]["content_ref"], "uri",
                                  "s3:reports"), "v3.7-content-ref-uri", "$.message.parts[0].content_ref.uri"),
    ("v4-message-has-parts", _put(_msg(1, 5), "parts", []), "v4-message-has-parts", "$.message.parts"),
    ("normative-event-name", _put(_msg(1, 2), "event_type", "data-tp-bogus"), "normative-event-name",
     "$.message.event_type"),
    ("v3-tool-return-status", _put(lambda d: d["turns"][1]["messages"][1]["parts"][0], "status", "ok"),
     "v3-tool-return-status", "$.message.parts[0].status"),
    ("v3-finish-reason", _put(_msg(1, 5), "finish_reason", "done"), "v3-finish-reason",
     "$.message.finish_reason"),
]


@pytest.mark.parametrize(("rule", "mutate", "refused_rule", "path"), RULE_CASES,
                         ids=[f"{c[0]}:{c[3]}" for c in RULE_CASES])
def test_each_rule_is_refused_by_import_and_by_append(
    tmp_path: Path, rule: str, mutate: Callable[[dict[str, Any]], None], refused_rule: str, path: str
) -> None:
    thread = doc_thread(_case(mutate))
    assert rule in {f.rule for f in validate(thread).errors}
    with Store(str(tmp_path / "a")) as store:
        with pytest.raises(ValidationError) as vexc:
            store.import_thread(thread)
        assert f"[{rule}]" in str(vexc.value) and thread.thread_id in str(vexc.value)
        assert store.last_position == 0
    with Store(str(tmp_path / "b")) as store:
        refused = append_one_by_one(store, thread)
        assert refused is not None
        assert (refused.rule, refused.path, refused.thread_id) == (refused_rule, path, thread.thread_id)
        assert f"seq {refused.seq}" in str(refused) and f"[{refused_rule}]" in str(refused)
        assert isinstance(refused, tplog.TplogError)


def test_the_base_document_imports_and_appends(tmp_path: Path) -> None:
    thread = doc_thread(base())
    with Store(str(tmp_path / "a")) as store:
        store.import_thread(thread)
        assert tplog.thread_hash(store.export(T1)) == tplog.thread_hash(thread)
    with Store(str(tmp_path / "b")) as store:
        assert append_one_by_one(store, thread) is None
        assert validate(store.export(T1)).ok


def test_a_refused_event_in_a_batch_writes_nothing(store: Store) -> None:
    tid = str(uuid.uuid4())
    store.append(tid, [ThreadStarted(thread_id=tid, created_at=T0),
                       AgentRegistered(agent=m.AgentConfig(agent_id=A1, agent_name="a", created_at=T0))])
    before = snapshot(store)
    with pytest.raises(InvalidEventError) as exc:
        store.append(tid, [AgentTurnStarted(agent_id=A1, started_at=ts(1)),
                           MessageRecorded(message=m.ResponseMessage(timestamp=ts(2), agent_id=A1,
                                                                     parts=[m.TextPart(content="x")])),
                           MessageRecorded(message=m.ResponseMessage(timestamp=ts(3), agent_id=A2,
                                                                     parts=[m.TextPart(content="y")]))])
    assert (exc.value.rule, exc.value.seq, exc.value.path) == ("v3.3-agent-ref", 5, "$.message.agent_id")
    assert "events[2]" in str(exc.value)
    assert snapshot(store) == before


def test_a_registration_in_the_same_append_counts(store: Store) -> None:
    tid = str(uuid.uuid4())
    store.append(tid, [ThreadStarted(thread_id=tid, created_at=T0),
                       AgentRegistered(agent=m.AgentConfig(agent_id="planner", agent_name="p", created_at=T0)),
                       AgentTurnStarted(agent_id="planner", started_at=ts(1)),
                       AgentTurnCompleted(completed_at=ts(2))])
    assert validate(store.export(tid)).ok
    assert store.head(tid).agents == ["planner"]


# --------------------------------------------------------------------------- tool-call ids


def _new_thread(store: Store) -> str:
    tid = str(uuid.uuid4())
    store.append(tid, _new_thread_events(tid))
    return tid


@pytest.mark.parametrize("one_append", [False, True], ids=["separate appends", "one append"])
def test_tool_call_answers_the_store_accepts(store: Store, one_append: bool) -> None:
    tid = _new_thread(store)
    batches: list[list[Event]] = [
        _agent_turn(["c1"], ["c1"], at=10),  # answered in its turn
        _agent_turn(["c2"], [], at=20),  # deferred: answered by the user later
        [_user_answer("c2", 30)],
        [_user_answer("c1", 31)],  # a second answer to an answered call: a warning, not refused
        _agent_turn(["c3", "c4"], ["c3", "c4"], at=40, end="interrupted"),  # complete cycle: kept
        [_user_answer("c3", 50)],
    ]
    if one_append:
        store.append(tid, [ev for b in batches for ev in b])
    else:
        for b in batches:
            store.append(tid, b)
    report = validate(store.export(tid))
    assert report.ok and {f.rule for f in report.warnings} == {"v3.2-tool-return-duplicate"}


@pytest.mark.parametrize("one_append", [False, True], ids=["separate appends", "one append"])
@pytest.mark.parametrize("call", ["c1", "c2", "c9"], ids=["unanswered in interrupted turn",
                                                           "answered out of cycle in interrupted turn", "unknown"])
def test_tool_call_answers_the_store_refuses(store: Store, one_append: bool, call: str) -> None:
    """An interrupted turn keeps only complete cycles: its other calls are not in the
    document, so a later answer to one would be an answer to no call."""
    tid = _new_thread(store)
    interrupted = [
        AgentTurnStarted(agent_id=A1, started_at=ts(10)),
        MessageRecorded(message=m.ResponseMessage(timestamp=ts(11), agent_id=A1, parts=[
            m.ToolCallPart(tool_name="f", tool_call_id="c1", args={}),
            m.ToolCallPart(tool_name="f", tool_call_id="c2", args={})])),
        # the next request returns neither call: the response's cycle is not complete, the fold drops it
        MessageRecorded(message=m.RequestMessage(timestamp=ts(12), agent_id=A1, parts=[
            m.RetryPromptPart(content="later")])),
        MessageRecorded(message=m.RequestMessage(timestamp=ts(13), agent_id=A1, parts=[
            m.ToolReturnPart(tool_name="f", tool_call_id="c2", content="r", status="success")])),
        AgentTurnInterrupted(interruption=m.Interruption(reason="timeout", interrupted_at=ts(14))),
    ]
    if one_append:
        before = snapshot(store)
        with pytest.raises(InvalidEventError) as exc:
            store.append(tid, [*interrupted, _user_answer(call, 20)])
        assert snapshot(store) == before
        seq = 3 + len(interrupted)
    else:
        store.append(tid, interrupted)
        assert validate(store.export(tid)).ok
        with pytest.raises(InvalidEventError) as exc:
            store.append(tid, [_user_answer(call, 20)])
        seq = store.head(tid).version + 1
    assert (exc.value.rule, exc.value.path, exc.value.seq) == ("v3.2-tool-call-id", "$.turn.parts[0].tool_call_id",
                                                               seq)
    # what validate says of the same thread, built without the store
    doc = fold([*_new_thread_events(tid), *interrupted, _user_answer(call, 20)]).thread
    assert doc is not None
    assert "v3.2-tool-call-id" in {f.rule for f in validate(doc).errors}


def test_a_second_answer_to_an_old_call_is_found_by_folding_the_thread(store: Store) -> None:
    tid = _new_thread(store)
    store.append(tid, _agent_turn(["old"], ["old"], at=10))
    for i in range(3):
        store.append(tid, _agent_turn([f"x{i}"], [f"x{i}"], at=20 + 10 * i))
    store.append(tid, [_user_answer("old", 60)])
    assert [f.rule for f in validate(store.export(tid)).warnings] == ["v3.2-tool-return-duplicate"]


# --------------------------------------------------------------------------- heads written before the rules


def test_a_head_written_before_the_rules_is_filled_from_the_log(tmp_path: Path) -> None:
    path = str(tmp_path / "s")
    tid = str(uuid.uuid4())
    with Store(path) as store:
        store.append(tid, [ThreadStarted(thread_id=tid, created_at=T0),
                           AgentRegistered(agent=m.AgentConfig(agent_id=A1, agent_name="a", created_at=T0)),
                           *_agent_turn([], [], at=10),
                           AgentTurnStarted(agent_id=A1, started_at=ts(20)),
                           MessageRecorded(message=m.ResponseMessage(timestamp=ts(25), agent_id=A1,
                                                                     parts=[m.TextPart(content="x")]))])
        tk = thread_key(tid)
        head = store.head(tid)
    # the head as the store wrote it before it kept the rules' values (those fields absent)
    fields = ThreadHead.__struct_fields__
    old = msgspec.msgpack.encode([getattr(head, f) for f in fields[: fields.index("agents")]])
    with Store(path) as store:
        store.backend.engine.run_write(lambda txn: txn.put("heads", tk, old))
    with Store(path) as store:
        assert decode_head(old).rules == 0
        with pytest.raises(InvalidEventError) as exc:  # the open turn's last message is known again
            store.append(tid, [MessageRecorded(message=m.ResponseMessage(timestamp=ts(24), agent_id=A1,
                                                                         parts=[m.TextPart(content="y")]))])
        assert exc.value.rule == "v3.5-message-order"
        store.append(tid, [AgentTurnCompleted(completed_at=ts(30)), AgentTurnStarted(agent_id=A1, started_at=ts(40)),
                           AgentTurnCompleted(completed_at=ts(41))])
        h = store.head(tid)
        assert (h.rules, h.agents, h.open_turn_start) == (1, [A1], None)
        with pytest.raises(InvalidEventError) as exc:  # the registry is known again
            store.append(tid, [AgentTurnStarted(agent_id=A2, started_at=ts(50))])
        assert exc.value.rule == "v3.3-agent-ref"
        with pytest.raises(InvalidEventError) as exc:  # where the last turn ended is known again
            store.append(tid, [AgentTurnStarted(agent_id=A1, started_at=ts(39))])
        assert exc.value.rule == "v3.4-turn-overlap"


# --------------------------------------------------------------------------- the id rule


def test_thread_id_for() -> None:
    assert thread_id_for(T1) == T1 and thread_id_for(T1.upper()) == T1
    # the same ids as the server's chat-id mapping (one namespace)
    assert thread_id_for("chat-1") == str(uuid.uuid5(uuid.UUID("6f2c8a54-3d1b-5e7a-9c40-7b1d2e3f4a50"), "chat-1"))
    a = thread_id_for("chat-1")
    assert tplog.protocol.validate.is_uuid(a) and a == thread_id_for("chat-1") != thread_id_for("chat-2")
    assert uuid.UUID(a).version == 5
    for bad in ("", None, 3):
        with pytest.raises(InvalidInputError):
            thread_id_for(bad)  # type: ignore[arg-type]


def test_the_store_refuses_a_thread_id_that_is_not_a_uuid(store: Store) -> None:
    with pytest.raises(InvalidEventError) as exc:
        store.append("chat-1", [ThreadStarted(thread_id="chat-1", created_at=T0)])
    assert (exc.value.rule, exc.value.seq, exc.value.path) == ("thread-id-uuid", 1, "$.thread_id")
    assert "thread_id_for" in str(exc.value)
    assert not store.exists("chat-1")


PAI_HISTORY = json.dumps([
    {"kind": "request", "parts": [{"part_kind": "user-prompt", "content": "hi", "timestamp": "2025-01-20T10:00:00Z"}]},
    {"kind": "response", "parts": [{"part_kind": "text", "content": "hello"}], "timestamp": "2025-01-20T10:00:01Z",
     "model_name": "test"},
]).encode()


@pytest.mark.parametrize("given_id", ["chat-1", T1])
def test_importers_map_an_outside_id_by_the_one_rule(tmp_path: Path, given_id: str) -> None:
    from pydantic_ai import messages as pm

    from tplog.integrations import importers
    from tplog.integrations.pydantic_ai import events_from_messages

    want = thread_id_for(given_id)
    assert (want == given_id) == (given_id == T1)
    with Store(str(tmp_path / "s")) as store:
        for fmt, data in [("pydantic-ai", PAI_HISTORY), ("vercel-ui", _ui_messages())]:
            (events,) = importers.load_events(fmt, data, thread_id=given_id)
            assert isinstance(events[0], ThreadStarted) and events[0].thread_id == want
            (thread,) = importers.load(fmt, data, thread_id=given_id)
            assert thread.thread_id == want and validate(thread).ok
            store.import_thread(thread, expected_version="any") if fmt == "pydantic-ai" else None
        msgs = pm.ModelMessagesTypeAdapter.validate_json(PAI_HISTORY)
        evs = events_from_messages(msgs, agent_id=A1, agent_name="a", thread_id=given_id)
        assert isinstance(evs[0], ThreadStarted) and evs[0].thread_id == want
        other = str(uuid.uuid4()) if given_id == T1 else thread_id_for("chat-2")
        evs = events_from_messages(msgs, agent_id=A1, agent_name="a", thread_id=other)
        store.append(evs[0].thread_id, evs)
        assert validate(store.export(evs[0].thread_id)).ok


def _ui_messages() -> bytes:
    return json.dumps([
        {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]},
        {"id": "a1", "role": "assistant", "parts": [{"type": "text", "text": "hello"}]},
    ]).encode()


# --------------------------------------------------------------------------- the CLI


def _cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "tplog", *args], input=stdin, capture_output=True, timeout=120)


def test_cli_import_and_validate_agree(tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_bytes(to_json(doc_thread(base())))
    bad_doc = base()
    bad_doc["agents"].pop(A2)
    bad = tmp_path / "bad.json"
    bad.write_bytes(json.dumps(bad_doc).encode())
    store = str(tmp_path / "store")

    v = _cli("validate", str(bad))
    assert v.returncode == 1 and "v3.3-agent-ref" in v.stdout.decode()
    r = _cli("import", store, str(bad))
    assert r.returncode == 2
    err = r.stderr.decode()
    assert err.startswith("error: ") and "[v3.3-agent-ref]" in err and "$.turns[3].agent_id" in err, err
    assert "Traceback" not in err

    assert _cli("validate", str(good)).returncode == 0
    r = _cli("import", store, str(good))
    assert r.returncode == 0, r.stderr.decode()
    exported = _cli("export", store, T1)
    assert exported.returncode == 0
    assert _cli("validate", "-", stdin=exported.stdout).returncode == 0
    assert _cli("stat", store).returncode == 0
    assert json.loads(_cli("threads", store).stdout)["threads"][0]["thread_id"] == T1  # only the good one


def test_import_of_a_thread_appended_event_by_event_round_trips(store: Store) -> None:
    thread = doc_thread(base())
    assert append_one_by_one(store, thread) is None
    exported = store.export(T1)
    assert tplog.thread_hash(exported) == tplog.thread_hash(thread)


def test_check_rules_false_keeps_only_the_order_rules(tmp_path: Path) -> None:
    path = str(tmp_path / "s")
    with Store(path, check_rules=False) as raw:
        raw.append("t", [ThreadStarted(thread_id="t", created_at=T0),
                         AgentTurnStarted(agent_id="a1", started_at=ts(5))])
        assert raw.head("t").rules == 0
        with pytest.raises(InvalidEventError) as exc:  # the order rules still hold
            raw.append("t", [AgentTurnStarted(agent_id="a1", started_at=ts(6))])
        assert exc.value.rule is None
    with Store(path) as store:  # checked again: the head's values are folded from the log first
        with pytest.raises(InvalidEventError) as exc:
            store.append("t", [MessageRecorded(message=m.ResponseMessage(timestamp=ts(6), agent_id="a1",
                                                                         parts=[m.TextPart(content="x")]))])
        assert exc.value.rule == "v3.3-agent-ref"
        store.append("t", [AgentRegistered(agent=m.AgentConfig(agent_id="a1", agent_name="a", created_at=T0))])
        with pytest.raises(InvalidEventError) as exc:
            store.append("t", [AgentTurnCompleted(completed_at=ts(4))])
        assert exc.value.rule == "v3.4-turn-interval"
    with pytest.raises(InvalidInputError):
        Store(path, check_rules="yes")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the rules inside group commits


def _two_turns(tid: str, *, bad: bool) -> list[Event]:
    """A thread whose second agent turn starts before the first ended when ``bad``."""
    return [*_new_thread_events(tid), *_agent_turn([], [], at=10),
            AgentTurnStarted(agent_id=A1, started_at=ts(12 if bad else 14)), AgentTurnCompleted(completed_at=ts(20))]


def test_refusals_inside_a_commit_group_are_per_append(tmp_path: Path) -> None:
    import threading

    from conftest import CountingStore

    CountingStore.gate = 16
    try:
        store = CountingStore(tmp_path / "s", check_rules=True)
        tids = [str(uuid.uuid4()) for _ in range(16)]
        results: dict[str, BaseException | None] = {}
        barrier = threading.Barrier(16)

        def one(i: int) -> None:
            barrier.wait()
            try:
                store.append(tids[i], _two_turns(tids[i], bad=i % 2 == 1))
                results[tids[i]] = None
            except BaseException as exc:  # recorded, asserted below
                results[tids[i]] = exc

        threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert max(len(g) for g in store.groups) > 1  # refusals and successes shared commits
        for i, tid in enumerate(tids):
            if i % 2:
                exc = results[tid]
                assert isinstance(exc, InvalidEventError) and (exc.rule, exc.seq) == ("v3.4-turn-overlap", 5)
                assert not store.exists(tid)
            else:
                assert results[tid] is None and validate(store.export(tid)).ok
        assert store.last_position == 8 * 6
        store.close()
    finally:
        CountingStore.gate = 0


def test_async_appends_are_checked_too(tmp_path: Path) -> None:
    import asyncio

    async def go() -> None:
        async with await tplog.AsyncStore.open(tmp_path / "s") as a:
            good, bad = str(uuid.uuid4()), str(uuid.uuid4())
            res = await asyncio.gather(a.append(good, _two_turns(good, bad=False)),
                                       a.append(bad, _two_turns(bad, bad=True)), return_exceptions=True)
            assert not isinstance(res[0], BaseException)
            assert isinstance(res[1], InvalidEventError) and res[1].rule == "v3.4-turn-overlap"
            assert validate(await a.export(good)).ok and not await a.exists(bad)
            with pytest.raises(ValidationError):
                await a.import_thread(doc_thread(_case(lambda d: d["agents"].pop(A2))))

    asyncio.run(go())


def test_an_idempotent_retry_of_a_refused_append_is_refused_again(store: Store) -> None:
    tid = _new_thread(store)
    bad = [AgentTurnStarted(agent_id="ghost", started_at=ts(5))]
    for _ in range(2):
        with pytest.raises(InvalidEventError) as exc:
            store.append(tid, bad, event_ids=["retry-1"])
        assert exc.value.rule == "v3.3-agent-ref"
    assert store.head(tid).version == 2


def test_a_recorder_on_a_non_uuid_thread_id_is_refused_with_the_rule(store: Store) -> None:
    """The recorder appends through its caller's function, under the caller's id: the caller maps
    an outside id (``thread_id_for``); an unmapped one is refused, typed, with the rule id."""
    import asyncio

    from tplog.integrations.pydantic_ai import ThreadRecorder

    rec = ThreadRecorder(lambda evs: store.append("chat-1", evs), "chat-1")
    with pytest.raises(InvalidEventError) as exc:
        asyncio.run(rec.start_thread(title="t"))
    assert exc.value.rule == "thread-id-uuid" and not store.exists("chat-1")
    tid = thread_id_for("chat-1")
    rec = ThreadRecorder(lambda evs: store.append(tid, evs), tid)
    asyncio.run(rec.start_thread(title="t"))
    assert store.export(tid).title == "t"


def test_a_v003_document_that_breaks_a_v004_rule_once_upgraded(tmp_path: Path) -> None:
    """The one gap of import ⇔ validate: v0.0.3 allows a message without parts, v0.0.4 does not,
    and the store keeps v0.0.4 threads. validate (by the document's own version) accepts it; the
    import refuses it, naming the rule and the upgrade."""

    doc = base_v3()
    doc["turns"][1]["messages"][5]["parts"] = []
    src = tmp_path / "v3.json"
    src.write_text(json.dumps(doc))
    assert _cli("validate", str(src)).returncode == 0
    r = _cli("import", str(tmp_path / "s"), str(src))
    err = r.stderr.decode()
    assert r.returncode == 2 and "upgraded to v0.0.4" in err and "[v4-message-has-parts]" in err, err
    del doc["turns"][1]["messages"][5]
    src.write_text(json.dumps(doc))
    assert _cli("import", str(tmp_path / "s"), str(src)).returncode == 0


# -------------------- the history rules' values and fast paths (was protocol/test_rules.py)

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
