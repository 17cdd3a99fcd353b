"""Faults of the machine under the store: a full disk, a read-only filesystem, a read-only store,
stale reader slots left by a killed reader, the map grown by another process while opening.

Each scenario checks that the error is clear and typed and that nothing acknowledged is lost.
The disk-full test mounts a 2 MB tmpfs when it can (root); otherwise it runs in a subprocess
under RLIMIT_FSIZE. The read-only-filesystem test uses a read-only bind mount when it can (root);
the unwritable-directory test runs on every runner, as a non-root process (``nobody`` when the
tests run as root, the runner's own user otherwise).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ToyStore as Store
from conftest import link, snapshot, started, user

from tplog import TplogError
from tplog.errors import ReadOnlyError, StorageError, StorageFullError

TESTS = Path(__file__).resolve().parent
ENV = {**os.environ, "PYTHONPATH": str(TESTS.parent) + os.pathsep + str(TESTS)}


def _run(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          timeout=timeout, env=ENV)


@contextlib.contextmanager
def _mount(*cmd: str) -> Iterator[bool]:
    """Run a mount command; yield whether it worked; unmount afterwards."""
    if os.geteuid() != 0 or sys.platform != "linux":
        yield False
        return
    r = subprocess.run(["mount", *cmd], capture_output=True)
    try:
        yield r.returncode == 0
    finally:
        if r.returncode == 0:
            subprocess.run(["umount", "-l", cmd[-1]], capture_output=True)


def _fill(s: Store, tid: str, acked: list[tuple[str, list[str]]], limit: int = 2000) -> BaseException:
    """Append until the store refuses; returns the error. ``acked`` gets every acknowledged append."""
    rng = random.Random(7)  # the same sizes every run, so the disk fills up at the same write
    for i in range(limit):
        ids = [f"{tid}-{i}-a", f"{tid}-{i}-b"]
        try:
            s.append(tid, [user(rng.randbytes(900).hex()), user(str(i))], event_ids=ids)
        except TplogError as exc:
            return exc
        acked.append((tid, ids))
    raise AssertionError("the disk never filled")


def _check_acked(s: Store, acked: list[tuple[str, list[str]]]) -> None:
    have = {e.event_id for e in s.read_all()}
    missing = [i for _, ids in acked for i in ids if i not in have]
    assert missing == [], f"{len(missing)} acknowledged events lost"
    for tid in {t for t, _ in acked}:
        evs = s.read(tid)
        assert [e.seq for e in evs] == list(range(1, len(evs) + 1))
        assert s.head(tid).version == len(evs)


# --------------------------------------------------------------------------- disk full


def test_disk_full_on_a_small_tmpfs(tmp_path: Path) -> None:
    mnt = tmp_path / "small"
    mnt.mkdir()
    with _mount("-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)) as ok:
        if not ok:
            pytest.skip("cannot mount tmpfs here (the RLIMIT_FSIZE test covers disk full)")
        filler = mnt / "filler"
        filler.write_bytes(b"\0" * (256 << 10))  # freed later, to show the store recovers
        acked: list[tuple[str, list[str]]] = []
        with Store(mnt / "s", map_size=1 << 20, auto_dictionary=0) as s:
            s.append("t", [started("t")], event_ids=["t-start"])
            acked.append(("t", ["t-start"]))
            err = _fill(s, "t", acked)
            before = snapshot(s)
            with pytest.raises(TplogError) as again:  # still full: still refused, still nothing written
                s.append("t", [user(os.urandom(4000).hex())])
            assert snapshot(s) == before
            _check_acked(s, acked)
            filler.unlink()
            r = s.append("t", [user("after")], event_ids=["after"])  # space again: it works again
            acked.append(("t", ["after"]))
            assert r.last_position == before["last_position"] + 1
        with Store(mnt / "s", readonly=True) as s:  # reopened: everything acknowledged is there
            _check_acked(s, acked)
    # LMDB reports a full disk as EIO when a page write comes up short: it must still read as "disk full"
    assert isinstance(err, StorageFullError), repr(err)
    assert isinstance(again.value, StorageFullError), repr(again.value)
    assert "disk is full" in str(err)


_FSIZE = """
    import os, resource, signal, sys
    from conftest import started, user
    from tplog import StorageError, StorageFullError, TplogError
    from conftest import ToyStore as Store
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # over the limit: write() fails with EFBIG
    path = sys.argv[1]
    with Store(path, map_size=1 << 20, auto_dictionary=0) as s:
        s.append("t", [started("t")], event_ids=["t-start"])
    limit = os.path.getsize(os.path.join(path, "data.mdb")) + (200 << 10)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    acked = ["t-start"]
    with Store(path, map_size=1 << 20, auto_dictionary=0) as s:
        for i in range(5000):
            try:
                s.append("t", [user(os.urandom(900).hex())], event_ids=[f"e{i}"])
            except TplogError as exc:
                print("ERROR", type(exc).__name__, exc)
                break
            acked.append(f"e{i}")
        else:
            print("NEVER FULL")
    print("ACKED", " ".join(acked))
