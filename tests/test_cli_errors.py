"""The CLI's errors as the README promises them: ``error: …`` and exit 2 (one line, no traceback),
Ctrl-C as exit 130 with one line, advice for CLI users, the ``--format`` an input looks like,
``serve``'s start-up errors (agents spec, port) before anything starts."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from test_cli import DOC, TID, fails, ok_json, run

from tplog import __version__
from tplog.cli import main
from tplog.events import ThreadStarted
from tplog.store import Store

ROOT = Path(__file__).resolve().parent.parent


def _tplog(*args: str, **kw: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tplog", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, **kw)


def _wait_blocked(proc: subprocess.Popen[bytes], on: str, timeout: float = 30.0) -> None:
    """Until the process sleeps in the kernel on a pipe ``read``/``write`` (then it is inside the command)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            wchan = Path(f"/proc/{proc.pid}/wchan").read_text()
        except OSError:  # pragma: no cover - no procfs: give the interpreter time to start
            time.sleep(5)
            return
        if on in wchan or (wchan in ("", "0") and time.monotonic() > deadline - timeout + 5):
            time.sleep(0.2)
            return
        time.sleep(0.05)
    raise AssertionError(f"the process never blocked on a pipe {on}")


def _interrupted(proc: subprocess.Popen[bytes]) -> tuple[bytes, str]:
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (proc.returncode, err)
    return out, err.decode()


# --------------------------------------------------------------------------- Ctrl-C


def test_ctrl_c_while_import_reads_stdin(tmp_path: Path) -> None:
    """Ctrl-C while ``import`` waits for its input: exit 130, one line, no traceback, no store made."""
    store = tmp_path / "s"
    proc = _tplog("import", str(store), "-", stdin=subprocess.PIPE)
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(DOC)[:200].encode())  # a partial document; the pipe stays open
    proc.stdin.flush()
    _wait_blocked(proc, "pipe")
    out, err = _interrupted(proc)
    assert err == "tplog: interrupted\n" and out == b""
    assert not store.exists()


def test_ctrl_c_while_read_writes(tmp_path: Path) -> None:
    """Ctrl-C while ``read`` streams a long thread into a pipe nobody drains yet: exit 130, one line."""
    store = tmp_path / "s"
    from tplog.events import AgentRegistered, AgentTurnStarted, MessageRecorded
    from tplog.protocol import model as m

    with Store(store, durability="relaxed") as s:
        s.append(TID, [ThreadStarted(thread_id=TID, created_at="2025-01-20T10:00:00Z"),
                       AgentRegistered(agent=m.AgentConfig(agent_id="a", agent_name="a",
                                                           created_at="2025-01-20T10:00:00Z")),
                       AgentTurnStarted(agent_id="a", started_at="2025-01-20T10:00:00Z")])
        sys_msg = MessageRecorded(message=m.SystemMessage(timestamp="2025-01-20T10:00:00Z",
                                                          event_type="data-sys-note", event_data={"x": "y" * 200}))
        for _ in range(10):
            s.append(TID, [sys_msg] * 100)
    proc = _tplog("read", str(store), TID)
    _wait_blocked(proc, "pipe")  # the stdout pipe (64 KiB) is full: blocked in write
    out, err = _interrupted(proc)
    assert err == "tplog: interrupted\n"
    assert out.count(b"\n") < 1001  # it stopped part-way


def test_ctrl_c_stops_serve_gracefully(tmp_path: Path) -> None:
    """``tplog serve`` stops on Ctrl-C the way it is meant to stop: a graceful shutdown, no traceback."""
    port = _free_port()
    proc = _tplog("serve", str(tmp_path / "s"), "--port", str(port), "--shutdown-grace", "1")
    _wait_listening(proc, port)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    text = err.decode()
    assert proc.returncode == 0, text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text
    assert "Application shutdown complete" in text


# --------------------------------------------------------------------------- advice, arguments, hints


