"""The reference backend: the contract in plain Python (dicts and lists, one lock).

It is the model the differential test checks LMDB against, so it favours being
obviously right over being fast: every append takes the lock, checks, then
writes; nothing is cached; projections are recomputed the straightforward way.
It also shows the contract is not shaped after LMDB's tables. ``Store("memory:")``
opens one (handy in users' tests); its content lives as long as the process.
"""

from __future__ import annotations

import bisect
import copy
import itertools
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, Final, TypeVar

import msgspec

from tplog.backends.common import (
    CHILD_LINK,
    CHILD_SPAWN,
    SPAWNED_FROM,
    VERSIONS,
    advance,
    apply_fork,
    check_append,
    check_collision,
    check_cursor,
    check_deletable,
    check_expected,
    check_fork_parent,
    check_no_forks,
    check_threads_page,
    check_tombstone,
    child_spelling,
    fold_item,
    inherited,
    outgoing,
    own_seqs,
    retry_refs,
    retry_result,
    thread_key,
    tombstone_taken,
    with_prefix,
)
from tplog.backends.contract import (
    Append,
    AppendResult,
    Cursor,
    Direction,
    Handle,
    Inherited,
    RebuildReport,
    ThreadAppend,
    ThreadHead,
    ThreadPage,
    Tracking,
    VerifyReport,
)
from tplog.backends.files import backup_dir, create_file
from tplog.backends.memory_backup import (
    BACKUP_FILE,
    BACKUP_FORMAT,
    BackupEvent,
    BackupRows,
    BackupStart,
    BackupThread,
    backup_line,
    decodes,
)
from tplog.codec import Codec, Encoded, Limits
from tplog.errors import (
    InvalidInputError,
    NotFoundError,
    RebuildInProgressError,
    StoreClosedError,
    TplogError,
)
from tplog.events import (
    KIND_CODE,
    RecordedEvent,
    ThreadDeleted,
    ThreadStarted,
)
from tplog.lifecycle import ThreadFilter, matches
from tplog.projections.fold import Item, ThreadState, feed, item_of

__all__ = ["BACKUP_FILE", "BACKUP_FORMAT", "MemoryRecorder"]

T = TypeVar("T")
_codec = Codec()


class _Stored(msgspec.Struct):
    """One stored event: what a read returns, plus what the projections need."""

    seq: int
    position: int
    event_id: str
    recorded_at: int
    kind: int
    facts: Any
    event: Any
    size: int


class _Thread:
    def __init__(self, head: ThreadHead) -> None:
        self.head = head
        self.events: list[_Stored] = []


class _Held:
    def __init__(self, locks: set[str], guard: threading.Condition, name: str) -> None:
        self.locks, self.guard, self.name = locks, guard, name

    def release(self) -> None:
        with self.guard:
            self.locks.discard(self.name)


def _done(fn: Callable[[], T]) -> Future[T]:
    fut: Future[T] = Future()
    try:
        fut.set_result(fn())
    except TplogError as exc:
        fut.set_exception(exc)
    return fut


