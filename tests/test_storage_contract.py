"""The LMDB backend's key/value engine (tplog/backends/lmdb/engine.py ``LmdbEngine``).

What the backend's modules rely on, tested through the engine's own verbs: named ordered
tables of bytes, ``read()`` snapshots, ``run_write(fn)`` all-or-nothing, ``try_lock(name)``
advisory locks that die with their holder. (The other backends are checked against the
recorder contract instead: tests/backends.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tplog.backends.lmdb.engine import TABLES, LmdbEngine
from tplog.errors import ReadOnlyError, StorageError, StorageFullError, StoreClosedError

SMALL = 64 * 1024


def _lmdb(path: Path, **kw: Any) -> LmdbEngine:
    return LmdbEngine(str(path), **kw)


ENGINES: dict[str, Callable[..., Any]] = {"lmdb": _lmdb}


@pytest.fixture(params=sorted(ENGINES))
def make_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """Factory ``make_engine(name="e", **options)``; every engine is closed at teardown."""
    opened: list[Any] = []

    def factory(name: str = "e", **kw: Any) -> Any:
        e = ENGINES[request.param](tmp_path / name, **kw)
        opened.append(e)
        return e

    yield factory
    for e in reversed(opened):
        e.close()


@pytest.fixture
def engine(make_engine: Callable[..., Any]) -> Any:
    return make_engine()


def _fill(engine: Any, table: str = "events", keys: list[bytes] | None = None) -> list[bytes]:
    keys = keys if keys is not None else [bytes([i]) * 2 for i in range(1, 10)]  # 0101 .. 0909

    def fn(txn: Any) -> None:
        for k in keys:
            txn.put(table, k, b"v" + k)

    engine.run_write(fn)
    return sorted(keys)


def _all(engine: Any, table: str, **kw: Any) -> list[tuple[bytes, bytes]]:
    with engine.read() as txn:
        return [(bytes(k), bytes(v)) for k, v in txn.range(table, **kw)]


def test_every_table_is_usable_and_independent(engine: Any) -> None:
    def fn(txn: Any) -> None:
        for i, t in enumerate(TABLES):
            txn.put(t, b"k", t.encode() + bytes([i]))

    engine.run_write(fn)
    with engine.read() as txn:
        for i, t in enumerate(TABLES):
            assert txn.get(t, b"k") == t.encode() + bytes([i])
            assert txn.get(t, b"missing") is None


def test_put_get_overwrite_delete(engine: Any) -> None:
    engine.run_write(lambda txn: txn.put("heads", b"a", b"1"))
    engine.run_write(lambda txn: txn.put("heads", b"a", b"2"))  # overwrite
    with engine.read() as txn:
        assert txn.get("heads", b"a") == b"2"
    assert engine.run_write(lambda txn: txn.delete("heads", b"a")) is True
    assert engine.run_write(lambda txn: txn.delete("heads", b"a")) is False
    with engine.read() as txn:
        assert txn.get("heads", b"a") is None
    big = bytes(range(256)) * 400  # values larger than a page
    engine.run_write(lambda txn: txn.put("blobs", b"big", big))
    with engine.read() as txn:
        assert bytes(txn.get("blobs", b"big")) == big


def test_writes_are_visible_inside_their_own_transaction(engine: Any) -> None:
    def fn(txn: Any) -> Any:
        txn.put("global", b"\x00\x01", b"x")
        seen = (txn.get("global", b"\x00\x01"), txn.last("global"), list(txn.range("global")))
        txn.delete("global", b"\x00\x01")
        return seen, txn.get("global", b"\x00\x01")

    (got, last, rng), after = engine.run_write(fn)
    assert (bytes(got), tuple(map(bytes, last)), [(bytes(k), bytes(v)) for k, v in rng]) == (
        b"x", (b"\x00\x01", b"x"), [(b"\x00\x01", b"x")])
    assert after is None


def test_range_forward_with_bounds(engine: Any) -> None:
    keys = _fill(engine)
    assert [k for k, _ in _all(engine, "events")] == keys
    assert all(v == b"v" + k for k, v in _all(engine, "events"))
    assert [k for k, _ in _all(engine, "events", start=b"\x03\x03")] == keys[2:]
    assert [k for k, _ in _all(engine, "events", start=b"\x03")] == keys[2:]  # between keys
    assert [k for k, _ in _all(engine, "events", start=b"\x03\x03", end=b"\x06\x06")] == keys[2:5]  # [start, end)
    assert [k for k, _ in _all(engine, "events", start=b"\x03\x03", end=b"\x06")] == keys[2:5]
    assert [k for k, _ in _all(engine, "events", end=b"\x02\x02")] == keys[:1]
    assert _all(engine, "events", start=b"\x0a") == []
    assert _all(engine, "events", start=b"\x05", end=b"\x05") == []
    assert _all(engine, "events", start=b"\x06", end=b"\x05") == []
    assert _all(engine, "heads") == []  # empty table


def test_range_backward_with_bounds(engine: Any) -> None:
    keys = _fill(engine)
    rev = keys[::-1]

    def back(**kw: Any) -> list[bytes]:
        return [k for k, _ in _all(engine, "events", reverse=True, **kw)]

    assert back() == rev
    assert back(end=b"\x06\x06") == rev[4:]  # keys < end
    assert back(end=b"\x06") == rev[4:]  # end between keys
    assert back(end=b"\xff") == rev  # end past the last key
    assert back(end=b"\x01\x01") == []  # nothing below the first key
    assert back(start=b"\x03\x03") == rev[:7]  # keys >= start
    assert back(start=b"\x03\x03", end=b"\x06\x06") == [b"\x05\x05", b"\x04\x04", b"\x03\x03"]
    assert back(start=b"\x03", end=b"\x06") == [b"\x05\x05", b"\x04\x04", b"\x03\x03"]
    assert back(start=b"\x0a") == []
    with engine.read() as txn:
        assert list(txn.range("heads", reverse=True)) == []


def test_range_orders_keys_as_unsigned_bytes(engine: Any) -> None:
    keys = [b"\xff", b"\x00", b"\x80", b"\x7f", b"\x00\x00", b"\x01", b"\x80\x00"]
    _fill(engine, "updated", keys)
    assert [k for k, _ in _all(engine, "updated")] == sorted(keys)
    assert [k for k, _ in _all(engine, "updated", reverse=True)] == sorted(keys, reverse=True)


def test_last(engine: Any) -> None:
    with engine.read() as txn:
        assert txn.last("global") is None
    _fill(engine, "global")
    with engine.read() as txn:
        k, v = txn.last("global")
        assert (bytes(k), bytes(v)) == (b"\x09\x09", b"v\x09\x09")


def test_run_write_is_all_or_nothing(engine: Any) -> None:
    _fill(engine)
    before = {t: _all(engine, t) for t in TABLES}

    class Boom(Exception):
        pass

    def fn(txn: Any) -> None:
        txn.put("events", b"new", b"x")
        txn.delete("events", b"\x01\x01")
        txn.put("heads", b"h", b"y")
        raise Boom

    with pytest.raises(Boom):
        engine.run_write(fn)
    assert {t: _all(engine, t) for t in TABLES} == before
    assert engine.run_write(lambda txn: 42) == 42  # the engine still works afterwards


def test_read_is_a_snapshot(engine: Any) -> None:
    engine.run_write(lambda txn: txn.put("meta", b"k", b"old"))
    with engine.read() as txn:
        engine.run_write(lambda t: t.put("meta", b"k", b"new"))  # another writer commits meanwhile
        engine.run_write(lambda t: t.put("meta", b"k2", b"x"))
        assert txn.get("meta", b"k") == b"old"
        assert txn.get("meta", b"k2") is None
    with engine.read() as txn:
        assert txn.get("meta", b"k") == b"new"


def test_map_grows_and_writes_are_retried(make_engine: Callable[..., Any]) -> None:
    e = make_engine(map_size=SMALL)
    size0 = e.info()["map_size"]
    calls = 0
    value = bytes(range(256)) * 16  # 4 KiB

    def fn(txn: Any) -> int:
        nonlocal calls
        calls += 1
        for i in range(200):  # ~800 KiB in one transaction
            txn.put("events", i.to_bytes(4, "big"), value)
        return i

    stop = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            while not stop.is_set():
                with e.read() as txn:
                    list(txn.range("events"))
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=reader)
    t.start()
    try:
        assert e.run_write(fn) == 199
        for j in range(20):  # more, smaller writes keep growing it
            e.run_write(lambda txn, j=j: txn.put("blobs", j.to_bytes(4, "big"), value * 8))
    finally:
        stop.set()
        t.join(30)
    assert not errors, errors
    assert calls > 1  # fn ran again after the map grew
    assert e.info()["map_size"] > size0
    rows = _all(e, "events")
    assert len(rows) == 200 and all(v == value for _, v in rows)
    assert len(_all(e, "blobs")) == 20
    assert e.info()["tables"]["events"]["entries"] == 200


def test_max_map_size_is_storage_full_and_nothing_written(make_engine: Callable[..., Any]) -> None:
    e = make_engine(map_size=SMALL, max_map_size=2 * SMALL)
    e.run_write(lambda txn: txn.put("meta", b"keep", b"1"))
    value = b"x" * 4096

    def fn(txn: Any) -> None:
        txn.put("meta", b"keep", b"2")
        for i in range(200):
            txn.put("events", i.to_bytes(4, "big"), value)

    with pytest.raises(StorageFullError):
        e.run_write(fn)
    assert _all(e, "events") == []
    assert _all(e, "meta") == [(b"keep", b"1")]
    e.run_write(lambda txn: txn.put("meta", b"after", b"ok"))  # small writes still fit


def test_backup(make_engine: Callable[..., Any], tmp_path: Path) -> None:
    e = make_engine()
    _fill(e)
    _fill(e, "heads", [b"h1", b"h2"])
    for compact in (True, False):
        dest = tmp_path / f"copy-{compact}"
        e.backup(str(dest), compact=compact)
        c = make_engine(f"copy-{compact}")
        for t in TABLES:
            assert _all(c, t) == _all(e, t)
    with pytest.raises(StorageError):
        e.backup(str(tmp_path / "copy-True"))  # destination not empty


def test_readonly_engine(make_engine: Callable[..., Any]) -> None:
    w = make_engine("ro")
    _fill(w)
    w.close()
    r = make_engine("ro", readonly=True)
    assert _all(r, "events") == [(bytes([i]) * 2, b"v" + bytes([i]) * 2) for i in range(1, 10)]
    with pytest.raises(ReadOnlyError):
        r.run_write(lambda txn: txn.put("events", b"k", b"v"))


def test_closed_engine(make_engine: Callable[..., Any]) -> None:
    e = make_engine()
    e.close()
    e.close()
    with pytest.raises(StoreClosedError):
        e.run_write(lambda txn: None)
    with pytest.raises(StoreClosedError), e.read():
        pass


_LOCK_HOLDER = """
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from test_storage_contract import ENGINES
engine = ENGINES[sys.argv[2]](Path(sys.argv[3]))
lock = engine.try_lock("job")
print("held" if lock is not None else "busy", flush=True)
time.sleep(60)
"""


def test_try_lock_is_exclusive_until_released_or_its_holder_dies(
        make_engine: Callable[..., Any], request: pytest.FixtureRequest, tmp_path: Path) -> None:
    e = make_engine()
    first = e.try_lock("job")
    assert first is not None
    assert e.try_lock("job") is None  # held, even by this process
    other = e.try_lock("other-job")  # names are independent
    assert other is not None
    first.release()
    first.release()  # twice is harmless
    again = e.try_lock("job")
    assert again is not None
    again.release()
    other.release()
    with pytest.raises(ValueError, match="lock name"):
        e.try_lock("../escape")

    # Another process: its lock holds this one off; killed, it holds nothing.
    engine_name = request.node.callspec.params["make_engine"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    holder = subprocess.Popen([sys.executable, "-c", _LOCK_HOLDER, str(Path(__file__).parent), engine_name,
                               str(tmp_path / "e")], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert e.try_lock("job") is None
    finally:
        holder.kill()
        holder.wait()
    after = e.try_lock("job")
    assert after is not None
    after.release()


def test_try_lock_on_a_readonly_or_closed_engine(make_engine: Callable[..., Any]) -> None:
    w = make_engine("ro")
    _fill(w)
    w.close()
    with pytest.raises(StoreClosedError):
        w.try_lock("job")
    r = make_engine("ro", readonly=True)
    with pytest.raises(ReadOnlyError):
        r.try_lock("job")


def test_scan_is_a_bounded_range_in_one_snapshot(engine: Any) -> None:
    """``scan`` (the short-query path of links and children) returns what ``range``
    returns for the same bounds, runs ``check`` first in the same snapshot, and
    stops at ``limit``."""
    keys = _fill(engine)
    with engine.read() as txn:
        want = [(bytes(k), bytes(v)) for k, v in txn.range("events", b"\x03", b"\x07")]
    assert [(bytes(k), bytes(v)) for k, v in engine.scan("events", b"\x03", b"\x07")] == want
    assert len(want) == 4 and want[0][0] == keys[2]
    assert [k for k, _ in engine.scan("events", b"\x03", b"\x07", limit=2)] == [k for k, _ in want[:2]]
    assert engine.scan("events", b"\x0a", b"\xff") == []
    seen: list[object] = []
    engine.scan("events", b"", b"\xff", check=lambda txn: seen.append(txn.get("events", keys[0])))
    assert seen == [b"v" + keys[0]]

    def refuse(txn: Any) -> None:
        raise StorageError("check failed")

    with pytest.raises(StorageError):
        engine.scan("events", b"", b"\xff", check=refuse)