"""


def test_disk_full_by_rlimit_fsize(tmp_path: Path) -> None:
    r = _run(_FSIZE, str(tmp_path / "s"))
    assert r.returncode == 0, r.stderr
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines())
    assert "ERROR" in lines, r.stdout
    kind = lines["ERROR"].split(" ", 1)[0]
    assert kind in ("StorageFullError", "StorageError"), lines["ERROR"]  # EFBIG: the file may not grow
    acked = lines["ACKED"].split()
    with Store(tmp_path / "s") as s:
        assert [e.event_id for e in s.read("t")] == acked  # every acknowledged event, nothing more
        s.append("t", [user("after")])  # without the limit it works again


# --------------------------------------------------------------------------- read-only


def _make_store(path: Path) -> dict[str, Any]:
    with Store(path) as s:
        s.append("t", [started("t"), user("one"), link("u")])
        return snapshot(s)


def test_read_only_bind_mount(tmp_path: Path) -> None:
    src, ro = tmp_path / "src", tmp_path / "ro"
    before = _make_store(src / "s")
    ro.mkdir()
    with _mount("--bind", str(src), str(ro)) as ok:
        if not ok or subprocess.run(["mount", "-o", "remount,ro,bind", str(ro)], capture_output=True).returncode:
            pytest.skip("cannot make a read-only bind mount here")
        with pytest.raises(ReadOnlyError, match="read-only"):
            Store(ro / "s")
        with pytest.raises(ReadOnlyError):
            Store(ro / "new")  # cannot even create one
        with Store(ro / "s", readonly=True) as s:  # reading a store on a read-only disk works
            assert snapshot(s) == before
    with Store(src / "s") as s:
        assert snapshot(s) == before


_NONROOT = """
    import os, sys, tempfile
    from tplog import ReadOnlyError, ThreadStarted, TplogError
    from tplog.store import Store as _Store
    def Store(path, **kw): return _Store(path, check_rules=False, **kw)  # toy ids, as ToyStore
    import tplog.protocol.canonical, tplog.cli, tplog.projections.fold  # all of it, before this uid may not read
    path, uid, gid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if os.geteuid() != uid:
        # Load what tplog and LMDB import lazily (py-lmdb 3 imports lmdb._envid at the first open)
        # while this process can still read it: the code may sit under a 0700 directory.
        with Store(os.path.join(tempfile.mkdtemp(), "s")) as s:
            s.append("w", [ThreadStarted(thread_id="w", created_at="2025-01-20T10:00:00Z")])
        with Store(os.path.join(s.path), readonly=True) as s:
            s.read("w")
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    print("uid:", os.getuid(), os.geteuid())
    print("sees:", " ".join(sorted(os.listdir(path))))  # it reaches the store: only writing is refused
    try:
        Store(path)
        print("rw: opened")
    except ReadOnlyError as exc:
        print("rw: ReadOnlyError")
    except BaseException as exc:
        print("rw:", type(exc).__name__, exc)
    try:
        with Store(path, readonly=True) as s:
            print("ro:", len(s.read("t")))
    except BaseException as exc:
        print("ro:", type(exc).__name__, exc)
    try:
        Store(os.path.join(path, "..", "new"))
        print("create: opened")
    except ReadOnlyError:
        print("create: ReadOnlyError")
    except BaseException as exc:
        print("create:", type(exc).__name__, exc)
