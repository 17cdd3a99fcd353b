"""The one deterministic generator of benchmark data: realistic agent threads.

A thread looks like a pydantic-ai history recorded through tplog: ``ThreadStarted``,
one or two ``AgentRegistered``, then turns — ``UserTurnSubmitted``, ``AgentTurnStarted``,
rounds of a ``ResponseMessage`` (thinking, text, tool calls with JSON arguments) and
a ``RequestMessage`` of tool returns (100 B - 50 KB: search hits, database rows,
file contents, test output), a final response, then ``AgentTurnCompleted`` (about 2 %
``AgentTurnInterrupted``). The size mix is tuned to the corpus in
``/work/shared/PERFORMANCE.md`` (mean ≈ 3.3 KB, median ≈ 1.9 KB, p99 ≈ 20 KB of
compact JSON per event; ≈ 50 events per thread).

Text is not random bytes and not one repeated word: words are drawn from a
Zipf-weighted vocabulary with punctuation, markdown and identifiers; tool outputs
are JSON records and code; thinking parts carry incompressible base64 signatures
like real providers send. So compression ratios measured on it are honest.

Everything is a pure function of ``(seed, index)``: thread ``i`` is the same in a
corpus of 100 threads and in one of 10,000, on every machine and Python 3.11+.

Entry points: :func:`make_corpus` (threads + their ThreadProtocol JSON bytes, the
baselines' payload), :func:`make_thread` (one thread, optionally ~10,000 events)
and :func:`spawn_graph` (threads linked by ``spawned_from`` / ``merged_from`` /
``referenced``, with one cycle, and the expected children for checking queries).
"""

from __future__ import annotations

import base64
import contextlib
import datetime as _dt
import gc
import hashlib
import json
import os
import pathlib
import random
import statistics
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
from msgspec import UNSET

from tplog.events import (
    AgentRegistered,
    AgentTurnCompleted,
    AgentTurnInterrupted,
    AgentTurnStarted,
    Event,
    LinkAdded,
    MessageRecorded,
    ThreadStarted,
    UserTurnSubmitted,
)
from tplog.protocol.json import to_builtins
from tplog.protocol.model import (
    AgentConfig,
    Interruption,
    RequestMessage,
    ResponseMessage,
    RetryPromptPart,
    TextPart,
    ThinkingPart,
    ThreadLink,
    ToolCallPart,
    ToolReturnPart,
    Usage,
    UserPromptPart,
    UserTurn,
)

__all__ = [
    "SEED",
    "Corpus",
    "SpawnGraph",
    "ThreadData",
    "event_json",
    "make_corpus",
    "make_thread",
    "size_stats",
    "spawn_graph",
]

#: The default seed. Printed by every benchmark; change it with ``--seed``.
SEED = 20250601

# Size-mix knobs (tuned so the corpus matches PERFORMANCE.md; see ``python -m benchmarks._data``).
TOOL_RETURN_MEDIAN = 3900
ROUNDS_MEAN = 3.2
THINKING_RATE = 0.8

_EPOCH = 1_735_689_600.0  # 2025-01-01T00:00:00Z

# --------------------------------------------------------------------------- vocabulary


def _split(text: str) -> list[str]:
    return text.split()


# Function words first (they take the top Zipf ranks), then content words.
_FUNCTION = _split(
    """
the of and to a in is that for it as with was on be by this are or at from not but have an they which you one
were all we when there can has more if will each about how up out them then many some so these would other
into its than could only may any been like also over our what after should very where just well because
through does before must between while both under same such own again might never always often still here
however another those whether since within above below i'll we'll it's that's there's don't doesn't can't
won't here's let me i
"""
)

