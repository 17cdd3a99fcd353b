"""Dictionary training of the LMDB backend (tplog/backends/lmdb/maintenance.py) where
mutation testing found them unpinned (tests/MUTANTS.md): which bodies a dictionary is trained on
(the newest ``samples`` stored bodies of at most 64 KiB, blobs read through the transaction;
the background trainer takes 500), the background trainer a named daemon thread that adopts a
dictionary another handle trained meanwhile.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest
from conftest import ToyStore as Store
from conftest import started, user
from test_dictionary import _events

from tplog.backends.lmdb import chunks
from tplog.codec import Codec


def _stored_bodies(s: Store) -> list[bytes]:
    """Every stored body, newest first."""
    out: list[bytes] = []
    with s.backend.engine.read() as txn:
        rows = chunks.EventRows(txn, s.codec)
        for _pk, key in txn.range("global", b"", None, reverse=True):
            v = rows.get(key)
            assert v is not None
            out.append(bytes(s.codec.body_bytes(v, txn)))
    return out


def _newest_bodies(s: Store, samples: int) -> list[bytes]:
    """What a dictionary is trained on: stored bodies newest first, those over 64 KiB left out."""
    return [b for b in _stored_bodies(s) if len(b) <= 64 << 10][:samples]


def _text_for_body(path: Path, size: int) -> str:
    """A user message whose stored body is exactly ``size`` bytes (measured on a store of its own)."""
    text = "y" * (size - 200)
    for _ in range(4):
        with Store(path / str(len(text))) as p:
            p.append("p", [started("p"), user(text)])
            got = len(_stored_bodies(p)[0])
        if got == size:
            return text
        text = "y" * (len(text) + size - got)
    raise AssertionError(f"no message of body size {size}")


def _diverse(n: int, seed: int) -> list[Any]:
    """``n`` user messages of 600 seeded random letters: bodies varied enough that the trained
    dictionary depends on every sample and on its size limit (similar bodies give one dictionary
    whatever is added)."""
    r = random.Random(seed)
    return [user("".join(r.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(600))) for _ in range(n)]


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[list[bytes]]:
    """``Codec.train`` wrapped to record the samples it is given (the real one runs): zstd returns the
    same dictionary for 500 or 501 such bodies, so the bytes alone cannot tell the counts apart."""
    seen: list[list[bytes]] = []
    real = Codec.train

    def train(samples: list[bytes], size: int = 64 << 10) -> bytes:
        seen.append([bytes(b) for b in samples])
        return real(samples, size)

    monkeypatch.setattr(Codec, "train", staticmethod(train))
    return seen


def _dict(s: Store, i: int) -> bytes:
    with s.backend.engine.read() as txn:
        raw = txn.get("dicts", i.to_bytes(8, "big"))
        assert raw is not None
        return bytes(raw)


def test_a_dictionary_is_trained_on_the_newest_bodies_up_to_64_kib(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with Store(tmp_path / "s", auto_dictionary=0) as s:
        s.append("old", [started("old"), *_diverse(120, 1)])
        edge = _text_for_body(tmp_path / "probe", 64 << 10)  # exactly 64 KiB: taken
        over = _text_for_body(tmp_path / "probe", (64 << 10) + 500)  # just over: left out
        r = random.Random(2)
        s.append("big", [started("big"), user("".join(r.choice("0123456789") for _ in edge)),
                         user("".join(r.choice("0123456789") for _ in over)),
                         user("m" + os.urandom(50 << 10).hex()),  # 100 KiB: left out
                         user("b" + os.urandom(150 << 10).hex())])  # 300 KiB: a blob, left out
        s.append("new", [started("new"), *_diverse(40, 3)])
        with s.backend.engine.read() as txn:
            assert len(list(txn.range("blobs"))) == 1
        want = _newest_bodies(s, 64)
        assert len(want) == 64 and (64 << 10) in [len(b) for b in want]
        seen = _spy(monkeypatch)
        assert s.train_dictionary(samples=64, size=16 << 10) == 1
        assert seen == [want]
        assert _dict(s, 1) == Codec.train(want, 16 << 10)


def test_the_background_trainer_takes_the_newest_500_bodies_in_a_named_daemon_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _spy(monkeypatch)
    with Store(tmp_path / "s", auto_dictionary=600) as s:
        s.append("t", [started("t"), *_diverse(640, 4)])  # crosses 600: training starts
        trainer = s.backend._gc.trainer
        assert trainer is not None
        assert (trainer.name, trainer.daemon) == ("tplog-dictionary", True)
        trainer.join(60)
        assert s.codec.current_dict == 1
        assert seen == [_newest_bodies(s, 500)]
        assert _dict(s, 1) == Codec.train(_newest_bodies(s, 500), 64 << 10)


def test_the_background_trainer_adopts_a_dictionary_another_handle_trained(tmp_path: Path) -> None:
    """Two handles on one directory: ``a`` trains the first dictionary; ``b``, opened before it,
    crosses its threshold next and uses that one instead of training a second."""
    path = tmp_path / "s"
    a = Store(path, auto_dictionary=0)
    b = Store(path, auto_dictionary=200)
    try:
        a.append("t1", _events(150, "t1"))
        assert a.train_dictionary(samples=100) == 1
        assert b.codec.current_dict == 0
        b.append("t2", _events(100, "t2"))  # crosses 200
        trainer = b.backend._gc.trainer
        assert trainer is not None
        trainer.join(60)
        assert b.codec.current_dict == 1
        assert b.stats()["dictionaries"] == 1
    finally:
        b.close()
        a.close()


def test_a_dictionary_is_trained_on_2000_bodies_unless_told(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _spy(monkeypatch)
    with Store(tmp_path / "s", auto_dictionary=0) as s:
        s.append("t", [started("t"), *_diverse(2010, 5)])
        assert s.backend.train_dictionary() == 1  # the backend's own default (the facade passes its 2000)
        assert seen == [_newest_bodies(s, 2000)]
        assert _dict(s, 1) == Codec.train(_newest_bodies(s, 2000), 64 << 10)
