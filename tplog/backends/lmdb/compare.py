"""The comparison of a projection's live rows with the shadow rows a rebuild wrote
(:func:`tplog.backends.lmdb.rebuild.rebuild`): what differs, said for ``rebuild
--verify`` or written to the live tables by the swap, and the shadow rows' removal."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Final

import msgspec

from tplog.backends.common import CHILD_SPAWN, DECLARED, LINKS, STATE
from tplog.backends.lmdb.engine import ReadTxn, WriteTxn
from tplog.backends.lmdb.keys import TKEY_SIZE, from_u64
from tplog.backends.lmdb.projrows import SPAWNER_PREFIX, STATE_PREFIX, child_dec, enc, thread_deleted

__all__ = ["clear_shadow", "describe", "differences"]


def _upto(prefix: bytes) -> bytes:
    """The first key after every key starting with ``prefix`` (which ends in NUL)."""
    return prefix[:-1] + b"\x01"


#: Each projection's rows: (table, first key, end key or None) ranges, in this order.
_RANGES: Final = {
    LINKS: (("links_in", b"", None), ("children", b"", None), ("proj", SPAWNER_PREFIX, _upto(SPAWNER_PREFIX))),
    STATE: (("proj", STATE_PREFIX, _upto(STATE_PREFIX)),),
}


def _rows(txn: ReadTxn, name: str, shadow: bool, deleted: set[bytes]) -> Iterator[tuple[int, bytes, bytes]]:
    """Projection ``name``'s rows, live or shadow, as (range index in ``_RANGES[name]``,
    key, value) in that order: streamed, never all in memory. Shadow rows are filtered
    by :func:`_without_deleted` (threads in ``deleted``, and deleted children)."""
    for i, (table, lo, hi) in enumerate(_RANGES[name]):
        if not shadow:
            for k, v in txn.range(table, lo, hi):
                yield i, bytes(k), bytes(v)
            continue
        prefix = b"~" + table.encode() + b"\x00"
        for k, v in txn.range("proj", prefix + lo, prefix + hi if hi is not None else _upto(prefix)):
            key = bytes(k[len(prefix):])
            kept = _without_deleted(txn, table, key, bytes(v), deleted)
            if kept is not None:
                yield i, key, kept


def differences(txn: ReadTxn, name: str, deleted: set[bytes]) -> list[tuple[str, bytes, bytes | None, bytes | None]]:
    """(table, key, live value, rebuilt value) for every row where the live projection and
    the shadow rows disagree: a merge of the two sorted row streams, so memory is the
    differences only (none when the rebuild confirms the live rows)."""
    tables = [r[0] for r in _RANGES[name]]
    out: list[tuple[str, bytes, bytes | None, bytes | None]] = []
    live, fresh = _rows(txn, name, False, set()), _rows(txn, name, True, deleted)
    a, b = next(live, None), next(fresh, None)
    while a is not None or b is not None:
        if b is None or (a is not None and (a[0], a[1]) < (b[0], b[1])):
            assert a is not None
            out.append((tables[a[0]], a[1], a[2], None))
            a = next(live, None)
        elif a is None or (b[0], b[1]) < (a[0], a[1]):
            out.append((tables[b[0]], b[1], None, b[2]))
            b = next(fresh, None)
        else:
            if a[2] != b[2]:
                out.append((tables[a[0]], a[1], a[2], b[2]))
            a, b = next(live, None), next(fresh, None)
    return out


def clear_shadow(txn: WriteTxn, name: str) -> None:
    for table, lo, hi in _RANGES[name]:
        prefix = b"~" + table.encode() + b"\x00"
        start, end = prefix + lo, prefix + hi if hi is not None else _upto(prefix)
        while True:  # in batches: the keys are never all in memory
            batch = [bytes(k) for k, _ in itertools.islice(txn.range("proj", start, end), 100)]
            if not batch:
                break
            for k in batch:
                txn.delete("proj", k)


def describe(name: str, table: str, key: bytes, live: bytes | None, fresh: bytes | None) -> str:
    def show(v: bytes | None) -> str:
        if v is None:
            return "absent"
        return "present" if not v else repr(msgspec.msgpack.decode(v))[:200]

    if table == "proj" and key.startswith(SPAWNER_PREFIX):
        k = key[len(SPAWNER_PREFIX):]
        what = f"spawner[{k[:TKEY_SIZE].hex()} ← {k[TKEY_SIZE:].hex()}]"
    elif table == "proj":
        what = f"state of thread key {key[len(STATE_PREFIX):].hex()}"
    elif table == "children":
        what = f"children[{key[:TKEY_SIZE].hex()} → {key[TKEY_SIZE:].hex()}]"
    else:
        ordinal = from_u64(key, len(key) - 8)
        at = f"declared link {ordinal & ~DECLARED}" if ordinal & DECLARED else f"seq {ordinal}"
        what = f"links_in[{key[:TKEY_SIZE].hex()} … {key[-8 - TKEY_SIZE:-8].hex()} {at}]"
    return f"{name}: {what}: live {show(live)}, rebuilt {show(fresh)}"


def _without_deleted(txn: ReadTxn, table: str, key: bytes, value: bytes, deleted: set[bytes]) -> bytes | None:
    """A shadow row without what deleted threads contributed (``None``: nothing left).
    A thread in ``deleted`` (deleted after the key-order scan folded it) has rows in the
    shadow, but a deleted thread has no links; and a deleted thread is nobody's child,
    though its parents' spawn events (folded into the shadow) still name it."""
    if table == "links_in":
        return None if key[-8 - TKEY_SIZE : -8] in deleted else value
    if table == "children":
        parent, child_tk = key[:TKEY_SIZE], key[TKEY_SIZE:]
        if child_tk in deleted or thread_deleted(txn, child_tk):
            return None
        child, flags = child_dec.decode(value)
        if parent in deleted:
            flags &= ~CHILD_SPAWN
        return enc.encode((child, flags)) if flags else None
    if table == "proj" and key.startswith(SPAWNER_PREFIX):
        child_tk, parent = key[len(SPAWNER_PREFIX):][:TKEY_SIZE], key[len(SPAWNER_PREFIX) + TKEY_SIZE:]
        return None if child_tk in deleted or parent in deleted or thread_deleted(txn, child_tk) else value
    return value
