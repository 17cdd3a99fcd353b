"""Which backend a store path or URL names (:func:`open_backend`): ``memory:``, ``postgresql://``,
``lmdb://`` or a directory. LMDB, the default, is imported with it; the others when named."""

from __future__ import annotations

import os
from typing import Any, Final

from tplog.backends.contract import Recorder
from tplog.backends.lmdb import LmdbRecorder
from tplog.errors import InvalidInputError

__all__ = ["MEMORY", "open_backend"]

MEMORY: Final = "memory:"


def open_backend(target: str | os.PathLike[str], **options: Any) -> Recorder:
    """The backend a store path or URL names: ``"memory:"`` → the reference backend
    (``"memory:DIR"``: loaded from a memory store's backup in DIR), ``postgresql://…`` →
    PostgreSQL (``tplog[postgres]``), ``lmdb:///dir`` or a directory path → LMDB (options
    pass through). ``create=False`` (PostgreSQL): a missing schema is a ``SchemaError``, not created
    (reading never creates a store; an LMDB store opened read-only must exist too)."""
    create = options.pop("create", True)
    if isinstance(target, str) and target.startswith(MEMORY):
        from tplog.backends.memory import MemoryRecorder

        if options.get("readonly"):
            raise InvalidInputError("a memory: store cannot be opened read-only: it lives in this process only")
        source = target[len(MEMORY):]
        if source:  # memory:DIR: a copy of what a memory store's backup wrote into DIR
            return MemoryRecorder.restore(source, limits=options.get("limits"))
        return MemoryRecorder(limits=options.get("limits"))
    if isinstance(target, str) and target.startswith(("postgresql://", "postgres://")):
        if options.get("readonly"):
            raise InvalidInputError("a PostgreSQL store cannot be opened read-only (use a read-only role instead)")
        try:
            from tplog.backends.postgres import PostgresRecorder
        except ImportError as exc:
            raise InvalidInputError(f"{target.split('://')[0]}:// stores need psycopg: pip install 'tplog[postgres]'"
                                    f" ({exc})") from exc
        return PostgresRecorder(target, limits=options.get("limits"), create=create)
    path = os.fspath(target)
    if isinstance(path, str) and path.startswith("lmdb://"):
        path = path[len("lmdb://"):]
        if not path:
            raise InvalidInputError("an lmdb:// URL needs a directory: lmdb:///path/to/store")
    elif isinstance(path, str) and "://" in path:
        raise InvalidInputError(f"{path!r}: unknown store URL scheme (known: lmdb://, postgresql://, memory:)")
    return LmdbRecorder(path, **options)