_CONTENT = _split(
    """
result value data file function request response error output input model agent user tool call query table
index record thread message event store log version schema field type key test check build run deploy server
client cache config path module package import class method object string number list array map set update
create delete read write open close commit transaction database connection session token limit offset page
size count total status state report summary analysis review issue change fix bug feature release branch merge
push customer order invoice payment account balance price product item shipping address email phone service
endpoint latency throughput memory disk network process worker queue job task schedule retry timeout failure
success warning debug trace metric alert dashboard graph document section paragraph example note reference
source link title description content text search score rank match filter sort group join select insert
performance benchmark measure compare improve reduce increase handle support include require provide receive
send load save parse validate convert encode decode compress expand python rust javascript typescript sql json
yaml markdown html docker kubernetes linux git project team meeting plan goal step next previous current final
initial default custom important possible available necessary different similar specific general simple
complex quickly carefully directly probably actually already currently usually finally simply clearly need
want look find know think see make take give get go come work try ask tell show seem feel first second third
last few several most every either neither although unless until whereas therefore thus hence refund policy
window days business week month year today yesterday tomorrow morning evening hour minute second delay
estimate confirm cancel approve reject escalate assign resolve reopen ticket priority severity incident outage
region zone cluster node replica backup restore migration upgrade downgrade dependency library framework
runtime compiler interpreter linter formatter coverage fixture mock stub assertion exception traceback stack
frame variable argument parameter keyword option flag environment secret credential permission role policy
owner member admin guest invite share export archive upload download stream buffer chunk batch pipeline stage
artifact image container volume mount port host domain certificate protocol header body cookie redirect proxy
gateway balancer firewall rule route handler middleware controller view template component render layout style
theme color font icon button form dialog menu sidebar footer navigation screen mobile desktop browser tab
window reasonable unexpected missing invalid duplicate stale consistent durable atomic isolated concurrent
parallel sequential recursive incremental eventual strong weak optional required
"""
)
_WORDS = _FUNCTION + _CONTENT

_IDENT = _split(
    """
user_id thread_id order_id account_id created_at updated_at status_code max_retries timeout_s batch_size
page_token request_id response_body config_path cache_dir log_level api_key_ref event_count total_tokens
input_tokens output_tokens model_name provider_name tool_call_id get_user list_orders search_docs run_tests
read_file write_file query_db fetch_url send_email parse_args load_config validate_input build_index
compute_score retry_backoff flush_buffer
"""
)

_TOOLS = [
    "search_docs",
    "query_database",
    "read_file",
    "write_file",
    "run_tests",
    "run_shell",
    "fetch_url",
    "get_customer",
    "list_orders",
    "create_ticket",
    "get_weather",
    "calculator",
]
_STATUSES = ["active", "pending", "shipped", "delivered", "cancelled", "refunded", "failed", "open", "closed"]
_MODELS = [
    ("anthropic", "claude-sonnet-4-5"),
    ("anthropic", "claude-opus-4-1"),
    ("openai", "gpt-5"),
    ("openai", "gpt-4.1-mini"),
    ("google-gla", "gemini-2.5-pro"),
]
_ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def _build_table() -> list[str]:
    """65,536 slots filled by Zipf weight: a uniform 16-bit draw is a Zipf word draw."""
    rng = random.Random("vocab")
    content = list(_CONTENT)
    rng.shuffle(content)
    plurals = [w + "s" for w in content[:250] if not w.endswith("s")]
    tail = content + plurals + [f"`{i}`" for i in _IDENT]
    rng.shuffle(tail)
    tokens = _FUNCTION + tail
    # Zipf by rank, then punctuation / markdown variants carved out of the slots.
    weights = [1.0 / (r + 4) for r in range(len(tokens))]
    scale = 60_000 / sum(weights)
    table: list[str] = []
    for tok, wgt in zip(tokens, weights, strict=True):
        n = max(1, round(wgt * scale))
        table += [tok] * n
    variants: list[str] = []
    for tok in tokens[:400]:
        variants += [tok + ".", tok + ",", tok + "."]
    variants += ["\n\n", "\n- ", "\n1. ", "**note**:", "e.g.", "(see", "above)", "—"] * 20
    table += variants
    rng.shuffle(table)
    while len(table) < 65_536:
        table.append(table[len(table) % 4096])
    return table[:65_536]


