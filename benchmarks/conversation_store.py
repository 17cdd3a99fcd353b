"""Pydantic AI conversation stores: tplog's ``TplogConversationStore`` vs SQLite and in-memory.

    python -m benchmarks.conversation_store [--quick] [--repeat N] [--dir D] [--json PATH] [--no-md] [--no-profile]

The same Pydantic AI ``ConversationStore`` API on three backends, in one run:

- tplog: ``TplogConversationStore(path)`` on LMDB in a real directory, its durable default;
- SQLite: ``benchmarks/_sqlite_conversation_store.py``, the five primitives written as
  Pydantic AI's docs suggest for a database (one row per entry, messages as
  ``ModelMessagesTypeAdapter`` JSON, WAL, ``synchronous=FULL``, one recursive query per history);
- in memory: Pydantic AI's own ``InMemoryConversationStore`` (no disk, a deepcopy per read).

Workloads (each repetition interleaves the stores; median and min-max over the repetitions):

1. save one run's new messages (a user prompt and the model's reply, from a real
   ``Agent(FunctionModel)`` run, untimed) — one conversation at a time, and 16 conversations
   at once (``asyncio.gather`` of 16 saves, each its own conversation); the stores are warmed
   first, so the figures are a steady state;
2. cold load of a 20-message and a 2,000-message conversation: a new store object on the same
   files, its first load timed (opening it is not; the OS page cache is warm for every store);
3. warm load: the same store object, the same conversation, loaded again and again.

The conversations loaded are the suite's generated threads as Pydantic AI messages (text, tool
calls and returns, thinking), the same ones ``benchmarks.peers`` loads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import cProfile
import io
import pathlib
import pstats
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from benchmarks._common import Report, machine_info, run_interleaved, start, workdir

NAME = "conversation_store"
TITLE = "Pydantic AI conversation store (#36)"

TPLOG = "tplog TplogConversationStore (LMDB, durable)"
SQLITE = "SQLite ConversationStore (WAL, synchronous=FULL)"
MEMORY = "pydantic-ai InMemoryConversationStore"

W_SAVE1 = "save one run's new messages, 1 conversation"
W_SAVE16 = "save one run's new messages, 16 conversations at once"
W_COLD20 = "cold load, 20-message conversation"
W_COLD2K = "cold load, 2,000-message conversation"
W_WARM20 = "warm load, 20-message conversation"
W_WARM2K = "warm load, 2,000-message conversation"

# (quick, full)
SIZES = {
    "saves": (10, 30),  # saves of one conversation per measurement
    "rounds": (2, 5),  # rounds of 16 concurrent saves per measurement
    "short": (20, 20),
    "long": (2_000, 2_000),
    "warm_loads": (5, 20),  # loads per warm measurement (the 2,000-message one: a fifth)
}
TINY = {"saves": 2, "rounds": 1, "short": 20, "long": 100, "warm_loads": 2}
MIN_REPEAT = 5  # the spread needs at least this many repetitions
CONCURRENT = 16

# goal: (workload, target)
GOALS = [(W_SAVE1, 1.0), (W_SAVE16, 1.0), (W_COLD20, 2.0), (W_COLD2K, 2.0), (W_WARM20, 10.0), (W_WARM2K, 10.0)]


class _Report(Report):
    """The module's own table (median, spread, both ratios) replaces the generic rate tables."""

    def markdown(self) -> list[str]:
        rows, data = self.rows, self.data
        self.rows, self.data = [], {}
        try:
            return super().markdown()
        finally:
            self.rows, self.data = rows, data


def _agent() -> Any:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import FunctionModel

    reply = "Here is what I found. " * 30  # ~660 bytes, a short answer

    def model(messages: list[Any], info: Any) -> Any:
        return ModelResponse(parts=[TextPart(f"{reply}({len(messages)})")])

    return Agent(FunctionModel(model))