def test_read_names_the_argument_that_is_wrong(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    store = str(tmp_path / "s")
    with Store(store) as s:
        s.append(TID, [ThreadStarted(thread_id=TID, created_at="2025-01-20T10:00:00Z")])
    line = fails(capsys, "read", store, TID, "--limit", "-1", match="--limit must be 0 or more, not -1")
    assert "after" not in line
    line = fails(capsys, "read", store, TID, "--after", "-2", match="after must be ≥ 0, not -2")
    assert "limit" not in line


def _pydantic_ai_history() -> bytes:
    from pydantic_ai import messages as pm

    return pm.ModelMessagesTypeAdapter.dump_json([
        pm.ModelRequest(parts=[pm.UserPromptPart(content="Hello")]),
        pm.ModelResponse(parts=[pm.TextPart(content="Hi there")], model_name="test"),
    ])


def test_import_hints_at_the_format_the_input_looks_like(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    store = str(tmp_path / "s")
    history = tmp_path / "history.json"
    history.write_bytes(_pydantic_ai_history())
    fails(capsys, "import", store, str(history),
          match=rf"^error: {re.escape(str(history))}: .*this looks like a Pydantic AI message history: "
                r"import it with --format pydantic-ai\)$")
    assert not Path(store).exists()
    # ... and the hint is right: that format imports it.
    assert ok_json(capsys, "import", store, str(history), "--format", "pydantic-ai")["first_seq"] == 1

    ui = tmp_path / "ui.json"
    ui.write_text(json.dumps([{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]))
    fails(capsys, "import", store, str(ui), match=r"--format vercel-ui\)$")
    sse = tmp_path / "stream.sse"
    sse.write_text('data: {"type":"start"}\n\ndata: [DONE]\n\n')
    fails(capsys, "import", store, str(sse), match=r"--format vercel-ui\)$")
    doc = tmp_path / "doc.json"
    doc.write_text(json.dumps(DOC))
    fails(capsys, "import", store, str(doc), "--format", "pydantic-ai",
          match=r"this looks like a ThreadProtocol document: import it with --format threadprotocol \(the default\)")
    # No hint when the input looks like what was asked for.
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**DOC, "thread_id": 5}))
    line = fails(capsys, "import", store, str(bad))
    assert "looks like" not in line


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        run(capsys, "--version")
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"tplog {__version__}\n"
    r = subprocess.run([sys.executable, "-m", "tplog", "--version"], capture_output=True, text=True, cwd=ROOT,
                       timeout=60)
    assert r.returncode == 0 and r.stdout == f"tplog {__version__}\n"


# --------------------------------------------------------------------------- serve: start-up errors


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(proc: subprocess.Popen[bytes], port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError("the server never listened")


@pytest.fixture
def agents_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module on sys.path with good and bad agents attributes."""
    mod = f"agents_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{mod}.py").write_text(
        "NOT_AGENTS = [1, 2]\n"
        "EMPTY = {}\n"
        "def BROKEN():\n"
        "    raise RuntimeError('no API key')\n"
    )
    (tmp_path / f"{mod}_fails.py").write_text("raise ValueError('bad config')\n")
    (tmp_path / f"{mod}_imports.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return mod


def test_serve_agents_spec_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path, agents_module: str) -> None:
    """A spec that does not load: exit 2, one line naming the spec and what is wrong, nothing started or
    created, no internal environment variable named."""
    store = tmp_path / "store"
    mod = agents_module
    cases = {
        "nosuchmodule_xyz:AGENTS": r"agents 'nosuchmodule_xyz:AGENTS': no module named 'nosuchmodule_xyz'$",
        "justamodule": r"agents 'justamodule': expected MODULE:ATTRIBUTE",
        ":AGENTS": r"expected MODULE:ATTRIBUTE",
        f"{mod}:MISSING": rf"module {mod} has no attribute 'MISSING'",
        f"{mod}:NOT_AGENTS": r"not a non-empty dict of agents",
        f"{mod}:EMPTY": r"not a non-empty dict of agents",
        f"{mod}:BROKEN": r"calling BROKEN\(\) raised RuntimeError: no API key",
        f"{mod}_fails:A": rf"importing {mod}_fails raised ValueError: bad config",
        f"{mod}_imports:A": rf"no module named 'no_such_dependency_xyz' \(while importing {mod}_imports\)",
    }
    for spec, want in cases.items():
        line = fails(capsys, "serve", str(store), "--agents", spec, "--port", str(_free_port()), match=want)
        assert "TPLOG_" not in line, line
    assert not store.exists()


def test_serve_bad_agents_in_a_real_process(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "tplog", "serve", str(tmp_path / "s"), "--agents", "nosuch_xyz:A",
                        "--port", str(_free_port())], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == "error: agents 'nosuch_xyz:A': no module named 'nosuch_xyz'\n"


def test_serve_port_in_use(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        fails(capsys, "serve", str(tmp_path / "s"), "--port", str(port),
              match=rf"^error: cannot listen on 127\.0\.0\.1:{port}: the port is already in use$")
        r = subprocess.run([sys.executable, "-m", "tplog", "serve", str(tmp_path / "s"), "--port", str(port)],
                           capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == f"error: cannot listen on 127.0.0.1:{port}: the port is already in use\n"
    fails(capsys, "serve", str(tmp_path / "s"), "--host", "no-such-host.invalid", "--port", "8000",
          match=r"^error: cannot listen on no-such-host\.invalid:8000: ")
    fails(capsys, "serve", str(tmp_path / "s"), "--shutdown-grace", "-1", match="--shutdown-grace must be ≥ 0")


def test_env_is_untouched_by_a_failed_serve(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A refused start leaves no server environment behind in this process."""
    before = {k for k in os.environ if k.startswith("TPLOG_SERVER_")}
    fails(capsys, "serve", str(tmp_path / "s"), "--agents", "nosuch_xyz:A")
    assert {k for k in os.environ if k.startswith("TPLOG_SERVER_")} == before


def test_rebuild_says_which_extra_the_progress_bar_needs(tmp_path: Path) -> None:
    """On a terminal without rich (the ``cli`` extra) rebuild still works and says what to install."""
    import pty

    fake = tmp_path / "fake"
    (fake / "rich").mkdir(parents=True)
    (fake / "rich" / "__init__.py").write_text("raise ImportError('rich is not installed')\n")
    store = tmp_path / "s"
    with Store(store) as s:
        s.append(TID, [ThreadStarted(thread_id=TID, created_at="2025-01-20T10:00:00Z")])
    master, slave = pty.openpty()
    try:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake), str(ROOT)])}
        r = subprocess.run([sys.executable, "-m", "tplog", "rebuild", str(store)], stdout=subprocess.PIPE,
                           stderr=slave, cwd=ROOT, env=env, timeout=120)
        os.close(slave)
        err = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the terminal's other end is closed and drained
                break
            if not chunk:
                break
            err += chunk
    finally:
        os.close(master)
    assert r.returncode == 0
    assert [p["projection"] for p in json.loads(r.stdout)] == ["links", "state"]
    assert err.decode().strip() == "tplog: no progress bar without rich: pip install 'tplog[cli]'"


