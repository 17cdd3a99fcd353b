"""AsyncStore: appends from many asyncio tasks share group commits with each
other and with plain threads; reads and the other verbs never block the loop.

Each test drives its own event loop with ``asyncio.run`` (no plugin needed).
"""

from __future__ import annotations

import asyncio
import inspect
import random
import threading
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import CountingStore, T, agent_start, exchange, ids, link, register, spawn_message, started, user
from conftest import ToyStore as Store

from tplog import AgentTurnInterrupted, InvalidInputError, TplogError, WrongExpectedVersionError
from tplog.aio import AsyncStore
from tplog.errors import IdempotencyError, StoreClosedError, ThreadDeletedError
from tplog.events import ThreadDeleted
from tplog.protocol import model as m
from tplog.store import AppendResult


def test_many_tasks_group_commit_each_gets_its_own_result(tmp_path: Path) -> None:
    n = 32

    async def main() -> None:
        store = CountingStore(tmp_path / "s")
        a = AsyncStore(store)
        try:
            for i in range(n):
                await a.append(f"t{i}", [started(f"t{i}")])
            await a.append("shared", [started("shared")])
            store.groups.clear()
            jobs: list[tuple[str, Any]] = [(f"t{i}", 7 if i % 5 == 0 else 1) for i in range(n)]
            jobs += [("shared", 1)] * 3  # three tasks race for version 1: one wins
            store.gate = len(jobs)
            eids = [ids(2, f"k{k}") for k in range(len(jobs))]

            async def one(k: int) -> Any:
                tid, expected = jobs[k]
                try:
                    return await a.append(tid, [user(), user()], expected_version=expected, event_ids=eids[k])
                except TplogError as exc:
                    return exc

            out = await asyncio.wait_for(asyncio.gather(*(one(k) for k in range(len(jobs)))), 30)
            for k, (tid, expected) in enumerate(jobs[:n]):
                res = out[k]
                if expected == 7:
                    assert isinstance(res, WrongExpectedVersionError)
                    assert (res.thread_id, res.expected, res.actual) == (tid, 7, 1)
                else:
                    assert isinstance(res, AppendResult), res
                    assert (res.thread_id, res.first_seq, res.last_seq, res.event_ids) == (tid, 2, 3, eids[k])
                    got = await a.read(tid, after=1)
                    assert [(e.position, e.event_id) for e in got] == [
                        (res.first_position, eids[k][0]), (res.last_position, eids[k][1])]
            shared = out[n:]
            assert sum(isinstance(r, AppendResult) for r in shared) == 1
            assert all((r.expected, r.actual) == (1, 3) for r in shared if isinstance(r, WrongExpectedVersionError))
            sizes = [len(g) for g in store.groups]
            assert sum(sizes) == len(jobs) and max(sizes) > 1, sizes
            log = await a.read_all()
            assert [e.position for e in log] == list(range(1, len(log) + 1))
            assert (await a.head("shared")).version == 3
        finally:
            await a.close()
        with pytest.raises(StoreClosedError):
            store.read_all()

    asyncio.run(main())


