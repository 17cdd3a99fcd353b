"""Every fenced code block of README.md runs, and prints what the README shows.

The README cannot drift from the code: this test runs its blocks in order, in one fresh temporary
working directory, with the venv's ``bin`` first on ``PATH`` (so ``tplog`` is the installed console
script; ``curl`` must be installed), and compares what each prints with the text the README shows.

Conventions (the README's fences, by info string):

- ```` ```python ````: run in a fresh namespace; ```` ```python continued ```` runs in the namespace
  of the python block before it (so an example can be split by prose). A python block followed
  directly (nothing but blank lines between) by an ```` ```output ```` (or ```` ```text ````) block
  must print exactly that; without one it may print anything but must not raise.
- ```` ```console ````: a shell session. A line starting with ``$ `` is a command (a line ending in
  ``\\``, or inside an open quote, continues on the next line); the lines after it, up to the next
  ``$ `` line, are what it must print (stdout and stderr together). A block's commands run as one
  bash script, so variables set by one command are seen by the next (as in a terminal); each command
  must exit 0: a session showing a failure says so itself (``... || echo "exit $?"``).
  A command ending in ``&`` is a server: it starts in the background in a session of its own (its
  output goes to ``.server-PORT.log``, and the README shows none), the script waits until the port
  named by its ``--port N`` answers, and the server is stopped (SIGTERM to its session) when the README
  run ends. Port N is replaced by a free port in that command and in every later command (``:N`` and
  ``--port N``), so the README can say ``8000`` while the test never depends on that port being free.
- ```` ```sh ````: the two ``make`` commands, which build virtual environments: they are not run; the
  test checks that each named target exists in the Makefile.
- ```` ```LANG file=PATH ````: a file of the repository, shown whole: the block must be exactly that
  file (a test runs it, e.g. tests/aisdk/test_usechat_page.py runs the ``useChat`` page).
- Any other fence is an error (everything the README shows is run or checked).

Expected output is compared line by line after stripping trailing whitespace and trailing blank lines;
``...`` is a wildcard for any text, across lines too (doctest's ELLIPSIS), for ids, times and hashes.
A failure names the block's line in README.md and shows a diff.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
ELLIPSIS = "..."
MARK = "\x1eREADME\x1e"  # ends each command's output in a console block's script (ASCII record separators)
SERVERS = ".readme-servers"  # pids of the servers a README run started
SERVER_WAIT = 60  # seconds a server gets to answer on its port


@dataclass
class Block:
    lang: str
    info: str
    line: int  # the line of the opening fence in README.md (1-based)
    body: str
    expected: str | None = None  # the output block that follows a python block


def parse_blocks(text: str) -> list[Block]:
    """The fenced blocks of a Markdown text, each python block paired with the output block after it."""
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    last_end = -1
    while i < len(lines):
        m = re.match(r"^(`{3,})(.*)$", lines[i])
        if not m:
            i += 1
            continue
        fence, info = m.group(1), m.group(2).strip()
        start = i
        i += 1
        body: list[str] = []
        while i < len(lines) and not lines[i].startswith(fence):
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise AssertionError(f"README.md:{start + 1}: unclosed code fence")
        lang = info.split()[0] if info else ""
        block = Block(lang, info, start + 1, "\n".join(body) + "\n")
        between = lines[last_end + 1:start]
        if lang in ("output", "text"):
            prev = blocks[-1] if blocks else None
            if prev is None or prev.lang != "python" or prev.expected is not None or any(s.strip() for s in between):
                raise AssertionError(f"README.md:{start + 1}: an output block must directly follow a python block")
            prev.expected = block.body
        else:
            blocks.append(block)
        last_end = i
        i += 1
    return blocks


def ellipsis_match(want: str, got: str) -> bool:
    """doctest's ELLIPSIS rule: ``...`` in ``want`` matches any text (also none, also across lines)."""
    if ELLIPSIS not in want:
        return want == got
    pieces = want.split(ELLIPSIS)
    first, last = pieces[0], pieces[-1]
    if not got.startswith(first) or not got.endswith(last) or len(first) + len(last) > len(got):
        return False
    pos, end = len(first), len(got) - len(last)
    for piece in pieces[1:-1]:
        found = got.find(piece, pos, end)
        if found < 0:
            return False
        pos = found + len(piece)
    return True


