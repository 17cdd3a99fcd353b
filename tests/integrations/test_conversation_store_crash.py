"""A save acknowledged survives a kill (tools/crash_conversations.py): two processes save and fork
conversations through TplogConversationStore on one LMDB store (its durable default) and are
SIGKILLed at random moments, again and again. After each kill every conversation loads with exactly
the messages of its last acknowledged save, or of the one save after it that committed before the
kill was acknowledged to anyone (a save is one append: never a part of one), every acknowledged
fork is there, and the store verifies. ``--soak`` kills ``TPLOG_SOAK_KILLS`` (default 1000)."""

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
    "crash_conversations", Path(__file__).resolve().parents[2] / "tools" / "crash_conversations.py")
assert _spec is not None and _spec.loader is not None
cc: Any = importlib.util.module_from_spec(_spec)
sys.modules["crash_conversations"] = cc
_spec.loader.exec_module(cc)


def _kill(tmp_path: Path, kills: int) -> Any:
    seed = int(os.environ.get("TPLOG_TEST_SEED", random.randrange(2**32)))
    print(f"seed {seed} (rerun with TPLOG_TEST_SEED={seed})")
    tally = cc.run(str(tmp_path), kills, seed=seed, workers=2, max_seconds=max(600, kills))
    print(json.dumps(tally.as_dict(), indent=2))
    assert tally.problems == [] and tally.lost == 0 and tally.torn == 0, tally.as_dict()
    assert tally.kills >= kills
    return tally


def test_acknowledged_saves_and_forks_survive_kills(tmp_path: Path) -> None:
    tally = _kill(tmp_path, 12)
    assert tally.acked_saves_checked > 0, "no save was acknowledged before any kill"


@pytest.mark.soak
def test_conversation_crash_soak(tmp_path: Path) -> None:
    _kill(tmp_path, int(os.environ.get("TPLOG_SOAK_KILLS", "1000")))