def test_async_and_thread_writers_share_the_log(tmp_path: Path, rng: random.Random) -> None:
    seed = rng.randrange(2**32)

    async def main() -> None:
        a = await AsyncStore.open(tmp_path / "s", durability="relaxed", check_rules=False)
        s = a.store
        errors: list[BaseException] = []

        def thread_writer(k: int) -> None:
            try:
                tid = f"th{k}"
                s.append(tid, [started(tid)], expected_version="no_stream")
                for j in range(20):
                    s.append(tid, [user(f"{j}")], expected_version=j + 1)
            except BaseException as exc:
                errors.append(exc)

        async def task_writer(k: int) -> list[AppendResult]:
            r = random.Random(seed + k)
            tid = f"as{k}"
            out = [await a.append(tid, [started(tid)], expected_version="no_stream")]
            for _ in range(20):
                out.append(await a.append(tid, [user()] * r.randint(1, 3), expected_version=out[-1].last_seq))
                if r.random() < 0.3:
                    await asyncio.sleep(0)
            return out

        threads = [threading.Thread(target=thread_writer, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        results = await asyncio.wait_for(asyncio.gather(*(task_writer(k) for k in range(16))), 60)
        await asyncio.to_thread(lambda: [t.join(60) for t in threads])
        assert not errors, errors
        log = await a.read_all()
        assert [e.position for e in log] == list(range(1, len(log) + 1))
        for k, res in enumerate(results):
            evs = await a.read(f"as{k}")
            assert len(evs) == res[-1].last_seq
            assert [e.position for e in evs] == [p for r in res for p in range(r.first_position, r.last_position + 1)]
        for k in range(8):
            assert (await a.head(f"th{k}")).version == 21
        page = await a.threads(limit=100)
        assert len(page.threads) == 24
        await a.close()

    asyncio.run(main())


def test_async_verbs_errors_and_wait_for_position(tmp_path: Path) -> None:
    async def main() -> None:
        async with await AsyncStore.open(tmp_path / "s", check_rules=False) as a:
            first = await a.append("t", [started("t"), *exchange()], event_ids=ids(5))
            again = await a.append("t", [started("t"), *exchange()], event_ids=first.event_ids)
            assert again.duplicate and again.first_position == first.first_position
            with pytest.raises(IdempotencyError):
                await a.append("u", [started("u")], event_ids=[first.event_ids[0]])
            with pytest.raises(WrongExpectedVersionError):
                await a.append("t", [user()], expected_version="no_stream")
            with pytest.raises(InvalidInputError):
                await a.append("t", [user()], expected_version=-2)
            with pytest.raises(InvalidInputError):
                await a.append("t", [])

            # a waiter is woken by an append made after it started waiting
            target = first.last_position + 1
            # (its timeout far beyond the wait below: returning at all means it was woken)
            waiter = asyncio.ensure_future(a.wait_for_position(target, timeout=600))
            await asyncio.sleep(0.05)
            assert not waiter.done()
            await a.append("t", [user()])
            assert await asyncio.wait_for(waiter, 120) >= target
            assert await a.wait_for_position(target + 100, timeout=0.1) == target  # timeout returns last

            res = await a.delete_thread("t", reason="bye")
            evs = await a.read("t")
            assert [e.event for e in evs] == [ThreadDeleted(reason="bye")] and evs[0].seq == res.last_seq
            with pytest.raises(ThreadDeletedError):
                await a.append("t", [user()])
        with pytest.raises(StoreClosedError):
            await a.append("t2", [started("t2")])

    asyncio.run(main())


def test_store_closed_with_pending_async_appends_completes_them(tmp_path: Path) -> None:
    async def main() -> None:
        s = Store(tmp_path / "s")
        a = AsyncStore(s)
        pending = [asyncio.ensure_future(a.append(f"c{i}", [started(f"c{i}")])) for i in range(20)]
        await asyncio.sleep(0)
        await a.close()
        results = await asyncio.wait_for(asyncio.gather(*pending, return_exceptions=True), 20)
        for r in results:  # each either committed or was refused as closed; none hangs
            assert isinstance(r, (AppendResult, StoreClosedError)), r
        committed = [r for r in results if isinstance(r, AppendResult)]
        with Store(tmp_path / "s") as again:
            assert again.last_position == len(committed)

    asyncio.run(main())


def test_a_large_append_is_checked_and_compressed_off_the_loop(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Checking, compressing and hashing a 1 MB tool return takes tens of milliseconds:
    past ASYNC_INLINE_BYTES that runs in a worker thread, and the loop serves others."""
    from tplog import MessageRecorded
    from tplog.aio import ASYNC_INLINE_BYTES
    from tplog.protocol import model as m

    rows = [{"id": i, "name": f"row {i} " * 4, "tags": ["a", "b"]} for i in range(20_000)]
    part = m.ToolReturnPart(tool_name="query", tool_call_id="c1", status="success", content={"rows": rows})
    big = MessageRecorded(message=m.RequestMessage(timestamp="2026-01-01T00:00:00Z", agent_id="a1", parts=[part]))
    bad = MessageRecorded(message=m.RequestMessage(timestamp="2026-01-01T00:00:00Z", agent_id=7,  # type: ignore[arg-type]
                                                   parts=[part]))

    import tplog.aio
    from tplog.prepare import encode

    encoded_in: list[str] = []  # the thread each append's events were checked and compressed in

    def where(*args: Any, **kw: Any) -> Any:
        encoded_in.append(threading.current_thread().name)
        return encode(*args, **kw)

    monkeypatch.setattr(tplog.aio, "encode", where)

    async def main() -> None:
        a = AsyncStore(Store(tmp_path / "s"))
        loop_thread = threading.current_thread().name
        try:
            await a.append("t", [started("t"), user(), agent_start()])
            assert encoded_in == [loop_thread]  # small: on the loop, no thread hop
            res = await a.append("t", [big])
            assert len(encoded_in) == 2 and encoded_in[1] != loop_thread
            assert res.first_seq == 4
            got = (await a.read("t"))[-1].event
            assert got == big
            # Errors from the worker are the same typed errors, naming thread and event.
            with pytest.raises(InvalidInputError, match=r"thread t: events\[1\].*agent_id") as exc:
                await a.append("t", [big, bad])
            assert exc.value.path == "$.message.agent_id"
            assert (await a.head("t")).version == 4  # nothing written
        finally:
            await a.close()

    assert len(big.message.parts[0].content["rows"]) * 40 > ASYNC_INLINE_BYTES
    asyncio.run(main())


def test_iter_all_streams_the_log_and_sees_a_delete_between_chunks(tmp_path: Path) -> None:
    async def main() -> None:
        a = await AsyncStore.open(tmp_path / "s", check_rules=False)
        try:
            for i in range(3):
                await a.append(f"t{i}", [started(f"t{i}")])
            for _ in range(5):
                for i in range(3):
                    await a.append(f"t{i}", [user()])
            log = await a.read_all()
            assert [e async for e in a.iter_all(chunk=4)] == log
            assert [e async for e in a.iter_all(after=log[6].position, chunk=2)] == log[7:]

            it = a.iter_all(chunk=3)
            first = [await it.__anext__() for _ in range(3)]
            assert first == log[:3]  # t0, t1, t2 started
            tomb = await a.delete_thread("t1")
            rest = [e async for e in it]
            # the next chunks are read after the delete: none of t1's later events, its tombstone last
            assert [e.thread_id for e in rest if e.thread_id == "t1"] == ["t1"]
            assert rest[-1].position == tomb.last_position and isinstance(rest[-1].event, ThreadDeleted)
            assert rest == [e for e in log[3:] if e.thread_id != "t1"] + [rest[-1]]
            with pytest.raises(InvalidInputError, match="chunk must be an int > 0"):
                a.iter_all(chunk=0)
        finally:
            await a.close()
        with pytest.raises(StoreClosedError):
            a.iter_all()

    asyncio.run(main())


def test_async_store_mirrors_every_store_verb() -> None:
    """Every public verb of Store is on AsyncStore; those that touch the store are coroutines."""
    for name, member in inspect.getmembers(Store):
        if name.startswith("_"):
            continue
        assert hasattr(AsyncStore, name), f"AsyncStore has no {name}"
        mirror = getattr(AsyncStore, name)
        if name in ("scoped", "scope", "iter_all", "pipeline"):  # a view, a property, an async iterator, a
            continue  # Pipeline (its aappend / acommit are the coroutines)
        assert inspect.iscoroutinefunction(mirror), f"AsyncStore.{name} is not a coroutine function"
        if callable(member):  # the same parameters, kinds and defaults (last_position is a property on Store)
            want = [p for n, p in inspect.signature(member).parameters.items() if not n.startswith("_")]
            got = list(inspect.signature(mirror).parameters.values())
            assert [(p.name, p.kind, p.default) for p in got] == [(p.name, p.kind, p.default) for p in want], name


def test_async_read_verbs_match_the_store(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    store.append("p", [started("p"), register(), *exchange(), agent_start(), spawn_message("c"), link("r"),
                       AgentTurnInterrupted(interruption=m.Interruption(reason="user_cancelled", interrupted_at=T))])
    store.append("c", [started("c")])

    async def main() -> None:
        a = AsyncStore(store)
        try:
            assert await a.exists("p") and not await a.exists("nope")
            assert await a.load("p") == store.load("p")
            assert await a.thread("p") == store.thread("p") == await a.export("p")
            assert await a.pending("p") == store.pending("p")
            assert (await a.interrupts("p")) == store.interrupts("p") and store.interrupts("p").interrupted
            assert await a.links("p") == store.links("p") != []
            assert await a.children("p") == store.children("p") == ["c"]
            assert await a.children("p", limit=1, after="c") == []
            assert await a.incoming("r") == store.incoming("r") == [("p", "referenced")]
            assert await a.incoming("r", relation="nope") == []
            assert await a.descendants("p", max_depth=1) == store.descendants("p", max_depth=1)
            assert await a.last_position() == store.last_position
            stats = await a.stats()
            assert stats["threads"] == store.stats()["threads"]
            assert await a.projections() == store.projections()
            thread = await a.export("p")
            res = await a.import_thread(msgspec.structs.replace(thread, thread_id="q"))
            assert res.first_seq == 1 and (await a.thread("q")).turns == thread.turns
            with pytest.raises(WrongExpectedVersionError):
                await a.import_thread(msgspec.structs.replace(thread, thread_id="q"))
            seen: list[tuple[str, int, int]] = []
            reports = await a.rebuild("links", progress=lambda name, done, total: seen.append((name, done, total)))
            assert [r.projection for r in reports] == ["links"] and seen
            await a.sync()
            await a.backup(str(tmp_path / "b"))
            with Store(tmp_path / "b", readonly=True) as b:
                assert b.thread("p") == store.thread("p")
            with pytest.raises(TplogError):
                await a.thread("nope")
        finally:
            await a.close()

    asyncio.run(main())


def test_async_scoped_views_share_the_leader(tmp_path: Path) -> None:
    """Views of one AsyncStore append through its one leader thread; closing a view does nothing."""

    async def main() -> None:
        async with await AsyncStore.open(tmp_path / "s", check_rules=False) as a:
            x, y = a.scoped("x"), a.scoped("y")
            assert (x.scope, y.scope, a.scope) == ("x", "y", None)
            results = await asyncio.gather(*(v.append(f"t{i}", [started(f"t{i}")]) for i in range(8) for v in (x, y)))
            assert len({r.first_position for r in results}) == 16
            await x.close()
            await x.append("t0", [user()])  # still open: the view's close did nothing
            assert [e.seq for e in await x.read("t0")] == [1, 2]
            assert [e.seq for e in await y.read("t0")] == [1]
            assert not await a.exists("t0")
            assert [t.thread_id for t in (await y.threads(limit=100)).threads] != []
        with pytest.raises(StoreClosedError):
            await x.append("t9", [started("t9")])

    asyncio.run(main())
