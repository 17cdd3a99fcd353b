"""Opening, creating, sharing and closing the LMDB engine, on real store directories.

Faults a healthy disk (or root) cannot produce on demand — a read-only or full disk at creation,
LMDB answering MDB_MAP_RESIZED five times — are raised at the OS or py-lmdb call that would
report them; what is tested is the engine's answer.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import lmdb
import msgspec
import pytest

from tplog import InvalidInputError
from tplog.backends.lmdb import engine as engine_mod
from tplog.backends.lmdb.engine import TABLES, LmdbEngine, open_engine
from tplog.errors import CorruptionError, ReadOnlyError, StorageError, StorageFullError, StoreClosedError


def _decode_error() -> str:
    try:
        msgspec.msgpack.decode(b"\xc1")
    except msgspec.DecodeError as exc:
        return str(exc)
    raise AssertionError("0xc1 decoded")


_DECODE_ERROR = _decode_error()


def _files(path: Path) -> list[str]:
    return sorted(os.listdir(path))


# --------------------------------------------------------------------------- options


@pytest.mark.parametrize("durability", ["durable", "relaxed"])
def test_the_environment_is_opened_with_the_documented_flags(tmp_path: Path, durability: str) -> None:
    e = LmdbEngine(str(tmp_path / "s"), durability=durability, map_size=1 << 20, max_readers=7)
    try:
        # metasync off in both: a durable run_write flushes the meta page itself, outside the writer lock
        assert e._meta_sync == (durability == "durable")
        assert e._env.flags() == {"subdir": True, "readonly": False, "metasync": False,
                                  "sync": True, "map_async": False, "readahead": False, "writemap": False,
                                  "meminit": True, "lock": True}
        assert (e.readonly, e.durability, e.max_map_size) == (False, durability, 1 << 40)
        info = e.info()
        assert (info["map_size"], info["max_readers"]) == (1 << 20, 7)
        # room for the tables and four more named databases, no more
        with e._env.begin(write=True) as txn:
            for i in range(4):
                e._env.open_db(f"extra{i}".encode(), txn=txn)
            with pytest.raises(lmdb.DbsFullError):
                e._env.open_db(b"one-too-many", txn=txn)
    finally:
        e.close()
    r = LmdbEngine(str(tmp_path / "s"), readonly=True)
    try:
        assert r._env.flags()["readonly"] is True and r.readonly is True
        assert set(r._dbs) == set(TABLES) and all(db is not None for db in r._dbs.values())
    finally:
        r.close()


def test_a_relative_path_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    e = LmdbEngine("rel")
    try:
        assert e.path == str(tmp_path / "rel") and e.info()["path"] == str(tmp_path / "rel")
    finally:
        e.close()


def test_a_new_store_is_built_aside_flushed_and_renamed_into_place(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(engine_mod.os, "fsync", fsync)
    path = tmp_path / "new"
    old_umask = os.umask(0)
    try:
        engine_mod._create(str(path), 1 << 20)  # a directory that did not exist: its parent is flushed too
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(os.stat(path / "writer.lck").st_mode) == 0o600  # the owner's alone, even under umask 0
    assert stat.S_IMODE(os.stat(path / "data.mdb").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    assert synced == [str(path / "data.mdb.new"), str(path), str(tmp_path)]
    assert _files(path) == ["data.mdb", "writer.lck"]  # no lock file of the build (lock=False), no leftover
    env = lmdb.open(str(path), readonly=True, max_dbs=len(TABLES) + 4, lock=False, map_size=0)
    try:  # every table is in the file before anything is written to it
        for name in TABLES:
            env.open_db(name.encode(), create=False)
        assert env.info()["map_size"] == 1 << 20
    finally:
        env.close()
    synced.clear()
    engine_mod._create(str(path), 1 << 20)  # already there: nothing done
    assert synced == []
    (tmp_path / "made").mkdir()
    (tmp_path / "made" / "data.mdb.new").write_bytes(b"leftover of a creator that crashed")
    engine_mod._create(str(tmp_path / "made"), 1 << 20)  # the directory existed: its parent is not flushed
    assert synced == [str(tmp_path / "made" / "data.mdb.new"), str(tmp_path / "made")]
    assert _files(tmp_path / "made") == ["data.mdb", "writer.lck"]
    e = LmdbEngine(str(tmp_path / "made"))
    try:
        e.run_write(lambda txn: txn.put("meta", b"k", b"v"))
        assert e.info()["tables"]["meta"]["entries"] == 1
    finally:
        e.close()


def test_opening_retries_lmdb_open_after_map_resizes_four_times_not_five(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    LmdbEngine(str(tmp_path / "s")).close()
    real_open = engine_mod.lmdb.open
    calls = 0

    def resized(times: int) -> Any:
        def open_(*a: Any, **kw: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls <= times:
                raise lmdb.MapResizedError("mdb_txn_begin: MDB_MAP_RESIZED")
            return real_open(*a, **kw)
        return open_

    monkeypatch.setattr(engine_mod.lmdb, "open", resized(4))
    e = LmdbEngine(str(tmp_path / "s"))
    e.close()
    assert calls == 5
    calls = 0
    monkeypatch.setattr(engine_mod.lmdb, "open", resized(5))
    with pytest.raises(StorageError) as ei:
        LmdbEngine(str(tmp_path / "s"))
    assert calls == 5
    assert str(ei.value) == f"{tmp_path / 's'}: LMDB failed: mdb_txn_begin: MDB_MAP_RESIZED"


def test_opening_the_tables_adopts_a_resized_map_four_times_not_five(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The write transaction that opens the tables meets MDB_MAP_RESIZED when another process grew
    the map since LMDB read the meta page: the size is adopted (``set_mapsize(0)``) and it is retried."""
    LmdbEngine(str(tmp_path / "s")).close()
    real_open = engine_mod.lmdb.open
    log: list[str] = []

    class _Env:
        def __init__(self, env: Any, times: int) -> None:
            self._env, self._times = env, times

        def __getattr__(self, attr: str) -> Any:
            real = getattr(self._env, attr)
            if attr == "open_db":
                def open_db(*a: Any, **kw: Any) -> Any:
                    if self._times > 0:
                        self._times -= 1
                        log.append("resized")
                        raise lmdb.MapResizedError("mdb_txn_begin: MDB_MAP_RESIZED")
                    return real(*a, **kw)
                return open_db
            if attr == "set_mapsize":
                def set_mapsize(size: int) -> None:
                    log.append(f"set_mapsize({size})")
                    real(size)
                return set_mapsize
            return real

    for times in (4, 5):
        log.clear()
        monkeypatch.setattr(engine_mod.lmdb, "open", lambda *a, times=times, **kw: _Env(real_open(*a, **kw), times))
        if times == 4:
            e = LmdbEngine(str(tmp_path / "s"))
            e.run_write(lambda txn: txn.put("meta", b"k", b"v"))
            e.close()
        else:
            with pytest.raises(StorageError) as ei:
                LmdbEngine(str(tmp_path / "s"))
            assert str(ei.value) == f"{tmp_path / 's'}: the map kept being resized by another process while opening"
        assert log == ["resized", "set_mapsize(0)"] * times


