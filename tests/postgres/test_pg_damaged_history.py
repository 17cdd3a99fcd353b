"""A damaged stored event read on the PostgreSQL backend's less common paths, against a real
server: the rules' history of a checked append (recorder.py ``_history``) and a fork's parent
prefix read by a links rebuild's catch-up (reads.py ``_copy_events``) name the damaged event's
thread and seq, not the thread being appended or rebuilt.

Written for the missing tests the mutation runs of recorder.py and reads.py listed (tests/MUTANTS.md).
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "backends"))
from conftest import link, started, user
from contract_helpers import append, part
from protocol.documents import A1, _new_thread_events, ts
from test_backend_contract import fork_part

from tplog.backends.postgres import PostgresRecorder
from tplog.errors import CorruptionError
from tplog.events import AgentTurnStarted


def tid() -> str:
    return str(uuid.uuid4())


def damage(pg_dsn: str, schema: str, thread_id: str, seq: int) -> None:
    """Every bit of one byte of the stored value's body CRC flipped: its checksum no longer matches (setting
    the byte to 0xff left it unchanged in 1 run of 256)."""
    with psycopg.connect(pg_dsn, autocommit=True, options=f"-c search_path={schema}") as c:
        c.execute("UPDATE events e SET value = set_byte(value, length(value) - 3, "
                  "get_byte(value, length(value) - 3) # 255) "
                  "FROM heads h WHERE h.log_id = e.log_id AND h.scope = e.scope AND h.tk = e.tk "
                  "AND h.thread_id = %s AND e.seq = %s", (thread_id, seq))


def test_a_damaged_event_of_a_rules_history_is_named(open_rec: Callable[..., PostgresRecorder], pg_dsn: str,
                                                     schema: str) -> None:
    rec = open_rec()
    a = tid()
    append(rec, part(a, [*_new_thread_events(a), user("x" * 100)]))  # unchecked: no rules' values kept
    damage(pg_dsn, schema, a, 2)
    with pytest.raises(CorruptionError) as exc:  # the checked append folds the rules' values from the log
        append(rec, part(a, [AgentTurnStarted(agent_id=A1, started_at=ts(5))], check_rules=True))
    assert (exc.value.thread_id, exc.value.seq) == (a, 2)


def test_a_damaged_parent_event_read_by_a_rebuilds_catch_up_is_named(open_rec: Callable[..., PostgresRecorder],
                                                                     pg_dsn: str, schema: str) -> None:
    rec = open_rec()
    p, t = tid(), tid()
    append(rec, part(t, [started(t)]))
    append(rec, part(p, [started(p), user("x" * 100), link(t)]))
    forked: list[str] = []

    def progress(done: int, total: int) -> None:
        # after pass 1's snapshot: the parent's event is damaged and a fork of it appended, so only
        # pass 2, folding the fork's start, reads the damaged event (as the fork's inherited prefix)
        if not forked:
            damage(pg_dsn, schema, p, 2)
            f = tid()
            append(rec, fork_part(f, p, 3))
            forked.append(f)

    with pytest.raises(CorruptionError) as exc:
        rec.rebuild(["links"], chunk=1, progress=progress)
    assert forked
    assert (exc.value.thread_id, exc.value.seq) == (p, 2)
