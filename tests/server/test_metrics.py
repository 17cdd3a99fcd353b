"""``GET /metrics`` scraped from a real server under a small load: the counters move with it."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from server.server_harness import ServerProcess, chat_body, wait_until

N_CHATS = 12

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(srv: ServerProcess, workers: set[str] | None = None) -> Samples:
    # a fresh connection each time, so with several workers any of them may answer
    r = httpx.get(f"{srv.url}/metrics", timeout=10.0)
    if workers is not None:
        workers.add(r.headers["x-tplog-worker"])
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    out: Samples = {}
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def val(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def _chats(srv: ServerProcess, run: str) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=N_CHATS, max_keepalive_connections=0)  # spread over workers
    async with srv.async_client(timeout=60.0, limits=limits) as c:
        return await asyncio.gather(*(
            c.post("/api/chat", json=chat_body(f"metrics-{run}-{i}", f"weather in city{i}" if i % 2 else f"hi {i}"))
            for i in range(N_CHATS)
        ))


class Tail:
    """An open ``GET /threads/{id}/events`` stream, held by a thread until closed."""

    def __init__(self, srv: ServerProcess, thread: str) -> None:
        self.client = httpx.Client(base_url=srv.url, timeout=httpx.Timeout(30.0, read=None))
        self.open = threading.Event()
        self.stop = threading.Event()
        self.worker = threading.Thread(target=self._run, args=(thread,), daemon=True)
        self.worker.start()
        assert self.open.wait(15), "the tail did not open"

    def _run(self, thread: str) -> None:
        with self.client.stream("GET", f"/threads/{thread}/events") as r:
            assert r.status_code == 200
            for _ in r.iter_raw():
                self.open.set()
                if self.stop.is_set():
                    return

    def close(self) -> None:
        self.stop.set()
        self.client.close()
        self.worker.join(10)


@pytest.fixture(scope="module")
def metrics_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path_factory.mktemp("metrics") / "store", workers=1).start()
    yield srv
    srv.stop()


def test_metrics_move_under_load(metrics_server: ServerProcess) -> None:
    srv = metrics_server
    before = scrape(srv)
    run = uuid.uuid4().hex[:8]
    results = asyncio.run(_chats(srv, run))
    assert [r.status_code for r in results] == [200] * N_CHATS

    # error responses, counted by status and code
    with srv.client() as c:
        assert c.get("/threads/no-such-thread").status_code == 404
        assert c.post("/api/chat", json={"messages": "nope"}).status_code == 422
        assert c.get("/no/such/route").status_code == 404

    tails = [Tail(srv, f"metrics-{run}-0"), Tail(srv, f"metrics-{run}-1")]
    try:
        during = scrape(srv)
        assert val(during, "tplog_sse_subscribers") == val(before, "tplog_sse_subscribers") + 2
    finally:
        for t in tails:
            t.close()
    after = wait_until(lambda: (s := scrape(srv)) and val(s, "tplog_sse_subscribers") == 0 and s)

    appends = val(after, "tplog_appends_total", outcome="ok") - val(before, "tplog_appends_total", outcome="ok")
    assert appends >= 2 * N_CHATS  # every chat appends its turn's start and its end at least
    assert (val(after, "tplog_append_seconds_count") - val(before, "tplog_append_seconds_count")) == appends
    assert val(after, "tplog_append_seconds_sum") > val(before, "tplog_append_seconds_sum")
    assert val(after, "tplog_append_seconds_bucket", le="+Inf") == val(after, "tplog_append_seconds_count")
    assert val(after, "tplog_append_events_total") - val(before, "tplog_append_events_total") >= appends
    assert val(after, "tplog_appends_total", outcome="error") == 0

    # group commit: every append went through a commit, and a commit carries one or more
    commits = val(after, "tplog_group_commits_total") - val(before, "tplog_group_commits_total")
    carried = val(after, "tplog_group_commit_appends_total") - val(before, "tplog_group_commit_appends_total")
    assert carried == appends and 0 < commits <= carried

    # projections: live and caught up with the log after the load
    position = val(after, "tplog_log_position")
    assert position > val(before, "tplog_log_position")
    assert val(after, "tplog_threads") >= N_CHATS
    for name in ("state", "links"):
        assert val(after, "tplog_projection_position", projection=name) == position
        assert val(after, "tplog_projection_lag", projection=name) == 0
        assert val(after, "tplog_projection_live", projection=name) == 1

    def errors(s: Samples, status: str, code: str) -> float:
        return val(s, "tplog_http_errors_total", status=status, code=code)

    assert errors(after, "404", "not_found") - errors(before, "404", "not_found") == 2
    assert errors(after, "422", "invalid_body") - errors(before, "422", "invalid_body") == 1
    assert val(after, "tplog_runs_active") == 0


def test_metrics_summed_over_workers(tmp_path: Path) -> None:
    """With PROMETHEUS_MULTIPROC_DIR, whichever of two workers answers a scrape reports the sum of both."""
    mp = tmp_path / "prom"
    mp.mkdir()
    srv = ServerProcess(tmp_path / "store", workers=2, env={"PROMETHEUS_MULTIPROC_DIR": str(mp)}).start()
    try:
        workers: set[str] = set()
        for _ in range(6):  # the kernel picks the worker per connection: rounds until both appended
            results = asyncio.run(_chats(srv, uuid.uuid4().hex[:8]))
            assert [r.status_code for r in results] == [200] * N_CHATS
            workers |= {r.headers["x-tplog-worker"] for r in results}
            if len(workers) == 2:
                break
        assert len(workers) == 2, f"all chats went to one worker: {workers}"
        answered: set[str] = set()
        totals = {val(scrape(srv, answered), "tplog_appends_total", outcome="ok") for _ in range(8)}
        wait_until(lambda: totals.add(val(scrape(srv, answered), "tplog_appends_total", outcome="ok"))
                   or len(answered) == 2, timeout=20)
        assert len(totals) == 1, f"scrapes disagree (per-worker counts, not summed): {totals}"
        assert totals.pop() >= 2 * N_CHATS
    finally:
        srv.stop()


def test_fold_cache_hits_are_counted(metrics_server: ServerProcess) -> None:
    """A thread's second load finds its fold in the worker's cache: tplog_fold_cache_hits_total
    moves; a first load of a thread the worker never folded is a miss."""
    run = uuid.uuid4().hex[:8]
    with metrics_server.client() as c:
        r = c.post("/api/chat", json=chat_body(f"fold-{run}", "hi"))
        assert r.status_code == 200, r.text
        before = scrape(metrics_server)
        for _ in range(3):
            assert c.get(f"/threads/fold-{run}/turns").status_code == 200
        after = scrape(metrics_server)
    assert val(after, "tplog_fold_cache_hits_total") >= val(before, "tplog_fold_cache_hits_total") + 2
    assert val(after, "tplog_fold_cache_events") > 0
    assert val(after, "tplog_fold_cache_misses_total") >= 1  # the chat's own first load of the new thread
