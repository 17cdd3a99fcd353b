"""Thread lifecycle: fork cost by prefix length, loading a fork vs a copy, filtered listing by store size.

    python -m benchmarks.lifecycle [--quick] [--repeat N] [--seed S] [--dir D] [--json PATH] [--no-md]

On the LMDB backend (``durability="relaxed"``), measured one after the other:

- **fork**: ``Store.fork(parent, at=parent's last seq)`` of a parent of 10 and of
  10,000 events (median of ``--repeat`` x 20 forks each); goal: the 10,000-event
  fork ≤ 1.2x the 10-event one. Also a fork in the middle of the 10,000-event parent
  (it folds the prefix once, reading, for the fork's head counters: not a goal), and
  the store's growth per fork: rows added to each LMDB table and bytes of event values,
  against what a copy of the same thread adds.
- **load**: ``Store.load`` (fold cache off) of a fork of the 10,000-event parent
  (with 4 events of its own) vs the same thread written out in full (``copy``);
  goal: fork ≤ 1.2x copy.
- **find**: ``Store.threads(status=..., limit=50)`` and ``Store.threads(agent=...,
  limit=50)``, first page, at 10,000 threads and at 1,000,000 (``--quick``:
  100,000); threads are toy ones (2 or 4 events, ``check_rules=False``) written
  with raw batched appends (20,000 per write transaction), 1 % waiting for an
  approval, 2 % interrupted, one of 100 agents each; goal: latency at the largest
  size ≤ 1.5x that at 10,000.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks._common import freeze_heap, machine_info, parse_args, workdir, write_results_section

NAME = "lifecycle"
TITLE = "Fork, find, retire: fork cost, fork loads, filtered listing by store size"
T = "2025-01-20T10:00:00Z"


NOTES = ("Forking at the parent's last seq reads its head and first event, and probes its children index for "
         "spawn facts (the goal's case; a parent whose events add links or spawn threads has its prefix read for "
         "the link rows the fork inherits); forking "
         "earlier (`middle/10000`) also folds the prefix once, reading, for the fork's head counters and turn-boundary "
         "check: it writes no more, but costs like a read of the prefix. A fork 100 deep loads through one head "
         "read and one range read per level (`fork_100_deep` vs `copy_of_100_deep`: not a goal).")


def _events() -> Any:
    from tplog.events import (
        AgentRegistered,
        AgentTurnCompleted,
        AgentTurnInterrupted,
        AgentTurnStarted,
        MessageRecorded,
        ThreadStarted,
        UserTurnSubmitted,
    )
    from tplog.protocol import model as m

    def started(t: str) -> Any:
        return ThreadStarted(thread_id=t, created_at=T, title=f"thread {t[:8]}")

    def register(a: str) -> Any:
        return AgentRegistered(agent=m.AgentConfig(agent_id=a, agent_name=a, created_at=T))

    def user(text: str) -> Any:
        return UserTurnSubmitted(turn=m.UserTurn(submitted_at=T, parts=[m.UserPromptPart(content=text)]))

    def turn(a: str, text: str) -> list[Any]:
        return [AgentTurnStarted(agent_id=a, started_at=T),
                MessageRecorded(message=m.ResponseMessage(timestamp=T, agent_id=a, parts=[m.TextPart(content=text)])),
                AgentTurnCompleted(completed_at=T)]

    def interrupted(a: str) -> list[Any]:
        return [AgentTurnStarted(agent_id=a, started_at=T), AgentTurnInterrupted(
            interruption=m.Interruption(reason="user_cancelled", interrupted_at=T))]

    def approval(a: str) -> list[Any]:
        return [AgentTurnStarted(agent_id=a, started_at=T), AgentTurnCompleted(completed_at=T,
                                                                             deferred={"c1": "approval"})]

    return started, register, user, turn, interrupted, approval


def conversation(n_events: int) -> list[Any]:
    """A thread of ``n_events`` events: start, register, then (user + 3-event agent turn) pairs."""
    started, register, user, turn, _, _ = _events()
    t = str(uuid.uuid4())
    evs: list[Any] = [started(t), register("a1")]
    i = 0
    while len(evs) + 4 <= n_events:
        evs += [user(f"question {i} " + "x" * 200), *turn("a1", f"answer {i} " + "y" * 400)]
        i += 1
    return evs


def _median_ms(fn: Any, n: int) -> float:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return statistics.median(out)


def _tables(store: Any) -> dict[str, int]:
    return {k: v["entries"] for k, v in store.stats()["tables"].items()}


def bench_fork(root: Path, repeat: int) -> dict[str, Any]:
    from tplog import Store

    out: dict[str, Any] = {}
    with Store(root / "fork", durability="relaxed", fold_cache=0) as s:
        parents = {}
        for n in (10, 10_000):
            evs = conversation(n)
            tid = evs[0].thread_id
            for i in range(0, len(evs), 2000):
                s.append(tid, evs[i:i + 2000])
            parents[n] = tid
        runs: dict[str, list[float]] = {}
        for _ in range(repeat):  # round-robin: load drift falls on both sizes alike
            for n, tid in parents.items():
                v = s.head(tid).version
                runs.setdefault(f"end/{n}", []).append(_median_ms(lambda tid=tid, v=v: s.fork(tid, v), 20))
        times = {k: statistics.median(v) for k, v in runs.items()}
        big = parents[10_000]
        mid = (s.head(big).version // 2) // 4 * 4 + 2  # after a completed agent turn
        times["middle/10000"] = _median_ms(lambda: s.fork(big, mid), 5)
        before = _tables(s)
        f = s.fork(big, s.head(big).version).thread_id
        grow_fork = {k: v - before[k] for k, v in _tables(s).items() if v != before[k]}
        # What a copy of the same thread adds.
        before = _tables(s)
        evs = [e.event for e in s.read(f)]
        c = str(uuid.uuid4())
        import msgspec

        s.append(c, [msgspec.structs.replace(evs[0], thread_id=c), *evs[1:]])
        grow_copy = {k: v - before[k] for k, v in _tables(s).items() if v != before[k]}
        out["fork_ms"] = times
        out["fork_rows"] = grow_fork
        out["copy_rows"] = grow_copy
        # load: a fork (4 own events after the prefix) vs the same thread copied.
        _, _, user, turn, _, _ = _events()
        f2 = s.fork(big, s.head(big).version).thread_id
        s.append(f2, [user("mine"), *turn("a1", "mine too")])
        evs = [e.event for e in s.read(f2)]
        c2 = str(uuid.uuid4())
        s.append(c2, [msgspec.structs.replace(evs[0], thread_id=c2), *evs[1:]])
        assert s.export(f2).turns == s.export(c2).turns
        load: dict[str, list[float]] = {"fork": [], "copy": []}
        for _ in range(max(3, repeat)):
            load["fork"].append(_median_ms(lambda: s.load(f2), 3))
            load["copy"].append(_median_ms(lambda: s.load(c2), 3))
        out["load_ms"] = {k: statistics.median(v) for k, v in load.items()}
        # 100 deep: each a fork of the last at its end, with one exchange of its own.
        chain = [big]
        for _ in range(100):
            g = s.fork(chain[-1], s.head(chain[-1]).version).thread_id
            s.append(g, [user("deeper"), *turn("a1", "ok")])
            chain.append(g)
        out["load_ms"]["fork_100_deep"] = statistics.median(
            [_median_ms(lambda: s.load(chain[-1]), 3) for _ in range(max(3, repeat))])
        evs = [e.event for e in s.read(chain[-1])]
        c3 = str(uuid.uuid4())
        s.append(c3, [msgspec.structs.replace(evs[0], thread_id=c3), *evs[1:]])
        out["load_ms"]["copy_of_100_deep"] = statistics.median(
            [_median_ms(lambda: s.load(c3), 3) for _ in range(max(3, repeat))])
    return out


def build_many(path: Path, n: int, seed: int) -> float:
    """``n`` toy threads by raw batched appends (the group commit's internals, as tplog_bulk_load)."""
    from tplog import Store
    from tplog.backends.lmdb.recorder import _Request
    from tplog.store import ANY

    started, register, user, _, interrupted, approval = _events()
    rng = random.Random(seed)
    t0 = time.perf_counter()
    with Store(path, durability="relaxed", check_rules=False, auto_dictionary=0) as s:
        encode, commit = s._encode, s.backend._commit  # type: ignore[attr-defined]
        batch: list[Any] = []
        for i in range(n):
            tid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
            agent = f"agent-{rng.randrange(100)}"
            r = rng.random()
            tail = approval(agent) if r < 0.01 else interrupted(agent) if r < 0.03 else []
            evs = [started(tid), user("hi"), *tail] if tail else [started(tid), register(agent)]
            batch.append(_Request(tid, encode(tid, evs, None), ANY, check_rules=False))
            if len(batch) == 20_000 or i == n - 1:
                commit(batch)
                for q in batch:
                    if q.error is not None:
                        raise q.error
                batch = []
    return time.perf_counter() - t0


def bench_find(root: Path, sizes: tuple[int, ...], repeat: int, seed: int) -> dict[str, Any]:
    from tplog import Store

    builds: dict[int, float] = {}
    for n in sizes:
        builds[n] = build_many(root / f"find{n}", n, seed)
        freeze_heap()
    queries = {"status=waiting_approval": {"status": "waiting_approval"},
               "status=interrupted+waiting": {"status": ["interrupted", "waiting_approval"]},
               "agent=agent-7": {"agent": "agent-7"},
               "agent+status=idle": {"agent": "agent-7", "status": "idle"}}
    lat: dict[str, dict[int, list[float]]] = {q: {n: [] for n in sizes} for q in queries}
    stores = {n: Store(root / f"find{n}", readonly=True) for n in sizes}
    try:
        for _ in range(max(5, repeat)):  # round-robin over sizes
            for q, kw in queries.items():
                for n in sizes:
                    s = stores[n]
                    s.threads(limit=50, **kw)  # warm: pages mapped
                    lat[q][n].append(_median_ms(lambda s=s, kw=kw: s.threads(limit=50, **kw), 20))
        counts = {q: {n: len(stores[n].threads(limit=50, **kw).threads) for n in sizes} for q, kw in queries.items()}
    finally:
        for st in stores.values():
            st.close()
    return {"build_s": builds, "ms": {q: {n: statistics.median(v) for n, v in d.items()} for q, d in lat.items()},
            "page_len": counts}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(NAME, TITLE, argv)
    sizes = (10_000, 100_000) if args.quick else (10_000, 1_000_000)
    with workdir(args.dir, NAME) as root:
        machine = machine_info(root)
        fork = bench_fork(root, args.repeat)
        find = bench_find(root, sizes, args.repeat, args.seed)
    ft = fork["fork_ms"]
    fork_ratio = ft["end/10000"] / ft["end/10"]
    load_ratio = fork["load_ms"]["fork"] / fork["load_ms"]["copy"]
    big, small = sizes[-1], sizes[0]
    find_ratios = {q: d[big] / d[small] for q, d in find["ms"].items()}
    goals = [
        ("fork at 10,000 events / at 10 events", fork_ratio, 1.2),
        ("load a fork / the same thread copied", load_ratio, 1.2),
        *((f"threads({q}) at {big:,} / at {small:,} threads", r, 1.5) for q, r in find_ratios.items()),
    ]
    lines = [f"## {TITLE}", "",
             f"`python -m benchmarks.{NAME}{' --quick' if args.quick else ''}` — {machine.get('cpu', '')}, "
             f"{machine.get('cores', '')} cores; LMDB backend, relaxed durability.", "",
             "| goal | measured | limit | met |", "|---|---:|---:|---|"]
    lines += [f"| {g} | {r:.2f}x | {lim}x | {'yes' if r <= lim else 'NO'} |" for g, r, lim in goals]
    lines += ["", "| fork (median ms) | |", "|---|---:|"]
    lines += [f"| {k} | {v:.3f} |" for k, v in ft.items()]
    lines += ["", "| load (median ms, fold cache off) | |", "|---|---:|"]
    lines += [f"| {k} | {v:.2f} |" for k, v in fork["load_ms"].items()]
    lines += ["", "Rows one fork adds (LMDB table entries) vs a copy of the same thread:", "",
              "| table | fork | copy |", "|---|---:|---:|"]
    for t in sorted(set(fork["fork_rows"]) | set(fork["copy_rows"])):
        lines.append(f"| {t} | {fork['fork_rows'].get(t, 0)} | {fork['copy_rows'].get(t, 0)} |")
    lines += ["", f"| filtered listing, first page of 50 (median ms) | {small:,} threads | {big:,} threads |",
              "|---|---:|---:|"]
    lines += [f"| threads({q}) | {d[small]:.3f} | {d[big]:.3f} |" for q, d in find["ms"].items()]
    built = ", ".join(f"{n:,} threads in {sec:.0f} s" for n, sec in find["build_s"].items())
    lines += ["", f"Stores built with raw batched appends: {built}.", "",
              NOTES]
    text = "\n".join(lines)
    print(text)
    result = {"name": NAME, "machine": machine, "quick": args.quick, "fork": fork, "find": find,
              "goals": [{"goal": g, "ratio": r, "limit": lim, "met": r <= lim} for g, r, lim in goals]}
    path = Path(__file__).parent / "results" / f"{NAME}.json"
    if args.json not in (None, "-"):
        path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1, default=str))
    if args.json == "-":
        print(json.dumps(result, indent=1, default=str))
    if not args.no_md:
        write_results_section(NAME, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
