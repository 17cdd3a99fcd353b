"""The PostgreSQL recorder's less travelled paths, against a real server: a deletion whose COMMIT
is lost (the retry finds its own tombstone), a scoped deletion, the rules' history of a scoped
thread and of a fork (its parent's prefix up to the fork point only), the constructor's refusals,
the lock-timeout error naming the threads.

Written for the surviving mutants of tplog/backends/postgres/recorder.py (tests/MUTANTS.md). All
in-process (the commit-losing proxy is a thread), so mutmut's mutants reach them.
"""

from __future__ import annotations

import os
import sys
import urllib.parse
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import psycopg
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "backends"))
from conftest import link, started, user
from contract_helpers import append, encode, part, tombstone
from protocol.documents import A1, _agent_turn, _new_thread_events, _user_answer, ts
from test_backend_contract import fork_part

from tplog.backends.contract import ThreadAppend
from tplog.backends.postgres import LockTimeoutError, PostgresRecorder
from tplog.errors import (
    HasForksError,
    IdempotencyError,
    InvalidEventError,
    InvalidInputError,
    NotFoundError,
    ThreadDeletedError,
)
from tplog.events import AgentTurnStarted, Event, UserTurnSubmitted
from tplog.protocol import model as m
from tplog.store import Store

from .proxy import CommitLosingProxy


def tid() -> str:
    return str(uuid.uuid4())


# --------------------------------------------------------------------------- deletions


@pytest.mark.parametrize("lose", ["request", "reply"])
def test_a_deletion_whose_commit_is_lost_is_stored_once_and_returns_its_tombstone(
        pg_dsn: str, schema: str, lose: str) -> None:
    """Lost before the server committed: the retry deletes. Lost after: the retry finds the thread
    deleted by this very tombstone and returns its result (not ThreadDeletedError)."""
    u = urllib.parse.urlsplit(pg_dsn)
    assert u.hostname is not None and u.port is not None
    proxy = CommitLosingProxy(u.hostname, u.port)
    rec = PostgresRecorder(urllib.parse.urlunsplit(u._replace(netloc=f"{u.username}@127.0.0.1:{proxy.port}")),
                           schema=schema)
    try:
        a, b = tid(), tid()
        append(rec, part(b, [started(b)]))
        append(rec, part(a, [started(a), user(), user()]))  # positions 2..4
        tomb = tombstone("gone")
        proxy.arm(lose)  # type: ignore[arg-type]
        res = rec.delete_thread(a, tomb).result(timeout=60)
        assert proxy.fired.is_set()
        assert (res.thread_id, res.first_seq, res.last_seq, res.first_position, res.last_position, res.event_ids) == (
            a, 4, 4, 5, 5, [tomb.event_id])
        head = rec.head(a)
        assert head is not None and (head.status, head.version, head.last_position) == ("deleted", 4, 5)
        assert [(e.thread_id, e.seq, e.position) for e in rec.read_log(0)] == [(b, 1, 1), (a, 4, 5)]
        # a later deletion (no lost commit) of the deleted thread is refused
        with pytest.raises(ThreadDeletedError, match=rf"^thread {a} is already deleted$"):
            rec.delete_thread(a, tombstone()).result(timeout=30)
    finally:
        rec.close()
        proxy.close()


def test_a_scoped_deletion_deletes_the_thread_of_that_scope_only(open_rec: Callable[..., PostgresRecorder]) -> None:
    rec = open_rec()
    a = tid()
    append(rec, part(a, [started(a), user()]), part(a, [started(a)], scope="s1"))
    tomb = tombstone()
    res = rec.delete_thread(a, tomb, scope="s1").result(timeout=30)
    assert (res.first_seq, res.first_position, res.event_ids) == (2, 4, [tomb.event_id])
    scoped, plain = rec.head(a, scope="s1"), rec.head(a)
    assert scoped is not None and (scoped.status, scoped.version) == ("deleted", 2)
    assert plain is not None and (plain.status, plain.version) == ("active", 2)
    assert [e.seq for e in rec.read_thread(a)] == [1, 2]
    with pytest.raises(ThreadDeletedError, match=rf"^thread {a} is already deleted$"):
        rec.delete_thread(a, tombstone(), scope="s1").result(timeout=30)


