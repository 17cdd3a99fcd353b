"""The ``tplog`` command line: every command through ``main([...])``, a few through
``python -m tplog`` in a subprocess, bad input (exit 2, one ``error:`` line, no
traceback), and a docs test: every command has ``--help`` and is in README.md."""

from __future__ import annotations

import argparse
import copy
import io
import json
import re
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from strategies import threads

from tplog.cli import build_parser, main
from tplog.protocol import model as m
from tplog.protocol.canonical import hash_json, thread_hash
from tplog.protocol.json import from_builtins, from_json
from tplog.store import Store

ROOT = Path(__file__).resolve().parent.parent
TID = "0b6b3b56-8a4e-4c1e-9f51-6a3c3e2f7a10"
PARENT = "1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
CITED = "2c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
SPAWNED = "3c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
MERGED_INTO = "4c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
AGENT = "5c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"

DOC: dict[str, Any] = {
    "version": "0.0.4",
    "thread_id": TID,
    "created_at": "2025-01-20T10:00:00Z",
    "updated_at": "2025-01-20T10:00:40Z",
    "title": "Weather",
    "metadata": {"app:tenant": "t1"},
    "agents": {AGENT: {"agent_id": AGENT, "agent_name": "Weather bot", "created_at": "2025-01-20T10:00:00Z"}},
    "relationships": {"links": [
        {"thread_id": PARENT, "relation": "spawned_from"},
        {"thread_id": CITED, "relation": "referenced"},
    ]},
    "turns": [
        {"turn_type": "user", "submitted_at": "2025-01-20T10:00:00Z",
         "parts": [{"part_kind": "user-prompt", "content": "Weather in Paris and Berlin?"}]},
        {"turn_type": "agent", "agent_id": AGENT, "started_at": "2025-01-20T10:00:01Z",
         "completion_status": "interrupted",
         "interruption": {"reason": "user_cancelled", "interrupted_at": "2025-01-20T10:00:15Z"},
         "messages": [
             {"message_type": "response", "timestamp": "2025-01-20T10:00:02Z", "agent_id": AGENT,
              "parts": [
                  {"part_kind": "tool-call", "tool_name": "get_weather", "tool_call_id": "c1",
                   "args": {"city": "Paris"}},
                  {"part_kind": "tool-call", "tool_name": "get_weather", "tool_call_id": "c2",
                   "args": {"city": "Berlin"}}]},
             {"message_type": "request", "timestamp": "2025-01-20T10:00:10Z", "agent_id": AGENT,
              "parts": [
                  {"part_kind": "tool-return", "tool_name": "get_weather", "tool_call_id": "c1",
                   "status": "success", "content": {"temp": "72F"}},
                  {"part_kind": "tool-return", "tool_name": "get_weather", "tool_call_id": "c2",
                   "status": "success", "content": {"temp": "68F"}}]},
         ]},
        {"turn_type": "user", "submitted_at": "2025-01-20T10:00:20Z",
         "parts": [{"part_kind": "user-prompt", "content": "Delete my notes, and spawn a helper"}]},
        {"turn_type": "agent", "agent_id": AGENT, "started_at": "2025-01-20T10:00:21Z",
         "completion_status": "complete", "completed_at": "2025-01-20T10:00:40Z",
         "messages": [
             {"message_type": "system", "timestamp": "2025-01-20T10:00:22Z", "event_type": "data-tp-thread_spawn",
              "event_data": {"spawned_thread_id": SPAWNED}},
             {"message_type": "system", "timestamp": "2025-01-20T10:00:23Z", "event_type": "data-sys-latency_ms",
              "event_data": {"ms": 120}},
             {"message_type": "response", "timestamp": "2025-01-20T10:00:30Z", "agent_id": AGENT,
              "finish_reason": "tool_call",
              "parts": [{"part_kind": "tool-call", "tool_name": "delete_notes", "tool_call_id": "c3", "args": {}}]},
         ]},
    ],
}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def ok_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    rc, out, err = run(capsys, *argv)
    assert rc == 0, err
    assert err == ""
    return json.loads(out)