def _open(system: str, root: Any) -> Any:
    from benchmarks._sqlite_conversation_store import SQLiteConversationStore
    from tplog.integrations.pydantic_ai import TplogConversationStore

    if system == TPLOG:
        return TplogConversationStore(root / "tplog")
    if system == SQLITE:
        return SQLiteConversationStore(root / "conversations.db")
    raise ValueError(system)


def _close(store: Any) -> None:
    close = getattr(store, "close", None)
    if close is not None:
        close()


class Saver:
    """One store kept open through the save workloads, with 16 conversations growing in it."""

    def __init__(self, store: Any, agent: Any, tag: str) -> None:
        from pydantic_ai.conversation import Conversation
        from pydantic_ai.usage import UsageLimits

        self.store, self.agent, self.n = store, agent, 0
        # a conversation's usage adds up over its runs; the default cap (50 requests) would stop it
        self.limits = UsageLimits(request_limit=None)
        self.convs = [Conversation(conversation_id=f"{tag}-{i}") for i in range(CONCURRENT)]

    async def _runs(self, k: int) -> list[Any]:
        self.n += 1
        return list(await asyncio.gather(*(self.agent.run(f"question {self.n} in {c.conversation_id}",
                                                          conversation=c, usage_limits=self.limits)
                                                          for c in self.convs[:k])))

    async def _save(self, results: list[Any]) -> float:
        took: list[float] = []
        with _timed(took):
            await asyncio.gather(*(self.store.save(r) for r in results))
        for i, r in enumerate(results):
            self.convs[i] = r.conversation  # carries the revision the save advanced
        return took[0]

    def save(self, k: int, times: int) -> tuple[int, float]:
        async def go() -> float:
            secs = 0.0
            for _ in range(times):
                secs += await self._save(await self._runs(k))
            return secs

        return k * times, asyncio.run(go())


def cold_load(system: str, root: Any, cid: str, n_messages: int) -> tuple[int, float]:
    async def go() -> float:
        took: list[float] = []
        with _timed(took):
            conv = await store.load(cid)
        assert conv is not None and len(conv.messages) == n_messages, (system, cid)
        return took[0]

    store = _open(system, root)
    try:
        return 1, asyncio.run(go())
    finally:
        _close(store)


def warm_load(store: Any, cid: str, n_messages: int, loads: int) -> tuple[int, float]:
    async def go() -> float:
        took: list[float] = []
        with _timed(took):
            for _ in range(loads):
                conv = await store.load(cid)
                assert conv is not None and len(conv.messages) == n_messages
        return took[0]

    return loads, asyncio.run(go())


def profile_cumulative(fn: Callable[[], Any], limit: int = 15) -> dict[str, Any]:
    """cProfile the timed parts of ``fn``; the ``limit`` functions with the most time including callees."""
    prof = cProfile.Profile()
    _PROF.append(prof)
    try:
        total = fn()[1]
    finally:
        _PROF.clear()
    st = pstats.Stats(prof, stream=io.StringIO())
    entries = sorted(
        ((ct, tt, nc, f"{_short(file)}:{line}({name})")
         for (file, line, name), (_cc, nc, tt, ct, _callers) in st.stats.items()  # type: ignore[attr-defined]
         if not _harness(file, name)),
        reverse=True,
    )
    prof_total = max(sum(e[1] for e in entries), 1e-9)
    top = [{"function": f, "own": tt / prof_total, "cum": min(ct / prof_total, 1.0), "calls": nc}
           for ct, tt, nc, f in entries[:limit]]
    return {"total_s": total, "top": top}


def _harness(file: str, name: str) -> bool:
    """The event loop, the executor and this module: around every profiled call, so not a reason."""
    return "/asyncio/" in file or file == __file__ or "Context' objects" in name or file.endswith("/threading.py")


def _short(file: str) -> str:
    root = str(pathlib.Path(__file__).resolve().parent.parent) + "/"
    return file.split("site-packages/")[-1].removeprefix(root).removeprefix(sys.base_prefix + "/lib/")


