"""The CLI for people and for scripts.

On a terminal (a real pseudo-terminal here, the CLI in a subprocess) ``threads``, ``turns``,
``pending``, ``children``, ``stat`` ... print tables and trees with ISO times and KB/MB sizes;
piped, or with ``--json``, they print exactly the JSON they printed before (byte for byte).
``tplog tail`` follows appends made by another process while it runs; ``tplog tree`` shows
descendants. Without rich the terminal output is plain text. The progress helper draws on a
terminal only.
"""

from __future__ import annotations

import io
import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
from test_cli import DOC, SPAWNED, TID, m_link, m_started

from tplog import thread_id_for
from tplog.cli import main
from tplog.console import KeyValues, Table, Tree, plain_text, progress
from tplog.protocol import model as m
from tplog.protocol.json import from_json, to_builtins
from tplog.store import Store

ROOT = Path(__file__).resolve().parent.parent
GRANDCHILD = "9c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
CYCLE = "8c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
NEW = "7c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture
def store(tmp_path: Path) -> str:
    path = str(tmp_path / "store")
    with Store(path) as s:
        s.import_thread(from_json(json.dumps(DOC).encode(), m.Thread))
        s.append(SPAWNED, [m_started(SPAWNED), m_link(TID, "spawned_from")])
        s.append(GRANDCHILD, [m_started(GRANDCHILD), m_link(SPAWNED, "spawned_from")])
    return path


def on_terminal(*argv: str, pre: str = "", columns: int = 100) -> str:
    """Run ``tplog ARGV`` with stdout and stderr on a pseudo-terminal; what the terminal shows (no ANSI codes)."""
    text = ANSI.sub("", terminal_bytes(*argv, pre=pre, columns=columns).decode()).replace("\r\n", "\n")
    # as the terminal shows it: a carriage return redraws the line (a progress bar), trailing blanks vanish
    return "".join(ln.rpartition("\r")[2].rstrip() + "\n" for ln in text.splitlines())


def terminal_bytes(*argv: str, pre: str = "", columns: int = 100) -> bytes:
    """The bytes ``tplog ARGV`` writes to a pseudo-terminal (stdout and stderr), escape codes and all."""
    master, slave = pty.openpty()
    code = f"import sys; {pre}\nfrom tplog.cli import main\nraise SystemExit(main(sys.argv[1:]))"
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "xterm"}
    p = subprocess.Popen([sys.executable, "-c", code, *argv], stdout=slave, stderr=slave, stdin=subprocess.DEVNULL,
                         env=env, cwd=ROOT)
    os.close(slave)
    buf = b""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal (Linux: EIO)
                break
            if not chunk:
                break
            buf += chunk
        elif p.poll() is not None:
            break
    os.close(master)
    assert p.wait(timeout=60) == 0, buf.decode(errors="replace")
    return buf