def test_a_backup_opened_writable_gets_its_writer_lck_with_mode_0600(tmp_path: Path) -> None:
    e = LmdbEngine(str(tmp_path / "s"))
    e.backup(str(tmp_path / "b"))
    e.close()
    assert _files(tmp_path / "b") == ["data.mdb"]
    old_umask = os.umask(0)
    try:
        b = LmdbEngine(str(tmp_path / "b"))
    finally:
        os.umask(old_umask)
    try:
        assert stat.S_IMODE(os.stat(tmp_path / "b" / "writer.lck").st_mode) == 0o600
    finally:
        b.close()


# --------------------------------------------------------------------------- what cannot be opened


@pytest.mark.parametrize(("err", "kind", "text"), [
    (errno.EROFS, ReadOnlyError, "cannot create the store ([Errno 30] Read-only file system); open it with "
                                 "readonly=True"),
    (errno.EACCES, ReadOnlyError, "cannot create the store ([Errno 13] Permission denied); open it with "
                                  "readonly=True"),
    (errno.EPERM, ReadOnlyError, "cannot create the store ([Errno 1] Operation not permitted); open it with "
                                 "readonly=True"),
    (errno.ENOSPC, StorageFullError, "the disk is full; cannot create the store ([Errno 28] No space left on "
                                     "device)"),
    (errno.EDQUOT, StorageFullError, "the disk is full; cannot create the store ([Errno 122] Disk quota "
                                     "exceeded)"),
])
def test_a_store_that_cannot_be_created(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, err: int,
                                        kind: type[Exception], text: str) -> None:
    def makedirs(name: str, mode: int = 0o777, exist_ok: bool = False) -> None:
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(engine_mod.os, "makedirs", makedirs)
    with pytest.raises(kind) as ei:
        LmdbEngine(str(tmp_path / "s"))
    assert type(ei.value) is kind
    msg = str(ei.value)
    if kind is StorageFullError:
        assert ei.value.errno == err  # type: ignore[attr-defined]
        msg = msg.removeprefix(f"[Errno {err}] ")
    assert msg == f"{tmp_path / 's'}: {text}"