def fails(capsys: pytest.CaptureFixture[str], *argv: str, match: str = "") -> str:
    """Exit 2 with exactly one ``error: ...`` line on stderr, nothing on stdout, no traceback."""
    rc, out, err = run(capsys, *argv)
    assert rc == 2, (rc, out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err and out == ""
    assert re.search(match, lines[0]), lines[0]
    return lines[0]


@pytest.fixture
def doc_file(tmp_path: Path) -> Path:
    p = tmp_path / "thread.json"
    p.write_text(json.dumps(DOC, indent=1))
    return p


@pytest.fixture
def loaded(tmp_path: Path, doc_file: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """A store holding DOC (imported through the CLI) plus the threads linking to it."""
    store = str(tmp_path / "store")
    res = ok_json(capsys, "import", store, str(doc_file))
    assert res["thread_id"] == TID and res["first_seq"] == 1 and res["duplicate"] is False
    with Store(store) as s:
        s.append(MERGED_INTO, [
            m_started(MERGED_INTO),
            m_link(TID, "merged_from"),
            m_link(CITED, "merged_from"),
        ])
        s.append(SPAWNED, [m_started(SPAWNED), m_link(TID, "spawned_from")])
    return store


def m_started(tid: str) -> Any:
    from tplog.events import ThreadStarted

    return ThreadStarted(thread_id=tid, created_at="2025-01-20T11:00:00Z")


def m_link(target: str, relation: str) -> Any:
    from tplog.events import LinkAdded

    return LinkAdded(link=m.ThreadLink(thread_id=target, relation=relation))


# --------------------------------------------------------------------------- validate, hash


def test_validate_ok_and_errors(capsys: pytest.CaptureFixture[str], doc_file: Path, tmp_path: Path) -> None:
    report = ok_json(capsys, "validate", str(doc_file))
    assert report["errors"] == []
    bad = copy.deepcopy(DOC)
    del bad["turns"][3]["completion_status"]  # v0.0.4 requires it
    bad["turns"][1]["messages"].pop()  # interrupted turn keeps an unreturned call
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(bad))
    rc, out, err = run(capsys, "validate", str(p))
    assert rc == 1 and err == ""
    rules = {e["rule"] for e in json.loads(out)["errors"]}
    assert {"required-field", "v4-no-unreturned-tool-call-in-interrupted-turn"} <= rules


def test_validate_malformed_json_is_a_report(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    p = tmp_path / "broken.json"
    p.write_text('{"version": "0.0.4",')
    rc, out, _ = run(capsys, "validate", str(p))
    assert rc == 1
    assert [e["rule"] for e in json.loads(out)["errors"]] == ["json-syntax"]


def test_validate_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(json.dumps(DOC).encode())))
    assert ok_json(capsys, "validate", "-")["errors"] == []


def test_hash(capsys: pytest.CaptureFixture[str], doc_file: Path) -> None:
    """JSON like every other command: ``{"hash": ..., "include_noncanonical": ...}``."""
    res = ok_json(capsys, "hash", str(doc_file))
    h = res["hash"]
    assert res == {"hash": h, "include_noncanonical": False}
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", h)
    assert h == thread_hash(from_builtins(DOC, m.Thread)) == hash_json(doc_file.read_bytes())
    res2 = ok_json(capsys, "hash", "--include-noncanonical", str(doc_file))
    assert res2["include_noncanonical"] is True and res2["hash"] != h  # the data-sys-* event now counts
    assert res2["hash"] == thread_hash(from_builtins(DOC, m.Thread), exclude_noncanonical=False)


# --------------------------------------------------------------------------- import, export


def test_import_export_same_canonical_hash(capsys: pytest.CaptureFixture[str], loaded: str, doc_file: Path,
                                           tmp_path: Path) -> None:
    rc, out, err = run(capsys, "export", loaded, TID)
    assert rc == 0 and err == ""
    exported = from_json(out.encode(), m.Thread)
    assert thread_hash(exported) == thread_hash(from_json(doc_file.read_bytes(), m.Thread))
    assert json.loads(out) == DOC  # this document round-trips exactly
    out_file = tmp_path / "out.json"
    out_file.write_text(out)
    assert ok_json(capsys, "hash", str(doc_file)) == ok_json(capsys, "hash", str(out_file))


