"""The LMDB live-stream table's own environment (tplog/backends/lmdb/live.py) on real files."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import lmdb
import msgspec
import pytest

from tplog.backends.live import LiveHeader
from tplog.backends.lmdb.keys import tkey, u64
from tplog.backends.lmdb.live import LmdbLive
from tplog.errors import StorageError


def test_the_live_environment_skips_fsync_and_holds_one_unnamed_table(tmp_path: Path) -> None:
    live = LmdbLive(str(tmp_path / "live"))
    assert live.path == str(tmp_path / "live")
    assert live._env.flags() == {"subdir": True, "readonly": False, "metasync": False, "sync": False,
                                 "map_async": False, "readahead": False, "writemap": False, "meminit": True,
                                 "lock": True}
    assert live._env.info()["map_size"] == 1 << 30
    with pytest.raises(lmdb.DbsFullError):  # max_dbs=0: the main table only
        live._env.open_db(b"named")
    hdr = live.write("t", 3, [b"a"])
    assert (hdr.owner, hdr.attached, hdr.batches) == ("", True, 1)  # the defaults


def test_an_environment_that_cannot_be_opened_names_its_path(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(StorageError) as ei:
        LmdbLive(str(tmp_path / "file" / "live"))
    assert str(ei.value).startswith(f"{tmp_path / 'file' / 'live'}: cannot open the live stream table: ")


def test_a_full_map_doubles(tmp_path: Path) -> None:
    live = LmdbLive(str(tmp_path / "live"), map_size=64 << 10)
    live.write("t", 1, [bytes(range(256)) * 64 for _ in range(10)])  # 160 KiB
    size = live._env.info()["map_size"]
    assert size > 64 << 10 and size % (64 << 10) == 0 and (size // (64 << 10)) & (size // (64 << 10) - 1) == 0
    hdr, out = live.read("t")
    assert hdr is not None and hdr.batches == 10 and len(out) == 10


def test_lmdb_errors_name_the_live_table(tmp_path: Path) -> None:
    live = LmdbLive(str(tmp_path / "live"))
    live.write("t", 1, [b"a"])
    real = live._env

    class _Env:  # py-lmdb failing to begin a transaction (EIO): cannot be made to happen on demand
        def __getattr__(self, attr: str) -> Any:
            if attr == "begin":
                def begin(**kw: Any) -> Any:
                    raise lmdb.Error("mdb_txn_begin: Input/output error")
                return begin
            return getattr(real, attr)

    live._env = _Env()  # type: ignore[assignment]
    try:
        for call in (lambda: live.write("t", 1, [b"b"]), lambda: live.read("t")):
            with pytest.raises(StorageError) as ei:
                call()
            assert str(ei.value) == f"{live.path}: the live stream table failed: mdb_txn_begin: Input/output error"
    finally:
        live._env = real


def test_a_map_resized_twenty_times_in_a_row_is_an_error_naming_the_table(tmp_path: Path) -> None:
    live = LmdbLive(str(tmp_path / "live"))
    real = live._env
    calls = 0

    class _Env:
        def __getattr__(self, attr: str) -> Any:
            if attr == "begin":
                def begin(**kw: Any) -> Any:
                    nonlocal calls
                    calls += 1
                    raise lmdb.MapResizedError("mdb_txn_begin: MDB_MAP_RESIZED")
                return begin
            return getattr(real, attr)

    live._env = _Env()  # type: ignore[assignment]
    try:
        for call in (lambda: live.write("t", 1, [b"b"]), lambda: live.read("t")):
            calls = 0
            with pytest.raises(StorageError) as ei:
                call()
            assert calls == 20
            assert str(ei.value) == f"{live.path}: the live stream table kept being resized"
    finally:
        live._env = real


def test_sweep_counts_every_stream_it_drops(tmp_path: Path) -> None:
    live = LmdbLive(str(tmp_path / "live"))
    for tid in ("a", "b", "c"):
        live.write(tid, 1, [b"x"], done=tid != "c")
    now = time.time_ns() + 1
    assert live.sweep(done_before=now, stale_before=0) == 2  # the two done streams; "c" is fresh
    assert live.read("a") == (None, []) and live.read("b") == (None, [])
    assert live.read("c")[0] is not None


def test_sweep_keeps_a_stream_rewritten_after_it_looked(tmp_path: Path) -> None:
    """sweep() finds expired streams in a read transaction, then drops them in a write one; a stream
    written in between (here: just before the write transaction begins) is no longer expired."""
    live = LmdbLive(str(tmp_path / "live"))
    live.write("a", 1, [b"x"], done=True)
    live.write("b", 1, [b"x"], done=True)
    real = live._env

    class _Env:  # another writer refreshes "a" between sweep's two transactions
        def __getattr__(self, attr: str) -> Any:
            if attr == "begin":
                def begin(**kw: Any) -> Any:
                    if kw.get("write"):
                        with real.begin(write=True) as txn:
                            hdr = LiveHeader(turn_seq=1, batches=1, done=True, updated_ns=time.time_ns() + 10**12)
                            txn.put(tkey("a") + u64(0), msgspec.msgpack.encode(hdr))
                    return real.begin(**kw)
                return begin
            return getattr(real, attr)

    now = time.time_ns() + 1
    live._env = _Env()  # type: ignore[assignment]
    try:
        assert live.sweep(done_before=now, stale_before=0) == 1
    finally:
        live._env = real
    assert live.read("a")[0] is not None and live.read("b") == (None, [])
