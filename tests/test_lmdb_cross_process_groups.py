"""Group commit when another process holds the writer lock (issue #41).

A leader that finds ``writer.lck`` held by another process used to wait with the group it had
taken, so appends queued during the other process's commit formed a group of their own (one
more commit pair of fsyncs each time the lock alternates). Now they join the waiting leader's
group once it holds the lock; every caller still gets its own result, in queue order."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from backends.contract_helpers import part
from test_rules import T0

from tplog.backends.lmdb import LmdbRecorder
from tplog.events import ThreadStarted

_HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.readline()
"""


def _append(rec: LmdbRecorder, tid: str, out: dict[str, Any]) -> None:
    out[tid] = rec.submit([part(tid, [ThreadStarted(thread_id=tid, created_at=T0)])]).result(timeout=60)[0]


def test_appends_queued_while_another_process_commits_join_the_waiting_group(tmp_path: Path) -> None:
    rec = LmdbRecorder(tmp_path / "s", auto_dictionary=0)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, os.path.join(rec.path, "writer.lck")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"locked\n"
        gc = rec._gc
        out: dict[str, Any] = {}
        tids = [str(uuid.uuid4()) for _ in range(4)]
        first = threading.Thread(target=_append, args=(rec, tids[0], out))
        first.start()
        deadline = time.monotonic() + 30
        while not gc.leading and time.monotonic() < deadline:  # the first caller leads, and waits for the lock
            time.sleep(0.01)
        others = [threading.Thread(target=_append, args=(rec, t, out)) for t in tids[1:]]
        for t in others:
            t.start()
        while sum(r.thread_id in tids[1:] for r in gc.queue) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert gc.commits == 0 and not out  # nothing commits while the other process holds the lock
        assert holder.stdin is not None
        holder.stdin.write(b"\n")
        holder.stdin.close()
        for t in [first, *others]:
            t.join(60)
        assert sorted(out) == sorted(tids)
        assert (gc.commits, gc.appends) == (1, 4)  # one group: the leader's and the three queued behind it
        positions = [out[t].last_position for t in tids]
        assert sorted(positions) == [1, 2, 3, 4] and positions[0] == 1  # the leader's first, then queue order
        assert [rec.head(t).version for t in tids] == [1, 1, 1, 1]
    finally:
        holder.kill()
        holder.wait()
        rec.close()
