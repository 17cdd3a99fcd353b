"""zstd dictionaries: trained automatically from the store's own events once the log is
big enough (``auto_dictionary``), used for new values only, and found by processes that
opened the store before the dictionary existed."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path
from typing import Any

from conftest import ToyStore as Store
from conftest import exchange, started

SPAWN = mp.get_context("spawn")


def _events(n: int, tid: str) -> list[Any]:
    out: list[Any] = [started(tid)]
    i = 0
    while len(out) < n:
        out += exchange(f"question {i} about the weather in city {i % 17}", f"answer {i}: sunny, {i % 30} degrees " * 4)
        i += 1
    return out


def _dict_id(value: bytes) -> int:
    return int.from_bytes(value[2:6], "big")


def _values(s: Store) -> list[bytes]:
    with s.backend.engine.read() as txn:
        return [bytes(v) for _, v in txn.range("events")]


def test_first_dictionary_is_trained_in_the_background(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with Store(path, auto_dictionary=200) as s:
        s.append("t1", _events(150, "t1"))
        assert s.stats()["dictionaries"] == 0  # not yet: 150 < 200
        s.append("t2", _events(150, "t2"))  # crosses 200: training starts
        assert s.backend._gc.trainer is not None
        s.backend._gc.trainer.join(30)
        assert s.codec.current_dict == 1 and s.stats()["dictionaries"] == 1
        before = _values(s)
        s.append("t3", _events(60, "t3"))
        after = _values(s)
        assert all(_dict_id(v) == 0 for v in before)  # old values keep theirs
        new = [v for v in after if v not in before and v[1] & 1]
        assert new and all(_dict_id(v) == 1 for v in new)
        first = [e.event for e in s.read("t1")]
    with Store(path, auto_dictionary=200) as s:  # reopened: no second dictionary
        s.append("t4", _events(10, "t4"))
        assert s.stats()["dictionaries"] == 1
        assert [e.event for e in s.read("t1")] == first
        assert len(s.read("t3")) == len(_events(60, "t3"))


def test_auto_dictionary_off(tmp_path: Path) -> None:
    with Store(tmp_path / "s", auto_dictionary=0) as s:
        s.append("t1", _events(300, "t1"))
        assert s.backend._gc.trainer is None and s.stats()["dictionaries"] == 0


def _reader(path: str, ready: Any, go: Any, out: Any) -> None:
    with Store(path, readonly=True) as s:
        known = s.codec.current_dict
        ready.set()
        go.wait(60)
        events = s.read("t3")
        out.put((known, len(events), s.codec.has_dictionary(1)))


def test_a_process_opened_before_training_reads_the_new_values(tmp_path: Path) -> None:
    path = str(tmp_path / "s")
    with Store(path, auto_dictionary=0) as s:
        s.append("t1", _events(300, "t1"))
    ready, go, out = SPAWN.Event(), SPAWN.Event(), SPAWN.Queue()
    p = SPAWN.Process(target=_reader, args=(path, ready, go, out))
    p.start()
    try:
        assert ready.wait(60)
        with Store(path) as s:
            assert s.train_dictionary() == 1
            s.append("t3", _events(40, "t3"))
            assert any(_dict_id(v) == 1 for v in _values(s))
        go.set()
        known, n, has = out.get(timeout=60)
        assert (known, n, has) == (0, len(_events(40, "t3")), True)
    finally:
        go.set()
        p.join(60)


def test_appends_through_scoped_views_train_it_too(tmp_path: Path) -> None:
    with Store(tmp_path / "s", auto_dictionary=200) as s:
        view = s.scoped("tenant-a")
        view.append("t1", _events(250, "t1"))
        trainer = s.backend._gc.trainer
        assert trainer is not None
        trainer.join(30)
        assert s.stats()["dictionaries"] == 1 and view.codec.current_dict == 1
        assert len(view.read("t1")) == len(_events(250, "t1"))

