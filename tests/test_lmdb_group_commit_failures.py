"""A group commit that fails outside the engine (tplog/backends/lmdb/recorder.py ``_lead``).

Found reviewing recorder.py's surviving mutants (tests/MUTANTS.md): the leader re-raised such a
failure, which ended the lead with async appends still queued behind the group (no thread took
it: they and every later append hung), in the async leader's thread ended that thread (every
later async append hung), and failed a leader whose own append had committed. The failure is
the error of the failed group's appends only."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from backends.contract_helpers import part
from test_rules import T0

from tplog.backends.lmdb import LmdbRecorder
from tplog.events import ThreadStarted


def _tid() -> str:
    return str(uuid.uuid4())


def _start(tid: str) -> ThreadStarted:
    return ThreadStarted(thread_id=tid, created_at=T0)


class _FailsOnce(LmdbRecorder):
    """The first group's commit raises outside the engine; ``during`` runs just before."""

    during: Any = None
    failed = False

    def _commit(self, batch: list[Any]) -> None:
        if not self.failed:
            self.failed = True
            if self.during is not None:
                self.during(self)
            raise RuntimeError("boom")
        super()._commit(batch)


def _close(rec: LmdbRecorder) -> None:
    """Close in a thread of its own: on the old code the lead was never released and close() waited forever."""
    t = threading.Thread(target=rec.close, daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive(), "close() waits for a lead no thread holds"


def test_async_appends_queued_behind_a_failed_group_are_committed(tmp_path: Path) -> None:
    later: list[Any] = []
    rec = _FailsOnce(tmp_path / "s", auto_dictionary=0)
    rec.during = lambda r: later.append(r.submit([part(b, [_start(b)])], lead=False))
    try:
        a, b, c = _tid(), _tid(), _tid()
        handle = rec.submit([part(a, [_start(a)])])
        with pytest.raises(RuntimeError, match="boom"):
            handle.result(timeout=30)
        assert handle.done()
        assert later[0].result(timeout=30)[0].last_position == 1  # queued during the failed commit
        done: list[Any] = []
        t = threading.Thread(target=lambda: done.append(rec.submit([part(c, [_start(c)])]).result(timeout=30)))
        t.start()
        t.join(30)
        assert done and done[0][0].last_position == 2  # the lead was released
        assert rec.head(a) is None and rec.head(b).version == 1
    finally:
        _close(rec)


def test_the_async_leader_lives_on_after_a_failed_group(tmp_path: Path) -> None:
    rec = _FailsOnce(tmp_path / "s", auto_dictionary=0)
    try:
        a, b = _tid(), _tid()
        with pytest.raises(RuntimeError, match="boom"):
            rec.submit([part(a, [_start(a)])], lead=False).result(timeout=30)
        assert rec.submit([part(b, [_start(b)])], lead=False).result(timeout=30)[0].last_position == 1
        assert rec.head(a) is None
    finally:
        _close(rec)


class _SecondFails(LmdbRecorder):
    """The first group queues an async append during its (good) commit; the next group fails."""

    later: Any = None
    commits = 0

    def _commit(self, batch: list[Any]) -> None:
        self.commits += 1
        if self.commits == 1:
            b = _tid()
            self.later = self.submit([part(b, [_start(b)])], lead=False)
        elif self.commits == 2:
            raise RuntimeError("boom")
        super()._commit(batch)


def test_a_leader_whose_append_committed_is_not_failed_by_the_next_group(tmp_path: Path) -> None:
    rec = _SecondFails(tmp_path / "s", auto_dictionary=0)
    try:
        a = _tid()
        assert rec.submit([part(a, [_start(a)])]).result(timeout=30)[0].last_position == 1
        with pytest.raises(RuntimeError, match="boom"):
            rec.later.result(timeout=30)  # only the failed group's append has its error
        assert rec.head(a).version == 1
    finally:
        _close(rec)
