"""A chat's latency while the server holds thousands of open streams (issue 37).

Starts ``tplog serve``'s app (uvicorn, one worker, the demo agent, a durable store) on a free
127.0.0.1 port with the stream caps raised to fit, and measures ``--chats`` small chats one
after the other (``POST /api/chat`` to the end of its stream): first idle, then with ``--tails``
idle ``/threads/{id}/events`` tails open (over ``--tail-threads`` threads nobody writes to) and
``--readers`` resumed streams (``GET /api/chat/{id}/stream``) of one long turn streaming all the
while. Before issue 37 every tail woke on every append of the store and every resumed stream
polled the live table every 50 ms: 2,000 tails made a small chat take 0.92 s instead of 0.025 s.

Goal: the loaded p99 under 2x the idle p99. Also reports the server's CPU over each phase.
Prints a table and writes JSON (default ``benchmarks/results/server_tails.json``) and its
section of ``benchmarks/RESULTS.md``.

Usage: ``python -m benchmarks.server_tails [--tails 2000] [--readers 200] [--chats 100]
[--json PATH] [--no-md] [--server-path DIR]`` (``--server-path``: the tplog checkout the
server runs, e.g. an older one to compare with).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import pathlib
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

BENCH_DIR = pathlib.Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
GOAL = 2.0  # loaded p99 ÷ idle p99


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))]


def raise_nofile(need: int) -> int:
    """Raise this process's open-file limit towards ``need`` (the server it starts inherits it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, need)) if hard != resource.RLIM_INFINITY else max(soft, need)
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return want


def start_server(store: pathlib.Path, port: int, streams: int,
                 server_path: pathlib.Path = ROOT) -> subprocess.Popen[bytes]:
    """``tplog serve``'s app on ``port``, its stream caps at ``streams``; returns once it answers."""
    import httpx

    from tplog import Store
    from tplog.integrations.server import ENV_LIMITS, ENV_SHUTDOWN_GRACE, ENV_STORE, ServerLimits

    Store(store).close()
    limits = ServerLimits(max_streams=streams, max_streams_per_client=streams)
    env = {**os.environ, ENV_STORE: str(store), ENV_LIMITS: limits.to_env(), ENV_SHUTDOWN_GRACE: "1",
           "PYTHONPATH": str(server_path)}
    cmd = [sys.executable, "-m", "uvicorn", "--factory", "tplog.integrations.server:app_from_env", "--host",
           "127.0.0.1", "--port", str(port), "--log-level", "warning", "--backlog", "4096",
           "--timeout-graceful-shutdown", "10", "--timeout-keep-alive", "75"]
    proc = subprocess.Popen(cmd, cwd=server_path, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("server did not start in 60 s")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def chat_body(chat_id: str, text: str) -> dict[str, Any]:
    msg = {"id": f"u-{uuid.uuid4().hex[:8]}", "role": "user", "parts": [{"type": "text", "text": text}]}
    return {"trigger": "submit-message", "id": chat_id, "messages": [msg]}


async def chats(url: str, n: int, tag: str) -> list[float]:
    """``n`` small chats, one after the other: each one's seconds from request to end of stream."""
    import httpx

    out: list[float] = []
    async with httpx.AsyncClient(base_url=url, timeout=60) as c:
        for i in range(n):
            t0 = time.perf_counter()
            r = await c.post("/api/chat", json=chat_body(f"{tag}-{i}", f"hello {i}"))
            if r.status_code != 200 or "[DONE]" not in r.text:
                raise RuntimeError(f"chat {tag}-{i}: {r.status_code} {r.text[:200]}")
            out.append(time.perf_counter() - t0)
    return out


@dataclass
class Streams:
    """Open SSE connections (raw sockets: thousands of them cost little here), drained as they come."""

    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    finished: int = 0
    received: int = 0

    async def open(self, port: int, path: str, headers: str = "") -> int:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}\r\n".encode())
        await writer.drain()
        status = int((await reader.readline()).split()[1])
        self.writers.append(writer)
        self.tasks.append(asyncio.get_running_loop().create_task(self._drain(reader)))
        return status

    async def _drain(self, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(Exception):
            while chunk := await reader.read(65536):
                self.received += len(chunk)
                if b"[DONE]" in chunk:
                    self.finished += 1
                    break

    async def close(self) -> None:
        for w in self.writers:
            w.close()
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def hold(port: int, tails: list[tuple[str, int]], readers: int, slow_chat: str, url: str) -> None:
    """The load, in a process of its own (its event loop is not the measuring client's): the
    tails (thread, after-seq), then the slow turn and ``readers`` resumed streams of it; prints
    ``ready`` and holds them until its standard input closes."""
    import httpx

    streams = Streams()
    loop = asyncio.get_running_loop()

    async def slow() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=600) as c:
            await c.post("/api/chat", json=chat_body(slow_chat, "slow 2000 50"))

    slow_task = loop.create_task(slow())
    try:
        for i, (tid, after) in enumerate(tails):
            st = await streams.open(port, f"/threads/{tid}/events", f"Last-Event-ID: {after}\r\n")
            if st != 200:
                raise RuntimeError(f"tail {i}: HTTP {st}")
        resumed = 0
        deadline = time.monotonic() + 30
        while resumed < readers and time.monotonic() < deadline:
            st = await streams.open(port, f"/api/chat/{slow_chat}/stream")
            if st == 200:
                resumed += 1
            elif st == 204:  # the turn has not opened yet, or ended
                await asyncio.sleep(0.05)
            else:
                raise RuntimeError(f"resume reader {resumed}: HTTP {st}")
        if resumed < readers:
            raise RuntimeError(f"only {resumed} of {readers} resumed streams opened")
        print("ready", flush=True)
        await loop.run_in_executor(None, sys.stdin.read)  # until the parent closes it
        print(f"received {streams.received}", flush=True)
    finally:
        await streams.close()
        slow_task.cancel()
        await asyncio.gather(slow_task, return_exceptions=True)


