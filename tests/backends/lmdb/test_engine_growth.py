"""The LMDB engine's map: grown by this process (a write that does not fit) and by another one.

Another process's growth is made by a short script using py-lmdb alone (no tplog), so what is
tested is only this process's engine: each of its entry points meets MDB_MAP_RESIZED (the file
outgrew this process's map) and adopts the new size, as the module's docstring promises.
"""

from __future__ import annotations

import errno
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import lmdb
import pytest

from tplog.backends.lmdb.engine import LmdbEngine
from tplog.errors import StorageError, StorageFullError

SMALL = 64 * 1024

_GROW = """
    import sys, lmdb
    path, size, key, n = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode(), int(sys.argv[4])
    env = lmdb.open(path, map_size=size, max_dbs=16)
    db = env.open_db(b"blobs")
    with env.begin(write=True) as txn:
        txn.put(key, bytes(range(256)) * (n // 256), db=db)
    print(env.info()["map_size"])
"""


def _grow(path: Path, size: int, key: str, n: int) -> int:
    """Another process writes ``n`` bytes under ``key`` with a map of ``size`` bytes; its map size."""
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(_GROW), str(path), str(size), key, str(n)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    return int(r.stdout)


@pytest.fixture
def small(tmp_path: Path) -> Iterator[LmdbEngine]:
    e = LmdbEngine(str(tmp_path / "s"), map_size=256 << 10)
    e.run_write(lambda txn: txn.put("meta", b"k", b"v"))
    yield e
    e.close()


def test_every_entry_point_adopts_a_map_another_process_grew(small: LmdbEngine, tmp_path: Path) -> None:
    path = tmp_path / "s"
    # info() (Store.stats) first: it failed with "LMDB failed: MDB_MAP_RESIZED" where reads adopted.
    assert _grow(path, 4 << 20, "a", 1 << 20) == 4 << 20
    info = small.info()
    assert info["map_size"] == 4 << 20  # the other process's size, not merely enough for the data
    assert info["tables"]["blobs"]["entries"] == 1

    assert _grow(path, 8 << 20, "b", 7 << 19) == 8 << 20  # 4.5 MiB in all: beyond the 4 MiB map
    with small.read() as txn:
        assert len(txn.get("blobs", b"b") or b"") == 7 << 19
    assert small.info()["map_size"] == 8 << 20

    assert _grow(path, 16 << 20, "c", 4 << 20) == 16 << 20  # 8.5 MiB
    assert [k for k, _ in small.scan("blobs", b"", b"\xff")] == [b"a", b"b", b"c"]
    assert small.info()["map_size"] == 16 << 20

    assert _grow(path, 32 << 20, "d", 17 << 19) == 32 << 20  # 17 MiB
    small.run_write(lambda txn: txn.put("meta", b"after", b"1"))
    assert small.info()["map_size"] == 32 << 20
    with small.read() as txn:
        assert txn.get("meta", b"after") == b"1" and len(txn.get("blobs", b"d") or b"") == 17 << 19


def test_scan_in_a_given_transaction_after_another_process_grew_the_map(small: LmdbEngine, tmp_path: Path) -> None:
    _grow(tmp_path / "s", 4 << 20, "a", 1 << 20)
    with small.read() as txn:  # read() adopted the size; scan runs in its snapshot
        assert [k for k, _ in small.scan("blobs", b"", b"\xff", txn=txn)] == [b"a"]
        assert [k for k, _ in small.scan("meta", b"", b"\xff", txn=txn)] == [b"k"]


def test_backup_after_another_process_grew_the_map(small: LmdbEngine, tmp_path: Path) -> None:
    """LMDB's copy begins a read transaction of its own: it meets MDB_MAP_RESIZED after creating the
    copy's file, which is removed before the copy is tried again with the adopted size."""
    _grow(tmp_path / "s", 4 << 20, "a", 1 << 20)
    for compact in (True, False):
        small.backup(str(tmp_path / f"b-{compact}"), compact=compact)
        copy = LmdbEngine(str(tmp_path / f"b-{compact}"), readonly=True)
        try:
            with copy.read() as txn:
                assert len(txn.get("blobs", b"a") or b"") == 1 << 20 and txn.get("meta", b"k") == b"v"
        finally:
            copy.close()
    assert small.info()["map_size"] == 4 << 20


