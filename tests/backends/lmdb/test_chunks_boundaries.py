"""Chunk rows at their edges (tplog/backends/lmdb/chunks.py), through the store's reads.

Written for the surviving mutants of chunks.py (tests/MUTANTS.md): a fork's inherited links
cut exactly at its fork point inside (or just past) a chunk, a read of one thread that must
not touch the next thread's chunk, a backward read that stops just before a damaged chunk, an
incremental load from a seq inside a chunk, a dictionary only the store's file has (formats 4
and 5), and every read path naming a damaged or undecodable chunk by its thread and seq.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import lmdb
import msgspec
import pytest
from conftest import ToyStore as Store
from conftest import agent_start, completed, link, response, started, user

from tplog.backends.lmdb.chunks import CHUNK, INDEX_KINDS
from tplog.backends.lmdb.keys import TKEY_SIZE, from_u64, tkey
from tplog.errors import CorruptionError
from tplog.events import AgentTurnInterrupted, Interruption
from tplog.verify import verify_store

_pair = msgspec.msgpack.Decoder(tuple[list[msgspec.Raw], list[msgspec.Raw]])
_list = msgspec.msgpack.Decoder(list[msgspec.Raw])
T = "2025-01-20T10:00:00Z"


# --------------------------------------------------------------------------- raw rows


def _rows(path: Path) -> list[tuple[bytes, bytes]]:
    env = lmdb.open(str(path), max_dbs=20, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            return [(bytes(k), bytes(v)) for k, v in txn.cursor(db=env.open_db(b"events", txn=txn, create=False))]
    finally:
        env.close()


def _write(path: Path, put: dict[bytes, bytes] | None = None, delete: tuple[bytes, ...] = ()) -> None:
    env = lmdb.open(str(path), max_dbs=20)
    try:
        with env.begin(write=True) as txn:
            db = env.open_db(b"events", txn=txn)
            for k in delete:
                assert txn.delete(k, db=db)
            for k, v in (put or {}).items():
                txn.put(k, v, db=db)
    finally:
        env.close()


def _chunks_of(where: Path | Store, tid: str) -> list[tuple[bytes, bytes]]:
    """The thread's chunk rows, from a closed store's file or through an open store's engine."""
    if isinstance(where, Path):
        rows = _rows(where)
    else:
        with where.backend.engine.read() as txn:
            rows = [(bytes(k), bytes(v)) for k, v in txn.range("events")]
    return [(k, v) for k, v in rows if k[:TKEY_SIZE] == tkey(tid) and v[0] == CHUNK]


def _seqs(key: bytes, value: bytes) -> tuple[int, int]:
    return from_u64(value, 10), from_u64(key, TKEY_SIZE)


def _damage_index(value: bytes) -> bytes:
    bad = bytearray(value)
    bad[7] ^= 0x10  # the index CRC
    return bytes(bad)


def _damage_bodies(value: bytes) -> bytes:
    bad = bytearray(value)
    bad[-1] ^= 0x10  # the bodies CRC
    return bytes(bad)


def _v4(key: bytes, first: int, payload: bytes, flags: int = 0, dict_id: int = 0) -> bytes:
    """A format-4 value (FORMAT.md): its CRC over bytes 0..5, bytes 10.. and the key."""
    head = bytes([4, flags]) + dict_id.to_bytes(4, "big")
    rest = first.to_bytes(8, "big") + payload
    return head + zlib.crc32(key, zlib.crc32(rest, zlib.crc32(head))).to_bytes(4, "big") + rest


def _v5(key: bytes, first: int, index: bytes, bodies: bytes, flags: int = 0, dict_id: int = 0) -> bytes:
    """A format-5 value with these (stored) sections and valid CRCs."""
    head = bytes([5, flags]) + dict_id.to_bytes(4, "big")
    rest = first.to_bytes(8, "big") + len(index).to_bytes(4, "big") + index
    return (head + zlib.crc32(key, zlib.crc32(rest, zlib.crc32(head))).to_bytes(4, "big") + rest + bodies
            + zlib.crc32(key, zlib.crc32(bodies)).to_bytes(4, "big"))


def _sections(codec: Any, value: bytes) -> tuple[list[bytes], list[bytes]]:
    """A format-5 chunk's headers and bodies (every event's), decompressed."""
    end = 22 + int.from_bytes(value[18:22], "big")
    index, bodies = value[22:end], value[end:-4]
    d = int.from_bytes(value[2:6], "big")
    if value[1] & 1:
        index = codec.unpack(d, index)
    if value[1] & 2:
        bodies = codec.unpack(d, bodies)
    headers, slots = _pair.decode(index)
    rest = iter(_list.decode(bodies))
    return [bytes(h) for h in headers], [bytes(next(rest)) if bytes(s) == b"\xc0" else bytes(s) for s in slots]


