"""Reads of whole events and of the bodies ``items`` needs (tplog/backends/lmdb/reads.py
`thread_events`/`_events_of` and `items`; written for their surviving mutants, tests/MUTANTS.md):
``thread_events``' ``after`` (inside the thread, past its version), its error for an unknown
thread, a blob-stored body, a damaged single row named by thread and seq; ``items`` of a value
written before format 3 whose turn-boundary body is a shared blob, is missing its blob, or
does not decode. Real LMDB files; the older values are golden format-2 values, rewritten with
valid CRCs.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
from conftest import ToyStore as Store
from conftest import agent_start, completed, link, response, started, user

from tplog import CorruptionError, Limits, NotFoundError
from tplog.backends.lmdb.keys import event_key, tkey

EVENTS = [started("t"), user("q"), agent_start(), response("r"), completed(), user("open"), link("u")]


def _store(path: Path, **options: Any) -> Store:
    s = Store(path, **options)
    s.append("t", EVENTS[:5])  # a chunk
    s.append("t", EVENTS[5:])  # seqs 6, 7: single rows
    return s


@pytest.mark.parametrize("after", [0, 3, 5, 6, 7, 8, 100])
def test_thread_events_after_a_seq_of_the_thread_or_past_its_version(tmp_path: Path, after: int) -> None:
    """Past the thread's version the caller's fold is of another life of the id: every event."""
    with _store(tmp_path / "s") as s:
        head, events = s.backend.thread_events("t", after=after)
        assert head.version == 7
        assert events == (EVENTS[after:] if after <= 7 else EVENTS)


def test_thread_events_of_an_unknown_thread_names_it(tmp_path: Path) -> None:
    with _store(tmp_path / "s") as s, pytest.raises(NotFoundError) as exc:
        s.backend.thread_events("nope")
    assert str(exc.value) == "thread nope does not exist"


def test_thread_events_read_a_body_stored_as_a_shared_blob(tmp_path: Path) -> None:
    big = response("long answer " * 600)  # over the blob threshold: a single row with a blob reference
    with Store(tmp_path / "s", limits=Limits(blob_threshold=4096)) as s:
        s.append("t", [started("t"), user("q"), agent_start(), big])
        assert s.stats()["tables"]["blobs"]["entries"] == 1
        assert s.backend.thread_events("t")[1] == [started("t"), user("q"), agent_start(), big]
        assert s.backend.thread_events("t", after=3)[1] == [big]


def test_thread_events_name_a_damaged_single_row_by_thread_and_seq(tmp_path: Path) -> None:
    """A body CRC that fails (``thread_events`` decodes bodies, never a single row's header)."""
    path = tmp_path / "s"
    _store(path).close()
    key = event_key(tkey("t"), 7)
    with Store(path) as s:
        def damage(txn: Any) -> None:
            v = bytearray(txn.get("events", key))
            v[-6] ^= 0x01
            txn.put("events", key, bytes(v))

        s.backend.engine.run_write(damage)
        for after in (0, 6):
            with pytest.raises(CorruptionError) as exc:
                s.backend.thread_events("t", after=after)
            assert (exc.value.thread_id, exc.value.seq) == ("t", 7)


# --------------------------------------------------------------------------- items of format-2 values


def _planted_v2(s: Store) -> tuple[str, int, bytes, bytes]:
    """The golden format-2 thread planted in ``s``; (thread id, seq, key, value) of its first
    agent-turn boundary, whose header has no ``turn``: ``items`` reads its body."""
    from test_golden import GOLDEN_SETS, _plant

    from tplog.backends.lmdb.projections import BODY_KINDS

    records, expected = GOLDEN_SETS[2]
    pairs = [(r, e) for r, e in zip(records, expected["events"], strict=True) if e["kind"] != "thread_deleted"]
    tid = expected["thread_id"]
    _plant(s, tid, pairs)
    seq = next(seq for seq, hdr, _ in s.backend.iter_thread_values(tid) if hdr.kind in BODY_KINDS and hdr.turn is None)
    key = event_key(tkey(tid), seq)
    with s.backend.engine.read() as txn:
        value = bytes(txn.get("events", key))
    assert value[0] == 2
    return tid, seq, key, value


def _with_body(key: bytes, value: bytes, flags: int, body: bytes) -> bytes:
    """``value`` (format 2) with another stored body and its CRC (the header and its CRC kept)."""
    end = 12 + int.from_bytes(value[10:12], "big")
    return (value[:1] + bytes([flags]) + (0).to_bytes(4, "big") + value[6:end] + body
            + zlib.crc32(key, zlib.crc32(body)).to_bytes(4, "big"))


def _move_body_to_blob(s: Store, key: bytes, value: bytes, *, keep_blob: bool) -> None:
    """Rewrite the format-2 value at ``key`` to reference its body as a shared blob (stored only if
    ``keep_blob``: else the reference dangles)."""
    data = bytes(s.codec.body_bytes(value))
    sha = hashlib.sha256(data).digest()
    stored = struct.pack(">IBII", 1, 0, 0, zlib.crc32(sha, zlib.crc32(data))) + data

    def to_blob(txn: Any) -> None:
        txn.put("events", key, _with_body(key, value, 2, sha))
        if keep_blob:
            txn.put("blobs", sha, stored)

    s.backend.engine.run_write(to_blob)


@pytest.mark.parametrize("blob", ["present", "missing"])
def test_items_read_a_format_2_turn_boundary_whose_body_is_a_shared_blob(tmp_path: Path, blob: str) -> None:
    with Store(tmp_path / "s") as s:
        tid, seq, key, value = _planted_v2(s)
        want = s.backend.items(tid)
        _move_body_to_blob(s, key, value, keep_blob=blob == "present")
        if blob == "present":
            got = s.backend.items(tid)
            assert got == want
            assert next(it for it in got if it.seq == seq).event is not None
        else:
            with pytest.raises(CorruptionError) as exc:
                s.backend.items(tid)
            assert (str(exc.value), exc.value.thread_id, exc.value.seq) == (
                f"the event's shared blob is missing (thread {tid}, seq {seq})", tid, seq)


def test_items_name_a_format_2_turn_boundary_whose_body_does_not_decode(tmp_path: Path) -> None:
    """Its CRCs hold (the body's rewritten with it), but the body is no msgpack."""
    with Store(tmp_path / "s") as s:
        tid, seq, key, value = _planted_v2(s)
        s.backend.engine.run_write(lambda txn: txn.put("events", key, _with_body(key, value, 0, b"\xc1")))
        with pytest.raises(CorruptionError) as exc:
            s.backend.items(tid)
        assert (exc.value.thread_id, exc.value.seq) == (tid, seq)
