"""Prometheus metrics for ``tplog serve``: ``GET /metrics`` (prometheus-client, in the ``server`` extra).

What is counted where it happens (appends, their latency, error responses, live event tails)
lives in this process's metric objects; what the store already knows (group-commit counts,
fold-cache hits, projection positions, runs in flight) is read at scrape time by a collector,
so it costs nothing between scrapes.

Several workers (``--workers N``): each worker is a process with its own counters. Set
``PROMETHEUS_MULTIPROC_DIR`` to an empty directory before starting the server and every
worker writes its counters there; a scrape, whichever worker answers it, then sums them
(prometheus-client's multiprocess mode). The store-read gauges come from the worker that
answered: the group-commit counts and fold-cache hits are that worker's, projection positions
are the store's.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["CONTENT_TYPE", "MULTIPROC_ENV", "ServerMetrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

# Appends are sub-millisecond when alone, tens of ms when a group commit waits on fsync.
_APPEND_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class _StoreCollector(Collector):
    """Reads the store's own counters at scrape time (``Store.stats()``, ``Store.projections()``)."""

    def __init__(self, source: Callable[[], Any], runs: Callable[[], int]) -> None:
        self.source = source  # returns the open Store, or None before the lifespan opened it
        self.runs = runs

    def collect(self) -> Iterator[Metric]:
        store = self.source()
        if store is None:
            return
        stats = store.stats()
        gc = stats["group_commit"]
        yield CounterMetricFamily("tplog_group_commits", "Write transactions committed by this process's group "
                                  "commit (each carries one or more appends)", value=gc["commits"])
        yield CounterMetricFamily("tplog_group_commit_appends", "Appends carried by those commits (divided by "
                                  "tplog_group_commits_total: the mean group size)", value=gc["appends"])
        yield GaugeMetricFamily("tplog_log_position", "The store's last global log position",
                                value=stats["last_position"])
        yield GaugeMetricFamily("tplog_threads", "Threads in the store", value=stats["threads"])
        yield GaugeMetricFamily("tplog_events", "Events in the store", value=stats["events"])
        pos = GaugeMetricFamily("tplog_projection_position", "Log position each projection covers",
                                labels=["projection"])
        lag = GaugeMetricFamily("tplog_projection_lag", "Log positions a projection is behind the log "
                                "(0 when live; a stale projection needs `tplog rebuild`)", labels=["projection"])
        live = GaugeMetricFamily("tplog_projection_live", "1 if the projection is live, 0 if stale",
                                 labels=["projection"])
        for name, info in store.projections().items():
            pos.add_metric([name], info["position"])
            lag.add_metric([name], max(0, stats["last_position"] - info["position"]))
            live.add_metric([name], 1 if info["status"] == "live" else 0)
        yield pos
        yield lag
        yield live
        yield GaugeMetricFamily("tplog_runs_active", "Agent runs in flight in this process", value=self.runs())
        folds = store.fold_cache_stats()
        yield CounterMetricFamily("tplog_fold_cache_hits", "Thread loads that found the thread's fold in this "
                                  "process's fold cache (they read and fold only the events appended since)",
                                  value=folds["hits"])
        yield CounterMetricFamily("tplog_fold_cache_misses", "Thread loads that folded the thread's log from its "
                                  "first event", value=folds["misses"])
        yield GaugeMetricFamily("tplog_fold_cache_events", "Events the folds in this process's fold cache cover",
                                value=folds["events"])


class ServerMetrics:
    """The server's metrics: one per app, on its own registry (several apps may share a process)."""

    def __init__(self, store: Callable[[], Any], runs: Callable[[], int]) -> None:
        self.multiproc = bool(os.environ.get(MULTIPROC_ENV))
        self.registry = CollectorRegistry(auto_describe=True)
        reg = self.registry
        self.appends = Counter("tplog_appends", "Appends by the server, by outcome", ["outcome"], registry=reg)
        self.append_events = Counter("tplog_append_events", "Events appended by the server", registry=reg)
        self.append_seconds = Histogram("tplog_append_seconds", "Latency of one append (await to commit)",
                                        buckets=_APPEND_BUCKETS, registry=reg)
        self.errors = Counter("tplog_http_errors", "Error responses, by status and error code",
                              ["status", "code"], registry=reg)
        self.sse = Gauge("tplog_sse_subscribers", "Live event tails (GET /threads/{id}/events) open",
                         registry=reg, multiprocess_mode="livesum")
        self.store_collector = _StoreCollector(store, runs)
        if not self.multiproc:
            reg.register(self.store_collector)

    def append(self, n_events: int, seconds: float, ok: bool) -> None:
        self.appends.labels("ok" if ok else "error").inc()
        if ok:
            self.append_events.inc(n_events)
        self.append_seconds.observe(seconds)

    def error(self, status: int, code: str) -> None:
        self.errors.labels(str(status), code).inc()

    def process_exit(self) -> None:
        """In multiprocess mode, drop this worker's live gauges (its open tails end with it)."""
        if self.multiproc:
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]

    def render(self) -> bytes:
        """The exposition text: this registry, or in multiprocess mode every worker's files summed."""
        if not self.multiproc:
            return generate_latest(self.registry)
        from prometheus_client import multiprocess

        reg = CollectorRegistry()
        multiprocess.MultiProcessCollector(reg)  # type: ignore[no-untyped-call]
        reg.register(self.store_collector)
        return generate_latest(reg)
