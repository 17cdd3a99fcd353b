"""The dictionary id in a chunk's header when only one of its two sections shrank with the
dictionary (tplog/backends/lmdb/chunks.py `encode_chunk`; written for its surviving mutant 44,
tests/MUTANTS.md): the header has one id for both sections, which must be the one the
compressed section was packed with, whichever section that is.
"""

from __future__ import annotations

from pathlib import Path

from conftest import ToyStore as Store
from conftest import agent_start, completed, link, response, started, user

from tplog.backends.lmdb.chunks import CHUNK
from tplog.backends.lmdb.keys import TKEY_SIZE, tkey


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
    from tplog.codec import Codec

    with Store(path, auto_dictionary=0) as r:
        reader: Codec = r.codec
        with r.backend.engine.read() as txn:
            assert chunk_events(reader, key, value, txn, "z") == [response("answer z " * 200)]
