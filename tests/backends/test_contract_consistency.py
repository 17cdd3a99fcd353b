"""Three answers the backends gave differently (found by the contract module's mutation review),
now the same on every backend in FACTORIES: a bad ``threads`` limit, a bad ``wait`` cursor, and
which items of ``items`` carry their event.
"""

from __future__ import annotations

import inspect
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import agent_start, completed, link, register, response, started, user
from contract_helpers import (
    append,
    part,
    rec_fixture,  # noqa: F401  (the `rec` fixture)
    tid,
)

from tplog import Store
from tplog.backends.common import FOLD_KINDS
from tplog.backends.contract import Recorder
from tplog.backends.lmdb import LmdbRecorder
from tplog.backends.memory import MemoryRecorder
from tplog.codec import TurnFacts
from tplog.errors import InvalidInputError
from tplog.events import (
    KIND_CODE,
    AgentTurnCompleted,
    AgentTurnInterrupted,
    AgentTurnStarted,
    LinkAdded,
    ThreadInfoChanged,
)
from tplog.protocol import model as m


@pytest.mark.parametrize("bad", [True, False, "3", 2.0, None, 0, -1, [3]])
def test_a_threads_limit_that_is_not_a_positive_int_is_a_typed_error(rec: Recorder, bad: Any) -> None:
    # LMDB compared it with 0 as it came: "3" raised a bare TypeError, True listed one thread
    with pytest.raises(InvalidInputError, match=r"^limit must be > 0$"):
        rec.threads(limit=bad)


def test_a_threads_limit_of_one_is_still_a_page(rec: Recorder) -> None:
    a, b = tid(), tid()
    append(rec, part(a, [started(a)]))
    append(rec, part(b, [started(b)]))
    page = rec.threads(limit=1)
    assert [h.thread_id for h in page.threads] == [b] and page.cursor is not None


@pytest.mark.parametrize("bad", [(), [0], ("0",), (True,), (0.0,), None, 0, "0"])
def test_wait_refuses_a_cursor_that_is_not_positions_with_a_typed_error(rec: Recorder, bad: Any) -> None:
    # memory raised a bare ValueError (zip's strict), LMDB an IndexError or TypeError, PostgreSQL
    # waited out the timeout on () or raised a TypeError
    with pytest.raises(InvalidInputError, match=r"^cursor must be a tuple of 1 to \d+ ints "
                                                 r"\(a position per log\), not ") as e:
        rec.wait(bad, 0.0)
    assert str(e.value).endswith(f"not {bad!r}")


def test_wait_refuses_a_cursor_longer_than_the_logs(rec: Recorder) -> None:
    too_long = (0,) * (rec.logs + 1)
    with pytest.raises(InvalidInputError, match=rf"^cursor must be a tuple of 1 to {rec.logs} ints .*"
                                                 rf"not \({', '.join(['0'] * (rec.logs + 1))}\)$"):
        rec.wait(too_long, 0.0)


def test_wait_takes_every_log_or_the_first_logs_only(rec: Recorder) -> None:
    a = tid()
    assert rec.wait(rec.positions(), 0.0) == rec.positions()
    assert rec.wait((-1,), 30.0) == rec.positions()  # before position 0: at once
    append(rec, part(a, [started(a)]))
    now = rec.positions()
    log = rec.log_of(a)
    # a cursor behind the append returns at once; log 0's alone (as Store.wait_for_position passes it)
    # returns at once when the thread went to log 0, else waits on log 0 only
    behind = tuple(p - 1 if i == log else p for i, p in enumerate(now))
    assert rec.wait(behind, 30.0) == now
    if log == 0:
        assert rec.wait((now[0] - 1,), 30.0) == now
    t0 = time.monotonic()
    assert rec.wait((now[0],), 0.2) == now
    assert time.monotonic() - t0 >= 0.15