def _one_section_compressed(codec: Any, key: bytes, value: bytes, which: int, dict_id: int = 0) -> bytes:
    """The same events as a format-5 chunk whose index (``which`` 1) or bodies (2) section
    alone is zstd-compressed (a section is stored plain when compressing does not pay)."""
    headers, bodies = _sections(codec, value)
    n = len(headers)
    kept = [h[1] in INDEX_KINDS for h in headers]  # a header: msgpack [kind, ...]; the kinds id-only reads decode
    slots = [b if k else b"\xc0" for k, b in zip(kept, bodies, strict=True)]
    rest = [b for k, b in zip(kept, bodies, strict=True) if not k]
    index = b"".join([b"\x92", bytes([0x90 | n]), *headers, bytes([0x90 | n]), *slots])
    others = bytes([0x90 | len(rest)]) + b"".join(rest)
    packed = codec.pack(index if which == 1 else others, dict_id)
    assert packed[:2] == (1, dict_id)
    if which == 1:
        return _v5(key, from_u64(value, 10), packed[2], others, 1, dict_id)
    return _v5(key, from_u64(value, 10), index, packed[2], 2, dict_id)


def _as_v4(codec: Any, key: bytes, value: bytes, dict_id: int) -> bytes:
    """The same events as a format-4 chunk (as tplog before format 5 wrote them)."""
    headers, bodies = _sections(codec, value)
    n = len(headers)
    arr = bytes([0x90 | n]) if n < 16 else b"\xdc" + n.to_bytes(2, "big")
    payload = b"".join([b"\x92", arr, *headers, arr, *bodies])
    flags, d, stored = codec.pack(payload, dict_id)
    assert (flags, d) == (1, dict_id)
    return _v4(key, from_u64(value, 10), stored, flags, d)


def _talk(n: int) -> list[Any]:
    return [response(f"answer {n}.{i} " * 60) for i in range(3)]


# --------------------------------------------------------------------------- a fork's inherited links


def _fill_links(stores: list[Store]) -> None:
    """``p``: one chunk, seqs 1..9, with links at 2, 3 and 4 (3 = the fork point, a turn
    boundary inside the chunk) and a spawn at 7. ``q``: a chunk 1..6, then single rows (an
    open turn) with links at 7 and 8."""
    for s in stores:
        s.append("p", [started("p"), link("u1"), link("u2"), link("u3"), user("go " * 50), agent_start(),
                       _spawn("kid"), *_talk(1)[:1], completed()], event_ids=[f"p{i}" for i in range(9)])
        s.append("q", [started("q"), user("go " * 50), agent_start(), *_talk(2)[:2], completed()],
                 event_ids=[f"q{i}" for i in range(6)])
        s.append("q", [link("v1"), link("v2")], event_ids=["q6", "q7"])


def _spawn(child: str) -> Any:
    from conftest import spawn_message
    return spawn_message(child)


def _fork_answers(s: Store) -> dict[str, Any]:
    targets = ("u1", "u2", "u3", "v1", "v2")
    return {"incoming": {t: sorted(s.incoming(t)) for t in targets}, "children": s.children("p"),
            "fp_links": [lk.thread_id for lk in s.links("fp")], "fq_links": [lk.thread_id for lk in s.links("fq")]}


def test_a_fork_inherits_exactly_its_parents_links_up_to_the_fork_point(tmp_path: Path) -> None:
    """The link rows a fork inherits are read from its parent's chunk with an id-only read
    bounded by the fork point: seqs 2..fork_at, none past it, whether the parent's rows there
    are one chunk reaching past the fork point or single rows starting just after it."""
    lm, mem = Store(tmp_path / "s"), Store("memory:")
    try:
        _fill_links([lm, mem])
        assert [_seqs(k, v) for k, v in _chunks_of(lm, "p")] == [(1, 9)]
        assert [_seqs(k, v) for k, v in _chunks_of(lm, "q")] == [(1, 6)]
        for s in (lm, mem):
            s.fork("p", 3, new_thread_id="fp")  # inside p's chunk: links 2 and 3 are its; 4 is not
            s.fork("q", 6, new_thread_id="fq")  # the chunk's last seq: q's single row 7 is not its
        want = {"incoming": {"u1": [("fp", "referenced"), ("p", "referenced")],
                             "u2": [("fp", "referenced"), ("p", "referenced")],
                             "u3": [("p", "referenced")], "v1": [("q", "referenced")],
                             "v2": [("q", "referenced")]},
                "children": ["kid", "fp"], "fp_links": ["p", "u1", "u2"], "fq_links": ["q"]}
        assert _fork_answers(mem) == want
        assert _fork_answers(lm) == want
        for size in (2, 10**6):
            reports = lm.rebuild(chunk=size, verify=True)
            assert all(r.differences == [] for r in reports), reports
            lm.rebuild(chunk=size)
            assert _fork_answers(lm) == want
    finally:
        lm.close()
        mem.close()


def test_a_fork_of_a_chunk_whose_bodies_section_is_damaged_is_rebuilt_from_its_index(tmp_path: Path) -> None:
    """The inherited link rows are an id-only read: the parent chunk's bodies section (damaged
    here) is neither read nor checked, also where the fork point cuts the chunk."""
    path = tmp_path / "s"
    with Store(path) as s:
        _fill_links([s])
        s.fork("p", 3, new_thread_id="fp")
    (key, value), = _chunks_of(path, "p")
    _write(path, {key: _damage_bodies(value)})
    with Store(path) as s:
        assert all(r.differences == [] for r in s.rebuild(verify=True))
        assert sorted(s.incoming("u2")) == [("fp", "referenced"), ("p", "referenced")]
        assert s.incoming("u3") == [("p", "referenced")]
        with pytest.raises(CorruptionError, match="bodies section") as exc:
            s.read("fp")
        assert (exc.value.thread_id, exc.value.seq) == ("p", 9)


