"""Chunk rows (formats 4 and 5, tplog/backends/lmdb/chunks.py): a closed turn's events stored as one value.

Every read verb must answer exactly as before chunking: each LMDB answer is compared with
the in-memory reference backend holding the same appends (event ids given, so both stores
hold identical events; only the recording times differ, and are left out).

Chunk rows, format 5 (tplog/backends/lmdb/chunks.py): an index section (headers, and the
bodies an id-only read decodes) and a bodies section, each compressed and CRC-checked on its
own, so a rebuild, ``items`` and ``links`` never decompress a message body.

Damage to either section, a truncated value and counts that do not add up are each a
CorruptionError naming the thread and a seq, on every path that reads the damaged part.

The dictionary id in a chunk's header when only one of its two sections shrank with the
dictionary (tplog/backends/lmdb/chunks.py `encode_chunk`; written for its surviving mutant 44,
tests/MUTANTS.md): the header has one id for both sections, which must be the one the
compressed section was packed with, whichever section that is.
"""

from __future__ import annotations

import random
import zlib
from pathlib import Path
from typing import Any

import lmdb
import msgspec
import pytest
from conftest import ToyStore as Store
from conftest import agent_start, completed, link, response, spawn_message, started, user

from tplog.backends.lmdb.chunks import (
    CHUNK,
    INDEX_KINDS,
    MAX_EVENTS,
    OPEN_EVERY,
    chunk_events,
    chunk_index,
    chunk_recorded,
    expand,
)
from tplog.backends.lmdb.keys import TKEY_SIZE, tkey
from tplog.codec import F_COMPRESSED, Codec
from tplog.errors import CorruptionError, HasForksError
from tplog.events import AgentTurnInterrupted, Interruption
from tplog.verify import verify_store

T = "2025-01-20T10:00:00Z"