def test_import_twice_is_an_error(capsys: pytest.CaptureFixture[str], loaded: str, doc_file: Path) -> None:
    """The advice is for CLI users, not the API's ``expected_version``."""
    line = fails(capsys, "import", loaded, str(doc_file),
                 match=rf"thread {TID} is already in {re.escape(loaded)} \(version \d+\); import never changes a "
                       r"stored thread, so importing one twice is refused .*; give --thread-id another id, or import "
                       r"into another store$")
    assert "expected_version" not in line


def test_import_v003_upgrades_and_export_v003(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    tid = str(uuid.uuid4())
    v3 = {
        "version": "0.0.3", "thread_id": tid, "created_at": "2025-01-20T10:00:00Z",
        "updated_at": "2025-01-20T10:00:05Z",
        "agents": {AGENT: {"agent_id": AGENT, "agent_name": "A", "created_at": "2025-01-20T10:00:00Z"}},
        "turns": [{"turn_type": "agent", "agent_id": AGENT, "started_at": "2025-01-20T10:00:01Z",
                   "completed_at": "2025-01-20T10:00:05Z", "messages": [
                       {"message_type": "system", "timestamp": "2025-01-20T10:00:02Z", "event_type": "thread.spawn",
                        "event_data": {"spawned_thread_id": SPAWNED}}]}],
    }
    p = tmp_path / "v3.json"
    p.write_text(json.dumps(v3))
    store = str(tmp_path / "s")
    ok_json(capsys, "import", store, str(p))
    v4 = ok_json(capsys, "export", store, tid)
    assert v4["version"] == "0.0.4"
    assert v4["turns"][0]["completion_status"] == "complete"
    assert v4["turns"][0]["messages"][0]["event_type"] == "data-tp-thread_spawn"
    assert ok_json(capsys, "children", store, tid) == [SPAWNED]
    back = ok_json(capsys, "export", store, tid, "--version", "0.0.3")
    assert back == v3


@settings(max_examples=25, deadline=None)
@given(threads(interrupted=False))
def test_import_export_hash_property(doc: dict[str, Any]) -> None:
    """Any complete-turn v0.0.4 document: CLI import then export keeps the canonical hash
    (a document ``validate`` rejects is refused, exit 2, as tests/protocol/test_rules.py shows)."""
    import contextlib
    import io

    from tplog.protocol.validate import validate

    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "in.json"
        src.write_text(json.dumps(doc))
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = main(["import", str(Path(d) / "s"), str(src)])
        if not validate(from_builtins(doc, m.Thread)).ok:
            assert code == 2
            return
        assert code == 0
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main(["export", str(Path(d) / "s"), doc["thread_id"]]) == 0
    assert thread_hash(from_json(buf.getvalue().encode(), m.Thread)) == thread_hash(from_builtins(doc, m.Thread))


# --------------------------------------------------------------------------- store commands


def test_stat(capsys: pytest.CaptureFixture[str], loaded: str) -> None:
    st = ok_json(capsys, "stat", loaded)
    assert st["threads"] == 3
    with Store(loaded, readonly=True) as s:
        n_doc = len(s.read(TID))
    assert st["events"] == n_doc + 3 + 2
    assert st["last_position"] == st["events"]
    assert "tables" in st and st["path"] == loaded


def ok_lines(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, Any]]:
    rc, out, err = run(capsys, *argv)
    assert rc == 0 and err == ""
    return [json.loads(line) for line in out.splitlines()]


def test_backup(capsys: pytest.CaptureFixture[str], loaded: str, tmp_path: Path) -> None:
    dest = tmp_path / "bk"
    res = ok_json(capsys, "backup", loaded, str(dest))
    assert res == {"dest": str(dest), "compact": True, "bytes": (dest / "data.mdb").stat().st_size}
    assert res["bytes"] > 0
    assert ok_json(capsys, "stat", str(dest))["events"] == ok_json(capsys, "stat", loaded)["events"]
    assert json.loads(run(capsys, "export", str(dest), TID)[1]) == DOC
    fails(capsys, "backup", loaded, str(dest), match="not empty")
    dest2 = tmp_path / "bk2"
    assert ok_json(capsys, "backup", "--no-compact", loaded, str(dest2))["compact"] is False
    assert ok_json(capsys, "stat", str(dest2))["events"] == ok_json(capsys, "stat", loaded)["events"]


