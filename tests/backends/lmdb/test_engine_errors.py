"""How the LMDB engine names py-lmdb's errors: each cause its own typed error, naming the store.

The errors are py-lmdb's own classes, built as py-lmdb builds them (its ``code`` attribute holds
the errno; a bare ``lmdb.Error`` of py-lmdb < 1.5 had only the message), because most of these
(a full or read-only disk mid-write, a damaged page) cannot be made to happen on demand.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections import namedtuple
from pathlib import Path
from typing import Any

import lmdb
import pytest

from tplog.backends.lmdb import failures as failures_mod
from tplog.backends.lmdb.failures import disk_nearly_full as _disk_nearly_full
from tplog.backends.lmdb.failures import errno_of as _errno_of
from tplog.backends.lmdb.failures import translate as _translate
from tplog.errors import CorruptionError, ReadOnlyError, StorageError, StorageFullError

P = "/stores/s"
_Usage = namedtuple("_Usage", "total used free")


def _err(cls: type[lmdb.Error], text: str, *, code: int | None = None, errno_: int | None = None) -> lmdb.Error:
    exc = cls(text)
    if code is not None:
        exc.code = code  # type: ignore[attr-defined]
    if errno_ is not None:
        exc.errno = errno_  # type: ignore[attr-defined]
    return exc


@pytest.mark.parametrize("cls", [lmdb.CorruptedError, lmdb.PageNotFoundError, lmdb.InvalidError,
                                 lmdb.VersionMismatchError, lmdb.IncompatibleError, lmdb.BadTxnError])
def test_damage_is_a_corruption_error(cls: type[lmdb.Error]) -> None:
    got = _translate(_err(cls, "mdb_x: broken", code=errno.EROFS), P)  # damage wins over any errno
    assert type(got) is CorruptionError
    assert str(got) == (f"{P}: the store's LMDB file is damaged or not an LMDB file (mdb_x: broken); "
                        "restore it from a backup")


_RO = f"{P}: the store or its disk is read-only ({{}}); open it with readonly=True, or on a writable disk"


@pytest.mark.parametrize("exc", [
    _err(lmdb.ReadonlyError, "mdb_put: no errno"),
    _err(lmdb.Error, "mdb_put: code", code=errno.EROFS),
    _err(lmdb.Error, "mdb_put: code", code=errno.EACCES),
    _err(lmdb.Error, "mdb_put: errno", errno_=errno.EROFS),
    _err(lmdb.Error, "mdb_put: errno", errno_=errno.EACCES),
    _err(lmdb.Error, "mdb_put: errno only", errno_=errno.EACCES, code=errno.EIO),  # errno is read first
    _err(lmdb.Error, f"mdb_put: {os.strerror(errno.EROFS)}"),  # py-lmdb < 1.5: the text alone
    _err(lmdb.Error, f"mdb_put: {os.strerror(errno.EACCES)}"),
])
def test_a_read_only_store_or_disk(exc: lmdb.Error) -> None:
    got = _translate(exc, P)
    assert type(got) is ReadOnlyError and str(got) == _RO.format(exc)


_FULL = f"[Errno {errno.ENOSPC}] {P}: the disk is full; free space, nothing was written ({{}})"


@pytest.mark.parametrize("exc", [
    _err(lmdb.Error, "mdb_txn_commit: code", code=errno.ENOSPC),
    _err(lmdb.Error, "mdb_txn_commit: errno", errno_=errno.ENOSPC),
    _err(lmdb.Error, "mdb_txn_commit: No space left on device"),
])
def test_a_full_disk(exc: lmdb.Error) -> None:
    got = _translate(exc, P)
    assert type(got) is StorageFullError and got.errno == errno.ENOSPC and str(got) == _FULL.format(exc)


def test_an_io_error_is_a_full_disk_only_when_the_disk_is_nearly_full(monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOSPC often surfaces as EIO from a write-back of mapped pages: judged by the free space left."""
    asked: list[str] = []
    free = 0

    def disk_usage(path: str) -> Any:
        asked.append(path)
        return _Usage(1 << 30, (1 << 30) - free, free)

    monkeypatch.setattr(failures_mod.shutil, "disk_usage", disk_usage)
    exc = _err(lmdb.Error, "mdb_txn_commit: Input/output error", code=errno.EIO)
    for free, kind in (((1 << 20) - 1, StorageFullError), (1 << 20, StorageError), (3 << 19, StorageError)):
        got = _translate(exc, P)
        assert type(got) is kind, free
        assert asked[-1] == P
    assert str(got) == f"{P}: LMDB failed: mdb_txn_commit: Input/output error"
    asked.clear()
    assert type(_translate(_err(lmdb.Error, "mdb_txn_commit: other", code=errno.EINVAL), P)) is StorageError
    assert asked == []  # the free space is looked at for EIO only


