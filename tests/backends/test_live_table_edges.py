"""The live table's edges (tplog.backends.live): the sweep's time bounds are exclusive, and a header
written without an owner names none. Memory and LMDB tables, in this process (see
tests/backends/test_live_streams.py for the behaviour on every backend)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tplog import Store
from tplog.backends.live import LiveHeader, LiveStreams, expired
from tplog.backends.live_streams import live_streams

T = "0b6f2a8e-6f59-4b4e-9d7c-0f1e2d3c4b5a"
OTHER = "5d1c8a7e-3b2f-4e6d-8c9b-1a2b3c4d5e6f"


@pytest.fixture(params=["memory", "lmdb"])
def live(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LiveStreams]:
    with Store("memory:" if request.param == "memory" else tmp_path / "store") as s:
        table = live_streams(s.backend)
        assert table is not None
        yield table


def test_a_stream_that_ended_exactly_at_done_before_is_kept(live: LiveStreams) -> None:
    """``done_before`` is exclusive: a stream whose last write is at that very ns has not ended before it."""
    h = live.write(T, 1, [b"a"], done=True)
    assert h.done is True and h.updated_ns > 0
    assert live.sweep(done_before=h.updated_ns, stale_before=0) == 0
    assert live.read(T)[1] == [b"a"]
    assert live.sweep(done_before=h.updated_ns + 1, stale_before=0) == 1
    assert live.read(T) == (None, [])


def test_a_running_stream_last_written_exactly_at_stale_before_is_kept(live: LiveStreams) -> None:
    """``stale_before`` is exclusive too, and a running stream is judged by it alone (not by ``done_before``)."""
    h = live.write(OTHER, 2, [b"b"])
    assert h.done is False
    assert live.sweep(done_before=h.updated_ns + 10**12, stale_before=h.updated_ns) == 0
    assert live.read(OTHER)[1] == [b"b"]
    assert live.sweep(done_before=0, stale_before=h.updated_ns + 1) == 1
    assert live.read(OTHER) == (None, [])


def test_a_header_written_without_an_owner_names_none(live: LiveStreams) -> None:
    h = live.write(T, 3, [b"x"])
    assert h.owner == "" and h.done is False and h.attached is True and h.stop is False
    hdr, _ = live.read(T)
    assert hdr is not None and hdr.owner == "" and hdr.done is False and hdr.attached is True


def test_expired_compares_the_bound_of_the_streams_state() -> None:
    """A pure function of the header: an ended stream against ``done_before``, a running one against
    ``stale_before``, both strictly."""
    ended = LiveHeader(turn_seq=1, done=True, updated_ns=100)
    running = LiveHeader(turn_seq=1, done=False, updated_ns=100)
    assert expired(ended, 101, 0) is True
    assert expired(ended, 100, 10**9) is False
    assert expired(running, 10**9, 100) is False
    assert expired(running, 0, 101) is True
