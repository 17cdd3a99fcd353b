"""Regression tests for three fixed bugs.

1. ``tplog import`` dropped the approval / external kind of deferred tool calls
   (``AgentTurnCompleted.deferred``): it folded the converted input into a
   document and converted that back into events. It now appends the events of
   the one conversion (``importers.load_events`` / ``events_from_thread``).
2. ``downgrade`` left a v0.0.3 agent turn without the ``completed_at`` v0.0.3
   requires.
3. A float >= 2**53 written the way RFC 8785 / ECMAScript writes it
   (``1e16`` -> ``10000000000000000``) comes back from a JSON parser as an
   int, which the canonical hash refused (``IntegerDomainError``).
"""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import msgspec
import pytest
import rfc8785
from hypothesis import example, given
from hypothesis import strategies as st

from tplog.cli import main
from tplog.errors import InvalidInputError, TplogError
from tplog.protocol import model as m
from tplog.protocol.canonical import IntegerDomainError, canonical_json, hash_json, thread_hash
from tplog.protocol.json import from_builtins, from_json, to_builtins
from tplog.protocol.validate import validate
from tplog.protocol.versions import downgrade, upgrade

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "integrations" / "fixtures"
AGENT = "5c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"


def tplog(*argv: str) -> str:
    """Run ``python -m tplog ARGV`` in a subprocess; its stdout (exit status 0 required)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-m", "tplog", *argv], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    return proc.stdout


# --------------------------------------------------------------------------- 1. CLI import keeps deferred kinds


def test_cli_import_vercel_stream_keeps_deferred_kinds(tmp_path: Path) -> None:
    """The deferred fixture's first run (two approval calls, one external call, one executed call).

    Before the fix the stored ``agent_turn_completed`` had ``deferred: {}`` and
    ``tplog pending`` said ``kind: null`` for all three calls.
    """
    import pydantic_ai  # noqa: F401  # a declared test dependency: missing, the test fails

    from tplog.events import AgentTurnCompleted
    from tplog.integrations.importers import load_events
    from tplog.projections.fold import fold

    run = json.loads((FIXTURES / "deferred.json").read_text())["runs"][0]
    stream, body = tmp_path / "stream.sse", tmp_path / "body.json"
    stream.write_text(run["sse"])
    body.write_text(json.dumps(run["body"]))
    store = str(tmp_path / "store")

    res = json.loads(tplog("import", store, str(stream), "--format", "vercel-ui", "--request", str(body)))
    tid = res["thread_id"]

    pending = json.loads(tplog("pending", store, tid))
    assert {c["tool_call_id"]: (c["state"], c["kind"]) for c in pending["pending"]} == {
        "d1": ("deferred", "approval"),
        "d2": ("deferred", "approval"),
        "e1": ("deferred", "external"),
    }

    # The stored events are exactly load_events' (same thread id; every other value comes from the input).
    [expected] = load_events("vercel-ui", stream.read_bytes(), request=body.read_bytes(), thread_id=tid)
    stored = [json.loads(line)["event"] for line in tplog("read", store, tid).splitlines()]
    assert stored == [to_builtins(e) for e in expected]
    [done] = [e for e in expected if isinstance(e, AgentTurnCompleted)]
    assert done.deferred == {"d1": "approval", "d2": "approval", "e1": "external"}

    # Export: the canonical hash is load_events' thread's, and `tplog hash` agrees.
    exported = tmp_path / "export.json"
    exported.write_text(tplog("export", store, tid))
    want = fold(expected).thread
    assert want is not None
    assert thread_hash(from_json(exported.read_bytes())) == thread_hash(want)
    assert json.loads(tplog("hash", str(exported)))["hash"] == thread_hash(want)

    # The exported document with its deferred calls goes through `tplog import` -> `tplog export` unchanged
    # (a document has no field for the kinds, so there they are unknown: still pending, kind not recorded).
    store2 = str(tmp_path / "store2")
    tplog("import", store2, str(exported))
    again = tplog("export", store2, tid)
    assert json.loads(again) == json.loads(exported.read_text())
    assert thread_hash(from_json(again.encode())) == thread_hash(want)
    assert {c["tool_call_id"]: c["state"] for c in json.loads(tplog("pending", store2, tid))["pending"]} == {
        "d1": "deferred",
        "d2": "deferred",
        "e1": "deferred",
    }


def _deferred_doc() -> dict[str, Any]:
    """A v0.0.4 thread whose last turn ended on an approval call and an external call (no returns)."""
    t0 = "2025-03-01T09:00:0{}Z"
    return {
        "version": "0.0.4",
        "thread_id": str(uuid.uuid4()),
        "created_at": t0.format(0),
        "updated_at": t0.format(6),
        "agents": {AGENT: {"agent_id": AGENT, "agent_name": "ops", "created_at": t0.format(0)}},
        "turns": [
            {"turn_type": "user", "submitted_at": t0.format(1),
             "parts": [{"part_kind": "user-prompt", "content": "delete a.txt and run the build"}]},
            {"turn_type": "agent", "agent_id": AGENT, "started_at": t0.format(2),
             "completion_status": "complete", "completed_at": t0.format(6),
             "messages": [
                 {"message_type": "response", "timestamp": t0.format(3), "agent_id": AGENT,
                  "finish_reason": "tool_call",
                  "parts": [
                      {"part_kind": "tool-call", "tool_name": "delete_file", "tool_call_id": "appr-1",
                       "args": {"path": "a.txt"}},
                      {"part_kind": "tool-call", "tool_name": "run_remote", "tool_call_id": "ext-1",
                       "args": {"job": "build", "budget": 1e16}},
                      {"part_kind": "tool-call", "tool_name": "now", "tool_call_id": "done-1", "args": {}}]},
                 {"message_type": "request", "timestamp": t0.format(4), "agent_id": AGENT,
                  "parts": [{"part_kind": "tool-return", "tool_name": "now", "tool_call_id": "done-1",
                             "status": "success", "content": "09:00"}]},
             ]},
        ],
    }


def test_cli_import_export_document_with_deferred_calls_same_hash(tmp_path: Path) -> None:
    doc = _deferred_doc()
    src = tmp_path / "in.json"
    src.write_text(json.dumps(doc))
    store = str(tmp_path / "store")
    tplog("import", store, str(src))
    out = tplog("export", store, doc["thread_id"])
    assert json.loads(out) == doc
    assert thread_hash(from_json(out.encode())) == hash_json(src.read_bytes())
    pending = json.loads(tplog("pending", store, doc["thread_id"]))["pending"]
    assert [(c["tool_call_id"], c["state"]) for c in pending] == [("appr-1", "deferred"), ("ext-1", "deferred")]


def test_cli_import_request_without_vercel_is_a_typed_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in.json"
    src.write_text(json.dumps(_deferred_doc()))
    assert main(["import", str(tmp_path / "s"), str(src), "--request", str(src)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: --request only goes with --format vercel-ui")
    assert not (tmp_path / "s").exists()  # nothing written


# --------------------------------------------------------------------------- 2. downgrade fills completed_at


def _v4(turns: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "version": "0.0.4", "thread_id": str(uuid.uuid4()), "created_at": "2025-01-20T10:00:00Z",
        "updated_at": "2025-01-20T10:01:00Z",
        "agents": {AGENT: {"agent_id": AGENT, "agent_name": "A", "created_at": "2025-01-20T10:00:00Z"}},
        "turns": turns,
    }


def _user(at: str) -> dict[str, Any]:
    return {"turn_type": "user", "submitted_at": at, "parts": [{"part_kind": "user-prompt", "content": "go"}]}


def _text(at: str) -> dict[str, Any]:
    return {"message_type": "response", "timestamp": at, "agent_id": AGENT,
            "parts": [{"part_kind": "text", "content": "ok"}]}


def test_downgrade_fills_completed_at() -> None:
    doc = _v4([
        _user("2025-01-20T10:00:01Z"),
        # complete, no completed_at: the last message's timestamp (the v0.0.3 spec's transformation rule)
        {"turn_type": "agent", "agent_id": AGENT, "started_at": "2025-01-20T10:00:02Z",
         "completion_status": "complete",
         "messages": [_text("2025-01-20T10:00:03Z"),
                      {"message_type": "system", "timestamp": "2025-01-20T10:00:04Z",
                       "event_type": "data-tp-thread_end", "event_data": {}}]},
        _user("2025-01-20T10:00:10Z"),
        # interrupted: dropped whole (v0.0.3 has complete turns only)
        {"turn_type": "agent", "agent_id": AGENT, "started_at": "2025-01-20T10:00:11Z",
         "completion_status": "interrupted",
         "interruption": {"reason": "user_cancelled", "interrupted_at": "2025-01-20T10:00:12Z"},
         "messages": [_text("2025-01-20T10:00:11.5Z")]},
        _user("2025-01-20T10:00:20Z"),
        # explicit null, no messages: its started_at
        {"turn_type": "agent", "agent_id": AGENT, "started_at": "2025-01-20T10:00:21Z",
         "completion_status": "complete", "completed_at": None, "messages": []},
        _user("2025-01-20T10:00:30Z"),
        # an extension status with an interruption is kept: the interruption time is when the run ended
        {"turn_type": "agent", "agent_id": AGENT, "started_at": "2025-01-20T10:00:31Z",
         "completion_status": "x-paused",
         "interruption": {"reason": "paused", "interrupted_at": "2025-01-20T10:00:35Z"},
         "messages": [_text("2025-01-20T10:00:32Z")]},
        _user("2025-01-20T10:00:40Z"),
        # a completed_at already there is kept
        {"turn_type": "agent", "agent_id": AGENT, "started_at": "2025-01-20T10:00:41Z",
         "completion_status": "complete", "completed_at": "2025-01-20T10:00:50Z",
         "messages": [_text("2025-01-20T10:00:42Z")]},
    ])
    t = from_builtins(doc, m.Thread)
    before = copy.deepcopy(doc)
    down = downgrade(t)
    agents = [x for x in to_builtins(down)["turns"] if x["turn_type"] == "agent"]
    assert [x["completed_at"] for x in agents] == [
        "2025-01-20T10:00:04Z", "2025-01-20T10:00:21Z", "2025-01-20T10:00:35Z", "2025-01-20T10:00:50Z",
    ]
    assert all("completion_status" not in x and "interruption" not in x for x in agents)
    assert to_builtins(t) == before  # input untouched
    report = validate(down)
    assert [e for e in report.errors if e.path.endswith("completed_at")] == []
    assert report.errors == []
    # and back: v0.0.4 again, completed_at kept
    assert [x.completed_at for x in upgrade(down).turns if isinstance(x, m.AgentTurn)] == [
        x["completed_at"] for x in agents
    ]


def test_cli_export_v003_fills_completed_at(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _v4([
        _user("2025-01-20T10:00:01Z"),
        {"turn_type": "agent", "agent_id": AGENT, "started_at": "2025-01-20T10:00:02Z",
         "completion_status": "complete", "messages": [_text("2025-01-20T10:00:03Z")]},
    ])
    src = tmp_path / "in.json"
    src.write_text(json.dumps(doc))
    store = str(tmp_path / "s")
    assert main(["import", store, str(src)]) == 0
    capsys.readouterr()
    assert main(["export", store, doc["thread_id"], "--version", "0.0.3"]) == 0
    out = capsys.readouterr().out
    v3 = json.loads(out)
    assert v3["version"] == "0.0.3"
    assert v3["turns"][1]["completed_at"] == "2025-01-20T10:00:03Z"
    assert validate(from_json(out.encode())).errors == []


def test_downgrade_without_any_time_is_a_typed_error() -> None:
    """A Struct built with wrong types (msgspec does not check at construction) has nothing to fill from."""
    turn = m.AgentTurn(agent_id=AGENT, started_at=None, messages=[], completion_status="complete")  # type: ignore[arg-type]
    t = m.Thread(version="0.0.4", thread_id="t", created_at="c", updated_at="u", agents={},
                 turns=[from_builtins(_user("s"), m.UserTurn), turn])
    with pytest.raises(InvalidInputError) as info:
        downgrade(t)
    assert isinstance(info.value, TplogError)
    assert info.value.path == "$.turns[1].completed_at"
    assert "completed_at" in str(info.value)


# --------------------------------------------------------------------------- 3. hashing floats >= 2**53

# ECMAScript Number.prototype.toString outputs (= JSON.stringify = RFC 8785), checked by hand with Node.js
# v18 (`node -e 'console.log(String(x))'`) and, where marked, RFC 8785 Appendix B. These are the
# reference for the integer spellings below, which the ``rfc8785`` package refuses outright (it raises
# IntegerDomainError for every int beyond ±(2**53-1), even one that is exactly how it writes a double).
ES_NUMBERS: list[tuple[float, str]] = [
    (1e16, "10000000000000000"),
    (-1e16, "-10000000000000000"),
    (9007199254740993.0, "9007199254740992"),  # the literal rounds to 2**53
    (2.0**53, "9007199254740992"),  # RFC 8785 Appendix B
    (18014398509481985.0, "18014398509481984"),
    (1e17 + 2, "100000000000000000"),
    (2.0**60, "1152921504606847000"),
    (2.0**64, "18446744073709552000"),
    (123456789012345678.0, "123456789012345680"),
    (1.2345678901234567e20, "123456789012345670000"),
    (1e20, "100000000000000000000"),
    (2.0**68, "295147905179352830000"),  # RFC 8785 Appendix B
    (999999999999999700000.0, "999999999999999700000"),  # RFC 8785 Appendix B
    (1e21, "1e+21"),
    (1e300, "1e+300"),
    (-1.7976931348623157e308, "-1.7976931348623157e+308"),  # RFC 8785 Appendix B
]


def _doc_with(leaf_json: str) -> str:
    """A thread (JSON text) holding ``leaf_json`` in thread metadata and in tool-call args."""
    doc = _deferred_doc()
    doc["thread_id"] = "9a4f3c1e-2b7d-4e8a-9c6f-1d2e3f4a5b6c"
    doc["metadata"] = {"app:n": "LEAF"}
    doc["turns"][1]["messages"][0]["parts"][1]["args"] = {"budget": "LEAF"}
    return json.dumps(doc).replace('"LEAF"', leaf_json)


@pytest.mark.parametrize(("value", "text"), ES_NUMBERS)
def test_large_float_es_table(value: float, text: str) -> None:
    assert canonical_json(value) == text.encode() == rfc8785.dumps(value)
    parsed = msgspec.json.decode(text.encode())  # how tplog reads JSON: plain digits give an int
    if "e" not in text:
        assert isinstance(parsed, int)
        with pytest.raises(rfc8785.IntegerDomainError):  # why this table, not rfc8785, is the reference here
            rfc8785.dumps(parsed)
    assert canonical_json(parsed) == text.encode()  # raised IntegerDomainError before the fix
    assert canonical_json({"a": [parsed]}) == b'{"a":[' + text.encode() + b"]}"
    # A document that holds the float hashes the same however the number is spelled.
    want = hash_json(_doc_with(repr(value)))
    for spelling in {text, repr(value), json.dumps(value), msgspec.json.encode(value).decode()}:
        assert hash_json(_doc_with(spelling)) == want, spelling
    assert f'"budget":{text}' in canonical_json(json.loads(_doc_with(text))).decode()


_large_floats = st.floats(min_value=2.0**53, allow_infinity=False) | st.floats(
    max_value=-(2.0**53), allow_infinity=False
)


@given(_large_floats)
@example(1e16)
@example(9007199254740993.0)
@example(1e300)
@example(-1e20)
@example(2.0**69)
@example(1.7976931348623157e308)
def test_large_floats_match_rfc8785_and_rehash(f: float) -> None:
    """Every finite float >= 2**53 in magnitude: rfc8785's bytes, and its canonical text hashes again."""
    out = canonical_json(f)
    assert out == rfc8785.dumps(f)
    assert float(out) == f
    for parsed in (msgspec.json.decode(out), json.loads(out)):
        assert canonical_json(parsed) == out  # raised IntegerDomainError before the fix for |f| < 1e21
        if isinstance(parsed, int):
            # rfc8785 refuses the int itself; its output for the double the literal denotes is the reference
            assert rfc8785.dumps(float(parsed)) == out
    doc = json.loads(_doc_with(out.decode()))
    assert hash_json(_doc_with(out.decode())) == thread_hash(from_builtins(doc, m.Thread))
    assert hash_json(_doc_with(out.decode())) == hash_json(_doc_with(repr(f)))


