"""tplog against the stores users pick for agent conversations: same pydantic-ai messages, same run.

    python -m benchmarks.peers [--quick] [--repeat N] [--seed S] [--dir D] [--json PATH] [--no-md] [--no-profile]

The conversations are the suite's generated threads (``benchmarks._data``) as a
server holds them: each thread folded and turned into pydantic-ai ``ModelMessage``s
(``history_from_thread``). Every system records the same messages, one message per
call, with its durable default (recorded in the output):

- **tplog** — ``Store.append`` (durability ``durable``), each message mapped to its
  history events as the live recorder maps it (``message_to_tp`` /
  ``user_turn_from_request``; the turn's start and end ride along with the message
  that opens / closes it); 16 writers as threads on one store and as 16 asyncio tasks
  on ``AsyncStore``.
- **tplog pipelined** (1 writer) — the live recorder's path: ``Store.pipeline`` per
  conversation, each message acknowledged once queued, the append that ends a turn
  waiting until it and everything before it is durable.
- **DIY SQLite WAL FULL + orjson** — one row per message (``thread_id, seq, JSON``,
  unique index), pydantic's ``dump_json`` in, one commit per message; read back with
  ``orjson.loads`` (its own objects) or ``ModelMessagesTypeAdapter.validate_json``.
- **eventsourcing (SQLite)** — an ``Aggregate`` per conversation, one ``MessageAdded``
  event saved per message (the aggregate is kept in memory between saves: a real app
  would also read it back each time, so this is the peer's best case).
- **OpenAI Agents ``SQLiteSession``** — ``add_items([message dict])`` per message
  (it is async only: one task per writer).
- **LangGraph ``SqliteSaver``** — ``put`` of a checkpoint holding the whole message
  list per message (what a graph with a ``messages`` channel checkpoints each step; the
  per-step ``put_writes`` a graph also makes is left out, again the peer's best case).
- **JSONL** — one file per conversation, a line per message, ``fsync`` per message.

Workloads: durable append with 1 writer and with 16 writers, and 2 worker processes x 8 writers
against 1 x 16 on one store, tplog and DIY SQLite (``benchmarks.peers_procs``: with the write lock's
wait and hold per process); (the single-process rows run long enough to reach
steady state: the rate in each quarter of the run is shown, and the device flushes per
append from the block device's counters); loading a ~20-message conversation as
pydantic-ai messages (cold: nothing cached; warm: tplog's fold cache and converted
history) and as the store's own objects; the same for one 2,000-message conversation;
disk use ÷ the messages' JSON. The peers' loads as pydantic-ai messages validate their
dicts (``validate_python``): what a server must do before handing them to an agent.

The peers are the optional ``bench`` extra (``pip install -e '.[bench]'``); a peer that
is not installed is skipped with a note.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import sqlite3
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks import _baselines as B
from benchmarks._common import (
    Report,
    dir_size,
    freeze_heap,
    machine_info,
    run_interleaved,
    start,
    workdir,
)
from benchmarks._data import make_corpus, make_thread, size_stats

NAME = "peers"
TITLE = "Against the stores users pick: tplog vs SQLite, eventsourcing, OpenAI SQLiteSession, LangGraph, JSONL"

W_APPEND1 = "durable append, 1 writer, 1 message per call"
W_APPEND16 = "durable append, 16 writers (threads; asyncio where noted), 1 message per call"
W_SHORT_PAI = "load a ~20-message conversation as pydantic-ai messages (per load)"
W_SHORT_OWN = "load a ~20-message conversation as the store's own objects (per load)"
W_LONG_PAI = "load a 2,000-message conversation as pydantic-ai messages (per load)"
W_LONG_OWN = "load a 2,000-message conversation as the store's own objects (per load)"

# (quick, full)
SIZES = {
    "conversations": (100, 600),
    "short_loads": (20, 60),  # conversations of 15-25 messages loaded per measurement
    "long_messages": (2_000, 2_000),
    "long_loads": (1, 3),
}
WRITERS = 16
PROCS = 2  # worker processes of the multi-process rows (benchmarks.peers_procs)
LONG_INDEX = 9_100_000  # outside any corpus range
AGENT = "agent"

TPLOG = "tplog"
TPLOG_ASYNC = "tplog AsyncStore (16 asyncio tasks)"
TPLOG_PIPE = "tplog pipelined (live recorder)"
DIY = "DIY SQLite WAL FULL + orjson"
ES = "eventsourcing (SQLite)"
OAI = "OpenAI Agents SQLiteSession (async)"
LG = "LangGraph SqliteSaver"
JSONL = "JSONL, fsync per message"


# --------------------------------------------------------------------------- conversations


@dataclass
class Conv:
    tid: str
    msgs: list[Any]  # pydantic-ai ModelMessage


def conversations(n: int, seed: int) -> list[Conv]:
    """The suite's first ``n`` generated threads as pydantic-ai message lists."""
    from tplog.integrations.pydantic_ai import history_from_thread
    from tplog.projections.fold import fold

    out = []
    for t in make_corpus(n, seed=seed).threads:
        th = fold(t.events).thread
        assert th is not None
        msgs = history_from_thread(th)
        if msgs:
            out.append(Conv(t.thread_id, msgs))
    return out


