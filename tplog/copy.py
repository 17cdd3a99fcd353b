"""Copy every thread of one store into another, between any two backends (``tplog copy``).

What is copied: every thread of the source's key space (the unscoped store, or one
scope of a ``Store.scoped`` view) with every event, under its original event id and
``recorded_at``: links and metadata are events, so they come along, and the
destination's projections (heads, links, children, state) are written by its own
appends. Deleted threads are copied as tombstones, so that their ids stay taken in
the destination too (the point of a tombstone): the source keeps only the
``ThreadDeleted`` event, so the destination gets a ``ThreadStarted`` (from the
source head's creation time, under an id derived from the tombstone's) and then the
tombstone, under its original id. Not copied: zstd dictionaries (the destination
trains its own) and other scopes.

How: the source's logs are read in position order, a page at a time; each page's
events, grouped by thread, become one atomic append of several threads (the
tombstones are deletions of their own). Resumable: every part is appended with the
destination thread's version as ``expected_version`` and only the events past it,
so a copy interrupted anywhere (even killed) and run again goes on where it stopped
and writes nothing twice; the original event ids make a lost acknowledgement safe
too. Before anything is written, every source thread already in the destination is
checked to be a prefix of the source's (same event ids at its first and last seq):
otherwise :class:`CopyConflictError` names the threads and nothing is written. A thread
deleted in the source left nothing to compare (its events and ids are gone): a live
destination thread under its id is a conflict too, unless it is only the ThreadStarted
an interrupted copy of that tombstone wrote (its id says so).

At the end (``verify=True``) every source thread's export is hashed on both sides
(:func:`tplog.thread_hash`, every event included) and the mismatches are reported.
Copy a source nobody writes to meanwhile: events appended during the copy are copied
as far as the copy reads, and a thread written after that shows as a mismatch (running
the copy again brings it over).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Final

import msgspec

from tplog.backends.contract import ThreadAppend, ThreadHead
from tplog.errors import ConflictError, InvalidInputError, StorageError, ThreadDeletedError
from tplog.events import RecordedEvent, ThreadDeleted, ThreadStarted
from tplog.fork import seed_of
from tplog.protocol.canonical import thread_hash
from tplog.store import NO_STREAM, Store

__all__ = ["CopyConflictError", "CopyReport", "Mismatch", "copy_store", "verify_copy"]

#: Events read per source page (and appended per destination transaction at most).
CHUNK: Final = 256
#: Where the ids of the ``ThreadStarted`` events that stand before copied tombstones come from.
_TOMBSTONE_START: Final = uuid.UUID("0c9f3b1e-6f0a-4f43-9d0e-7b7d2c1c0a51")

#: ``progress(phase, done, total)``: phase ``"copy"`` counts source log positions, ``"verify"`` threads.
Progress = Callable[[str, int, int], None]


class CopyConflictError(ConflictError):
    """Threads of the destination are not the source's (or a prefix of it): nothing was copied.
    ``threads`` lists ``(thread_id, why)``."""

    def __init__(self, message: str, threads: list[tuple[str, str]]) -> None:
        super().__init__(message)
        self.threads = threads


class Mismatch(msgspec.Struct, frozen=True):
    """A thread whose copy differs: the two hashes (or ``"deleted"`` / ``"missing"``)."""

    thread_id: str
    source: str
    dest: str


class CopyReport(msgspec.Struct, kw_only=True):
    """What a copy did. ``threads``: source threads (deleted ones included); ``events``:
    events written now (tombstones and their ``ThreadStarted`` included); ``skipped``:
    source events the destination already held (an earlier, interrupted copy);
    ``verified``: whether the hashes were compared; ``mismatches``: what differed."""

    threads: int = 0
    tombstones: int = 0
    events: int = 0
    skipped: int = 0
    seconds: float = 0.0
    verified: bool = False
    mismatches: list[Mismatch] = []

    @property
    def ok(self) -> bool:
        return not self.mismatches


def copy_store(src: Store, dest: Store, *, chunk: int = CHUNK, verify: bool = True, check_rules: bool = False,
               progress: Progress | None = None) -> CopyReport:
    """Copy every thread of ``src`` into ``dest`` (see the module's doc); returns a :class:`CopyReport`.

    ``check_rules``: apply the validation rules to the copied appends (off by default:
    the source already holds the events, and a store written with ``check_rules=False``
    must copy too; the order rules always apply). Raises :class:`CopyConflictError`
    before writing anything when the destination holds other content under a source
    thread's id."""
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise InvalidInputError(f"chunk must be an int ≥ 1, not {chunk!r}")
    t0 = time.monotonic()
    report = CopyReport()
    heads = list(_source_heads(src))
    report.threads = len(heads)
    _check_conflicts(src, dest, heads)
    _Copier(src, dest, chunk, check_rules, report, progress).run()
    if verify:
        report.mismatches = verify_copy(src, dest, heads, progress)
        report.verified = True
    report.seconds = time.monotonic() - t0
    return report


def _source_heads(src: Store) -> Iterator[ThreadHead]:
    cursor = None
    while True:
        page = src.threads(limit=500, after=cursor, include_deleted=True)
        yield from page.threads
        if page.cursor is None:
            return
        cursor = page.cursor


def _check_conflicts(src: Store, dest: Store, heads: list[ThreadHead]) -> None:
    bad: list[tuple[str, str]] = []
    for h in heads:
        d = dest.backend.head(h.thread_id, scope=dest.scope)
        if d is None or d.version == 0:
            continue
        tid = h.thread_id
        if h.status == "deleted":
            # The source kept only the tombstone (no events, no ids, no hash): the one live thread
            # provably ours is the ThreadStarted a tombstone copy writes first (its id derived from
            # the tombstone's). Anything else may be someone else's: deleting it would lose it.
            if d.status != "deleted" and not _tombstone_start_of(src, dest, tid, d.version):
                bad.append((tid, "deleted in the source, live in the destination with events of its own "
                                 "(delete it there to copy the deletion)"))
            continue
        if d.status == "deleted":
            bad.append((tid, "deleted in the destination"))
        elif d.version > h.version:
            bad.append((tid, f"the destination holds {d.version} events, the source {h.version}"))
        else:
            for seq in sorted({1, d.version}):
                mine = src.read(tid, after=seq - 1, limit=1)
                theirs = dest.read(tid, after=seq - 1, limit=1)
                if not mine or not theirs or mine[0].event_id != theirs[0].event_id:
                    bad.append((tid, f"seq {seq} holds another event in the destination"))
                    break
    if bad:
        listed = "; ".join(f"thread {t}: {why}" for t, why in bad[:10])
        more = f" (and {len(bad) - 10} more)" if len(bad) > 10 else ""
        raise CopyConflictError(
            f"the destination already holds {len(bad)} thread(s) of the source with other content: {listed}{more}; "
            "nothing was copied (copy into an empty store, or delete those threads from the destination)", bad)


def _tombstone_start_id(tombstone_id: str) -> str:
    return str(uuid.uuid5(_TOMBSTONE_START, tombstone_id))


def _tombstone_start_of(src: Store, dest: Store, tid: str, version: int) -> bool:
    """Whether the destination's ``tid`` is only the ThreadStarted a copy of the source's tombstone writes."""
    if version != 1:
        return False
    [tomb] = src.read(tid, direction="backward", limit=1)
    [first] = dest.read(tid, limit=1)
    return first.event_id == _tombstone_start_id(tomb.event_id)


class _Copier:
    def __init__(self, src: Store, dest: Store, chunk: int, check_rules: bool, report: CopyReport,
                 progress: Progress | None) -> None:
        self.src, self.dest, self.chunk, self.check_rules = src, dest, chunk, check_rules
        self.report, self.progress = report, progress
        self.versions: dict[str, int] = {}  # destination versions known (read once, then kept up to date)
        self.deleted: set[str] = set()

    def run(self) -> None:
        backend = self.src.backend
        ends = backend.positions()
        total, done = sum(ends), 0
        if self.progress is not None:
            self.progress("copy", 0, total)
        for log in range(backend.logs):
            after = 0
            while page := backend.read_log(log, after=after, limit=self.chunk, scope=self.src.scope):
                self._page(page)
                done += page[-1].position - after
                after = page[-1].position
                if self.progress is not None:
                    self.progress("copy", min(done, total), max(total, done))

    def _version(self, thread_id: str) -> int:
        v = self.versions.get(thread_id)
        if v is None:
            head = self.dest.backend.head(thread_id, scope=self.dest.scope)
            v = 0 if head is None else head.version
            if head is not None and head.status == "deleted":
                self.deleted.add(thread_id)
            self.versions[thread_id] = v
        return v

    def _page(self, page: list[RecordedEvent]) -> None:
        groups: dict[str, list[RecordedEvent]] = {}
        for e in page:
            if isinstance(e.event, ThreadDeleted):
                self._flush(groups)
                groups = {}
                self._tombstone(e)
            else:
                groups.setdefault(e.thread_id, []).append(e)
        self._flush(groups)

    def _flush(self, groups: dict[str, list[RecordedEvent]]) -> None:
        parts: list[ThreadAppend] = []
        codec = self.dest.codec
        for tid, events in groups.items():
            have = self._version(tid)
            todo = [e for e in events if e.seq > have]
            self.report.skipped += len(events) - len(todo)
            if todo and have == 0 and todo[0].seq == 1:
                head = self.src.backend.head(tid, scope=self.src.scope)
                if head is not None and head.fork_of is not None:
                    # A fork stores its ThreadStarted and what follows the fork point (its prefix is
                    # its parent's, copied before it): re-created as a fork, it shares it again.
                    self._submit(parts)
                    parts = []
                    self._fork(tid, todo[0], head.fork_of, head.fork_at)
                    todo = todo[1:]
                    have = self.versions[tid]
            if not todo:
                continue
            if tid in self.deleted or todo[0].seq != have + 1:
                raise StorageError(f"thread {tid}: the destination holds {have} events (deleted: "
                                   f"{tid in self.deleted}) but the source's next event is seq {todo[0].seq}; "
                                   "was the destination written while copying?")
            enc = [codec.encode(e.event, e.event_id, e.recorded_at) for e in todo]
            parts.append(ThreadAppend(thread_id=tid, events=enc, expected=have or NO_STREAM, scope=self.dest.scope,
                                      fresh_ids=False, check_rules=self.check_rules))
        self._submit(parts)

    def _submit(self, parts: list[ThreadAppend]) -> None:
        if not parts:
            return
        for res in self.dest.backend.submit(tuple(parts)).result():
            self.versions[res.thread_id] = res.last_seq
            if not res.duplicate:
                self.report.events += res.last_seq - res.first_seq + 1

    def _fork(self, tid: str, first: RecordedEvent, parent: str, at: int) -> None:
        if not isinstance(first.event, ThreadStarted):  # pragma: no cover - the order rules put it first
            raise StorageError(f"thread {tid}: seq 1 of the source is not ThreadStarted")
        seed = seed_of(self.dest, parent, at, first.event)
        part = ThreadAppend(thread_id=tid, events=[self.dest.codec.encode(first.event, first.event_id,
                                                                          first.recorded_at)],
                            expected=NO_STREAM, scope=self.dest.scope, fresh_ids=False, check_rules=False, fork=seed)
        [res] = self.dest.backend.submit((part,)).result()
        self.versions[tid] = res.last_seq
        if not res.duplicate:
            self.report.events += 1

    def _tombstone(self, e: RecordedEvent) -> None:
        tid = e.thread_id
        have = self._version(tid)
        if tid in self.deleted:
            self.report.skipped += 1
            return
        codec, scope = self.dest.codec, self.dest.scope
        if have == 0:
            head = self.src.backend.head(tid, scope=self.src.scope)
            created = 0 if head is None else head.created_ns
            start = ThreadStarted(thread_id=tid, created_at=_iso(created or e.recorded_at))
            eid = _tombstone_start_id(e.event_id)
            part = ThreadAppend(thread_id=tid, events=[codec.encode(start, eid, e.recorded_at)], expected=NO_STREAM,
                                scope=scope, fresh_ids=False, check_rules=False)
            self.dest.backend.submit((part,)).result()
            self.report.events += 1
        with contextlib.suppress(ThreadDeletedError):  # deleted meanwhile (our own, acknowledgement lost)
            self.dest.backend.delete_thread(tid, codec.encode(e.event, e.event_id, e.recorded_at),
                                            scope=scope).result()
        self.deleted.add(tid)
        self.report.events += 1
        self.report.tombstones += 1


def _iso(ns: int) -> str:
    dt = datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _digest(store: Store, thread_id: str) -> str:
    try:
        return thread_hash(store.export(thread_id), exclude_noncanonical=False)
    except ThreadDeletedError:
        return "deleted"
    except LookupError:
        return "missing"


def verify_copy(src: Store, dest: Store, heads: list[ThreadHead] | None = None,
                progress: Progress | None = None) -> list[Mismatch]:
    """Every source thread's export hash against the destination's (deleted: deleted on both sides)."""
    heads = list(_source_heads(src)) if heads is None else heads
    out: list[Mismatch] = []
    for i, h in enumerate(heads):
        a, b = _digest(src, h.thread_id), _digest(dest, h.thread_id)
        if a != b:
            out.append(Mismatch(h.thread_id, a, b))
        if progress is not None and (i % 50 == 0 or i + 1 == len(heads)):
            progress("verify", i + 1, len(heads))
    return out


def open_store(target: str, *, source: bool = False) -> Store:
    """The store ``tplog copy`` reads (``source``: it must exist; LMDB opens read-only) or writes
    (created if missing). ``memory:`` is refused: a process-local store is empty when opened."""
    if target == "memory:":
        raise InvalidInputError("memory: is a store inside one process: copy to or from it with tplog.copy.copy_store")
    if target.startswith(("postgresql://", "postgres://")):
        if source:
            try:
                from tplog.backends.postgres import PostgresRecorder
            except ImportError as exc:
                raise InvalidInputError(f"PostgreSQL stores need psycopg: pip install 'tplog[postgres]' ({exc})"
                                        ) from exc
            PostgresRecorder(target, create=False).close()  # a missing source schema is an error, not created
        return Store(target)
    path = target[len("lmdb://"):] if target.startswith("lmdb://") else target
    if source and not os.path.exists(os.path.join(path, "data.mdb")):
        raise InvalidInputError(f"{target}: no tplog store here")
    if os.path.exists(path) and not os.path.isdir(path):
        raise InvalidInputError(f"{target}: is a file, not a store directory")
    return Store(target, readonly=source, auto_dictionary=0 if source else 1000)
