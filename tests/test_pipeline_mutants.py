"""``Store.pipeline`` beyond tests/test_pipeline.py: given event ids, a scoped store, the rules, an
``exists`` pipeline on a new thread, ``commit`` with nothing queued, a failing block (the mutants of
tplog/pipeline.py these kill: tests/MUTANTS.md)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from conftest import agent_start, completed, register, response, started, user

from tplog import Store
from tplog.errors import PipelineError, WrongExpectedVersionError


def _turn(text: str) -> list[object]:
    return [user(text), agent_start(), response(text), completed()]


def test_given_event_ids_are_kept_sync_and_async(tmp_path: Path) -> None:
    t, u = str(uuid.uuid4()), str(uuid.uuid4())
    ids, more = ([str(uuid.uuid4()) for _ in range(6)] for _ in range(2))
    with Store(tmp_path / "s") as s:
        with s.pipeline(t) as p:
            p.append([started(t), register(), *_turn("q")], event_ids=ids)
        assert [e.event_id for e in s.read(t)] == ids

        async def record() -> None:
            p = s.pipeline(u)
            await p.aappend([started(u), register(), *_turn("q")], event_ids=more)
            await p.acommit()

        asyncio.run(record())
        assert [e.event_id for e in s.read(u)] == more


def test_a_scoped_pipeline_writes_into_its_scope(tmp_path: Path) -> None:
    t = str(uuid.uuid4())
    with Store(tmp_path / "s") as base:
        s = base.scoped("tenant-a")
        s.append(t, [started(t), register()])
        with s.pipeline(t) as p:  # the version comes from the scope's head
            p.append(_turn("q"))
        assert s.head(t).version == 6 and not base.exists(t)


def test_the_stores_rules_apply(tmp_path: Path) -> None:
    t = str(uuid.uuid4())
    with Store(tmp_path / "s") as s:
        p = s.pipeline(t)
        p.append([started(t)])
        with pytest.raises(PipelineError, match=t):  # a1 never registered
            p.append(_turn("q"))
            p.commit()


def test_exists_on_a_new_thread_names_it(tmp_path: Path) -> None:
    t = str(uuid.uuid4())
    with Store(tmp_path / "s") as s:
        p = s.pipeline(t, expected_version="exists")
        with pytest.raises(WrongExpectedVersionError) as exc:
            p.append([started(t)])
        assert (exc.value.thread_id, exc.value.expected, exc.value.actual) == (t, "exists", 0)
        assert s.pipeline(t).commit() is None  # nothing queued: no result


def test_a_failing_block_keeps_its_own_error(tmp_path: Path) -> None:
    t = str(uuid.uuid4())
    with Store(tmp_path / "s") as s:
        with pytest.raises(KeyError), s.pipeline(t) as p:
            p.append([started(t)])
            p.append([user("q"), agent_start()])  # fails in the backend (a1 not registered), unawaited
            raise KeyError("the block's own")
        assert s.head(t).version == 1