def long_conversation(n_messages: int, seed: int) -> Conv:
    """One conversation of about ``n_messages``, cut at a user turn (no dangling tool call)."""
    from pydantic_ai import messages as pm

    from tplog.integrations.pydantic_ai import history_from_thread
    from tplog.projections.fold import fold

    t = make_thread(LONG_INDEX, seed=seed, n_events=int(n_messages * 1.4))
    th = fold(t.events).thread
    assert th is not None
    msgs = history_from_thread(th)
    cut = next(
        (i for i in range(n_messages, len(msgs)) if isinstance(msgs[i], pm.ModelRequest) and _user_only(msgs[i])),
        len(msgs),
    )
    return Conv(t.thread_id, msgs[:cut])


def _user_only(msg: Any) -> bool:
    kinds = [p.part_kind for p in msg.parts]
    return bool(kinds) and all(k == "user-prompt" for k in kinds)


def split(convs: Sequence[Conv], writers: int = WRITERS) -> list[list[Conv]]:
    return [list(convs[i::writers]) for i in range(writers)]


# --------------------------------------------------------------------------- device flushes


def block_device(path: str | os.PathLike[str]) -> pathlib.Path | None:
    """``/sys/dev/block/M:m`` of the whole disk holding ``path`` (flushes are counted per disk)."""
    st = os.stat(path)
    p = pathlib.Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    if not p.exists():
        return None
    p = p.resolve()
    if (p / "partition").exists():
        p = p.parent
    return p if (p / "stat").exists() else None


def flushes(dev: pathlib.Path | None) -> int | None:
    """Completed flush requests of the device (field 16 of ``stat``; kernels ≥ 5.5), or None."""
    if dev is None:
        return None
    fields = (dev / "stat").read_text().split()
    return int(fields[15]) if len(fields) >= 17 else None


# --------------------------------------------------------------------------- the systems


class System:
    """One store: ``append(conv, i)`` records message ``i`` of ``conv`` (thread-safe across
    conversations), ``bulk`` records a whole conversation untimed, and the loads."""

    name = ""
    settings = ""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root

    def append(self, conv: Conv, i: int) -> None:
        raise NotImplementedError

    def bulk(self, conv: Conv) -> None:
        for i in range(len(conv.msgs)):
            self.append(conv, i)

    def load_own(self, conv: Conv) -> int:
        raise NotImplementedError

    def load_pai(self, conv: Conv) -> int:
        raise NotImplementedError

    def close(self) -> None:
        pass


def _pai() -> tuple[Any, Any]:
    import pydantic
    from pydantic_ai import messages as pm

    return pydantic.TypeAdapter(pm.ModelMessage), pm.ModelMessagesTypeAdapter