def test_read(capsys: pytest.CaptureFixture[str], loaded: str) -> None:
    rows = ok_lines(capsys, "read", loaded, TID)
    assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1))
    types = [r["type"] for r in rows]
    assert types[0] == "thread_started" and "agent_registered" in types and "link_added" in types
    assert types.count("agent_turn_interrupted") == 1 and types.count("agent_turn_completed") == 1
    assert all(r["event"]["type"] == r["type"] for r in rows)
    assert all(set(r) == {"seq", "position", "event_id", "recorded_at", "type", "event"} for r in rows)
    assert [r["seq"] for r in ok_lines(capsys, "read", loaded, TID, "--after", "2", "--limit", "2")] == [3, 4]
    back = ok_lines(capsys, "read", loaded, TID, "--backward", "--limit", "3")
    assert [r["seq"] for r in back] == [len(rows), len(rows) - 1, len(rows) - 2]


def test_threads(capsys: pytest.CaptureFixture[str], loaded: str) -> None:
    page = ok_json(capsys, "threads", loaded)
    assert page["cursor"] is None
    heads = page["threads"]
    assert all(isinstance(h, dict) for h in heads), f"thread heads should be JSON objects, got {heads[:1]}"
    assert {h["thread_id"] for h in heads} == {TID, MERGED_INTO, SPAWNED}
    first = ok_json(capsys, "threads", loaded, "--limit", "2")
    assert len(first["threads"]) == 2 and first["cursor"]
    rest = ok_json(capsys, "threads", loaded, "--limit", "2", "--after", first["cursor"])
    assert len(rest["threads"]) == 1
    fails(capsys, "threads", loaded, "--after", "zz", match="cursor")


def test_turns(capsys: pytest.CaptureFixture[str], loaded: str) -> None:
    res = ok_json(capsys, "turns", loaded, TID)
    assert res["thread_id"] == TID and res["in_progress"] is None
    assert res["turns"] == DOC["turns"]
    from tplog.events import AgentTurnStarted, MessageRecorded

    with Store(loaded) as s:
        s.append(TID, [AgentTurnStarted(agent_id=AGENT, started_at="2025-01-20T10:01:00Z"),
                       MessageRecorded(message=m.ResponseMessage(
                           timestamp="2025-01-20T10:01:01Z", agent_id=AGENT,
                           parts=[m.ToolCallPart(tool_name="search", tool_call_id="c9", args={})]))])
    res = ok_json(capsys, "turns", loaded, TID)
    assert len(res["turns"]) == 4
    assert res["in_progress"]["agent_id"] == AGENT and len(res["in_progress"]["messages"]) == 1
    pend = ok_json(capsys, "pending", loaded, TID)
    assert [(c["tool_call_id"], c["state"]) for c in pend["pending"]] == [("c3", "deferred"), ("c9", "executing")]


def test_pending(capsys: pytest.CaptureFixture[str], loaded: str) -> None:
    res = ok_json(capsys, "pending", loaded, TID)
    assert res == {"pending": [{"tool_call_id": "c3", "tool_name": "delete_notes", "state": "deferred",
                                "turn": 3, "seq": res["pending"][0]["seq"], "kind": None}],
                   "abandoned": []}


def test_interrupts(capsys: pytest.CaptureFixture[str], loaded: str) -> None:
    res = ok_json(capsys, "interrupts", loaded, TID)
    assert res["interrupted"] is False  # the last agent turn completed
    assert len(res["facts"]) == 1 and res["last"] == res["facts"][0]
    f = res["last"]
    assert (f["turn"], f["source"], f["reason"], f["interrupted_at"], f["agent_id"]) == (
        1, "turn", "user_cancelled", "2025-01-20T10:00:15Z", AGENT)


