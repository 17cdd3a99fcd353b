"""Golden files pin the stored event format forever.

``tests/golden/events-v1.bin`` holds raw stored values written by format v1
(made once by ``tools/make_golden.py``; never regenerate them to make this
pass). Every later version of tplog must verify and decode them to exactly the
events in ``events-v1.json``, and a store holding them must read them back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

import tplog
from tplog._codec import FORMAT, Codec
from tplog._events import EVENT_TYPES
from tplog._keys import TKEY_SIZE, event_key, from_u64, tkey, u64
from tplog._store import Store

GOLDEN = Path(__file__).parent / "golden"


def _load() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    records = msgspec.msgpack.decode((GOLDEN / "events-v1.bin").read_bytes())
    expected = json.loads((GOLDEN / "events-v1.json").read_text())
    return records, expected


RECORDS, EXPECTED = _load()
PAIRS = list(zip(RECORDS, EXPECTED["events"], strict=True))


def _j(obj: Any) -> Any:
    """As JSON would hold it (tuples become lists)."""
    return json.loads(json.dumps(obj))


def _decode(codec: Codec, rec: dict[str, Any]) -> tuple[Any, Any]:
    key, value = rec["key"], rec["value"]
    codec.check(key, value)
    hdr = codec.header(value)
    return hdr, codec.decode_event(codec.body_bytes(value))


def test_golden_files_cover_every_event_type() -> None:
    assert EXPECTED["format"] == FORMAT == 1
    assert len(RECORDS) == len(EXPECTED["events"])
    assert {e["kind"] for e in EXPECTED["events"]} == {c.__struct_config__.tag for c in EVENT_TYPES}
    assert {r["value"][1] for r in RECORDS} == {0, 1}  # plain and zstd bodies
    assert all(r["value"][0] == 1 for r in RECORDS)
    tk = tkey(EXPECTED["thread_id"])
    assert [r["key"] for r in RECORDS] == [event_key(tk, r["seq"]) for r in RECORDS]


@pytest.mark.parametrize("rec,exp", PAIRS, ids=[f"{e['seq']:02d}-{e['kind']}" for e in EXPECTED["events"]])
def test_golden_value_decodes(rec: dict[str, Any], exp: dict[str, Any]) -> None:
    codec = Codec()
    hdr, ev = _decode(codec, rec)
    assert (hdr.kind, hdr.event_id, hdr.recorded_at) == (exp["kind_code"], exp["event_id"], exp["recorded_at"])
    assert EVENT_TYPES[hdr.kind] is type(ev)
    assert ev.__struct_config__.tag == exp["kind"]
    assert rec["value"][1] == exp["flags"]
    assert _j(msgspec.to_builtins(hdr.facts)) == exp["facts"]
    # The stored Struct, field for field (UNSET vs null, extra, extension tags).
    assert _j(msgspec.to_builtins(ev)) == exp["struct"]
    # The current encoder still writes the same body for it.
    assert codec.encode_body(ev) == codec.body_bytes(rec["value"])


@pytest.mark.parametrize("rec,exp", PAIRS, ids=[f"{e['seq']:02d}-{e['kind']}" for e in EXPECTED["events"]])
def test_golden_value_as_protocol_json(rec: dict[str, Any], exp: dict[str, Any]) -> None:
    _, ev = _decode(Codec(), rec)
    assert _j(tplog.to_builtins(ev)) == exp["event"]


def test_golden_detects_tampering() -> None:
    codec = Codec()
    rec = RECORDS[3]
    bad = bytearray(rec["value"])
    bad[-1] ^= 1
    with pytest.raises(tplog.CorruptionError):
        codec.check(rec["key"], bytes(bad))
    with pytest.raises(tplog.CorruptionError):
        codec.check(RECORDS[4]["key"], rec["value"])  # right value, wrong key


def test_store_reads_golden_values(tmp_path: Path) -> None:
    """Values planted through the engine (as a v1 store would hold them) read back."""
    tid = EXPECTED["thread_id"]
    s = Store(tmp_path / "s")
    try:
        # one real append creates the thread's head; then swap in the golden log
        s.append(tid, [tplog.ThreadStarted(thread_id=tid, created_at="2025-01-20T10:00:00Z")])
        n = len(RECORDS)

        def plant(txn: Any) -> None:
            head = msgspec.msgpack.decode(txn.get("heads", tkey(tid)))
            for k, _ in list(txn.range("eventids")):
                txn.delete("eventids", k)
            for k, _ in list(txn.range("global")):
                txn.delete("global", k)
            for r, e in PAIRS:
                txn.put("events", r["key"], r["value"])
                txn.put("global", u64(r["seq"]), r["key"])
                txn.put("eventids", e["event_id"].encode(), r["key"] + u64(r["seq"]))
            head[1], head[2] = n, n  # version, last_position
            txn.put("heads", tkey(tid), msgspec.msgpack.encode(head))

        s.engine.run_write(plant)
        evs = s.read(tid)
        assert [e.seq for e in evs] == list(range(1, n + 1))
        assert [e.event_id for e in evs] == [e["event_id"] for e in EXPECTED["events"]]
        assert [e.recorded_at for e in evs] == [e["recorded_at"] for e in EXPECTED["events"]]
        assert [_j(msgspec.to_builtins(e.event)) for e in evs] == [e["struct"] for e in EXPECTED["events"]]
        assert s.read_all() == evs
        assert from_u64(RECORDS[0]["key"], TKEY_SIZE) == 1
    finally:
        s.close()
