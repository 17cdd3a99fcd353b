"""Append latency while other threads of the process are busy (CPython's GIL convoy).

    python tools/gil_contention.py [--busy spin|read|children|head] [--threads 3]
                                   [--switch-interval SECONDS] [--appends 40]

py-lmdb releases the GIL in every LMDB call; a thread that released it waits up to
``sys.getswitchinterval()`` (5 ms by default) to get it back while another thread runs
pure Python. This appends single events to a thread while ``--threads`` other threads
either spin in Python (``spin``, a CPU-heavy server) or read the store, and prints the
append latency percentiles. Compare ``--switch-interval 0.005`` with ``0.0005``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tplog import AgentTurnStarted, MessageRecorded, Store, ThreadStarted
from tplog.protocol import model as m


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--busy", choices=["spin", "read", "children", "head"], default="spin")
    ap.add_argument("--threads", type=int, default=3)
    ap.add_argument("--switch-interval", type=float, default=sys.getswitchinterval())
    ap.add_argument("--appends", type=int, default=40)
    args = ap.parse_args()
    sys.setswitchinterval(args.switch_interval)
    now = "2025-01-20T10:00:00Z"

    def msg(text: str) -> MessageRecorded:
        return MessageRecorded(message=m.ResponseMessage(parts=[m.TextPart(content=text)], agent_id="a", timestamp=now))

    # toy ids, agents never registered: GIL timing, not protocol rules
    with tempfile.TemporaryDirectory() as d, Store(d, check_rules=False) as s:
        s.append("parent", [ThreadStarted(thread_id="parent", created_at=now)])
        for i in range(50):
            s.append(f"child-{i}", [ThreadStarted(thread_id=f"child-{i}", created_at=now)])
        s.append("t", [ThreadStarted(thread_id="t", created_at=now), AgentTurnStarted(agent_id="a", started_at=now),
                       *[msg(f"message {i}") for i in range(50)]])
        stop = threading.Event()

        def busy() -> None:
            while not stop.is_set():
                if args.busy == "spin":
                    sum(i * i for i in range(1000))  # pure Python: holds the GIL
                elif args.busy == "read":
                    s.read("t")
                elif args.busy == "children":
                    s.children("parent")
                else:
                    s.head("t")

        workers = [threading.Thread(target=busy) for _ in range(args.threads)]
        for w in workers:
            w.start()
        time.sleep(0.1)
        lat = []
        for i in range(args.appends):
            t0 = time.perf_counter()
            s.append("t", [msg(f"more {i}")])
            lat.append(time.perf_counter() - t0)
        stop.set()
        for w in workers:
            w.join()
    lat.sort()
    p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1e3  # noqa: E731
    print(f"busy={args.busy} threads={args.threads} switch interval={args.switch_interval * 1e3:g} ms: "
          f"append p50 {p(0.5):.1f} ms, p90 {p(0.9):.1f} ms, max {lat[-1] * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