"""


def _unprivileged_user() -> tuple[int, int]:
    """A non-root uid/gid: this process's own when it is not root; else ``nobody`` (created as
    ``tplog-ro`` where there is none)."""
    if os.geteuid() != 0:
        return os.getuid(), os.getgid()
    for name in ("nobody", "tplog-ro"):
        with contextlib.suppress(KeyError):
            pw = pwd.getpwnam(name)
            return pw.pw_uid, pw.pw_gid
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "tplog-ro"],
                   check=True, capture_output=True)
    pw = pwd.getpwnam("tplog-ro")
    return pw.pw_uid, pw.pw_gid


def _code_under_a_0700_directory(base: Path) -> dict[str, str]:
    """tplog and its core dependencies copied under a root-only (0700) directory, and an environment
    whose Python sees only them (``-S``: no site-packages): what a checkout under /root looks like
    to a process that dropped root (issue 23: lmdb 3 lazily imported ``lmdb._envid`` after the drop)."""
    import lmdb
    import msgspec
    import zstandard

    import tplog

    code = base / "private" / "code"
    code.mkdir(parents=True)
    (base / "private").chmod(0o700)
    for mod in (tplog, lmdb, msgspec, zstandard):
        src = Path(mod.__file__).parent  # type: ignore[arg-type]
        shutil.copytree(src, code / src.name, ignore=shutil.ignore_patterns("__pycache__"))
    return {**os.environ, "PYTHONPATH": str(code)}


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
@pytest.mark.parametrize("code", ["checkout", "under_0700"])
def test_read_only_directory_for_a_non_root_user(tmp_path: Path, code: str) -> None:
    """A non-root process (``nobody`` when the tests run as root, which owns nothing here; the
    runner's own user otherwise) on a store in a directory it cannot write: opening it for writing
    and creating a store next to it are ReadOnlyError; nothing changes."""
    uid, gid = _unprivileged_user()
    if code == "under_0700" and os.geteuid() != 0:
        pytest.skip("only a process started as root drops to another uid (the code's location matters then)")
    base = Path(tempfile.mkdtemp(prefix="tplog-ro-"))  # not under tmp_path: pytest's base is 0700
    try:
        base.chmod(0o755)
        before = _make_store(base / "s")
        for p in (base, base / "s"):
            p.chmod(0o555)
        for f in (base / "s").iterdir():
            f.chmod(0o444)
        if os.geteuid() == 0:  # the store belongs to root: the user writes nothing it owns
            assert all(p.stat().st_uid != uid for p in (base, *base.rglob("*")))
        env = ENV if code == "checkout" else _code_under_a_0700_directory(tmp_path)
        argv = [sys.executable, *(["-S"] if code == "under_0700" else []), "-c", textwrap.dedent(_NONROOT),
                str(base / "s"), str(uid), str(gid)]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
        out = dict(line.split(": ", 1) for line in r.stdout.splitlines())
        assert out.get("uid") == f"{uid} {uid}" and uid != 0, r.stdout + r.stderr
        assert out.get("sees") == "data.mdb lock.mdb writer.lck", r.stdout + r.stderr
        assert out.get("rw") == "ReadOnlyError", r.stdout + r.stderr
        assert out.get("create") == "ReadOnlyError", r.stdout + r.stderr
        # LMDB opens lock.mdb for writing even read-only (it falls back to no lock only on EROFS): without
        # write permission a read-only open fails, with a typed error that names the lock file
        assert out.get("ro") == "3" or (out.get("ro", "").startswith("ReadOnlyError")
                                        and "lock.mdb" in out["ro"]), r.stdout + r.stderr
        assert not (base / "new").exists()
        for p in (base, base / "s"):  # writable again, for a reader that is not root too (lock.mdb)
            p.chmod(0o755)
        for f in (base / "s").iterdir():
            f.chmod(0o644)
        with Store(base / "s", readonly=True) as s:
            assert snapshot(s) == before
    finally:
        for p in (base, base / "s"):
            with contextlib.suppress(OSError):
                p.chmod(0o755)
        shutil.rmtree(base, ignore_errors=True)


def test_store_opened_read_only(tmp_path: Path) -> None:
    before = _make_store(tmp_path / "s")
    with Store(tmp_path / "s", readonly=True) as s:
        with pytest.raises(ReadOnlyError):
            s.append("t", [user("no")])
        with pytest.raises(ReadOnlyError):
            s.append("new", [started("new")])
        with pytest.raises(ReadOnlyError):
            s.delete_thread("t")
        assert snapshot(s) == before
        s.backup(str(tmp_path / "copy"))  # a read-only handle can still back up
    with Store(tmp_path / "copy", readonly=True) as c:
        assert [e.event_id for e in c.read_all()] == [e[3] for e in before["events"]]
    with pytest.raises(StorageError):
        Store(tmp_path / "missing", readonly=True)  # read-only never creates a store
    assert not (tmp_path / "missing").exists()


# --------------------------------------------------------------------------- stale reader slots


_READER = """
    import sys, time
    from conftest import ToyStore as Store
    s = Store(sys.argv[1])
    with s.backend.engine.read() as txn:
        txn.get("heads", b"x" * 16)
        print("holding", flush=True)
        time.sleep(60)
"""


def _hold_a_read(path: Path) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(_READER), str(path)], stdout=subprocess.PIPE,
                         text=True, env=ENV)
    assert p.stdout is not None and p.stdout.readline().strip() == "holding"
    return p


def _kill(p: subprocess.Popen[str]) -> None:
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert p.stdout is not None
    p.stdout.close()


def _reader_pids(readers: str) -> set[int]:
    return {int(line.split()[0]) for line in readers.splitlines()[1:] if line.split()}


def test_stale_reader_slot_of_a_killed_reader(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with Store(path) as s:
        s.append("t", [started("t")])
    # A live process keeps the environment open throughout: the first process to open an environment
    # resets LMDB's reader table by itself, so without it the store's own reader_check on open would
    # go untested.
    keeper = _hold_a_read(path)
    try:
        procs = [_hold_a_read(path) for _ in range(3)]
        for p in procs:
            _kill(p)
        with Store(path) as s:  # opening clears the dead readers' slots (reader_check), not the live one's
            pids = _reader_pids(s.backend.engine._env.readers())
            assert keeper.pid in pids, pids
            assert not pids & {p.pid for p in procs}, pids
            for i in range(200):  # the store keeps working: appends reuse pages the dead readers pinned
                s.append("t", [user(os.urandom(400).hex())], event_ids=[f"e{i}"])
            assert len(s.read("t")) == 201
    finally:
        _kill(keeper)
    # a slot left while a store is already open is cleared by reader_check itself
    with Store(path) as s:
        p = _hold_a_read(path)
        _kill(p)
        assert p.pid in _reader_pids(s.backend.engine._env.readers())
        assert s.backend.engine._env.reader_check() >= 1
        assert p.pid not in _reader_pids(s.backend.engine._env.readers())
        s.append("t", [user("still fine")])
        assert len(s.read("t")) == 202


# --------------------------------------------------------------------------- the map grown by another process


_GROW = """
    import os, sys
    from conftest import user
    from conftest import ToyStore as Store
    with Store(sys.argv[1], map_size=256 << 10) as s:
        s.append("t", [user(os.urandom(1 << 20).hex())])   # incompressible: grows the map several times
        assert s.stats()["map_size"] >= 2 << 20, s.stats()["map_size"]
"""


def test_open_while_another_process_grows_the_map(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by the crash harness: a process opening the store between another process's map growth
    and its own first transaction gets MDB_MAP_RESIZED from the write transaction that opens the
    tables, surfaced as a StorageError instead of being adopted."""
    import tplog.backends.lmdb.engine as storage

    path = tmp_path / "s"
    with Store(path, map_size=256 << 10) as s:
        s.append("t", [started("t")])
    real_open = storage.lmdb.open

    def open_then_grow(*a: Any, **kw: Any) -> Any:
        env = real_open(*a, **kw)
        r = _run(_GROW, str(path))  # another process grows the map now
        assert r.returncode == 0, r.stderr
        return env

    monkeypatch.setattr(storage.lmdb, "open", open_then_grow)
    with Store(path, map_size=256 << 10) as s:
        monkeypatch.setattr(storage.lmdb, "open", real_open)
        assert len(s.read("t")) == 2
        s.append("t", [user("z")])


def test_lmdb_open_itself_meets_a_map_resize(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by the crash harness: py-lmdb's open begins a transaction of its own, which gets
    MDB_MAP_RESIZED when another process grew the map between LMDB reading the meta page and
    that transaction. The open is retried (it adopts the grown map), not failed."""
    import tplog.backends.lmdb.engine as storage

    path = tmp_path / "s"
    with Store(path, map_size=256 << 10) as s:
        s.append("t", [started("t")])
    real_open = storage.lmdb.open
    calls = 0

    def resized_once(*a: Any, **kw: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            r = _run(_GROW, str(path))  # another process grows the map now ...
            assert r.returncode == 0, r.stderr
            raise storage.lmdb.MapResizedError("mdb_txn_begin: MDB_MAP_RESIZED")  # ... as LMDB reports it
        return real_open(*a, **kw)

    monkeypatch.setattr(storage.lmdb, "open", resized_once)
    with Store(path, map_size=256 << 10) as s:
        monkeypatch.setattr(storage.lmdb, "open", real_open)
        assert calls == 2
        assert len(s.read("t")) == 2
        s.append("t", [user("z")])
        assert len(s.read("t")) == 3
