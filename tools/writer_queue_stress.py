"""Stress LMDB's write lock with SIGKILLs: does a waiting writer ever sleep for good?

Run it::

    python tools/writer_queue_stress.py DIR --rounds N [--raw] [--seed S]

Each round starts three processes on the store in ``DIR/env`` (a new store every 20
rounds); each opens it and writes in a loop for 0.2 s, and about 70 % of them are
SIGKILLed within 4 ms of starting to open it. A process still running 30 s later
hangs: its Python stacks are printed (SIGUSR1, ``faulthandler``) and it is killed.
``--raw`` drives py-lmdb directly (LMDB's own robust mutex: on a loaded machine some
rounds hang, see tools/RELIABILITY.md); without it, tplog's engine (``writer.lck``
around each write transaction): no round should hang. Exits 1 if one did.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_ENGINE = r"""
import os, sys, time, faulthandler, signal
faulthandler.register(signal.SIGUSR1, all_threads=True)
sys.path.insert(0, sys.argv[2])
from tplog.backends.lmdb.engine import open_engine
os.write(1, b"o\n")
eng = open_engine(sys.argv[1], map_size=256 << 10)
end = time.monotonic() + 0.2
i = 0
while time.monotonic() < end:
    eng.run_write(lambda txn: txn.put("meta", b"k%d" % (i % 50), os.urandom(100)))
    i += 1
"""

_RAW = r"""
import os, sys, time, faulthandler, signal
faulthandler.register(signal.SIGUSR1, all_threads=True)
import lmdb
os.write(1, b"o\n")
env = lmdb.open(sys.argv[1], map_size=256 << 10, max_dbs=16, lock=True, readahead=False)
with env.begin(write=True) as txn:
    db = env.open_db(b"meta", txn=txn)
end = time.monotonic() + 0.2
i = 0
while time.monotonic() < end:
    try:
        with env.begin(write=True) as txn:
            txn.put(b"k%d" % (i % 50), os.urandom(100), db=db)
    except lmdb.MapFullError:
        pass
    i += 1
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("dir")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--raw", action="store_true", help="py-lmdb directly, not tplog's engine")
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args(argv)
    rng = random.Random(a.seed)
    script = _RAW if a.raw else _ENGINE
    path = os.path.join(a.dir, "env")
    hangs = 0
    for rnd in range(a.rounds):
        if rnd % 20 == 0:
            shutil.rmtree(path, ignore_errors=True)
            os.makedirs(path)
        procs = [subprocess.Popen([sys.executable, "-c", script, path, str(ROOT)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE) for _ in range(3)]
        for p in procs:
            if rng.random() < 0.7 and p.stdout is not None and p.stdout.readline() == b"o\n":
                time.sleep(rng.uniform(0, 0.004))
                p.kill()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                hangs += 1
                os.kill(p.pid, signal.SIGUSR1)
                time.sleep(1)
                p.kill()
                _, err = p.communicate()
                print(f"round {rnd}: process {p.pid} hung:\n{err.decode(errors='replace')[-2000:]}", flush=True)
            else:
                if p.returncode not in (0, -signal.SIGKILL):
                    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
                    print(f"round {rnd}: process {p.pid} exited {p.returncode}:\n{err[-2000:]}", flush=True)
            for f in (p.stdout, p.stderr):
                if f is not None:
                    f.close()
        if rnd % 50 == 49:
            print(f"{rnd + 1} rounds, {hangs} hangs", flush=True)
    print(f"{'py-lmdb' if a.raw else 'engine'}: {a.rounds} rounds, {hangs} hangs")
    return 1 if hangs else 0


if __name__ == "__main__":
    raise SystemExit(main())
