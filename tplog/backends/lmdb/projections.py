"""Projections kept in the store, their bookkeeping, and the rebuild.

Two projections are materialized, both maintained in the append's own write
transaction (so, when live, they cover exactly the log's last position):

- ``links``: the incoming-link index (table ``links_in``), the children
  index (table ``children``) and, per child named by a parent's spawn event,
  that parent (``proj`` rows ``b"spawner\\x00" + child key + parent key``, so
  deleting the child removes it from its parents' children). Every link a
  thread carries is indexed: those declared in ``ThreadStarted.relationships``
  and ``LinkAdded`` events; deleted threads contribute nothing, and a deleted
  thread is nobody's child;
- ``state``: per thread, the id-only fold state (:class:`~tplog.projections.fold.ThreadState`:
  pending tool calls, interrupt facts) in table ``proj`` under
  ``b"state\\x00" + thread key``.

Bookkeeping: table ``meta`` holds ``b"proj:" + name`` → msgpack
``[version, position, status]``. ``version`` is the fold code's version
(:data:`VERSIONS`); ``status`` is ``"live"`` (maintained by every append;
covers the whole log) or ``"stale"`` (the fold code changed, or the store
predates the projection: appends do not maintain it and it must be rebuilt;
``position`` says how far it was built). A stale ``state`` projection is
answered by folding the thread's headers on demand (correct, slower); a stale
``links`` projection raises :class:`RebuildRequiredError` naming the command.

The rebuild (``tplog rebuild``) is :mod:`tplog.backends.lmdb.rebuild`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

import msgspec

from tplog.backends.common import CHILD_LINK, CHILD_SPAWN, SPAWNED_FROM, child_spelling, decode_head
from tplog.backends.common import DECLARED as DECLARED
from tplog.backends.common import LINKS as LINKS
from tplog.backends.common import PROJECTIONS as PROJECTIONS
from tplog.backends.common import STATE as STATE
from tplog.backends.common import VERSIONS as VERSIONS
from tplog.backends.common import outgoing as outgoing
from tplog.backends.lmdb.chunks import index_rows
from tplog.backends.lmdb.engine import ReadTxn, WriteTxn
from tplog.backends.lmdb.keys import TKEY_SIZE, from_u64, tkey, u64
from tplog.backends.lmdb.projrows import SPAWNER_PREFIX as SPAWNER_PREFIX
from tplog.backends.lmdb.projrows import STATE_PREFIX as STATE_PREFIX
from tplog.backends.lmdb.projrows import child_dec as _child_dec
from tplog.backends.lmdb.projrows import enc as _enc
from tplog.backends.lmdb.projrows import thread_deleted as _deleted
from tplog.codec import Codec, Header
from tplog.errors import RebuildRequiredError
from tplog.events import (
    KIND_CODE,
    AgentTurnCompleted,
    AgentTurnInterrupted,
    AgentTurnStarted,
    LinkAdded,
    ThreadStarted,
)
from tplog.projections.fold import ThreadState

__all__ = ["BODY_KINDS", "PROJECTIONS", "VERSIONS", "ProjectionInfo", "Tables"]


_K_LINK = KIND_CODE[LinkAdded]
#: The kinds whose body an id-only fold reads: links, and agent turn boundaries
#: written before format 3 (whose headers carry no ``turn`` facts); every other
#: event is folded from its header alone.
BODY_KINDS: Final = frozenset(KIND_CODE[c] for c in (AgentTurnStarted, AgentTurnCompleted, AgentTurnInterrupted,
                                                     LinkAdded))

_state_dec = msgspec.msgpack.Decoder(ThreadState)


class ProjectionInfo(msgspec.Struct, array_like=True):
    version: int
    position: int
    status: str  # "live" | "stale"


_info_dec = msgspec.msgpack.Decoder(ProjectionInfo)


def meta_key(name: str) -> bytes:
    return b"proj:" + name.encode()


def read_info(txn: ReadTxn, name: str) -> ProjectionInfo | None:
    raw = txn.get("meta", meta_key(name))
    return _info_dec.decode(raw) if raw is not None else None


def write_info(txn: WriteTxn, name: str, info: ProjectionInfo) -> None:
    txn.put("meta", meta_key(name), _enc.encode(info))


def is_live(info: ProjectionInfo | None, name: str) -> bool:
    return info is not None and info.status == "live" and info.version == VERSIONS[name]


def init_infos(txn: WriteTxn, log_empty: bool) -> None:
    """On open: new stores start every projection live; older ones are marked stale."""
    for name, version in VERSIONS.items():
        info = read_info(txn, name)
        if info is None:
            write_info(txn, name, ProjectionInfo(version, 0, "live" if log_empty else "stale"))
        elif info.version != version and info.status == "live":
            write_info(txn, name, ProjectionInfo(info.version, info.position, "stale"))


def require_live(txn: ReadTxn, name: str, path: str) -> None:
    info = read_info(txn, name)
    if not is_live(info, name):
        have = "missing" if info is None else f"version {info.version}, {info.status}"
        raise RebuildRequiredError(
            f"{path}: the {name!r} projection is not current ({have}; this tplog folds version "
            f"{VERSIONS[name]}); run `tplog rebuild {path} --projection {name}`"
        )


# --------------------------------------------------------------------------- table access (live or shadow)


class Tables:
    """Where a projection's rows go: the live tables, or shadow rows in ``proj``."""

    __slots__ = ("shadow", "txn")

    def __init__(self, txn: WriteTxn, shadow: bool) -> None:
        self.txn = txn
        self.shadow = shadow

    def _where(self, table: str, key: bytes) -> tuple[str, bytes]:
        return ("proj", b"~" + table.encode() + b"\x00" + key) if self.shadow else (table, key)

    def get(self, table: str, key: bytes) -> bytes | None:
        return self.txn.get(*self._where(table, key))

    def put(self, table: str, key: bytes, value: bytes) -> None:
        t, k = self._where(table, key)
        self.txn.put(t, k, value)

    def delete(self, table: str, key: bytes) -> None:
        t, k = self._where(table, key)
        self.txn.delete(t, k)