def test_a_fork_point_inside_a_damaged_chunk_is_named_by_the_parent(tmp_path: Path) -> None:
    """A rebuild reading a fork's inherited rows out of a parent chunk whose index is damaged
    names the parent and the chunk's last seq (the fork sorts first: its rows are read before
    the parent's own, so the first read of the damaged chunk is the inherited rows' one)."""
    path = tmp_path / "s"
    fork = next(f"f{i}" for i in range(100) if tkey(f"f{i}") < tkey("p"))
    with Store(path) as s:
        _fill_links([s])
        s.fork("p", 3, new_thread_id=fork)
    (key, value), = _chunks_of(path, "p")
    _write(path, {key: _damage_index(value)})
    with Store(path) as s:
        with pytest.raises(CorruptionError) as exc:
            s.rebuild()
        assert (exc.value.thread_id, exc.value.seq) == ("p", 9)
        assert "stored chunk (events up to seq 9) is truncated or its index section failed" in str(exc.value)


# --------------------------------------------------------------------------- one thread's read, the next one's chunk


def _two_threads(path: Path) -> tuple[str, str]:
    """Threads ``a`` and ``b`` (``b`` after ``a`` in key order), each two chunks and an open turn;
    ``b``'s rows start with its chunk, damaged. Returns (a, b)."""
    first, second = sorted(["ta", "tb"], key=tkey)
    with Store(path) as s:
        for tid in (first, second):
            s.append(tid, [started(tid), user("q " * 30), agent_start(), *_talk(1), completed()])
            s.append(tid, [user("q2 " * 30), agent_start(), *_talk(2), link("x"), completed()])
            s.append(tid, [user("open"), agent_start(), response("partial")])
    (key, value), _ = _chunks_of(path, second)
    assert _seqs(key, value) == (1, 7)
    _write(path, {key: _damage_index(value)})
    return first, second


def test_reading_a_thread_never_reads_the_chunk_of_the_thread_after_it(tmp_path: Path) -> None:
    path = tmp_path / "s"
    a, b = _two_threads(path)
    with Store(path) as s:
        n = 17
        assert [e.seq for e in s.read(a)] == list(range(1, n + 1))
        assert [e.seq for e in s.read(a, direction="backward")] == list(range(n, 0, -1))
        assert [e.seq for e in s.read(a, after=9, direction="backward", limit=3)] == [8, 7, 6]
        assert [seq for seq, _, _ in s.backend.iter_thread_values(a)] == list(range(1, n + 1))
        assert [it.seq for it in s.backend.items(a)] == list(range(1, n + 1))
        assert [lk.thread_id for lk in s.links(a)] == ["x"]
        assert len(s.backend.thread_events(a)[1]) == n
        assert s.load(a).thread is not None
        for call in (lambda: s.read(b), lambda: s.backend.items(b), lambda: list(s.backend.iter_thread_values(b))):
            with pytest.raises(CorruptionError) as exc:
                call()
            assert (exc.value.thread_id, exc.value.seq) == (b, 7)


def test_a_backward_read_ending_just_before_a_damaged_chunk_reads_on(tmp_path: Path) -> None:
    """``after`` = the first seq of a chunk whose bodies section is damaged: the read holds only
    seqs before it, so it never reads that section; one seq later it does, and names it."""
    path = tmp_path / "s"
    with Store(path) as s:
        s.append("t", [started("t"), user("q " * 30), agent_start(), *_talk(1), completed()])  # 1..7
        s.append("t", [user("q2 " * 30), agent_start(), *_talk(2), completed()])  # 8..13
    first_chunk, second = _chunks_of(path, "t")
    assert (_seqs(*first_chunk), _seqs(*second)) == ((1, 7), (8, 13))
    _write(path, {second[0]: _damage_bodies(second[1])})
    with Store(path) as s:
        assert [e.seq for e in s.read("t", after=8, direction="backward")] == list(range(7, 0, -1))
        with pytest.raises(CorruptionError) as exc:
            s.read("t", after=9, direction="backward")
        assert (exc.value.thread_id, exc.value.seq) == ("t", 13)
    # a damaged index: the chunk's first seq (where it starts) cannot be trusted, so it is named
    _write(path, {second[0]: _damage_index(second[1])})
    with Store(path) as s, pytest.raises(CorruptionError) as exc:
        s.read("t", after=8, direction="backward")
    assert (exc.value.thread_id, exc.value.seq) == ("t", 13)


# --------------------------------------------------------------------------- every reader names a damaged chunk


def _one_chunk(path: Path) -> tuple[bytes, bytes]:
    with Store(path) as s:
        s.append("t", [started("t"), user("q " * 30), agent_start(), *_talk(1), link("x"), completed()])  # 1..8
        s.append("t", [user("open")])  # 9, a single row
    (key, value), = _chunks_of(path, "t")
    assert _seqs(key, value) == (1, 8)
    return key, value


