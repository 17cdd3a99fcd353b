"""What a person sees on a terminal for the results the other CLI tests only check as JSON:
thinking and file parts, retry prompts, token counts, an agent turn still in progress, abandoned
tool calls, a next-page cursor, a tombstone's and an interruption's reason in ``tplog read``,
validation errors and warnings, and the differences of ``rebuild --verify``.

``tplog.cli.main`` runs in this process with stdout a terminal (a stream whose ``isatty`` is true)
and without rich, so the views print as plain text (``test_cli_human`` drives rich on a real
pseudo-terminal); :func:`tplog.render.render` is checked directly for results no command prints yet.
"""

from __future__ import annotations

import io
import json
import re
import sys
import uuid
from pathlib import Path
from typing import Any

import lmdb
import pytest
from test_cli import AGENT, DOC, TID

from tplog.cli import main
from tplog.console import plain_text
from tplog.events import AgentTurnInterrupted, AgentTurnStarted, MessageRecorded
from tplog.protocol import model as m
from tplog.protocol.json import from_builtins, from_json
from tplog.render import iso_ns, render, size
from tplog.store import Store

RICH = "6c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
RICH_DOC: dict[str, Any] = {
    "version": "0.0.4", "thread_id": RICH, "created_at": "2025-01-20T10:00:00Z",
    "updated_at": "2025-01-21T09:00:00Z",
    "agents": {AGENT: {"agent_id": AGENT, "agent_name": "bot", "created_at": "2025-01-20T10:00:00Z"}},
    "turns": [
        {"turn_type": "user", "submitted_at": "2025-01-20T10:00:00Z",
         "parts": [{"part_kind": "user-prompt", "content": "Describe this"}]},
        {"turn_type": "agent", "agent_id": AGENT, "started_at": "2025-01-20T10:00:01Z",
         "completion_status": "complete", "completed_at": "2025-01-21T09:00:00Z",
         "messages": [
             {"message_type": "response", "timestamp": "2025-01-20T10:00:02Z", "agent_id": AGENT,
              "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
              "parts": [
                  {"part_kind": "thinking", "content": "hmm let me think", "provider_name": "x"},
                  {"part_kind": "file", "content": {"kind": "binary", "data": "aGk=", "media_type": "image/png",
                                                    "identifier": "cat.png"}},
                  {"part_kind": "text", "content": "A picture."}]},
             {"message_type": "request", "timestamp": "2025-01-20T10:00:03Z", "agent_id": AGENT,
              "parts": [{"part_kind": "retry-prompt", "content": "try again"}]},
         ]},
    ],
}


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def on_terminal(monkeypatch: pytest.MonkeyPatch, *argv: str, code: int = 0) -> str:
    """``tplog ARGV`` with stdout a terminal and rich absent: the plain-text view it prints."""
    monkeypatch.setitem(sys.modules, "rich", None)
    out = _Terminal()
    with monkeypatch.context() as mp:
        mp.setattr(sys, "stdout", out)
        rc = main(list(argv))
    assert rc == code, out.getvalue()
    return out.getvalue()


def _msg(text: str, ts: str) -> Any:
    return MessageRecorded(message=from_builtins(
        {"message_type": "response", "timestamp": ts, "agent_id": AGENT,
         "parts": [{"part_kind": "tool-call", "tool_name": "rm", "tool_call_id": text, "args": {"path": "/"}}]},
        m.Message))


@pytest.fixture
def store(tmp_path: Path) -> str:
    """DOC, and RICH_DOC with a further agent turn still running (a tool call without a return)."""
    path = str(tmp_path / "store")
    with Store(path) as s:
        s.import_thread(from_json(json.dumps(DOC).encode(), m.Thread))
        s.import_thread(from_json(json.dumps(RICH_DOC).encode(), m.Thread))
        s.append(RICH, [AgentTurnStarted(agent_id=AGENT, started_at="2025-01-21T11:00:00Z"),
                        _msg("k1", "2025-01-21T11:00:01Z")])
    return path