async def scenario(url: str, port: int, pid: int, *, tails: int, readers: int, n_chats: int,
                   tail_threads: int = 20) -> dict[str, Any]:
    """Idle chats, the same with ``tails`` tails and ``readers`` resumed streams open, then idle
    again (the idle figures are of both idle phases: the machine's own load shifts meanwhile)."""
    import httpx

    run = uuid.uuid4().hex[:8]
    await chats(url, 5, f"warm-{run}")
    c0, t0 = cpu_seconds(pid), time.perf_counter()
    idle = await chats(url, n_chats // 2, f"idle-{run}")
    idle_cpu = [(cpu_seconds(pid) - c0, time.perf_counter() - t0)]

    watched = [str(uuid.uuid4()) for _ in range(tail_threads)]
    async with httpx.AsyncClient(base_url=url, timeout=60) as c:
        for t in watched:
            assert (await c.post("/api/chat", json=chat_body(t, "watched"))).status_code == 200
        versions = [(await c.get(f"/threads/{t}/turns")).json()["version"] for t in watched]
    spec = {"port": port, "url": url, "readers": readers, "slow_chat": f"slow-{run}",
            "tails": [(watched[i % tail_threads], versions[i % tail_threads]) for i in range(tails)]}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "benchmarks.server_tails", "--hold", json.dumps(spec), cwd=ROOT,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 120)
        if line.strip() != b"ready":
            raise RuntimeError(f"the load process did not start: {line!r}")
        await asyncio.sleep(1.0)  # the readers are reading
        c0, t0 = cpu_seconds(pid), time.perf_counter()
        await asyncio.sleep(3.0)  # what the open streams alone cost the server
        load_cpu = (cpu_seconds(pid) - c0) / (time.perf_counter() - t0)
        c0, p0, t0 = cpu_seconds(pid), time.process_time(), time.perf_counter()
        loaded = await chats(url, n_chats, f"loaded-{run}")
        wall = time.perf_counter() - t0
        loaded_cpu = (cpu_seconds(pid) - c0) / wall
        client_cpu = (time.process_time() - p0) / wall
    finally:
        proc.stdin.close()
        out = (await asyncio.wait_for(proc.stdout.read(), 60)).decode()
        await proc.wait()
    received = int(out.split()[-1]) if out.startswith("received") else 0
    c0, t0 = cpu_seconds(pid), time.perf_counter()
    idle += await chats(url, n_chats - n_chats // 2, f"idle2-{run}")
    idle_cpu.append((cpu_seconds(pid) - c0, time.perf_counter() - t0))
    ms = 1000.0
    return {
        "tails": tails, "readers": readers, "chats": n_chats, "tail_threads": tail_threads,
        "idle_ms_p50": round(pct(idle, 50) * ms, 1), "idle_ms_p99": round(pct(idle, 99) * ms, 1),
        "loaded_ms_p50": round(pct(loaded, 50) * ms, 1), "loaded_ms_p99": round(pct(loaded, 99) * ms, 1),
        "ratio_p50": round(pct(loaded, 50) / pct(idle, 50), 2), "ratio_p99": round(pct(loaded, 99) / pct(idle, 99), 2),
        "server_cpu_idle": round(sum(c for c, _ in idle_cpu) / sum(w for _, w in idle_cpu), 3),
        "server_cpu_loaded": round(loaded_cpu, 3), "server_cpu_streams_only": round(load_cpu, 3),
        "client_cpu_loaded": round(client_cpu, 3),
        "resumed_kib_total": round(received / 1024, 1),
        # CPU is steadier than latency on a shared machine: the server's CPU per chat, with the
        # streams' own share (measured without chats) taken out of the loaded phase
        "server_cpu_ms_per_chat_idle": round(sum(c for c, _ in idle_cpu) / len(idle) * ms, 2),
        "server_cpu_ms_per_chat_loaded": round(max(0.0, loaded_cpu - load_cpu) * wall / len(loaded) * ms, 2),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.server_tails", description=__doc__.splitlines()[0])
    p.add_argument("--tails", type=int, default=2000, help="idle event tails open (default 2000)")
    p.add_argument("--readers", type=int, default=200, help="resumed streams of one running turn (default 200)")
    p.add_argument("--chats", type=int, default=100, help="chats measured per phase (default 100)")
    p.add_argument("--dir", default=None, help="where the store is created (default: a temp dir)")
    p.add_argument("--json", default=str(BENCH_DIR / "results" / "server_tails.json"), help="results JSON path")
    p.add_argument("--no-md", action="store_true", help="do not rewrite this module's section of RESULTS.md")
    p.add_argument("--server-path", default=str(ROOT), help="the tplog checkout the server runs (default: this one)")
    p.add_argument("--hold", default=None, help=argparse.SUPPRESS)  # the load process (see hold())
    args = p.parse_args(argv)
    if args.hold is not None:
        spec = json.loads(args.hold)
        raise_nofile(2 * (len(spec["tails"]) + spec["readers"]) + 256)
        asyncio.run(hold(spec["port"], [tuple(t) for t in spec["tails"]], spec["readers"], spec["slow_chat"],
                         spec["url"]))
        return 0
    nofile = raise_nofile(2 * (args.tails + args.readers) + 256)
    if nofile < args.tails + args.readers + 128:
        raise SystemExit(f"the open-file limit ({nofile}) is too low for {args.tails + args.readers} streams")
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="tplog-server-tails-") as tmp:
        port = _free_port()
        proc = start_server(pathlib.Path(tmp) / "store", port, args.tails + args.readers + 16,
                            pathlib.Path(args.server_path))
        try:
            res = asyncio.run(scenario(f"http://127.0.0.1:{port}", port, proc.pid, tails=args.tails,
                                       readers=args.readers, n_chats=args.chats))
        finally:
            stop_server(proc)
    res["goal_ratio_p99"] = GOAL
    res["met"] = res["ratio_p99"] < GOAL
    res["machine"] = {"cores": os.cpu_count(), "python": sys.version.split()[0],
                      "loadavg_1m": round(os.getloadavg()[0], 2)}
    res["command"] = " ".join(["python", "-m", "benchmarks.server_tails",
                               *(argv if argv is not None else sys.argv[1:])])
    rows = [
        ("open tails (threads) / resumed streams", f"{res['tails']} ({res['tail_threads']}) / {res['readers']}"),
        ("chat p50 / p99, idle (before and after)", f"{res['idle_ms_p50']:.1f} / {res['idle_ms_p99']:.1f} ms"),
        ("chat p50 / p99, loaded", f"{res['loaded_ms_p50']:.1f} / {res['loaded_ms_p99']:.1f} ms"),
        ("loaded ÷ idle, p50 / p99", f"{res['ratio_p50']:.2f}x / {res['ratio_p99']:.2f}x (goal p99 < {GOAL:g}x: "
                                     f"{'met' if res['met'] else 'NOT met'})"),
        ("server CPU: chats idle / streams alone / both", f"{res['server_cpu_idle']:.0%} / "
         f"{res['server_cpu_streams_only']:.0%} / {res['server_cpu_loaded']:.0%} of one core"),
        ("server CPU per chat, idle / loaded (streams' share out)",
         f"{res['server_cpu_ms_per_chat_idle']:.1f} / {res['server_cpu_ms_per_chat_loaded']:.1f} ms"),
        ("resumed stream data received (all readers)", f"{res['resumed_kib_total']:.0f} KiB"),
    ]
    w = max(len(k) for k, _ in rows)
    print(f"\nserver_tails: {args.chats} small chats, idle and with open streams, against one uvicorn worker\n")
    for k, v in rows:
        print(f"  {k:<{w}}  {v}")
    out = pathlib.Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"\nwrote {out}")
    if not args.no_md:
        from benchmarks._common import write_results_section

        write_results_section("server_tails", [
            "## A chat's latency with thousands of open streams (`python -m benchmarks.server_tails`)", "",
            f"`{res['command']}`, {res['machine']['cores']} cores, load {res['machine']['loadavg_1m']}: "
            f"{res['chats']} small chats one after the other, idle, then with {res['tails']} idle event tails "
            f"and {res['readers']} resumed streams of one running turn open (one uvicorn worker).", "",
            "| | p50 | p99 |", "|---|---:|---:|",
            f"| idle | {res['idle_ms_p50']:.1f} ms | {res['idle_ms_p99']:.1f} ms |",
            f"| loaded | {res['loaded_ms_p50']:.1f} ms | {res['loaded_ms_p99']:.1f} ms |",
            f"| loaded ÷ idle | {res['ratio_p50']:.2f}x | {res['ratio_p99']:.2f}x (goal < {GOAL:g}x: "
            f"{'met' if res['met'] else 'NOT met'}) |", "",
            f"Server CPU (of one core): {res['server_cpu_idle']:.0%} running the idle chats, "
            f"{res['server_cpu_streams_only']:.0%} for the open streams alone (no chats), "
            f"{res['server_cpu_loaded']:.0%} running the chats with the streams open.",
        ])
    return 0 if res["met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
