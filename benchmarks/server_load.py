"""Load on the HTTP server: N concurrent Vercel AI chats against a real ``tplog serve`` process.

Starts uvicorn (``tplog.integrations.server:app_from_env``, the scripted demo agent, a
durable store by default) on a free 127.0.0.1 port, fires ``--chats`` chats with at most
``--concurrency`` in flight (half call a tool: 6 events recorded in 5 appends; half are
plain replies: 4 events in 3 appends; plus each new thread's ThreadStarted/AgentRegistered
in the first append), then stops the server gracefully so every worker dumps its append
timings (``TPLOG_SERVER_METRICS``: each ``AsyncStore.append`` the recorder awaits, timed in
the server) and reports:

- recorded events/s and appends/s over the chat phase (events counted in the store);
- p50/p99 of one append, and of the total time appends add to one chat request
  (the recorder awaits each append inline, so this is what recording costs a request);
- p50/p99 of the client's whole request (first byte to ``[DONE]``).

Prints a table and writes JSON (default ``benchmarks/results/server_load.json``).

Usage: ``python -m benchmarks.server_load [--chats 400] [--concurrency 200] [--workers 2]
[--durability durable|relaxed] [--json PATH] [--dir DIR]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import glob
import json
import os
import pathlib
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from tplog import thread_id_for

BENCH_DIR = pathlib.Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))
    return xs[k]


def _start(store: pathlib.Path, port: int, workers: int, durability: str, metrics: str) -> subprocess.Popen[bytes]:
    from tplog import Store
    from tplog.integrations.server import ENV_DURABILITY, ENV_METRICS, ENV_STORE

    Store(store, durability=durability).close()
    env = {
        **os.environ,
        ENV_STORE: str(store),
        ENV_DURABILITY: durability,
        ENV_METRICS: metrics,
        "PYTHONPATH": str(ROOT),
    }
    cmd = [
        sys.executable,
        "-m",
        "uvicorn",
        "--factory",
        "tplog.integrations.server:app_from_env",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--log-level",
        "warning",
        "--backlog",
        "4096",
        "--timeout-graceful-shutdown",
        "30",
        "--timeout-keep-alive",  # as `tplog serve` (see tplog.integrations.server.serve)
        "75",
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env)
    import httpx

    pids: set[int] = set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(pids) < workers:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            r = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
            if r.status_code == 200:
                pids.add(r.json()["pid"])
        time.sleep(0.1)
    if len(pids) < workers:
        proc.kill()
        raise SystemExit("server did not start")
    return proc


async def _chats(url: str, n: int, concurrency: int, tag: str) -> tuple[float, list[float], list[str]]:
    import httpx

    sem = asyncio.Semaphore(concurrency)
    lat: list[float] = []
    errors: list[str] = []
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as c:

        async def one(i: int) -> None:
            text = f"what is the weather in city{i}" if i % 2 == 0 else f"hello number {i}"
            body = {
                "trigger": "submit-message",
                "id": thread_id_for(f"bench-{tag}-{i}"),  # thread ids are UUIDs (the one id rule)
                "messages": [{"id": "u", "role": "user", "parts": [{"type": "text", "text": text}]}],
            }
            async with sem:
                t0 = time.perf_counter()
                try:
                    r = await c.post("/api/chat", json=body)
                except httpx.HTTPError as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
                    return
                lat.append(time.perf_counter() - t0)
                if r.status_code != 200 or "[DONE]" not in r.text:
                    errors.append(f"{r.status_code}: {r.text[:200]}")

        t0 = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(n)))
        return time.perf_counter() - t0, lat, errors


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.server_load", description=__doc__.splitlines()[0])
    p.add_argument("--chats", type=int, default=400, help="chats in total (default 400)")
    p.add_argument("--concurrency", type=int, default=200, help="chats in flight at once (default 200)")
    p.add_argument("--workers", type=int, default=2, help="uvicorn worker processes (default 2)")
    p.add_argument("--durability", choices=["durable", "relaxed"], default="durable")
    p.add_argument("--dir", default=None, help="where the store is created (default: a temp dir)")
    p.add_argument("--json", default=str(BENCH_DIR / "results" / "server_load.json"), help="results JSON path")
    p.add_argument("--quick", action="store_true", help="100 chats, 50 at once")
    p.add_argument("--resumable", choices=["1", "0"], default=None,
                   help="TPLOG_SERVER_RESUMABLE for the server: resumable streams on (default) or off")
    args = p.parse_args(argv)
    if args.quick:
        args.chats, args.concurrency = 100, 50
    if args.resumable is not None:
        os.environ["TPLOG_SERVER_RESUMABLE"] = args.resumable

    from tplog import Store

    run_ids = {thread_id_for(f"bench-run-{i}") for i in range(args.chats)}
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="tplog-server-load-") as tmp:
        store = pathlib.Path(tmp) / "store"
        metrics = str(pathlib.Path(tmp) / "metrics")
        port = _free_port()
        proc = _start(store, port, args.workers, args.durability, metrics)
        try:
            # warm-up (imports, first runs), not measured by the client; its appends are excluded below
            asyncio.run(_chats(f"http://127.0.0.1:{port}", 10, 10, "warm"))
            with Store(store, readonly=True) as s:
                pos0 = s.last_position
                txn0 = s.backend.engine._env.info()["last_txnid"]
            wall, lat, errors = asyncio.run(_chats(f"http://127.0.0.1:{port}", args.chats, args.concurrency, "run"))
            with Store(store, readonly=True) as s:
                recorded = [e for e in s.read_all(after=pos0) if e.thread_id in run_ids]
                # every LMDB write transaction is a durable commit: the live stream table's included
                txns = s.backend.engine._env.info()["last_txnid"] - txn0
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        dumps = [json.loads(pathlib.Path(f).read_text()) for f in sorted(glob.glob(metrics + ".*.json"))]
        try:
            from benchmarks._common import fsync_latency_ms

            fsync = fsync_latency_ms(tmp)
        except Exception:  # pragma: no cover
            fsync = {}

    # the warm-up chats' appends are in the dumps too: keep the measured ones
    appends = [a[2] for d in dumps for a in d["appends"] if a[0] in run_ids]
    reqs = [r for d in dumps for r in d["requests"] if r[0] in run_ids]
    per_req_append = [r[1] for r in reqs]
    per_req_n = [r[2] for r in reqs]
    events = len(recorded)
    ids = [e.event_id for e in recorded]
    result: dict[str, Any] = {
        "chats": args.chats,
        "concurrency": args.concurrency,
        "workers": args.workers,
        "durability": args.durability,
        "errors": len(errors),
        "wall_s": round(wall, 3),
        "recorded_events": events,
        "duplicate_event_ids": len(ids) - len(set(ids)),
        "events_per_s": round(events / wall, 1),
        "chats_per_s": round(args.chats / wall, 1),
        "appends_timed": len(appends),
        "appends_per_s": round(sum(per_req_n) / wall, 1),
        "append_ms_p50": round(_pct(appends, 50) * 1000, 3),
        "append_ms_p99": round(_pct(appends, 99) * 1000, 3),
        "append_ms_per_request_p50": round(_pct(per_req_append, 50) * 1000, 3),
        "append_ms_per_request_p99": round(_pct(per_req_append, 99) * 1000, 3),
        "appends_per_request_median": statistics.median(per_req_n) if per_req_n else 0,
        "resumable": os.environ.get("TPLOG_SERVER_RESUMABLE", "1") == "1",
        "write_txns": txns,
        "write_txns_per_chat": round(txns / args.chats, 2),
        "request_ms_p50": round(_pct(lat, 50) * 1000, 1),
        "request_ms_p99": round(_pct(lat, 99) * 1000, 1),
        "append_share_of_request_p50": round(_pct(per_req_append, 50) / _pct(lat, 50), 3) if lat else None,
        "machine": {
            "cores": os.cpu_count(),
            "python": sys.version.split()[0],
            **fsync,
            "loadavg_1m": round(os.getloadavg()[0], 2),
        },
        "command": " ".join([os.path.basename(sys.executable), "-m", "benchmarks.server_load", *sys.argv[1:]]),
    }

    rows = [
        ("chats (in flight)", f"{args.chats} ({args.concurrency})"),
        ("workers / durability", f"{args.workers} / {args.durability}"),
        ("errors", str(len(errors))),
        ("wall time", f"{wall:.2f} s"),
        ("recorded events", f"{events} ({result['duplicate_event_ids']} duplicate ids)"),
        ("recorded events/s", f"{result['events_per_s']:.0f}"),
        ("chats/s", f"{result['chats_per_s']:.1f}"),
        ("appends/s", f"{result['appends_per_s']:.0f}"),
        ("append p50 / p99", f"{result['append_ms_p50']:.2f} / {result['append_ms_p99']:.2f} ms"),
        ("appends per request (median)", f"{result['appends_per_request_median']}"),
        ("LMDB write transactions (per chat)", f"{txns} ({result['write_txns_per_chat']})"),
        (
            "append time per request p50 / p99",
            f"{result['append_ms_per_request_p50']:.2f} / {result['append_ms_per_request_p99']:.2f} ms",
        ),
        ("request p50 / p99 (client)", f"{result['request_ms_p50']:.1f} / {result['request_ms_p99']:.1f} ms"),
        ("fsync (4 KiB) median", f"{fsync.get('fsync_ms', float('nan'))} ms"),
    ]
    w = max(len(k) for k, _ in rows)
    print(f"\nserver_load: {args.chats} Vercel AI chats over HTTP against `tplog serve`\n")
    for k, v in rows:
        print(f"  {k:<{w}}  {v}")
    if errors:
        print(f"\nfirst errors: {errors[:3]}", file=sys.stderr)
    out = pathlib.Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {out}")
    return 1 if errors or result["duplicate_event_ids"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