# While a missed goal is profiled: the profiler, enabled only in the timed parts, which then run
# the stores' worker-thread calls inline (a profiler sees one thread: asyncio.to_thread would hide them).
_PROF: list[cProfile.Profile] = []


class _Inline(concurrent.futures.ThreadPoolExecutor):  # asyncio accepts only this class
    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        f: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            f.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            f.set_exception(exc)
        return f


@contextlib.contextmanager
def _timed(out: list[float]) -> Iterator[None]:
    from tplog.integrations.pydantic_ai import conversation_store as tcs

    pool = tcs._POOL
    if _PROF:
        asyncio.get_running_loop().set_default_executor(_Inline())
        tcs._POOL = _Inline()  # the tplog store's own pool too
        _PROF[0].enable()
    t0 = time.perf_counter()
    try:
        yield
    finally:
        out.append(time.perf_counter() - t0)
        if _PROF:
            _PROF[0].disable()
            tcs._POOL = pool


def _ms(s: float) -> str:
    return f"{s * 1e3:,.3f}" if s < 0.01 else f"{s * 1e3:,.1f}"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    tiny = "--tiny" in argv  # the test's size: a few seconds
    argv = [a for a in argv if a != "--tiny"]
    args, size, report, _ = start(NAME, TITLE, __doc__ or "", SIZES, argv)
    report.__class__ = _Report
    if tiny:
        size = dict(TINY)
    R = max(args.repeat, MIN_REPEAT) if not tiny else 1

    from pydantic_ai.conversation import Conversation
    from pydantic_ai.conversation_store import InMemoryConversationStore

    from benchmarks.peers import long_conversation

    short = long_conversation(size["short"], args.seed).msgs[: size["short"]]
    long = long_conversation(size["long"], args.seed).msgs
    lens = {"short": len(short), "long": len(long)}
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    json_kb = {k: len(ModelMessagesTypeAdapter.dump_json(m)) / 1e3 for k, m in (("short", short), ("long", long))}
    report.data = {"seed": args.seed, "short_messages": len(short), "long_messages": len(long),
                   "short_json_kb": json_kb["short"], "long_json_kb": json_kb["long"]}
    agent = _agent()
    systems = [TPLOG, SQLITE, MEMORY]

    with workdir(args.dir, NAME) as root:
        report.machine = machine_info(root)
        memory = InMemoryConversationStore()
        stores = {TPLOG: _open(TPLOG, root), SQLITE: _open(SQLITE, root), MEMORY: memory}

        async def fill(store: Any) -> None:
            for cid, msgs in (("short", short), ("long", long)):
                await store.save(Conversation(conversation_id=cid, messages=list(msgs)))

        for s in stores.values():
            asyncio.run(fill(s))

        savers = {name: Saver(s, agent, "c") for name, s in stores.items()}
        for sv in savers.values():  # warm-up: first saves create the records, caches fill
            sv.save(CONCURRENT, 2)
            sv.save(1, 3)
        report.add(run_interleaved(W_SAVE1, [(n, lambda n=n: savers[n].save(1, size["saves"])) for n in systems], R))
        report.add(run_interleaved(
            W_SAVE16, [(n, lambda n=n: savers[n].save(CONCURRENT, size["rounds"])) for n in systems], R))
        for name in (TPLOG, SQLITE):
            _close(stores[name])

        for w, cid in ((W_COLD20, "short"), (W_COLD2K, "long")):
            report.add(run_interleaved(w, [
                (TPLOG, lambda cid=cid: cold_load(TPLOG, root, cid, lens[cid])),
                (SQLITE, lambda cid=cid: cold_load(SQLITE, root, cid, lens[cid])),
                # no files to open again: its "cold" load is its only kind
                (MEMORY, lambda cid=cid: warm_load(memory, cid, lens[cid], 1)),
            ], R))

        warm = {TPLOG: _open(TPLOG, root), SQLITE: _open(SQLITE, root), MEMORY: memory}
        try:
            for w, cid, loads in ((W_WARM20, "short", size["warm_loads"]),
                                  (W_WARM2K, "long", max(1, size["warm_loads"] // 5))):
                for s in warm.values():
                    warm_load(s, cid, lens[cid], 1)
                report.add(run_interleaved(
                    w, [(n, lambda n=n, cid=cid, loads=loads: warm_load(warm[n], cid, lens[cid], loads))
                        for n in systems], R))

            # the table: median and spread per store, tplog ÷ each (speed: its time ÷ tplog's)
            cells = []
            for w, _target in GOALS:
                tp = report.find(w, TPLOG)
                for n in systems:
                    r = report.find(w, n)
                    assert r is not None and tp is not None
                    per = [s / r.events for s in r.samples]
                    cells.append([w if n == TPLOG else "", ("**" + n + "**") if n == TPLOG else n,
                                  _ms(statistics.median(per)), f"{_ms(min(per))}-{_ms(max(per))}",
                                  "" if n == TPLOG else f"{r.seconds / tp.seconds * tp.events / r.events:.2f}x"])
            report.table(f"ms per save or load: median and min-max over {R} repetitions; "
                         "tplog ÷ this = how many times faster tplog is",
                         ["workload", "store", "median ms", "min-max ms", "tplog ÷ this"], cells, {2, 3, 4})
            missed = [w for w, target in GOALS
                      if report.goal(f"{w}: tplog ÷ SQLite", target, (w, TPLOG), (w, SQLITE)).status == "NOT met"]
            ratios = "; ".join(
                f"{w}: {report.find(w, MEMORY).seconds / report.find(w, TPLOG).seconds:.2f}x"  # type: ignore[union-attr]
                for w, _t in GOALS if report.find(w, TPLOG) is not None
            )
            report.notes.append(f"tplog ÷ InMemoryConversationStore (no goal; above 1: tplog faster): {ratios}.")
        finally:
            for name in (TPLOG, SQLITE):
                _close(warm[name])
        if not args.no_profile and not tiny:
            for w in missed:
                _profile_missed(report, w, root, agent, lens, size)

    report.notes.append(
        f"Conversations: {len(short)} and {len(long)} messages ({json_kb['short']:,.0f} and {json_kb['long']:,.0f} kB "
        "as ModelMessagesTypeAdapter JSON; the suite's generated threads as Pydantic AI "
        f"messages, seed {args.seed}); each save stores one FunctionModel run's request and response "
        f"(~700 bytes of text). Saves per measurement: {size['saves']} of one conversation, "
        f"{size['rounds']} rounds of {CONCURRENT} concurrent ones; warm loads per measurement: "
        f"{size['warm_loads']} (2,000 messages: {max(1, size['warm_loads'] // 5)})."
    )
    report.finish()
    return 0


def _profile_missed(report: Report, w: str, root: Any, agent: Any, lens: dict[str, int], size: dict[str, Any]) -> None:
    """One cProfile of tplog on a missed goal's workload (top 15 by cumulative time), on a store of its own."""
    store = None if w in (W_COLD20, W_COLD2K) else _open(TPLOG, root)
    cid = "short" if w in (W_COLD20, W_WARM20) else "long"
    fn: Callable[[], Any]
    if w in (W_SAVE1, W_SAVE16):
        saver = Saver(store, agent, f"profile{len(report.profiles)}")
        saver.save(CONCURRENT, 2)
        k, times = (1, size["saves"]) if w == W_SAVE1 else (CONCURRENT, size["rounds"])
        fn = lambda: saver.save(k, times)  # noqa: E731
    elif store is None:
        fn = lambda: cold_load(TPLOG, root, cid, lens[cid])  # noqa: E731
    else:
        warm_load(store, cid, lens[cid], 1)
        fn = lambda: warm_load(store, cid, lens[cid], size["warm_loads"])  # noqa: E731
    try:
        p = profile_cumulative(fn)
    finally:
        if store is not None:
            _close(store)
    p["title"] = f"{w}, tplog (top 15 by cumulative time)"
    report.profiles.append(p)


if __name__ == "__main__":
    sys.exit(main())