#: The old name, still used by lmdb/recorder.py (its append path is reworked on another branch).
_Tables = Tables


def link_key(target: str, relation: str, source_tk: bytes, ordinal: int, scope: str | None = None) -> bytes:
    """``links_in`` key; ``ordinal``: the LinkAdded's seq, or ``DECLARED | i`` (see :data:`DECLARED`)."""
    return tkey(target, scope) + relation.encode() + b"\x00" + source_tk + u64(ordinal)


def started_event(codec: Codec, txn: ReadTxn, key: bytes, value: bytes, where: tuple[str, int]) -> Any:
    """A stored ThreadStarted, verified and decoded if its body may declare links (the
    body names ``relationships``), else ``None``: most threads declare none."""
    codec.check(key, value, where=where)
    body = bytes(codec.body_bytes(value, txn, where=where))
    return codec.decode_event(body, where=where) if b"relationships" in body else None


def apply_links(tables: Tables, thread_id: str, tk: bytes, seq: int, event: Any, spawned: Iterable[str],
                scope: str | None = None) -> None:
    """Index one event: a LinkAdded, a ThreadStarted declaring links, or a message
    naming spawned threads (unless that thread was deleted: it is nobody's child).
    Idempotent. Targets are keyed within the source thread's scope."""
    for ordinal, lk in outgoing(seq, event) if isinstance(event, (LinkAdded, ThreadStarted)) else ():
        target = lk.thread_id
        tables.put("links_in", link_key(target, lk.relation, tk, ordinal, scope), _enc.encode([thread_id, target]))
        if lk.relation == SPAWNED_FROM:
            _set_child(tables, tkey(target, scope), tk, thread_id, CHILD_LINK)
    for child in spawned:
        ck = tkey(child, scope)
        if not _deleted(tables.txn, ck):
            _set_child(tables, tk, ck, child, CHILD_SPAWN)


def inherited_rows(txn: ReadTxn, codec: Codec, tk: bytes) -> list[tuple[int, Any, tuple[str, ...]]]:
    """What a live fork's prefix indexes under the fork (:func:`tplog.backends.common.inherited`),
    read from its parent's rows (and theirs, for a fork of a fork) in ``txn``: the rebuild's and
    the deletion's view of what the fork's append indexed. ``[]`` for any other thread."""
    raw = txn.get("heads", tk)
    head = decode_head(raw) if raw is not None else None
    if head is None or head.fork_of is None or head.status != "active":
        return []
    out: list[tuple[int, Any, tuple[str, ...]]] = []
    _prefix_rows(txn, codec, head.fork_of, head.scope, 2, head.fork_at, out)
    return out


