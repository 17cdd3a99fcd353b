"""Durable append rate of the PostgreSQL backend vs raw psycopg with the same batching.

    python tools/pg_append_rate.py [--dsn postgresql://…] [--writers 1 16] [--appends 200] [--repeat 3]

Without ``--dsn`` a throwaway server is started (tests/postgres/pg_server.py). tplog:
W threads, each appending one event per call to its own thread (commits durable:
``synchronous_commit`` on). Raw: one connection inserting the same events as multi-row
INSERTs plus the counter-row update, one transaction per group of tplog's mean
group size (appends ÷ the recorder's commits during the tplog run).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from conftest import started, user

from tplog.backends.contract import ThreadAppend
from tplog.backends.postgres import PostgresRecorder
from tplog.codec import Codec
from tplog.events import UserTurnSubmitted
from tplog.ids import new_event_id

codec = Codec()


def event(i: int) -> UserTurnSubmitted:
    return user(f"hello {i}")


def run_tplog(dsn: str, writers: int, appends: int, schema: str) -> tuple[float, float]:
    rec = PostgresRecorder(dsn, schema=schema, pool_size=2)
    threads = [str(uuid.uuid4()) for _ in range(writers)]
    for t in threads:
        ev = started(t)
        rec.submit([ThreadAppend(thread_id=t, events=[codec.encode(ev, new_event_id(), time.time_ns())])]).result()
    barrier = threading.Barrier(writers + 1)

    def writer(t: str) -> None:
        barrier.wait()
        for i in range(appends):
            enc = codec.encode(event(i), new_event_id(), time.time_ns())
            rec.submit([ThreadAppend(thread_id=t, events=[enc], fresh_ids=True)]).result()

    ws = [threading.Thread(target=writer, args=(t,)) for t in threads]
    for w in ws:
        w.start()
    c0 = rec.commits
    barrier.wait()
    t0 = time.perf_counter()
    for w in ws:
        w.join()
    secs = time.perf_counter() - t0
    txns = max(1, rec.commits - c0)
    rec.close()
    return writers * appends / secs, writers * appends / txns


def run_raw(dsn: str, events: int, group: int, schema: str) -> float:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"CREATE SCHEMA {schema}".encode())
        c.execute(f"SET search_path TO {schema}".encode())
        c.execute("CREATE TABLE logs (log_id int PRIMARY KEY, position bigint NOT NULL)")
        c.execute("INSERT INTO logs VALUES (0, 0)")
        c.execute("CREATE TABLE events (log_id int, position bigint, event_id text, value bytea, "
                  "PRIMARY KEY (log_id, position))")
        values = [codec.encode(event(i), new_event_id(), time.time_ns()) for i in range(events)]
        t0 = time.perf_counter()
        for start in range(0, events, group):
            chunk = values[start:start + group]
            with c.transaction():
                base = c.execute("UPDATE logs SET position = position + %s WHERE log_id = 0 RETURNING position - %s",
                                 (len(chunk), len(chunk))).fetchone()
                assert base is not None
                c.execute("INSERT INTO events SELECT 0, %s + o, e, v FROM unnest(%s::bigint[], %s::text[], "
                          "%s::bytea[]) AS x(o, e, v)", (base[0], list(range(1, len(chunk) + 1)),
                                                         [e.event_id for e in chunk], [e.finish(b"") for e in chunk]))
        return events / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn")
    ap.add_argument("--writers", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--appends", type=int, default=200, help="appends per writer")
    ap.add_argument("--repeat", type=int, default=3, help="rounds, tplog and raw alternating")
    args = ap.parse_args()
    server = None
    dsn = args.dsn
    if dsn is None:
        from postgres.pg_server import PostgresServer

        server = PostgresServer().start()
        dsn = server.dsn
    try:
        n = 0
        for w in args.writers:
            rates, raws, groups = [], [], []
            for _ in range(args.repeat):  # alternating, so that load changes hit both sides alike
                rate, group = run_tplog(dsn, w, args.appends, f"bench_tplog_{n}")
                raws.append(run_raw(dsn, w * args.appends, max(1, round(group)), f"bench_raw_{n}"))
                rates.append(rate)
                groups.append(group)
                n += 1
            rate, raw, group = statistics.median(rates), statistics.median(raws), statistics.median(groups)
            ratios = sorted(t / r for t, r in zip(rates, raws, strict=True))
            print(f"{w:>3} writers: tplog {rate:8.0f} events/s (mean group {group:5.1f} events/txn); "
                  f"raw psycopg, same groups {raw:8.0f} events/s; ratio of medians {rate / raw:.2f}x "
                  f"(per round {', '.join(f'{x:.2f}' for x in ratios)})")
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
