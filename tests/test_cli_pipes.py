"""The CLI in a pipeline whose reader stops early (``tplog tail | head -1``): the command ends
quietly, exit status 0, nothing on stderr (no BrokenPipeError traceback, no "Exception ignored").
Real processes and real pipes; the outputs are far larger than a pipe's buffer, so the writer
does meet the closed pipe."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from conftest import exchange, register, started

from tplog import Store

ROOT = Path(__file__).resolve().parent.parent
# stdout block-buffered, as in a user's shell: what is still buffered at exit meets the closed pipe too
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


@pytest.fixture
def big(tmp_path: Path) -> tuple[str, str]:
    """A store holding one thread of about 1 MB of JSON (events with long answers)."""
    path, tid = str(tmp_path / "store"), str(uuid.uuid4())
    with Store(path) as s:
        s.append(tid, [started(tid), register()])
        for i in range(250):
            s.append(tid, exchange(f"question {i}", "x" * 4000))
    return path, tid


def _piped(cmd: str) -> tuple[int, str, str]:
    """``cmd`` (a bash pipeline) run with pipefail: (the first command's exit status, stdout, stderr)."""
    script = f"set -o pipefail; {cmd}; echo \"status=${{PIPESTATUS[0]}}\" >&2"
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT, env=ENV)
    *err, last = out.stderr.rstrip("\n").split("\n")
    assert last.startswith("status="), out.stderr
    return int(last.removeprefix("status=")), out.stdout, "\n".join(err)


@pytest.mark.parametrize("verb", ["read", "export"])  # JSON lines flushed per event; one buffered document
def test_a_reader_that_stops_early_ends_the_command_quietly(big: tuple[str, str], verb: str) -> None:
    path, tid = big
    status, out, err = _piped(f"{sys.executable} -m tplog {verb} {path} {tid} | head -1")
    assert (status, err) == (0, ""), err
    assert len(out.splitlines()) == 1
    assert out.startswith('{"seq":1,' if verb == "read" else "{")


@pytest.mark.parametrize("argv", [["stat"], ["threads"], ["turns", "TID"], ["read", "TID"], ["export", "TID"],
                                  ["tail", "--after", "0", "--limit", "3"]])
def test_a_reader_gone_before_the_output_ends_the_command_quietly(big: tuple[str, str], argv: list[str]) -> None:
    """A pipe whose reader has already exited (``tplog stat | true``): small outputs too, which meet
    the closed pipe only when the buffered stdout is flushed."""
    path, tid = big
    r, w = os.pipe()
    os.close(r)
    try:
        cmd = [sys.executable, "-m", "tplog", argv[0], path, *(tid if a == "TID" else a for a in argv[1:])]
        p = subprocess.run(cmd, stdout=w, stderr=subprocess.PIPE, text=True, timeout=300, cwd=ROOT, env=ENV)
    finally:
        os.close(w)
    assert (p.returncode, p.stderr) == (0, "")


def test_tail_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    """``tplog tail`` follows until it writes into the pipe its reader has closed: then it stops, status 0."""
    path, tid = str(tmp_path / "store"), str(uuid.uuid4())
    with Store(path) as s:
        s.append(tid, [started(tid), register()])
    p = subprocess.Popen([sys.executable, "-m", "tplog", "tail", path, "--after", "0"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, cwd=ROOT, env=ENV)
    assert p.stdout is not None and p.stderr is not None
    try:
        assert b'"seq":1,' in p.stdout.readline()
        p.stdout.close()  # the reader is gone (as head -1 after its line)
        deadline = time.monotonic() + 120
        with Store(path) as s:
            while p.poll() is None and time.monotonic() < deadline:
                s.append(tid, exchange())  # new events: tail writes them into the closed pipe
                time.sleep(0.5)
        assert p.wait(timeout=60) == 0
        assert p.stderr.read() == b""
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
