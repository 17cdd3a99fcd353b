"""The store's structured log lines and its fold-cache counters, on a real LMDB store.

Every line the store logs names its thread (``thread_id``); :class:`tplog.logs.JsonFormatter`
writes them as JSON lines. ``Store.fold_cache_stats`` counts loads that found a thread's fold
(``/metrics`` serves it as ``tplog_fold_cache_hits_total``: tests/server/test_metrics.py).
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ToyStore as Store
from conftest import exchange, started, user

from tplog import WrongExpectedVersionError
from tplog.aio import AsyncStore
from tplog.logs import JsonFormatter, ThreadIdFilter, thread_context

T1 = "0b6b3b56-8a4e-4c1e-9f51-6a3c3e2f7a10"
T2 = "1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """tplog's records as JSON lines in a buffer (what `tplog serve --log-format json` installs)."""
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(ThreadIdFilter())
    logger = logging.getLogger("tplog")
    old = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield buf
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)


def test_store_lines_name_their_thread(tmp_path: Path, json_log: io.StringIO) -> None:
    with Store(tmp_path / "s") as s:
        s.append(T1, [started(T1), *exchange()])
        s.append(T2, [started(T2)])
        with pytest.raises(WrongExpectedVersionError):
            s.append(T1, [user("late")], expected_version=1)
        s.delete_thread(T2, reason="done")
    records = [json.loads(ln) for ln in json_log.getvalue().splitlines()]
    assert [(r["logger"], r["message"].split(":")[0], r["thread_id"]) for r in records] == [
        ("tplog.store", "appended", T1), ("tplog.store", "appended", T2), ("tplog.store", "append refused", T1),
        ("tplog.store", "thread deleted", T2)]
    assert (records[0]["first_seq"], records[0]["last_seq"], records[0]["first_position"]) == (1, 5, 1)
    assert records[2]["error"] == "WrongExpectedVersionError" and records[2]["level"] == "INFO"
    assert records[3]["reason"] == "done"
    assert all(r["time"].endswith("Z") and r["level"] in ("DEBUG", "INFO") for r in records)


def test_a_line_outside_any_thread_has_a_null_thread_id_and_the_context_fills_it(json_log: io.StringIO) -> None:
    log = logging.getLogger("tplog.server")
    log.info("no thread here")
    with thread_context(T1):
        log.info("inside %s", "a request")
        log.info("another thread named explicitly", extra={"thread_id": T2})
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("failed")
    log.info("after")
    records = [json.loads(ln) for ln in json_log.getvalue().splitlines()]
    assert [(r["message"], r["thread_id"]) for r in records] == [
        ("no thread here", None), ("inside a request", T1), ("another thread named explicitly", T2),
        ("failed", T1), ("after", None)]
    assert "ValueError: boom" in records[3]["exception"]


def test_fold_cache_stats_count_hits_and_misses(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        s.append(T1, [started(T1), *exchange()])
        assert s.fold_cache_stats() == {"hits": 0, "misses": 0, "events": 0, "budget": 20_000}
        s.load(T1)
        assert s.fold_cache_stats() == {"hits": 0, "misses": 1, "events": 5, "budget": 20_000}
        s.append(T1, [user("more")])
        s.load(T1)
        st = s.fold_cache_stats()
        assert (st["hits"], st["misses"], st["events"]) == (1, 1, 6)
        assert asyncio.run(AsyncStore(s).fold_cache_stats()) == st
    with Store(tmp_path / "s", fold_cache=0) as s:
        s.load(T1)
        assert s.fold_cache_stats() == {"hits": 0, "misses": 0, "events": 0, "budget": 0}