def test_the_map_doubles_until_the_write_fits(tmp_path: Path) -> None:
    e = LmdbEngine(str(tmp_path / "s"), map_size=SMALL)
    try:
        value = bytes(range(256)) * 16
        e.run_write(lambda txn: [txn.put("events", i.to_bytes(4, "big"), value) for i in range(40)])  # ~160 KiB
        size = e.info()["map_size"]
        assert size > SMALL and size // SMALL in (4, 8) and size % SMALL == 0  # doubled: 64 K -> 128 K -> ...
    finally:
        e.close()


def test_growth_stops_exactly_at_max_map_size(tmp_path: Path) -> None:
    """Doubling is capped: 64 K -> 128 K -> 192 K (the cap), then StorageFullError naming it."""
    path = tmp_path / "s"
    e = LmdbEngine(str(path), map_size=SMALL, max_map_size=3 * SMALL)
    try:
        value = bytes(range(250)) * 4
        e.run_write(lambda txn: [txn.put("events", i.to_bytes(4, "big"), value) for i in range(100)])  # ~160 KiB
        assert e.info()["map_size"] == 3 * SMALL
        with pytest.raises(StorageFullError) as ei:
            e.run_write(lambda txn: [txn.put("blobs", i.to_bytes(4, "big"), value) for i in range(60)])
        assert ei.value.errno == errno.ENOSPC
        assert str(ei.value) == (f"[Errno {errno.ENOSPC}] {e.path}: the map reached max_map_size "
                                 f"({3 * SMALL} bytes); raise max_map_size")
        assert e.info()["tables"]["blobs"]["entries"] == 0
    finally:
        e.close()


def test_a_map_that_cannot_be_resized_is_a_storage_error(tmp_path: Path) -> None:
    e = LmdbEngine(str(tmp_path / "s"), map_size=SMALL)
    real = e._env

    class _Env:  # LMDB refusing the new size (EINVAL: e.g. a transaction of this process still open)
        def __getattr__(self, attr: str) -> object:
            if attr == "set_mapsize":
                def set_mapsize(size: int) -> None:
                    raise lmdb.Error("mdb_env_set_mapsize: Invalid argument")
                return set_mapsize
            return getattr(real, attr)

    try:
        e._env = _Env()  # type: ignore[assignment]
        value = bytes(range(256)) * 16
        with pytest.raises(StorageError) as ei:
            e.run_write(lambda txn: [txn.put("events", i.to_bytes(4, "big"), value) for i in range(40)])
        assert type(ei.value) is StorageError
        assert str(ei.value) == f"{e.path}: LMDB failed: mdb_env_set_mapsize: Invalid argument"
    finally:
        e._env = real
        e.close()


def test_a_resize_waits_for_a_scan_and_the_scan_wakes_it(tmp_path: Path) -> None:
    """scan() counts itself a reader (the inline half of the engine's reader/resizer lock): a map
    growth in another thread waits while a scan runs and goes on when the scan, its last reader,
    ends (the scan's release wakes it)."""
    e = LmdbEngine(str(tmp_path / "s"), map_size=SMALL)
    rw = e._rw
    in_scan, release = threading.Event(), threading.Event()
    e.run_write(lambda txn: txn.put("meta", b"k", b"v"))

    def hold(_txn: object) -> None:
        in_scan.set()
        release.wait(30)

    done: list[object] = []
    scanner = threading.Thread(target=lambda: done.append(e.scan("meta", b"", b"\xff", check=hold)))
    value = bytes(range(256)) * 16
    writer = threading.Thread(
        target=lambda: done.append(e.run_write(lambda txn: [txn.put("events", i.to_bytes(4, "big"), value)
                                                            for i in range(40)])))
    try:
        with e.read() as txn:  # a reader already there when the scan starts: the count is 2, not 1
            scanner.start()
            assert in_scan.wait(30)
            assert rw._readers == 2 and txn.get("meta", b"k") == b"v"
        assert rw._readers == 1
        writer.start()
        for _ in range(3000):  # the growth waits for the scan (a reader)
            if rw._resizing:
                break
            threading.Event().wait(0.01)
        assert rw._resizing
        release.set()
        scanner.join(30)
        writer.join(10)  # woken by the scan's release
        assert not writer.is_alive(), "the resize was never woken by the last reader's release"
        assert len(done) == 2 and rw._readers == 0 and e.info()["map_size"] > SMALL
    finally:
        release.set()
        with rw._cond:  # a hung resizer (a broken release) must not outlive the test
            rw._cond.notify_all()
        scanner.join(30)
        writer.join(30)
        e.close()