FULL_READS = {
    "read": lambda s: s.read("t"),
    "read backward": lambda s: s.read("t", direction="backward"),
    "read backward from inside": lambda s: s.read("t", after=4, direction="backward"),
    "iter_thread_values": lambda s: list(s.backend.iter_thread_values("t")),
    "thread_events": lambda s: s.backend.thread_events("t"),
    "load": lambda s: s.load("t"),
    "read_all": lambda s: s.read_all(),
}
ID_ONLY_READS = {
    "items": lambda s: s.backend.items("t"),
    "links": lambda s: s.links("t"),
}


@pytest.mark.parametrize("how", [*FULL_READS, *ID_ONLY_READS])
def test_a_chunk_with_a_damaged_index_is_named_by_thread_and_last_seq_on_every_read(tmp_path: Path,
                                                                                    how: str) -> None:
    path = tmp_path / "s"
    key, value = _one_chunk(path)
    _write(path, {key: _damage_index(value)})
    with Store(path) as s, pytest.raises(CorruptionError) as exc:
        {**FULL_READS, **ID_ONLY_READS}[how](s)
    assert (exc.value.thread_id, exc.value.seq) == ("t", 8)
    assert "stored chunk (events up to seq 8) is truncated or its index section failed its CRC-32 check" in str(
        exc.value)


@pytest.mark.parametrize("how", list(FULL_READS))
def test_a_chunk_with_a_damaged_bodies_section_is_named_by_thread_and_last_seq(tmp_path: Path, how: str) -> None:
    path = tmp_path / "s"
    key, value = _one_chunk(path)
    _write(path, {key: _damage_bodies(value)})
    with Store(path) as s:
        with pytest.raises(CorruptionError) as exc:
            FULL_READS[how](s)
        assert (exc.value.thread_id, exc.value.seq) == ("t", 8)
        assert "stored chunk (events up to seq 8) bodies section failed its CRC-32 check" in str(exc.value)
        assert [lk.thread_id for lk in s.links("t")] == ["x"]  # the index section is whole


def _garbled(key: bytes, value: bytes, codec: Any, fmt: int, what: str) -> bytes:
    """The chunk's events re-stored (plain) in format ``fmt`` with valid CRCs, one part garbled."""
    headers, bodies = _sections(codec, value)
    n = len(headers)
    first = from_u64(value, 10)
    if what in ("count", "headers"):
        headers = headers[:-1]
    if what in ("count", "slots"):
        bodies = bodies[:-1]
    assert n < 16
    index = b"".join([b"\x92", bytes([0x90 | len(headers)]), *headers, bytes([0x90 | len(bodies)]), *bodies])
    if fmt == 4:
        if what == "bytes":
            index = b"\x92\xc1" + index[2:]  # 0xc1: a byte msgpack never uses
        return _v4(key, first, index)
    if what == "bytes":
        index = b"\x92\xc1" + index[2:]
    return _v5(key, first, index, b"\x90")


@pytest.mark.parametrize("fmt", [4, 5])
@pytest.mark.parametrize("what", ["bytes", "count", "headers", "slots"])
def test_a_chunk_whose_crcs_hold_but_which_does_not_decode_is_named_by_thread_and_first_seq(
        tmp_path: Path, fmt: int, what: str) -> None:
    path = tmp_path / "s"
    key, value = _one_chunk(path)
    with Store(path) as s:
        bad = _garbled(key, value, s.codec, fmt, what)
    _write(path, {key: bad})
    with Store(path) as s:
        reads = {**FULL_READS, **ID_ONLY_READS}
        if what == "headers":  # a load decodes the events only (its fold needs no header)
            del reads["thread_events"], reads["load"]
        for how, call in reads.items():
            with pytest.raises(CorruptionError) as exc:
                call(s)
            assert (exc.value.thread_id, exc.value.seq) == ("t", 1), how
            assert str(exc.value).startswith("stored chunk (seqs 1..8) does not decode: "), (how, str(exc.value))
            if what != "bytes":  # one element too few in the headers, the bodies, or both
                assert "does not decode: wrong number of events (thread t, seq 1)" in str(exc.value), how
            else:  # the decoder's own words
                assert "does not decode: MessagePack data is malformed" in str(exc.value), how


def test_a_compressed_bodies_section_that_is_not_a_zstd_frame_is_named_by_thread_and_first_seq(
        tmp_path: Path) -> None:
    path = tmp_path / "s"
    key, value = _one_chunk(path)
    with Store(path) as s:
        good = _one_section_compressed(s.codec, key, value, 2)
    end = 22 + int.from_bytes(good[18:22], "big")
    _write(path, {key: _v5(key, 1, good[22:end], b"not a zstd frame at all" * 4, 2)})
    with Store(path) as s:
        for how, call in FULL_READS.items():
            with pytest.raises(CorruptionError) as exc:
                call(s)
            assert (exc.value.thread_id, exc.value.seq) == ("t", 1), (how, exc.value)
        assert [lk.thread_id for lk in s.links("t")] == ["x"]


@pytest.mark.parametrize("which", [1, 2])
def test_a_chunk_with_one_section_compressed_reads_back(tmp_path: Path, which: int) -> None:
    path = tmp_path / "s"
    key, value = _one_chunk(path)
    with Store(path) as s:
        want = {how: call(s) for how, call in EARLY_READS_T.items()}
        other = _one_section_compressed(s.codec, key, value, which)
    _write(path, {key: other})
    with Store(path) as s:
        assert {how: call(s) for how, call in EARLY_READS_T.items()} == want


