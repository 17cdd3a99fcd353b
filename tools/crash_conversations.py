"""Crash harness for Pydantic AI's conversation store path: SIGKILL savers, then check every save.

Run it::

    python tools/crash_conversations.py STORE --kills N [--seed S] [--workers W]

or ``python tools/crash_harness.py STORE --conversations --kills N``, or import it
(``tests/integrations/test_conversation_store_crash.py`` does) and call :func:`run`.

Each round starts ``--workers`` processes on one LMDB store (its durable default). A worker saves
conversations of its own through :class:`~tplog.integrations.pydantic_ai.TplogConversationStore`
(a prompt and a response per save, some of them large enough to take blobs) and now and then forks
one, printing ``save cid n`` / ``fork cid n`` only once the call has returned (acknowledged), one
``write()`` per line, so a line arrives whole or not at all. The harness kills each worker at a
random moment, then reopens the store and checks that every conversation loads with exactly the
messages of its last acknowledged save, or of the one save after it (committed, not yet
acknowledged: a save is one append, never a part of one); that every acknowledged fork exists with
its messages; and that the store verifies. The tally is printed as JSON; ``lost``, ``torn`` and
``problems`` must be zero/empty (``acked_*_checked`` count conversation checks, once per round).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


async def worker_main(path: str, wid: str, seed: int) -> None:
    """Save (and fork) this worker's conversations until killed, printing each acknowledgement."""
    from pydantic_ai import messages as pm
    from pydantic_ai.conversation import Conversation

    from tplog.integrations.pydantic_ai import TplogConversationStore

    rng = random.Random(seed)

    def say(line: str) -> None:
        os.write(1, (line + "\n").encode())  # one write below PIPE_BUF: whole or not at all

    async with TplogConversationStore(path) as cs:
        say("ready")
        forks = 0
        while True:
            cid = f"{wid}-c{rng.randrange(6)}"
            conv = await cs.load(cid) or Conversation(conversation_id=cid)
            if conv.messages and rng.random() < 0.1:
                forks += 1
                fid = f"{wid}-f{seed}-{forks}"
                await cs.fork(cid, new_conversation_id=fid)
                say(f"fork {fid} {len(conv.messages)}")
                continue
            size = rng.choice([40, 400, 4000, 40_000])
            conv.messages += [pm.ModelRequest.user_text_prompt("q" * rng.randrange(1, size)),
                              pm.ModelResponse(parts=[pm.TextPart("a" * rng.randrange(1, size))])]
            await cs.save(conv)
            say(f"save {cid} {len(conv.messages)}")


class Tally:
    def __init__(self) -> None:
        self.kills = 0
        self.rounds = 0
        self.acked_saves = 0  # save / fork calls that returned before their process was killed
        self.acked_forks = 0
        self.acked_saves_checked = 0
        self.acked_forks_checked = 0
        self.lost = 0
        self.torn = 0
        self.problems: list[str] = []

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))


def _spawn(path: str, wid: str, seed: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, __file__, "--worker", path, "--wid", wid, "--seed", str(seed)],
                            stdout=subprocess.PIPE, env=env)


def _held(path: str) -> dict[str, int]:
    """Each stored conversation's message count, as a new process loads it."""
    from tplog.integrations.pydantic_ai import TplogConversationStore

    async def loads() -> dict[str, int]:
        async with TplogConversationStore(path) as cs:
            out = {}
            for r in await cs.list_conversations():
                conv = await cs.load(r.conversation_id)
                out[r.conversation_id] = len(conv.messages) if conv is not None else -1
            return out

    return asyncio.run(loads())


def _round(path: str, rng: random.Random, acked: dict[str, int], forks: dict[str, int], tally: Tally,
           *, workers: int, max_wait: float) -> None:
    procs = [_spawn(path, f"w{w}", rng.randrange(1 << 30)) for w in range(workers)]
    for p in procs:
        assert p.stdout is not None
        if p.stdout.readline().strip() != b"ready":
            tally.problems.append(f"a worker did not start (exit {p.wait(30)})")
    time.sleep(rng.uniform(0.02, max_wait))
    for p in procs:
        p.send_signal(signal.SIGKILL)
    for p in procs:
        p.wait(60)
        tally.kills += 1
        assert p.stdout is not None
        for line in p.stdout.read().decode().splitlines():
            kind, _, rest = line.partition(" ")
            cid, _, n = rest.partition(" ")
            if kind in ("save", "fork") and n.isdigit():  # a line cut by the kill is no acknowledgement
                (acked if kind == "save" else forks)[cid] = int(n)
                tally.acked_saves += kind == "save"
                tally.acked_forks += kind == "fork"
    held = _held(path)
    for cid, n in acked.items():
        tally.acked_saves_checked += 1
        if held.get(cid, 0) < n:
            tally.lost += 1
            tally.problems.append(f"{cid}: {held.get(cid)} messages, {n} acknowledged")
        elif held[cid] not in (n, n + 2):
            tally.problems.append(f"{cid}: {held[cid]} messages, {n} acknowledged: more than the next save")
    for fid, n in forks.items():
        tally.acked_forks_checked += 1
        if held.get(fid) != n:
            tally.lost += 1
            tally.problems.append(f"fork {fid}: {held.get(fid)} messages, {n} acknowledged")
    tally.torn += sum(1 for n in held.values() if n % 2)  # a save is a prompt and its response
    from tplog import Store

    with Store(path) as s:
        if not (report := s.verify()).ok:
            tally.problems += [f"verify: {p}" for p in report.problems]
    # the next workers go on from what is stored (one save more than acknowledged may have landed)
    acked.update({cid: n for cid, n in held.items() if "-f" not in cid})
    tally.rounds += 1


def run(base: str, kills: int, *, seed: int | None = None, workers: int = 2, max_wait: float = 0.6,
        max_seconds: float | None = None, log: Any = None) -> Tally:
    """Kill at least ``kills`` worker processes (or stop after ``max_seconds``); return the tally."""
    seed = random.randrange(2**32) if seed is None else seed
    if log is not None:
        log(f"conversation crash harness seed {seed}")
    rng = random.Random(seed)
    tally = Tally()
    path = os.path.join(base, "store")
    acked: dict[str, int] = {}
    forks: dict[str, int] = {}
    t0 = time.monotonic()
    while tally.kills < kills and not tally.problems and (max_seconds is None or time.monotonic() - t0 < max_seconds):
        _round(path, rng, acked, forks, tally, workers=workers, max_wait=max_wait)
    return tally


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("store", metavar="STORE", nargs="?", help="a directory for the store (STORE/store)")
    ap.add_argument("--kills", type=int, default=100)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--workers", type=int, default=2, help="saving processes per round")
    ap.add_argument("--max-wait", type=float, default=0.6, help="longest a worker lives after it is ready")
    ap.add_argument("--worker", metavar="PATH", help=argparse.SUPPRESS)
    ap.add_argument("--wid", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        asyncio.run(worker_main(a.worker, a.wid, a.seed))
        return 0
    if a.store is None:
        ap.error("STORE is required")
    seed = a.seed if a.seed is not None else random.randrange(2**32)
    tally = run(a.store, a.kills, seed=seed, workers=a.workers, max_wait=a.max_wait,
                log=lambda s: print(s, file=sys.stderr, flush=True))
    print(json.dumps(tally.as_dict(), indent=2))
    ok = not tally.problems and tally.lost == 0 and tally.torn == 0
    print("OK" if ok else "FAILED", f"(seed {seed})")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
