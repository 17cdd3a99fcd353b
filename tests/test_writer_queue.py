"""Writers of several processes queue on ``writer.lck``, never on LMDB's own write mutex.

Why (found by the crash harness, hanging about one run in four under load): LMDB's
write lock is a robust process-shared pthread mutex. When its holder releases it,
one waiter is woken; if that waiter is SIGKILLed before it takes the mutex while a
third process takes it meanwhile, the futex's "waiters" bit is gone with it, and
the remaining waiters sleep on although the mutex is free (or its owner dead) — a
write transaction that never begins. A kernel file lock (``fcntl``) is handed over
and released on death by the kernel, so the engine queues processes on one around
each write transaction; LMDB's mutex then never has a waiter to lose.

The check reads where a blocked writer sleeps in the kernel (``/proc/PID/wchan``):
on the file lock, not on a futex. The same check on py-lmdb used directly shows a
futex, so it can tell the two apart.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tplog.backends.lmdb.engine import open_engine

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(not os.path.exists(f"/proc/{os.getpid()}/wchan"),
                                reason="reads where a process sleeps from Linux's /proc/PID/wchan")

_ENGINE_WRITER = """
import sys
from tplog.backends.lmdb.engine import open_engine
eng = open_engine(sys.argv[1])
eng.run_write(lambda txn: txn.put("meta", sys.argv[2].encode(), b"x"))
print("wrote", flush=True)
"""

_RAW_WRITER = """
import sys, lmdb
env = lmdb.open(sys.argv[1], max_dbs=20)
with env.begin(write=True) as txn:
    txn.put(sys.argv[2].encode(), b"x")
print("wrote", flush=True)
"""


def _sleeping_in(pid: int, timeout: float = 120.0) -> str:
    """The kernel function the process sleeps in once it waits for a lock (a futex or a file
    lock) and has waited there for a second (other waits, e.g. for the disk, are passed over)."""
    deadline = time.monotonic() + timeout
    seen, since = "", time.monotonic()
    while time.monotonic() < deadline:
        wchan = Path(f"/proc/{pid}/wchan").read_text().strip()
        if wchan != seen:
            seen, since = wchan, time.monotonic()
        elif ("futex" in wchan or "lk" in wchan or "lock" in wchan) and time.monotonic() - since > 1.0:
            return wchan
        time.sleep(0.05)
    raise AssertionError(f"process {pid} never settled in a lock wait (last: {seen!r})")


def _writers_blocked_behind(hold: threading.Event, held: threading.Event, path: Path, script: str) -> list[str]:
    """Two writer processes started while this one holds a write transaction: where each sleeps."""
    assert held.wait(60)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    procs = [subprocess.Popen([sys.executable, "-c", script, str(path), f"k{i}"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=env) for i in range(2)]
    try:
        where = [_sleeping_in(p.pid) for p in procs]
    finally:
        hold.set()
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0 and out == b"wrote\n", err.decode()
    return where


def test_waiting_writers_of_other_processes_sleep_on_the_file_lock(tmp_path: Path) -> None:
    eng = open_engine(str(tmp_path / "s"))
    hold, held = threading.Event(), threading.Event()

    def holder() -> None:
        eng.run_write(lambda txn: (held.set(), hold.wait(120)))

    t = threading.Thread(target=holder)
    t.start()
    try:
        where = _writers_blocked_behind(hold, held, tmp_path / "s", _ENGINE_WRITER)
    finally:
        hold.set()
        t.join(60)
    try:
        assert all("futex" not in w and "lk" in w for w in where), where  # fcntl_setlk, not futex_do_wait
        with eng.read() as txn:
            assert txn.get("meta", b"k0") == txn.get("meta", b"k1") == b"x"
    finally:
        eng.close()


def test_raw_lmdb_writers_sleep_on_the_futex(tmp_path: Path) -> None:
    """What the check above tells apart: py-lmdb's own waiters sleep on LMDB's mutex."""
    import lmdb

    env = lmdb.open(str(tmp_path / "raw"), max_dbs=20)
    hold, held = threading.Event(), threading.Event()

    def holder() -> None:
        with env.begin(write=True):
            held.set()
            hold.wait(120)

    t = threading.Thread(target=holder)
    t.start()
    try:
        where = _writers_blocked_behind(hold, held, tmp_path / "raw", _RAW_WRITER)
    finally:
        hold.set()
        t.join(60)
        env.close()
    assert all("futex" in w for w in where), where
