"""What a person reads: one vocabulary for status and activity, import and prune summaries,
titles and agent names, and CLI-worded argument errors.

``status`` (the JSON's) is whether a thread is live (``active``) or a tombstone (``deleted``);
``activity`` is what it is doing (idle, running, waiting on approvals / tools, interrupted). The
threads table shows activity; ``--activity`` filters on it, ``--status`` on status.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from test_cli import DOC, TID, fails, ok_json, run
from test_cli_human import ROOT, on_terminal

from tplog.events import (
    AgentRegistered,
    AgentTurnCompleted,
    AgentTurnStarted,
    MessageRecorded,
    ThreadStarted,
    UserTurnSubmitted,
)
from tplog.protocol import model as m
from tplog.protocol.validate import thread_id_for
from tplog.store import Store

T = "2025-01-20T10:00:00Z"
AGENT = "7d9f3c2e-0000-4000-8000-000000000001"
IDLE, WAITING, RUNNING, GONE = (f"{i}e0a0b0c-0000-4000-8000-00000000000{i}" for i in range(1, 5))


def _start(tid: str, title: str) -> list[Any]:
    return [ThreadStarted(thread_id=tid, created_at=T, title=title),
            AgentRegistered(agent=m.AgentConfig(agent_id=AGENT, agent_name="Weather bot", created_at=T))]


def _exchange(*, deferred: dict[str, str] | None = None, close: bool = True) -> list[Any]:
    evs: list[Any] = [
        UserTurnSubmitted(turn=m.UserTurn(submitted_at=T, parts=[m.UserPromptPart(content="hi")])),
        AgentTurnStarted(agent_id=AGENT, started_at=T),
        MessageRecorded(message=m.ResponseMessage(timestamp=T, agent_id=AGENT, parts=[
            m.ToolCallPart(tool_name="rm", args={}, tool_call_id="c1")] if deferred else [m.TextPart(content="yo")]))]
    return [*evs, AgentTurnCompleted(completed_at=T, deferred=deferred or {})] if close else evs


@pytest.fixture
def store(tmp_path: Path) -> str:
    path = str(tmp_path / "store")
    with Store(path) as s:
        s.append(IDLE, [*_start(IDLE, "Trip plan"), *_exchange()])
        s.append(WAITING, [*_start(WAITING, "Cleanup"), *_exchange(deferred={"c1": "approval"})])
        s.append(RUNNING, [*_start(RUNNING, "Live one"), *_exchange(close=False)])
        s.append(GONE, _start(GONE, "Gone"))
        s.delete_thread(GONE, reason="test")
    return path


def _ids(capsys: pytest.CaptureFixture[str], store: str, *flags: str) -> set[str]:
    return {t["thread_id"] for t in ok_json(capsys, "threads", store, *flags)["threads"]}


# --------------------------------------------------------------------------- status and activity


def test_the_threads_table_shows_activity_and_title(store: str) -> None:
    out = on_terminal("threads", store, "--include-deleted", columns=160)
    header = next(ln for ln in out.splitlines() if ln.startswith("thread"))
    assert header.split()[:3] == ["thread", "activity", "title"] and "status" not in header
    for tid, shown, title in ((IDLE, "idle", "Trip plan"), (WAITING, "waiting_approval", "Cleanup"),
                              (RUNNING, "running", "Live one"), (GONE, "deleted", "Gone")):
        assert re.search(rf"^{tid}\s+{shown}\s+{title}\s", out, re.M), (tid, out)


def test_activity_and_status_filters_match_what_is_shown(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _ids(capsys, store, "--activity", "waiting") == {WAITING}
    assert _ids(capsys, store, "--activity", "waiting_approval") == {WAITING}
    assert _ids(capsys, store, "--activity", "waiting_tools") == set()
    assert _ids(capsys, store, "--activity", "running") == {RUNNING}
    assert _ids(capsys, store, "--activity", "active") == {RUNNING}  # the JSON's own name for running
    assert _ids(capsys, store, "--activity", "idle", "--activity", "running") == {IDLE, RUNNING}
    # --status is the JSON's "status": every live thread is "active", whatever it is doing
    assert _ids(capsys, store, "--status", "active") == {IDLE, WAITING, RUNNING}
    assert _ids(capsys, store, "--status", "deleted") == {GONE}
    assert _ids(capsys, store, "--status", "active", "--status", "deleted") == {IDLE, WAITING, RUNNING, GONE}
    assert _ids(capsys, store, "--include-deleted", "--status", "active") == {IDLE, WAITING, RUNNING}
    page = ok_json(capsys, "threads", store, "--status", "deleted")["threads"]
    assert [(h["status"], h["activity"]) for h in page] == [("deleted", page[0]["activity"])]


def test_status_filter_pages_exactly(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[str] = []
    after: list[str] = []
    while True:
        page = ok_json(capsys, "threads", store, "--status", "active", "--limit", "2", *after)
        assert len(page["threads"]) <= 2
        seen += [t["thread_id"] for t in page["threads"]]
        if page["cursor"] is None:
            break
        after = ["--after", page["cursor"]]
    assert sorted(seen) == sorted([IDLE, WAITING, RUNNING])
    # the newest is the tombstone: the first page read holds no live thread, so the next one is read too
    page = ok_json(capsys, "threads", store, "--include-deleted", "--status", "active", "--limit", "1")
    assert [t["thread_id"] for t in page["threads"]] == [RUNNING] and page["cursor"]


def test_an_activity_given_to_status_says_where_it_belongs(store: str) -> None:
    r = subprocess.run([sys.executable, "-m", "tplog", "threads", store, "--status", "waiting_approval"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and r.stdout == ""
    assert "a thread's status is active or deleted" in r.stderr
    assert "--activity waiting_approval" in r.stderr


# --------------------------------------------------------------------------- titles, agents


def test_tree_and_turns_show_titles_and_agent_names(store: str) -> None:
    assert on_terminal("tree", store, IDLE).splitlines()[0].startswith(f"{IDLE}  Trip plan  idle, 1/1 turns")
    out = on_terminal("turns", store, IDLE)
    assert out.startswith(f"thread {IDLE} (Trip plan): 2 turns")
    assert "#2 agent Weather bot [complete]" in out and "7d9f3c2e" not in out


def test_turns_json_adds_title_and_agents(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    d = ok_json(capsys, "turns", store, IDLE)
    assert list(d) == ["thread_id", "turns", "in_progress", "title", "agents"]  # added after the old fields
    assert d["title"] == "Trip plan" and d["agents"] == {AGENT: "Weather bot"}


def test_two_agents_of_one_name_are_told_apart() -> None:
    from tplog.render import render

    other = "8d9f3c2e-0000-4000-8000-000000000002"
    turn = {"turn_type": "agent", "agent_id": AGENT, "started_at": T, "completion_status": "complete",
            "messages": []}
    [tree] = render("turns", {"thread_id": TID, "turns": [turn, {**turn, "agent_id": "unregistered"}],
                              "in_progress": None, "agents": {AGENT: "bot", other: "bot"}})
    assert tree.children[0].label.startswith("#1 agent bot (7d9f3c2e…) [complete]")  # type: ignore[union-attr]
    assert tree.children[1].label.startswith("#2 agent unregistered [complete]")  # type: ignore[union-attr]


# --------------------------------------------------------------------------- import


def _history(tmp_path: Path, n: int) -> Path:
    """A Pydantic AI history of ``n`` user/assistant exchanges."""
    from pydantic_ai import messages as pm

    t0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    msgs: list[Any] = []
    for i in range(n):
        t = t0 + dt.timedelta(seconds=10 * i)
        msgs += [pm.ModelRequest(parts=[pm.UserPromptPart(content=f"q{i}", timestamp=t)], run_id=f"r{i}"),
                 pm.ModelResponse(parts=[pm.TextPart(content=f"a{i}")], timestamp=t, run_id=f"r{i}")]
    p = tmp_path / "history.json"
    p.write_bytes(pm.ModelMessagesTypeAdapter.dump_json(msgs))
    return p


def test_import_prints_a_summary_and_event_ids_only_when_asked(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    src, store = _history(tmp_path, 30), str(tmp_path / "s")
    res = ok_json(capsys, "import", store, str(src), "--format", "pydantic-ai")
    assert "event_ids" not in res
    assert (res["events"], res["messages"], res["user_turns"], res["agent_turns"]) == (122, 30, 30, 30)
    assert res["first_seq"] == 1 and res["last_seq"] == 122 and res["duplicate"] is False
    res = ok_json(capsys, "import", store, str(src), "--format", "pydantic-ai", "--event-ids")
    assert len(res["event_ids"]) == res["events"] == 122
    with Store(store, readonly=True) as s:
        assert [e.event_id for e in s.read(res["thread_id"])] == res["event_ids"]


def test_import_on_a_terminal_is_a_summary_with_an_event_count_progress(tmp_path: Path) -> None:
    src, store = _history(tmp_path, 30), str(tmp_path / "s")
    out = on_terminal("import", store, str(src), "--format", "pydantic-ai")
    assert re.search(r"^events\s+122$", out, re.M) and re.search(r"^turns\s+30 user, 30 agent$", out, re.M), out
    assert re.search(r"^import: write events .* 0/122 ", out, re.M), out  # counts events, not "1/1"
    assert re.search(r"^import: read and check .* 122/122 ", out, re.M), out
    summary = out[out.index("\nimported\n"):]  # what stays under the bars: a few lines, no event ids
    assert "event ids" not in summary and len(summary.splitlines()) < 12, summary


def test_import_thread_id_and_a_second_import_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, store = _history(tmp_path, 2), str(tmp_path / "s")
    res = ok_json(capsys, "import", store, str(src), "--format", "pydantic-ai", "--thread-id", "chat-42")
    assert res["thread_id"] == thread_id_for("chat-42")
    fails(capsys, "import", store, str(src), "--format", "pydantic-ai", "--thread-id", "chat-42",
          match=rf"thread {thread_id_for('chat-42')} is already in .*importing one twice is refused")
    with Store(store, readonly=True) as s:
        assert len(s.threads().threads) == 1
    doc = tmp_path / "doc.json"  # a threadprotocol document is stored under the given id instead of its own
    doc.write_text(json.dumps(DOC))
    new = str(uuid.uuid4())
    assert ok_json(capsys, "import", store, str(doc), "--thread-id", new)["thread_id"] == new
    with Store(store, readonly=True) as s:
        assert s.export(new).title == "Weather" and not s.exists(TID)


# --------------------------------------------------------------------------- prune


def test_prune_and_prune_reports_on_a_terminal(store: str) -> None:
    out = on_terminal("prune", store, "--max-threads", "1", columns=160)
    assert "at_ns" not in out and "…" not in out and "{" not in out
    assert re.search(r"^at\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", out, re.M), out
    assert re.search(r"^policy\s+max threads 1, keep linked$", out, re.M), out
    assert re.search(r"^removed\s+2$", out, re.M), out
    assert re.search(rf"^({IDLE}|{WAITING})\s+\d{{4}}-\d\d-\d\dT\S+Z\s+beyond the newest 1", out, re.M), out
    out = on_terminal("prune-reports", store, columns=160)
    assert re.search(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\s+-\s+max threads 1, keep linked\s+2\s+0\s+no\s+\S+$", out,
                     re.M), out
    out = on_terminal("prune", store, "--max-age", "1h", "--dry-run", columns=160)
    assert re.search(r"^policy\s+max age 1:00:00, keep linked$", out, re.M) and "would remove" in out, out


# --------------------------------------------------------------------------- arguments and help


@pytest.mark.parametrize(("argv", "message"), [
    (["read", "S", TID, "--limit", "-1"], "--limit must be 0 or more, not -1"),
    (["threads", "S", "--limit", "0"], "--limit must be 1 or more, not 0"),
    (["children", "S", TID, "--limit", "x"], "--limit must be a whole number, not 'x'"),
    (["links", "S", TID, "--incoming", "--limit", "-1"], "--limit must be 0 or more, not -1"),
    (["prune-reports", "S", "--limit", "-1"], "--limit must be 1 or more, not -1")])
def test_limit_errors_are_in_cli_terms(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert fails(capsys, *argv) == f"error: {message}"


def test_every_help_says_a_store_may_be_a_url(capsys: pytest.CaptureFixture[str]) -> None:
    for cmd in ("threads", "import", "prune", "stat"):
        with pytest.raises(SystemExit):
            run(capsys, cmd, "--help")
        out = " ".join(capsys.readouterr().out.split())
        assert "a store directory (or lmdb:///DIR) or a postgresql:// URL" in out and "the store's directory" not in out
