"""The projection rows an append batch writes on PostgreSQL (tplog/backends/postgres/fold.py),
against a real server: a spawn fact naming a deleted thread adds no child row; a thread a batch
loads but does not write (an append repeated with its stored event ids) keeps its head as it was.

Written for the surviving mutants of fold.py (tests/MUTANTS.md).
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "backends"))
from conftest import agent_start, spawn_message, started, user
from contract_helpers import append, encode, part, tombstone

from tplog.backends.contract import ThreadAppend
from tplog.backends.postgres import PostgresRecorder


def tid() -> str:
    return str(uuid.uuid4())


@pytest.mark.parametrize("logs", [1, 4])
def test_a_spawn_fact_naming_a_deleted_thread_adds_no_child(open_rec: Callable[..., PostgresRecorder],
                                                            logs: int) -> None:
    rec = open_rec(logs=logs)
    p, c, live = tid(), tid(), tid()
    append(rec, part(c, [started(c)]), part(live, [started(live)]))
    rec.delete_thread(c, tombstone()).result(timeout=30)
    append(rec, part(p, [started(p), user(), agent_start(), spawn_message(c), spawn_message(live)]))
    assert rec.children(p) == [live]
    assert rec.has_spawned(p)
    assert rec.verify().problems == []


def test_a_thread_loaded_but_not_written_keeps_its_head(open_rec: Callable[..., PostgresRecorder]) -> None:
    rec = open_rec()
    a, b = tid(), tid()
    ids = [str(uuid.uuid4()) for _ in range(2)]
    events = encode([started(b), user()], ids)
    append(rec, part(a, [started(a)]))
    [first] = append(rec, ThreadAppend(thread_id=b, events=events))
    append(rec, part(a, [user()]))  # b's last position is no longer the log's
    before = rec.head(b)
    assert before is not None and before.last_position == 3
    # one batch: a new event for a, and b's append again with its stored ids (answered, not written)
    res = append(rec, part(a, [user()]), ThreadAppend(thread_id=b, events=events))
    assert [(r.thread_id, r.first_seq, r.last_seq) for r in res] == [(a, 3, 3), (b, 1, 2)]
    assert res[1].first_position == first.first_position == 2
    assert rec.head(b) == before
    assert [e.position for e in rec.read_thread(b)] == [2, 3]
    assert rec.verify().problems == []