def piped(*argv: str) -> bytes:
    r = subprocess.run([sys.executable, "-m", "tplog", *argv], capture_output=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    return r.stdout


def json_as_before(data: Any) -> bytes:
    """How the CLI printed a result before it had a terminal view: msgspec JSON, indent 2, one newline."""
    return msgspec.json.format(msgspec.json.encode(data), indent=2) + b"\n"


# --------------------------------------------------------------------------- JSON unchanged


def test_piped_and_json_output_is_the_json_of_before(store: str) -> None:
    """Piped, each command prints the JSON it printed before, byte for byte; on a terminal with
    --json it prints the same bytes."""
    with Store(store, readonly=True) as s:
        page = s.threads(limit=50)
        heads = [{f: getattr(h, f) for f in h.__struct_fields__} for h in page.threads]
        res = s.load(TID)
        assert res.thread is not None
        pend = s.pending(TID)
        expected = {
            ("threads",): {"threads": heads, "cursor": page.cursor},
            ("turns", TID): {"thread_id": TID, "turns": to_builtins(res.thread.turns), "in_progress": None,
                             "title": "Weather", "agents": {a: c.agent_name for a, c in res.thread.agents.items()}},
            ("pending", TID): {"pending": [msgspec.to_builtins(p) for p in pend.pending],
                               "abandoned": [msgspec.to_builtins(p) for p in pend.abandoned]},
            ("children", TID): [SPAWNED],
            ("children", TID, "--recursive"): [{"thread_id": SPAWNED, "depth": 1},
                                               {"thread_id": GRANDCHILD, "depth": 2}],
        }
    assert expected[("pending", TID)]["pending"], "the fixture has a pending tool call (c3)"
    for argv, data in expected.items():
        out = piped(argv[0], store, *argv[1:])
        assert out == json_as_before(data), argv
        assert on_terminal(argv[0], store, *argv[1:], "--json").encode() == out, argv
    stat = piped("stat", store)
    assert json.loads(stat)["threads"] == 3
    assert on_terminal("stat", store, "--json").encode().count(b"\n") == stat.count(b"\n")


# --------------------------------------------------------------------------- on a terminal


def test_threads_on_a_terminal(store: str) -> None:
    out = on_terminal("threads", store)
    assert "{" not in out and '"thread_id"' not in out
    lines = out.splitlines()
    header = next(ln for ln in lines if ln.startswith("thread"))
    assert header.split() == ["thread", "activity", "title", "updated", "turns", "msgs", "events"]
    assert max(len(ln) for ln in lines) <= 100
    with Store(store, readonly=True) as s:
        head = s.head(TID)
    row = next(ln for ln in lines if ln.startswith(TID))
    iso = time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime(head.updated_ns // 10**9))
    assert iso in row  # ISO time, not nanoseconds
    assert str(head.updated_ns) not in out
    assert re.search(rf"{re.escape(TID)}\s+idle\s+Weather\s+\S+\s+2/2\s+{head.messages}\s+{head.version}$", row), row


def test_turns_on_a_terminal_is_a_conversation_tree(store: str) -> None:
    out = on_terminal("turns", store, TID)
    assert out.startswith(f"thread {TID} (Weather): 4 turns")
    assert "#1 user 2025-01-20T10:00:00Z" in out
    assert "prompt: Weather in Paris and Berlin?" in out
    assert 'tool call get_weather({"city":"Paris"}) [c1]' in out
    assert 'tool return get_weather success: {"temp":"72F"} [c1]' in out
    assert "interrupted at 2025-01-20T10:00:15Z: user_cancelled" in out
    assert "[complete] 2025-01-20T10:00:21Z → 10:00:40Z" in out
    assert "├── " in out and "└── " in out


def test_pending_children_interrupts_links_on_a_terminal(store: str) -> None:
    out = on_terminal("pending", store, TID)
    assert "pending tool calls" in out
    assert re.search(r"c3\s+delete_notes\s+\w+", out), out
    out = on_terminal("children", store, TID)
    assert out.splitlines()[0].strip() == "children" and SPAWNED in out and GRANDCHILD not in out
    out = on_terminal("children", store, TID, "--recursive")
    assert re.search(rf"1\s+{SPAWNED}", out) and re.search(rf"2\s+{GRANDCHILD}", out), out
    out = on_terminal("interrupts", store, TID)
    assert re.search(r"#\d+\s+\d+\s+user_cancelled\s+2025-01-20T10:00:15Z\s+turn", out), out
    out = on_terminal("links", store, TID)
    assert re.search(r"\S+\s+spawned_from", out) and "referenced" in out


def test_pending_and_interrupts_number_turns_as_the_turns_tree_does(store: str) -> None:
    """The JSON's turn is a 0-based index; on a terminal it is the tree's #N, so one turn has one number."""
    with Store(store, readonly=True) as s:
        [call] = s.pending(TID).pending
        [fact] = s.interrupts(TID).facts
    tree = on_terminal("turns", store, TID)
    numbers = re.findall(r"^[├└]── #(\d+) ", tree, re.M)
    assert numbers == [str(i) for i in range(1, len(numbers) + 1)], tree

    def turn_of(needle: str) -> str:  # the #N of the tree node holding the line with needle
        above = tree[: tree.index(needle)]
        return re.findall(r"^[├└]── #(\d+) ", above, re.M)[-1]

    assert turn_of(f"[{call.tool_call_id}]") == str(call.turn + 1)
    pending = on_terminal("pending", store, TID)
    assert re.search(rf"^{call.tool_call_id}\s.*\s#{call.turn + 1}\s+{call.seq}$", pending, re.M), pending
    assert turn_of("interrupted at") == str(fact.turn + 1)
    interrupts = on_terminal("interrupts", store, TID)
    assert re.search(rf"^\s*#{fact.turn + 1}\s+{fact.seq}\s+user_cancelled", interrupts, re.M), interrupts


def test_stat_on_a_terminal(store: str) -> None:
    out = on_terminal("stat", store)
    with Store(store, readonly=True) as s:
        st = s.stats()
    assert re.search(r"^threads\s+3$", out, re.M) and re.search(rf"^events\s+{st['events']}$", out, re.M)
    assert re.search(r"^map size\s+64\.0 MB$", out, re.M), out
    assert re.search(r"^file\s+\d+\.\d KB$", out, re.M)
    assert re.search(r"^events\s+\d+\s+\d+\s+\d+\s+\d+\.\d KB$", out, re.M)  # the tables table
    assert str(st["file_bytes"]) not in out


def test_every_other_command_reads_on_a_terminal(store: str, tmp_path: Path) -> None:
    """Commands without a view of their own show their result as key/value lines or a table."""
    out = on_terminal("verify", store)
    assert re.search(r"^ok\s+yes$", out, re.M) and "problems" in out and "(none)" in out
    doc = tmp_path / "d.json"
    doc.write_text(json.dumps(DOC))
    out = on_terminal("hash", str(doc))
    assert re.search(r"^hash\s+sha256:[0-9a-f]{64}$", out, re.M), out
    out = on_terminal("read", store, TID, "--limit", "2")
    lines = out.splitlines()
    assert len(lines) == 2 and re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z #1 thread_started", lines[0]), out


def test_without_rich_a_terminal_gets_plain_text(store: str) -> None:
    """rich is optional (the cli extra): without it the same views print as plain text."""
    out = on_terminal("threads", store, pre="sys.modules['rich'] = None")
    assert "{" not in out
    header = out.splitlines()[0]
    assert header.split() == ["thread", "activity", "title", "updated", "turns", "msgs", "events"]
    assert any(ln.startswith(TID) for ln in out.splitlines())
    out = on_terminal("tree", store, TID, pre="sys.modules['rich'] = None")
    assert f"└── {SPAWNED}" in out and f"    └── {GRANDCHILD}" in out


def test_plain_text_blocks() -> None:
    text = plain_text([Table("t", ["a", "n"], [["x", "1"], ["yy", "22"]], right=frozenset({"n"})),
                       KeyValues(None, [("k", "v"), ("key", "w")]),
                       Tree("root", [Tree("a", [Tree("a1")]), Tree("b")]), Table(None, ["a"], [], empty="nothing")])
    assert text == ("t\na    n\nx    1\nyy  22\n\n"
                    "k    v\nkey  w\n\n"
                    "root\n├── a\n│   └── a1\n└── b\n\n"
                    "nothing\n")


# --------------------------------------------------------------------------- tree


def test_tree(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    with Store(store) as s:  # a cycle: the grandchild spawned from ... its grandparent's child again
        s.append(CYCLE, [m_started(CYCLE), m_link(GRANDCHILD, "spawned_from")])
        s.append(SPAWNED, [m_link(CYCLE, "spawned_from")])
    assert main(["tree", store, TID]) == 0
    tree = json.loads(capsys.readouterr().out)
    assert tree["thread_id"] == TID and tree["head"]["status"] == "active"
    (child,) = tree["children"]
    assert child["thread_id"] == SPAWNED and child["head"]["user_turns"] == 0
    (grand,) = child["children"]
    assert grand["thread_id"] == GRANDCHILD
    (x,) = grand["children"]
    assert x["thread_id"] == CYCLE
    (again,) = x["children"]  # the cycle back to SPAWNED: listed, marked, not walked again
    assert again["thread_id"] == SPAWNED and again["seen"] is True and again["children"] == []
    assert main(["tree", store, TID, "--max-depth", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["children"][0]["children"] == []
    out = on_terminal("tree", store, TID)
    assert out.splitlines()[0].startswith(f"{TID}  Weather  idle, 2/2 turns, updated ")
    assert f"└── {SPAWNED}  idle, 0/0 turns" in out and "(already shown above)" in out
    assert main(["tree", store, "nope"]) == 2
    assert f"{thread_id_for('nope')} (nope) does not exist" in capsys.readouterr().err


# --------------------------------------------------------------------------- tail


def _tail(store: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tplog", "tail", store, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=ROOT)


def _user(text: str) -> Any:
    from tplog.events import UserTurnSubmitted

    return UserTurnSubmitted(turn=m.UserTurn(submitted_at="2025-01-20T11:00:01Z",
                                             parts=[m.UserPromptPart(content=text)]))


def test_tail_follows_appends_of_another_process(store: str) -> None:
    """A running ``tplog tail`` prints events appended after it started, as JSON lines, and a thread
    tail follows a thread that does not exist yet from its first event."""
    with Store(store, readonly=True) as s:
        end = s.last_position
    everything = _tail(store, "--after", str(end), "--limit", "3")
    new_thread = _tail(store, NEW, "--after", "0", "--limit", "2")
    try:
        with Store(store) as s:
            s.append(NEW, [m_started(NEW)])
            s.append(SPAWNED, [_user("hello")])
            s.append(NEW, [_user("again")])
        out, err = everything.communicate(timeout=120)
        assert everything.returncode == 0, err
        rows = [json.loads(ln) for ln in out.splitlines()]
        assert [(r["thread_id"], r["position"], r["type"]) for r in rows] == [
            (NEW, end + 1, "thread_started"), (SPAWNED, end + 2, "user_turn"), (NEW, end + 3,
                                                                                         "user_turn")]
        assert rows[1]["event"]["turn"]["parts"][0]["content"] == "hello"
        out, err = new_thread.communicate(timeout=120)
        assert new_thread.returncode == 0, err
        assert [(r["seq"], r["type"]) for r in map(json.loads, out.splitlines())] == [(1, "thread_started"),
                                                                                      (2, "user_turn")]
    finally:
        for p in (everything, new_thread):
            if p.poll() is None:
                p.kill()


def test_tail_by_default_starts_at_the_end(store: str) -> None:
    """Without --after only new events come: the first one printed is one appended after the start."""
    with Store(store, readonly=True) as s:
        before = s.last_position
    p = _tail(store, TID, "--limit", "1")
    try:
        with Store(store) as s:
            for i in range(600):  # until the tail (which may still be starting) has seen one
                s.append(TID, [_user(f"n{i}")])
                if select.select([p.stdout], [], [], 0.2)[0]:
                    break
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        (row,) = [json.loads(ln) for ln in out.splitlines()]
        assert row["position"] > before and row["type"] == "user_turn"
    finally:
        if p.poll() is None:
            p.kill()


def test_tail_stops_after_a_quiet_timeout_and_checks_its_arguments(store: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tail", store, "--after", "0", "--timeout", "0.2"]) == 0
    rows = [json.loads(ln) for ln in capsys.readouterr().out.splitlines()]
    with Store(store, readonly=True) as s:
        assert [r["position"] for r in rows] == list(range(1, s.last_position + 1))
    for bad in (["--after", "-1"], ["--limit", "-2"], ["--timeout", "-1"]):
        assert main(["tail", store, *bad]) == 2
        assert capsys.readouterr().err.startswith(f"error: {bad[0]} must be ≥ 0")


def test_tail_on_a_terminal_prints_one_line_per_event(store: str) -> None:
    with Store(store, readonly=True) as s:
        first_user = next(e.seq for e in s.read(TID) if type(e.event).__name__ == "UserTurnSubmitted")
    out = on_terminal("tail", store, TID, "--after", "0", "--limit", str(first_user))
    lines = out.splitlines()
    assert len(lines) == first_user
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z #1 thread_started$", lines[0]), lines
    assert re.match(rf".*Z #{first_user} user_turn  prompt: Weather in Paris and Berlin\?$", lines[-1]), lines


# --------------------------------------------------------------------------- progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_draws_on_a_terminal_only() -> None:
    term = _Terminal()
    with progress(term) as update:
        for i in range(3):
            update("rebuild links", i, 3)
    assert "rebuild links" in ANSI.sub("", term.getvalue())
    pipe = io.StringIO()
    with progress(pipe) as update:
        update("rebuild links", 1, 3)
    assert pipe.getvalue() == ""


def test_copy_on_a_terminal_draws_the_shared_progress_and_shows_its_result(store: str, tmp_path: Path) -> None:
    out = on_terminal("copy", store, str(tmp_path / "copy"))
    total = re.search(r"^copy ━+ +0/(\d+) ", out, re.M)
    assert total, out
    n = total.group(1)  # tplog.console.progress's done/total column: right-aligned to the total's width
    assert re.search(rf"^copy ━+ {' ' * (len(n) - 1)}0/{n} -:--:--$", out, re.M), out
    assert re.search(rf"^copy +━+ {n}/{n} ", out, re.M) and re.search(r"^verify [━╸]+ +\d+/\d+ ", out, re.M), out
    assert re.search(r"^threads +3$", out, re.M) and re.search(r"^verified +yes$", out, re.M), out


def test_rebuild_on_a_terminal_shows_its_result_as_a_table(store: str) -> None:
    out = on_terminal("rebuild", store, "--projection", "links")
    assert re.search(r"^links\s+no\s+\d+\s+[\d.]+ s\s+\d+\s+\d+\s+0$", out, re.M), out
