"""`tplog verify` (tplog.backends.lmdb.verify): the checks tests/test_rebuild.py does not reach,
each by one kind of damage to a real LMDB store and the exact problem list it gives.
Written to kill the surviving mutants of tests/MUTANTS.md (tplog/backends/lmdb/verify.py).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import ToyStore as Store
from conftest import user
from test_rebuild import start

from tplog.backends.lmdb.keys import tkey
from tplog.verify import verify_store


def _problems(s: Store, *, projections: bool = False) -> list[str]:
    return verify_store(s, projections=projections).problems


@pytest.mark.parametrize("parent_is", ["shorter", "deleted", "gone"])
def test_verify_names_a_fork_whose_parent_no_longer_holds_its_prefix(tmp_path: Path, parent_is: str) -> None:
    parent = str(uuid.uuid4())
    with Store(tmp_path / "s") as s:
        s.append(parent, [start(parent), user("one"), user("two"), user("three")])
        f = s.fork(parent, 3).thread_id
        s.append(f, [user("mine")])
        g = s.fork(parent, 4).thread_id  # a fork of the whole parent: sound when the parent has 4 seqs
        assert _problems(s, projections=True) == []
        head = s.head(parent)
        tk = tkey(parent)

        def edit(txn: Any) -> None:
            if parent_is == "gone":
                txn.delete("heads", tk)
            else:
                changed = {"version": 3} if parent_is == "shorter" else {"status": "deleted"}
                txn.put("heads", tk, msgspec.msgpack.encode(msgspec.structs.replace(head, **changed)))

        s.engine.run_write(edit)
        expected = {f"thread {g}: forked from {parent} at seq 4, which it does not hold"}
        if parent_is == "shorter":
            expected.add(f"thread {parent}: head version 3 but last seq 4")
        else:  # the parent no longer active: neither fork holds its prefix
            expected.add(f"thread {f}: forked from {parent} at seq 3, which it does not hold")
        problems = _problems(s)
        assert sorted(problems) == sorted(expected), problems
        assert len(problems) == len(expected)


def test_verify_counts_threads_events_and_blobs(tmp_path: Path) -> None:
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    with Store(tmp_path / "s") as s:
        s.append(a, [start(a), user("x" * 300_000)])  # a body this large is stored as a blob
        s.append(b, [start(b), user("x" * 300_000), user("short")])  # the same body: one blob, two refs
        rep = verify_store(s)
        assert (rep.threads, rep.events, rep.blobs, rep.problems, rep.skipped) == (2, 5, 1, [], [])