def test_children(capsys: pytest.CaptureFixture[str], loaded: str) -> None:
    # SPAWNED: named by DOC's spawn event and by its own spawned_from link; listed once.
    assert ok_json(capsys, "children", loaded, TID) == [SPAWNED]
    assert ok_json(capsys, "children", loaded, PARENT) == [TID]
    assert ok_json(capsys, "children", loaded, PARENT, "--recursive") == [
        {"thread_id": TID, "depth": 1}, {"thread_id": SPAWNED, "depth": 2}]
    assert ok_json(capsys, "children", loaded, PARENT, "--recursive", "--max-depth", "1") == [
        {"thread_id": TID, "depth": 1}]
    assert ok_json(capsys, "children", loaded, PARENT, "--max-depth", "1") == [{"thread_id": TID, "depth": 1}]
    assert ok_json(capsys, "children", loaded, PARENT, "--limit", "1") == [TID]
    assert ok_json(capsys, "children", loaded, PARENT, "--after", TID) == []
    # PARENT is not stored, but DOC links to it: answered. An id nobody knows: not found.
    assert ok_json(capsys, "children", loaded, PARENT, "--limit", "5") == [TID]
    fails(capsys, "children", loaded, str(uuid.uuid4()), match="does not exist")


def test_links(capsys: pytest.CaptureFixture[str], loaded: str) -> None:
    assert ok_json(capsys, "links", loaded, TID) == DOC["relationships"]["links"]
    assert ok_json(capsys, "links", loaded, TID, "--relation", "referenced") == [
        {"thread_id": CITED, "relation": "referenced"}]
    assert ok_json(capsys, "links", loaded, MERGED_INTO) == [
        {"thread_id": TID, "relation": "merged_from"}, {"thread_id": CITED, "relation": "merged_from"}]
    incoming = ok_json(capsys, "links", loaded, TID, "--incoming")
    assert sorted((r["thread_id"], r["relation"]) for r in incoming) == sorted(
        [(MERGED_INTO, "merged_from"), (SPAWNED, "spawned_from")])
    assert ok_json(capsys, "links", loaded, TID, "--incoming", "--relation", "merged_from") == [
        {"thread_id": MERGED_INTO, "relation": "merged_from"}]
    assert ok_json(capsys, "links", loaded, CITED, "--incoming", "--relation", "referenced") == [
        {"thread_id": TID, "relation": "referenced"}]
    assert ok_json(capsys, "links", loaded, PARENT, "--incoming", "--relation", "spawned_from") == [
        {"thread_id": TID, "relation": "spawned_from"}]
    first = ok_json(capsys, "links", loaded, TID, "--incoming", "--limit", "1")
    rest = ok_json(capsys, "links", loaded, TID, "--incoming", "--after", first[0]["thread_id"], first[0]["relation"])
    assert len(first) == 1 and first + rest == incoming
    fails(capsys, "links", loaded, TID, "--limit", "1", match="--incoming")
    fails(capsys, "links", loaded, TID, "--incoming", "--limit", "-1", match="limit")


def test_delete(capsys: pytest.CaptureFixture[str], loaded: str) -> None:
    res = ok_json(capsys, "delete", loaded, SPAWNED, "--reason", "gdpr")
    assert res["thread_id"] == SPAWNED
    fails(capsys, "export", loaded, SPAWNED, match="deleted")
    fails(capsys, "delete", loaded, SPAWNED, match="deleted")
    heads = ok_json(capsys, "threads", loaded)["threads"]
    assert SPAWNED not in json.dumps(heads)
    rows = ok_lines(capsys, "read", loaded, SPAWNED)
    assert [r["type"] for r in rows] == ["thread_deleted"] and rows[0]["event"]["reason"] == "gdpr"
    # Its spawned_from link is gone, and a deleted thread is nobody's child (though the
    # parent's own spawn event still names it); its outgoing link's target still answers.
    assert ok_json(capsys, "links", loaded, TID, "--incoming", "--relation", "spawned_from") == []
    assert ok_json(capsys, "children", loaded, TID) == []
    assert ok_json(capsys, "children", loaded, TID, "--recursive") == []
    assert ok_json(capsys, "links", loaded, SPAWNED) == []
    assert ok_json(capsys, "children", loaded, SPAWNED) == []  # a deleted thread exists: answered


def test_threads_include_deleted_lists_tombstones(capsys: pytest.CaptureFixture[str], loaded: str) -> None:
    ok_json(capsys, "delete", loaded, SPAWNED)
    listed = json.dumps(ok_json(capsys, "threads", loaded, "--include-deleted")["threads"])
    assert SPAWNED in listed, "a deleted thread's tombstone is not listed by threads --include-deleted"
    with Store(loaded, readonly=True) as s:
        page = s.threads(include_deleted=True)
        assert [h.status for h in page.threads if h.thread_id == SPAWNED] == ["deleted"]
        assert SPAWNED not in [h.thread_id for h in s.threads().threads]


