"""The PostgreSQL benchmark runs end to end (``--quick``), so it does not rot between
benchmark runs: every workload has its rows, the goals their ratios, and the catch-up
reader saw every acknowledged position (the module asserts that itself)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .pg_server import INSTALL_HINT, find_bindir

ROOT = Path(__file__).resolve().parents[2]


def test_the_postgres_benchmark_runs_quick(tmp_path: Path) -> None:
    if find_bindir() is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and no PostgreSQL server binaries: {INSTALL_HINT}")
        pytest.skip(INSTALL_HINT)
    out = tmp_path / "postgres.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.postgres", "--quick", "--no-md", "--json", str(out), "--dir",
         str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    data = json.loads(out.read_text())
    rows = {(r["workload"], r["system"]): r for r in data["rows"]}
    workloads = {w for w, _ in rows}
    assert len(workloads) == 5, workloads
    for w in workloads:  # tplog on PostgreSQL is measured in every workload, with a positive rate
        assert rows[(w, "tplog PostgreSQL")]["rate"] > 0
    assert ("durable append, 16 writer threads", "raw psycopg, same batching") in rows
    goals = {g["goal"]: g for g in data["goals"]}
    assert len(goals) == 3
    for name, g in goals.items():
        if "eventsourcing" in name and importlib.util.find_spec("eventsourcing") is None:
            assert g["ratio"] is None  # the peer is an optional extra: its goal is skipped, not faked
        else:
            assert g["ratio"] is not None and g["ratio"] > 0, g
    steady = next(t for t in data["tables"] if t["title"].startswith("Steady state"))
    assert {r[1] for r in steady["rows"]} >= {"tplog PostgreSQL", "raw psycopg, same batching"}
