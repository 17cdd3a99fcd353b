"""Where a backup goes (:func:`backup_dir`): a directory, made if missing, whatever the backend."""

from __future__ import annotations

import os

from tplog.errors import InvalidInputError

__all__ = ["backup_dir"]


def backup_dir(dest: str | os.PathLike[str]) -> None:
    """Create the backup directory ``dest`` (and its parents) if missing. A path that cannot be
    one (a file, under a file, a parent that cannot be made) is an :class:`InvalidInputError`
    naming it, before anything is copied."""
    if os.path.exists(dest) and not os.path.isdir(dest):
        raise InvalidInputError(f"backup destination {os.fspath(dest)} is a file, not a directory")
    try:
        os.makedirs(dest, exist_ok=True)
    except OSError as exc:
        raise InvalidInputError(f"cannot create the backup destination {os.fspath(dest)}: {exc.strerror}") from exc