def test_train(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    store = str(tmp_path / "s")
    with Store(store, durability="relaxed") as s:
        for i in range(40):
            tid = str(uuid.uuid4())
            doc = copy.deepcopy(DOC)
            doc["thread_id"] = tid
            doc["title"] = f"thread {i}"
            s.import_thread(from_builtins(doc, m.Thread))
    few = str(tmp_path / "few")
    with Store(few) as s:
        tid = str(uuid.uuid4())
        s.append(tid, [m_started(tid)])
    assert ok_json(capsys, "train", few) == {"dictionary_id": 0, "trained": False}
    assert ok_json(capsys, "train", store, "--samples", "500") == {"dictionary_id": 1, "trained": True}
    assert ok_json(capsys, "stat", store)["dictionaries"] == 1
    # Values written after training use the dictionary and read back.
    doc = copy.deepcopy(DOC)
    doc["thread_id"] = str(uuid.uuid4())
    p = tmp_path / "d.json"
    p.write_text(json.dumps(doc))
    ok_json(capsys, "import", store, str(p))
    assert ok_json(capsys, "export", store, doc["thread_id"]) == doc


# --------------------------------------------------------------------------- bad input


def test_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.json")
    for cmd in ("validate", "hash"):
        fails(capsys, cmd, missing, match="cannot read")
    fails(capsys, "import", str(tmp_path / "s"), missing, match="cannot read")


def test_malformed_json(capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The error names the input file (``<stdin>`` for ``-``) and, for a document, the JSON path;
    a failed import creates no store."""
    p = tmp_path / "broken.json"
    p.write_text("{not json")
    fails(capsys, "hash", str(p), match=rf"^error: {re.escape(str(p))}: (?i:.*json)")
    fails(capsys, "import", str(tmp_path / "s"), str(p), match=rf"^error: {re.escape(str(p))}: (?i:.*json)")
    q = tmp_path / "wrong.json"
    q.write_text(json.dumps({"version": "0.0.4", "thread_id": 5}))
    fails(capsys, "import", str(tmp_path / "s"), str(q), match=rf"^error: {re.escape(str(q))}: .*\(at \$\.thread_id\)$")
    fails(capsys, "hash", str(q))
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"[1,")))
    fails(capsys, "import", str(tmp_path / "s"), "-", match=r"^error: <stdin>: (?i:.*json)")
    assert not (tmp_path / "s").exists()


def test_unknown_thread(capsys: pytest.CaptureFixture[str], loaded: str) -> None:
    ghost = str(uuid.uuid4())
    for cmd in ("export", "read", "turns", "pending", "interrupts", "links", "delete"):
        fails(capsys, cmd, loaded, ghost, match="does not exist")
    for argv in (["children"], ["children", "--recursive"], ["links", "--incoming"]):
        fails(capsys, argv[0], loaded, ghost, *argv[1:], match=f"thread {ghost} does not exist")


def test_links_declared_at_thread_start(capsys: pytest.CaptureFixture[str], loaded: str) -> None:
    """A thread whose ThreadStarted declares its links (not LinkAdded events): every verb lists them."""
    from tplog.events import ThreadStarted

    tid = str(uuid.uuid4())
    rel = m.ThreadRelationships(links=[m.ThreadLink(thread_id=TID, relation="spawned_from"),
                                       m.ThreadLink(thread_id=TID, relation="referenced")])
    with Store(loaded) as s:
        s.append(tid, [ThreadStarted(thread_id=tid, created_at="2025-01-20T10:00:00Z", relationships=rel)])
    assert ok_json(capsys, "links", loaded, tid) == [{"thread_id": TID, "relation": "spawned_from"},
                                                     {"thread_id": TID, "relation": "referenced"}]
    assert tid in ok_json(capsys, "children", loaded, TID)
    assert (tid, "referenced") in [(r["thread_id"], r["relation"]) for r in
                                   ok_json(capsys, "links", loaded, TID, "--incoming")]
    assert ok_json(capsys, "export", loaded, tid)["relationships"] == {"links": [
        {"thread_id": TID, "relation": "spawned_from"}, {"thread_id": TID, "relation": "referenced"}]}
    rc, out, err = run(capsys, "verify", loaded)
    assert rc == 0, (out, err)


def test_store_missing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    nowhere = tmp_path / "no-store"
    t = str(uuid.uuid4())
    wrong: list[str] = []
    for argv in (["stat"], ["backup", str(tmp_path / "bk")], ["threads"], ["export", t], ["read", t],
                 ["turns", t], ["pending", t], ["interrupts", t], ["children", t], ["links", t],
                 ["delete", t], ["train"]):
        rc, out, err = run(capsys, argv[0], str(nowhere), *argv[1:])
        if nowhere.exists():
            wrong.append(f"`tplog {argv[0]}` created a store at a mistyped path")
            import shutil

            shutil.rmtree(nowhere)
        elif not (rc == 2 and out == "" and err.startswith("error: ") and err.count("\n") == 1
                  and "no tplog store" in err):
            wrong.append(f"`tplog {argv[0]}`: rc={rc} err={err!r}")
    assert wrong == []


def test_store_path_is_a_file(capsys: pytest.CaptureFixture[str], doc_file: Path) -> None:
    fails(capsys, "stat", str(doc_file))
    fails(capsys, "import", str(doc_file), str(doc_file))


# --------------------------------------------------------------------------- subprocess


def _py(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "tplog", *args], input=stdin, capture_output=True, timeout=120,
                          cwd=ROOT)


def test_subprocess_roundtrip(doc_file: Path, tmp_path: Path) -> None:
    store = str(tmp_path / "s")
    r = _py("validate", str(doc_file))
    assert r.returncode == 0 and json.loads(r.stdout)["errors"] == []
    r = _py("hash", "-", stdin=doc_file.read_bytes())
    assert r.returncode == 0
    h = json.loads(r.stdout)["hash"]
    r = _py("import", store, str(doc_file))
    assert r.returncode == 0, r.stderr
    r = _py("export", store, TID)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == DOC
    assert hash_json(r.stdout) == h


def test_subprocess_errors_are_one_line(tmp_path: Path) -> None:
    for args in (["stat", str(tmp_path / "nowhere")], ["hash", str(tmp_path / "missing.json")]):
        r = _py(*args)
        assert r.returncode == 2
        err = r.stderr.decode()
        assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
        assert r.stdout == b""
    r = _py()
    assert r.returncode == 2 and b"usage:" in r.stderr  # no command


# --------------------------------------------------------------------------- docs


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


# serve: tested over HTTP in tests/server; rebuild/verify: behaviour tested in tests/backends/lmdb/test_rebuild.py;
# tail/tree (and the terminal output of every command): tests/test_cli_human.py
# copy: tests/test_copy.py and tests/postgres/test_pg_copy_migrate.py (migrate too); search: tests/search
EXPECTED_COMMANDS = {"validate", "hash", "stat", "backup", "import", "export", "read", "threads", "turns",
                     "pending", "interrupts", "children", "links", "delete", "train",
                     "rebuild", "verify", "serve", "copy", "migrate", "tail", "tree", "search",
                     "fork", "prune", "prune-reports"}  # these three: tests/test_cli_lifecycle.py


def test_every_command_is_tested_here() -> None:
    assert set(_commands()) >= EXPECTED_COMMANDS
    missing = set(_commands()) - EXPECTED_COMMANDS
    assert not missing, f"new commands without tests in tests/test_cli.py: {sorted(missing)}"


@pytest.mark.parametrize("command", sorted(EXPECTED_COMMANDS))
def test_every_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: tplog {command}")
    desc = _commands()[command].description
    assert desc and desc in " ".join(out.split())
    actions = [a for a in _commands()[command]._actions if not isinstance(a, argparse._HelpAction)]
    assert all(a.help for a in actions), [a.dest for a in actions if not a.help]


def test_top_level_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for command in _commands():
        assert re.search(rf"^\s+{command}\s", out, re.M), command


def test_every_command_is_in_the_readme() -> None:
    readme = ROOT / "README.md"
    assert readme.exists(), "README.md is missing"
    text = readme.read_text()
    missing = [c for c in sorted(_commands()) if not re.search(rf"\btplog {re.escape(c)}\b", text)]
    assert not missing, f"README.md does not document: {', '.join('tplog ' + c for c in missing)}"