def test_turns_show_thinking_files_retries_tokens_and_the_turn_in_progress(
        store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    out = on_terminal(monkeypatch, "turns", store, RICH)
    assert out.startswith(f"thread {RICH}: 2 turns\n")
    # completed on another day than it started: the end shows its date too
    assert "#2 agent bot [complete] 2025-01-20T10:00:01Z → 2025-01-21T09:00:00Z" in out  # its registered name
    assert "2025-01-20T10:00:02Z response (15 tokens)" in out
    assert "thinking (16 chars, folded)" in out and "hmm let me think" not in out
    assert "file: image/png cat.png" in out  # the media type and name are in the part's content
    assert "aGk=" not in out  # not the bytes
    assert 'retry-prompt: {"content":"try again"}' in out
    tail = out[out.index("in progress:"):]
    assert tail.startswith("in progress: agent bot since 2025-01-21T11:00:00Z")
    assert re.search(r"2025-01-21T11:00:01Z response\n\s+└── tool call rm\(\{\"path\":\"/\"\}\) \[k1\]", tail), tail


def test_read_says_why_a_turn_was_interrupted_and_why_a_thread_was_deleted(
        store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    out = on_terminal(monkeypatch, "read", store, TID)
    lines = {ln.split(" ", 2)[1]: ln for ln in out.splitlines()}  # by #seq
    assert lines["#3"].endswith(" link_added  spawned_from 1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f")
    assert lines["#5"].endswith(" user_turn  prompt: Weather in Paris and Berlin?")
    assert lines["#6"].endswith(f" agent_turn_started  agent {AGENT}")
    assert lines["#9"].endswith(" agent_turn_interrupted  user_cancelled")
    assert lines["#12"].endswith(' message  system data-tp-thread_spawn: {"spawned_thread_id":'
                                 '"3c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"}')
    assert lines["#15"].endswith(" agent_turn_completed")  # nothing to add
    out = on_terminal(monkeypatch, "read", store, RICH, "--after", "4", "--limit", "1")
    assert out.endswith(" #5 message  response: thinking (16 chars, folded); file: image/png cat.png; "
                        "text: A picture.\n"), out
    on_terminal(monkeypatch, "delete", store, RICH, "--reason", "gdpr request")
    out = on_terminal(monkeypatch, "read", store, RICH)
    assert re.fullmatch(r"\S+ #\d+ thread_deleted  gdpr request\n", out), out


def test_pending_shows_the_calls_an_interruption_abandoned(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with Store(store) as s:
        s.append(RICH, [_msg("k2", "2025-01-21T11:00:02Z"),
                        AgentTurnInterrupted(interruption=m.Interruption(reason="user_cancelled",
                                                                         interrupted_at="2025-01-21T11:00:03Z"))])
        pend = s.pending(RICH)
    assert [c.tool_call_id for c in pend.abandoned] == ["k1", "k2"] and pend.pending == []
    out = on_terminal(monkeypatch, "pending", store, RICH)
    pending, _, abandoned = out.partition("\nabandoned\n")
    assert pending.startswith("pending tool calls\n") and "(none)" in pending
    rows = [ln.split() for ln in abandoned.splitlines()[1:]]
    assert [r[:4] for r in rows] == [["k1", "rm", "abandoned", "-"], ["k2", "rm", "abandoned", "-"]], abandoned
    assert rows[0][4] == rows[1][4] == "#3"  # the third turn, as the turns tree numbers it


def test_threads_on_a_terminal_tells_how_to_get_the_next_page(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    out = on_terminal(monkeypatch, "threads", store, "--limit", "1")
    m_ = re.search(r"^next page\s+--after (\S+)$", out, re.M)  # the option to pass it back with
    assert m_, out
    first = [ln.split()[0] for ln in out.splitlines()[1:2]]
    out2 = on_terminal(monkeypatch, "threads", store, "--limit", "1", "--after", m_.group(1))
    second = [ln.split()[0] for ln in out2.splitlines()[1:2]]
    assert sorted(first + second) == sorted([TID, RICH])
    assert "next page" not in out2  # the last page


def test_tree_shows_a_spawned_child_that_is_not_in_the_store_by_its_id_alone(
        store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    out = on_terminal(monkeypatch, "tree", store, TID)
    root, child = out.splitlines()
    assert root.startswith(f"{TID}  Weather  idle, 2/2 turns, updated ")
    assert child == "└── 3c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"  # spawned, never recorded here: no head


def test_validate_on_a_terminal_lists_errors_and_warnings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = json.loads(json.dumps(RICH_DOC))
    bad["turns"][1]["messages"][1]["parts"][0].update(tool_name="t", tool_call_id="nope")  # no such call
    bad["turns"][0]["submitted_at"] = "2025-01-20T10:00:00"  # no zone: a warning
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(bad))
    out = on_terminal(monkeypatch, "validate", str(f), code=1)
    errors, _, warnings = out.partition("\nwarnings\n")
    assert re.search(r"^\$\.turns\[1\]\.messages\[1\]\.parts\[0\]\.tool_call_id\s+v3\.2-tool-call-id\s+"  # the rule
                     r"tool_call_id 'nope' matches no earlier tool-call", errors, re.M), errors
    assert re.search(r"^\$\.turns\[0\]\.submitted_at\s+timestamp-timezone\s+\S", warnings, re.M), warnings
    good = tmp_path / "good.json"
    good.write_text(json.dumps(RICH_DOC))
    out = on_terminal(monkeypatch, "validate", str(good))
    assert out.startswith("errors\n(none)\n") and "warnings" in out


def test_rebuild_verify_on_a_terminal_lists_each_difference(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    env = lmdb.open(store, max_dbs=20)
    with env.begin(write=True) as txn:  # lose one thread's state row
        assert txn.delete(b"state\x00" + uuid.UUID(RICH).bytes, db=env.open_db(b"proj", txn=txn))
    env.close()
    out = on_terminal(monkeypatch, "rebuild", store, "--verify", code=1)
    assert re.search(r"^state\s+yes\s+\d+\s+[\d.]+ s\s+\d+\s+\d+\s+1$", out, re.M), out
    assert re.search(r"^links\s+yes\s+.*\s0$", out, re.M), out
    title = "differences in state\n"
    assert title in out and "differences in links" not in out
    [diff] = out[out.index(title) + len(title):].splitlines()[1:]
    assert diff.startswith("state: state of thread key " + uuid.UUID(RICH).hex), diff


def test_a_result_without_a_view_of_its_own_still_reads() -> None:
    """The generic view: a list of objects is a table of their keys, a list of values one a line, a value alone."""
    rows = [{"thread_id": "a", "n": 1, "ok": True}, {"thread_id": "b", "extra": None}]
    assert plain_text(render("some-command", rows)) == ("thread_id  n  ok   extra\n"
                                                        "a          1  yes  -\n"
                                                        "b          -  -    -\n")
    assert plain_text(render("some-command", ["x", 2, {"k": [1, 2]}])) == 'value\nx\n2\n{"k":[1,2]}\n'
    assert plain_text(render("some-command", [])) == "(none)\n"
    assert plain_text(render("some-command", "done")) == "value  done\n"


def test_stat_of_a_store_without_table_counts_and_sizes_for_people() -> None:
    """A backend whose stats have no LMDB tables (and no map size) shows the known rows, then its own."""
    out = plain_text(render("stat", {"path": "postgresql://db/x", "threads": 2, "events": 9, "map_size": None,
                                     "server_version": "15.4"}))
    assert "tables" not in out
    assert re.search(r"^map size\s+-$", out, re.M) and re.search(r"^server version\s+15\.4$", out, re.M), out
    assert [size(n) for n in (0, 1023, 1024, 5 * 1024**3, 3 * 1024**5)] == ["0 B", "1023 B", "1.0 KB", "5.0 GB",
                                                                             "3072.0 TB"]
    assert iso_ns(None) == iso_ns(0) == "-"
    assert iso_ns(1_700_000_000_123_456_789, millis=True) == "2023-11-14T22:13:20.123Z"


def test_prune_import_and_listing_views() -> None:
    """Every part of a prune report, an import with its event ids, and the next-page cursors."""
    report = {"at_ns": 1_700_000_000_000_000_000, "dry_run": False, "scope": "t1",
              "policy": {"max_age_ns": 90 * 86400 * 10**9, "max_threads": None, "keep_if_linked": False},
              "removed": [{"thread_id": "a", "why": "not updated", "updated_ns": 1_600_000_000_000_000_000}],
              "kept": [{"thread_id": "b", "why": "linked"}], "failed": [{"thread_id": "c", "why": "gone"}],
              "dangling": [["d", "a"]], "report_thread_id": "r"}
    out = plain_text(render("prune", report))
    assert re.search(r"^at\s+2023-11-14T22:13:20Z$", out, re.M) and re.search(r"^scope\s+t1$", out, re.M), out
    assert re.search(r"^policy\s+max age 90 days, 0:00:00, linked ones too$", out, re.M), out
    assert re.search(r"^a\s+2020-09-13T12:26:40Z\s+not updated$", out, re.M), out
    assert "kept\nthread  why\nb       linked" in out and "failed\nthread  why\nc       gone" in out
    assert re.search(r"^d\s+a$", out, re.M) and "left dangling" in out
    out = plain_text(render("prune-reports", {"reports": [report], "cursor": "CUR"}))
    assert re.search(r"^2023-11-14T22:13:20Z\s+t1\s+max age .*\s1\s+1\s+no\s+r$", out, re.M), out
    assert re.search(r"^next page\s+--after CUR$", out, re.M)
    assert plain_text(render("prune-reports", {"reports": [], "cursor": None})) == "no prune reports\n"
    imported = {"thread_id": "t", "title": "T", "events": 2, "messages": 0, "user_turns": 0, "agent_turns": 0,
                "first_seq": 1, "last_seq": 2, "first_position": 5, "last_position": 6, "duplicate": False,
                "event_ids": ["e1", "e2"]}
    out = plain_text(render("import", imported))
    assert re.search(r"^log positions\s+5\.\.6$", out, re.M) and re.search(r"^ *2\s+e2$", out, re.M), out
    head = {"thread_id": "t", "status": "active", "activity": "idle", "title": None, "updated_ns": 0,
            "user_turns": 0, "agent_turns": 0, "messages": 0, "version": 1}
    out = plain_text(render("threads", {"threads": [head], "cursor": "C"}))
    assert re.search(r"^t\s+idle\s+-\s+-\s+0/0\s+0\s+1$", out, re.M) and "--after C" in out, out


def test_event_lines_name_a_registered_agent() -> None:
    from tplog.render import event_line

    row = {"seq": 2, "type": "agent_registered", "recorded_at": 0,
           "event": {"agent": {"agent_id": "a1", "agent_name": "Weather bot"}}}
    assert event_line(row) == "- #2 agent_registered  agent Weather bot (a1)"
