"""README.md's Quick start runs as printed and builds a thread ``tplog validate`` accepts."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _section_python_blocks(title: str) -> list[str]:
    text = (ROOT / "README.md").read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end != -1 else len(text)]
    return re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)


def _run(*args: str, cwd: Path, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(args, cwd=cwd, input=stdin, capture_output=True, timeout=120)


def test_quick_start_runs_and_its_thread_validates(tmp_path: Path) -> None:
    (block,) = _section_python_blocks("Quick start (Python)")
    ran = _run(sys.executable, "-c", block, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr.decode()
    out = ran.stdout.decode()
    printed, digest = out.rsplit("}\n", 1)
    thread = json.loads(printed + "}")
    assert digest.strip().startswith("sha256:")
    assert list(thread["agents"]) == ["agent-1"]  # the registry the Quick start shows
    assert [t["turn_type"] for t in thread["turns"]] == ["user", "agent"]

    tid = thread["thread_id"]
    exported = _run(sys.executable, "-m", "tplog", "export", "./my-store", tid, cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr.decode()
    report = _run(sys.executable, "-m", "tplog", "validate", "-", cwd=tmp_path, stdin=exported.stdout)
    assert report.returncode == 0, report.stdout.decode()
    assert json.loads(report.stdout)["errors"] == []
    hashed = _run(sys.executable, "-m", "tplog", "hash", "-", cwd=tmp_path, stdin=exported.stdout)
    assert hashed.returncode == 0 and digest.strip() in hashed.stdout.decode()  # plain or JSON output