@pytest.mark.parametrize("logs", [1, 2])
def test_a_deletion_removes_its_link_rows_from_every_log(open_rec: Callable[..., PostgresRecorder], logs: int) -> None:
    """Link rows live in their target's log: the deleted source's rows go from each."""
    rec = open_rec(logs=logs)
    a = tid()
    targets = [tid() for _ in range(8)]
    while len({rec.log_of(t) for t in targets}) < logs:  # random ids: 8 fall in one log in 1 run of 128
        targets.append(tid())
    append(rec, part(a, [started(a), *(link(t) for t in targets)]))
    assert all(rec.incoming(t) == [(a, "referenced")] for t in targets)
    rec.delete_thread(a, tombstone()).result(timeout=30)
    for t in targets:  # no row names it any more: a thread nobody links to
        with pytest.raises(NotFoundError, match=rf"^thread {t} does not exist, and no stored thread links to it$"):
            rec.incoming(t)


def test_a_tombstone_that_is_no_thread_deleted_event_is_refused(open_rec: Callable[..., PostgresRecorder]) -> None:
    rec = open_rec()
    a = tid()
    append(rec, part(a, [started(a)]))
    with pytest.raises(InvalidInputError, match=rf"^thread {a}: a deletion's tombstone must be a ThreadDeleted event$"):
        rec.delete_thread(a, encode([user()])[0]).result(timeout=30)
    head = rec.head(a)
    assert head is not None and head.status == "active"


def test_a_scoped_parent_with_a_live_fork_is_not_deleted(open_rec: Callable[..., PostgresRecorder]) -> None:
    rec = open_rec()
    p, f = tid(), tid()
    append(rec, part(p, [started(p), user()], scope="s1"))
    append(rec, msgspec.structs.replace(fork_part(f, p, 2), scope="s1"))
    with pytest.raises(HasForksError) as exc:
        rec.delete_thread(p, tombstone(), scope="s1").result(timeout=30)
    assert str(exc.value) == (f"thread {p} has live forks that read its events: {[f]}; delete them first "
                              "(Store.delete_thread(..., cascade=True))")
    assert exc.value.forks == [f]
    head = rec.head(p, scope="s1")
    assert head is not None and head.status == "active"


def test_a_tombstone_reusing_a_stored_event_id_is_refused(open_rec: Callable[..., PostgresRecorder]) -> None:
    rec = open_rec()
    a, b = tid(), tid()
    append(rec, part(a, [started(a)], ids=["taken"]))
    append(rec, part(b, [started(b)]))
    tomb = msgspec.structs.replace(tombstone(), event_id="taken")
    with pytest.raises(IdempotencyError, match=r"^event id 'taken' is already stored$"):
        rec.delete_thread(b, tomb).result(timeout=30)
    head = rec.head(b)
    assert head is not None and head.status == "active"


# --------------------------------------------------------------------------- the rules' history


def _turn(at: int, call: str) -> list[Event]:
    """A complete agent turn (4 events) calling tool ``call`` and answering it (the call stays in the thread)."""
    return _agent_turn([call], [call], at=at)


def _refused(rec: PostgresRecorder, p: ThreadAppend) -> InvalidEventError:
    with pytest.raises(InvalidEventError) as exc:
        append(rec, p)
    return exc.value


def test_a_scoped_threads_rules_read_its_own_history(open_rec: Callable[..., PostgresRecorder]) -> None:
    """Written unchecked (the head keeps no rules' values), the scoped thread's next checked append
    folds them from its own events, not from the unscoped thread of the same id."""
    rec = open_rec()
    a = tid()
    append(rec, part(a, [*_new_thread_events(a), *_turn(10, "c1")], scope="s1"),
           part(a, [*_new_thread_events(a), *_turn(40, "c9")]))
    exc = _refused(rec, part(a, [_user_answer("c9", 50)], scope="s1", check_rules=True))
    assert (exc.rule, exc.thread_id, exc.seq, exc.path) == ("v3.2-tool-call-id", a, 7,
                                                            "$.turn.parts[0].tool_call_id")
    [res] = append(rec, part(a, [_user_answer("c1", 50)], scope="s1", check_rules=True))
    assert (res.first_seq, res.last_seq) == (7, 7)


