"""Golden files pin the stored event format forever.

``tests/golden/events-vN.bin`` holds raw stored values written by format N
(made once per format by ``tools/make_golden.py``; never regenerate them to
make this pass). Every later version of tplog must verify and decode them to
exactly the events in ``events-vN.json``, and a store holding them must read
them back. Format 1 (one CRC over the value) and format 2 (a header CRC and a
body CRC) are read but no longer written; format 3 (format 2 whose agent-turn
boundaries carry their fold fields in the header) is what appends write.
``chunks-v4.bin`` and ``chunks-v5.bin`` pin the LMDB chunk rows (formats 4 and 5: a closed
turn's events in one value, ``tplog/backends/lmdb/chunks.py``) holding those format-3 events.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

import tplog
import tplog.errors
import tplog.protocol.json
from tplog.backends.lmdb.chunks import CHUNK_FORMATS, INDEX_KINDS, chunk_events, chunk_index, chunk_recorded, expand
from tplog.backends.lmdb.keys import TKEY_SIZE, event_key, from_u64, tkey, u64
from tplog.backends.lmdb.rebuild import items_in, scan_keys
from tplog.codec import FORMAT, FORMATS, PREFIX_SIZE, Codec, header_end, verified_header_end
from tplog.events import EVENT_TYPES
from tplog.projections.fold import interrupts_of, items_from_events, pending_of, state_of
from tplog.store import Store
from tplog.verify import verify_store

GOLDEN = Path(__file__).parent / "golden"


def _load(version: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    records = msgspec.msgpack.decode((GOLDEN / f"events-v{version}.bin").read_bytes())
    expected = json.loads((GOLDEN / f"events-v{version}.json").read_text())
    return records, expected


GOLDEN_SETS = {v: _load(v) for v in FORMATS}
PAIRS = [(v, rec, exp) for v, (records, expected) in GOLDEN_SETS.items()
         for rec, exp in zip(records, expected["events"], strict=True)]
PAIR_IDS = [f"v{v}-{exp['seq']:02d}-{exp['kind']}" for v, _, exp in PAIRS]


def _j(obj: Any) -> Any:
    """As JSON would hold it (tuples become lists)."""
    return json.loads(json.dumps(obj))


def _decode(codec: Codec, rec: dict[str, Any]) -> tuple[Any, Any]:
    key, value = rec["key"], rec["value"]
    codec.check(key, value)
    hdr = codec.header(value)
    return hdr, codec.decode_event(codec.body_bytes(value))


def test_every_readable_format_has_golden_files_and_the_newest_is_written() -> None:
    assert FORMATS == (1, 2, 3) and max(FORMATS) == FORMAT
    assert sorted(GOLDEN_SETS) == list(FORMATS)


@pytest.mark.parametrize("version", FORMATS)
def test_golden_files_cover_every_event_type(version: int) -> None:
    records, expected = GOLDEN_SETS[version]
    assert expected["format"] == version
    assert len(records) == len(expected["events"])
    assert {e["kind"] for e in expected["events"]} == {c.__struct_config__.tag for c in EVENT_TYPES}
    assert {r["value"][1] for r in records} == {0, 1}  # plain and zstd bodies
    assert all(r["value"][0] == version for r in records)
    tk = tkey(expected["thread_id"])
    assert [r["key"] for r in records] == [event_key(tk, r["seq"]) for r in records]


@pytest.mark.parametrize("version,rec,exp", PAIRS, ids=PAIR_IDS)
def test_golden_value_decodes(version: int, rec: dict[str, Any], exp: dict[str, Any]) -> None:
    codec = Codec()
    hdr, ev = _decode(codec, rec)
    assert (hdr.kind, hdr.event_id, hdr.recorded_at) == (exp["kind_code"], exp["event_id"], exp["recorded_at"])
    assert EVENT_TYPES[hdr.kind] is type(ev)
    assert ev.__struct_config__.tag == exp["kind"]
    assert rec["value"][1] == exp["flags"]
    assert _j(msgspec.to_builtins(hdr.facts)) == exp["facts"]
    assert _j(msgspec.to_builtins(hdr.turn)) == exp.get("turn")  # format 3 on; None before
    # The stored Struct, field for field (UNSET vs null, extra, extension tags).
    assert _j(msgspec.to_builtins(ev)) == exp["struct"]
    # The current encoder still writes the same body for it.
    assert codec.encode_body(ev) == codec.body_bytes(rec["value"])
    # The current decoder's one-call path agrees.
    assert _j(msgspec.to_builtins(codec.decode_value(rec["key"], rec["value"]))) == exp["struct"]


@pytest.mark.parametrize("version,rec,exp", PAIRS, ids=PAIR_IDS)
def test_golden_value_as_protocol_json(version: int, rec: dict[str, Any], exp: dict[str, Any]) -> None:
    _, ev = _decode(Codec(), rec)
    assert _j(tplog.protocol.json.to_builtins(ev)) == exp["event"]


@pytest.mark.parametrize("version", FORMATS)
def test_golden_detects_tampering(version: int) -> None:
    codec = Codec()
    records, _ = GOLDEN_SETS[version]
    rec = records[3]
    hlen = int.from_bytes(rec["value"][10:12], "big")
    for at in (12, 12 + hlen, len(rec["value"]) - 1):  # the header, the body, the last byte
        bad = bytearray(rec["value"])
        bad[at] ^= 1
        with pytest.raises(tplog.errors.CorruptionError, match="CRC"):
            codec.check(rec["key"], bytes(bad))
        with pytest.raises(tplog.errors.CorruptionError, match="CRC"):
            codec.decode_value(rec["key"], bytes(bad))
    bad = bytearray(rec["value"])
    bad[12] ^= 1
    with pytest.raises(tplog.errors.CorruptionError, match="CRC"):  # what a header-only reader verifies
        codec.check_header(rec["key"], bytes(bad))
    for cut in (len(rec["value"]) - 2, 12 + hlen - 1, 11, 0):
        with pytest.raises(tplog.errors.CorruptionError):
            codec.check(rec["key"], rec["value"][:cut])
        if cut < 12 + hlen:  # a header-only check cannot see a cut body (it is verified when read)
            with pytest.raises(tplog.errors.CorruptionError):
                codec.check_header(rec["key"], rec["value"][:cut])
    with pytest.raises(tplog.errors.CorruptionError):
        codec.check(records[4]["key"], rec["value"])  # right value, wrong key
    with pytest.raises(tplog.errors.CorruptionError):
        codec.check_header(records[4]["key"], rec["value"])
    codec.check(rec["key"], rec["value"])
    codec.check_header(rec["key"], rec["value"])


def _plant(s: Store, tid: str, pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
    """Make ``pairs`` (golden record, expected) thread ``tid``'s whole log, as a store
    that wrote them would hold them: one real append creates the head, then the log is swapped."""
    s.append(tid, [tplog.ThreadStarted(thread_id=tid, created_at="2025-01-20T10:00:00Z")])
    n = len(pairs)

    def plant(txn: Any) -> None:
        head = msgspec.msgpack.decode(txn.get("heads", tkey(tid)))
        for k, _ in list(txn.range("eventids")):
            txn.delete("eventids", k)
        for k, _ in list(txn.range("global")):
            txn.delete("global", k)
        for r, e in pairs:
            txn.put("events", r["key"], r["value"])
            txn.put("global", u64(r["seq"]), r["key"])
            txn.put("eventids", e["event_id"].encode(), r["key"] + u64(r["seq"]))
        head[1], head[2] = n, n  # version, last_position
        txn.put("heads", tkey(tid), msgspec.msgpack.encode(head))

    s.backend.engine.run_write(plant)


@pytest.mark.parametrize("version", FORMATS)
def test_id_only_folds_agree_with_the_events_in_every_format(tmp_path: Path, version: int) -> None:
    """Pending calls and interrupts from stored values (format 3: agent-turn boundaries
    folded from the header's ``turn`` facts; before it, from their bodies) equal the fold
    of the decoded events, by each path that reads them: a rebuild's key-order scan, its
    catch-up over the global log, and a stale projection's per-thread read."""
    records, expected = GOLDEN_SETS[version]
    pairs = [(r, e) for r, e in zip(records, expected["events"], strict=True) if e["kind"] != "thread_deleted"]
    codec = Codec()
    events = [_decode(codec, r)[1] for r, _ in pairs]
    want = state_of(items_from_events(events))
    assert want.open_calls and want.facts and want.abandoned is not None  # the golden turns exercise the fold
    assert any(c.state == "deferred" and c.kind == "approval" for c in want.open_calls.values())
    assert any(f.source == "turn" and f.reason == "user_cancelled" for f in want.facts)
    tid = expected["thread_id"]
    with Store(tmp_path / "s") as s:
        _plant(s, tid, pairs)
        assert state_of(s._items(tid)) == want  # the per-thread read a stale projection falls back on
        with s.backend.engine.read() as txn:  # the rebuild's key-order scan ...
            chunk = scan_keys(txn, s.codec, b"", 10**6, True, True, None)
            assert chunk.states[tkey(tid)] == want
            got, *_ = items_in(txn, s.codec, 1, 10**6)  # ... and its catch-up over the global log
        assert state_of(it for _, _, _, it, _ in got) == want
        s.rebuild()
        assert s.pending(tid) == pending_of(want) and s.interrupts(tid) == interrupts_of(want)


@pytest.mark.parametrize("version", FORMATS)
def test_store_reads_golden_values(tmp_path: Path, version: int) -> None:
    """Values planted through the engine (as a store of that format would hold them) read
    back, are verified by `tplog verify`, and fold in a rebuild."""
    RECORDS, EXPECTED = GOLDEN_SETS[version]
    pairs = list(zip(RECORDS, EXPECTED["events"], strict=True))
    tid = EXPECTED["thread_id"]
    s = Store(tmp_path / "s")
    try:
        n = len(RECORDS)
        _plant(s, tid, pairs)
        evs = s.read(tid)
        assert [e.seq for e in evs] == list(range(1, n + 1))
        assert [e.event_id for e in evs] == [e["event_id"] for e in EXPECTED["events"]]
        assert [e.recorded_at for e in evs] == [e["recorded_at"] for e in EXPECTED["events"]]
        assert [_j(msgspec.to_builtins(e.event)) for e in evs] == [e["struct"] for e in EXPECTED["events"]]
        assert s.read_all() == evs
        assert from_u64(RECORDS[0]["key"], TKEY_SIZE) == 1
        reports = s.rebuild()
        assert {r.projection for r in reports} == {"links", "state"}
        assert all(r.events == n for r in reports)  # every value's header was read and verified
        assert all(r.differences == [] for r in s.rebuild(verify=True))
        rep = verify_store(s)
        assert rep.ok, rep.problems
    finally:
        s.close()


@pytest.mark.parametrize("version", FORMATS)
def test_the_rebuild_fast_path_checks_headers_as_the_codec_does(version: int) -> None:
    """``verified_header_end`` (the rebuild's per-event header check) accepts exactly the sound
    format-3 values; anything else goes to ``Codec.check_header``, which passes the older formats
    and raises on damage, so no value is folded unchecked."""
    codec = Codec()
    records, _ = GOLDEN_SETS[version]
    for rec in records:
        key, value = rec["key"], rec["value"]
        end = verified_header_end(key, value)
        if version == 3:
            assert end == header_end(value) == PREFIX_SIZE + int.from_bytes(value[10:12], "big")
            assert codec.header_decoder.decode(value[PREFIX_SIZE:end]) == codec.header(value)
        else:
            assert end == 0
        codec.check_header(key, value)  # every golden value is sound
        other_key = key[:-1] + bytes([key[-1] ^ 1])  # the same value under another key
        assert verified_header_end(other_key, value) == 0
        assert verified_header_end(key, value[:PREFIX_SIZE + 3]) == 0  # truncated
        bad = bytearray(value)
        bad[PREFIX_SIZE] ^= 1  # the header's first byte
        assert verified_header_end(key, bytes(bad)) == 0
        with pytest.raises(tplog.errors.CorruptionError):
            codec.check_header(key, bytes(bad))


# --------------------------------------------------------------------------- chunk rows (formats 4, 5)

CHUNK_SETS: dict[int, list[dict[str, Any]]] = {
    v: msgspec.msgpack.decode((GOLDEN / f"chunks-v{v}.bin").read_bytes()) for v in CHUNK_FORMATS}


def test_every_chunk_format_read_has_a_golden_file() -> None:
    assert sorted(CHUNK_SETS) == list(CHUNK_FORMATS) == [4, 5]


@pytest.mark.parametrize("version", CHUNK_FORMATS)
def test_golden_chunks_decode_to_the_v3_events(version: int) -> None:
    """``chunks-vN.bin`` (``tools/make_golden_chunks.py``: the events of ``events-v3.bin``
    as LMDB chunk rows, one compressed, one plain) expand to values that decode exactly as
    ``events-v3.json`` says, and the one-call decoders agree."""
    _, expected = GOLDEN_SETS[3]
    by_seq = {e["seq"]: e for e in expected["events"]}
    cs = CHUNK_SETS[version]
    assert [c["value"][0] for c in cs] == [version, version]
    assert cs[0]["value"][1] and not cs[1]["value"][1]  # one compressed, one plain
    codec = Codec()
    seen = []
    for c in cs:
        rows = expand(codec, c["key"], c["value"], None, "golden")
        assert [k for k, _ in rows] == [event_key(c["key"][:TKEY_SIZE], c["first"] + i) for i in range(len(rows))]
        events = chunk_events(codec, c["key"], c["value"], None, "golden")
        first, headers, evs = chunk_recorded(codec, c["key"], c["value"], None, "golden")
        assert first == c["first"] and evs == events
        for (k, v), ev, hdr in zip(rows, events, headers, strict=True):
            exp = by_seq[from_u64(k, TKEY_SIZE)]
            got_hdr, got_ev = _decode(codec, {"key": k, "value": v})
            assert got_hdr == hdr
            assert (hdr.kind, hdr.event_id, hdr.recorded_at) == (exp["kind_code"], exp["event_id"], exp["recorded_at"])
            assert _j(msgspec.to_builtins(hdr.turn)) == exp.get("turn")
            assert _j(msgspec.to_builtins(ev)) == _j(msgspec.to_builtins(got_ev)) == exp["struct"]
            seen.append(exp["seq"])
        assert chunk_events(codec, c["key"], c["value"], None, "golden", after=c["first"]) == events[1:]
        # the id-only reader: the same headers, and every body an id-only fold decodes
        first, hs, bodies = chunk_index(codec, c["key"], c["value"], None, "golden")
        assert first == c["first"] and hs == headers and len(bodies) == len(events)
        assert {h.kind for h in hs} & INDEX_KINDS and {h.kind for h in hs} - INDEX_KINDS
        for h, b, ev in zip(hs, bodies, events, strict=True):
            if h.kind in INDEX_KINDS or version == 4:
                assert codec.decode_event(b) == ev
            else:  # format 5 keeps every other body out of the index section
                assert bytes(b) == b"\xc0"
    assert seen == list(range(1, 21))


@pytest.mark.parametrize("version", CHUNK_FORMATS)
def test_golden_chunks_detect_tampering(version: int) -> None:
    codec = Codec()
    cs = CHUNK_SETS[version]
    c = cs[0]
    for at in (1, 5, 7, 12, 17, 20, len(c["value"]) // 2, len(c["value"]) - 1):
        bad = bytearray(c["value"])
        bad[at] ^= 1
        with pytest.raises(tplog.errors.CorruptionError):
            expand(codec, c["key"], bytes(bad), None, "golden")
        with pytest.raises(tplog.errors.CorruptionError):
            chunk_events(codec, c["key"], bytes(bad), None, "golden")
    with pytest.raises(tplog.errors.CorruptionError):
        expand(codec, cs[1]["key"], c["value"], None, "golden")  # right value, wrong key
    for cut in (len(c["value"]) - 1, 17, 0):
        with pytest.raises(tplog.errors.CorruptionError):
            expand(codec, c["key"], c["value"][:cut], None, "golden")


@pytest.mark.parametrize("version", CHUNK_FORMATS)
def test_store_reads_golden_chunks(tmp_path: Path, version: int) -> None:
    """Chunk rows planted as a store holds them (seqs 1..20 in two chunks, seq 21 a single
    format-3 value) read back, fold in a rebuild and pass `tplog verify`."""
    records, expected = GOLDEN_SETS[3]
    tid = expected["thread_id"]
    with Store(tmp_path / "s") as s:
        _plant(s, tid, list(zip(records, expected["events"], strict=True)))

        def swap(txn: Any) -> None:
            for r in records[:20]:
                txn.delete("events", r["key"])
            for c in CHUNK_SETS[version]:
                txn.put("events", c["key"], c["value"])

        s.backend.engine.run_write(swap)
        evs = s.read(tid)
        assert [e.seq for e in evs] == list(range(1, 22))
        assert [_j(msgspec.to_builtins(e.event)) for e in evs] == [e["struct"] for e in expected["events"]]
        assert s.read_all() == evs
        assert s.read(tid, after=5, limit=9) == evs[5:14]
        assert s.read(tid, after=15, direction="backward") == evs[:14][::-1]
        assert all(r.events == 21 for r in s.rebuild())
        assert all(r.differences == [] for r in s.rebuild(verify=True))
        rep = verify_store(s)
        assert rep.ok, rep.problems