class TplogSystem(System):
    name = TPLOG
    settings = 'Store(path, durability="durable") — two device flushes per commit (data, then meta page)'

    def __init__(self, root: pathlib.Path, *, fold_cache: bool = True) -> None:
        super().__init__(root)
        import tplog
        from tplog.integrations import pydantic_ai as tpai

        self.tpai = tpai
        self.store = tplog.Store(root / "tplog", durability="durable", **({} if fold_cache else {"fold_cache": 0}))
        # Warm: converted messages kept beside the fold cache (what a server keeps); cold: nothing kept.
        self.history_cache = tpai.HistoryCache() if fold_cache else None
        self.state: dict[str, list[Any]] = {}  # tid -> [turn open, last timestamp]

    def events(self, conv: Conv, i: int) -> list[Any]:
        """Message ``i`` as history events, as the live recorder maps it."""
        from tplog.events import (
            AgentRegistered,
            AgentTurnCompleted,
            AgentTurnStarted,
            MessageRecorded,
            ThreadStarted,
            UserTurnSubmitted,
        )
        from tplog.protocol.model import AgentConfig

        tpai = self.tpai
        msg = conv.msgs[i]
        evs: list[Any] = []
        st = self.state.get(conv.tid)
        if st is None:
            ts = tpai.mapping._iso(msg.timestamp)
            st = self.state[conv.tid] = [False, ts]
            evs += [
                ThreadStarted(thread_id=conv.tid, created_at=ts),
                AgentRegistered(agent=AgentConfig(agent_id=AGENT, agent_name="Agent", created_at=ts)),
            ]
        if tpai.is_user_request(msg):
            if st[0]:
                evs.append(AgentTurnCompleted(completed_at=st[1]))
            turn = tpai.user_turn_from_request(msg)
            st[0], st[1] = True, turn.submitted_at
            evs += [UserTurnSubmitted(turn=turn), AgentTurnStarted(agent_id=AGENT, started_at=turn.submitted_at)]
        else:
            tp = tpai.message_to_tp(msg, AGENT, default_timestamp=st[1])
            if not st[0]:
                evs.append(AgentTurnStarted(agent_id=AGENT, started_at=tp.timestamp))
                st[0] = True
            st[1] = tp.timestamp
            evs.append(MessageRecorded(message=tp))
        if i == len(conv.msgs) - 1 and st[0]:
            evs.append(AgentTurnCompleted(completed_at=st[1]))
        return evs

    def append(self, conv: Conv, i: int) -> None:
        self.store.append(conv.tid, self.events(conv, i))

    def bulk(self, conv: Conv) -> None:
        evs = [e for i in range(len(conv.msgs)) for e in self.events(conv, i)]
        self.store.append(conv.tid, evs)

    def load_own(self, conv: Conv) -> int:
        return len(self.store.thread(conv.tid).turns)

    def load_pai(self, conv: Conv) -> int:
        return len(self.tpai.history_from_thread(self.store.thread(conv.tid), cache=self.history_cache))

    def close(self) -> None:
        self.store.close()


class TplogPipelined(TplogSystem):
    """A live recorder's path: ``Store.pipeline`` per conversation; a message is acknowledged
    once queued, the append that ends a turn waits until the turn is durable."""

    name = TPLOG_PIPE
    settings = (
        'Store(path, durability="durable"), Store.pipeline(thread): messages acknowledged once queued '
        "(their commits keep two device flushes each), each turn's end waits until it and everything before it "
        "is durable"
    )

    def __init__(self, root: pathlib.Path) -> None:
        super().__init__(root)
        self.pipes: dict[str, Any] = {}

    def append(self, conv: Conv, i: int) -> None:
        p = self.pipes.get(conv.tid)
        if p is None:
            p = self.pipes[conv.tid] = self.store.pipeline(conv.tid)
        p.append(self.events(conv, i))  # a conversation's last message ends its turn: durable in the timing

    def close(self) -> None:
        for p in self.pipes.values():
            p.commit()
        super().close()


class DiySqlite(System):
    name = DIY
    settings = "journal_mode=WAL, synchronous=FULL, one commit per message, pydantic dump_json in"

    def __init__(self, root: pathlib.Path) -> None:
        super().__init__(root)
        self.ta, self.tas = _pai()
        self.path = root / "diy.db"
        B._sqlite_create(self.path, "FULL").close()
        self.local = threading.local()
        self.conns: list[sqlite3.Connection] = []

    def conn(self) -> sqlite3.Connection:
        c = getattr(self.local, "c", None)
        if c is None:
            c = self.local.c = B._sqlite(self.path, "FULL")
            self.conns.append(c)
        return c

    def append(self, conv: Conv, i: int) -> None:
        c = self.conn()
        c.execute("BEGIN IMMEDIATE")
        c.execute(B._INSERT, (conv.tid, i + 1, self.ta.dump_json(conv.msgs[i])))
        c.execute("COMMIT")

    def bulk(self, conv: Conv) -> None:
        c = self.conn()
        c.execute("BEGIN")
        c.executemany(B._INSERT, [(conv.tid, i + 1, self.ta.dump_json(m)) for i, m in enumerate(conv.msgs)])
        c.execute("COMMIT")

    def _rows(self, conv: Conv) -> list[Any]:
        q = "SELECT message_data FROM thread_messages WHERE thread_id = ? ORDER BY seq"
        return self.conn().execute(q, (conv.tid,)).fetchall()

    def load_own(self, conv: Conv) -> int:
        import orjson

        loads = orjson.loads
        return len([loads(r[0]) for r in self._rows(conv)])

    def load_pai(self, conv: Conv) -> int:
        return len(self.tas.validate_json(b"[" + b",".join(r[0] for r in self._rows(conv)) + b"]"))

    def close(self) -> None:
        for c in self.conns:
            c.close()