@pytest.mark.parametrize("fmt", [4, 5])
def test_a_compressed_section_that_is_not_a_zstd_frame_is_named_by_thread_and_first_seq(
        tmp_path: Path, fmt: int) -> None:
    path = tmp_path / "s"
    key, _ = _one_chunk(path)
    junk = b"not a zstd frame at all" * 4
    bad = _v4(key, 1, junk, flags=1) if fmt == 4 else _v5(key, 1, junk, b"\x90")
    if fmt == 5:  # flag 1: the index section compressed (the CRCs cover the flags)
        bad = bytearray(bad)
        bad[1] = 1
        bad[6:10] = zlib.crc32(key, zlib.crc32(bytes(bad[10:-5]), zlib.crc32(bytes(bad[:6])))).to_bytes(4, "big")
        bad = bytes(bad)
    _write(path, {key: bad})
    with Store(path) as s:
        for how, call in {**FULL_READS, **ID_ONLY_READS}.items():
            with pytest.raises(CorruptionError) as exc:
                call(s)
            assert (exc.value.thread_id, exc.value.seq) == ("t", 1), (how, exc.value)


# --------------------------------------------------------------------------- incremental loads


def test_an_incremental_load_from_inside_a_chunk_gets_every_later_event(tmp_path: Path) -> None:
    """``thread_events(after=...)``: the events after a seq inside the first chunk read, and
    every event of the longer chunks after it."""
    with Store(tmp_path / "s") as lm, Store("memory:") as mem:
        for s in (lm, mem):
            s.append("t", [started("t"), user("q " * 30), agent_start(), response("r " * 60)],
                     event_ids=[f"a{i}" for i in range(4)])
            assert s.load("t").thread is not None  # a fold at seq 4, inside the chunk to come
            s.append("t", [*_talk(1), completed()], event_ids=[f"b{i}" for i in range(4)])  # chunk 1..8
            s.append("t", [user("q2 " * 30), agent_start(), *[response(f"long {i} " * 40) for i in range(20)],
                           completed()], event_ids=[f"c{i}" for i in range(23)])  # chunk 9..31
        assert [_seqs(k, v) for k, v in _chunks_of(lm, "t")] == [(1, 8), (9, 31)]
        everything = [e.event for e in lm.read("t")]
        for after in (0, 3, 4, 7, 8, 9, 20, 31):
            assert lm.backend.thread_events("t", after=after)[1] == everything[after:], after
        assert lm.load("t").thread == mem.load("t").thread


# --------------------------------------------------------------------------- a dictionary only the file has


EARLY_READS_T = {
    "read": lambda s: [e.event for e in s.read("t")],
    "read backward": lambda s: [e.event for e in reversed(s.read("t", direction="backward"))],
    "thread_events": lambda s: s.backend.thread_events("t")[1],
    "items": lambda s: s.backend.items("t"),
    "links": lambda s: s.links("t"),
    "iter_thread_values": lambda s: [(seq, bytes(v)) for seq, _, v in s.backend.iter_thread_values("t")],
}
EARLY_READS = {
    "read": lambda s: [e.event for e in s.read("z")],
    "read backward": lambda s: [e.event for e in reversed(s.read("z", direction="backward"))],
    "thread_events": lambda s: s.backend.thread_events("z")[1],
    "items": lambda s: [(it.seq, it.kind) for it in s.backend.items("z")],
    "links": lambda s: s.links("z"),
    "iter_thread_values": lambda s: [seq for seq, _, _ in s.backend.iter_thread_values("z")],
}


@pytest.mark.parametrize("fmt", ["4", "5", "5, bodies section only"])
@pytest.mark.parametrize("how", list(EARLY_READS))
def test_a_store_opened_before_a_dictionary_was_trained_reads_chunks_compressed_with_it(
        tmp_path: Path, fmt: str, how: str) -> None:
    path = tmp_path / "s"
    with Store(path, auto_dictionary=0) as w:
        for i in range(20):
            w.append(f"t{i}", [started(f"t{i}"), user(f"question {i} " * 40), agent_start(),
                               response(f"answer {i} " * 200), completed()])
    early = Store(path, auto_dictionary=0)
    try:
        with Store(path, auto_dictionary=0) as w:
            assert w.train_dictionary() == 1
            w.append("z", [started("z"), user("question z " * 40), agent_start(), link("x"),
                           response("answer z " * 200), completed()])
            want = EARLY_READS[how](w)
            (key, value), = _chunks_of(w, "z")
            assert int.from_bytes(value[2:6], "big") == 1 and value[1] & 1
            other = {"4": lambda: _as_v4(w.codec, key, value, 1), "5": lambda: value,
                     "5, bodies section only": lambda: _one_section_compressed(w.codec, key, value, 2, 1)}[fmt]()
        # (the file is open in this process: written through the early store's engine)
        early.backend.engine.run_write(lambda txn: txn.put("events", key, other))
        assert not early.codec.has_dictionary(1)
        assert EARLY_READS[how](early) == want
        # an id-only read of a chunk whose index section is plain never needs the dictionary
        id_only_plain_index = fmt == "5, bodies section only" and how in ("items", "links")
        assert early.codec.has_dictionary(1) is not id_only_plain_index
    finally:
        early.close()