def test_a_store_under_a_file_is_a_storage_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(StorageError) as ei:
        LmdbEngine(str(tmp_path / "file" / "s"))
    assert type(ei.value) is StorageError
    assert str(ei.value) == (f"{tmp_path / 'file' / 's'}: cannot create the store: [Errno 20] Not a directory: "
                             f"'{tmp_path / 'file' / 's'}'")


def test_read_only_open_refused_by_the_lock_file_says_what_to_do(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Root is never refused; the error is LMDB's (py-lmdb keeps the errno in ``code``)."""
    LmdbEngine(str(tmp_path / "s")).close()

    def open_(*a: Any, **kw: Any) -> Any:
        exc = lmdb.Error(f"{tmp_path / 's'}: Permission denied")
        exc.code = errno.EACCES  # type: ignore[attr-defined]
        raise exc

    monkeypatch.setattr(engine_mod.lmdb, "open", open_)
    with pytest.raises(ReadOnlyError) as ei:
        LmdbEngine(str(tmp_path / "s"), readonly=True)
    assert str(ei.value) == (
        f"{tmp_path / 's'}: cannot open the store, even read-only ({tmp_path / 's'}: Permission denied): readers "
        "register in its lock file lock.mdb, which this user may not write; give it write access to lock.mdb, or "
        "read a copy of the store")
    with pytest.raises(ReadOnlyError) as ei:
        LmdbEngine(str(tmp_path / "s"))  # writable: the generic read-only advice
    assert str(ei.value).endswith("Permission denied); open it with readonly=True, or on a writable disk")


def test_a_read_only_open_needs_every_table_but_the_optional_ones(tmp_path: Path) -> None:
    def lmdb_with(path: Path, names: list[str]) -> None:
        env = lmdb.open(str(path), max_dbs=len(TABLES) + 4)
        for n in names:
            env.open_db(n.encode())
        env.close()

    lmdb_with(tmp_path / "old", [t for t in TABLES if t != "finder"])  # a store of an older tplog
    r = LmdbEngine(str(tmp_path / "old"), readonly=True)
    try:
        assert r._dbs["finder"] is None and all(r._dbs[t] is not None for t in TABLES if t != "finder")
    finally:
        r.close()
    for missing in ("meta", "proj"):
        lmdb_with(tmp_path / missing, [t for t in TABLES if t != missing])
        with pytest.raises(StorageError) as ei:
            LmdbEngine(str(tmp_path / missing), readonly=True)
        assert str(ei.value) == f"{tmp_path / missing}: not a tplog store (tables missing)"


def test_a_damaged_file_is_a_corruption_error_on_open(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "data.mdb").write_bytes(b"\x00" * 3 + b"not an LMDB file" * 1024)
    for readonly in (False, True):
        with pytest.raises(CorruptionError) as ei:
            LmdbEngine(str(tmp_path / "s"), readonly=readonly)
        assert str(ei.value).startswith(f"{tmp_path / 's'}: the store's LMDB file is damaged or not an LMDB file (")


# --------------------------------------------------------------------------- writer.lck and reader slots


def test_writer_lck_that_cannot_be_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s"
    LmdbEngine(str(path)).close()
    os.unlink(path / "writer.lck")
    os.mkdir(path / "writer.lck")  # EISDIR: a real failure, reported
    with pytest.raises(StorageError) as ei:
        LmdbEngine(str(path))
    assert str(ei.value) == (f"{path}: cannot open writer.lck: [Errno {errno.EISDIR}] Is a directory: "
                             f"'{path / 'writer.lck'}'")
    os.rmdir(path / "writer.lck")
    real_open = os.open

    def open_(name: Any, flags: int, mode: int = 0o777, **kw: Any) -> int:
        if str(name).endswith("writer.lck"):  # a directory LMDB's files can be written in, not created in
            raise OSError(errno.EACCES, "Permission denied")
        return real_open(name, flags, mode, **kw)

    monkeypatch.setattr(engine_mod.os, "open", open_)
    e = LmdbEngine(str(path))  # writes on LMDB's lock alone
    try:
        assert e._wfd is None
        e.run_write(lambda txn: txn.put("meta", b"k", b"v"))
        with e.read() as txn:
            assert txn.get("meta", b"k") == b"v"
    finally:
        e.close()


_HOLD_WRITER_LCK = """
    import fcntl, os, sys
    fd = os.open(sys.argv[1], os.O_RDWR)
    fcntl.lockf(fd, fcntl.LOCK_EX)
    print("held", flush=True)
    sys.stdin.readline()
"""

_TRY_WRITER_LCK = """
    import fcntl, os, sys
    fd = os.open(sys.argv[1], os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        print("free")
    except OSError:
        print("held")
"""


def _writer_lck_state(path: Path) -> str:
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(_TRY_WRITER_LCK), str(path / "writer.lck")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_write_transactions_queue_on_writer_lck_and_release_it(tmp_path: Path) -> None:
    path = tmp_path / "s"
    e = LmdbEngine(str(path))
    try:
        assert _writer_lck_state(path) == "free"  # the open's table creation and reader_check released it
        e.run_write(lambda txn: txn.put("meta", b"a", b"1"))
        assert _writer_lck_state(path) == "free"

        def boom(txn: Any) -> None:
            raise KeyError("x")

        with pytest.raises(KeyError):
            e.run_write(boom)
        assert _writer_lck_state(path) == "free"  # a failed transaction releases it too
        holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(_HOLD_WRITER_LCK), str(path / "writer.lck")],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
            t = threading.Thread(target=lambda: e.run_write(lambda txn: txn.put("meta", b"b", b"2")))
            t.start()
            t.join(0.5)
            assert t.is_alive()  # queued behind the other process
            with e.read() as txn:  # readers are not held off
                assert txn.get("meta", b"b") is None and txn.get("meta", b"a") == b"1"
            assert holder.stdin is not None
            holder.stdin.write("\n")
            holder.stdin.flush()
            t.join(30)
            assert not t.is_alive()
        finally:
            holder.kill()
            holder.wait()
        with e.read() as txn:
            assert txn.get("meta", b"b") == b"2"
    finally:
        e.close()