def _prefix_rows(txn: ReadTxn, codec: Codec, thread_id: str, scope: str | None, lo: int, hi: int,
                 out: list[tuple[int, Any, tuple[str, ...]]]) -> None:
    """The link-index inputs of ``thread_id``'s seqs ``lo``..``hi`` (a fork's through its parent)."""
    tk = tkey(thread_id, scope)
    raw = txn.get("heads", tk)
    if raw is None or lo > hi:
        return
    head = decode_head(raw)
    if head.fork_of is not None and head.status == "active":
        if lo <= head.fork_at:
            _prefix_rows(txn, codec, head.fork_of, scope, lo, min(hi, head.fork_at), out)
        lo = max(lo, head.fork_at + 1)
    for key, value, chdr, body in index_rows(txn, codec, tk + u64(lo), tk + u64(hi + 1), name=thread_id):
        seq = from_u64(key, TKEY_SIZE)
        if value is None:  # a chunk's event: header and LinkAdded body verified with its index section
            hdr: Header = chdr  # type: ignore[assignment]
        else:
            codec.check_header(key, value, where=(thread_id, seq))
            hdr = codec.header(value, where=(thread_id, seq))
        spawned = tuple(hdr.facts.spawned) if hdr.facts is not None and hdr.facts.spawned else ()
        if hdr.kind == _K_LINK:
            if value is None:
                ev = codec.decode_event(body if body is not None else b"", where=(thread_id, seq))
            else:
                codec.check(key, value, where=(thread_id, seq))
                ev = codec.decode_event(codec.body_bytes(value, txn, where=(thread_id, seq)), where=(thread_id, seq))
            out.append((seq, ev, spawned))
        elif spawned:
            out.append((seq, None, spawned))


def unapply_links(tables: Tables, thread_id: str, tk: bytes, seq: int, event: Any, spawned: Iterable[str],
                  scope: str | None = None) -> None:
    """Remove what :func:`apply_links` added for one event (thread deletion)."""
    for ordinal, lk in outgoing(seq, event):
        target = lk.thread_id
        tables.delete("links_in", link_key(target, lk.relation, tk, ordinal, scope))
        if lk.relation == SPAWNED_FROM:
            _drop_child(tables, tkey(target, scope), tk, CHILD_LINK)
    for child in spawned:
        _drop_child(tables, tk, tkey(child, scope), CHILD_SPAWN)


def drop_child_everywhere(txn: WriteTxn, child_tk: bytes) -> None:
    """A thread being deleted is nobody's child any more: remove the ``children`` rows
    of the parents whose spawn events name it (found by its ``spawner`` rows). Its
    own ``spawned_from`` links go with its events (:func:`unapply_links`)."""
    prefix = SPAWNER_PREFIX + child_tk
    keys = [bytes(k) for k, _ in txn.range("proj", prefix, prefix + b"\xff" * (TKEY_SIZE + 1))]
    for k in keys:
        txn.delete("children", k[len(SPAWNER_PREFIX) + TKEY_SIZE:] + child_tk)
        txn.delete("proj", k)


def _set_child(tables: Tables, parent_tk: bytes, child_tk: bytes, child_id: str, flag: int) -> None:
    key = parent_tk + child_tk
    old = tables.get("children", key)
    flags = flag
    if old is not None:
        was, had = _child_dec.decode(old)
        child_id, flags = child_spelling(was, had, child_id, flag), had | flag
    tables.put("children", key, _enc.encode((child_id, flags)))
    if flag == CHILD_SPAWN:
        tables.put("proj", SPAWNER_PREFIX + child_tk + parent_tk, b"")


def _drop_child(tables: Tables, parent_tk: bytes, child_tk: bytes, flag: int) -> None:
    key = parent_tk + child_tk
    if flag == CHILD_SPAWN:
        tables.delete("proj", SPAWNER_PREFIX + child_tk + parent_tk)
    old = tables.get("children", key)
    if old is None:
        return
    child, flags = _child_dec.decode(old)
    flags &= ~flag
    if flags:
        tables.put("children", key, _enc.encode((child, flags)))
    else:
        tables.delete("children", key)


def decode_state(raw: bytes | None) -> ThreadState:
    return _state_dec.decode(raw) if raw is not None else ThreadState()


def encode_state(st: ThreadState) -> bytes:
    return _enc.encode(st)


def load_state(tables: Tables | ReadTxn, tk: bytes) -> ThreadState:
    return decode_state(tables.get("proj", STATE_PREFIX + tk))


def save_state(tables: Tables, tk: bytes, st: ThreadState) -> None:
    tables.put("proj", STATE_PREFIX + tk, encode_state(st))