def _normalize(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.rstrip().splitlines())


def _check(where: str, what: str, want: str, got: str) -> None:
    want, got = _normalize(want), _normalize(got)
    if ellipsis_match(want, got):
        return
    diff = "\n".join(difflib.unified_diff(want.splitlines(), got.splitlines(), "README", "actual", lineterm=""))
    raise AssertionError(f"{where}: {what} printed something else than the README shows:\n{diff}")


@dataclass
class Command:
    line: int
    text: str
    expected: str


def parse_console(block: Block) -> list[Command]:
    """``$ `` commands (``\\`` continues a line) and the output lines after each."""
    commands: list[Command] = []
    lines = block.body.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            if lines[i].strip():
                raise AssertionError(f"README.md:{block.line + 1 + i}: output before the first `$ ` command")
            i += 1
            continue
        start = i
        cmd = [lines[i][2:]]
        while (cmd[-1].endswith("\\") or _open_quote("\n".join(cmd))) and i + 1 < len(lines):
            i += 1
            cmd.append(lines[i])
        i += 1
        out: list[str] = []
        while i < len(lines) and not lines[i].startswith("$ "):
            out.append(lines[i])
            i += 1
        commands.append(Command(block.line + 1 + start, "\n".join(cmd), "\n".join(out)))
    return commands