# --------------------------------------------------------------------------- verify: a lost chunk row


def test_verify_reports_the_events_of_a_lost_chunk_row_when_a_later_chunk_follows(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with Store(path) as s:
        s.append("t", [started("t"), user("q " * 30), agent_start(), *_talk(1), completed()])  # 1..7
        s.append("t", [user("q2 " * 30), agent_start(), *_talk(2), completed()])  # 8..13
    (k1, v1), _ = _chunks_of(path, "t")
    assert _seqs(k1, v1) == (1, 7)
    _write(path, delete=(k1,))
    with Store(path) as s:
        missing = [p for p in verify_store(s).problems if "names a missing event" in p]
    assert [int(p.rsplit("seq ", 1)[1].rstrip(")")) for p in missing] == list(range(1, 8)), missing
    assert all(f"thread key {tkey('t').hex()}" in p for p in missing)


def test_a_chunks_events_read_back_as_the_values_appended_byte_for_byte(tmp_path: Path) -> None:
    """Appends store format-3 values with raw bodies; the chunk that replaces them gives the
    same values back (``iter_thread_values``: prefix, header, body and both CRCs)."""
    with Store(tmp_path / "s") as s:
        s.append("t", [started("t"), user("q " * 30), agent_start(), *_talk(1), link("x")])
        before = list(s.backend.iter_thread_values("t"))
        assert not _chunks_of(s, "t")
        s.append("t", [completed()])
        assert [_seqs(k, v) for k, v in _chunks_of(s, "t")] == [(1, 8)]
        after = list(s.backend.iter_thread_values("t"))
    assert [(seq, bytes(v)) for seq, _, v in after[:7]] == [(seq, bytes(v)) for seq, _, v in before]


def test_verify_reports_a_threads_lost_last_chunk_when_the_next_thread_follows_it(tmp_path: Path) -> None:
    """The row after the lost one is the next thread's chunk (its seq 1): it holds none of them."""
    path = tmp_path / "s"
    first, second = sorted(["ta", "tb"], key=tkey)
    with Store(path) as s:
        for tid in (first, second):
            s.append(tid, [started(tid), user("q " * 30), agent_start(), *_talk(1), completed()])  # 1..7
            s.append(tid, [user("q2 " * 30), agent_start(), *_talk(2), completed()])  # 8..13
    _, (k2, v2) = _chunks_of(path, first)
    assert _seqs(k2, v2) == (8, 13)
    _write(path, delete=(k2,))
    with Store(path) as s:
        missing = [p for p in verify_store(s).problems if "names a missing event" in p]
    assert [int(p.rsplit("seq ", 1)[1].rstrip(")")) for p in missing] == list(range(8, 14)), missing
    assert all(f"thread key {tkey(first).hex()}" in p for p in missing)


@pytest.mark.parametrize(("bodies", "message"), [
    ([], "fewer bodies than the index leaves out"),
    (["one", "two"], "more bodies than the index leaves out"),
])
def test_a_bodies_section_that_does_not_fill_the_index_gaps_is_named(tmp_path: Path, bodies: list[str],
                                                                      message: str) -> None:
    """Each nil slot of the index takes the next body of the bodies section: one too few or
    one too many is a CorruptionError saying which, naming the thread and the chunk's first seq."""
    path = tmp_path / "s"
    key, value = _one_chunk(path)
    with Store(path) as s:
        headers, full = _sections(s.codec, value)
    slots = [b"\xc0" if i == 4 else b for i, b in enumerate(full)]  # seq 5 (a message) left to the bodies
    arr = bytes([0x90 | len(headers)])
    index = b"".join([b"\x92", arr, *headers, arr, *slots])
    rest = [full[4]] * (len(bodies) or 0)
    _write(path, {key: _v5(key, 1, index, bytes([0x90 | len(rest)]) + b"".join(rest))})
    with Store(path) as s:
        for how, call in FULL_READS.items():
            with pytest.raises(CorruptionError) as exc:
                call(s)
            assert (exc.value.thread_id, exc.value.seq) == ("t", 1), how
            assert f"stored chunk (seqs 1..8) does not decode: {message}" in str(exc.value), how
        assert [lk.thread_id for lk in s.links("t")] == ["x"]  # the index section alone is sound


def test_forking_inside_a_chunk_whose_index_is_damaged_names_the_parent(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with Store(path) as s:
        _fill_links([s])
    (key, value), = _chunks_of(path, "p")
    _write(path, {key: _damage_index(value)})
    with Store(path) as s, pytest.raises(CorruptionError) as exc:
        s.fork("p", 3, new_thread_id="fp")
    assert (exc.value.thread_id, exc.value.seq) == ("p", 9)


def test_a_blob_reference_stays_a_row_of_its_own_when_its_turn_is_chunked(tmp_path: Path) -> None:
    """A body over the blob threshold is stored once in ``blobs``; its event's row (a
    reference) is never re-stored in a chunk, so the blob keeps its one reference."""
    import random

    rng = random.Random(3)
    big = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(300_000))  # over 256 KiB
    with Store(tmp_path / "s") as s:
        s.append("t", [started("t"), user("q " * 30), agent_start(), response("r " * 60), response(big),
                       response("after " * 60), completed()])
        with s.backend.engine.read() as txn:
            rows = [(from_u64(bytes(k), TKEY_SIZE), bytes(v)[:2]) for k, v in txn.range("events")]
        assert (5, bytes([3, 2])) in rows  # format 3, the blob flag: a row of its own
        assert [seq for seq, v in rows if v[0] == CHUNK] == [4, 7]  # 1..4 and 6..7 chunked around it
        rep = verify_store(s)
        assert rep.ok and rep.blobs == 1, rep.problems
        assert s.read("t")[4].event.message.parts[0].content == big


# --------------------------------------------------------------------------- how a compaction cuts runs


def _chunk_spans(s: Store, tid: str) -> list[tuple[int, int]]:
    return [_seqs(k, v) for k, v in _chunks_of(s, tid)]


def test_two_rows_since_the_last_chunk_make_a_chunk(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        s.append("t", [started("t"), user("q " * 30), agent_start(), *_talk(1), completed()])  # 1..7
        s.append("t", [agent_start(), response("again " * 200)])  # 8, 9: an open turn
        s.append("t", [completed()])  # 10
        assert _chunk_spans(s, "t") == [(1, 7), (8, 10)]
        s.append("t", [user("q " * 100), agent_start()])
        s.append("t", [AgentTurnInterrupted(interruption=Interruption(reason="user_cancelled", interrupted_at=T))])
        assert _chunk_spans(s, "t") == [(1, 7), (8, 10), (11, 13)]


def test_a_chunk_holds_at_most_max_events_events(tmp_path: Path) -> None:
    from tplog.backends.lmdb.chunks import MAX_EVENTS

    n = MAX_EVENTS + 20
    with Store(tmp_path / "s") as s:
        s.append("t", [started("t"), user("q"), agent_start(), *[response(f"r{i} " * 5) for i in range(n)],
                       completed()])
        assert _chunk_spans(s, "t") == [(1, MAX_EVENTS), (MAX_EVENTS + 1, n + 4)]


def test_a_chunk_holds_less_than_max_bytes_of_values(tmp_path: Path) -> None:
    """Runs are cut before the values they hold (raw, as appended) reach 1 MiB."""
    import random

    from tplog.backends.lmdb.chunks import MAX_BYTES

    rng = random.Random(7)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    texts = [" ".join(rng.choice(words) for _ in range(20_000)) for _ in range(12)]  # ~120 KB each
    with Store(tmp_path / "s") as s:
        s.append("t", [started("t"), user("q"), agent_start(), *[response(t) for t in texts], completed()])
        sizes = {seq: len(v) for seq, _, v in s.backend.iter_thread_values("t")}
        want, run, size = [], [1], sizes[1]
        for seq in range(2, len(sizes) + 1):  # the cut: the next value would reach MAX_BYTES
            if size + sizes[seq] < MAX_BYTES:
                run.append(seq)
                size += sizes[seq]
            else:
                want.append((run[0], run[-1]))
                run, size = [seq], sizes[seq]
        want.append((run[0], run[-1]))
        assert len(want) >= 2
        assert _chunk_spans(s, "t") == want


@pytest.mark.parametrize(("part", "blob_after"), [("header", False), ("body", False), ("body", True)])
def test_a_damaged_row_is_never_re_stored_in_a_chunk(tmp_path: Path, part: str, blob_after: bool) -> None:
    """The append that closes the turn verifies each row it would chunk: a damaged one fails
    it, naming the thread and the seq, and nothing is re-stored (``blob_after``: the damaged
    row's run is not the last one, a blob reference ends it)."""
    from tplog.backends.lmdb.keys import event_key

    with Store(tmp_path / "s") as s:
        s.append("t", [started("t"), user("q " * 30), agent_start(), response("r " * 60)])
        key = event_key(tkey("t"), 3)

        def damage(txn: Any) -> None:
            v = bytearray(txn.get("events", key))
            v[14 if part == "header" else len(v) - 6] ^= 0x01
            txn.put("events", key, bytes(v))

        s.backend.engine.run_write(damage)
        closing = [response("x" * 300_000), response("after " * 60), completed()] if blob_after else [completed()]
        with pytest.raises(CorruptionError) as exc:
            s.append("t", closing)
        assert (exc.value.thread_id, exc.value.seq) == ("t", 3)
        assert _chunk_spans(s, "t") == [] and s.head("t").version == 4


# --------------------------------------------------------------------------- layout edges


def test_a_chunk_of_exactly_16_events_reads_back(tmp_path: Path) -> None:
    """16 is where msgpack's one-byte array header ends (0x90 | n for n < 16)."""
    with Store(tmp_path / "s") as s:
        events = [started("t"), user("q"), agent_start(), *[response(f"r{i} " * 30) for i in range(12)], completed()]
        s.append("t", events)
        assert _chunk_spans(s, "t") == [(1, 16)]
        assert [e.event for e in s.read("t")] == events
        assert [it.seq for it in s.backend.items("t")] == list(range(1, 17))


def _golden_plain() -> dict[str, Any]:
    golden = Path(__file__).parents[2] / "golden" / "chunks-v5.bin"
    return msgspec.msgpack.decode(golden.read_bytes())[1]  # seqs 13..20, stored uncompressed


@pytest.mark.parametrize(("last", "first", "ok"), [
    (20, 25, False),  # first after last
    ((1 << 20) + 5, 5, False),  # a span of 2**20 seqs
    ((1 << 20) + 20, (1 << 20) + 13, True),  # large seqs, an ordinary span
])
def test_a_chunks_first_seq_is_checked_against_its_key(last: int, first: int, ok: bool) -> None:
    from tplog.backends.lmdb.chunks import chunk_index
    from tplog.codec import Codec

    plain = _golden_plain()
    index, bodies = plain["value"][22:22 + int.from_bytes(plain["value"][18:22], "big")], plain["value"][
        22 + int.from_bytes(plain["value"][18:22], "big"):-4]
    key = plain["key"][:TKEY_SIZE] + last.to_bytes(8, "big")
    value = _v5(key, first, index, bodies)
    if ok:
        assert len(chunk_index(Codec(), key, value, None, "golden")[1]) == 8
        return
    with pytest.raises(CorruptionError) as exc:
        chunk_index(Codec(), key, value, None, "golden")
    assert (exc.value.thread_id, exc.value.seq) == ("golden", last)
    assert f"stored chunk (events up to seq {last}) names first seq {first}" in str(exc.value)


@pytest.mark.parametrize("damage", ["flag", "byte"])
def test_a_damaged_format_4_chunk_is_named_by_thread_and_last_seq(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "s"
    key, value = _one_chunk(path)
    with Store(path) as s:
        headers, bodies = _sections(s.codec, value)
    arr = bytes([0x90 | len(headers)])
    v4 = bytearray(_v4(key, 1, b"".join([b"\x92", arr, *headers, arr, *bodies]), flags=4 if damage == "flag" else 0))
    if damage == "byte":
        v4[30] ^= 0x01
    _write(path, {key: bytes(v4)})
    with Store(path) as s:
        for how, call in {**FULL_READS, **ID_ONLY_READS}.items():
            with pytest.raises(CorruptionError) as exc:
                call(s)
            assert (exc.value.thread_id, exc.value.seq) == ("t", 8), how
            assert "stored chunk (events up to seq 8) is truncated or failed its CRC-32 check" in str(exc.value), how


def test_a_tool_call_messages_body_is_kept_out_of_the_index_section(tmp_path: Path) -> None:
    from test_chunks import _call

    with Store(tmp_path / "s") as s:
        s.append("t", [started("t"), user("q " * 30), agent_start(), _call("c1"), response("r " * 60), completed()])
        (_, value), = _chunks_of(s, "t")
        end = 22 + int.from_bytes(value[18:22], "big")
        index = value[22:end] if not value[1] & 1 else s.codec.unpack(int.from_bytes(value[2:6], "big"),
                                                                        value[22:end])
        _, slots = _pair.decode(index)
        assert [bytes(b) == b"\xc0" for b in slots] == [False, True, False, True, True, False]
        assert [c.tool_call_id for c in s.pending("t").pending] == ["c1"]  # from its header's facts


def test_a_dictionary_trained_before_the_first_section_is_packed_is_not_used_for_either() -> None:
    """The dictionary is read once, when the chunk begins: one trained just after (here: before
    the index section is packed) compresses neither section."""
    import random

    from test_chunks import _enc

    from tplog.backends.lmdb.chunks import chunk_events, encode_chunk
    from tplog.codec import Codec, header_end

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
    headers: list[bytes | memoryview] = [v[12:header_end(v)] for v in values]
    bodies: list[bytes | memoryview] = [codec.encode_body(e) for e in events]
    real_pack = codec.pack
    ids: list[int] = []

    def pack(data: bytes, dict_id: int | None = None) -> tuple[int, int, bytes]:
        if not ids and not codec.has_dictionary(2):
            codec.add_dictionary(2, second_dict)  # the trainer commits its dictionary now
        out = real_pack(data) if dict_id is None else real_pack(data, dict_id)
        ids.append(out[1])
        return out

    codec.pack = pack  # type: ignore[method-assign]
    key = b"\x00" * 16 + len(events).to_bytes(8, "big")
    value = encode_chunk(codec, key, 1, headers, bodies)
    assert ids == [1, 1]
    reader = Codec()
    reader.add_dictionary(1, first_dict)
    reader.add_dictionary(2, second_dict)
    assert chunk_events(reader, key, value, None, "t") == events


def test_an_open_turn_is_compacted_by_the_append_that_reaches_a_multiple_of_open_every(tmp_path: Path) -> None:
    from tplog.backends.lmdb.chunks import OPEN_EVERY

    with Store(tmp_path / "s") as s:
        s.append("t", [started("t"), user("q"), agent_start()])
        for i in range(4, OPEN_EVERY + 1):
            s.append("t", [response(f"part {i} " * 20)])
            singles = [from_u64(k, TKEY_SIZE) for k, v in _chunks_of_all(s) if v[0] != CHUNK]
            assert singles == ([] if i == OPEN_EVERY else list(range(1, i + 1))), i


def _chunks_of_all(s: Store) -> list[tuple[bytes, bytes]]:
    with s.backend.engine.read() as txn:
        return [(bytes(k), bytes(v)) for k, v in txn.range("events")]
