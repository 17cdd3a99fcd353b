"""A damaged store file: opening and reading it fail with typed errors naming the store.

Issue 25: after a power cut with a broken durability setting, ``Store(...)`` raised
``lmdb.BadTxnError`` (an LMDB transaction answers MDB_BAD_TXN after a page it could
not trust); rows without a CRC of their own (heads, indexes, projections) raised
msgspec's errors. Every page of a small store is damaged in turn here (zeroed,
filled, random, bits flipped), then the copy is opened, read whole and verified.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import ToyStore as Store
from conftest import started, user

from tplog.errors import CorruptionError

ROOT = Path(__file__).resolve().parent.parent

# In a child process: LMDB trusts page pointers, and a crash must fail the test, not the test run.
_DAMAGE_EVERY_PAGE = """
import json, os, random, shutil, sys, traceback
sys.path[:0] = [sys.argv[2], sys.argv[2] + "/tests"]
from conftest import ToyStore as Store
from tplog import CorruptionError, TplogError
from tplog.verify import verify_store

src, work = sys.argv[1], sys.argv[1] + "-damaged"
pages = os.path.getsize(os.path.join(src, "data.mdb")) // 4096
rng = random.Random(7)
out = {"cases": 0, "opened_and_read": 0, "typed": {}, "untyped": [], "no_path": []}
for page in range(pages):
    for kind in ("zero", "ones", "random", "flips"):
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(src, work)
        with open(os.path.join(work, "data.mdb"), "r+b") as f:
            f.seek(page * 4096)
            buf = bytearray(f.read(4096))
            if kind == "zero":
                buf = bytearray(4096)
            elif kind == "ones":
                buf = bytearray(b"\\xff" * 4096)
            elif kind == "random":
                buf = bytearray(rng.randbytes(4096))
            else:
                for _ in range(8):
                    buf[rng.randrange(4096)] ^= 1 << rng.randrange(8)
            f.seek(page * 4096)
            f.write(buf)
        out["cases"] += 1
        try:
            with Store(work) as s:
                list(s.iter_all())
                s.threads(limit=1000, include_deleted=True)
                for t in range(20):
                    try:
                        s.read(f"t{t}")
                    except CorruptionError as exc:  # one damaged event: named by thread and seq
                        if exc.thread_id is None and work not in str(exc):
                            out["no_path"].append([page, kind, str(exc)[:200]])
                verify_store(s)
            out["opened_and_read"] += 1
        except TplogError as exc:
            name = type(exc).__name__
            out["typed"][name] = out["typed"].get(name, 0) + 1
            if isinstance(exc, CorruptionError) and exc.thread_id is None and work not in str(exc):
                out["no_path"].append([page, kind, str(exc)[:200]])
        except Exception as exc:
            out["untyped"].append([page, kind, repr(exc)[:200], traceback.format_exc()[-600:]])
print(json.dumps(out))
"""


def test_every_damaged_page_gives_a_typed_error_naming_the_store(tmp_path: Path) -> None:
    src = tmp_path / "s"
    with Store(src) as s:
        for i in range(20):
            s.append(f"t{i}", [started(f"t{i}"), user("x" * (60 * i))])
        s.delete_thread("t3")
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(_DAMAGE_EVERY_PAGE), str(src), str(ROOT)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    print(json.dumps({k: v for k, v in out.items() if k != "untyped"}))
    assert out["untyped"] == [], out["untyped"][:3]
    assert out["no_path"] == [], out["no_path"][:3]
    assert out["cases"] >= 4 * 10
    assert out["typed"].get("CorruptionError", 0) > 0  # the damage was seen, not only read past


def test_meta_pages_destroyed_is_a_corruption_error_naming_the_store(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with Store(path) as s:
        s.append("t", [started("t")])
    with open(path / "data.mdb", "r+b") as f:
        f.write(bytes(2 * 4096))  # both meta pages
    with pytest.raises(CorruptionError, match=str(path)):
        Store(path)
    with pytest.raises(CorruptionError, match=str(path)):
        Store(path, readonly=True)


def test_a_head_row_that_does_not_decode_is_a_corruption_error(tmp_path: Path) -> None:
    """Heads carry no CRC of their own: msgspec's DecodeError became the caller's."""
    path = tmp_path / "s"
    with Store(path) as s:
        s.append("t", [started("t"), user("hello")])
        with s.backend.engine.read() as txn:
            key = bytes(next(k for k, _ in txn.range("heads")))
        s.backend.engine.run_write(lambda txn: txn.put("heads", key, b"\xc1not msgpack"))
    with Store(path) as s, pytest.raises(CorruptionError, match=str(path)):
        s.read_all()


def test_a_new_store_is_created_whole(tmp_path: Path) -> None:
    """The new file is built aside, flushed and renamed into place (issue 25: a power cut
    during the first commit could keep a data page but not the unflushed meta pages):
    nothing of it is left behind, and a leftover of a crashed creation is not used."""
    path = tmp_path / "new" / "store"
    with Store(path) as s:
        s.append("t", [started("t")])
    assert sorted(os.listdir(path)) == ["data.mdb", "lock.mdb", "writer.lck"]
    other = tmp_path / "other"
    other.mkdir()
    (other / "data.mdb.new").write_bytes(b"half a file from a crashed creation")
    with Store(other) as s:
        assert s.append("t", [started("t")]).last_position == 1
    assert sorted(os.listdir(other)) == ["data.mdb", "lock.mdb", "writer.lck"]
    shutil.rmtree(other)