class MemoryRecorder:
    """The reference :class:`~tplog.backends.contract.Recorder`, in memory.

    ``logs``: how many ordered logs (1 by default, as LMDB; more shows what a
    catch-up reader sees from a sharded backend: a thread's log is a fixed
    function of its key, positions are gap-free per log). ``clock``: nanoseconds
    since the epoch for heads' times (tests pass a counter so that two backends
    order their listings the same way)."""

    submits_in_order = True  # each submission is applied before submit returns (tplog.pipeline relies on it)

    def __init__(self, *, clock: Callable[[], int] = time.time_ns, limits: Limits | None = None,
                 logs: int = 1) -> None:
        if isinstance(logs, bool) or not isinstance(logs, int) or logs < 1:
            raise InvalidInputError(f"logs must be an int ≥ 1, not {logs!r}")
        self.logs = logs
        self.codec = Codec(limits)
        self._clock = clock
        self._lock = threading.Condition(threading.Lock())
        self._threads: dict[bytes, _Thread] = {}
        self._ids: dict[tuple[str | None, str], tuple[bytes, int, int]] = {}  # (scope, id) → (tk, seq, pos)
        # Per log: (position, tk, seq) in position order, and the last position handed out.
        self._logs: list[list[tuple[int, bytes, int]]] = [[] for _ in range(logs)]
        self._last = [0] * logs
        self._links: list[tuple[bytes, bytes, bytes, int, str]] = []  # (target tk, relation, source tk, seq) + ids
        self._children: dict[tuple[bytes, bytes], list[Any]] = {}  # (parent tk, child tk) → [child id, flags]
        self._states: dict[bytes, ThreadState] = {}
        self._tracking: dict[str, tuple[str, int, Cursor]] = {
            name: ("live", v, (0,) * logs) for name, v in VERSIONS.items()}
        self._locks: set[str] = set()
        self._closed = False

    # ------------------------------------------------------------------ writes

    def gate(self) -> None:
        pass

    def submit(self, append: Append, *, lead: bool = True) -> Handle[list[AppendResult]]:
        return _done(lambda: self._append(append))

    def _append(self, append: Append) -> list[AppendResult]:
        check_append(append)
        with self._lock:
            self._check_open()
            # Plan every part against the current state, write only if all pass.
            out: list[AppendResult | None] = []
            plans: list[tuple[bytes, ThreadHead, list[Encoded], Any]] = []
            for part in append:
                tk = thread_key(part.thread_id, part.scope)
                t = self._threads.get(tk)
                check_collision(part.thread_id, None if t is None else t.head)
                dup = self._duplicate(part.thread_id, tk, part.scope, part.events)
                if dup is not None:
                    out.append(dup)
                    continue
                head = t.head if t is not None else ThreadHead(thread_id=part.thread_id, scope=part.scope)
                check_expected(part.thread_id, head, part.expected)
                if part.fork is not None:
                    pt = self._threads.get(thread_key(part.fork.parent, part.scope))
                    check_fork_parent(part.fork, None if pt is None else pt.head)
                stored = self._history(t, part.scope) if t is not None and part.check_rules else []
                new_head = advance(part.thread_id, head, part.events, stored if part.check_rules else None)
                plans.append((tk, new_head, part.events, part))
                out.append(None)
            results = iter([self._write(tk, h, p) for tk, h, _, p in plans])
            final = [r if r is not None else next(results) for r in out]
            self._lock.notify_all()
            return final

    def _duplicate(self, thread_id: str, tk: bytes, scope: str | None, events: list[Encoded]) -> AppendResult | None:
        refs = retry_refs(thread_id, tk, events, [self._ids.get((scope, e.event_id)) for e in events])
        return None if refs is None else retry_result(thread_id, events, refs)

    def _write(self, tk: bytes, head: ThreadHead, part: ThreadAppend) -> AppendResult:
        # Results name the thread as this append spelled it; link rows as its head does (its first
        # spelling), which is what a rebuild derives.
        events, scope, name, own = part.events, part.scope, part.thread_id, head.thread_id
        t = self._threads.get(tk)
        if t is None:
            t = self._threads[tk] = _Thread(head)
        seq0 = head.version - len(events) + 1
        log = self._log_of(tk)
        first = self._last[log] + 1
        live_links = self._tracking["links"][0] == "live"
        live_state = self._tracking["state"][0] == "live"
        for i, enc in enumerate(events):
            s = self._store_event(t, tk, scope, enc, seq0 + i)
            head.stored_bytes += s.size
            if live_links:
                self._index_links(tk, own, scope, s)
            if live_state:
                feed(self._states.setdefault(tk, ThreadState()), item_of(s.seq, s.kind, s.facts, s.event))
        if live_links and part.fork is not None:  # the prefix's rows, as the facade read them
            for seq, ev, spawned in part.fork.inherited:
                self._index(tk, own, scope, seq, ev, spawned)
        if part.fork is not None:
            head = apply_fork(head, part.fork)
        now = self._clock()
        head.last_position = self._last[log]
        if head.created_ns == 0:
            head.created_ns = now
        head.updated_ns = now
        t.head = head
        return AppendResult(thread_id=name, first_seq=seq0, last_seq=head.version, first_position=first,
                            last_position=self._last[log], event_ids=[e.event_id for e in events])

    def _history(self, t: _Thread, scope: str | None) -> list[Any]:
        """The thread's events as a copy would hold them: a fork's prefix from its parent."""
        def parent(fork_of: str) -> list[Any] | None:
            p = self._threads.get(thread_key(fork_of, scope))
            return None if p is None else self._history(p, scope)

        return with_prefix(t.head, [x.event for x in t.events], parent)

    def _forks_of(self, tk: bytes, scope: str | None) -> list[str]:
        """The live forks that read this thread's events."""
        return [t.head.thread_id for t in self._threads.values()
                if t.head.fork_of is not None and t.head.status == "active" and t.head.scope == scope
                and thread_key(t.head.fork_of, scope) == tk]

    def _log_of(self, tk: bytes) -> int:
        return int.from_bytes(tk[:4], "big") % self.logs

    def _store_event(self, t: _Thread, tk: bytes, scope: str | None, enc: Encoded, seq: int) -> _Stored:
        log = self._log_of(tk)
        self._last[log] += 1
        pos = self._last[log]
        hdr = _codec.header(enc.finish(b""))
        # An independent copy, decoded as a reader of stored bytes would decode it.
        event = _codec.decode_event(_codec.encode_body(enc.event))
        s = _Stored(seq, pos, enc.event_id, hdr.recorded_at, enc.kind, enc.facts, event,
                    14 + len(enc.head_and_body))
        t.events.append(s)
        self._ids[(scope, enc.event_id)] = (tk, seq, pos)
        self._logs[log].append((pos, tk, seq))
        return s

    def _index_links(self, tk: bytes, thread_id: str, scope: str | None, s: _Stored) -> None:
        self._index(tk, thread_id, scope, s.seq, s.event, s.facts.spawned if s.facts is not None else ())
        if s.seq == 1 and isinstance(s.event, ThreadStarted) and tk in self._threads:
            for seq, ev, spawned in self._inherited(self._threads[tk].head, scope):
                self._index(tk, thread_id, scope, seq, ev, spawned)

    def _inherited(self, head: ThreadHead, scope: str | None) -> list[Inherited]:
        """What a live fork's prefix indexes (none for another thread), from its parent's events."""
        if head.fork_of is None or head.status != "active":
            return []
        p = self._threads.get(thread_key(head.fork_of, scope))
        return inherited(self._history(p, scope), head.fork_at) if p is not None else []

    def _index(self, tk: bytes, thread_id: str, scope: str | None, seq: int, event: Any,
               spawned: Sequence[str]) -> None:
        for ordinal, lk in outgoing(seq, event):
            ttk = thread_key(lk.thread_id, scope)
            self._links.append((ttk, lk.relation.encode(), tk, ordinal, thread_id))
            if lk.relation == SPAWNED_FROM:
                self._set_child(ttk, tk, thread_id, CHILD_LINK)
        for child in spawned:
            ck = thread_key(child, scope)
            t = self._threads.get(ck)
            if t is None or t.head.status != "deleted":  # a deleted thread is nobody's child
                self._set_child(tk, ck, child, CHILD_SPAWN)

    def _set_child(self, parent: bytes, child: bytes, child_id: str, flag: int) -> None:
        row = self._children.get((parent, child))
        if row is None:
            self._children[(parent, child)] = [child_id, flag]
        else:
            row[0], row[1] = child_spelling(row[0], row[1], child_id, flag), row[1] | flag

    def delete_thread(self, thread_id: str, tombstone: Encoded, *, scope: str | None = None) -> Handle[AppendResult]:
        return _done(lambda: self._delete(thread_id, tombstone, scope))

    def _delete(self, thread_id: str, tombstone: Encoded, scope: str | None) -> AppendResult:
        check_tombstone(thread_id, tombstone)
        tk = thread_key(thread_id, scope)
        with self._lock:
            self._check_open()
            t = self._threads.get(tk)
            check_deletable(thread_id, None if t is None else t.head)
            assert t is not None
            if (scope, tombstone.event_id) in self._ids:
                raise tombstone_taken(tombstone.event_id)
            check_no_forks(thread_id, self._forks_of(tk, scope))
            gone = {s.position for s in t.events}
            for s in t.events:
                del self._ids[(scope, s.event_id)]
            log = self._logs[self._log_of(tk)]
            log[:] = [e for e in log if e[0] not in gone]
            self._links = [row for row in self._links if row[2] != tk]
            for key in list(self._children):
                row = self._children[key]
                if key[1] == tk:  # a deleted thread is nobody's child
                    row[1] = 0
                if key[0] == tk:  # the parent's spawn facts too
                    row[1] &= ~2
                if not row[1]:
                    del self._children[key]
            self._states.pop(tk, None)
            head = t.head
            t.events = []
            s = self._store_event(t, tk, scope, tombstone, head.version + 1)
            t.head = msgspec.structs.replace(
                head, version=s.seq, last_position=s.position, status="deleted", updated_ns=self._clock(),
                open_turn_agent=None, open_turn_seq=0, stored_bytes=0)
            self._lock.notify_all()
            return AppendResult(thread_id=thread_id, first_seq=s.seq, last_seq=s.seq, first_position=s.position,
                                last_position=s.position, event_ids=[tombstone.event_id])

    # ------------------------------------------------------------------ reads

    def head(self, thread_id: str, *, scope: str | None = None) -> ThreadHead | None:
        with self._lock:
            self._check_open()
            t = self._threads.get(thread_key(thread_id, scope))
            return None if t is None else msgspec.structs.replace(t.head)

    def read_thread(self, thread_id: str, *, scope: str | None = None, after: int | None = None,
                    limit: int | None = None, direction: Direction = "forward") -> list[RecordedEvent]:
        with self._lock:
            self._check_open()
            t = self._threads.get(thread_key(thread_id, scope))
            if t is None:
                raise NotFoundError(f"thread {thread_id} does not exist")
            if direction == "forward":
                rows = [s for s in t.events if after is None or s.seq > after]
            else:
                rows = [s for s in reversed(t.events) if after is None or s.seq < after]
            rows = rows if limit is None else rows[:limit]
            return [_recorded(t.head.thread_id, s) for s in rows]

    def log_of(self, thread_id: str, *, scope: str | None = None) -> int:
        return self._log_of(thread_key(thread_id, scope))

    def read_log(self, log: int, *, after: int = 0, limit: int | None = None,
                 scope: str | None = None) -> list[RecordedEvent]:
        if isinstance(log, bool) or not isinstance(log, int) or not 0 <= log < self.logs:
            raise InvalidInputError(f"log {log!r} does not exist: this store keeps {self.logs} log(s)")
        with self._lock:
            self._check_open()
            out: list[RecordedEvent] = []
            entries = self._logs[log]
            for _pos, tk, seq in entries[bisect.bisect_right(entries, (after, b"\xff" * 17, 0)):]:
                if limit is not None and len(out) >= limit:
                    break
                t = self._threads[tk]
                if t.head.scope != scope:
                    continue
                s = next(s for s in t.events if s.seq == seq)
                out.append(_recorded(t.head.thread_id, s))
            return out

    def positions(self) -> Cursor:
        with self._lock:
            return tuple(self._last)

    def wait(self, cursor: Cursor, timeout: float | None = None) -> Cursor:
        check_cursor(cursor, self.logs)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while all(a <= b for a, b in zip(self._last, cursor, strict=False)) and not self._closed:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._lock.wait(left)
            return tuple(self._last)

    def wait_for_position(self, position: int, timeout: float | None = None, *, poll: float = 0.05) -> int:
        return self.wait((position - 1,), timeout)[0]  # woken by every append: no poll

    def threads(self, *, scope: str | None = None, after: str | None = None, limit: int = 50,
                include_deleted: bool = False, where: ThreadFilter | None = None) -> ThreadPage:
        raw = check_threads_page(after, limit)
        bound = None if raw is None else (int.from_bytes(raw[:8], "big"), raw[8:])
        with self._lock:
            self._check_open()
            rows = sorted(((t.head.updated_ns, tk, t.head) for tk, t in self._threads.items()
                           if t.head.scope == scope), key=lambda r: (r[0], r[1]), reverse=True)
            out: list[ThreadHead] = []
            last: tuple[int, bytes] | None = None
            more = False
            for upd, tk, h in rows:
                if bound is not None and (upd, tk) >= bound:
                    continue
                if h.status == "deleted" and not include_deleted:
                    continue
                if where is not None and not (matches(where, h) and (
                        where.has_children is None or where.has_children == self._has_children(tk))):
                    continue
                if len(out) >= limit:
                    more = True
                    break
                out.append(msgspec.structs.replace(h))
                last = (upd, tk)
            cursor = (last[0].to_bytes(8, "big") + last[1]).hex() if more and last is not None else None
            return ThreadPage(out, cursor)

    def _has_children(self, tk: bytes) -> bool:
        return any(p == tk for p, _ in self._children)

    def incoming(self, thread_id: str, *, scope: str | None = None, relation: str | None = None,
                 after: tuple[str, str] | None = None, limit: int | None = None) -> list[tuple[str, str]]:
        ttk = thread_key(thread_id, scope)
        with self._lock:
            self._check_open()
            self._require_live("links")
            rows = sorted(r for r in self._links if r[0] == ttk
                          and (relation is None or r[1] == relation.encode()))
            if not rows:
                self._require_known(thread_id, ttk)
            if after is not None:
                bound = (after[1].encode(), thread_key(after[0], scope))
                rows = [r for r in rows if (r[1], r[2]) > bound]
            if limit is not None and len(rows) > limit:
                last = rows[limit - 1]
                rows = rows[:limit] + list(itertools.takewhile(
                    lambda r: (r[1], r[2]) == (last[1], last[2]), rows[limit:]))
            return [(r[4], r[1].decode()) for r in rows]

    def children(self, thread_id: str, *, scope: str | None = None, after: str | None = None,
                 limit: int | None = None) -> list[str]:
        ptk = thread_key(thread_id, scope)
        with self._lock:
            self._check_open()
            self._require_live("links")
            rows = sorted((ck, row[0]) for (pk, ck), row in self._children.items() if pk == ptk)
            if after is not None:
                atk = thread_key(after, scope)
                rows = [r for r in rows if r[0] > atk]
            if not rows:
                self._require_known(thread_id, ptk)
            return [cid for _, cid in (rows if limit is None else rows[:limit])]

    def has_spawned(self, thread_id: str, *, scope: str | None = None) -> bool:
        """Whether the thread's events (a fork's inherited ones too) name a spawned thread."""
        tk = thread_key(thread_id, scope)
        with self._lock:
            self._check_open()
            self._require_live("links")
            return any(pk == tk and row[1] & CHILD_SPAWN for (pk, _), row in self._children.items())

    def thread_state(self, thread_id: str, *, scope: str | None = None) -> ThreadState | None:
        with self._lock:
            self._check_open()
            if thread_key(thread_id, scope) not in self._threads:
                raise NotFoundError(f"thread {thread_id} does not exist")
            if self._tracking["state"][0] != "live" or self._threads[thread_key(thread_id, scope)].head.fork_of:
                return None  # stale; or a fork, whose state the facade folds with its parent's prefix
            return copy.deepcopy(self._states.get(thread_key(thread_id, scope), ThreadState()))

    def thread_events(self, thread_id: str, *, scope: str | None = None,
                      after: int = 0) -> tuple[ThreadHead, list[Any]]:
        with self._lock:
            self._check_open()
            t = self._threads.get(thread_key(thread_id, scope))
            if t is None:
                raise NotFoundError(f"thread {thread_id} does not exist")
            if t.head.status != "active" or after > t.head.version:
                after = 0
            return msgspec.structs.replace(t.head), [s.event for s in t.events if s.seq > after]

    def items(self, thread_id: str, *, scope: str | None = None) -> list[Item]:
        with self._lock:
            self._check_open()
            t = self._threads.get(thread_key(thread_id, scope))
            if t is None:
                raise NotFoundError(f"thread {thread_id} does not exist")
            return [fold_item(s.seq, s.kind, s.facts, s.event) for s in t.events]

    def descendants(self, thread_id: str, *, scope: str | None = None,
                    max_depth: int | None = None) -> list[tuple[str, int]]:
        root = thread_key(thread_id, scope)
        seen = {root}
        out: list[tuple[str, int]] = []
        frontier = [root]
        depth = 0
        with self._lock:
            self._check_open()
            while frontier and (max_depth is None or depth < max_depth):
                self._require_live("links")
                depth += 1
                nxt: list[bytes] = []
                for tk in frontier:
                    rows = sorted((ck, row[0]) for (pk, ck), row in self._children.items() if pk == tk)
                    if not rows and depth == 1:  # the root: is it known at all?
                        self._require_known(thread_id, root)
                    for ck, child in rows:
                        if ck not in seen:
                            seen.add(ck)
                            out.append((child, depth))
                            nxt.append(ck)
                frontier = nxt
        return out

    def _require_known(self, thread_id: str, tk: bytes) -> None:
        """An empty links answer for a thread never stored, that no stored thread links
        to or names as spawned, is ``NotFoundError`` (with the lock held)."""
        if tk in self._threads or any(r[0] == tk for r in self._links) or any(
                pk == tk or (ck == tk and row[1] & CHILD_SPAWN) for (pk, ck), row in self._children.items()):
            return
        raise NotFoundError(f"thread {thread_id} does not exist, and no stored thread links to it")

    def links(self, thread_id: str, *, scope: str | None = None) -> list[Any]:
        with self._lock:
            self._check_open()
            t = self._threads.get(thread_key(thread_id, scope))
            if t is None:
                raise NotFoundError(f"thread {thread_id} does not exist")
            return [lk for s in t.events for _, lk in outgoing(s.seq, s.event)]

    def _require_live(self, name: str) -> None:
        from tplog.errors import RebuildRequiredError

        if self._tracking[name][0] != "live":
            raise RebuildRequiredError(f"memory: the {name} projection is stale; run rebuild({name!r})")

    # ------------------------------------------------------------------ projections

    def tracking(self) -> list[Tracking]:
        with self._lock:
            return [Tracking(name=n, version=v, code_version=VERSIONS[n], status=st,
                             position=tuple(self._last) if st == "live" else pos)
                    for n, (st, v, pos) in self._tracking.items()]

    def rebuild(self, names: Sequence[str], *, verify: bool = False, force: bool = False, chunk: int = 20_000,
                progress: Callable[[int, int], None] | None = None) -> list[RebuildReport]:
        for n in names:
            if n not in VERSIONS:
                raise InvalidInputError(f"unknown projection {n!r}; known: {', '.join(VERSIONS)}")
        for n in names:
            if n in self._locks and not force:
                raise RebuildInProgressError(f"memory: a rebuild of {n} is in progress")
        t0 = time.monotonic()
        with self._lock:
            self._check_open()
            links: list[tuple[bytes, bytes, bytes, int, str]] = []
            children: dict[tuple[bytes, bytes], list[Any]] = {}
            states: dict[bytes, ThreadState] = {}
            saved = self._links, self._children
            self._links, self._children = links, children
            try:
                for _pos, tk, seq in (e for entries in self._logs for e in entries):
                    t = self._threads[tk]
                    s = next(s for s in t.events if s.seq == seq)
                    if s.kind != _K_DELETED:
                        self._index_links(tk, t.head.thread_id, t.head.scope, s)
                        feed(states.setdefault(tk, ThreadState()), item_of(s.seq, s.kind, s.facts, s.event))
            finally:
                self._links, self._children = saved
            events = sum(len(entries) for entries in self._logs)
            reports = []
            for n in names:
                problems: list[str] = []
                if verify:
                    if n == "links" and (sorted(links) != sorted(self._links) or children != self._children):
                        problems.append("links: the live index differs from a rebuild")
                    if n == "state" and {k: v for k, v in states.items() if v != ThreadState()} != {
                            k: v for k, v in self._states.items() if v != ThreadState()}:
                        problems.append("state: the live rows differ from a rebuild")
                else:
                    if n == "links":
                        self._links, self._children = links, children
                    else:
                        self._states = states
                    self._tracking[n] = ("live", VERSIONS[n], tuple(self._last))
                reports.append(RebuildReport(projection=n, verify=verify, events=events,
                                             seconds=time.monotonic() - t0, position=sum(self._last),
                                             differences=problems))
            if progress is not None:
                progress(events, events)
            return reports

    # ------------------------------------------------------------------ maintenance

    def try_lock(self, name: str) -> _Held | None:
        if not name or not all(c.isascii() and (c.isalnum() or c in "-_") for c in name):
            raise InvalidInputError(f"lock name must be ASCII letters, digits, '-' or '_', not {name!r}")
        with self._lock:
            if name in self._locks:
                return None
            self._locks.add(name)
            return _Held(self._locks, self._lock, name)

    def backup(self, dest: str, *, compact: bool = True) -> None:
        """Everything the store holds, as JSON lines in ``dest/memory.jsonl`` (0600; ``dest`` new or empty, see
        :data:`BACKUP_FILE`), taken under the lock: ``Store("memory:" + dest)``
        (:meth:`restore`) opens a memory store holding exactly the same."""
        backup_dir(dest)
        path = os.path.join(dest, BACKUP_FILE)
        with self._lock:
            self._check_open()
            lines: list[Any] = [BackupStart(format=BACKUP_FORMAT, logs=self.logs, last=list(self._last),
                                             tracking={n: (st, v, list(pos)) for n, (st, v, pos)
                                                       in self._tracking.items()})]
            lines += [BackupThread(key=tk, head=t.head, events=[
                BackupEvent(e.seq, e.position, e.event_id, e.recorded_at, e.kind, e.facts,
                             _codec.encode_body(e.event), e.size) for e in t.events])
                for tk, t in self._threads.items()]
            lines.append(BackupRows(links=list(self._links),
                                     children=[(pk, ck, row[0], row[1]) for (pk, ck), row in self._children.items()],
                                     states=list(self._states.items())))
            data = b"".join(msgspec.json.encode(line) + b"\n" for line in lines)
        with open(create_file(path + ".tmp"), "wb") as f:
            f.write(data)
        os.replace(path + ".tmp", path)

    @classmethod
    def restore(cls, source: str, *, clock: Callable[[], int] = time.time_ns,
                limits: Limits | None = None) -> MemoryRecorder:
        """A memory store holding what :meth:`backup` wrote into the directory ``source``
        (a copy: what is appended to it stays in memory)."""
        path = os.path.join(source, BACKUP_FILE)
        try:
            with open(path, "rb") as f:
                raw = f.read().splitlines()
        except OSError as exc:
            raise InvalidInputError(f"memory:{source}: no memory backup to open ({exc})") from exc
        try:
            lines = [backup_line.decode(line) for line in raw]
        except msgspec.ValidationError as exc:
            n = next(i for i, line in enumerate(raw, 1) if not decodes(line))
            raise InvalidInputError(f"{path}, line {n}: not a tplog memory backup line ({exc})") from exc
        except msgspec.DecodeError as exc:
            n = next(i for i, line in enumerate(raw, 1) if not decodes(line))
            raise InvalidInputError(f"{path}, line {n}: not JSON ({exc})") from exc
        if not lines or not isinstance(lines[0], BackupStart) or lines[0].format != BACKUP_FORMAT:
            raise InvalidInputError(f"{path}, line 1: not a {BACKUP_FORMAT} backup")
        if not isinstance(lines[-1], BackupRows) or len(lines) < 2:
            raise InvalidInputError(f"{path}: ends before its projection rows (a truncated backup?)")
        start, rows = lines[0], lines[-1]
        rec = cls(clock=clock, limits=limits, logs=start.logs)
        rec._last = list(start.last)
        # A projection folded by another version of its code is stale here (as LMDB marks it on open).
        rec._tracking = {n: ("stale" if v != VERSIONS.get(n) else st, v, tuple(pos))
                         for n, (st, v, pos) in start.tracking.items()}
        for n, line in enumerate(lines[1:-1], 2):
            if not isinstance(line, BackupThread):
                raise InvalidInputError(f"{path}, line {n}: a thread was expected here")
            t = rec._threads[line.key] = _Thread(line.head)
            log = rec._log_of(line.key)
            for e in line.events:
                event = _codec.decode_event(e.body, where=(line.head.thread_id, e.seq))
                t.events.append(_Stored(e.seq, e.position, e.event_id, e.recorded_at, e.kind, e.facts, event,
                                        e.size))
                rec._ids[(line.head.scope, e.event_id)] = (line.key, e.seq, e.position)
                rec._logs[log].append((e.position, line.key, e.seq))
        for entries in rec._logs:
            entries.sort()
        rec._links = list(rows.links)
        rec._children = {(pk, ck): [cid, flags] for pk, ck, cid, flags in rows.children}
        rec._states = dict(rows.states)
        return rec

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"backend": "memory", "threads": len(self._threads),
                    "events": sum(len(t.events) for t in self._threads.values()), "last_position": sum(self._last),
                    "logs": self.logs}

    def verify(self, *, projections: bool = True) -> VerifyReport:
        problems: list[str] = []
        with self._lock:
            for _tk, t in self._threads.items():
                seqs = [s.seq for s in t.events]
                want = own_seqs(t.head)
                if seqs != want:
                    problems.append(f"thread {t.head.thread_id}: seqs {seqs[:5]}… do not match its head")
        if projections:
            for report in self.rebuild(list(VERSIONS), verify=True):
                problems += report.differences
        with self._lock:
            return VerifyReport(events=sum(len(t.events) for t in self._threads.values()),
                                threads=len(self._threads), problems=problems)

    def sync(self) -> None:
        pass

    def train_dictionary(self, *, samples: int = 2000, size: int = 64 << 10) -> int:
        return 0  # nothing is compressed in memory

    def check_open(self) -> None:
        self._check_open()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify_all()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError("memory: cannot use the store, as it has been closed")


_K_DELETED: Final = KIND_CODE[ThreadDeleted]
def _recorded(thread_id: str, s: _Stored) -> RecordedEvent:
    return RecordedEvent(thread_id=thread_id, seq=s.seq, position=s.position, event_id=s.event_id,
                         recorded_at=s.recorded_at, event=s.event)