_TABLE = _build_table()
_CLEAN = [t.strip("\n-.,*()` :") or "it" for t in _TABLE]
_IDENTS = [
    f"{a}_{b}".replace("'", "")
    for a, b in zip(
        random.Random("idents").choices(_CONTENT, k=4096),
        random.Random("idents2").choices(_CONTENT, k=4096),
        strict=True,
    )
]


class _Gen:
    """Per-thread generator state: one ``random.Random`` and a clock."""

    def __init__(self, seed: Any, start: float) -> None:
        self.rng = random.Random(seed)
        self.clock = start

    # ---- primitives
    def words(self, n_bytes: int) -> str:
        n = max(1, n_bytes // 7)
        idx = memoryview(self.rng.randbytes(2 * n)).cast("H")
        s = " ".join(map(_TABLE.__getitem__, idx))
        return s[:1].upper() + s[1:]

    def sentence(self, lo: int = 6, hi: int = 18) -> str:
        n = self.rng.randint(lo, hi)
        idx = memoryview(self.rng.randbytes(2 * n)).cast("H")
        s = " ".join(map(_CLEAN.__getitem__, idx))
        return s[:1].upper() + s[1:] + "."

    def ident(self) -> str:
        return _IDENTS[self.rng.getrandbits(12)]

    def token(self, prefix: str, n: int = 24) -> str:
        return prefix + "".join(self.rng.choices(_ALNUM, k=n))

    def b64(self, n_bytes: int) -> str:
        return base64.b64encode(self.rng.randbytes(n_bytes)).decode()

    def tick(self, lo: float, hi: float) -> str:
        self.clock += self.rng.uniform(lo, hi)
        return _iso(self.clock)

    def size(self, median: float, sigma: float, lo: int, hi: int) -> int:
        return int(min(hi, max(lo, self.rng.lognormvariate(0, sigma) * median)))

    # ---- content
    def code(self, n_bytes: int) -> str:
        r = self.rng
        out: list[str] = [f"from {self.ident()} import {self.ident()}, {self.ident()}\nimport json\n"]
        size = 0
        while size < n_bytes:
            fn, a, b, v, it, res = (self.ident() for _ in range(6))
            block = (
                f"\n\ndef {fn}({a}: dict, {b}: int = {r.randint(1, 500)}) -> list:\n"
                f'    """{self.sentence()}"""\n'
                f"    {res} = []\n"
                f"    {v} = {a}.get({json.dumps(self.ident())}, {r.randint(0, 99)})\n"
                f"    if {v} is None or {b} > {r.randint(10, 10_000)}:\n"
                f"        raise ValueError({json.dumps(self.sentence(4, 9))})\n"
                f"    for {it} in sorted({a}.values()):\n"
                f"        {res}.append({it} * {b})  # {self.sentence(3, 8)}\n"
                f"    return {res}\n"
            )
            out.append(block)
            size += len(block)
        return "".join(out)

    def json_records(self, n_bytes: int) -> Any:
        r = self.rng
        kind = r.random()
        recs: list[dict[str, Any]] = []
        size = 0
        while size < n_bytes:
            if kind < 0.4:
                rec: dict[str, Any] = {
                    "id": r.randint(1, 10_000_000),
                    "title": self.sentence(3, 9),
                    "url": f"https://docs.example.com/{self.ident()}/{self.ident()}",
                    "score": round(r.random(), 4),
                    "snippet": self.words(r.randint(80, 400)),
                }
            elif kind < 0.8:
                rec = {
                    "order_id": f"ord_{r.randint(100000, 999999)}",
                    "customer_id": r.randint(1000, 99999),
                    "status": r.choice(_STATUSES),
                    "amount": round(r.uniform(1, 2000), 2),
                    "currency": "USD",
                    "created_at": _iso(_EPOCH - r.uniform(0, 3e7)),
                    "items": [
                        {"sku": f"SKU-{r.randint(1000, 9999)}", "qty": r.randint(1, 5)} for _ in range(r.randint(1, 3))
                    ],
                    "note": self.sentence(3, 12) if r.random() < 0.5 else None,
                }
            else:
                rec = {
                    "path": f"src/{self.ident()}/{self.ident()}.py",
                    "line": r.randint(1, 900),
                    "message": self.sentence(5, 14),
                    "severity": r.choice(["error", "warning", "info"]),
                }
            recs.append(rec)
            size += len(_ENC.encode(rec))
        return {"results": recs, "count": len(recs), "truncated": r.random() < 0.1}

    def shell_output(self, n_bytes: int) -> str:
        r = self.rng
        lines: list[str] = []
        size = 0
        while size < n_bytes:
            x = r.random()
            if x < 0.6:
                line = (
                    f"tests/test_{self.ident()}.py::test_{self.ident()} "
                    f"{'PASSED' if r.random() < 0.93 else 'FAILED'} [{r.randint(1, 100):3d}%]"
                )
            elif x < 0.8:
                line = f"{_iso(self.clock - r.uniform(0, 60))} INFO {self.ident()}: {self.sentence(4, 12)}"
            else:
                line = f'  File "src/{self.ident()}.py", line {r.randint(1, 800)}, in {self.ident()}'
            lines.append(line)
            size += len(line) + 1
        return "\n".join(lines)

    def tool_args(self, tool: str) -> dict[str, Any]:
        r = self.rng
        if tool == "write_file":
            return {"path": f"src/{self.ident()}.py", "content": self.code(self.size(900, 0.9, 150, 12_000))}
        if tool == "query_database":
            return {
                "sql": f"SELECT id, status, amount FROM orders WHERE customer_id = {r.randint(1, 99999)} "
                f"AND status = '{r.choice(_STATUSES)}' ORDER BY created_at DESC LIMIT {r.randint(5, 100)}"
            }
        if tool in ("run_shell", "run_tests"):
            return {"command": f"pytest -q tests/test_{self.ident()}.py -k {self.ident()}", "timeout_s": 120}
        if tool == "read_file":
            return {"path": f"src/{self.ident()}/{self.ident()}.py"}
        if tool == "fetch_url":
            return {"url": f"https://api.example.com/v2/{self.ident()}?page={r.randint(1, 9)}"}
        return {"query": self.sentence(3, 10), "limit": r.choice([5, 10, 20]), "filters": {"lang": "en"}}

    def tool_return(self, tool: str) -> Any:
        n = self.size(TOOL_RETURN_MEDIAN, 0.85, 100, 50_000)
        if tool in ("read_file", "write_file"):
            return self.code(n) if tool == "read_file" else f"Wrote {n} bytes."
        if tool in ("run_shell", "run_tests"):
            return self.shell_output(n)
        if tool == "calculator":
            return str(round(self.rng.uniform(-1e6, 1e6), 6))
        return self.json_records(n)


def _iso(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, _dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# --------------------------------------------------------------------------- threads


@dataclass
class ThreadData:
    """One generated thread: its events in append order, and their JSON (lazily)."""

    thread_id: str
    events: list[Event]
    _json: list[bytes] | None = field(default=None, repr=False)

    @property
    def json(self) -> list[bytes]:
        """Each event's JSON (:func:`event_json`): what the baselines store."""
        if self._json is None:
            self._json = [event_json(e) for e in self.events]
        return self._json


def event_json(event: Event) -> bytes:
    """An event as compact JSON: ``{"type": tag, ...}`` with protocol objects as ThreadProtocol JSON.

    (``tplog.to_json`` covers protocol objects; events have no ``extra`` of their
    own at the top level, so the envelope is built here.) Fields at their default
    are left out, as msgspec's ``omit_defaults`` does.
    """
    out: dict[str, Any] = {"type": event.__struct_config__.tag}
    defaults = _defaults(type(event))
    for name in event.__struct_fields__:
        v = getattr(event, name)
        if v is UNSET or (name in defaults and v == defaults[name]):
            continue
        out[name] = to_builtins(v)
    return _ENC.encode(out)


_ENC = msgspec.json.Encoder()
_DEFAULTS: dict[type, dict[str, Any]] = {}


def _defaults(cls: type) -> dict[str, Any]:
    d = _DEFAULTS.get(cls)
    if d is None:
        d = _DEFAULTS[cls] = {
            f.name: (f.default if f.default_factory is msgspec.NODEFAULT else f.default_factory())
            for f in msgspec.structs.fields(cls)
            if f.default is not msgspec.NODEFAULT or f.default_factory is not msgspec.NODEFAULT
        }
    return d


def make_thread(index: int, *, seed: int = SEED, n_events: int | None = None) -> ThreadData:
    """Thread ``index`` of the corpus ``seed``; ``n_events`` forces at least that many events.

    Without ``n_events`` a thread has 1-10 turns (≈ 50 events on average).
    """
    g = _Gen(f"{seed}:{index}", _EPOCH + index * 37.0)
    r = g.rng
    tid = str(uuid.UUID(int=r.getrandbits(128), version=4))
    provider, model = r.choice(_MODELS)
    events: list[Event] = [
        ThreadStarted(
            thread_id=tid,
            created_at=g.tick(0, 1),
            title=g.sentence(3, 8),
            metadata={"user_id": f"user_{r.randint(1, 50_000)}", "app": "support-bot", "env": "prod"},
        )
    ]
    agents = [f"agent_{r.randint(1, 40)}"]
    if r.random() < 0.25:
        agents.append(f"agent_{r.randint(41, 80)}")
    for aid in agents:
        events.append(
            AgentRegistered(
                agent=AgentConfig(
                    agent_id=aid,
                    agent_name=g.ident().replace("_", " ").title(),
                    model_name=model,
                    provider_name=provider,
                    created_at=g.tick(0, 1),
                )
            )
        )
    n_turns = r.randint(1, 9)
    t = 0
    while (n_events is None and t < n_turns) or (n_events is not None and len(events) < n_events):
        _turn(g, events, agents[t % len(agents)], provider, model)
        t += 1
    return ThreadData(tid, events)


def _turn(g: _Gen, events: list[Event], agent_id: str, provider: str, model: str) -> None:
    r = g.rng
    prompt = g.words(g.size(700, 1.0, 20, 8000))
    events.append(UserTurnSubmitted(turn=UserTurn(submitted_at=g.tick(5, 120), parts=[UserPromptPart(content=prompt)])))
    events.append(AgentTurnStarted(agent_id=agent_id, started_at=g.tick(0, 0.05)))
    total_in = total_out = 0
    rounds = min(16, int(r.expovariate(1 / ROUNDS_MEAN)))
    for i in range(rounds + 1):
        final = i == rounds
        parts: list[Any] = []
        if r.random() < THINKING_RATE:
            if provider == "anthropic":
                parts.append(
                    ThinkingPart(
                        content=g.words(g.size(2200, 0.7, 60, 12_000)),
                        signature=g.b64(r.randint(200, 500)),
                        provider_name=provider,
                    )
                )
            else:
                parts.append(
                    ThinkingPart(
                        content=g.words(g.size(1400, 0.7, 40, 6000)),
                        thinking_id=g.token("rs_", 32),
                        provider_name=provider,
                    )
                )
        if final or r.random() < 0.5:
            parts.append(TextPart(content=g.words(g.size(2500 if final else 900, 0.8, 20, 16_000))))
        calls: list[ToolCallPart] = []
        if not final:
            for _ in range(1 if r.random() < 0.75 else r.randint(2, 3)):
                tool = r.choice(_TOOLS)
                calls.append(
                    ToolCallPart(
                        tool_name=tool,
                        tool_call_id=g.token("toolu_" if provider == "anthropic" else "call_"),
                        args=g.tool_args(tool),
                    )
                )
            parts += calls
        inp, out = r.randint(500, 90_000), r.randint(20, 4000)
        total_in += inp
        total_out += out
        events.append(
            MessageRecorded(
                message=ResponseMessage(
                    timestamp=g.tick(0.5, 30),
                    parts=parts,
                    agent_id=agent_id,
                    model_name=model,
                    provider_name=provider,
                    provider_response_id=g.token("msg_"),
                    usage=Usage(input_tokens=inp, output_tokens=out),
                    finish_reason="stop" if final else "tool_call",
                )
            )
        )
        if final:
            break
        returns: list[Any] = []
        for c in calls:
            if r.random() < 0.03:
                returns.append(
                    RetryPromptPart(content=g.sentence(), tool_name=c.tool_name, tool_call_id=c.tool_call_id)
                )
            else:
                returns.append(
                    ToolReturnPart(
                        tool_name=c.tool_name,
                        tool_call_id=c.tool_call_id,
                        status="success",
                        content=g.tool_return(c.tool_name),
                    )
                )
        events.append(
            MessageRecorded(message=RequestMessage(timestamp=g.tick(0.05, 20), parts=returns, agent_id=agent_id))
        )
    usage = Usage(input_tokens=total_in, output_tokens=total_out, total_tokens=total_in + total_out)
    if r.random() < 0.02:
        events.append(
            AgentTurnInterrupted(
                interruption=Interruption(reason=r.choice(["user_cancelled", "timeout"]), interrupted_at=g.tick(0, 2)),
                total_usage=usage,
            )
        )
    else:
        events.append(AgentTurnCompleted(completed_at=g.tick(0, 0.2), total_usage=usage))


@dataclass
class Corpus:
    """Threads of one seed. ``events`` counts all events; JSON is computed on first use."""

    seed: int
    threads: list[ThreadData]

    @property
    def events(self) -> int:
        return sum(len(t.events) for t in self.threads)

    def json_sizes(self) -> list[int]:
        return [len(j) for t in self.threads for j in t.json]

    def stats(self) -> dict[str, Any]:
        """What every benchmark reports about its data: events, JSON bytes, mean / median / p99 size."""
        return {"seed": self.seed, "threads": len(self.threads), **size_stats(self.json_sizes())}


def size_stats(sizes: list[int]) -> dict[str, Any]:
    s = sorted(sizes)
    n = len(s)
    return {
        "events": n,
        "json_bytes": sum(s),
        "mean_event_bytes": round(sum(s) / n, 1) if n else 0,
        "median_event_bytes": statistics.median(s) if n else 0,
        "p99_event_bytes": s[min(n - 1, int(n * 0.99))] if n else 0,
        "max_event_bytes": s[-1] if n else 0,
    }


def make_corpus(n_threads: int, *, seed: int = SEED, start: int = 0, cache: bool = True) -> Corpus:
    """Threads ``start .. start + n_threads - 1`` of corpus ``seed``.

    Generating costs ~10 ms per thread, so with ``cache`` the threads and their
    JSON are kept as msgpack in ``$TPLOG_BENCH_CACHE`` (default
    ``$TMPDIR/tplog-bench-cache``), keyed by the arguments and a hash of this
    file: a changed generator never reuses stale data.
    """
    path = None
    if cache:
        d = pathlib.Path(
            os.environ.get("TPLOG_BENCH_CACHE") or pathlib.Path(tempfile.gettempdir()) / "tplog-bench-cache"
        )
        src = hashlib.sha256(pathlib.Path(__file__).read_bytes()).hexdigest()[:12]
        path = d / f"corpus-{seed}-{start}-{n_threads}-{src}.msgpack"
        if path.exists():
            with _no_gc():  # the cyclic GC would rescan the growing heap ~5x over
                rows = _CACHE_DEC.decode(path.read_bytes())
            return Corpus(seed, [ThreadData(tid, evs, js) for tid, evs, js in rows])
    with _no_gc():
        corpus = Corpus(seed, [make_thread(i, seed=seed) for i in range(start, start + n_threads)])
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(msgspec.msgpack.encode([(t.thread_id, t.events, t.json) for t in corpus.threads]))
        os.replace(tmp, path)
    return corpus


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


_CACHE_DEC = msgspec.msgpack.Decoder(list[tuple[str, list[Event], list[bytes]]])


# --------------------------------------------------------------------------- spawn graph


@dataclass
class SpawnGraph:
    """Threads linked for children / descendants queries, and the answers to check against.

    ``threads`` are ``(thread_id, events)`` in a valid append order (a thread's
    ``ThreadStarted`` then its ``LinkAdded`` events). ``children[p]`` lists the
    threads with a ``spawned_from`` link to ``p`` in append order; ``links`` has
    every ``(source, relation, target)``. ``cycle`` names threads whose
    ``referenced`` links form a cycle (descendant walks must terminate).
    ``hub`` is a thread with many children (for fan-out queries); ``deep`` a
    thread at the end of the longest spawn chain.
    """

    threads: list[tuple[str, list[Event]]]
    children: dict[str, list[str]]
    links: list[tuple[str, str, str]]
    cycle: list[str]
    hub: str
    deep: str

    def iter_batches(self, size: int) -> Iterator[list[tuple[str, list[Event]]]]:
        for i in range(0, len(self.threads), size):
            yield self.threads[i : i + size]


def spawn_graph(n_threads: int, *, seed: int = SEED) -> SpawnGraph:
    """``n_threads`` small threads: a forest of spawns, merges, references and one cycle.

    About 70 % of threads are spawned from an earlier thread (recent ones more
    likely, so chains get deep), 5 % also merge another thread, 10 % reference
    one; one thread is a hub with ~1 % of all threads (≥ 50) as children; three
    threads reference each other in a cycle. Cheap enough for 1,000,000 threads.
    """
    rng = random.Random(f"{seed}:graph:{n_threads}")
    ids = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(n_threads)]
    hub = ids[0]
    hub_every = max(2, min(100, n_threads // 50))
    children: dict[str, list[str]] = {}
    links: list[tuple[str, str, str]] = []
    depth = [0] * n_threads
    threads: list[tuple[str, list[Event]]] = []
    created = _iso(_EPOCH)
    for i, tid in enumerate(ids):
        evs: list[Event] = [ThreadStarted(thread_id=tid, created_at=created)]
        if i > 0:
            x = rng.random()
            parent = -1
            if i % hub_every == 0:
                parent = 0
            elif x < 0.7:
                parent = max(0, i - 1 - int(rng.expovariate(1 / 20)))
            if parent >= 0:
                p = ids[parent]
                evs.append(LinkAdded(link=ThreadLink(thread_id=p, relation="spawned_from")))
                children.setdefault(p, []).append(tid)
                links.append((tid, "spawned_from", p))
                depth[i] = depth[parent] + 1
            if rng.random() < 0.05:
                m = ids[rng.randrange(i)]
                evs.append(LinkAdded(link=ThreadLink(thread_id=m, relation="merged_from")))
                links.append((tid, "merged_from", m))
            if rng.random() < 0.10:
                ref = ids[rng.randrange(i)]
                evs.append(LinkAdded(link=ThreadLink(thread_id=ref, relation="referenced")))
                links.append((tid, "referenced", ref))
        threads.append((tid, evs))
    cycle: list[str] = []
    if n_threads >= 3:  # a -> b -> c -> a via references appended after all threads exist
        a, b, c = ids[1], ids[n_threads // 2], ids[-1]
        cycle = [a, b, c]
        for src, dst in ((a, b), (b, c), (c, a)):
            threads.append((src, [LinkAdded(link=ThreadLink(thread_id=dst, relation="referenced"))]))
            links.append((src, "referenced", dst))
    deep = ids[max(range(n_threads), key=depth.__getitem__)]
    return SpawnGraph(threads, children, links, cycle, hub, deep)


if __name__ == "__main__":  # python -m benchmarks._data: print the size mix
    import sys
    import time

    import zstandard

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    t0 = time.perf_counter()
    c = make_corpus(n)
    t1 = time.perf_counter()
    st = c.stats()
    t2 = time.perf_counter()
    print(st, f"generate {t1 - t0:.2f}s json {t2 - t1:.2f}s")
    blob = [j for t in c.threads for j in t.json]
    cz = zstandard.ZstdCompressor(level=3)
    per_event = sum(len(cz.compress(j)) for j in blob)
    print(
        f"zstd L3 per event: {st['json_bytes'] / per_event:.2f}x; whole corpus: "
        f"{st['json_bytes'] / len(cz.compress(b''.join(blob))):.2f}x"
    )
