"""One store opened twice in one process: both handles share one LMDB environment.

LMDB forbids a second open of an environment in a process (closing either copy drops
the other's locks; lmdb >= 3 refuses it outright), so Stores on one directory share it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import ToyStore as Store
from conftest import register, started, user

from tplog import InvalidInputError
from tplog.errors import StoreClosedError


def test_two_stores_on_one_directory_share_it(tmp_path: Path) -> None:
    a = Store(tmp_path / "s")
    b = Store(str(tmp_path / "s") + os.sep)  # another spelling of the same directory
    assert a.backend.engine is b.backend.engine
    a.append("t1", [started("t1"), register(), user("hi")])
    assert [e.seq for e in b.read("t1")] == [1, 2, 3]
    b.append("t1", [user("again")], expected_version=3)
    a.close()
    with pytest.raises(StoreClosedError):
        a.read("t1")
    assert b.head("t1").version == 4  # the other handle keeps working
    b.close()
    with Store(tmp_path / "s") as c:  # closed by both: a fresh open works
        assert c.backend.engine is not a.backend.engine
        assert c.head("t1").version == 4


def test_a_second_open_with_other_options_is_refused(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as a:
        a.append("t1", [started("t1")])
        for kw in ({"durability": "relaxed"}, {"readonly": True}):
            with pytest.raises(InvalidInputError, match="already open in this process"):
                Store(tmp_path / "s", **kw)
        assert a.head("t1").version == 1  # the refused open changed nothing
    with Store(tmp_path / "s", readonly=True) as r:  # once closed, other options are fine
        assert r.head("t1").version == 1
