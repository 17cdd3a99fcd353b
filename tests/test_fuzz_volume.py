"""Fuzzing at volume (tools/fuzz_volume.py): mutated real inputs into every reader of
outside bytes; every failure must be a typed tplog error.

The default run feeds 1,500 mutants per target (a few seconds); ``--soak`` feeds
``TPLOG_FUZZ_CASES`` (default 125,000) per target, over 10⁶ in all. The seed is
printed; pin it with ``TPLOG_TEST_SEED``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import sys
from pathlib import Path
from typing import Any

import pytest

_spec = importlib.util.spec_from_file_location(
    "fuzz_volume", Path(__file__).resolve().parent.parent / "tools" / "fuzz_volume.py")
assert _spec is not None and _spec.loader is not None
fv: Any = importlib.util.module_from_spec(_spec)
sys.modules["fuzz_volume"] = fv
_spec.loader.exec_module(fv)


def _run(cases: int, tmp_path: Path) -> dict[str, Any]:
    seed = int(os.environ.get("TPLOG_TEST_SEED", random.randrange(2**30)))
    tally = fv.run(cases, seed=seed, crashers=str(tmp_path / "crashers"))
    print(f"\nfuzz volume (seed {seed}, rerun with TPLOG_TEST_SEED={seed}):\n" + json.dumps(tally, indent=2))
    untyped = {name: t["sites"] for name, t in tally.items() if t["untyped"]}
    assert not untyped, untyped
    return tally


def test_every_target_is_fed_and_fails_only_with_typed_errors(tmp_path: Path) -> None:
    tally = _run(1500, tmp_path)
    assert set(tally) == set(fv.targets())
    for name, t in tally.items():
        assert t["cases"] == 1500
        if name != "json-validate":  # validate_json reports problems instead of raising
            assert t["typed"] > 0, (name, t)  # the mutants do reach the checks
    # some mutants still decode: the mutations are not all rejected at the first byte
    assert sum(t["ok"] for t in tally.values()) > 1000


def test_the_corpora_are_valid_inputs() -> None:
    """Unmutated, (almost) every corpus entry is accepted: the fuzzing starts from real inputs."""
    for name, (corpus, fn) in fv.targets().items():
        failed = 0
        for data in corpus:
            try:
                fn(data)
            except Exception:
                failed += 1
        # two Vercel runs resume a turn whose first half lives in an earlier run
        assert failed <= (2 if name in ("import-vercel-ui", "ui-stream") else 0), (name, failed, len(corpus))


@pytest.mark.soak
def test_fuzz_volume_soak(tmp_path: Path) -> None:
    cases = int(os.environ.get("TPLOG_FUZZ_CASES", "125000"))
    tally = _run(cases, tmp_path)
    assert sum(t["cases"] for t in tally.values()) >= len(fv.targets()) * cases


# --------------------------------------------------------------------------- crashers found at volume


@pytest.mark.parametrize("index", [-10, -1, 99, True])
def test_ui_stream_body_reference_out_of_range(index: object) -> None:
    """Found by tools/fuzz_volume.py (import-vercel-ui, seed 7): a ``data-tp-user_turn``
    part naming ``"$index": -10`` in the request body raised IndexError; -1 silently took
    the last part. Every index outside the body now reads as a missing reference."""
    from tplog import TplogError
    from tplog.integrations.importers import load_events

    fx = json.loads((Path(__file__).resolve().parent / "integrations" / "fixtures" / "text.json").read_text())
    run = fx["runs"][0]
    assert '"$index":0' in run["sse"]
    sse = run["sse"].replace('"$index":0', f'"$index":{json.dumps(index)}').encode()

    def outcome(data: bytes) -> object:
        try:
            return load_events("vercel-ui", data, request=json.dumps(run["body"]).encode(), thread_id=fv.TID,
                               agent_id="a", clock=lambda: fv.CLOCK)
        except TplogError as exc:
            return type(exc)

    out_of_range = run["sse"].replace('"$index":0', '"$index":99').encode()
    assert outcome(sse) == outcome(out_of_range)