@pytest.mark.parametrize("scope", [None, "s1"])
def test_a_forks_rules_read_its_parents_prefix_up_to_the_fork_point(pg_dsn: str, schema: str,
                                                                     scope: str | None) -> None:
    """A fork's history is its ThreadStarted, its parent's events 2..at, then its own: a tool call
    the parent made before the fork point is answerable in the fork, one made after it is not, and
    the fork's own calls are."""
    url = f"{pg_dsn}?schema={schema}"
    p = tid()
    with Store(url, check_rules=False) as opened:
        raw = opened if scope is None else opened.scoped(scope)
        raw.append(p, [*_new_thread_events(p), *_turn(10, "c1"), *_turn(20, "c2")])  # c1's turn ends at seq 6
        f = raw.fork(p, 6).thread_id
        raw.append(f, _turn(30, "c3"))  # the fork's own turn (unchecked: the rules' values are folded later)
    with Store(url) as opened:
        store = opened if scope is None else opened.scoped(scope)
        before = store.head(f).version
        with pytest.raises(InvalidEventError) as exc:
            store.append(f, [_user_answer("c2", 40)])
        assert (exc.value.rule, exc.value.thread_id, exc.value.seq, exc.value.path) == (
            "v3.2-tool-call-id", f, before + 1, "$.turn.parts[0].tool_call_id")
        assert store.head(f).version == before
        store.append(f, [_user_answer("c1", 40)])
        store.append(f, [_user_answer("c3", 41)])
        assert store.head(f).version == before + 2


def test_a_fork_of_a_forks_rules_read_the_prefix_through_both_parents(pg_dsn: str, schema: str) -> None:
    url = f"{pg_dsn}?schema={schema}"
    p = tid()
    with Store(url, check_rules=False) as raw:
        raw.append(p, [*_new_thread_events(p), *_turn(10, "c1"), *_turn(20, "c2")])  # seqs 1..10
        f1 = raw.fork(p, 10).thread_id
        raw.append(f1, _turn(30, "c3"))  # f1's seqs 11..14
        f2 = raw.fork(f1, 6).thread_id  # f2 holds p's seqs 2..6 (c1's turn) through f1
    with Store(url) as store:
        with pytest.raises(InvalidEventError) as exc:
            store.append(f2, [_user_answer("c3", 40)])
        assert (exc.value.rule, exc.value.thread_id) == ("v3.2-tool-call-id", f2)
        with pytest.raises(InvalidEventError):
            store.append(f2, [_user_answer("c2", 40)])
        store.append(f2, [_user_answer("c1", 40)])


def test_a_rules_history_holding_a_blob_stored_body_is_read(open_rec: Callable[..., PostgresRecorder]) -> None:
    rec = open_rec()
    a = tid()
    text = os.urandom(200_000).hex()  # past the codec's blob threshold
    big = UserTurnSubmitted(turn=m.UserTurn(submitted_at=ts(5), parts=[m.UserPromptPart(content=text)]))
    append(rec, part(a, [*_new_thread_events(a), big]))  # unchecked: the rules' values are folded from the log
    exc = _refused(rec, part(a, [AgentTurnStarted(agent_id=A1, started_at=ts(4))], check_rules=True))
    assert (exc.rule, exc.thread_id, exc.seq) == ("v3.4-turn-overlap", a, 4)
    [res] = append(rec, part(a, [AgentTurnStarted(agent_id=A1, started_at=ts(5))], check_rules=True))
    assert res.first_seq == 4


# --------------------------------------------------------------------------- the constructor's refusals


@pytest.mark.parametrize("logs", [0, 4097, True, "2"])
def test_logs_out_of_range_is_refused(pg_dsn: str, schema: str, logs: Any) -> None:
    with pytest.raises(InvalidInputError, match=rf"^logs must be an int in 1\.\.4096, not {logs!r}$"):
        PostgresRecorder(pg_dsn, schema=schema, logs=logs)


@pytest.mark.parametrize("writers", [0, 17, True])
def test_writers_out_of_range_is_refused(pg_dsn: str, schema: str, writers: Any) -> None:
    with pytest.raises(InvalidInputError, match=rf"^writers must be an int in 1\.\.16, not {writers!r}$"):
        PostgresRecorder(pg_dsn, schema=schema, writers=writers)


