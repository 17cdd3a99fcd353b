"""``Store.backup`` when another process has grown the map since this one last read.

LMDB's copy begins its own read transaction, which answers MDB_MAP_RESIZED when the
data outgrew this process's map; ``backup`` then failed with a StorageError where
every other read adopts the new size and goes on. Now the copy does the same.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import ToyStore as Store
from conftest import started, user

ROOT = Path(__file__).resolve().parent.parent

_GROW = """
import os, sys
sys.path[:0] = [sys.argv[2], sys.argv[2] + "/tests"]
from conftest import ToyStore as Store, started, user
with Store(sys.argv[1], map_size=256 << 10) as s:
    s.append("big", [started("big")])
    for i in range(40):
        s.append("big", [user(os.urandom(30_000).hex())])  # incompressible: the map must grow
    print(s.backend.engine.info()["map_size"])
"""


def test_backup_after_another_process_grew_the_map(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with Store(path, map_size=256 << 10) as s:
        s.append("t", [started("t"), user("hello")])
        r = subprocess.run([sys.executable, "-c", textwrap.dedent(_GROW), str(path), str(ROOT)],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        assert int(r.stdout) > 256 << 10  # the other process grew the map
        for compact in (True, False):
            dest = tmp_path / f"backup-{compact}"
            s.backup(str(dest), compact=compact)
            with Store(dest, readonly=True) as b:
                assert len(b.read("big")) == 41 and [e.event for e in b.read("t")] == [started("t"), user("hello")]