def test_disk_nearly_full_is_under_one_mib_free(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _disk_nearly_full(str(tmp_path)) is (shutil.disk_usage(tmp_path).free < 1 << 20)
    assert _disk_nearly_full(str(tmp_path / "missing")) is False  # cannot tell: not full
    usage: dict[str, int] = {}
    monkeypatch.setattr(failures_mod.shutil, "disk_usage", lambda p: _Usage(1 << 30, 0, usage[p]))
    for free, full in (((1 << 20) - 1, True), (1 << 20, False), ((1 << 21) - 1, False), (0, True)):
        usage[str(tmp_path)] = free
        assert _disk_nearly_full(str(tmp_path)) is full, free


def test_anything_else_is_a_storage_error_naming_the_store() -> None:
    for exc in (_err(lmdb.Error, "mdb_x: what"), _err(lmdb.MapFullError, "mdb_put: MDB_MAP_FULL"),
                _err(lmdb.Error, "mdb_x: code", code=errno.EINVAL)):
        got = _translate(exc, P)
        assert type(got) is StorageError and str(got) == f"{P}: LMDB failed: {exc}"


@pytest.mark.parametrize(("exc", "want"), [
    (_err(lmdb.Error, "x", code=errno.EACCES), errno.EACCES),
    (_err(lmdb.Error, "x", code=errno.ENOENT), errno.ENOENT),
    (_err(lmdb.Error, "x", errno_=errno.EROFS), errno.EROFS),
    (_err(lmdb.Error, "x", errno_=errno.EPERM, code=errno.ENOENT), errno.EPERM),  # errno first
    (_err(lmdb.Error, "x", errno_=0, code=errno.ENOENT), errno.ENOENT),  # errno 0: none
    (_err(lmdb.Error, f"/s: {os.strerror(errno.EACCES)}"), errno.EACCES),  # py-lmdb < 1.5: text only
    (_err(lmdb.Error, f"/s: {os.strerror(errno.EROFS)}"), errno.EROFS),
    (_err(lmdb.Error, f"/s: {os.strerror(errno.EROFS)}, {os.strerror(errno.EACCES)}"), errno.EACCES),
    (_err(lmdb.Error, "/s: something else"), None),
])
def test_the_errno_of_an_lmdb_error(exc: lmdb.Error, want: int | None) -> None:
    assert _errno_of(exc) == want


def test_a_real_py_lmdb_error_carries_its_errno_in_code(tmp_path: Path) -> None:
    """What the tests above build by hand, py-lmdb does (3.x): ``code`` holds the errno."""
    with pytest.raises(lmdb.Error) as ei:
        lmdb.open(str(tmp_path / "missing"), readonly=True)
    assert _errno_of(ei.value) == errno.ENOENT
    assert type(_translate(ei.value, P)) is StorageError
    env = lmdb.open(str(tmp_path / "s"))
    env.close()
    ro = lmdb.open(str(tmp_path / "s"), readonly=True)
    try:
        with pytest.raises(lmdb.ReadonlyError) as ri:
            ro.begin(write=True)
        assert _errno_of(ri.value) == errno.EACCES and type(_translate(ri.value, P)) is ReadOnlyError
    finally:
        ro.close()
