"""LMDB's errors as tplog's: damage, a read-only store or disk, a full disk, anything else.

Kept apart from the engine (:mod:`tplog.backends.lmdb.engine`), which raises what these return
around every LMDB call; the rules of which error means what are here, with their tests
(tests/backends/lmdb/test_engine_errors.py).
"""

from __future__ import annotations

import errno
import os
import shutil

import lmdb
import msgspec

from tplog.errors import CorruptionError, ReadOnlyError, StorageError, StorageFullError, TplogError

__all__ = ["disk_nearly_full", "errno_of", "translate", "undecodable"]


def disk_nearly_full(path: str) -> bool:
    try:
        return shutil.disk_usage(path).free < 1 << 20
    except OSError:  # pragma: no cover
        return False


# LMDB's errors for a file it cannot trust; MDB_BAD_TXN is what a transaction answers after one of them.
_DAMAGE = (lmdb.CorruptedError, lmdb.PageNotFoundError, lmdb.InvalidError, lmdb.VersionMismatchError,
           lmdb.IncompatibleError, lmdb.BadTxnError)


def undecodable(exc: msgspec.DecodeError, path: str) -> CorruptionError:
    return CorruptionError(f"{path}: a stored row does not decode ({exc}); run `tplog verify`, or restore a backup")


def errno_of(exc: lmdb.Error) -> int | None:
    """The errno of an LMDB error: py-lmdb keeps it in ``.code``; before 1.5 it raised a bare
    ``lmdb.Error`` for EROFS/EACCES without it, so match the message's strerror then."""
    code = getattr(exc, "errno", None) or getattr(exc, "code", None)
    if isinstance(code, int):
        return code
    text = str(exc)
    return next((e for e in (errno.EACCES, errno.EROFS) if os.strerror(e) in text), None)


def translate(exc: lmdb.Error, path: str) -> TplogError:
    if isinstance(exc, _DAMAGE):
        return CorruptionError(f"{path}: the store's LMDB file is damaged or not an LMDB file ({exc}); "
                               "restore it from a backup")
    code = getattr(exc, "errno", None) or getattr(exc, "code", None)  # py-lmdb keeps the errno in .code
    # py-lmdb < 1.5 raises a bare lmdb.Error for EROFS/EACCES, without the errno: match its text
    text = str(exc)
    if isinstance(exc, lmdb.ReadonlyError) or code in (errno.EROFS, errno.EACCES) or any(
        os.strerror(e) in text for e in (errno.EROFS, errno.EACCES)
    ):
        return ReadOnlyError(f"{path}: the store or its disk is read-only ({exc}); open it with readonly=True, "
                             "or on a writable disk")
    if code == errno.ENOSPC or "No space left" in str(exc) or (code == errno.EIO and disk_nearly_full(path)):
        return StorageFullError(errno.ENOSPC, f"{path}: the disk is full; free space, nothing was written ({exc})")
    return StorageError(f"{path}: LMDB failed: {exc}")
