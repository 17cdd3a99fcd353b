"""What a store and its backups create on disk is the owner's alone (directories 0700, files 0600) under
a normal umask, an existing store keeps its modes, and a backup goes only into a new or empty real
directory (LMDB and memory here; PostgreSQL: tests/postgres/test_pg_backup_dest.py)."""

from __future__ import annotations

import os
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import started, user

from tplog import Store
from tplog.backends.lmdb.live import open_live
from tplog.errors import StorageError


@pytest.fixture
def umask022() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


def private(root: Path) -> list[str]:
    """``root`` and everything under it that a group or other user may read, write or enter."""
    bad = []
    for p in [root, *root.rglob("*")]:
        mode = stat.S_IMODE(p.lstat().st_mode)
        want = 0o700 if p.is_dir() else 0o600
        if mode & 0o077 or mode != want:
            bad.append(f"{p.relative_to(root.parent)} {mode:o}")
    return bad


def _fill(s: Store) -> None:
    t = str(uuid.uuid4())
    s.append(t, [started(t), user()])


def test_a_new_lmdb_store_and_its_backup_are_private(tmp_path: Path, umask022: None) -> None:
    with Store(tmp_path / "store") as s:
        _fill(s)
        lock = s.backend.try_lock("prune")
        assert lock is not None
        open_live(str(tmp_path / "store"))  # the live stream table, a directory of its own
        s.backup(str(tmp_path / "bk"))
        lock.release()
    names = {p.name for p in (tmp_path / "store").rglob("*")}
    assert {"data.mdb", "lock.mdb", "writer.lck", "prune.lock", "live"} <= names
    assert private(tmp_path / "store") == []
    assert {p.name for p in (tmp_path / "bk").iterdir()} == {"data.mdb"}
    assert private(tmp_path / "bk") == []
    with Store(tmp_path / "bk", readonly=True) as b:  # still a store its owner opens
        assert b.stats()["threads"] == 1


def test_an_existing_store_keeps_its_modes(tmp_path: Path, umask022: None) -> None:
    with Store(tmp_path / "store") as s:
        _fill(s)
    (tmp_path / "store").chmod(0o750)
    for f in (tmp_path / "store").iterdir():
        f.chmod(0o640)
    with Store(tmp_path / "store") as s:
        _fill(s)
    assert stat.S_IMODE((tmp_path / "store").stat().st_mode) == 0o750
    assert {stat.S_IMODE(f.stat().st_mode) for f in (tmp_path / "store").iterdir()} == {0o640}


def test_a_memory_backup_is_private(tmp_path: Path, umask022: None) -> None:
    with Store("memory:") as s:
        _fill(s)
        s.backup(str(tmp_path / "deep" / "bk"))
    assert private(tmp_path / "deep" / "bk") == []
    with Store(f"memory:{tmp_path / 'deep' / 'bk'}") as back:
        assert back.stats()["threads"] == 1


@pytest.mark.parametrize("kind", ["lmdb", "memory"])
def test_a_backup_refuses_a_used_or_linked_destination(tmp_path: Path, kind: str) -> None:
    """Not over what is there, not through a link (the link's target stays as it was), as a typed error."""
    used, target, linked = tmp_path / "used", tmp_path / "target", tmp_path / "linked"
    used.mkdir()
    (used / "notes.txt").write_text("mine")
    target.mkdir()
    linked.symlink_to(target)
    (tmp_path / "file").write_text("mine")
    with Store(tmp_path / "store" if kind == "lmdb" else "memory:") as s:
        _fill(s)
        with pytest.raises(StorageError, match="not empty"):
            s.backup(str(used))
        with pytest.raises(StorageError, match="symbolic link"):
            s.backup(str(linked))
        with pytest.raises(StorageError, match="not a directory"):
            s.backup(str(tmp_path / "file"))
        with pytest.raises(StorageError, match=r"backup destination .*/file/under"):  # cannot be made
            s.backup(str(tmp_path / "file" / "under"))
        s.backup(str(tmp_path / "empty"))
        with pytest.raises(StorageError, match="not empty"):  # a second backup into the same one
            s.backup(str(tmp_path / "empty"))
    assert [p.name for p in used.iterdir()] == ["notes.txt"] and list(target.iterdir()) == []
    assert (tmp_path / "file").read_text() == "mine"
