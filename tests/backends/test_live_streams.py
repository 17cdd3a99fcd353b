"""The live table (tplog.backends.live): in-flight stream chunks beside the log, for every backend
(memory, LMDB, PostgreSQL). The LMDB one is shared by processes: a second process sees the first's writes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tplog import Store
from tplog.backends.live import LiveStreams
from tplog.backends.live_streams import live_streams

T = "0b6f2a8e-6f59-4b4e-9d7c-0f1e2d3c4b5a"


@pytest.fixture(params=["memory", "lmdb", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "postgres":
        import uuid

        import psycopg
        from contract_helpers import pg_dsn

        schema = f"live_{uuid.uuid4().hex[:12]}"
        s = Store(f"{pg_dsn()}?schema={schema}")
        yield s
        s.close()
        with psycopg.connect(pg_dsn(), autocommit=True) as c:
            c.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE".encode())
        return
    s = Store("memory:" if request.param == "memory" else tmp_path / "store")
    yield s
    s.close()


def live_of(s: Store) -> LiveStreams:
    live = live_streams(s.backend)
    assert live is not None
    assert live_streams(s.backend) is live  # one per backend
    return live


def test_write_read_in_batches(store: Store) -> None:
    live = live_of(store)
    assert live.read(T) == (None, [])
    h = live.write(T, 4, [b"data: a\n\n", b"data: b\n\n"], owner="me")
    assert (h.turn_seq, h.batches, h.done, h.stop, h.attached, h.owner) == (4, 2, False, False, True, "me")
    h = live.write(T, 4, [b"data: c\n\n"], done=True, attached=False)
    assert (h.batches, h.done, h.attached) == (3, True, False)
    hdr, batches = live.read(T)
    assert hdr is not None and hdr.batches == 3 and batches == [b"data: a\n\n", b"data: b\n\n", b"data: c\n\n"]
    assert live.read(T, after=1)[1] == [b"data: b\n\n", b"data: c\n\n"]
    assert live.read(T, after=1, limit=1)[1] == [b"data: b\n\n"]
    assert live.read(T, after=0, limit=0)[1] == [] and live.read(T, after=3)[1] == []
    assert live.read("another-thread") == (None, [])


def test_a_newer_turn_replaces_an_older_ones_entries(store: Store) -> None:
    live = live_of(store)
    live.write(T, 4, [b"old1", b"old2", b"old3"], done=True)
    h = live.write(T, 9, [b"new"])
    assert (h.turn_seq, h.batches, h.done) == (9, 1, False)
    assert live.read(T)[1] == [b"new"]


def test_stop_requests_and_expiry_name_the_turn(store: Store) -> None:
    live = live_of(store)
    assert live.request_stop(T, 4) is False  # nothing streams
    live.write(T, 4, [b"x"])
    assert live.request_stop(T, 5) is False  # another turn
    assert live.request_stop(T, 4) is True
    h = live.write(T, 4, [b"y"])
    assert h.stop is True  # what the writer sees at its next write
    live.write(T, 4, [], done=True)
    assert live.request_stop(T, 4) is False  # it ended
    live.expire(T, 5)  # not that turn's: kept
    assert live.read(T)[0] is not None
    live.expire(T, 4)
    assert live.read(T) == (None, [])


def test_lmdb_live_table_is_shared_by_processes_and_outside_the_log(tmp_path: Path) -> None:
    import subprocess
    import sys

    with Store(tmp_path / "s") as a:
        live_of(a).write(T, 1, [b"chunk"])
        code = ("import sys; from tplog import Store; from tplog.backends.live_streams import live_streams\n"
                "with Store(sys.argv[1]) as s:\n"
                "    live = live_streams(s.backend); h, b = live.read(sys.argv[2]); print(h.turn_seq, b)\n"
                "    live.request_stop(sys.argv[2], 1)\n")
        r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "s"), T], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == "1 [b'chunk']"  # another process (another worker) reads it
        assert live_of(a).write(T, 1, []).stop is True  # and its stop request reaches this one
        assert a.last_position == 0  # nothing in the log
        assert a.verify().ok
    assert (tmp_path / "s" / "live").is_dir()
    with Store(tmp_path / "s", readonly=True) as ro:  # the store still opens read-only, as before
        assert ro.last_position == 0


def test_sweep_drops_ended_and_stale_streams_only(store: Store) -> None:
    import time

    live = live_of(store)
    other = "5d1c8a7e-3b2f-4e6d-8c9b-1a2b3c4d5e6f"
    live.write(T, 1, [b"a"], done=True)
    live.write(other, 1, [b"b"])  # still running
    now = time.time_ns()
    assert live.sweep(done_before=now - 10**10, stale_before=now - 10**12) == 0  # ended too recently
    assert live.sweep(done_before=now + 1, stale_before=now - 10**12) == 1
    assert live.read(T) == (None, []) and live.read(other)[1] == [b"b"]
    assert live.sweep(done_before=now + 1, stale_before=now + 1) == 1  # its writer stopped writing
    assert live.read(other) == (None, [])
