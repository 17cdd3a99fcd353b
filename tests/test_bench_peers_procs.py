"""The multi-process rows of the peers benchmark run end to end at their smallest size: two
worker processes and one, tplog and DIY SQLite, every message appended, the lock measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai")


def test_procs_rows_run_tiny(tmp_path: Path) -> None:
    from benchmarks import peers_procs as bench

    out = tmp_path / "r.json"
    argv = ["--quick", "--tiny", "--no-md", "--no-profile", "--dir", str(tmp_path), "--json", str(out)]
    assert bench.main(argv) == 0
    data = json.loads(out.read_text())
    messages = data["data"]["events"]
    assert messages > 0
    rows = {r["system"]: r for r in data["rows"]}
    assert set(rows) == {label for label, *_ in bench.configurations(2)}
    assert all(r["events"] == messages and r["rate"] > 0 for r in rows.values())
    assert [g["status"] in ("met", "NOT met") for g in data["goals"]] == [True, True]
    lock = next(t for t in data["tables"] if t["title"].startswith("LMDB's cross-process write lock"))
    procs = [(r[0], int(r[1])) for r in lock["rows"]]
    assert procs == [("tplog 1 x 16", 1), ("tplog 2 x 8", 1), ("tplog 2 x 8", 2)]
    # every message of the two-process run went through one of the two processes' commits
    assert sum(int(r[2].replace(",", "")) for r in lock["rows"][1:]) == messages
    assert all(int(r[3].replace(",", "")) > 0 for r in lock["rows"])
