"""The head's ``agent_names`` (agent id / registry key → registered name) on every backend:
kept by appends and forks, listed by ``threads()``, and heads stored before the field
existed (their msgpack array one element shorter) still decode, with ``{}``.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from conftest import T, exchange, register, started

from tplog import Store
from tplog.backends.common import decode_head, encode_head
from tplog.events import AgentRegistered
from tplog.protocol import model as m

BACKENDS = ["memory", "lmdb", "postgres"]


@pytest.fixture(params=BACKENDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _open(kind: str, tmp_path: Path) -> tuple[Store, str]:
    if kind == "memory":
        return Store("memory:", check_rules=False), ""
    if kind == "lmdb":
        return Store(tmp_path / "store", check_rules=False), ""
    from contract_helpers import pg_dsn

    schema = f"an{os.getpid()}_{uuid.uuid4().hex[:8]}"
    return Store(f"{pg_dsn()}?schema={schema}", check_rules=False), schema


@pytest.fixture
def opened(kind: str, tmp_path: Path) -> Iterator[tuple[Store, str]]:
    s, schema = _open(kind, tmp_path)
    try:
        yield s, schema
    finally:
        s.close()
        if schema:
            import psycopg
            from contract_helpers import pg_dsn

            with psycopg.connect(pg_dsn(), autocommit=True) as c:
                c.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE".encode())


def _old(head_bytes: bytes) -> bytes:
    """The head as a store without ``agent_names`` wrote it: its array minus the last element."""
    arr = msgspec.msgpack.decode(head_bytes)
    return msgspec.msgpack.encode(arr[:-1])


def test_names_follow_registrations_forks_and_listings(opened: tuple[Store, str]) -> None:
    s, _ = opened
    t = str(uuid.uuid4())
    keyed = AgentRegistered(agent=m.AgentConfig(agent_id="uuid-9", agent_name="Reviewer", created_at=T), key="rev")
    s.append(t, [started(t), register("a1"), keyed, *exchange(agent="a1")])
    assert s.head(t).agent_names == {"a1": "A1", "uuid-9": "Reviewer", "rev": "Reviewer"}
    # registering the same id again renames it
    s.append(t, [AgentRegistered(agent=m.AgentConfig(agent_id="a1", agent_name="Writer", created_at=T))])
    assert s.head(t).agent_names["a1"] == "Writer"
    [listed] = s.threads().threads
    assert listed.agent_names == s.head(t).agent_names
    # a fork at the end (the parent's head) and one earlier (a fold of the prefix) keep them
    late = s.backend.head(t, scope=None)
    assert late is not None
    f1 = s.fork(t, late.version).thread_id
    f2 = s.fork(t, 3).thread_id
    assert s.head(f1).agent_names == s.head(t).agent_names
    assert s.head(f2).agent_names == {"a1": "A1", "uuid-9": "Reviewer", "rev": "Reviewer"}


def test_old_heads_decode_without_names(kind: str, opened: tuple[Store, str], tmp_path: Path) -> None:
    s, schema = opened
    t = str(uuid.uuid4())
    s.append(t, [started(t, title="old"), register("a1"), *exchange(agent="a1")])
    assert decode_head(_old(encode_head(s.head(t)))).agent_names == {}
    if kind == "lmdb":
        eng = s.backend.engine
        with eng.read() as txn:
            key, raw = next((bytes(k), bytes(v)) for k, v in txn.range("heads"))
        eng.run_write(lambda txn: txn.put("heads", key, _old(raw)))
        reopened = s
    elif kind == "postgres":
        import psycopg
        from contract_helpers import pg_dsn

        with psycopg.connect(pg_dsn(), autocommit=True) as c:
            c.execute(f"SET search_path TO {schema}".encode())
            rows = c.execute("SELECT log_id, scope, tk, head FROM heads WHERE head IS NOT NULL").fetchall()
            for log, sc, tk, head in rows:
                c.execute(
                    "UPDATE heads SET head = %s WHERE log_id = %s AND scope = %s AND tk = %s",
                    (_old(bytes(head)), log, sc, tk),
                )
        reopened = s
    else:  # memory: a backup written before the field, restored
        dest = tmp_path / "backup"
        s.backup(str(dest))
        f = dest / "memory.jsonl"
        lines = []
        for line in f.read_text().splitlines():
            row = json.loads(line)
            if row.get("type") == "thread":
                row["head"] = row["head"][:-1]
            lines.append(json.dumps(row))
        f.write_text("\n".join(lines) + "\n")
        reopened = Store(f"memory:{dest}", check_rules=False)
    try:
        head = reopened.head(t)
        assert head.agent_names == {} and head.title == "old" and head.agent_ids == ["a1"]
        # the next registration starts the map
        reopened.append(t, [register("a2")])
        assert reopened.head(t).agent_names == {"a2": "A2"}
    finally:
        if reopened is not s:
            reopened.close()
