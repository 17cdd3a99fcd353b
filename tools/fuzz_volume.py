"""Fuzzing at volume: mutate real inputs, feed every reader of outside bytes, count.

Run it::

    python tools/fuzz_volume.py --cases N [--seed S] [--crashers DIR] [--target NAME ...]

Each target starts from a corpus of valid inputs (the spec's example documents,
the Pydantic AI / Vercel fixture corpus, events encoded by tplog's own codec)
and feeds mutants to one reader: byte flips, insertions, deletions, truncation,
duplicated and spliced ranges, interesting bytes (quotes, brackets, 0xff, huge
msgpack lengths). A failure must be a typed error (``tplog.TplogError``);
anything else is an *untyped failure*: counted, its input written to
``--crashers`` (one file per distinct exception site) to become a regression
test. This is plain random mutation at high speed (hypothesis-driven fuzzing
with shrinking lives in tests/test_fuzz.py), not coverage-guided.

Targets: ``json-doc`` (``from_json``), ``json-validate`` (``validate_json``),
``msgpack-event`` (the event body decoder), ``stored-value`` (the stored-value
decoder with its CRCs), ``stored-value-crc-fixed`` (the same with CRCs made to
match the garbage, so the decoders behind them are reached), ``import-pydantic-ai``
and ``import-vercel-ui`` (``tplog import``), ``ui-stream`` (``assemble_turn`` on SSE text),
``stored-chunk`` and ``stored-chunk-crc-fixed`` (chunk rows: a closed turn's events stored as one value,
read in full and id-only).
Prints a JSON tally: cases per target, typed failures, untyped failures.
"""

from __future__ import annotations

import argparse
import glob
import json
import random
import sys
import time
import traceback
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # runnable from a checkout without installing
    sys.path.insert(0, str(ROOT))

from tplog import TplogError  # noqa: E402
from tplog.backends.lmdb import chunks  # noqa: E402
from tplog.codec import HEADER_CRC_SEED, PREFIX_SIZE, SPLIT_CRC, Codec  # noqa: E402
from tplog.integrations.importers import load_events  # noqa: E402
from tplog.integrations.vercel import assemble_turn  # noqa: E402
from tplog.projections.fold import fold  # noqa: E402
from tplog.protocol.json import from_json, to_json  # noqa: E402
from tplog.protocol.validate import validate_json  # noqa: E402

INTERESTING = [b"\x00", b"\xff", b'"', b"{", b"}", b"[", b"]", b",", b":", b"\\", b"\xc0", b"\xdb\xff\xff\xff\xff",
               b"\xdd\x7f\xff\xff\xff", b"\xcf\xff\xff\xff\xff\xff\xff\xff\xff", b"-1", b"1e999", b"null",
               b'"type"', b"\xed\xa0\x80", b"data: ", b"\n\n"]


