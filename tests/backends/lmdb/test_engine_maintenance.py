"""The LMDB engine's maintenance calls on real files: backup, info, sync, advisory locks, scans."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tplog import InvalidInputError
from tplog.backends.lmdb import engine as engine_mod
from tplog.backends.lmdb.engine import TABLES, LmdbEngine
from tplog.errors import CorruptionError, ReadOnlyError, StorageError


def _decode_error() -> str:
    try:
        msgspec.msgpack.decode(b"\xc1")
    except msgspec.DecodeError as exc:
        return str(exc)
    raise AssertionError("0xc1 decoded")


_DECODE_ERROR = _decode_error()


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[LmdbEngine]:
    e = LmdbEngine(str(tmp_path / "s"))
    yield e
    e.close()


def _rows(e: LmdbEngine, table: str) -> list[tuple[bytes, bytes]]:
    with e.read() as txn:
        return [(bytes(k), bytes(v)) for k, v in txn.range(table)]


# --------------------------------------------------------------------------- backup


def test_backup_compacts_by_default(engine: LmdbEngine, tmp_path: Path) -> None:
    """A compacting copy leaves out the free pages a deletion left; ``compact=False`` copies them."""
    value = bytes(range(256)) * 8
    engine.run_write(lambda txn: [txn.put("events", i.to_bytes(4, "big"), value) for i in range(300)])
    engine.run_write(lambda txn: [txn.delete("events", i.to_bytes(4, "big")) for i in range(290)])
    sizes = {}
    for name, kw in (("default", {}), ("compact", {"compact": True}), ("full", {"compact": False})):
        engine.backup(str(tmp_path / name), **kw)
        sizes[name] = os.path.getsize(tmp_path / name / "data.mdb")
        copy = LmdbEngine(str(tmp_path / name), readonly=True)
        try:
            assert _rows(copy, "events") == _rows(engine, "events") and len(_rows(copy, "events")) == 10
        finally:
            copy.close()
    assert sizes["default"] == sizes["compact"] < sizes["full"] // 10


def test_backup_into_a_directory_that_is_not_empty_is_refused(engine: LmdbEngine, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "notes.txt").write_text("mine")
    with pytest.raises(StorageError) as ei:
        engine.backup(str(dest))
    assert str(ei.value) == f"backup destination {dest} is not empty"
    assert os.listdir(dest) == ["notes.txt"] and (dest / "notes.txt").read_text() == "mine"
    engine.backup(str(tmp_path / "new" / "nested"))  # a missing destination is created, parents too
    assert os.listdir(tmp_path / "new" / "nested") == ["data.mdb"]


class _Env:
    """The real LMDB environment with one method failing: a fault that cannot be made happen on
    demand on a healthy disk (the call's own handling is what is tested)."""

    def __init__(self, env: Any, name: str, exc: BaseException, times: int = 1 << 30) -> None:
        self._env, self._name, self._exc, self.left, self.calls = env, name, exc, times, 0

    def __getattr__(self, attr: str) -> Any:
        real = getattr(self._env, attr)
        if attr != self._name:
            return real

        def failing(*a: Any, **kw: Any) -> Any:
            self.calls += 1
            if self.left > 0:
                self.left -= 1
                raise self._exc
            return real(*a, **kw)

        return failing


def test_backup_retries_a_copy_that_meets_a_resized_map_four_times_then_names_the_destination(
        engine: LmdbEngine, tmp_path: Path) -> None:
    real = engine._env
    engine.run_write(lambda txn: txn.put("meta", b"k", b"v"))
    resized = engine_mod.lmdb.MapResizedError("mdb_txn_begin: MDB_MAP_RESIZED")
    fake = _Env(real, "copy", resized, times=4)
    engine._env = fake  # type: ignore[assignment]
    try:
        engine.backup(str(tmp_path / "ok"))  # the fifth attempt copies
        assert fake.calls == 5
        fake.left = 5
        fake.calls = 0
        with pytest.raises(StorageError) as ei:
            engine.backup(str(tmp_path / "never"))
        assert fake.calls == 5
        assert str(ei.value) == f"{tmp_path / 'never'}: LMDB failed: mdb_txn_begin: MDB_MAP_RESIZED"
    finally:
        engine._env = real
    copy = LmdbEngine(str(tmp_path / "ok"), readonly=True)
    try:
        assert _rows(copy, "meta") == [(b"k", b"v")]
    finally:
        copy.close()


def test_a_copy_that_fails_is_reported_with_the_destination(engine: LmdbEngine, tmp_path: Path) -> None:
    real = engine._env
    engine._env = _Env(real, "copy", engine_mod.lmdb.Error("mdb_env_copy2: Input/output error"))  # type: ignore[assignment]
    try:
        with pytest.raises(StorageError) as ei:
            engine.backup(str(tmp_path / "b"))
    finally:
        engine._env = real
    assert str(ei.value) == f"{tmp_path / 'b'}: LMDB failed: mdb_env_copy2: Input/output error"


def test_backup_flushes_the_copy_its_directory_and_the_parent(engine: LmdbEngine, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(engine_mod.os, "fsync", fsync)
    dest = tmp_path / "b"
    engine.backup(str(dest))
    assert synced == [str(dest / "data.mdb"), str(dest), str(tmp_path)]


def test_a_copy_that_cannot_be_flushed_is_an_error(engine: LmdbEngine, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    def fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(engine_mod.os, "fsync", fsync)
    dest = tmp_path / "b"
    with pytest.raises(StorageError) as ei:
        engine.backup(str(dest))
    assert str(ei.value) == f"backup {dest}: flushing the copy failed: [Errno 5] Input/output error"


# --------------------------------------------------------------------------- info and sync


def test_info_reports_the_environment_and_every_table(engine: LmdbEngine) -> None:
    big = bytes(range(256)) * 64  # 16 KiB: overflow pages
    engine.run_write(lambda txn: [txn.put("blobs", bytes([i]), big) for i in range(3)])
    engine.run_write(lambda txn: [txn.put("events", i.to_bytes(4, "big"), b"x" * 100) for i in range(500)])
    info = engine.info()
    env_info, env_stat = engine._env.info(), engine._env.stat()
    psize = env_stat["psize"]
    assert psize == os.sysconf("SC_PAGE_SIZE") or psize == 4096
    assert set(info) == {"path", "map_size", "last_pgno", "page_size", "file_bytes", "used_bytes", "max_readers",
                         "num_readers", "tables"}
    assert info["path"] == engine.path
    assert info["map_size"] == 64 << 20 and info["max_readers"] == 1024  # the defaults
    assert info["last_pgno"] == env_info["last_pgno"] and info["page_size"] == psize
    assert info["file_bytes"] == os.path.getsize(os.path.join(engine.path, "data.mdb")) > 0
    assert info["used_bytes"] == (env_info["last_pgno"] + 1) * psize
    assert info["num_readers"] == env_info["num_readers"] >= 1
    assert list(info["tables"]) == list(TABLES)
    with engine._env.begin() as txn:
        for name in TABLES:
            s = txn.stat(engine._dbs[name])
            assert info["tables"][name] == {"entries": s["entries"], "overflow_pages": s["overflow_pages"],
                                            "pages": s["branch_pages"] + s["leaf_pages"] + s["overflow_pages"]}
    blobs, events = info["tables"]["blobs"], info["tables"]["events"]
    assert blobs["entries"] == 3 and blobs["overflow_pages"] >= 3 * 4 and blobs["pages"] > blobs["overflow_pages"]
    assert events["entries"] == 500 and events["overflow_pages"] == 0 and events["pages"] > 2  # branch + leaves


def test_info_of_a_store_whose_file_was_deleted_under_it(engine: LmdbEngine) -> None:
    """The mapped file outlives its name: info() still answers, with no file bytes."""
    engine.run_write(lambda txn: txn.put("meta", b"k", b"v"))
    os.unlink(os.path.join(engine.path, "data.mdb"))
    info = engine.info()
    assert info["file_bytes"] == 0 and info["used_bytes"] > 0 and info["tables"]["meta"]["entries"] == 1


def test_info_translates_lmdb_errors(engine: LmdbEngine) -> None:
    real = engine._env
    engine._env = _Env(real, "stat", engine_mod.lmdb.CorruptedError("mdb_env_stat: MDB_CORRUPTED"))  # type: ignore[assignment]
    try:
        with pytest.raises(CorruptionError) as ei:
            engine.info()
    finally:
        engine._env = real
    assert str(ei.value) == (f"{engine.path}: the store's LMDB file is damaged or not an LMDB file "
                             "(mdb_env_stat: MDB_CORRUPTED); restore it from a backup")


def test_sync_flushes_a_writable_store_and_is_a_no_op_read_only(tmp_path: Path) -> None:
    w = LmdbEngine(str(tmp_path / "s"))
    w.run_write(lambda txn: txn.put("meta", b"k", b"v"))
    w.sync()
    real = w._env
    w._env = _Env(real, "sync", engine_mod.lmdb.Error("mdb_env_sync: Input/output error"))  # type: ignore[assignment]
    try:
        with pytest.raises(StorageError) as ei:
            w.sync()  # a writable store does sync (and reports what failed)
    finally:
        w._env = real
    assert str(ei.value) == f"{w.path}: LMDB failed: mdb_env_sync: Input/output error"
    w.close()
    r = LmdbEngine(str(tmp_path / "s"), readonly=True)
    try:
        r.sync()  # LMDB refuses mdb_env_sync on a read-only environment (EACCES): not called
        assert _rows(r, "meta") == [(b"k", b"v")]
    finally:
        r.close()


# --------------------------------------------------------------------------- advisory locks


def test_lock_names_are_ascii_letters_digits_dash_and_underscore(engine: LmdbEngine) -> None:
    for bad in ("", "a b", "a/b", "a.b", "é", "\u0661", "a\x00"):
        with pytest.raises(InvalidInputError) as ei:
            engine.try_lock(bad)
        assert str(ei.value) == f"lock name must be ASCII letters, digits, '-' or '_', not {bad!r}"
    for good in ("rebuild-links_2", "-", "_", "Z9"):
        held = engine.try_lock(good)
        assert held is not None
        held.release()
        assert os.path.isfile(os.path.join(engine.path, good + ".lock"))


def test_a_lock_file_is_made_in_the_store_with_mode_0600(engine: LmdbEngine, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")  # an empty working directory: a lock file made there is seen
    old = os.umask(0)
    try:
        held = engine.try_lock("job")
    finally:
        os.umask(old)
    assert held is not None
    try:
        assert sorted(p for p in os.listdir(engine.path) if p.endswith(".lock")) == ["job.lock"]
        assert stat.S_IMODE(os.stat(os.path.join(engine.path, "job.lock")).st_mode) == 0o600
        assert os.listdir(tmp_path / "cwd") == [] and not (tmp_path / "job.lock").exists()
    finally:
        held.release()


def test_try_lock_on_a_read_only_engine_names_the_store(tmp_path: Path) -> None:
    LmdbEngine(str(tmp_path / "s")).close()
    r = LmdbEngine(str(tmp_path / "s"), readonly=True)
    try:
        with pytest.raises(ReadOnlyError) as ei:
            r.try_lock("job")
        assert str(ei.value) == f"{r.path}: the store was opened read-only"
    finally:
        r.close()


def test_a_lock_file_that_cannot_be_opened_or_locked_is_a_storage_error(
        engine: LmdbEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    os.mkdir(os.path.join(engine.path, "dir.lock"))  # a directory cannot be opened for writing
    with pytest.raises(StorageError) as ei:
        engine.try_lock("dir")
    assert str(ei.value) == (f"{engine.path}: cannot open the lock file dir.lock: [Errno {errno.EISDIR}] "
                             f"Is a directory: '{os.path.join(engine.path, 'dir.lock')}'")

    closed: list[int] = []
    real_close = os.close

    def flock(fd: int, op: int) -> None:  # a file system without flock (ENOLCK)
        raise OSError(errno.ENOLCK, "No locks available")

    def close(fd: int) -> None:
        closed.append(fd)
        real_close(fd)

    monkeypatch.setattr(engine_mod.fcntl, "flock", flock)
    monkeypatch.setattr(engine_mod.os, "close", close)
    with pytest.raises(StorageError) as ei:
        engine.try_lock("job")
    assert str(ei.value) == f"{engine.path}: cannot lock job.lock: [Errno {errno.ENOLCK}] No locks available"
    assert len(closed) == 1  # the lock file's descriptor is not leaked
    with pytest.raises(OSError):
        os.fstat(closed[0])


# --------------------------------------------------------------------------- scans


def test_scan_end_is_exclusive_and_limit_counts_rows(engine: LmdbEngine) -> None:
    keys = [bytes([i]) * 2 for i in range(1, 10)]
    engine.run_write(lambda txn: [txn.put("events", k, b"v" + k) for k in keys])
    assert [k for k, _ in engine.scan("events", keys[2], keys[5])] == keys[2:5]  # end is an existing key
    assert engine.scan("events", keys[2], keys[5], limit=0) == []
    assert [k for k, _ in engine.scan("events", keys[2], keys[5], limit=3)] == keys[2:5]
    assert [k for k, _ in engine.scan("events", b"", b"\xff", limit=4)] == keys[:4]
    with engine.read() as txn:
        assert engine.scan("events", keys[0], keys[1], txn=txn) == [(keys[0], b"v" + keys[0])]


def test_scan_reports_a_row_its_check_cannot_decode_and_lmdb_errors(engine: LmdbEngine) -> None:
    def undecodable(txn: Any) -> None:
        msgspec.msgpack.decode(b"\xc1")  # 0xc1: never valid msgpack

    for txn_given in (False, True):
        with pytest.raises(CorruptionError) as ei:
            if txn_given:
                with engine.read() as txn:
                    engine.scan("events", b"", b"\xff", check=undecodable, txn=txn)
            else:
                engine.scan("events", b"", b"\xff", check=undecodable)
        assert str(ei.value) == (f"{engine.path}: a stored row does not decode ({_DECODE_ERROR}); "
                                 "run `tplog verify`, or restore a backup")

    def damaged(txn: Any) -> None:
        raise engine_mod.lmdb.PageNotFoundError("mdb_get: MDB_PAGE_NOTFOUND")

    with pytest.raises(CorruptionError) as ei:
        engine.scan("events", b"", b"\xff", check=damaged)
    assert str(ei.value) == (f"{engine.path}: the store's LMDB file is damaged or not an LMDB file "
                             "(mdb_get: MDB_PAGE_NOTFOUND); restore it from a backup")
    assert engine._rw._readers == 0  # every failed scan released its reader count
