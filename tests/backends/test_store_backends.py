"""``Store`` over each backend: the same verbs give the same answers.

``Store("memory:")`` opens the reference backend, a path or ``lmdb:///dir`` the
LMDB one; the facade (checks, encoding, scopes, fold cache, folds) is the same.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import uuid
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import T, agent_start, completed, exchange, link, register, spawn_message, started, user

from tplog import AsyncStore, Store, thread_hash
from tplog.backends.lmdb import LmdbRecorder
from tplog.backends.memory import MemoryRecorder
from tplog.errors import (
    InvalidEventError,
    InvalidInputError,
    StoreClosedError,
    ThreadDeletedError,
    WrongExpectedVersionError,
)
from tplog.events import MessageRecorded
from tplog.protocol import model as m


def scenario(s: Store) -> list[Any]:
    """A run through most verbs; returns what they answered, times left out."""
    a, b, c = (str(uuid.UUID(int=i + 1)) for i in range(3))
    call = m.ToolCallPart(tool_name="search", tool_call_id="c1", args={"q": "x"})
    s.append(a, [started(a)], expected_version="no_stream", event_ids=["a0"])
    s.append(a, [register(), *exchange("hi", "hello")])
    s.append(a, [user(), agent_start(), spawn_message(b),
                 MessageRecorded(message=m.ResponseMessage(timestamp=T, agent_id="a1", parts=[call]))])
    s.append(b, [started(b), link(a, "spawned_from"), link(c, "referenced")])
    s.append(c, [started(c), link(a, "referenced")])
    out: list[Any] = []
    with pytest.raises(WrongExpectedVersionError):
        s.append(a, [completed()], expected_version=3)
    with pytest.raises(InvalidEventError) as refused:  # the validation rules, on every backend
        s.append(a, [completed(), user(), agent_start("ghost")])
    out.append((refused.value.rule, refused.value.seq, refused.value.path))
    dup = s.append(a, [started(a)], event_ids=["a0"])
    out.append((dup.duplicate, dup.first_position))
    out.append([(e.thread_id, e.seq, e.position, e.event_id if e.event_id == "a0" else "", e.event)
                for e in s.read_all()])
    out.append([e.seq for e in s.read(a, after=2, limit=2)])
    out.append([e.seq for e in s.read(a, after=6, direction="backward", limit=3)])
    out.append(thread_hash(s.thread(a)))
    out.append(s.load(a).in_progress is not None)
    out.append(s.pending(a))
    out.append(s.interrupts(a))
    out.append(s.links(b))
    out.append(s.incoming(a))
    out.append(s.incoming(a, limit=1))
    out.append(s.children(a))
    out.append(s.descendants(a))
    out.append([h.thread_id for h in s.threads().threads])
    out.append(msgspec.structs.replace(s.head(a), created_ns=0, updated_ns=0, stored_bytes=0))
    s.delete_thread(c, reason="done")
    with pytest.raises(ThreadDeletedError):
        s.thread(c)
    out.append(s.exists(c))
    out.append(s.incoming(a))
    out.append([e.position for e in s.iter_all(chunk=2)])
    out.append(s.projections())
    view = s.scoped("tenant")
    view.append(a, [started(a)])
    out.append((len(view.read_all()), len(s.read_all()), view.head(a).version))
    out.append([(r.projection, r.differences) for r in s.rebuild(verify=True)])
    out.append(s.verify().problems)
    return out


def test_memory_and_lmdb_answer_alike(tmp_path: Path) -> None:
    with Store("memory:") as mem, Store(tmp_path / "db", auto_dictionary=0) as disk:
        assert isinstance(mem.backend, MemoryRecorder) and isinstance(disk.backend, LmdbRecorder)
        got = scenario(mem)
        assert got == scenario(disk)
        assert ("v3.3-agent-ref", 13, "$.agent_id") in got


def test_lmdb_url_names_a_directory(tmp_path: Path) -> None:
    t = str(uuid.uuid4())
    with Store(f"lmdb://{tmp_path / 'db'}") as s:
        assert isinstance(s.backend, LmdbRecorder)
        s.append(t, [started(t)])
    with Store(tmp_path / "db") as s:
        assert s.head(t).version == 1
    for bad in ("lmdb://", "postgres-ish://x"):
        with pytest.raises(InvalidInputError):
            Store(bad)


def test_memory_store_cannot_be_read_only() -> None:
    with pytest.raises(InvalidInputError):
        Store("memory:", readonly=True)


def test_memory_store_is_closed_like_any_other() -> None:
    t = str(uuid.uuid4())
    s = Store("memory:")
    s.append(t, [started(t)])
    s.close()
    with pytest.raises(StoreClosedError):
        s.append(t, [user()])


@pytest.mark.parametrize("target", ["memory:", "lmdb"])
def test_async_store_over_each_backend(target: str, tmp_path: Path) -> None:
    async def main() -> list[int]:
        path = target if target == "memory:" else str(tmp_path / "db")
        async with await AsyncStore.open(path) as s:
            tids = [str(uuid.uuid4()) for _ in range(8)]
            await asyncio.gather(*(s.append(t, [started(t), register()]) for t in tids))
            await asyncio.gather(*(s.append(t, exchange()) for t in tids))
            return sorted(e.position for e in await s.read_all())

    assert asyncio.run(main()) == list(range(1, 49))



_PG_SCHEMAS = itertools.count()


def _pg_url() -> tuple[str, str]:
    """A PostgreSQL store URL with a schema of its own, and the schema's name."""
    from contract_helpers import pg_dsn

    name = f"s{os.getpid()}_{next(_PG_SCHEMAS)}"
    return f"{pg_dsn()}?schema={name}", name


