"""``incoming``'s arguments and its pages in a scope, and ``links`` of a single-row LinkAdded
whose body is a shared blob, is missing its blob, or does not decode (tplog/backends/lmdb/reads.py
`incoming`, `links`; written for their surviving mutants, tests/MUTANTS.md). Real LMDB files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import ToyStore as Store
from conftest import agent_start, completed, link, response, started, user
from test_reads_event_paths import _move_body_to_blob, _with_body

from tplog import CorruptionError, InvalidInputError
from tplog.backends.lmdb.keys import event_key, tkey

TARGET = "00000000-0000-4000-8000-0000000000aa"
SOURCES = [f"{i:08x}-0000-4000-8000-{i:012x}" for i in (0x11, 0x52, 0x93, 0xd4, 0x35, 0x76, 0xb7, 0xf8)]


def _linked(s: Store) -> None:
    s.append(TARGET, [started(TARGET)])
    for src in SOURCES:
        s.append(src, [started(src), link(TARGET), link(TARGET)])  # two links of one pair


@pytest.mark.parametrize("limit", [-1, True, 1.5])
def test_incoming_refuses_a_limit_that_is_no_count(tmp_path: Path, limit: Any) -> None:
    with Store(tmp_path / "s") as s:
        _linked(s)
        for call in (s.incoming, s.backend.incoming):  # the facade checks too: the backend's own check
            with pytest.raises(InvalidInputError) as exc:
                call(TARGET, limit=limit)
            assert str(exc.value) == f"limit must be None or an int ≥ 0, not {limit!r}"


@pytest.mark.parametrize("after", [("a",), ("a", "b", "c"), ["a", "referenced"], ("", "referenced"),
                                   ("a", ""), (1, "referenced")], ids=repr)
def test_incoming_refuses_an_after_that_is_no_pair_of_ids(tmp_path: Path, after: Any) -> None:
    with Store(tmp_path / "s") as s:
        _linked(s)
        for call in (s.incoming, s.backend.incoming):
            with pytest.raises(InvalidInputError) as exc:
                call(TARGET, after=after)
            assert str(exc.value) == f"after must be a (source_thread_id, relation) pair, not {after!r}"


def test_incoming_refuses_an_after_of_another_relation_than_asked(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        _linked(s)
        for call in (s.incoming, s.backend.incoming):
            with pytest.raises(InvalidInputError) as exc:
                call(TARGET, relation="spawned_from", after=(SOURCES[0], "referenced"))
            assert str(exc.value) == "after names relation 'referenced', but relation='spawned_from' was asked"


@pytest.mark.parametrize("scope", [None, "tenant-a", "tenant-b"])
def test_incoming_pages_in_a_scope_start_after_the_scopes_source_key(tmp_path: Path, scope: str | None) -> None:
    """A page after ``(source, relation)`` starts past that source's key in the scope: keyed
    without the scope it would start elsewhere (the keys sort in another order), repeating or
    skipping sources."""
    with Store(tmp_path / "s") as root:
        s = root if scope is None else root.scoped(scope)
        _linked(s)
        everything = s.incoming(TARGET)
        assert len(everything) == 2 * len(SOURCES)
        order = [src for src, _ in everything[::2]]
        assert order == sorted(SOURCES, key=lambda t: tkey(t, scope))
        pages: list[tuple[str, str]] = []
        after = None
        for _ in range(len(SOURCES) + 1):  # bounded: a page that starts too early would repeat forever
            page = s.incoming(TARGET, limit=1, after=after)
            if not page:
                break
            assert len(page) == 2 and page[0] == page[1]  # a page never ends between two links of a pair
            pages += page
            after = page[-1]
        assert pages == everything


# --------------------------------------------------------------------------- links of a single row


def _single_link(s: Store) -> tuple[bytes, bytes]:
    s.append("t", [started("t"), user("q"), agent_start(), response("r"), completed()])  # a chunk
    s.append("t", [user("open"), link("u")])  # seqs 6, 7: single rows
    key = event_key(tkey("t"), 7)
    with s.backend.engine.read() as txn:
        return key, bytes(txn.get("events", key))


@pytest.mark.parametrize("blob", ["present", "missing"])
def test_links_read_a_link_whose_body_is_a_shared_blob(tmp_path: Path, blob: str) -> None:
    with Store(tmp_path / "s") as s:
        key, value = _single_link(s)
        want = s.links("t")
        assert [lk.thread_id for lk in want] == ["u"]
        _move_body_to_blob(s, key, value, keep_blob=blob == "present")
        if blob == "present":
            assert s.links("t") == want
        else:
            with pytest.raises(CorruptionError) as exc:
                s.links("t")
            assert (str(exc.value), exc.value.thread_id, exc.value.seq) == (
                "the event's shared blob is missing (thread t, seq 7)", "t", 7)


def test_links_name_a_link_whose_body_does_not_decode(tmp_path: Path) -> None:
    """Its CRCs hold (the body's rewritten with it), but the body is no msgpack."""
    with Store(tmp_path / "s") as s:
        key, value = _single_link(s)
        s.backend.engine.run_write(lambda txn: txn.put("events", key, _with_body(key, value, 0, b"\xc1")))
        with pytest.raises(CorruptionError) as exc:
            s.links("t")
        assert (exc.value.thread_id, exc.value.seq) == ("t", 7)


# --------------------------------------------------------------------------- children, a pair's neighbour, closed


def test_a_page_of_incoming_takes_the_rest_of_its_pair_and_no_neighbours_links(tmp_path: Path) -> None:
    """Two sources whose keys differ in their last byte only: the page of the first pair ends
    where that pair's links do (the pair is the key less its 8-byte seq)."""
    a, b = "00000000-0000-4000-8000-0000000000a1", "00000000-0000-4000-8000-0000000000a2"
    with Store(tmp_path / "s") as s:
        s.append(TARGET, [started(TARGET)])
        for src in (a, b):
            s.append(src, [started(src), link(TARGET), link(TARGET), link(TARGET)])
        assert tkey(a)[:-1] == tkey(b)[:-1]
        assert s.incoming(TARGET, limit=1) == [(a, "referenced")] * 3
        assert s.incoming(TARGET, limit=1, after=(a, "referenced")) == [(b, "referenced")] * 3


@pytest.mark.parametrize("limit", [-1, True])
def test_the_backends_children_refuses_a_limit_that_is_no_count(tmp_path: Path, limit: Any) -> None:
    with Store(tmp_path / "s") as s:
        _linked(s)
        with pytest.raises(InvalidInputError) as exc:
            s.backend.children(TARGET, limit=limit)
        assert str(exc.value) == f"limit must be None or an int ≥ 0, not {limit!r}"


@pytest.mark.parametrize("scope", [None, "tenant-a"])
def test_children_pages_in_a_scope_start_after_the_scopes_child_key(tmp_path: Path, scope: str | None) -> None:
    from conftest import spawn_message

    with Store(tmp_path / "s") as root:
        s = root if scope is None else root.scoped(scope)
        s.append(TARGET, [started(TARGET), user(), agent_start(), *[spawn_message(c) for c in SOURCES], completed()])
        everything = s.children(TARGET)
        assert everything == sorted(SOURCES, key=lambda t: tkey(t, scope))
        pages: list[str] = []
        after = None
        for _ in range(len(SOURCES) + 1):  # bounded: a page that starts too early would repeat forever
            page = s.children(TARGET, limit=3, after=after)
            if not page:
                break
            pages += page
            after = page[-1]
        assert pages == everything


def test_the_backends_link_reads_refuse_a_closed_store_naming_it(tmp_path: Path) -> None:
    from tplog.errors import StoreClosedError

    s = Store(tmp_path / "s")
    _linked(s)
    s.close()
    for call in (lambda: s.backend.incoming(TARGET), lambda: s.backend.children(TARGET),
                 lambda: s.backend.thread_events(TARGET)):
        with pytest.raises(StoreClosedError) as exc:
            call()
        assert str(exc.value) == f"{s.path}: cannot use the store, as it has been closed"
