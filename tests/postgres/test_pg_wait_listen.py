"""The PostgreSQL backend's live wait (tplog/backends/postgres/reads.py ``wait``, ``_listen``,
``_listen_loop``), against a real server: a timeout is waited out and no longer; a commit by another
recorder on the schema (another process, to the waiter) wakes a waiter without a timeout, with one
log through LISTEN/NOTIFY (one listener thread and session) and with several by polling; closing
the recorder releases its waiters.

Written for the surviving mutants of reads.py (tests/MUTANTS.md).
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "backends"))
from conftest import started
from contract_helpers import append, part, tombstone

from tplog.backends.postgres import PostgresRecorder


def tid() -> str:
    return str(uuid.uuid4())


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # handed to the test
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


@pytest.mark.parametrize("logs", [1, 4])
def test_a_timeout_is_waited_out_and_no_longer(open_rec: Callable[..., PostgresRecorder], logs: int) -> None:
    rec = open_rec(logs=logs)
    zero = (0,) * logs
    t0 = time.monotonic()
    t, out = _in_thread(lambda: rec.wait(zero, timeout=0.3))
    t.join(timeout=20)
    took = time.monotonic() - t0
    assert not t.is_alive(), "wait(timeout=0.3) did not return"
    assert out == [zero] and took >= 0.3
    t0 = time.monotonic()
    assert rec.wait(zero, timeout=0) == zero  # nothing left: one look, no sleep
    assert rec.wait(zero, timeout=-1) == zero
    assert time.monotonic() - t0 < 5


@pytest.mark.parametrize("logs", [1, 4])
def test_another_recorders_commit_wakes_a_waiter_without_a_timeout(open_rec: Callable[..., PostgresRecorder],
                                                                   logs: int) -> None:
    waiter, writer = open_rec(logs=logs), open_rec(logs=logs)
    zero = (0,) * logs
    t, out = _in_thread(lambda: waiter.wait(zero))
    time.sleep(0.2)
    assert t.is_alive()  # nothing committed yet
    a = tid()
    append(writer, part(a, [started(a)]))
    t.join(timeout=20)
    assert not t.is_alive(), "the waiter was not woken"
    [got] = out
    assert isinstance(got, tuple) and sum(got) == 1 and got[waiter.log_of(a)] == 1


def test_one_log_listens_on_one_session_and_its_notifications_wake_the_waiters(
        open_rec: Callable[..., PostgresRecorder], pg_dsn: str, schema: str) -> None:
    waiter, writer = open_rec(), open_rec()
    woken: list[str] = []
    notify = waiter._notify_local

    def counting() -> None:  # which threads wake the waiters
        woken.append(threading.current_thread().name)
        notify()

    waiter._notify_local = counting  # type: ignore[method-assign]
    assert waiter.wait((0,), timeout=0.01) == (0,)
    assert waiter.wait((0,), timeout=0.01) == (0,)  # a second wait starts no second listener
    listeners = [t for t in threading.enumerate() if t.name == f"tplog-pg-listen-{schema}"]
    assert len(listeners) == 1 and listeners[0].daemon and listeners[0] is waiter._listener
    deadline = time.monotonic() + 20
    sessions: list[Any] = []
    while time.monotonic() < deadline and not sessions:
        with psycopg.connect(pg_dsn, autocommit=True) as c:
            sessions = c.execute("SELECT state FROM pg_stat_activity WHERE query = %s",
                                 (f"LISTEN tplog_{schema}",)).fetchall()
        time.sleep(0.05)
    assert sessions == [("idle",)]  # LISTEN committed: notifications are delivered
    a = tid()
    for commit in (lambda: append(writer, part(a, [started(a)])),
                   lambda: writer.delete_thread(a, tombstone()).result(timeout=30)):  # a deletion notifies too
        del woken[:]
        commit()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and f"tplog-pg-listen-{schema}" not in woken:
            time.sleep(0.05)
        assert f"tplog-pg-listen-{schema}" in woken


def test_several_logs_start_no_listener(open_rec: Callable[..., PostgresRecorder]) -> None:
    rec = open_rec(logs=4)
    assert rec.wait((0,) * 4, timeout=0.01) == (0,) * 4
    assert rec._listener is None


def test_closing_the_recorder_releases_a_waiter(open_rec: Callable[..., PostgresRecorder]) -> None:
    rec = open_rec()
    t, out = _in_thread(lambda: rec.wait((0,)))
    time.sleep(0.2)
    assert t.is_alive()
    listener = rec._listener
    rec.close()
    t.join(timeout=20)
    assert not t.is_alive() and len(out) == 1
    assert listener is not None
    listener.join(timeout=20)
    assert not listener.is_alive()  # the listener stops with the recorder
