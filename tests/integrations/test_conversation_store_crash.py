"""A save acknowledged survives a kill: a child process saves conversations (a prompt and a
response per save, LMDB's durable default) and is killed with SIGKILL at a random moment, again
and again on the same store. After each kill every conversation loads with exactly the messages
of its last acknowledged save, or of the one save after it that committed before the kill was
acknowledged to anyone (a save is one append: never a part of one), and the store verifies."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tplog import Store
from tplog.integrations.pydantic_ai import TplogConversationStore

HERE = Path(__file__).resolve().parent


def _kill_after(path: Path, seed: int, delay: float) -> dict[str, int]:
    """One child, killed ``delay`` s after it is ready; what it acknowledged (cid → messages)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parents[1]), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, str(HERE / "cs_crash_worker.py"), str(path), str(seed)],
                            stdout=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"ready"
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    acked: dict[str, int] = {}
    for line in proc.stdout.read().decode().splitlines():
        parts = line.split()
        if len(parts) == 2:  # a line cut by the kill is not an acknowledgement
            acked[parts[0]] = int(parts[1])
    return acked


def _held(path: Path) -> dict[str, int]:
    """Each stored conversation's message count, as a new process loads it."""
    async def loads() -> dict[str, int]:
        async with TplogConversationStore(str(path)) as cs:
            return {r.conversation_id: len((await cs.load(r.conversation_id)).messages)  # type: ignore[union-attr]
                    for r in await cs.list_conversations()}

    return asyncio.run(loads())


def _check(path: Path, acked: dict[str, int]) -> None:
    held = _held(path)
    for cid, n in acked.items():
        assert held.get(cid, 0) in (n, n + 2), (cid, n, held.get(cid))
    assert all(n % 2 == 0 for n in held.values()), held  # whole saves only
    with Store(path) as s:
        assert s.verify().ok


@pytest.mark.parametrize("kills", [int(os.environ.get("TPLOG_CS_CRASH_KILLS", "8"))])
def test_acknowledged_saves_survive_kills(tmp_path: Path, kills: int) -> None:
    rng = random.Random()
    print("seed", seed := rng.randrange(1 << 30))
    rng.seed(seed)
    path = tmp_path / "store"
    acked: dict[str, int] = {}
    for k in range(kills):
        acked |= _kill_after(path, seed + k, rng.uniform(0.05, 0.6))
        _check(path, acked)
        acked = _held(path)  # the next child goes on from what is stored (one more save may have landed)
    assert acked, "no save was acknowledged before any kill"
