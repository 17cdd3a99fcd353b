"""Fuzzing the input and decoding boundaries: every failure must be a typed tplog error.

- the ThreadProtocol JSON reader (``from_json``, ``validate_json``) on mutated valid documents
  (byte-level and structural mutations) and on arbitrary bytes / arbitrary JSON;
- the UI-stream assembler (``assemble_turn``) on mutated, truncated and reordered chunk lists of
  the fixture corpus, and on mutated SSE text;
- the event decoder on mutated stored bytes (flip / truncate / extend a value read from a real
  store): ``Store.read`` raises CorruptionError or returns the original events, never anything
  else; with the CRC recomputed over the garbage it still raises only typed errors;
- the CLI parser and commands on random argv, in-process: exit 0/1/2, never a traceback;
- limits: too large, too many parts, too deep, and a zstd bomb planted as a stored value.

Each category counts its cases and its typed failures; the counts are printed at the end of the
module (``-s``). ``--soak`` runs many more examples.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import subprocess
import sys
import textwrap
import traceback
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ToyStore as Store
from conftest import agent_start, exchange, link, register, response, snapshot, spawn_message, started, user
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from strategies import json_values, threads

from tplog import TplogError, UserTurnSubmitted
from tplog.backends.lmdb.keys import tkey
from tplog.cli import build_parser, main
from tplog.codec import stored_body
from tplog.errors import CorruptionError, LimitExceededError
from tplog.events import MessageRecorded as MessageRecordedEvent
from tplog.integrations.vercel import assemble_turn, parse_sse
from tplog.limits import Limits
from tplog.protocol import UserPromptPart, UserTurn
from tplog.protocol import model as m
from tplog.protocol.json import from_json, to_builtins
from tplog.protocol.validate import validate_json

ROOT = Path(__file__).resolve().parent
SOAK = "--soak" in sys.argv
N = 2000 if SOAK else 120
_HC = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture]
# Default runs do not shrink: shrinking a whole drawn thread takes minutes, and the failing case is
# printed anyway. --soak shrinks.
_PHASES = list(Phase) if SOAK else [Phase.explicit, Phase.reuse, Phase.generate]
FUZZ = settings(max_examples=N, deadline=None, derandomize=not SOAK, suppress_health_check=_HC, phases=_PHASES)
FUZZ_DOCS = settings(FUZZ, max_examples=N if SOAK else 60)  # whole drawn threads: slower per case

COUNTS: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def _print_counts() -> Iterator[None]:
    yield
    total = sum(v for k, v in COUNTS.items() if k.endswith(":cases"))
    print("\nfuzz cases:", json.dumps(dict(sorted(COUNTS.items())), indent=1), f"\ntotal cases: {total}")


def typed(category: str, fn: Callable[[], Any], allowed: type[BaseException] | tuple[type[BaseException], ...]
          = TplogError) -> Any:
    """Run ``fn``; count the case; a failure must be ``allowed``, anything else fails the test."""
    COUNTS[f"{category}:cases"] += 1
    try:
        return fn()
    except allowed:
        COUNTS[f"{category}:typed_errors"] += 1
        return None
    except BaseException as exc:
        COUNTS[f"{category}:NON_TYPED"] += 1
        raise AssertionError(f"{category}: untyped {type(exc).__name__}: {exc}\n{traceback.format_exc()}") from exc


def must_fail(category: str, fn: Callable[[], Any], error: type[TplogError] = CorruptionError) -> Any:
    """Run ``fn``; count the case; it must raise ``error`` (returned): succeeding fails the test too."""
    COUNTS[f"{category}:cases"] += 1
    try:
        got = fn()
    except error as exc:
        COUNTS[f"{category}:typed_errors"] += 1
        return exc
    except BaseException as exc:
        COUNTS[f"{category}:NON_TYPED"] += 1
        raise AssertionError(f"{category}: untyped {type(exc).__name__}: {exc}\n{traceback.format_exc()}") from exc
    raise AssertionError(f"{category}: expected {error.__name__}, but it succeeded with {got!r:.300}")


# --------------------------------------------------------------------------- byte mutations


@st.composite
def mutated_bytes(draw: st.DrawFn, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "set", "delete", "insert", "truncate", "extend", "dup"]))
        n = len(b)
        i = draw(st.integers(0, max(0, n - 1)))
        if op == "flip" and n:
            b[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and n:
            b[i] = draw(st.integers(0, 255))
        elif op == "delete" and n:
            del b[i: i + draw(st.integers(1, 8))]
        elif op == "insert":
            b[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif op == "truncate":
            del b[draw(st.integers(0, n)):]
        elif op == "extend":
            b += draw(st.binary(min_size=1, max_size=16))
        elif op == "dup" and n:
            j = draw(st.integers(i, n))
            b[j:j] = b[i:j]
    return bytes(b)


# --------------------------------------------------------------------------- structural mutations


def _paths(obj: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, (*path, i))


@st.composite
def mutated_doc(draw: st.DrawFn, doc: Any) -> Any:
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_paths(doc))
        path = draw(st.sampled_from(paths))
        op = draw(st.sampled_from(["replace", "delete", "wrap", "dup_list", "retag"]))
        if not path:
            if op == "replace":
                doc = draw(json_values)
            continue
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        k = path[-1]
        if op == "replace":
            parent[k] = draw(json_values)
        elif op == "delete":
            del parent[k]
        elif op == "wrap":
            parent[k] = [parent[k]]
        elif op == "dup_list" and isinstance(parent, list):
            parent.insert(k, copy.deepcopy(parent[k]))
        elif op == "retag" and isinstance(parent[k], dict):
            tag = draw(st.sampled_from(["part_kind", "message_type", "turn_type", "kind"]))
            parent[k][tag] = draw(st.sampled_from(["text", "tool-call", "tool-return", "user", "agent", "response",
                                                  "request", "system", "binary", "image-url", "bogus", 7, None]))
    return doc


def _decode(data: bytes) -> None:
    typed("json:from_json", lambda: from_json(data, m.Thread))
    typed("json:validate_json", lambda: validate_json(data))


@FUZZ_DOCS
@given(st.data())
def test_from_json_on_byte_mutated_documents(data: st.DataObject) -> None:
    doc = data.draw(threads())
    raw = json.dumps(doc).encode()
    _decode(data.draw(mutated_bytes(raw)))


@FUZZ_DOCS
@given(st.data())
def test_from_json_on_structurally_mutated_documents(data: st.DataObject) -> None:
    doc = data.draw(threads())
    _decode(json.dumps(data.draw(mutated_doc(doc))).encode())


@FUZZ
@given(st.one_of(st.binary(max_size=200), json_values.map(lambda v: json.dumps(v).encode()),
                 st.text(max_size=50).map(lambda t: t.encode("utf-8", "surrogatepass"))))
def test_from_json_on_arbitrary_input(data: bytes) -> None:
    _decode(data)


def test_from_json_on_deep_nesting() -> None:
    for depth in (100, 1000, 100_000):
        _decode(b'{"thread_id":"t","turns":[],"metadata":' + b"[" * depth + b"]" * depth + b"}")
        _decode(b"[" * depth)


# --------------------------------------------------------------------------- the UI-stream assembler


def _fixture_runs() -> list[tuple[list[Any], Any, str]]:
    out = []
    for p in sorted((ROOT / "integrations" / "fixtures").glob("*.json")):
        fx = json.loads(p.read_text())
        for run in fx["runs"]:
            out.append((list(parse_sse(run["sse"])), run["body"], run["sse"]))
    return out


RUNS = _fixture_runs()


@st.composite
def mutated_chunks(draw: st.DrawFn) -> tuple[list[Any], Any]:
    chunks, body, _ = draw(st.sampled_from(RUNS))
    chunks = copy.deepcopy(chunks)
    body = copy.deepcopy(body) if draw(st.booleans()) else draw(st.one_of(st.none(), json_values))
    for _ in range(draw(st.integers(1, 5))):
        op = draw(st.sampled_from(["drop", "dup", "swap", "truncate", "field", "junk", "reverse"]))
        n = len(chunks)
        if not n:
            break
        i = draw(st.integers(0, n - 1))
        if op == "drop":
            del chunks[i]
        elif op == "dup":
            chunks.insert(i, copy.deepcopy(chunks[i]))
        elif op == "swap":
            j = draw(st.integers(0, n - 1))
            chunks[i], chunks[j] = chunks[j], chunks[i]
        elif op == "truncate":
            del chunks[i:]
        elif op == "reverse":
            chunks.reverse()
        elif op == "junk":
            chunks.insert(i, draw(st.one_of(json_values, st.just("[DONE]"))))
        elif op == "field" and isinstance(chunks[i], dict):
            doc = chunks[i]
            paths = [p for p in _paths(doc) if p]
            if paths:
                path = draw(st.sampled_from(paths))
                parent = doc
                for k in path[:-1]:
                    parent = parent[k]
                if draw(st.booleans()):
                    parent[path[-1]] = draw(json_values)
                else:
                    del parent[path[-1]]
    return chunks, body


@FUZZ
@given(mutated_chunks())
def test_assembler_on_mutated_chunk_lists(case: tuple[list[Any], Any]) -> None:
    chunks, body = case
    typed("vercel:assemble_turn", lambda: assemble_turn(chunks, body, agent_id="agent-1"))


@FUZZ
@given(st.data())
def test_assembler_on_mutated_sse_text(data: st.DataObject) -> None:
    _, body, sse = data.draw(st.sampled_from(RUNS))
    raw = data.draw(mutated_bytes(sse.encode()))
    typed("vercel:assemble_sse", lambda: assemble_turn(raw, body, agent_id="agent-1"))


# --------------------------------------------------------------------------- stored values


@pytest.fixture(scope="module")
def fuzz_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, dict[str, list[Any]]]]:
    s = Store(tmp_path_factory.mktemp("fuzz") / "s", limits=Limits(blob_threshold=2048))
    s.append("t1", [started("t1"), register(), *exchange("q" * 500, "a" * 300), link("t2", "spawned_from")])
    s.append("t1", [user("big " * 1000), user("big " * 1000)])  # a shared blob
    s.append("t2", [started("t2"), user(), agent_start(), spawn_message("t3"), response("x" * 200)])
    originals = {t: [(e.event_id, e.seq, to_builtins(e.event)) for e in s.read(t)] for t in ("t1", "t2")}
    yield s, originals
    s.close()


def _table_items(s: Store, table: str) -> list[tuple[bytes, bytes]]:
    with s.backend.engine.read() as txn:
        return [(bytes(k), bytes(v)) for k, v in txn.range(table)]


def _fix_crc(table: str, key: bytes, v: bytes) -> bytes:
    if table == "events" and len(v) >= 12 and v[0] in (2, 3):  # header CRC and body CRC
        end = 12 + int.from_bytes(v[10:12], "big")
        if end > len(v) - 4:
            return v
        seed = zlib.crc32(v[:1]) if v[0] == 3 else 0  # format 3's header CRC starts with the format byte
        return (v[:6] + zlib.crc32(key, zlib.crc32(v[10:end], seed)).to_bytes(4, "big") + v[10:-4]
                + zlib.crc32(key, zlib.crc32(v[end:-4])).to_bytes(4, "big"))
    if table == "events" and len(v) >= 12:
        return v[:6] + zlib.crc32(key, zlib.crc32(v[10:])).to_bytes(4, "big") + v[10:]
    if table == "blobs" and len(v) >= 13:
        return v[:9] + zlib.crc32(key, zlib.crc32(v[13:])).to_bytes(4, "big") + v[13:]
    return v


def _read_all_threads(s: Store) -> dict[str, list[Any]]:
    return {t: [(e.event_id, e.seq, to_builtins(e.event)) for e in s.read(t)] for t in ("t1", "t2")}


@FUZZ
@given(st.data())
def test_decoder_on_mutated_stored_values(fuzz_store: tuple[Store, dict[str, list[Any]]],
                                          data: st.DataObject) -> None:
    s, originals = fuzz_store
    table = data.draw(st.sampled_from(["events", "events", "blobs"]))
    key, old = data.draw(st.sampled_from(_table_items(s, table)))
    new = data.draw(mutated_bytes(old))
    fix_crc = data.draw(st.booleans())
    if fix_crc:
        new = _fix_crc(table, key, new)
    s.backend.engine.run_write(lambda txn: txn.put(table, key, new))
    try:
        got = typed("decoder:read" + (":crc_fixed" if fix_crc else ""), lambda: _read_all_threads(s),
                    allowed=CorruptionError)
        if got is not None and not fix_crc:
            assert got == originals  # a mutation the CRC cannot see must not change what is read
        typed("decoder:read_all", lambda: s.read_all(), allowed=CorruptionError)
        typed("decoder:projections", lambda: (s.pending("t1"), s.interrupts("t2"), s.links("t1")))
    finally:
        s.backend.engine.run_write(lambda txn: txn.put(table, key, old))
    assert _read_all_threads(s) == originals


def _readers_of(s: Store, table: str, key: bytes) -> set[tuple[str, int]]:
    """The (thread, seq) whose read needs stored value ``key`` of ``table``: the event itself, or
    every event that references the blob."""
    names = {tkey(t): t for t in ("t1", "t2")}
    if table == "events":
        return {(names[key[:16]], int.from_bytes(key[16:], "big"))}
    return {(names[k[:16]], int.from_bytes(k[16:], "big")) for k, v in _table_items(s, "events")
            if v[1] & 2 and bytes(stored_body(v)) == key}


@pytest.mark.parametrize("table", ["events", "blobs"])
def test_decoder_on_every_truncation(fuzz_store: tuple[Store, dict[str, list[Any]]], table: str) -> None:
    """Every strict prefix of every stored value (a blob shorter than its 13-byte prefix included)
    fails its CRC or its length check: the read raises CorruptionError naming an event that needs it."""
    s, originals = fuzz_store
    for key, old in _table_items(s, table):
        readers = _readers_of(s, table, key)
        assert readers
        for n in range(min(len(old), 40)):
            s.backend.engine.run_write(lambda txn, k=key, v=old[:n]: txn.put(table, k, v))
            try:
                exc = must_fail(f"decoder:truncated_{table}", lambda: _read_all_threads(s))
                assert (exc.thread_id, exc.seq) in readers, (n, str(exc), readers)
            finally:
                s.backend.engine.run_write(lambda txn, k=key, v=old: txn.put(table, k, v))
    assert _read_all_threads(s) == originals


def test_decoder_on_invalid_utf8_with_a_valid_crc(fuzz_store: tuple[Store, dict[str, list[Any]]]) -> None:
    """Garbage that passes the CRC (written so by a bug, or on purpose): a header whose event id is
    not UTF-8 must still read as CorruptionError (msgspec raises UnicodeDecodeError, not DecodeError)."""
    s, originals = fuzz_store
    eid = originals["t2"][0][0].encode()  # t2's turn is open: its events are single rows (t1's are a chunk)
    key, old = next((k, v) for k, v in _table_items(s, "events") if eid in v)
    i = old.index(eid)
    bad = _fix_crc("events", key, old[:i] + b"\xff" + old[i + 1:])
    s.backend.engine.run_write(lambda txn: txn.put("events", key, bad))
    try:
        exc = must_fail("decoder:invalid_utf8", lambda: _read_all_threads(s))
        assert (exc.thread_id, exc.seq) == ("t2", 1), str(exc)
        assert str(exc).startswith("event header does not decode"), str(exc)
    finally:
        s.backend.engine.run_write(lambda txn: txn.put("events", key, old))
    assert _read_all_threads(s) == originals


def test_decoder_on_a_map_used_as_a_map_key() -> None:
    """A body whose ``Any`` value holds a map keyed by a map (found by tools/fuzz_volume.py's
    msgpack-event target): msgspec 0.19 raised a bare TypeError there; it reads as CorruptionError."""
    from tplog.codec import Codec

    codec = Codec()
    call = m.ToolCallPart(tool_name="f", tool_call_id="c1", args={"kk": 1})
    body = bytes(codec.encode_body(MessageRecordedEvent(message=m.ResponseMessage(
        timestamp="2025-01-20T10:00:00Z", agent_id="a1", parts=[call]))))
    assert body.count(b"\x81\xa2kk\x01") == 1
    bad = body.replace(b"\x81\xa2kk\x01", b"\x81\x80\x01")  # {"kk": 1} -> {{}: 1}
    exc = must_fail("decoder:map_key", lambda: codec.decode_event(bad, where=("t9", 4)))
    assert (exc.thread_id, exc.seq) == ("t9", 4) and str(exc).startswith("stored event does not decode"), str(exc)


# --------------------------------------------------------------------------- the CLI


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("cli")
    with Store(d / "store") as s:
        s.append("t1", [started("t1"), *exchange(), link("t2")])
        s.append("t2", [started("t2"), user()])
    (d / "doc.json").write_text(json.dumps({"thread_id": "x1", "created_at": "2025-01-20T10:00:00Z", "turns": []}))
    (d / "bad.json").write_text("{not json")
    (d / "afile").write_text("x")
    return {"dir": str(d), "store": str(d / "store")}


def _parser_shape() -> dict[str, list[Any]]:
    sub = build_parser()._subparsers._group_actions[0]  # type: ignore[union-attr]
    return {name: [a for a in sp._actions if a.dest != "help"] for name, sp in sub.choices.items()}


SHAPE = _parser_shape()


@st.composite
def argvs(draw: st.DrawFn, env: dict[str, str]) -> list[str]:
    d = env["dir"]
    counter = draw(st.integers(0, 10**9))
    values = st.one_of(
        st.sampled_from([env["store"], f"{d}/missing", f"{d}/doc.json", f"{d}/bad.json", f"{d}/afile", d, "-",
                         "t1", "t2", "nope", "", "0", "-1", "99999999999999999999", "--", "-x", "--help"]),
        st.just(f"{d}/new-{counter}"),
        st.integers(-5, 10**6).map(str),
        st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=8),
    )
    cmd = draw(st.one_of(st.sampled_from(sorted(SHAPE)), st.text(max_size=6).filter(lambda t: "\x00" not in t)))
    argv = [cmd]
    for a in SHAPE.get(cmd, []):
        if not a.option_strings:
            if draw(st.integers(0, 9)):  # usually present
                argv.append(draw(values))
        elif draw(st.booleans()):
            argv.append(draw(st.sampled_from(a.option_strings)))
            if a.nargs != 0:
                argv.append(draw(st.sampled_from(a.choices)) if a.choices and draw(st.booleans()) else draw(values))
    if draw(st.integers(0, 5)) == 0:
        argv.insert(draw(st.integers(0, len(argv))), draw(values))
    if draw(st.integers(0, 8)) == 0:
        del argv[draw(st.integers(0, len(argv) - 1))]
    return argv


def run_cli(argv: list[str], stdin: bytes = b"{}") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    fake_in = io.TextIOWrapper(io.BytesIO(stdin))
    old_in = sys.stdin
    sys.stdin = fake_in
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 2
    finally:
        sys.stdin = old_in
    return code, out.getvalue(), err.getvalue()


@FUZZ
@given(st.data())
def test_cli_on_random_argv(cli_env: dict[str, str], data: st.DataObject) -> None:
    argv = data.draw(argvs(cli_env))
    if argv and argv[0] == "tail":  # it follows until Ctrl-C: stop once caught up (the last --timeout wins)
        argv += ["--timeout", "0"]
    res = typed("cli:main", lambda: run_cli(argv), allowed=())
    code, _out, err = res
    assert code in (0, 1, 2), (argv, code, err)
    assert "Traceback" not in err, (argv, err)


# --------------------------------------------------------------------------- limits


def test_event_too_large(open_store: Callable[..., Store]) -> None:
    s = open_store(limits=Limits(max_event_bytes=4096))
    s.append("t", [started("t")])
    before = snapshot(s)
    with pytest.raises(LimitExceededError, match="max_event_bytes"):
        s.append("t", [user("x" * 10_000)])
    assert snapshot(s) == before


def test_too_many_parts(open_store: Callable[..., Store]) -> None:
    s = open_store(limits=Limits(max_parts=5))
    s.append("t", [started("t")])
    before = snapshot(s)
    turn = UserTurn(submitted_at="2025-01-20T10:00:00Z", parts=[UserPromptPart(content=str(i)) for i in range(6)])
    with pytest.raises(LimitExceededError, match="max_parts"):
        s.append("t", [UserTurnSubmitted(turn=turn)])
    assert snapshot(s) == before


def test_too_deep_nesting(open_store: Callable[..., Store]) -> None:
    s = open_store(limits=Limits(max_depth=10))
    s.append("t", [started("t")])
    before = snapshot(s)
    deep: Any = "leaf"
    for _ in range(40):
        deep = {"k": [deep]}
    with pytest.raises(LimitExceededError, match="max_depth"):
        s.append("t2", [started("t2", metadata=deep)])
    with pytest.raises(LimitExceededError, match="max_depth"):  # in one append with a valid event: none written
        s.append("t", [user(), started("t3", metadata=deep)])
    assert snapshot(s) == before


def test_many_shallow_containers_are_not_too_deep(open_store: Callable[..., Store]) -> None:
    """The depth check's fast path counts container bytes; an event with more containers
    than the limit but shallow nesting falls back to the walk and is accepted."""
    s = open_store(limits=Limits(max_depth=10))
    wide = {"rows": [{"a": [i, {"b": [i]}]} for i in range(300)]}
    s.append("w", [started("w", metadata=wide)])
    assert s.read("w")[0].event.metadata == wide


_BOMB = textwrap.dedent("""
    import resource, sys, zlib, zstandard
    sys.path.insert(0, sys.argv[2])
    from conftest import started, user
    from tplog import CorruptionError, TplogError
    from conftest import ToyStore as Store
    from tplog.backends.lmdb.keys import event_key, tkey

    with Store(sys.argv[1]) as s:
        s.append("t", [started("t"), user("x" * 300)])   # seq 2 is stored compressed
        key = event_key(tkey("t"), 2)
        with s.backend.engine.read() as txn:
            value = bytes(txn.get("events", key))
        hlen = int.from_bytes(value[10:12], "big")
        head = value[12:12 + hlen]
        results = []
        for content_size in (True, False):
            c = zstandard.ZstdCompressor(level=3, write_content_size=content_size)
            cobj = c.compressobj(size=200 << 20 if content_size else -1)
            chunk = bytes(1 << 20)
            body = b"".join(cobj.compress(chunk) for _ in range(200)) + cobj.flush()
            tail = len(head).to_bytes(2, "big") + head + body
            bomb = bytes([1, 1]) + (0).to_bytes(4, "big") + zlib.crc32(key, zlib.crc32(tail)).to_bytes(4, "big") + tail
            s.backend.engine.run_write(lambda txn: txn.put("events", key, bomb))
            base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            try:
                s.read("t")
                results.append("read returned")
            except CorruptionError as exc:
                results.append("CorruptionError")
            except TplogError as exc:
                results.append(type(exc).__name__)
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            results.append((peak - base) // 1024)
            results.append(len(bomb))
        print(results)
""")


def test_zstd_bomb_is_refused_with_bounded_memory(tmp_path: Path) -> None:
    """200 MB of zeros compressed into a stored value with a correct CRC: the read raises a typed
    error and memory stays far below 200 MB (max_decompressed_bytes is 64 MB)."""
    out = subprocess.run([sys.executable, "-c", _BOMB, str(tmp_path / "s"), str(ROOT)], capture_output=True,
                         text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT.parent)})
    assert out.returncode == 0, out.stderr
    res = eval(out.stdout.strip())
    for outcome, grew_mb, size in (res[0:3], res[3:6]):
        assert outcome in ("CorruptionError", "LimitExceededError"), res
        assert size < 64 << 10  # it really is a bomb: a few KB
        assert grew_mb < 100, f"reading the bomb grew memory by {grew_mb} MB"
    COUNTS["limits:zstd_bomb:cases"] += 2