def _open_quote(text: str) -> bool:
    """A quoted string runs on past the end of the line (the shell reads on)."""
    try:
        shlex.split(text.replace("\\\n", " "))
    except ValueError:
        return True
    return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ReadmeRun:
    """Runs the blocks of one README in order, in one working directory."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
                        COLUMNS="200")
        self.ports: dict[str, str] = {}  # README port -> the free port used instead
        self.namespace: dict[str, object] | None = None

    def run(self, block: Block) -> None:
        files = [w[len("file="):] for w in block.info.split()[1:] if w.startswith("file=")]
        if files:
            path = ROOT / files[0]
            assert path.is_file(), f"README.md:{block.line}: the block shows {files[0]}, which does not exist"
            if _normalize(block.body) != _normalize(path.read_text()):  # exact: no ... wildcards here
                diff = "\n".join(difflib.unified_diff(block.body.splitlines(), path.read_text().splitlines(),
                                                      "README", files[0], lineterm=""))
                raise AssertionError(f"README.md:{block.line}: the block is not {files[0]}:\n{diff}")
        elif block.lang == "python":
            self.python(block)
        elif block.lang == "console":
            self.console(block)
        elif block.lang == "sh":
            self.make(block)
        else:
            raise AssertionError(f"README.md:{block.line}: a ```{block.lang} block is neither run nor checked "
                                 "(python, console, sh with make, or output after python)")

    def python(self, block: Block) -> None:
        if "continued" in block.info.split()[1:]:
            if self.namespace is None:
                raise AssertionError(f"README.md:{block.line}: `python continued` without a python block before it")
        else:
            self.namespace = {"__name__": "__readme__"}
        # Padding puts the README's line numbers into tracebacks.
        code = compile("\n" * block.line + block.body, str(README), "exec")
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                exec(code, self.namespace)
        except Exception as exc:
            raise AssertionError(f"README.md:{block.line}: the python block raised {exc!r}\n"
                                 f"(printed so far:)\n{out.getvalue()}") from exc
        if block.expected is not None:
            _check(f"README.md:{block.line}", "the python block", block.expected, out.getvalue())

    def _ports(self, text: str) -> str:
        for old, new in self.ports.items():
            text = re.sub(rf"(?<=:){old}\b|(?<=--port ){old}\b", new, text)
        return text

    def console(self, block: Block) -> None:
        """The block's commands as one bash script (a session: variables carry), each one's output split off."""
        commands = parse_console(block)
        script = ["exec 2>&1 </dev/null"]
        for cmd in commands:
            text = cmd.text.rstrip()
            if text.endswith("&"):
                script.append(self._server(cmd, text[:-1].strip()))
            else:
                script.append(self._ports(text))
            script.append("printf '\\n\\036README\\036%s\\036README\\036\\n' \"$?\"")
        res = subprocess.run(["bash", "-c", "\n".join(script)], cwd=self.cwd, env=self.env,
                             stdout=subprocess.PIPE, timeout=600)
        parts = re.split(rf"\n{MARK}(\d+){MARK}\n", res.stdout.decode(errors="replace"))
        for i, cmd in enumerate(commands):
            got, rc = parts[2 * i], parts[2 * i + 1] if 2 * i + 1 < len(parts) else "(no exit status)"
            if rc != "0":
                raise AssertionError(f"README.md:{cmd.line}: `{cmd.text}` exited with {rc}:\n{got}")
            _check(f"README.md:{cmd.line}", f"`{cmd.text}`", cmd.expected, got)

    def _server(self, cmd: Command, text: str) -> str:
        """Shell lines that start a server in its own session, note its pid and wait until its port answers."""
        m = re.search(r"--port (\d+)", text)
        if m is None:
            raise AssertionError(f"README.md:{cmd.line}: a background command needs --port N")
        if cmd.expected.strip():
            raise AssertionError(f"README.md:{cmd.line}: a background command's output is not compared: show none")
        self.ports[m.group(1)] = port = str(_free_port())
        log = f".server-{port}.log"
        answers = f"(echo >/dev/tcp/127.0.0.1/{port}) 2>/dev/null"
        return "\n".join([
            f"setsid {self._ports(text)} >{log} 2>&1 &",
            f"echo $! >>{SERVERS}",
            f"for _ in $(seq {SERVER_WAIT * 10}); do",
            f"  {answers} && break; kill -0 $! 2>/dev/null || break; sleep 0.1",
            "done",
            f"{answers} || {{ echo 'no answer on port {port}:'; cat {log}; false; }}",
        ])

    def make(self, block: Block) -> None:
        makefile = (ROOT / "Makefile").read_text()
        for offset, line in enumerate(block.body.splitlines(), start=1):
            code = line.split("#", 1)[0].strip()
            if not code:
                continue
            words = shlex.split(code)
            if words[0] != "make" or len(words) != 2:
                raise AssertionError(f"README.md:{block.line + offset}: a ```sh block holds only `make TARGET` lines")
            assert re.search(rf"^{re.escape(words[1])}:", makefile, re.M), \
                f"README.md:{block.line + offset}: the Makefile has no target {words[1]!r}"

    def close(self) -> None:
        """Stop the servers the README started (each leads its own session: setsid)."""
        pids = (self.cwd / SERVERS).read_text().split() if (self.cwd / SERVERS).exists() else []
        for pid in map(int, pids):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + 60
        for pid in map(int, pids):
            while time.monotonic() < deadline and _alive(pid):
                time.sleep(0.1)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_every_readme_block_runs_and_prints_what_the_readme_shows(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = parse_blocks(README.read_text())
    assert any(b.lang == "console" for b in blocks) and any(b.lang == "python" for b in blocks)
    monkeypatch.chdir(tmp_path)
    run = ReadmeRun(tmp_path)
    try:
        for block in blocks:
            run.run(block)
    finally:
        run.close()


# --------------------------------------------------------------------------- the runner itself


def test_ellipsis_matches_like_doctest() -> None:
    assert ellipsis_match("a ... c", "a b c")
    assert ellipsis_match("a...", "a\nb\nc")
    assert ellipsis_match("...", "")
    assert not ellipsis_match("a ... c", "a b d")
    assert not ellipsis_match("aa...aa", "aaa")  # the two ends may not overlap
    assert not ellipsis_match("x", "x y")


def test_blocks_pair_python_with_its_output_and_refuse_a_stray_one() -> None:
    text = "intro\n```python\nprint(1)\n```\n\n```output\n1\n```\n```console\n$ echo a \\\n  b\na b\n$ true\n```\n"
    py, console = parse_blocks(text)
    assert (py.lang, py.line, py.body, py.expected) == ("python", 2, "print(1)\n", "1\n")
    assert [(c.line, c.text, c.expected) for c in parse_console(console)] == [
        (10, "echo a \\\n  b", "a b"), (13, "true", "")]
    with pytest.raises(AssertionError, match=r"README\.md:1: an output block"):
        parse_blocks("```output\n1\n```\n")
    with pytest.raises(AssertionError, match="must directly follow"):
        parse_blocks("```python\nprint(1)\n```\nprose\n```output\n1\n```\n")


def test_a_wrong_output_fails_with_the_line_and_a_diff(tmp_path: Path) -> None:
    run = ReadmeRun(tmp_path)
    [block] = parse_blocks("\n```console\n$ echo hello\nhullo\n```\n")
    with pytest.raises(AssertionError, match=r"README.md:3: `echo hello` printed.*\n.*\n.*\n.*\n-hullo\n\+hello"):
        run.run(block)
    [block] = parse_blocks("```python\nprint('a')\n```\n```output\nb\n```\n")
    with pytest.raises(AssertionError, match=r"README.md:1: the python block printed(.|\n)*-b\n\+a"):
        run.run(block)
    [block] = parse_blocks("```console\n$ false\n```\n")
    with pytest.raises(AssertionError, match="exited with 1"):
        run.run(block)
    [block] = parse_blocks("```bash\nls\n```\n")
    with pytest.raises(AssertionError, match="neither run nor checked"):
        run.run(block)


def test_a_console_session_keeps_its_variables_and_runs_a_server_on_a_free_port(tmp_path: Path) -> None:
    serve = ("python -c 'import sys, http.server as h; h.HTTPServer((\"127.0.0.1\", int(sys.argv[2])), "
             "h.SimpleHTTPRequestHandler).serve_forever()' --port 8000 &")
    run = ReadmeRun(tmp_path)
    [block] = parse_blocks(f"```console\n$ {serve}\n$ X=hello\n$ echo $X\nhello\n"
                           "$ curl -s -o /dev/null -w '%{http_code}\\n' localhost:8000/\n200\n```\n")
    try:
        run.run(block)
        assert run.ports["8000"] != "8000"
        [pid] = map(int, (tmp_path / SERVERS).read_text().split())
        assert _alive(pid)
    finally:
        run.close()
    assert not _alive(pid)


DOCS = ["README.md", "tplog/FORMAT.md", "tools/RELIABILITY.md", "benchmarks/README.md",
        "tplog/integrations/DECISIONS.md"]


@pytest.mark.parametrize("doc", DOCS)
def test_every_relative_link_of_the_docs_resolves_in_a_clone(doc: str) -> None:
    path = ROOT / doc
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text())
    relative = [t for t in targets if not re.match(r"[a-z]+:", t)]
    missing = [t for t in relative if not (path.parent / t).exists()]
    assert not missing, f"{doc} links to files that are not in the repository: {missing}"
    if doc == "README.md":  # the spec, the format, the tallies, the benchmarks and the decisions
        assert {"tests/fixtures/spec/docs/README.md", "tplog/FORMAT.md", "tools/RELIABILITY.md",
                "benchmarks/README.md", "tplog/integrations/DECISIONS.md"} <= set(relative)


def test_sh_blocks_hold_make_targets_the_makefile_has(tmp_path: Path) -> None:
    run = ReadmeRun(tmp_path)
    run.run(parse_blocks("```sh\nmake demo   # comment\n\nmake test\n```\n")[0])
    with pytest.raises(AssertionError, match=r"README\.md:3: the Makefile has no target 'nope'"):
        run.run(parse_blocks("```sh\nmake demo\nmake nope\n```\n")[0])
    with pytest.raises(AssertionError, match="only `make TARGET` lines"):
        run.run(parse_blocks("```sh\nrm -rf /tmp/x\n```\n")[0])
