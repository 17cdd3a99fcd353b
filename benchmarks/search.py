"""Full-text search (issue #40): query latency by store size, search lag behind appends, append cost.

    python -m benchmarks.search [--quick] [--repeat N] [--seed S] [--dir D] [--json PATH] [--no-md]

Data: synthetic threads (:func:`thread`), each a title, a user prompt, a tool call and its
return and a response, drawn from a vocabulary with three selectivities: every thread holds
one *rare* word (each in ~0.1 % of the threads), one *medium* (~1 %) and one *common* (~10 %)
word, among filler. Stores of 10,000 and 100,000 threads (quick: 1,000 and 10,000) are
bulk-appended through the store's group commit (untimed) and indexed (timed: the index
build, i.e. ``rebuild --projection search``). Timed:

- **query latency**: ``Store.search(word)`` (20 hits) for seeded samples of each class,
  on a warm index; p50 and p99 per size and class. Goal: the 1 % word at 100,000 threads
  ≤ 50 ms (p50).
- **append throughput, search on vs off**: 16 writer threads, each appending whole
  exchanges (user turn, agent turn, response: 4 events) to its own thread, default
  durability. *On*: a searcher thread meanwhile searches, every 50 ms, for the token of
  the latest acknowledged append (so it catches the index up under the writers' load);
  *off*: no searcher. Interleaved, median kept. Goal: on ≥ 0.95x off.
- **search lag**: in the *on* runs, the time from an append's acknowledgement to the
  answer of a search that finds it (it includes waiting for the searcher's next tick, at
  most 50 ms); p99. Goal ≤ 1 s.
"""

from __future__ import annotations

import random
import statistics
import sys
import threading
import time
import uuid
from typing import Any

from benchmarks._common import freeze_heap, machine_info, start, tplog_bulk_load, workdir

NAME = "search"
TITLE = "Search (issue #40)"

SIZES = {
    "threads": ((1_000, 10_000), (10_000, 100_000)),
    "queries": (30, 100),  # per word class and size
    "appends": (100, 300),  # per writer per run
}
TINY = {"threads": (200, 500), "queries": 5, "appends": 3}
WRITERS = 16
TICK = 0.05  # seconds between the searcher's searches
T = "2025-01-20T10:00:00Z"
FILLER = [f"filler{i}" for i in range(2000)]


#: Word classes: each thread holds one word of each, so each word is in ~1/len(class) of the threads.
VOCAB: dict[str, list[str]] = {
    cls: [f"{cls}{i}" for i in range(count)] for cls, count in (("rare", 1000), ("medium", 100), ("common", 10))
}


def thread(tid: str, rng: random.Random, vocab: dict[str, list[str]]) -> list[Any]:
    from tplog import (
        AgentRegistered,
        AgentTurnCompleted,
        AgentTurnStarted,
        MessageRecorded,
        ThreadStarted,
        UserTurnSubmitted,
    )
    from tplog.protocol import (
        AgentConfig,
        RequestMessage,
        ResponseMessage,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
        UserTurn,
    )

    def text(k: int) -> str:
        return " ".join(rng.choice(FILLER) for _ in range(k))

    words = [rng.choice(vocab[c]) for c in ("rare", "medium", "common")]
    rng.shuffle(words)
    return [
        ThreadStarted(thread_id=tid, created_at=T, title=f"{text(3)} {words[0]}", metadata={"team": text(1)}),
        AgentRegistered(agent=AgentConfig(agent_id="bot", agent_name="bot", created_at=T)),
        UserTurnSubmitted(turn=UserTurn(submitted_at=T, parts=[UserPromptPart(content=f"{text(20)} {words[1]}")])),
        AgentTurnStarted(agent_id="bot", started_at=T),
        MessageRecorded(
            message=ResponseMessage(
                timestamp=T,
                agent_id="bot",
                parts=[ToolCallPart(tool_name="lookup", tool_call_id="c1", args={"q": text(3)})],
            )
        ),
        MessageRecorded(
            message=RequestMessage(
                timestamp=T,
                agent_id="bot",
                parts=[ToolReturnPart(tool_name="lookup", tool_call_id="c1", status="success", content=text(15))],
            )
        ),
        MessageRecorded(
            message=ResponseMessage(timestamp=T, agent_id="bot", parts=[TextPart(content=f"{text(30)} {words[2]}")])
        ),
        AgentTurnCompleted(completed_at=T),
    ]


def exchange(token: str) -> list[Any]:
    from tplog import AgentTurnCompleted, AgentTurnStarted, MessageRecorded, UserTurnSubmitted
    from tplog.protocol import ResponseMessage, TextPart, UserPromptPart, UserTurn

    return [
        UserTurnSubmitted(turn=UserTurn(submitted_at=T, parts=[UserPromptPart(content=f"question {token}")])),
        AgentTurnStarted(agent_id="bot", started_at=T),
        MessageRecorded(
            message=ResponseMessage(timestamp=T, agent_id="bot", parts=[TextPart(content="an answer of a few words")])
        ),
        AgentTurnCompleted(completed_at=T),
    ]


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")


def build(Store: Any, path: Any, n: int, seed: int) -> tuple[float, dict[str, list[str]]]:
    """A store of ``n`` threads (bulk appends, untimed) and its index (timed: the rebuild)."""
    rng = random.Random(seed)
    vocab = VOCAB
    threads = [
        (tid, thread(tid, rng, vocab))
        for tid in (str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(n))
    ]
    tplog_bulk_load(Store, path, threads, batch=2000)
    del threads
    with Store(path) as s:
        t0 = time.perf_counter()
        s.rebuild("search")
        return time.perf_counter() - t0, vocab


