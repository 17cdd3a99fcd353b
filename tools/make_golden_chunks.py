"""Write the golden file that pins the LMDB chunk row format written (tplog/backends/lmdb/chunks.py).

    python tools/make_golden_chunks.py     # writes tests/golden/chunks-v<CHUNK>.bin (now chunks-v5.bin)

``chunks-vN.bin`` (``chunks-v4.bin`` by format 4, ``chunks-v5.bin`` by format 5) is a msgpack
list of ``{"key", "value", "first"}`` maps: chunk rows
holding the events of ``events-v3.bin`` (seqs 1..20, every event type but the
tombstone), one with a zstd-compressed payload and one stored plain, exactly as they
sit in the ``events`` table. What each event must decode to is ``events-v3.json``.

Run it ONCE: tests/test_golden.py decodes these bytes forever after; the script refuses
to overwrite them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tplog.backends.lmdb.chunks import CHUNK, encode_chunk  # noqa: E402
from tplog.backends.lmdb.keys import TKEY_SIZE, from_u64  # noqa: E402
from tplog.codec import Codec, Limits, header_end  # noqa: E402

OUT = ROOT / "tests" / "golden" / f"chunks-v{CHUNK}.bin"
SPLIT = 12  # seqs 1..SPLIT compressed, SPLIT+1..20 plain


def main() -> None:
    if OUT.exists():
        sys.exit(f"{OUT} exists: golden files are written once (a new format gets new files)")
    records = msgspec.msgpack.decode((ROOT / "tests" / "golden" / "events-v3.bin").read_bytes())
    rows = [r for r in records if r["seq"] <= 20]
    out = []
    for part, codec in ((rows[:SPLIT], Codec()), (rows[SPLIT:], Codec(Limits(compress_min_bytes=1 << 30)))):
        headers = [r["value"][12:header_end(r["value"])] for r in part]
        bodies = [bytes(codec.body_bytes(r["value"])) for r in part]
        key = part[-1]["key"]
        first = from_u64(part[0]["key"], TKEY_SIZE)
        out.append({"key": key, "value": encode_chunk(codec, key, first, headers, bodies), "first": first})
    assert out[0]["value"][1] & 1 and out[1]["value"][1] == 0
    OUT.write_bytes(msgspec.msgpack.encode(out))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