_READER = """
    import sys, time, lmdb
    env = lmdb.open(sys.argv[1], readonly=True, max_dbs=16)
    txn = None if sys.argv[2:] == ["idle"] else env.begin()
    print("holding", flush=True)
    time.sleep(60)
"""


@pytest.mark.parametrize("with_writer_lck", [True, False])
def test_opening_clears_the_reader_slots_of_killed_processes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             request: pytest.FixtureRequest,
                                                             with_writer_lck: bool) -> None:
    path = tmp_path / "s"
    LmdbEngine(str(path)).close()
    # A live process with the environment open (no transaction): LMDB resets the reader table when
    # its opener is alone, so without it the killed reader's slot would vanish whatever the engine does.
    keeper = subprocess.Popen([sys.executable, "-c", textwrap.dedent(_READER), str(path), "idle"],
                              stdout=subprocess.PIPE, text=True)
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(_READER), str(path)], stdout=subprocess.PIPE,
                         text=True)
    try:
        assert keeper.stdout is not None and keeper.stdout.readline().strip() == "holding"
        assert p.stdout is not None and p.stdout.readline().strip() == "holding"
    finally:
        p.kill()
        p.wait()
        if p.stdout is not None:
            p.stdout.close()
    request.addfinalizer(lambda: (keeper.kill(), keeper.wait(), keeper.stdout and keeper.stdout.close()))
    if not with_writer_lck:
        real_open = os.open

        def open_(name: Any, flags: int, mode: int = 0o777, **kw: Any) -> int:
            if str(name).endswith("writer.lck"):
                raise OSError(errno.EROFS, "Read-only file system")
            return real_open(name, flags, mode, **kw)

        monkeypatch.setattr(engine_mod.os, "open", open_)
    e = LmdbEngine(str(path))
    try:
        assert (e._wfd is None) is not with_writer_lck
        slots = [line.split()[0] for line in e._env.readers().splitlines()[1:]]
        assert str(p.pid) not in slots and str(keeper.pid) not in slots  # the keeper holds no transaction
    finally:
        e.close()