class Jsonl(System):
    name = JSONL
    settings = "a file per conversation, append + fsync per message"

    def __init__(self, root: pathlib.Path) -> None:
        super().__init__(root)
        self.ta, self.tas = _pai()
        self.dir = root / "jsonl"
        self.dir.mkdir()
        self.fds: dict[str, int] = {}

    def _fd(self, tid: str) -> int:
        fd = self.fds.get(tid)
        if fd is None:
            fd = self.fds[tid] = os.open(self.dir / f"{tid}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        return fd

    def append(self, conv: Conv, i: int) -> None:
        fd = self._fd(conv.tid)
        os.write(fd, self.ta.dump_json(conv.msgs[i]) + b"\n")
        os.fsync(fd)

    def bulk(self, conv: Conv) -> None:
        os.write(self._fd(conv.tid), b"".join(self.ta.dump_json(m) + b"\n" for m in conv.msgs))

    def _lines(self, conv: Conv) -> list[bytes]:
        return (self.dir / f"{conv.tid}.jsonl").read_bytes().splitlines()

    def load_own(self, conv: Conv) -> int:
        import orjson

        return len([orjson.loads(x) for x in self._lines(conv)])

    def load_pai(self, conv: Conv) -> int:
        return len(self.tas.validate_json(b"[" + b",".join(self._lines(conv)) + b"]"))

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)