def query_latency(Store: Any, path: Any, vocab: dict[str, list[str]], k: int, seed: int) -> dict[str, list[float]]:
    rng = random.Random(seed)
    out: dict[str, list[float]] = {}
    with Store(path) as s:
        s.search("warmup")  # opens the index
        for cls, words in vocab.items():
            sample = [rng.choice(words) for _ in range(k)]
            times = []
            for w in sample:
                t0 = time.perf_counter()
                s.search(w)
                times.append(time.perf_counter() - t0)
            out[cls] = times
    return out


def writers_run(Store: Any, path: Any, appends: int, search_on: bool, run: int) -> tuple[float, list[float]]:
    """16 writers' appends/s, and (search on) the lag samples of the searcher."""
    acked: list[tuple[str, float]] = []
    lock = threading.Lock()
    stop = threading.Event()
    lags: list[float] = []
    with Store(path) as s:
        s.search("warmup")  # caught up before the clock starts
        tids = [str(uuid.uuid4()) for _ in range(WRITERS)]
        for tid in tids:
            s.append(tid, thread(tid, random.Random(tid), VOCAB))

        def writer(w: int) -> None:
            for i in range(appends):
                token = f"mk{run}x{w}x{i}"
                s.append(tids[w], exchange(token))
                with lock:
                    acked.append((token, time.perf_counter()))

        def searcher() -> None:
            while True:  # until the writers are done, and at least one sample taken
                with lock:
                    last = acked[-1] if acked else None
                if last is not None:
                    while not s.search(last[0]).hits:  # caught up within the budget: found at once
                        pass
                    lags.append(time.perf_counter() - last[1])
                if stop.is_set() and lags:
                    return
                stop.wait(TICK)

        ws = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
        sr = threading.Thread(target=searcher) if search_on else None
        t0 = time.perf_counter()
        if sr is not None:
            sr.start()
        for t in ws:
            t.start()
        for t in ws:
            t.join()
        elapsed = time.perf_counter() - t0
        stop.set()
        if sr is not None:
            sr.join()
    return WRITERS * appends / elapsed, lags


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    tiny = "--tiny" in argv  # the test's size: seconds
    argv = [a for a in argv if a != "--tiny"]
    args, size, report, Store = start(NAME, TITLE, __doc__ or "", SIZES, argv)
    sizes = TINY["threads"] if tiny else size["threads"]
    k = TINY["queries"] if tiny else size["queries"]
    appends = TINY["appends"] if tiny else size["appends"]
    repeat = 1 if tiny else max(args.repeat, 3)
    if Store is None:  # pragma: no cover
        report.finish()
        return 0
    with workdir(args.dir, NAME) as root:
        report.machine = machine_info(root)
        rows = []
        p50s: dict[tuple[int, str], float] = {}
        for n in sizes:
            t0 = time.perf_counter()
            build_s, vocab = build(Store, root / f"s{n}", n, args.seed + n)
            print(f"{n:,} threads built in {time.perf_counter() - t0:.0f} s (index {build_s:.1f} s)", file=sys.stderr)
            freeze_heap()
            lat = query_latency(Store, root / f"s{n}", vocab, k, args.seed)
            for cls, times in lat.items():
                p50s[(n, cls)] = statistics.median(times)
                rows.append(
                    [
                        f"{n:,}",
                        cls,
                        f"{len(vocab[cls])}",
                        f"{1000 * statistics.median(times):.1f}",
                        f"{1000 * pct(times, 0.99):.1f}",
                        f"{build_s:.1f}",
                    ]
                )
        report.table(
            "One-word query latency (20 hits, warm index)",
            ["threads", "word class", "words", "p50 ms", "p99 ms", "index build s"],
            rows,
        )

        path = root / f"s{sizes[0]}"
        rates: dict[bool, list[float]] = {False: [], True: []}
        lags: list[float] = []
        for r in range(repeat):
            for on in (False, True):
                rate, lg = writers_run(Store, path, appends, on, 2 * r + on)
                rates[on].append(rate)
                lags += lg
        off, on_ = statistics.median(rates[False]), statistics.median(rates[True])
        report.table(
            f"Appends under {WRITERS} writers (4-event exchanges, durable), store of {sizes[0]:,} threads",
            ["search", "appends/s (median)", "runs", "lag p50 ms", "lag p99 ms", "lag samples"],
            [
                ["off", f"{off:,.0f}", str(repeat), "-", "-", "-"],
                [
                    "on (a search every 50 ms)",
                    f"{on_:,.0f}",
                    str(repeat),
                    f"{1000 * pct(lags, 0.5):.0f}",
                    f"{1000 * pct(lags, 0.99):.0f}",
                    str(len(lags)),
                ],
            ],
        )
    big = sizes[-1]
    report.goal_value(
        f"one-word query (1 % word) at {big:,} threads, p50 ÷ 50 ms",
        p50s[(big, "medium")] / 0.05,
        1.0,
        "p50 latency",
        "50 ms",
        at_most=True,
    )
    report.goal_value(
        "search lag behind appends under 16 writers, p99 ÷ 1 s", pct(lags, 0.99), 1.0, "p99 lag", "1 s", at_most=True
    )
    report.goal_value("appends/s with search on ÷ off", on_ / off, 0.95, "search on", "search off")
    report.notes.append(
        "Lag counts from an append's acknowledgement to the answer of the first search that "
        "finds it, including up to 50 ms of waiting for the searcher's next tick."
    )
    report.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
