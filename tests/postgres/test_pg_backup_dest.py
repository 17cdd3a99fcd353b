"""PostgreSQL's backup goes only into a new or empty real directory, and its files are the owner's alone
(0600 in a 0700 directory) under a normal umask, as LMDB's (tests/test_file_modes.py)."""

from __future__ import annotations

import os
import stat
import uuid
from pathlib import Path

import pytest
from conftest import started, user

from tplog import Store
from tplog.errors import StorageError


def test_pg_backup_is_private_and_refuses_a_used_or_linked_destination(tmp_path: Path, pg_dsn: str,
                                                                        schema: str) -> None:
    used, target, linked = tmp_path / "used", tmp_path / "target", tmp_path / "linked"
    used.mkdir()
    (used / "notes.txt").write_text("mine")
    target.mkdir()
    linked.symlink_to(target)
    old = os.umask(0o022)
    try:
        with Store(f"{pg_dsn}?schema={schema}") as s:
            t = str(uuid.uuid4())
            s.append(t, [started(t), user()])
            s.backup(str(tmp_path / "bk"))
            with pytest.raises(StorageError, match="not empty"):
                s.backup(str(used))
            with pytest.raises(StorageError, match="symbolic link"):
                s.backup(str(linked))
            with pytest.raises(StorageError, match="not empty"):  # nothing overwritten
                s.backup(str(tmp_path / "bk"))
    finally:
        os.umask(old)
    files = list((tmp_path / "bk").iterdir())
    assert files and all(f.name.endswith(".copy") for f in files)
    assert stat.S_IMODE((tmp_path / "bk").stat().st_mode) == 0o700
    assert {stat.S_IMODE(f.stat().st_mode) for f in files} == {0o600}
    assert [p.name for p in used.iterdir()] == ["notes.txt"] and list(target.iterdir()) == []