def _drop(schema: str) -> None:
    import psycopg
    from contract_helpers import pg_dsn

    with psycopg.connect(pg_dsn(), autocommit=True) as c:
        c.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE".encode())


def test_memory_and_postgres_answer_alike() -> None:
    from tplog.backends.postgres import PostgresRecorder

    url, schema = _pg_url()
    try:
        with Store("memory:") as mem, Store(url) as pg:
            assert isinstance(pg.backend, PostgresRecorder)
            assert scenario(mem) == scenario(pg)
    finally:
        _drop(schema)


def test_async_store_over_postgres() -> None:
    url, schema = _pg_url()

    async def main() -> list[int]:
        async with await AsyncStore.open(url) as s:
            tids = [str(uuid.uuid4()) for _ in range(8)]
            await asyncio.gather(*(s.append(t, [started(t), register()]) for t in tids))
            await asyncio.gather(*(s.append(t, exchange()) for t in tids))
            return sorted(e.position for e in await s.read_all())

    try:
        assert asyncio.run(main()) == list(range(1, 49))
    finally:
        _drop(schema)


def test_a_store_opens_on_a_backend_object_the_caller_made(tmp_path: Path) -> None:
    """``Store(recorder)``: any Recorder, opened with its own options; Store's backend options
    are refused then (they would be silently ignored), and closing the store closes it."""
    rec = MemoryRecorder(logs=2)
    with pytest.raises(InvalidInputError, match=r"takes no backend options: \['readonly'\]"):
        Store(rec, readonly=True)
    s = Store(rec, check_rules=False)
    assert s.backend is rec and s.path == ""
    s.append("t", [started("t"), user()])
    assert [r.seq for r in Store(rec).read("t")] == [1, 2]
    s.close()
    with pytest.raises(StoreClosedError):
        rec.head("t")
    with Store(LmdbRecorder(str(tmp_path / "l"), durability="relaxed"), check_rules=False) as lm:
        assert lm.append("t", [started("t")]).last_position == 1


@pytest.mark.parametrize("path", ["memory:", "lmdb"])
def test_the_backends_declare_what_the_facade_relies_on(tmp_path: Path, path: str) -> None:
    """Declared in the Recorder Protocol, not looked up: whether submissions commit in order
    (tplog.pipeline), and waiting for a log position (Store.wait_for_position)."""
    with Store(path if path == "memory:" else tmp_path / "s", check_rules=False) as s:
        assert s.backend.submits_in_order is True
        assert s.wait_for_position(1, timeout=0.01) == 0  # a timeout: the last position seen
        s.append("t", [started("t")])
        assert s.backend.wait_for_position(1, timeout=5) == 1 == s.wait_for_position(0)
