"""``branches.current`` names the chat's newest branch, however many it has (a search over the
branch numbers, which are stored 1..k)."""

from __future__ import annotations

import uuid
from pathlib import Path

from conftest import exchange, register, started

from tplog import Store
from tplog.integrations import branches


def test_current_names_the_newest_of_each_count_of_branches(tmp_path: Path) -> None:
    root = str(uuid.uuid4())
    with Store(tmp_path / "store") as s:
        s.append(root, [started(root), register(), *exchange()])
        assert branches.current(s, root) == (root, 0)
        thread = root
        for k in range(6):  # 1, 2, 3 (the search's first odd case), ... branches
            thread = branches.branch(s, root, k, thread, 2, branches.REASON_EDIT)
            assert thread == branches.branch_id(root, k + 1)
            assert branches.current(s, root) == (thread, k + 1), f"{k + 1} branches"
