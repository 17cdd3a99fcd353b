"""The PostgreSQL rebuild's catch-up (tplog/backends/postgres/rebuild.py), against a real server: a
thread deleted while pass 1 folds the snapshot (the deletion commits between the passes, through the
progress callback) leaves none of its link, children or state rows behind once pass 2 has folded its
tombstone, exactly as the live rows of a recorder that never rebuilt.

Written for the surviving mutants of rebuild.py's ``_Fold.forget`` (tests/MUTANTS.md).
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "backends"))
from conftest import agent_start, link, spawn_message, started, user
from contract_helpers import append, part, tombstone

from tplog.backends.postgres import PostgresRecorder
from tplog.errors import CorruptionError
from tplog.protocol import model as m


def tid() -> str:
    return str(uuid.uuid4())


def child_of(parent: str) -> m.ThreadRelationships:
    return m.ThreadRelationships(links=[m.ThreadLink(thread_id=parent, relation="spawned_from")])


def rows(pg_dsn: str, schema: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(pg_dsn, autocommit=True, options=f"-c search_path={schema}") as c:
        return {t: sorted(c.execute(f"SELECT * FROM {t}".encode()).fetchall()) for t in ("links", "children", "states")}


@pytest.mark.parametrize("logs", [1, 4])
def test_a_thread_deleted_between_the_passes_leaves_no_projection_rows(
        open_rec: Callable[..., PostgresRecorder], pg_dsn: str, schema: str, logs: int) -> None:
    rec = open_rec(logs=logs)
    p, c, g, h, t = tid(), tid(), tid(), tid(), tid()
    append(rec, part(t, [started(t)]))
    append(rec, part(p, [started(p), user(), agent_start(), spawn_message(c)]))
    # c: spawned from p (a link row in p's log, a children row flagged 1|2), links to t, spawns g
    # (who declares it: flags 1|2) and h (who does not: flag 2 alone)
    append(rec, part(c, [started(c, relationships=child_of(p)), user(), link(t), agent_start(),
                                         spawn_message(g), spawn_message(h)]))
    append(rec, part(g, [started(g, relationships=child_of(c))]))
    append(rec, part(h, [started(h)]))
    assert sorted(rec.incoming(t)) == [(c, "referenced")]
    assert sorted(rec.children(c)) == sorted([g, h])
    deleted: list[Any] = []

    def progress(done: int, total: int) -> None:
        if not deleted:  # pass 1 has folded c's events from its snapshot: c goes now
            deleted.append(rec.delete_thread(c, tombstone("gone")).result(timeout=30))

    [links, state] = rec.rebuild(["links", "state"], chunk=1, progress=progress)
    assert deleted and deleted[0].thread_id == c
    assert links.events == state.events == 13 + 1  # pass 1's thirteen, the tombstone in pass 2
    # What the recorder's own deletion left is what the rebuild swapped in: a rebuild without the
    # deletion in between (verify folds the log as it is now) finds no difference.
    live = rows(pg_dsn, schema)
    assert [r.differences for r in rec.rebuild(["links", "state"], verify=True)] == [[], []]
    assert rec.incoming(t) == []
    assert rec.children(p) == []
    assert rec.children(g) == rec.children(h) == []
    assert rec.descendants(p) == []
    # no row holds c's state, or names c as a link's source or a child's parent by its spawn facts
    assert len(live["states"]) == 1  # p's open agent turn (c's, open too, went with it)
    assert [(r[4], r[5]) for r in live["children"]] == [(g, 1)]  # g still declares c its parent
    rec.rebuild(["links", "state"])
    assert rows(pg_dsn, schema) == live


def test_a_damaged_event_folded_by_a_rebuild_is_named(open_rec: Callable[..., PostgresRecorder], pg_dsn: str,
                                                      schema: str) -> None:
    rec = open_rec()
    a, t = tid(), tid()
    append(rec, part(t, [started(t)]), part(a, [started(a), user("x" * 100), link(t)]))
    with psycopg.connect(pg_dsn, autocommit=True, options=f"-c search_path={schema}") as c:
        c.execute("UPDATE events SET value = set_byte(value, length(value) - 3, "
                  "get_byte(value, length(value) - 3) # 255) "
                  "WHERE seq = 2")
    for verify in (False, True):
        with pytest.raises(CorruptionError) as exc:
            rec.rebuild(["links"], verify=verify)
        assert (exc.value.thread_id, exc.value.seq) == (a, 2)


def test_a_rebuild_in_chunks_of_one_without_progress(open_rec: Callable[..., PostgresRecorder]) -> None:
    rec = open_rec()
    a, t = tid(), tid()
    append(rec, part(t, [started(t)]), part(a, [started(a), link(t)]))
    calls: list[tuple[int, int]] = []
    [report] = rec.rebuild(["links"], chunk=1)
    assert report.events == 3 and report.differences == []
    [report] = rec.rebuild(["links"], chunk=2, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(2, 3), (3, 3)]  # every second event, then the end
    calls.clear()
    rec.rebuild(["links"], chunk=1, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(1, 3), (2, 3), (3, 3), (3, 3)]  # every event, then the end
    assert rec.incoming(t) == [(a, "referenced")]


@pytest.mark.parametrize("verify", [False, True])
def test_a_rebuilds_reports_and_progress(open_rec: Callable[..., PostgresRecorder], verify: bool) -> None:
    rec = open_rec(logs=2)
    a, t = tid(), tid()
    append(rec, part(t, [started(t)]), part(a, [started(a), link(t), user()]))
    positions = list(rec.positions())
    calls: list[tuple[int, int]] = []
    reports = rec.rebuild(["state", "links"], verify=verify, chunk=3,
                          progress=lambda done, total: calls.append((done, total)))
    assert calls == [(3, 4), (4, 4)]  # after the third event, then the end
    assert [(r.projection, r.verify, r.events, r.position, r.differences) for r in reports] == [
        ("state", verify, 4, sum(positions), []), ("links", verify, 4, sum(positions), [])]
    assert all(0 <= r.seconds < 60 for r in reports)