def mutate(rng: random.Random, data: bytes, corpus: list[bytes]) -> bytes:
    b = bytearray(data)
    for _ in range(rng.choice((1, 1, 1, 2, 3, 8))):
        op = rng.randrange(8)
        i = rng.randrange(len(b) + 1)
        if op == 0 and b:  # flip bits
            b[min(i, len(b) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1:  # set a random byte
            b[i:i + 1] = bytes([rng.randrange(256)])
        elif op == 2:  # delete a range
            del b[i:i + rng.randint(1, 16)]
        elif op == 3:  # truncate
            del b[i:]
        elif op == 4:  # insert something interesting
            b[i:i] = rng.choice(INTERESTING)
        elif op == 5 and b:  # duplicate a range
            j = rng.randrange(len(b))
            b[i:i] = b[j:j + rng.randint(1, 64)]
        elif op == 6:  # splice in a piece of another input
            other = rng.choice(corpus)
            j = rng.randrange(len(other) + 1)
            b[i:i] = other[j:j + rng.randint(1, 128)]
        else:  # swap two bytes
            if len(b) > 1:
                j, k = rng.randrange(len(b)), rng.randrange(len(b))
                b[j], b[k] = b[k], b[j]
    return bytes(b)


# --------------------------------------------------------------------------- corpora and targets


TID = "6f1c2a8e-9d3b-4c57-8e21-0a4b5c6d7e8f"
CLOCK = "2025-01-20T10:00:00Z"


def _fixtures() -> list[dict[str, Any]]:
    return [json.loads(Path(p).read_text())
            for p in sorted(glob.glob(str(ROOT / "tests" / "integrations" / "fixtures" / "*.json")))]


def _threads() -> list[list[Any]]:
    import msgspec

    from tplog.events import Event

    return [msgspec.convert(fx["events"], list[Event]) for fx in _fixtures()]


def targets() -> dict[str, tuple[list[bytes], Callable[[bytes], Any]]]:
    codec = Codec()
    threads = _threads()
    events = [e for t in threads for e in t]
    bodies = [codec.encode_body(e) for e in events]
    key = b"\x00" * 16 + (1).to_bytes(8, "big")
    values = [codec.encode(e, f"id-{i}", 1).finish(key) for i, e in enumerate(events)]
    fixtures = _fixtures()
    pai = [json.dumps(fx["history"]).encode() for fx in fixtures]
    runs = [(r["sse"].encode(), json.dumps(r["body"]).encode()) for fx in fixtures for r in fx["runs"]]
    sse = [s for s, _ in runs]
    # a mutant keeps its run's request body while its first 64 bytes are intact
    bodies_of = {s[:64]: b for s, b in runs}
    dicts_of = {s[:64]: json.loads(b) for s, b in runs}
    docs = [to_json(fold(t).thread) for t in threads]
    # chunk rows (format 4 and later): each fixture thread's events as one stored chunk value
    ckey = b"\x00" * 16 + len(events).to_bytes(8, "big")
    chunks_ = [chunks.encode_chunk(codec, ckey, len(events) - len(t) + 1,
                                   [_header_bytes(codec, e) for e in t], [codec.encode_body(e) for e in t])
               for t in threads if len(t) >= 2]

    def chunk_read(v: bytes) -> Any:
        """Every reader of a chunk: the one-call decodes, the id-only read and the expansion into format-3 rows."""
        chunks.chunk_events(codec, ckey, v, None, "t")
        chunks.chunk_recorded(codec, ckey, v, None, "t")
        _, _, index_bodies = chunks.chunk_index(codec, ckey, v, None, "t")  # the id-only read
        for body in index_bodies:
            if bytes(body) != b"\xc0":
                codec.decode_event(bytes(body))
        return [codec.decode_value(k, row) for k, row in chunks.expand(codec, ckey, v, None, "t")]

    def chunk_fixed(v: bytes) -> Any:
        """The chunk's CRC made to match the mutant, so the decoders behind it run."""
        b = bytearray(v)
        if v[:1] == b"\x05" and len(v) >= 26:  # format 5: the index section's CRC, then the bodies'
            end = min(len(b) - 4, 22 + int.from_bytes(b[18:22], "big"))
            b[6:10] = zlib.crc32(ckey, zlib.crc32(bytes(b[10:end]), zlib.crc32(bytes(b[:6])))).to_bytes(4, "big")
            b[-4:] = zlib.crc32(ckey, zlib.crc32(bytes(b[end:-4]))).to_bytes(4, "big")
        elif len(v) >= 10:  # format 4: one CRC over the whole value
            b[6:10] = zlib.crc32(ckey, zlib.crc32(bytes(b[10:]), zlib.crc32(bytes(b[:6])))).to_bytes(4, "big")
        v = bytes(b)
        return chunk_read(v)

    def stored_fixed(v: bytes) -> Any:
        """Make both CRCs match whatever the mutant holds, so the decoders behind them run."""
        if len(v) < 16:
            return codec.decode_value(key, v)
        b = bytearray(v)
        if b[0] in SPLIT_CRC:
            end = min(len(b) - 4, PREFIX_SIZE + ((b[10] << 8) | b[11]))
            seed = HEADER_CRC_SEED[b[0]]
            b[6:10] = zlib.crc32(key, zlib.crc32(bytes(b[10:end]), seed)).to_bytes(4, "big")
            b[-4:] = zlib.crc32(key, zlib.crc32(bytes(b[end:-4]))).to_bytes(4, "big")
        return codec.decode_value(key, bytes(b))

    def vercel(data: bytes) -> Any:
        return load_events("vercel-ui", data, request=bodies_of.get(data[:64]),
                           thread_id=TID, agent_id="a", clock=lambda: CLOCK)

    return {
        "json-doc": (docs, from_json),
        "json-validate": (docs, validate_json),
        "msgpack-event": (bodies, codec.decode_event),
        "stored-value": (values, lambda v: codec.decode_value(key, v)),
        "stored-value-crc-fixed": (values, stored_fixed),
        "import-pydantic-ai": (pai, lambda d: load_events("pydantic-ai", d, thread_id=TID, agent_id="a",
                                                          clock=lambda: CLOCK)),
        "import-vercel-ui": (sse, vercel),
        "ui-stream": (sse, lambda d: assemble_turn(d, dicts_of.get(d[:64]))),
        "stored-chunk": (chunks_, chunk_read),
        "stored-chunk-crc-fixed": (chunks_, chunk_fixed),
    }


def _header_bytes(codec: Codec, event: Any) -> bytes:
    """The msgpack header a format-3 value of ``event`` holds (what a chunk keeps per event)."""
    from tplog.codec import header_end

    value = codec.encode(event, "id", 1).finish(b"\x00" * 24)
    return value[12:header_end(value)]


def run(cases: int, *, seed: int = 0, only: list[str] | None = None, crashers: str | None = None,
        log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """``cases`` mutants per target. Returns the tally."""
    rng = random.Random(seed)
    tally: dict[str, Any] = {}
    for name, (corpus, fn) in targets().items():
        if only and name not in only:
            continue
        t = {"cases": 0, "ok": 0, "typed": 0, "untyped": 0, "sites": {}}
        t0 = time.monotonic()
        for _ in range(cases):
            data = mutate(rng, rng.choice(corpus), corpus)
            t["cases"] += 1
            try:
                fn(data)
                t["ok"] += 1
            except TplogError:
                t["typed"] += 1
            except RecursionError:  # a limit of Python's, not a decoding gap: still a failure to report
                t["untyped"] += 1
                t["sites"]["RecursionError"] = t["sites"].get("RecursionError", 0) + 1
            except Exception as exc:
                t["untyped"] += 1
                tb = traceback.extract_tb(exc.__traceback__)[-1]
                site = f"{type(exc).__name__} at {Path(tb.filename).name}:{tb.lineno}"
                if site not in t["sites"] and crashers:
                    Path(crashers).mkdir(parents=True, exist_ok=True)
                    (Path(crashers) / f"{name}-{len(t['sites'])}.bin").write_bytes(data)
                t["sites"][site] = t["sites"].get(site, 0) + 1
        t["seconds"] = round(time.monotonic() - t0, 1)
        tally[name] = t
        if log:
            log(f"{name}: {json.dumps(t)}")
    return tally


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--cases", type=int, default=10_000, help="mutants per target")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--crashers", default=None, help="write one input per untyped failure site here")
    ap.add_argument("--target", action="append", default=None)
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    t0 = time.monotonic()
    tally = run(args.cases, seed=seed, only=args.target, crashers=args.crashers, log=print)
    total = sum(t["cases"] for t in tally.values())
    untyped = sum(t["untyped"] for t in tally.values())
    print(json.dumps({"seed": seed, "seconds": round(time.monotonic() - t0, 1), "cases": total,
                      "untyped": untyped}))
    return 1 if untyped else 0


if __name__ == "__main__":
    sys.exit(main())