@pytest.mark.parametrize("backend", ["memory:", "lmdb"])
def test_waiting_for_position_zero_returns_at_once(tmp_path: Path, backend: str) -> None:
    # Store.wait_for_position(0) asks the backend's wait_for_position (memory and PostgreSQL: wait((-1,)))
    with Store(backend if backend == "memory:" else tmp_path / "s") as s:
        t0 = time.monotonic()
        assert s.wait_for_position(0, timeout=30) == 0
        assert time.monotonic() - t0 < 10


def test_every_backend_waits_for_a_position_of_log_0_and_says_if_it_submits_in_order(rec: Recorder) -> None:
    from tplog.backends.postgres import PostgresRecorder

    assert rec.submits_in_order is not isinstance(rec, PostgresRecorder)  # PostgreSQL: several writers
    assert rec.wait_for_position(0, 30.0) == 0  # position 0: at once
    t0 = time.monotonic()
    assert rec.wait_for_position(1, 0.2) == rec.positions()[0] == 0  # a timeout: the last position seen
    assert time.monotonic() - t0 >= 0.15


def test_wait_on_the_first_log_only_wakes_on_its_append(rec: Recorder) -> None:
    # the short cursor still wakes on an append to log 0 (threads until one lands there)
    got: list[Any] = []
    start = rec.positions()
    waiter = threading.Thread(target=lambda: got.append(rec.wait((start[0],), 30.0)))
    waiter.start()
    for _ in range(64):
        t = tid()
        append(rec, part(t, [started(t)]))
        if rec.log_of(t) == 0:
            break
    waiter.join(30)
    assert not waiter.is_alive() and got and got[0][0] > start[0]


def test_items_carry_the_event_exactly_for_the_kinds_a_fold_reads(rec: Recorder) -> None:
    a, b = tid(), tid()
    interrupted = AgentTurnInterrupted(interruption=m.Interruption(reason="user_cancel", interrupted_at="t"))
    evs = [started(a, title="x"), register(), ThreadInfoChanged(title="y"), user(), agent_start(), response(),
           completed(), link(b), user(), agent_start("a2"), interrupted]
    append(rec, part(a, evs))
    items = rec.items(a)
    assert [i.seq for i in items] == list(range(1, len(evs) + 1))
    assert [i.kind for i in items] == [KIND_CODE[type(e)] for e in evs]
    # ThreadStarted, AgentRegistered, ThreadInfoChanged, UserTurnSubmitted, the message: no event
    # (memory and PostgreSQL handed out the event of every kind but messages; LMDB reads no such body)
    assert [i.seq for i in items if i.event is None] == [1, 2, 3, 4, 6, 9]
    assert [i.seq for i in items if i.kind in FOLD_KINDS] == [5, 7, 8, 10, 11]
    start, done, added, start2, stop = (items[s - 1].event for s in (5, 7, 8, 10, 11))
    # a turn boundary: the event, or (LMDB, format 3) its header's TurnFacts
    assert isinstance(start, (AgentTurnStarted, TurnFacts)) and start.agent_id == "a1"
    assert isinstance(start2, (AgentTurnStarted, TurnFacts)) and start2.agent_id == "a2"
    assert isinstance(done, (AgentTurnCompleted, TurnFacts))
    assert isinstance(stop, (AgentTurnInterrupted, TurnFacts))
    reason = stop.reason if isinstance(stop, TurnFacts) else stop.interruption.reason
    assert reason == "user_cancel"
    assert added == evs[7] and isinstance(added, LinkAdded)


@pytest.mark.parametrize("cls", [MemoryRecorder, LmdbRecorder], ids=["memory", "lmdb"])
def test_every_verb_takes_the_contracts_parameters_and_defaults(cls: type) -> None:
    # The Protocol's signatures document the defaults (its bodies never run): each backend keeps
    # them. (PostgreSQL's reads are wrapped by a retry without a signature, so not compared.)
    verbs = [n for n, v in vars(Recorder).items() if callable(v) and not n.startswith("_")]
    assert len(verbs) == 29
    for name in verbs:
        got = inspect.signature(getattr(cls, name)).parameters
        for p in inspect.signature(getattr(Recorder, name)).parameters.values():
            q = got.get(p.name)
            assert q is not None and (q.kind, q.default) == (p.kind, p.default), (name, p, q)
