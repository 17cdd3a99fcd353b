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


# --------------------------------------------------------------------------- LMDB: map growth, handles, faults


def test_lmdb_live_table_grows_its_map_when_a_batch_does_not_fit(tmp_path: Path) -> None:
    from tplog.backends.lmdb.live import LmdbLive

    live = LmdbLive(str(tmp_path / "live"), map_size=64 * 1024)
    big = [bytes([i]) * (256 * 1024) for i in range(4)]  # 1 MiB: 16 times the map
    h = live.write(T, 1, big)
    assert h.batches == 4 and live.read(T)[1] == big
    assert live._env.info()["map_size"] >= 1024 * 1024


_GROW = """
import sys
from tplog.backends.lmdb.live import LmdbLive
live = LmdbLive(sys.argv[1], map_size=64 * 1024)
live.write(sys.argv[2], 7, [b"z" * (2 * 1024 * 1024)])  # grows the map far beyond the other process's
"""


def test_lmdb_live_table_adopts_a_map_another_process_grew(tmp_path: Path) -> None:
    """Another worker grew the shared map: this process's next read and write adopt the new size
    (LMDB's MDB_MAP_RESIZED) and retry, rather than failing the stream."""
    import subprocess
    import sys

    from tplog.backends.lmdb.live import LmdbLive

    path = str(tmp_path / "live")
    live = LmdbLive(path, map_size=64 * 1024)
    live.write(T, 1, [b"mine"])
    other = "5d1c8a7e-3b2f-4e6d-8c9b-1a2b3c4d5e6f"
    r = subprocess.run([sys.executable, "-c", _GROW, path, other], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    hdr, batches = live.read(other)  # resized under this reader
    assert hdr is not None and hdr.turn_seq == 7 and batches == [b"z" * (2 * 1024 * 1024)]
    assert live.write(T, 1, [b"more"]).batches == 2
    assert live.read(T)[1] == [b"mine", b"more"]
    assert live._env.info()["map_size"] >= 2 * 1024 * 1024


def test_one_lmdb_live_handle_per_process_and_store(tmp_path: Path) -> None:
    """LMDB allows one environment per process and path: a store opened again in this process gets
    the same live table handle, and sees what was written through the first."""
    with Store(tmp_path / "s") as a:
        first = live_of(a)
        first.write(T, 3, [b"kept"])
    with Store(tmp_path / "s") as b:
        again = live_of(b)
        assert again is first
        assert again.read(T)[1] == [b"kept"]


def test_a_store_whose_live_table_cannot_be_made_has_none(tmp_path: Path) -> None:
    """``<store>/live`` taken by a file: the store works, only streams are not resumable (no live table);
    opening the table directly is a StorageError naming the path."""
    from tplog.backends.lmdb.live import LmdbLive
    from tplog.errors import StorageError

    with Store(tmp_path / "s") as s:
        (tmp_path / "s" / "live").write_text("not a directory")
        assert live_streams(s.backend) is None
        assert s.last_position == 0
    with pytest.raises(StorageError, match=r"s/live: cannot open the live stream table"):
        LmdbLive(str(tmp_path / "s" / "live"))


def test_postgres_live_table_reconnects_after_its_connection_was_killed() -> None:
    """The live table's own connection dies (a server restart, a killed backend): the next call
    opens a new one, nothing is lost (the UNLOGGED table is still there)."""
    import uuid

    import psycopg
    from contract_helpers import pg_dsn

    schema = f"live_{uuid.uuid4().hex[:12]}"
    with Store(f"{pg_dsn()}?schema={schema}") as s:
        try:
            live = live_of(s)
            live.write(T, 2, [b"before"])
            pid = live._conn.info.backend_pid  # type: ignore[attr-defined]
            with psycopg.connect(pg_dsn(), autocommit=True) as c:
                assert c.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
            assert live.write(T, 2, [b"after"]).batches == 2
            assert live.read(T)[1] == [b"before", b"after"]
            assert live._conn.info.backend_pid != pid  # type: ignore[attr-defined]
        finally:
            with psycopg.connect(pg_dsn(), autocommit=True) as c:
                c.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE".encode())