def test_writers_in_the_url_must_be_an_int(pg_dsn: str, schema: str) -> None:
    with pytest.raises(InvalidInputError, match=r"^writers must be an int in 1\.\.16, not 'two'$"):
        PostgresRecorder(f"{pg_dsn}?schema={schema}&writers=two")
    with pytest.raises(InvalidInputError, match=r"^writers must be an int in 1\.\.16, not 0$"):
        PostgresRecorder(f"{pg_dsn}?schema={schema}&writers=0")


def test_writers_and_logs_from_the_url_are_used(open_rec: Callable[..., PostgresRecorder], pg_dsn: str,
                                                schema: str) -> None:
    rec = open_rec(url=f"{pg_dsn}?schema={schema}&writers=3&logs=2", schema=None)
    assert (rec.schema, rec.logs, len(rec._writers)) == (schema, 2, 3)
    assert [w.name for w in rec._writers] == [f"tplog-pg-writer-{schema}-{i}" for i in range(3)]


@pytest.mark.parametrize("settings", [{"work_mem": "64kB; DROP"}, {"bad name": "1"}])
def test_settings_with_other_characters_are_refused(pg_dsn: str, schema: str, settings: dict[str, str]) -> None:
    [(k, v)] = settings.items()
    with pytest.raises(InvalidInputError) as exc:
        PostgresRecorder(pg_dsn, schema=schema, settings=settings)
    assert str(exc.value) == f"setting {k}={v!r}: names and values are letters, digits, '_' or '.'"


def test_settings_and_the_lock_timeout_reach_every_connection(open_rec: Callable[..., PostgresRecorder]) -> None:
    rec = open_rec(lock_timeout=0.25, settings={"work_mem": "4242kB", "application_name": "tplog.t_1"})
    with rec._pool.connection() as conn:
        got = [conn.execute(f"SHOW {name}".encode()).fetchone()[0]  # type: ignore[index]
               for name in ("lock_timeout", "work_mem", "application_name", "search_path")]
    assert got == ["250ms", "4242kB", "tplog.t_1", rec.schema]


def test_a_bad_url_is_refused_naming_it_without_its_password(pg_dsn: str, schema: str) -> None:
    with pytest.raises(InvalidInputError, match=r"^bad PostgreSQL URL 'postgresql://tplog:\*+@") as exc:
        PostgresRecorder("postgresql://tplog:secret@127.0.0.1:1/tplog?sslmode=nonsense&bogus_option=1", schema=schema)
    assert "secret" not in str(exc.value)


# --------------------------------------------------------------------------- lock timeouts


def test_a_lock_timeout_names_the_threads_of_the_append(pg_dsn: str, schema: str,
                                                       open_rec: Callable[..., PostgresRecorder]) -> None:
    rec = open_rec(lock_timeout=0.3)
    names = sorted(tid() for _ in range(7))
    d = tid()
    append(rec, part(d, [started(d)]))
    with psycopg.connect(pg_dsn, autocommit=True, options=f"-c search_path={schema}") as stall, stall.transaction():
        stall.execute("UPDATE logs SET position = position WHERE log_id = 0")  # a writer stalled before COMMIT
        with pytest.raises(LockTimeoutError) as exc:
            append(rec, *(part(t, [started(t)]) for t in names))
        with pytest.raises(LockTimeoutError) as one:
            append(rec, part(names[0], [started(names[0])]))
        with pytest.raises(LockTimeoutError) as deletion:
            rec.delete_thread(d, tombstone()).result(timeout=30)
        for n, more in ((5, ""), (6, " and 1 more")):  # the list's edge: five names shown
            with pytest.raises(LockTimeoutError) as edge:
                append(rec, *(part(t, [started(t)]) for t in names[:n]))
            assert str(edge.value).startswith(f"PostgreSQL {rec.url}: appending to thread {', '.join(names[:5])}{more} "
                                              "waited longer")
    assert str(deletion.value).startswith(f"PostgreSQL {rec.url}: appending to thread {d} waited longer")
    shown = ", ".join(names[:5])
    assert str(exc.value).startswith(
        f"PostgreSQL {rec.url}: appending to thread {shown} and 2 more waited longer than lock_timeout for a lock "
        "(another writer holds the thread or its log): ")
    assert str(one.value).startswith(f"PostgreSQL {rec.url}: appending to thread {names[0]} waited longer")
    assert rec.positions() == (1,) and rec.head(names[0]) is None
    append(rec, part(names[0], [started(names[0])]))  # the writer goes on
    assert rec.positions() == (2,)