def _sqlite_default_synchronous(directory: pathlib.Path) -> str:
    """What ``synchronous`` an SQLite connection in WAL mode has when nobody sets it."""
    p = directory / "probe.db"
    c = sqlite3.connect(p)
    try:
        c.execute("PRAGMA journal_mode=WAL")
        v = c.execute("PRAGMA synchronous").fetchone()[0]
    finally:
        c.close()
        for f in directory.glob("probe.db*"):
            f.unlink()
    return {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(v, str(v))


try:
    from eventsourcing.domain import Aggregate, event

    class Conversation(Aggregate):  # module level: eventsourcing resolves events by topic
        def __init__(self) -> None:
            self.messages: list[Any] = []

        @event("MessageAdded")
        def add(self, message: dict[str, Any]) -> None:
            self.messages.append(message)

except ImportError:  # pragma: no cover - the bench extra is optional
    Conversation = None  # type: ignore[assignment,misc]


class EventSourcing(System):
    name = ES
    settings = (
        "Application(env: PERSISTENCE_MODULE=eventsourcing.sqlite): WAL, SQLite's default synchronous, "
        "a commit per save"
    )

    def __init__(self, root: pathlib.Path) -> None:
        super().__init__(root)
        from eventsourcing.application import Application

        self.ta, self.tas = _pai()
        self.app = Application(env={"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(root / "es.db")})
        self.aggs: dict[str, Any] = {}
        self.ids: dict[str, Any] = {}

    def append(self, conv: Conv, i: int) -> None:
        agg = self.aggs.get(conv.tid)
        if agg is None:
            agg = self.aggs[conv.tid] = Conversation()
            self.ids[conv.tid] = agg.id
        agg.add(self.ta.dump_python(conv.msgs[i], mode="json"))
        self.app.save(agg)

    def bulk(self, conv: Conv) -> None:
        agg = Conversation()
        self.ids[conv.tid] = agg.id
        for m in conv.msgs:
            agg.add(self.ta.dump_python(m, mode="json"))
        self.app.save(agg)

    def load_own(self, conv: Conv) -> int:
        return len(self.app.repository.get(self.ids[conv.tid]).messages)

    def load_pai(self, conv: Conv) -> int:
        return len(self.tas.validate_python(self.app.repository.get(self.ids[conv.tid]).messages))

    def close(self) -> None:
        self.app.close()


class OpenAISession(System):
    name = OAI
    settings = "SQLiteSession(session_id, db_path): WAL, SQLite's default synchronous, a commit per add_items"

    def __init__(self, root: pathlib.Path) -> None:
        super().__init__(root)
        from agents import SQLiteSession

        self.cls = SQLiteSession
        self.ta, self.tas = _pai()
        self.path = root / "oai.db"
        self.sessions: dict[str, Any] = {}
        self.loop = asyncio.new_event_loop()

    def session(self, tid: str) -> Any:
        s = self.sessions.get(tid)
        if s is None:
            s = self.sessions[tid] = self.cls(tid, self.path)
        return s

    async def aappend(self, conv: Conv, i: int) -> None:
        await self.session(conv.tid).add_items([self.ta.dump_python(conv.msgs[i], mode="json")])

    def append(self, conv: Conv, i: int) -> None:
        self.loop.run_until_complete(self.aappend(conv, i))

    def bulk(self, conv: Conv) -> None:
        items = [self.ta.dump_python(m, mode="json") for m in conv.msgs]
        self.loop.run_until_complete(self.session(conv.tid).add_items(items))

    def load_own(self, conv: Conv) -> int:
        return len(self.loop.run_until_complete(self.session(conv.tid).get_items()))

    def load_pai(self, conv: Conv) -> int:
        items = self.loop.run_until_complete(self.session(conv.tid).get_items())
        return len(self.tas.validate_python(items))

    def close(self) -> None:
        for s in self.sessions.values():
            s.close()
        self.loop.close()


class LangGraph(System):
    name = LG
    settings = "SqliteSaver(sqlite3.connect(path)): WAL, SQLite's default synchronous, whole state per put"

    def __init__(self, root: pathlib.Path) -> None:
        super().__init__(root)
        from langgraph.checkpoint.base import empty_checkpoint
        from langgraph.checkpoint.sqlite import SqliteSaver

        self.empty = empty_checkpoint
        self.ta, self.tas = _pai()
        self.conn = sqlite3.connect(root / "lg.db", check_same_thread=False)
        self.saver = SqliteSaver(self.conn)
        self.saver.setup()
        self.state: dict[str, tuple[dict[str, Any], list[Any]]] = {}

    def _put(self, conv: Conv, messages: list[Any], step: int) -> None:
        cfg, _ = self.state.get(conv.tid) or ({"configurable": {"thread_id": conv.tid, "checkpoint_ns": ""}}, None)
        cp = self.empty()
        cp["channel_values"] = {"messages": messages}
        cfg = self.saver.put(cfg, cp, {"source": "loop", "step": step}, {})
        self.state[conv.tid] = (cfg, messages)

    def append(self, conv: Conv, i: int) -> None:
        prev = self.state.get(conv.tid)
        msgs = [*(prev[1] if prev else []), self.ta.dump_python(conv.msgs[i], mode="json")]
        self._put(conv, msgs, i)

    def bulk(self, conv: Conv) -> None:
        self._put(conv, [self.ta.dump_python(m, mode="json") for m in conv.msgs], len(conv.msgs))

    def _get(self, conv: Conv) -> list[Any]:
        t = self.saver.get_tuple({"configurable": {"thread_id": conv.tid, "checkpoint_ns": ""}})
        assert t is not None
        msgs: list[Any] = t.checkpoint["channel_values"]["messages"]
        return msgs

    def load_own(self, conv: Conv) -> int:
        return len(self._get(conv))

    def load_pai(self, conv: Conv) -> int:
        return len(self.tas.validate_python(self._get(conv)))

    def close(self) -> None:
        self.conn.close()


PEERS: list[type[System]] = [DiySqlite, EventSourcing, OpenAISession, LangGraph, Jsonl]


def available(root: pathlib.Path) -> tuple[list[type[System]], list[str]]:
    """The peers that can run here, and a note for each that cannot."""
    ok: list[type[System]] = []
    notes: list[str] = []
    for cls in PEERS:
        d = root / f"probe-{cls.__name__}"
        d.mkdir()
        try:
            cls(d).close()
            ok.append(cls)
        except ImportError as exc:
            notes.append(f"{cls.name} skipped: {exc} (install the `bench` extra: pip install -e '.[bench]')")
        finally:
            import shutil

            shutil.rmtree(d, ignore_errors=True)
    return ok, notes


# --------------------------------------------------------------------------- measuring


@dataclass
class Run:
    """What one append measurement saw besides its time: completion stamps, flushes, disk."""

    stamps: list[float] = field(default_factory=list)
    flushes: int | None = None
    disk: int = 0


LAST: dict[tuple[str, str], Run] = {}  # (workload, system) -> the last repeat's Run


def _quarters(stamps: list[float], t0: float) -> list[float]:
    s = sorted(stamps)
    n = len(s)
    out = []
    prev_t, prev_i = t0, 0
    for q in range(1, 5):
        i = n * q // 4
        t = s[i - 1]
        out.append((i - prev_i) / (t - prev_t) if t > prev_t else float("inf"))
        prev_t, prev_i = t, i
    return out


def measure_append(
    make: Callable[[pathlib.Path], System],
    base: pathlib.Path,
    per_writer: list[list[Conv]],
    workload: str,
    label: str,
    dev: pathlib.Path | None,
    *,
    use_async: bool = False,
) -> Callable[[], tuple[int, float]]:
    """A measure function: a fresh store, every writer appends its conversations' messages in order."""

    def run() -> tuple[int, float]:
        d = base / f"{label}-{uuid.uuid4().hex[:8]}"
        d.mkdir()
        sysm = make(d)
        stamps: list[float] = []
        n = sum(len(c.msgs) for w in per_writer for c in w)
        try:
            f0 = flushes(dev)
            if use_async:
                secs, t0 = asyncio.run(_async_writers(sysm, per_writer, stamps))
            elif len(per_writer) == 1:
                app, stamp, clock = sysm.append, stamps.append, time.perf_counter
                t0 = clock()
                for c in per_writer[0]:
                    for i in range(len(c.msgs)):
                        app(c, i)
                        stamp(clock())
                secs = clock() - t0
            else:
                t0s: list[float] = []
                secs = B.run_threads([_writer(sysm, w, stamps, t0s) for w in per_writer])
                t0 = min(t0s)
            f1 = flushes(dev)
        finally:
            sysm.close()
        LAST[(workload, label)] = Run(stamps, None if f0 is None or f1 is None else f1 - f0, dir_size(d))
        LAST[(workload, label)].stamps = _quarters(stamps, t0)
        import shutil

        shutil.rmtree(d, ignore_errors=True)
        return n, secs

    return run


def _writer(sysm: System, convs: list[Conv], stamps: list[float], t0s: list[float]) -> Callable[[], None]:
    def go() -> None:
        app, stamp, clock = sysm.append, stamps.append, time.perf_counter
        t0s.append(clock())
        for c in convs:
            for i in range(len(c.msgs)):
                app(c, i)
                stamp(clock())

    return go


async def _async_writers(sysm: System, per_writer: list[list[Conv]], stamps: list[float]) -> tuple[float, float]:
    clock = time.perf_counter
    if isinstance(sysm, TplogSystem):
        from tplog import AsyncStore

        astore = AsyncStore(sysm.store)

        async def app(c: Conv, i: int) -> None:
            await astore.append(c.tid, sysm.events(c, i))

    else:
        app = sysm.aappend  # type: ignore[attr-defined]

    async def writer(convs: list[Conv]) -> None:
        for c in convs:
            for i in range(len(c.msgs)):
                await app(c, i)
                stamps.append(clock())

    t0 = clock()
    await asyncio.gather(*(writer(w) for w in per_writer))
    return clock() - t0, t0


def measure_loads(sysm: System, convs: list[Conv], kind: str, *, warm: bool = False) -> Callable[[], tuple[int, float]]:
    """Loads of each conversation once (after one untimed pass when ``warm``)."""
    fn = sysm.load_pai if kind == "pai" else sysm.load_own

    def run() -> tuple[int, float]:
        if warm:
            for c in convs:
                fn(c)
        t0 = time.perf_counter()
        for c in convs:
            fn(c)
        return len(convs), time.perf_counter() - t0

    return run


class TplogCold(TplogSystem):
    """tplog with the fold cache off: every load reads and folds the log."""

    def __init__(self, root: pathlib.Path) -> None:
        super().__init__(root, fold_cache=False)


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    args, size, report, Store = start(NAME, TITLE, __doc__, SIZES, argv)
    R = args.repeat
    t0 = time.perf_counter()
    ta, _ = _pai()
    convs = conversations(size["conversations"], args.seed)
    long = long_conversation(size["long_messages"], args.seed)
    n_msgs = sum(len(c.msgs) for c in convs)
    sizes = [len(ta.dump_json(m)) for c in convs for m in c.msgs]
    raw_json = sum(sizes)
    short = [c for c in convs if 15 <= len(c.msgs) <= 25][: size["short_loads"]]
    report.data = {
        "seed": args.seed,
        "threads": len(convs),
        **size_stats(sizes),
        "short_conversations": len(short),
        "short_mean_messages": round(sum(len(c.msgs) for c in short) / max(1, len(short)), 1),
        "long_messages": len(long.msgs),
    }
    freeze_heap()
    print(f"data: {report.data} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)

    with workdir(args.dir, NAME) as root:
        report.machine = machine_info(root)
        dev = block_device(root)
        peers, notes = available(root)
        report.notes += notes
        default_sync = _sqlite_default_synchronous(root)
        settings = {
            TPLOG: TplogSystem.settings,
            TPLOG_ASYNC: TplogSystem.settings + "; AsyncStore over it",
            TPLOG_PIPE: TplogPipelined.settings,
        }
        for cls in peers:
            s = cls.settings
            settings[cls.name] = s + (f" (SQLite's default synchronous here: {default_sync})" if "default" in s else "")

        with_tplog = Store is not None
        one = [convs]
        many = split(convs)
        for workload, per in ((W_APPEND1, one), (W_APPEND16, many)):
            systems: list[tuple[str, Callable[[], tuple[int, float]]]] = []
            if with_tplog:
                systems.append((TPLOG, measure_append(TplogSystem, root, per, workload, TPLOG, dev)))
                if per is one:
                    systems.append((TPLOG_PIPE, measure_append(TplogPipelined, root, per, workload, TPLOG_PIPE, dev)))
                if per is many:
                    systems.append(
                        (
                            TPLOG_ASYNC,
                            measure_append(TplogSystem, root, per, workload, TPLOG_ASYNC, dev, use_async=True),
                        )
                    )
            for cls in peers:
                systems.append(
                    (cls.name, measure_append(cls, root, per, workload, cls.name, dev, use_async=cls is OpenAISession))
                )
            report.add(run_interleaved(workload, systems, R))
        if with_tplog:  # N worker processes x 8 writers on one store, against 1 x 16 (issue #41)
            from benchmarks import peers_procs

            peers_procs.add_rows(report, root, convs, R, PROCS)

        # Steady state and flushes, from each system's last repeat.
        rows = []
        for (w, label), run in LAST.items():
            q = run.stamps
            fl = "—" if run.flushes is None else f"{run.flushes / n_msgs:.2f}"
            rows.append(
                [
                    label,
                    "1" if w == W_APPEND1 else "16",
                    *(f"{x:,.0f}" for x in q),
                    f"{q[-1] / q[0]:.2f}" if q[0] else "—",
                    fl,
                ]
            )
        report.table(
            f"Steady state: messages/s in each quarter of the append run (last repeat), and device flushes per "
            f"append ({dev.name if dev else 'no block device found'}: the whole disk, so other processes' flushes "
            "count too)",
            ["system", "writers", "1st", "2nd", "3rd", "4th", "4th ÷ 1st", "flushes/append"],
            rows,
        )

        # Disk: each store after the 1-writer run (files closed) ÷ the messages' JSON.
        disk_rows = []
        disk: dict[str, float] = {}
        for (w, label), run in LAST.items():
            if w == W_APPEND1:
                disk[label] = run.disk / raw_json
                disk_rows.append([label, f"{run.disk:,}", f"{run.disk / raw_json:.2f}x"])
        report.table(
            f"Disk after the 1-writer run ÷ the messages' JSON ({raw_json:,} B, pydantic dump_json)",
            ["system", "bytes on disk", "÷ raw JSON"],
            disk_rows,
        )

        # Loads: every system holds all conversations and the long one (untimed bulk records).
        print("loading stores ...", file=sys.stderr, flush=True)
        loaded: dict[str, System] = {}
        for cls in ([TplogSystem] if with_tplog else []) + peers:
            d = root / f"load-{cls.__name__}"
            d.mkdir()
            s = cls(d)
            for c in [*convs, long]:
                s.bulk(c)
            loaded[cls.name] = s
        if with_tplog:
            loaded[TPLOG].close()
            cold: System = TplogCold(root / f"load-{TplogSystem.__name__}")
            warm: System = TplogSystem(root / f"load-{TplogSystem.__name__}")
        long_list = [long] * size["long_loads"]
        for w_pai, w_own, cs in ((W_SHORT_PAI, W_SHORT_OWN, short), (W_LONG_PAI, W_LONG_OWN, long_list)):
            for w, kind in ((w_pai, "pai"), (w_own, "own")):
                systems = []
                if with_tplog:
                    systems.append((f"{TPLOG} cold", measure_loads(cold, cs, kind)))
                    systems.append((f"{TPLOG} warm (fold cache)", measure_loads(warm, cs, kind, warm=True)))
                for cls in peers:
                    systems.append((cls.name, measure_loads(loaded[cls.name], cs, kind)))
                report.add(run_interleaved(w, systems, R))
        if with_tplog:
            cold.close()
            warm.close()
        for name, s in loaded.items():
            if name != TPLOG:
                s.close()

        # Goals (the issue's): ratios in this run.
        g: list[Any] = []
        if with_tplog:
            for label in (TPLOG, TPLOG_ASYNC):
                num = (W_APPEND16, label)
                g.append(report.goal(f"16 writers: {label} ÷ DIY SQLite WAL FULL", 1.5, num, (W_APPEND16, DIY)))
                for peer in (ES, OAI, LG):
                    if any(c.name == peer for c in peers):
                        g.append(report.goal(f"16 writers: {label} ÷ {peer}", 3.0, num, (W_APPEND16, peer)))
            g.append(
                report.goal(
                    f"live run, 1 recorder: {TPLOG_PIPE} ÷ DIY SQLite WAL FULL",
                    1.0,
                    (W_APPEND1, TPLOG_PIPE),
                    (W_APPEND1, DIY),
                )
            )
            for w, what in ((W_SHORT_PAI, "~20-message"), (W_LONG_PAI, "2,000-message")):
                g.append(
                    report.goal(
                        f"{what} as pydantic-ai, cold: tplog ÷ SQLite + validate_json",
                        1.2,
                        (w, f"{TPLOG} cold"),
                        (w, DIY),
                    )
                )
                g.append(
                    report.goal(
                        f"{what} as pydantic-ai, warm: tplog ÷ SQLite + validate_json",
                        10.0,
                        (w, f"{TPLOG} warm (fold cache)"),
                        (w, DIY),
                    )
                )
            for w, what in ((W_SHORT_OWN, "~20-message"), (W_LONG_OWN, "2,000-message")):
                g.append(
                    report.goal(
                        f"{what} as tplog objects, cold: tplog ÷ SQLite + orjson", 1.0, (w, f"{TPLOG} cold"), (w, DIY)
                    )
                )
            if TPLOG in disk:
                g.append(
                    report.goal_value(
                        "disk ÷ raw JSON (tplog)", disk[TPLOG], 0.5, "tplog bytes", "JSON bytes", at_most=True
                    )
                )
            for label in (TPLOG,):
                a, b = report.find(W_APPEND1, label), report.find(W_APPEND1, DIY)
                if a and b:
                    report.notes.append(
                        f"1 writer: tplog ÷ DIY SQLite WAL FULL {a.rate / b.rate:.2f}x (the issue's goal for one "
                        "writer is against raw LMDB replaying tplog's rows: see the append section)."
                    )
            if not args.no_profile:
                _profiles(report, root, short, long, g)

        report.table(
            "Each system's durable default (as measured)",
            ["system", "settings"],
            [[k, v] for k, v in settings.items()],
            right=set(),
        )
    report.notes.append(
        "Loads are per conversation (the µs/event column is µs per load). Peers' pydantic-ai loads validate their "
        "dicts with `ModelMessagesTypeAdapter.validate_python` (DIY SQLite and JSONL: `validate_json` of the rows); "
        "their 'own objects' are dicts. tplog's own objects are the folded, typed ThreadProtocol document."
    )
    report.finish()
    return 0


def _profiles(report: Report, root: pathlib.Path, short: list[Conv], long: Conv, goals: list[Any]) -> None:
    missed = {gl.goal for gl in goals if gl.status == "NOT met"}
    d = root / f"load-{TplogSystem.__name__}"
    if any("~20-message as pydantic-ai, cold" in x for x in missed):
        s = TplogCold(d)
        with contextlib.closing(s):
            report.profile(f"{W_SHORT_PAI}, tplog cold", lambda: [s.load_pai(c) for c in short * 3])
    if any("~20-message as tplog objects" in x for x in missed):
        s = TplogCold(d)
        with contextlib.closing(s):
            report.profile(f"{W_SHORT_OWN}, tplog cold", lambda: [s.load_own(c) for c in short * 3])
    if any("pydantic-ai, warm" in x for x in missed):
        s = TplogSystem(d)
        with contextlib.closing(s):
            for c in short:
                s.load_pai(c)
            report.profile(f"{W_SHORT_PAI}, tplog warm", lambda: [s.load_pai(c) for c in short * 3])


if __name__ == "__main__":
    sys.exit(main())