@given(st.integers(min_value=2**53, max_value=2**75) | st.integers(min_value=-(2**75), max_value=-(2**53)))
@example(2**53)
@example(2**53 + 1)
@example(10**16 + 1)
@example(2**60)
@example(10**21)
@example(10**21 - 2**17)
def test_unsafe_integers_accepted_only_as_a_doubles_text(n: int) -> None:
    """Beyond ±(2**53-1) an int hashes iff it is exactly RFC 8785's text of a double; else a typed error."""
    text = str(n)
    if rfc8785.dumps(float(n)) == text.encode():
        assert canonical_json({"k": n}) == b'{"k":' + text.encode() + b"}"
    else:
        with pytest.raises(IntegerDomainError) as info:
            canonical_json({"k": [n]})
        assert info.value.path == "$.k[0]"
        assert isinstance(info.value, InvalidInputError)
        with pytest.raises(IntegerDomainError):
            hash_json(_doc_with(text))


@pytest.mark.parametrize("n", [10**400, -(10**5000), 2**1024 - 1], ids=["1e400", "-1e5000", "2**1024-1"])
def test_huge_integers_refused_with_a_typed_error(n: int) -> None:
    """Not a bare ValueError from str() of an int over Python's 4300-digit limit."""
    with pytest.raises(IntegerDomainError) as info:
        canonical_json({"x": n})
    assert info.value.path == "$.x"
    assert "range of doubles" in str(info.value)


def test_non_finite_and_rounding_integers_still_refused() -> None:
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(TplogError):
            canonical_json([bad])
    with pytest.raises(IntegerDomainError) as info:
        hash_json(_doc_with("9007199254740993"))
    assert info.value.path == '$.metadata["app:n"]'
