"""The search benchmark runs end to end at a tiny size and writes its JSON with the three goals."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import search as bench


def test_the_benchmark_runs_at_its_tiny_size(tmp_path: Path) -> None:
    out = tmp_path / "search.json"
    assert bench.main(["--tiny", "--no-md", "--no-profile", "--dir", str(tmp_path), "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert {g["goal"].split(",")[0] for g in data["goals"]} >= {"appends/s with search on ÷ off"}
    assert len(data["goals"]) == 3
    titles = [t["title"] for t in data["tables"]]
    assert any("query latency" in t for t in titles) and any("16 writers" in t for t in titles)