# --------------------------------------------------------------------------- destination paths


def test_backup_to_a_path_that_cannot_be_a_directory_is_an_error_not_a_traceback(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    store, file = str(tmp_path / "s"), tmp_path / "thread.json"
    with Store(store) as s:
        s.append(TID, [ThreadStarted(thread_id=TID, created_at="2025-01-20T10:00:00Z")])
    file.write_text("{}")
    fails(capsys, "backup", store, str(file), match=rf"^error: backup destination {re.escape(str(file))} is a file")
    fails(capsys, "backup", store, str(file / "sub"),
          match=rf"^error: cannot create the backup destination {re.escape(str(file / 'sub'))}: ")
    assert file.read_text() == "{}"
    # a real process: exit 2, one line, where a FileNotFoundError's traceback and exit 1 were
    proc = subprocess.run([sys.executable, "-m", "tplog", "backup", store, "/proc/nope/backup"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    assert proc.stderr == "error: cannot create the backup destination /proc/nope/backup: No such file or directory\n"
    assert ok_json(capsys, "backup", store, str(tmp_path / "new" / "b"))["dest"] == str(tmp_path / "new" / "b")


# --------------------------------------------------------------------------- thread ids: the one id rule


def test_every_verb_taking_a_thread_id_applies_the_one_id_rule(capsys: pytest.CaptureFixture[str],
                                                               tmp_path: Path) -> None:
    from conftest import exchange, register

    from tplog import thread_id_for

    store, tid = str(tmp_path / "s"), thread_id_for("my-chat")
    with Store(store) as s:  # recorded as the server and the importers record a chat id: under its UUIDv5
        s.append(tid, [ThreadStarted(thread_id=tid, created_at="2025-01-20T10:00:00Z"), register(), *exchange()])
    assert ok_json(capsys, "turns", store, "my-chat")["thread_id"] == tid
    assert json.loads(run(capsys, "export", store, "my-chat")[1])["thread_id"] == tid
    assert [json.loads(ln)["seq"] for ln in run(capsys, "read", store, "my-chat")[1].splitlines()][:2] == [1, 2]
    assert ok_json(capsys, "pending", store, "my-chat") == {"pending": [], "abandoned": []}
    assert ok_json(capsys, "interrupts", store, "my-chat")["interrupted"] is False
    assert ok_json(capsys, "tree", store, "my-chat")["thread_id"] == tid
    rc, out, err = run(capsys, "tail", store, "my-chat", "--after", "0", "--limit", "1")
    assert (rc, json.loads(out)["seq"]) == (0, 1), err
    fork = ok_json(capsys, "fork", store, "my-chat", "--at", "2", "--new-id", "my-fork")
    assert fork["thread_id"] == thread_id_for("my-fork")
    assert ok_json(capsys, "turns", store, "my-fork")["thread_id"] == thread_id_for("my-fork")
    assert ok_json(capsys, "children", store, "my-chat") == [thread_id_for("my-fork")]
    assert [lk["thread_id"] for lk in ok_json(capsys, "links", store, "my-fork")] == [tid]
    assert ok_json(capsys, "turns", store, tid.upper())["thread_id"] == tid  # a UUID names itself, in any case
    # an unknown name: the error shows the UUID it looked up and the name it was given
    other = thread_id_for("my-chat2")
    fails(capsys, "turns", store, "my-chat2", match=rf"^error: thread {other} \(my-chat2\) does not exist$")
    assert ok_json(capsys, "delete", store, "my-fork")["thread_id"] == thread_id_for("my-fork")
    with Store(store, readonly=True) as s:
        assert [h.thread_id for h in s.threads().threads] == [tid]
    with pytest.raises(SystemExit) as exc:  # the rule's own refusal: argparse's usage error
        main(["turns", store, ""])
    assert exc.value.code == 2
    assert "a thread id must be a non-empty string" in capsys.readouterr().err
