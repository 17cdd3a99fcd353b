"""Coverage-guided fuzzing (tools/fuzz_guided.py, atheris): every reader of outside bytes
fails only with typed errors, and the harness itself catches and keeps a crash.

The default run fuzzes two targets for 2,000 inputs each; ``--soak`` runs every target for
``TPLOG_FUZZ_GUIDED_RUNS`` (default 125,000) inputs, 10⁶ in all.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

import pytest

if platform.machine() != "x86_64" and importlib.util.find_spec("atheris") is None:
    # atheris is a declared test dependency where it ships wheels (x86_64); elsewhere it may be absent
    pytest.skip("atheris ships no wheel for this machine", allow_module_level=True)
import atheris  # noqa: F401  (a missing declared dependency fails here, not skips)

_spec = importlib.util.spec_from_file_location(
    "fuzz_guided", Path(__file__).resolve().parent.parent / "tools" / "fuzz_guided.py")
assert _spec is not None and _spec.loader is not None
fg: Any = importlib.util.module_from_spec(_spec)
sys.modules["fuzz_guided"] = fg
_spec.loader.exec_module(fg)


@pytest.mark.parametrize("target", ["json-doc", "import-vercel-ui"])
def test_guided_fuzzing_finds_new_branches_and_only_typed_errors(target: str, tmp_path: Path) -> None:
    tally = fg.fuzz_target(target, 2000, seed=3, workdir=tmp_path)
    print(json.dumps(tally))
    assert tally["crash"] is None and tally["exit"] == 0, tally
    # libFuzzer may finish the batch it is in past -runs (CI once counted 2,004), never stop short
    assert 2000 <= tally["runs"] < 2100
    assert tally["seeds"] > 5  # it starts from the target's real inputs
    assert tally["edges"] > 50  # tplog's own code is instrumented, not only the C decoders
    assert tally["new_units"] > 0  # inputs reaching new branches were kept to mutate further


def test_a_crash_is_caught_and_its_input_kept(tmp_path: Path) -> None:
    """The planted target raises an untyped error only on inputs starting with ``Z!``, which the
    coverage feedback (its instrumented comparison) leads the fuzzer to; blind luck would need ~65k tries."""
    tally = fg.fuzz_target(fg.PLANTED, 200_000, seed=5, workdir=tmp_path)
    assert tally["crash"] is not None, tally
    assert tally["exit"] != 0
    assert tally["exception"] == "IndexError: planted crash"
    assert Path(tally["crash"]).read_bytes()[:2] == b"Z!"
    assert tally["runs"] < 60_000, tally


def test_the_command_exits_1_on_a_crash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert fg.main(["--runs", "200000", "--target", fg.PLANTED, "--workdir", str(tmp_path)]) == 1
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert lines[-1]["crashed_targets"] == 1


@pytest.mark.soak
def test_guided_fuzzing_soak(tmp_path: Path) -> None:
    runs = int(os.environ.get("TPLOG_FUZZ_GUIDED_RUNS", "125000"))
    tallies = [fg.fuzz_target(t, runs, seed=7, workdir=tmp_path) for t in fg.TARGETS]
    print("\n".join(json.dumps(t) for t in tallies))
    assert [t for t in tallies if t["crash"] or t["exit"]] == []
    assert sum(t["runs"] for t in tallies) >= len(fg.TARGETS) * runs