def _raw_rows(path: Path) -> list[tuple[bytes, bytes]]:
    env = lmdb.open(str(path), max_dbs=20, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            return list(txn.cursor(db=env.open_db(b"events", txn=txn, create=False)))
    finally:
        env.close()


def _same(events: list[Any]) -> list[Any]:
    return [(e.thread_id, e.seq, e.position, e.event_id, e.event) for e in events]


def _fill(stores: list[Store], rng: random.Random) -> dict[str, int]:
    """Threads of several turns (some left open, one interrupted), appended to each store alike."""
    lengths: dict[str, int] = {}
    eid = 0

    def put(tid: str, events: list[Any]) -> None:
        nonlocal eid
        ids = [f"ev-{eid + i}" for i in range(len(events))]
        eid += len(events)
        for s in stores:
            s.append(tid, events, event_ids=ids)
        lengths[tid] = lengths.get(tid, 0) + len(events)

    for t in range(6):
        tid = f"t{t}"
        put(tid, [started(tid)])
        for turn in range(rng.randrange(1, 5)):
            put(tid, [user(f"q{turn} " * rng.randrange(1, 60))])
            put(tid, [agent_start()])
            for r in range(rng.randrange(1, 8)):
                put(tid, [response(f"answer {turn}.{r} " * rng.randrange(1, 200))])
            if t == 2 and turn == 0:
                put(tid, [spawn_message("kid")])
            put(tid, [completed()] if t != 3 else [AgentTurnInterrupted(interruption=Interruption(
                reason="user_cancelled", interrupted_at=T))])
        if t % 2:  # an open turn at the end: not chunked yet
            put(tid, [user("open"), agent_start(), response("partial")])
    return lengths


@pytest.fixture
def pair(tmp_path: Path) -> Any:
    rng = random.Random(5)
    lm = Store(tmp_path / "s")
    mem = Store("memory:")
    lengths = _fill([lm, mem], rng)
    yield lm, mem, lengths
    lm.close()
    mem.close()


def test_closed_turns_are_stored_as_chunks(pair: Any, tmp_path: Path) -> None:
    lm, _, lengths = pair
    lm.close()
    rows = _raw_rows(tmp_path / "s")
    chunked = [v for _, v in rows if v[0] == CHUNK]
    assert chunked, "no chunk rows written"
    assert len(rows) < sum(lengths.values())
    with Store(tmp_path / "s") as s:
        assert s.stats()["events"] == sum(lengths.values())
        assert verify_store(s).ok


def test_every_read_verb_answers_as_the_reference(pair: Any) -> None:
    lm, mem, lengths = pair
    assert _same(lm.read_all()) == _same(mem.read_all())
    for after in range(0, sum(lengths.values()) + 2, 7):
        assert _same(lm.read_all(after=after, limit=5)) == _same(mem.read_all(after=after, limit=5))
    for tid, n in lengths.items():
        full = mem.read(tid)
        assert _same(lm.read(tid)) == _same(full)
        for after in range(n + 2):
            for limit in (None, 1, 3):
                assert _same(lm.read(tid, after=after, limit=limit)) == _same(mem.read(tid, after=after, limit=limit))
                assert _same(lm.read(tid, after=after, limit=limit, direction="backward")) == _same(mem.read(
                    tid, after=after, limit=limit, direction="backward"))
        assert _same(lm.read(tid, direction="backward")) == _same(mem.read(tid, direction="backward"))
        assert lm.load(tid).thread == mem.load(tid).thread
        assert lm.export(tid) == mem.export(tid)
        assert lm.pending(tid) == mem.pending(tid)
        assert [(s, h.event_id) for s, h, _ in lm.backend.iter_thread_values(tid)] == [
            (e.seq, e.event_id) for e in full]
    assert lm.children("t2") == mem.children("t2") == ["kid"]


def test_a_load_after_a_chunk_folds_only_the_new_events(pair: Any) -> None:
    lm, mem, _ = pair
    first = lm.load("t0").thread
    lm_more = [user("more"), agent_start(), response("x" * 500), completed()]
    ids = ["m1", "m2", "m3", "m4"]
    for s in (lm, mem):
        s.append("t0", lm_more, event_ids=ids)
    assert lm.load("t0").thread == mem.load("t0").thread != first


def test_a_fork_inside_a_chunk_reads_the_parent_exactly(pair: Any) -> None:
    lm, mem, _ = pair
    for s in (lm, mem):
        base = s.read("t0")
        # every turn boundary of the parent: most lie inside a chunk
        ats = [e.seq for e in base if type(e.event).__name__ in ("AgentTurnCompleted", "UserTurnSubmitted")]
        for at in ats:
            s.fork("t0", at, new_thread_id=f"f{at}")
    for at in [e.seq for e in mem.read("t0") if type(e.event).__name__ in ("AgentTurnCompleted",
                                                                           "UserTurnSubmitted")]:
        # the fork's own ThreadStarted gets a fresh id in each store; the rest are the parent's
        assert [(e.seq, e.seq == 1 or e.event_id, e.event) for e in lm.read(f"f{at}")] == [
            (e.seq, e.seq == 1 or e.event_id, e.event) for e in mem.read(f"f{at}")]
        assert lm.export(f"f{at}") == mem.export(f"f{at}")
    with pytest.raises(HasForksError):
        lm.delete_thread("t0")


def test_rebuild_and_delete_over_chunks(pair: Any) -> None:
    lm, mem, _ = pair
    for r in lm.rebuild(chunk=3, verify=True):
        assert r.differences == []
    lm.delete_thread("t1")
    mem.delete_thread("t1")
    # the tombstone gets a fresh id in each store
    assert [(e.thread_id, e.seq, e.position, e.thread_id == "t1" or e.event_id) for e in lm.read_all()] == [
        (e.thread_id, e.seq, e.position, e.thread_id == "t1" or e.event_id) for e in mem.read_all()]
    rep = verify_store(lm)
    assert rep.ok, rep.problems
    for r in lm.rebuild(chunk=2, verify=True):
        assert r.differences == []


def test_a_long_turn_is_split_into_bounded_chunks(tmp_path: Path) -> None:
    n = MAX_EVENTS * 2 + 10
    with Store(tmp_path / "s") as s:
        s.append("t", [started("t"), user(), agent_start(), *[response(f"r{i}") for i in range(n)], completed()])
        assert [e.seq for e in s.read("t")] == list(range(1, n + 5))
    rows = _raw_rows(tmp_path / "s")
    assert 3 <= len(rows) <= 4
    assert all(v[0] == CHUNK for _, v in rows)


def test_an_open_turn_is_stored_raw_and_compressed_once_at_its_end(tmp_path: Path) -> None:
    big = "a compressible answer " * 40
    with Store(tmp_path / "s") as s:
        s.append("t", [started("t"), user(), agent_start()])
        for _ in range(3):
            s.append("t", [response(big)])
    rows = _raw_rows(tmp_path / "s")
    assert [v[0] for _, v in rows] == [3] * 6
    assert all(not v[1] & F_COMPRESSED for _, v in rows)  # no per-event zstd on the append path
    assert all(len(v) > len(big) for _, v in rows[3:])
    with Store(tmp_path / "s") as s:
        s.append("t", [completed()])
        assert [type(e.event).__name__ for e in s.read("t")][-2:] == ["MessageRecorded", "AgentTurnCompleted"]
    rows = _raw_rows(tmp_path / "s")
    assert len(rows) == 1 and rows[0][1][0] == CHUNK and rows[0][1][1] & F_COMPRESSED
    assert len(rows[0][1]) < 3 * len(big) // 4


def test_a_turn_never_closed_holds_a_bounded_number_of_raw_rows(tmp_path: Path) -> None:
    n = OPEN_EVERY * 3 + 5
    with Store(tmp_path / "s") as s:
        s.append("t", [started("t"), user(), agent_start()])
        for i in range(n):
            s.append("t", [response(f"part {i} " * 50)])
        assert [e.seq for e in s.read("t")] == list(range(1, n + 4))
        assert verify_store(s).ok
    rows = _raw_rows(tmp_path / "s")
    single = [v for _, v in rows if v[0] != CHUNK]
    assert len(single) < OPEN_EVERY
    assert sum(len(v) for _, v in rows) < sum(len(f"part {i} " * 50) for i in range(n)) // 2


@pytest.mark.parametrize("where", ["payload", "prefix", "crc"])
def test_a_damaged_chunk_is_a_corruption_error_and_verify_names_it(tmp_path: Path, where: str) -> None:
    path = tmp_path / "s"
    with Store(path) as s:
        s.append("t", [started("t"), user("hello " * 50), agent_start(), response("answer " * 300), completed()])
        s.append("u", [started("u"), user("other")])
    env = lmdb.open(str(path), max_dbs=20)
    with env.begin(write=True) as txn:
        db = env.open_db(b"events", txn=txn)
        key, value = next((k, v) for k, v in txn.cursor(db=db) if v[0] == CHUNK)
        v = bytearray(value)
        v[{"payload": len(v) // 2, "prefix": 17, "crc": 7}[where]] ^= 0x10
        txn.put(key, bytes(v), db=db)
    env.close()
    with Store(path) as s:
        with pytest.raises(CorruptionError) as exc:
            s.read("t")
        assert exc.value.thread_id == "t"
        with pytest.raises(CorruptionError):
            s.load("t")
        assert [e.seq for e in s.read("u")] == [1, 2]  # the other thread reads on
        rep = verify_store(s)
        assert not rep.ok
        assert any("chunk" in p and "CRC" in p for p in rep.problems), rep.problems
        assert not any("gap" in p for p in rep.problems), rep.problems


# --------------------------------------------------------------------------- format 5: the index and bodies sections


GOLDEN = Path(__file__).parents[2] / "golden"
PLAIN = msgspec.msgpack.decode((GOLDEN / "chunks-v5.bin").read_bytes())[1]  # seqs 13..20, stored uncompressed
_sections = msgspec.msgpack.Decoder(tuple[list[msgspec.Raw], list[msgspec.Raw]])
_bodies = msgspec.msgpack.Decoder(list[msgspec.Raw])
_enc = msgspec.msgpack.Encoder()
READERS = [expand, chunk_events, chunk_recorded, chunk_index]


def _v5(key: bytes, first: int, index: bytes, bodies: bytes, *, flags: int = 0, length: int | None = None) -> bytes:
    """A format-5 value with these sections and valid CRCs (the layout in chunks.py's docstring)."""
    head = bytes([5, flags]) + bytes(4)
    rest = first.to_bytes(8, "big") + (len(index) if length is None else length).to_bytes(4, "big") + index
    crc = zlib.crc32(key, zlib.crc32(rest, zlib.crc32(head)))
    return head + crc.to_bytes(4, "big") + rest + bodies + zlib.crc32(key, zlib.crc32(bodies)).to_bytes(4, "big")


def _split(value: bytes) -> tuple[bytes, bytes]:
    end = 22 + int.from_bytes(value[18:22], "big")
    return value[22:end], value[end:-4]


def _put(path: Path, key: bytes, value: bytes) -> None:
    env = lmdb.open(str(path), max_dbs=20)
    try:
        with env.begin(write=True) as txn:
            txn.put(key, value, db=env.open_db(b"events", txn=txn))
    finally:
        env.close()


def test_the_golden_plain_chunk_rebuilds_byte_for_byte() -> None:
    """``_v5`` (this module's reading of the layout) agrees with what encode_chunk wrote."""
    index, bodies = _split(PLAIN["value"])
    assert PLAIN["value"][:2] == bytes([CHUNK, 0])
    assert _v5(PLAIN["key"], PLAIN["first"], index, bodies) == PLAIN["value"]


def _chunked_store(path: Path) -> tuple[bytes, bytes]:
    """A store whose thread ``t`` is one format-5 chunk (a link, tool-less long answers);
    returns that chunk row."""
    with Store(path) as s:
        s.append("u", [started("u")])
        s.append("t", [started("t"), user("question " * 40), agent_start(), link("u"),
                       *[response(f"secret answer {i} " * 80) for i in range(6)], completed()])
    rows = [(k, v) for k, v in _raw_rows(path) if v[0] == CHUNK]
    assert len(rows) == 1
    return bytes(rows[0][0]), bytes(rows[0][1])


def test_message_bodies_are_kept_out_of_the_index_section(tmp_path: Path) -> None:
    key, value = _chunked_store(tmp_path / "s")
    assert value[1] == 3  # both sections compressed
    codec = Codec()
    first, headers, bodies = chunk_index(codec, key, value, None, "t")
    assert first == 1 and len(headers) == len(bodies) == 11
    for h, b in zip(headers, bodies, strict=True):
        assert (bytes(b) != b"\xc0") == (h.kind in INDEX_KINDS)
    index = codec.unpack(int.from_bytes(value[2:6], "big"), _split(value)[0])
    assert b"secret answer" not in index and b"thread_id" in index  # the link's body is there
    assert [type(e).__name__ for e in chunk_events(codec, key, value, None, "t")][3:5] == ["LinkAdded",
                                                                                         "MessageRecorded"]


def test_damaged_bodies_section_fails_full_reads_but_not_id_only_reads(tmp_path: Path) -> None:
    """An id-only read never touches the bodies section: a rebuild, ``items`` and ``links``
    answer; a full read and ``verify`` report the damage, naming the thread."""
    path = tmp_path / "s"
    key, value = _chunked_store(path)
    end = 22 + int.from_bytes(value[18:22], "big")
    bad = bytearray(value)
    bad[(end + len(value) - 4) // 2] ^= 0x20
    _put(path, key, bytes(bad))
    with Store(path) as s:
        with pytest.raises(CorruptionError, match="bodies section") as exc:
            s.read("t")
        assert exc.value.thread_id == "t" and exc.value.seq == 11
        assert [lk.thread_id for lk in s.links("t")] == ["u"]
        assert s.pending("t").pending == []
        assert [it.seq for it in s.backend.items("t")] == list(range(1, 12))
        assert all(r.differences == [] for r in s.rebuild(verify=True))
        rep = verify_store(s)
        assert not rep.ok and any("bodies section" in p for p in rep.problems), rep.problems


@pytest.mark.parametrize("at", ["format", "flags", "dict", "crc", "first", "length", "index"])
def test_damaged_index_section_is_a_corruption_error_naming_thread_and_seq(tmp_path: Path, at: str) -> None:
    path = tmp_path / "s"
    key, value = _chunked_store(path)
    offset = {"format": 0, "flags": 1, "dict": 3, "crc": 8, "first": 17, "length": 21, "index": 30}[at]
    bad = bytearray(value)
    bad[offset] ^= 0x04 if at == "format" else 0x01  # format 5 -> 1: not a chunk, not a valid value
    _put(path, key, bytes(bad))
    with Store(path) as s:
        for call in (lambda: s.rebuild(), lambda: s.read("t"), lambda: s.backend.items("t"), lambda: s.links("t")):
            with pytest.raises(CorruptionError) as exc:
                call()
            assert exc.value.thread_id == "t" and exc.value.seq is not None, (at, exc.value)
        assert [e.seq for e in s.read("u")] == [1]  # the other thread reads on


def test_a_truncated_chunk_is_a_corruption_error_on_every_reader() -> None:
    codec = Codec()
    key, value = PLAIN["key"], PLAIN["value"]
    end = 22 + int.from_bytes(value[18:22], "big")
    for cut in (0, 1, 10, 18, 21, 22, end - 1, end, end + 3, end + 4, len(value) - 4, len(value) - 1):
        # a cut inside the bodies section leaves the index whole: id-only reads go on
        whole_index = cut >= end + 4
        for read in READERS[:3] if whole_index else READERS:
            with pytest.raises(CorruptionError) as exc:
                read(codec, key, value[:cut], None, "golden")
            assert exc.value.thread_id == "golden" and exc.value.seq is not None, (cut, read)
        if whole_index:
            assert len(chunk_index(codec, key, value[:cut], None, "golden")[1]) == 8


def _counted(index_bodies_delta: int = 0, bodies_delta: int = 0, headers_delta: int = 0,
             length_delta: int = 0) -> bytes:
    index, bodies = _split(PLAIN["value"])
    headers, slots = _sections.decode(index)
    rest = _bodies.decode(bodies)
    if headers_delta < 0:
        headers, slots = headers[:headers_delta], slots[:headers_delta]
    if index_bodies_delta < 0:
        slots = slots[:index_bodies_delta]
    if bodies_delta < 0:
        rest = rest[:bodies_delta]
    elif bodies_delta > 0:
        rest = rest + rest[:bodies_delta]
    new_index = _enc.encode((headers, slots))
    return _v5(PLAIN["key"], PLAIN["first"], new_index, _enc.encode(rest),
               length=len(new_index) + length_delta)


@pytest.mark.parametrize(("what", "value", "readers"), [
    ("a body too many", _counted(bodies_delta=1), READERS[:3]),
    ("a body too few", _counted(bodies_delta=-1), READERS[:3]),
    ("fewer headers than seqs", _counted(headers_delta=-1), READERS),
    ("fewer index bodies than headers", _counted(index_bodies_delta=-1), READERS),
    ("index length past the end", _counted(length_delta=10**6), READERS),
    ("index length short", _counted(length_delta=-3), READERS),
    ("an unknown flag", _v5(PLAIN["key"], PLAIN["first"], *_split(PLAIN["value"]), flags=4), READERS),
], ids=lambda x: x if isinstance(x, str) else "")
def test_wrong_counts_and_layouts_with_valid_crcs_are_corruption_errors(what: str, value: bytes,
                                                                       readers: list[Any]) -> None:
    codec = Codec()
    for read in readers:
        with pytest.raises(CorruptionError) as exc:
            read(codec, PLAIN["key"], value, None, "golden")
        assert exc.value.thread_id == "golden" and exc.value.seq is not None, (what, read)
    if readers is not READERS:  # the bodies section is not an id-only read's business
        assert len(chunk_index(codec, PLAIN["key"], value, None, "golden")[1]) == 8


def _call(call_id: str) -> Any:
    from tplog.events import MessageRecorded
    from tplog.protocol import model as m
    return MessageRecorded(message=m.ResponseMessage(timestamp="2025-01-20T10:00:00Z", agent_id="a1", parts=[
        m.ToolCallPart(tool_name="search", args={"q": call_id}, tool_call_id=call_id)]))


@pytest.mark.parametrize("size", [1, 3, 7, 10**6])
def test_rebuild_in_chunks_of_any_size_splits_chunk_rows_exactly(tmp_path: Path, size: int) -> None:
    """A rebuild's read snapshots may end inside a chunk row: each event is folded once
    (the projections it rebuilds equal the ones the appends kept)."""
    with Store(tmp_path / "s") as s:
        for t in range(3):
            tid = f"t{t}"
            s.append(tid, [started(tid), user("q"), agent_start(), _call(f"c{t}a"), response("r " * 50),
                           link("t0"), _call(f"c{t}b"), completed()])
            s.append(tid, [user("again"), agent_start(), response("open")])  # an open turn: single rows
        with s.backend.engine.read() as txn:
            assert sum(v[0] == CHUNK for _, v in txn.range("events")) == 3
        want = {t: (s.pending(t), s.interrupts(t), s.links(t)) for t in ("t0", "t1", "t2")}
        assert [c.tool_call_id for c in want["t1"][0].pending] == ["c1a", "c1b"]  # never returned
        reports = s.rebuild(chunk=size, verify=True)
        assert all(r.differences == [] for r in reports), reports
        assert all(r.events == 3 * 11 for r in reports)
        s.rebuild(chunk=size)
        assert {t: (s.pending(t), s.interrupts(t), s.links(t)) for t in want} == want


def test_a_dictionary_trained_while_a_chunk_is_encoded_compresses_both_sections_with_one() -> None:
    """Found by the pipelined power-cut test in CI's lowest-dependency run (2026-11-27): the two
    sections were packed with the codec's current dictionary read twice, so a dictionary trained in
    another thread between them (the store's auto-training, or a worker's train_dictionary)
    compressed the bodies with a dictionary the header did not name: ``Dictionary mismatch`` on
    every read of that chunk. The trainer is made to finish exactly between the two packs here."""
    import random

    from tplog.backends.lmdb.chunks import encode_chunk
    from tplog.codec import header_end

    rng = random.Random(5)
    words = ["weather", "tool", "call", "paris", "berlin", "sunny", "rain", "answer", "question", "agent"]

    def sample(i: int) -> bytes:
        return _enc.encode({"text": " ".join(rng.choice(words) for _ in range(40)), "n": i})

    first_dict = Codec.train([sample(i) for i in range(600)], 4096)
    second_dict = Codec.train([sample(i) + b"other" for i in range(600)], 4096)
    codec = Codec()
    codec.add_dictionary(1, first_dict)
    events = [started("t"), user("q " * 200), agent_start(), response("answer " * 300), completed()]
    values = [codec.encode(e, f"id{i}", 1).finish(b"k" * 24) for i, e in enumerate(events)]
    headers: list[bytes | memoryview] = [v[12:header_end(v)] for v in values]  # what a format-3 value holds
    bodies: list[bytes | memoryview] = [codec.encode_body(e) for e in events]
    real_pack = codec.pack
    ids: list[int] = []

    def pack(data: bytes, dict_id: int | None = None) -> tuple[int, int, bytes]:
        out = real_pack(data) if dict_id is None else real_pack(data, dict_id)
        if not ids:
            codec.add_dictionary(2, second_dict)  # the trainer thread commits its dictionary now
        ids.append(out[1])
        return out

    codec.pack = pack  # type: ignore[method-assign]
    key = b"\x00" * 16 + len(events).to_bytes(8, "big")
    value = encode_chunk(codec, key, 1, headers, bodies)
    assert ids == [1, 1]  # both sections with the dictionary current when the chunk began
    reader = Codec()
    reader.add_dictionary(1, first_dict)
    reader.add_dictionary(2, second_dict)
    assert value[1] == 3  # both sections compressed
    assert chunk_events(reader, key, value, None, "t") == events


# --------------------------------------------------------------------------- the dictionary id when one section shrank


def _chunk_of(s: Store, tid: str) -> bytes:
    with s.backend.engine.read() as txn:
        rows = [bytes(v) for k, v in txn.range("events") if bytes(k[:TKEY_SIZE]) == tkey(tid) and v[0] == CHUNK]
    assert len(rows) == 1, rows
    return rows[0]


def _store_with_a_dictionary(path: Path) -> None:
    with Store(path, auto_dictionary=0) as w:
        for i in range(20):
            w.append(f"t{i}", [started(f"t{i}"), user(f"question {i} " * 40), agent_start(),
                               response(f"answer {i} " * 200), completed()])
        assert w.train_dictionary() == 1


def test_a_chunk_whose_index_section_alone_shrank_names_the_dictionary(tmp_path: Path) -> None:
    """Every event of the turn is of an index kind: the bodies section is an empty array (one
    byte, stored plain, packed as dictionary 0), the index section is compressed with dictionary 1."""
    path = tmp_path / "s"
    _store_with_a_dictionary(path)
    events = [started("z"), agent_start(), *[link(f"x{i}") for i in range(12)], completed()]
    with Store(path, auto_dictionary=0) as w:
        w.append("z", events)
        value = _chunk_of(w, "z")
    assert value[1] == 1  # the index section compressed, the bodies section not
    assert int.from_bytes(value[2:6], "big") == 1
    with Store(path, auto_dictionary=0) as r:  # a fresh codec: it loads dictionary 1 from the file
        assert [e.event for e in r.read("z")] == events
        assert [link.thread_id for link in r.links("z")] == [f"x{i}" for i in range(12)]


def test_a_chunk_whose_bodies_section_alone_shrank_names_the_dictionary(tmp_path: Path) -> None:
    """A chunk of seq 3 alone, a long response (the format allows one event; the recorder writes
    runs of two or more, whose headers alone pass ``compress_min_bytes``): the index section (one
    header of 50 bytes) is too short to compress, the response's body is compressed with dictionary 1."""
    path = tmp_path / "s"
    _store_with_a_dictionary(path)
    with Store(path, auto_dictionary=0) as w:
        w.append("z", [started("z")])
        w.append("z", [agent_start(), response("answer z " * 200)])
        with w.backend.engine.read() as txn:
            singles = [bytes(v) for k, v in txn.range("events") if bytes(k[:TKEY_SIZE]) == tkey("z")][2:]
        assert len(singles) == 1 and all(v[0] != CHUNK for v in singles)  # an open turn: single rows
        from tplog.backends.lmdb.chunks import encode_chunk
        from tplog.codec import header_end

        headers = [v[12:header_end(v)] for v in singles]
        bodies = [w.codec.encode_body(e.event) for e in w.read("z")][2:]
        key = tkey("z") + (3).to_bytes(8, "big")
        value = encode_chunk(w.codec, key, 3, list(headers), list(bodies))
    assert value[1] == 2  # the bodies section compressed, the index section not
    assert int.from_bytes(value[2:6], "big") == 1
    from tplog.backends.lmdb.chunks import chunk_events

    with Store(path, auto_dictionary=0) as r:
        reader: Codec = r.codec
        with r.backend.engine.read() as txn:
            assert chunk_events(reader, key, value, txn, "z") == [response("answer z " * 200)]
