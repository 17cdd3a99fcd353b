"""``tplog verify``: check a whole store against itself.

Checks, streaming (memory is per thread, not per log):

1. every event value's CRC, header and body decode (blobs included);
2. the event-id index: each event's id maps back to its key and position;
3. the global log: each position names an existing event whose id maps to
   that position; positions strictly increase with each thread's seqs;
4. heads: a live thread's seqs are exactly 1..version with no gap, a deleted
   one holds only its tombstone; ``updated`` has the head's entry;
5. blobs: each blob's reference count equals the events that reference it;
6. projections: each live projection equals a fresh rebuild (``rebuild(verify=True)``).

Each problem names the thread and seq (or the key) so it can be found.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from tplog.backends.common import decode_head
from tplog.backends.contract import VerifyReport
from tplog.backends.lmdb.chunks import EventRows, expand, is_chunk
from tplog.backends.lmdb.keys import TKEY_SIZE, eid_key, from_u64, scope_tag, tkey, u64
from tplog.backends.lmdb.projections import is_live, read_info
from tplog.codec import F_BLOB, blob_refcount, stored_body
from tplog.errors import CorruptionError, RebuildInProgressError

if TYPE_CHECKING:
    from tplog.backends.lmdb.maintenance import LmdbMaintenance
    from tplog.codec import Codec



def _rows(txn: Any, codec: Codec, tk: bytes, name: str, rep: VerifyReport) -> Iterator[tuple[bytes, bytes | None]]:
    """A thread's events as (key, value), a chunk's expanded; a chunk that fails its
    checks is reported and yields (its last key, None)."""
    for k, v in txn.range("events", tk, tk + b"\xff" * 8):
        if not is_chunk(v):
            yield k, v
            continue
        try:
            rows = expand(codec, k, v, txn, name)
        except CorruptionError as exc:
            rep.problems.append(str(exc))
            yield k, None
            continue
        yield from rows

__all__ = ["verify"]


def verify(store: LmdbMaintenance, *, projections: bool = True) -> VerifyReport:
    rep = VerifyReport()
    codec = store.codec
    refs: dict[bytes, int] = {}
    with store.engine.read() as txn:
        for hk, hv in txn.range("heads"):
            rep.threads += 1
            head = decode_head(hv)
            tk = bytes(hk)
            name = head.thread_id
            expected = 1
            last_pos = 0
            fork_at = head.fork_at if head.fork_of is not None and head.status == "active" else 0
            if fork_at:  # a fork's seqs 2..fork_at are its parent's: it must reach that far
                parent = txn.get("heads", tkey(head.fork_of or "", head.scope))
                ph = decode_head(parent) if parent is not None else None
                if ph is None or ph.status != "active" or ph.version < fork_at:
                    rep.problems.append(f"thread {name}: forked from {head.fork_of} at seq {fork_at}, which it "
                                        "does not hold")
            for k, v in _rows(txn, codec, tk, name, rep):
                seq = from_u64(k, TKEY_SIZE)
                if v is None:  # a damaged chunk (reported): its events are counted as there
                    expected = seq + 1
                    continue
                rep.events += 1
                where = (name, seq)
                # A damaged event is reported once: it still fills its seq (no "gap"), and a sound
                # value still holds its reference to a damaged blob (no refcount mismatch).
                if head.status == "active" and seq != expected:
                    rep.problems.append(f"thread {name}: seq {seq} follows seq {expected - 1} (gap)")
                expected = seq + 1 if not (fork_at and seq == 1) else fork_at + 1
                try:
                    codec.check(k, v, where=where)
                except CorruptionError as exc:
                    rep.problems.append(str(exc))
                    continue
                if v[1] & F_BLOB:
                    sha = bytes(stored_body(v))
                    refs[sha] = refs.get(sha, 0) + 1
                try:
                    hdr = codec.header(v, where=where)
                except CorruptionError as exc:
                    rep.problems.append(str(exc))
                    continue
                try:
                    codec.decode_event(codec.body_bytes(v, txn, where=where), where=where)
                except CorruptionError as exc:
                    rep.problems.append(str(exc))  # the header is sound: its index entries are checked on
                ref = txn.get("eventids", eid_key(hdr.event_id, head.scope))
                if ref is None or bytes(ref[: TKEY_SIZE + 8]) != bytes(k):
                    rep.problems.append(f"thread {name}, seq {seq}: event id {hdr.event_id!r} is not indexed to it")
                    continue
                pos = from_u64(ref, TKEY_SIZE + 8)
                if txn.get("global", u64(pos)) != bytes(k):
                    rep.problems.append(f"thread {name}, seq {seq}: global position {pos} does not name it")
                if pos <= last_pos:
                    rep.problems.append(f"thread {name}, seq {seq}: position {pos} not after {last_pos}")
                last_pos = pos
            if head.status == "active" and expected - 1 != head.version:
                rep.problems.append(f"thread {name}: head version {head.version} but last seq {expected - 1}")
            if txn.get("updated", scope_tag(head.scope) + u64(head.updated_ns) + tk) is None:
                rep.problems.append(f"thread {name}: no 'updated' index entry for its head")
        rows = EventRows(txn, codec)
        for pk, key in txn.range("global"):
            if not rows.exists(key):
                rep.problems.append(f"global position {from_u64(pk)} names a missing event "
                                    f"(thread key {bytes(key[:TKEY_SIZE]).hex()}, seq {from_u64(key, TKEY_SIZE)})")
        for sha, blob in txn.range("blobs"):
            rep.blobs += 1
            n = blob_refcount(blob)
            if n != refs.get(bytes(sha), 0):
                rep.problems.append(f"blob {bytes(sha).hex()}: refcount {n}, referenced {refs.get(bytes(sha), 0)}")
        live = {name: is_live(read_info(txn, name), name) for name in ("links", "state")}
    if projections:
        for name, is_current in live.items():
            if not is_current:
                rep.problems.append(f"projection {name!r} is stale: run `tplog rebuild {store.path} "
                                    f"--projection {name}`")
                continue
            try:
                for r in store.rebuild([name], verify=True):
                    rep.problems.extend(r.differences)
            except CorruptionError as exc:
                rep.problems.append(f"projection {name!r} cannot be rebuilt: {exc}")
            except RebuildInProgressError as exc:
                rep.skipped.append(f"projection {name!r} not compared with a rebuild: {exc}")
    return rep