# --------------------------------------------------------------------------- errors inside transactions


def test_errors_inside_a_write_name_the_store(tmp_path: Path) -> None:
    e = LmdbEngine(str(tmp_path / "s"))
    try:
        def undecodable(txn: Any) -> None:
            msgspec.msgpack.decode(b"\xc1")

        with pytest.raises(CorruptionError) as ei:
            e.run_write(undecodable)
        assert str(ei.value) == (f"{e.path}: a stored row does not decode ({_DECODE_ERROR}); "
                                 "run `tplog verify`, or restore a backup")

        def damaged(txn: Any) -> None:
            raise lmdb.CorruptedError("mdb_get: MDB_CORRUPTED")

        with pytest.raises(CorruptionError) as ei:
            e.run_write(damaged)
        assert str(ei.value) == (f"{e.path}: the store's LMDB file is damaged or not an LMDB file "
                                 "(mdb_get: MDB_CORRUPTED); restore it from a backup")
        real = e._env

        class _Env:
            def __getattr__(self, attr: str) -> Any:
                if attr == "begin":
                    def begin(**kw: Any) -> Any:
                        raise lmdb.Error("mdb_txn_begin: Input/output error")
                    return begin
                return getattr(real, attr)

        e._env = _Env()  # type: ignore[assignment]
        try:
            with pytest.raises(StorageError) as ei:
                e.run_write(lambda txn: None)
        finally:
            e._env = real
        assert str(ei.value) == f"{e.path}: LMDB failed: mdb_txn_begin: Input/output error"
        e.run_write(lambda txn: txn.put("meta", b"k", b"v"))  # still works
    finally:
        e.close()
    r = LmdbEngine(str(tmp_path / "s"), readonly=True)
    try:
        with pytest.raises(ReadOnlyError) as ei2:
            r.run_write(lambda txn: None)
        assert str(ei2.value) == f"{r.path}: the store was opened read-only"
    finally:
        r.close()


def test_errors_inside_a_read_name_the_store(tmp_path: Path) -> None:
    e = LmdbEngine(str(tmp_path / "s"))
    try:
        with pytest.raises(CorruptionError) as ei, e.read():
            msgspec.msgpack.decode(b"\xc1")
        assert str(ei.value) == (f"{e.path}: a stored row does not decode ({_DECODE_ERROR}); "
                                 "run `tplog verify`, or restore a backup")
        with pytest.raises(CorruptionError) as ei, e.read():
            raise lmdb.PageNotFoundError("mdb_cursor_get: MDB_PAGE_NOTFOUND")
        assert str(ei.value) == (f"{e.path}: the store's LMDB file is damaged or not an LMDB file "
                                 "(mdb_cursor_get: MDB_PAGE_NOTFOUND); restore it from a backup")
        assert e._rw._readers == 0
    finally:
        e.close()


