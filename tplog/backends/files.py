"""What the backends create on disk is their owner's alone: directories 0700, files 0600, whatever
the umask (a store or a backup holds every conversation). And a backup goes only into a new or
empty real directory: never over what is there, never through a symbolic link.
"""

from __future__ import annotations

import os
from typing import Final

from tplog.errors import StorageError

__all__ = ["DIR_MODE", "FILE_MODE", "backup_dir", "create_file", "make_dir"]

DIR_MODE: Final = 0o700
FILE_MODE: Final = 0o600


def make_dir(path: str) -> bool:
    """Create the directory ``path`` (and its parents) if missing, 0700; whether it was made
    (an existing one keeps its mode: an existing store's are its owner's choice)."""
    if os.path.isdir(path):
        return False
    os.makedirs(path, DIR_MODE, exist_ok=True)  # the mode is the last one's (parents: the umask's)
    os.chmod(path, DIR_MODE)  # the umask may have taken bits off the owner's too
    return True


def backup_dir(dest: str) -> None:
    """Check (or create, 0700) ``dest`` as a backup destination: :class:`StorageError` for a
    symbolic link, a file, or a directory that is not empty."""
    if os.path.islink(dest):
        raise StorageError(f"backup destination {dest} is a symbolic link: back up into a new directory")
    if os.path.exists(dest) and not os.path.isdir(dest):
        raise StorageError(f"backup destination {dest} is a file, not a directory")
    try:
        if not make_dir(dest) and os.listdir(dest):
            raise StorageError(f"backup destination {dest} is not empty")
    except OSError as exc:  # under a file, a parent that cannot be made: said before anything is copied
        raise StorageError(f"cannot create the backup destination {dest}: {exc.strerror}") from exc


def create_file(path: str) -> int:
    """A new file ``path``, 0600, opened for writing (a descriptor); never an existing one or a link."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    os.fchmod(fd, FILE_MODE)
    return fd