def test_writer_lck_that_cannot_be_locked_is_a_storage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    e = LmdbEngine(str(tmp_path / "s"))
    try:
        real_lockf = fcntl.lockf

        def lockf(fd: int, op: int, *a: Any) -> Any:
            if op == fcntl.LOCK_EX:  # EDEADLK / ENOLCK (a network file system without locks)
                raise OSError(errno.ENOLCK, "No locks available")
            return real_lockf(fd, op, *a)

        monkeypatch.setattr(engine_mod.fcntl, "lockf", lockf)
        with pytest.raises(StorageError) as ei:
            e.run_write(lambda txn: txn.put("meta", b"k", b"v"))
        assert str(ei.value) == f"{e.path}: cannot lock writer.lck: [Errno {errno.ENOLCK}] No locks available"
        monkeypatch.setattr(engine_mod.fcntl, "lockf", real_lockf)
        e.run_write(lambda txn: txn.put("meta", b"k", b"v"))  # nothing half-done is left behind
        with e.read() as txn:
            assert txn.get("meta", b"k") == b"v"
    finally:
        e.close()


# --------------------------------------------------------------------------- sharing, closing, fork


def test_closing_one_directory_s_engine_leaves_the_others_shared(tmp_path: Path) -> None:
    a, b = open_engine(str(tmp_path / "a")), open_engine(str(tmp_path / "b"))
    try:
        a.close()
        again = open_engine(str(tmp_path / "b"))  # still found: a second LMDB open of b would be refused
        assert again is b and b._users == 2
        again.close()
    finally:
        b.close()
    assert b._closed and a._closed


def test_open_engine_defaults_sharing_and_the_refusal_message(tmp_path: Path) -> None:
    path = tmp_path / "s"
    a = open_engine(str(path))
    try:
        assert (a.readonly, a.durability, a.max_map_size, a.info()["map_size"]) == (False, "durable", 1 << 40,
                                                                                     64 << 20)
        assert open_engine(str(path)) is a and a._users == 2
        with pytest.raises(InvalidInputError) as ei:
            open_engine(str(path), durability="relaxed")
        assert str(ei.value) == (f"{a.path}: already open in this process with readonly=False, durability='durable'; "
                                 "a second Store on it must use the same options (or close the first)")
        a.close()
        assert not a._closed and a._users == 1  # the other user keeps it open
        with a.read() as txn:
            assert txn.get("meta", b"x") is None
    finally:
        a.close()
    assert a._closed
    b = open_engine(str(path), map_size=1 << 20, max_map_size=1 << 22)
    try:
        assert b is not a and (b.info()["map_size"], b.max_map_size) == (1 << 20, 1 << 22)
    finally:
        b.close()
    a.close()  # a third close of a closed engine changes nothing
    assert a._closed


def test_a_closed_engine_says_so(tmp_path: Path) -> None:
    e = LmdbEngine(str(tmp_path / "s"))
    e.close()
    for call in (lambda: e.run_write(lambda txn: None), e.info, e.sync, lambda: e.try_lock("x"),
                 lambda: e.scan("meta", b"", b"\xff"), lambda: e.backup(str(tmp_path / "b"))):
        with pytest.raises(StoreClosedError) as ei:
            call()
        assert str(ei.value) == f"{e.path}: the store has been closed"
    assert not (tmp_path / "b").exists()


def test_a_forked_child_cannot_use_the_engine_and_its_close_leaves_the_parent_working(tmp_path: Path) -> None:
    e = LmdbEngine(str(tmp_path / "s"))
    try:
        e.run_write(lambda txn: txn.put("meta", b"k", b"v"))
        with e.read() as txn:
            assert txn.get("meta", b"k") == b"v"
        pid = os.fork()
        if pid == 0:  # the child: only os._exit, never back into pytest
            code = 0
            try:
                try:
                    with e.read():
                        code = 1
                except StoreClosedError as exc:
                    if str(exc) != (f"{e.path}: this store handle was opened in process {os.getppid()} and cannot be "
                                    "used after fork(); open the store again in the child process"):
                        code = 2
                e.close()  # must not close the parent's environment (its reader slots, its locks)
            except BaseException:
                code = 3
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0
        for i in range(3):
            e.run_write(lambda txn, i=i: txn.put("meta", bytes([i]), b"x"))
            with e.read() as txn:
                assert txn.get("meta", b"k") == b"v" and txn.get("meta", bytes([i])) == b"x"
        assert fcntl is not None
    finally:
        e.close()
