"""The backend contract: what a storage engine must do for tplog (recorder level).

A backend stores encoded history events of threads and keeps, in the same
transaction as each append, what tplog answers from: thread heads, the event-id
index (idempotent retries), the ordered log(s), the link indexes (incoming,
children) and the per-thread ``state`` projection. Everything above it — argument
checks, encoding, scopes as a user-facing idea, folds into documents — lives in
the ``Store`` facade and is the same for every engine.

Shaped after eventsourcing's ``ApplicationRecorder`` / ``TrackingRecorder``, with
two differences that matter here:

- **Several ordered logs.** A backend keeps ``logs`` ordered logs (LMDB and the
  in-memory reference keep one; PostgreSQL/Citus may keep P). A thread belongs to
  exactly one log (:meth:`Recorder.log_of`); positions are gap-free at commit and
  strictly increasing *per log*, so a catch-up reader holds one position per log:
  a :data:`Cursor`.
- **Appends are submitted, not called.** :meth:`Recorder.submit` returns a
  future-like :class:`Handle` at once; the backend is free to join concurrent
  submissions into one transaction (group commit, one round trip) as long as
  each caller gets its own result or typed error. The sync API blocks on
  ``handle.result()``, the async API awaits ``asyncio.wrap_future(handle)``: one
  path for both.

Range vocabulary, the same for every read verb: ``after`` is the last item the
caller has seen (exclusive; ``None`` = from the start in the reading direction),
``limit`` caps the page (``None`` = no cap), ``direction`` is ``"forward"`` or
``"backward"`` where a verb reads both ways.

Never imports ``lmdb`` (nor any engine's driver): engines implement this, not
the other way round.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Final, Literal, Protocol, TypeVar, Union, runtime_checkable

import msgspec

from tplog.codec import Codec, Encoded, facts_of
from tplog.errors import InvalidEventError, InvalidInputError
from tplog.events import (
    KIND_CODE,
    AgentRegistered,
    AgentTurnCompleted,
    AgentTurnInterrupted,
    AgentTurnStarted,
    LinkAdded,
    MessageRecorded,
    RecordedEvent,
    ThreadDeleted,
    ThreadInfoChanged,
    ThreadStarted,
    UserTurnSubmitted,
)
from tplog.lifecycle import ThreadFilter, note
from tplog.projections.fold import Item, ThreadState
from tplog.protocol import model as m
from tplog.protocol.rules import EventCheck, Tracker, advance_rules, check_event, exported_calls, rules_from_log

__all__ = [
    "advance",
    "ANY",
    "EXISTS",
    "NO_STREAM",
    "Append",
    "AppendResult",
    "DECLARED",
    "Cursor",
    "Direction",
    "ExpectedVersion",
    "FOLD_KINDS",
    "ForkSeed",
    "Inherited",
    "Handle",
    "Held",
    "PROJECTIONS",
    "VERSIONS",
    "RebuildReport",
    "Recorder",
    "ThreadAppend",
    "ThreadHead",
    "ThreadPage",
    "Tracking",
    "ThreadFilter",
    "VerifyReport",
    "apply_fork",
    "check_append",
    "check_fork_parent",
    "check_cursor",
    "child_spelling",
    "fold_item",
    "inherited",
    "own_seqs",
    "outgoing",
    "thread_key",
]

ANY: Final = "any"
NO_STREAM: Final = "no_stream"
EXISTS: Final = "exists"
ExpectedVersion = Union[int, Literal["any", "no_stream", "exists"]]
Direction = Literal["forward", "backward"]

#: One position per log, indexed by log id: where a catch-up reader stands
#: (the last position it has seen in each log; 0 = nothing yet).
Cursor = tuple[int, ...]

T_co = TypeVar("T_co", covariant=True)
_fromhex = bytes.fromhex

LINKS: Final = "links"
STATE: Final = "state"
#: The projections every backend keeps, with their fold code versions. Bump one when
#: its fold changes meaning: stores built with the old version then report it stale
#: until ``tplog rebuild``. links 2: the links declared in ``ThreadStarted.relationships``
#: are indexed, and a deleted thread is nobody's child (version 1 indexed neither). links 3:
#: a fork has the rows its prefix gives a copy (:attr:`ForkSeed.inherited`); version 2 stores
#: written before (the ``lifecycle`` branch's forks) lack them, so they must report stale.
VERSIONS: Final = {LINKS: 3, STATE: 2}
PROJECTIONS: Final = tuple(VERSIONS)


class ThreadHead(msgspec.Struct, array_like=True, kw_only=True):
    """A thread's head record: where its log ends and what state it is in.

    ``version`` is the last seq (0 for a thread with no events). ``status`` is
    ``"active"`` or ``"deleted"``. ``open_turn_agent`` names the agent whose
    turn is open (started, not yet completed or interrupted), else ``None``.
    Times are the store's clock in nanoseconds since the epoch.
    """

    thread_id: str
    version: int = 0
    last_position: int = 0
    created_ns: int = 0
    updated_ns: int = 0
    status: str = "active"
    open_turn_agent: str | None = None
    open_turn_seq: int = 0
    user_turns: int = 0
    agent_turns: int = 0
    messages: int = 0
    links: int = 0
    stored_bytes: int = 0
    scope: str | None = None
    # What the append-time validation rules (tplog.protocol.rules) compare against: the agent
    # registry's keys, where the last closed turn ended, when the open turn started and
    # its last message's time (as tplog.protocol.rules.stamp ints). rules == 0: not kept (written
    # before the store kept them, or by an unchecked append): folded from the log once.
    agents: list[str] = []
    turn_end: int | None = None
    open_turn_start: int | None = None
    open_turn_last: int | None = None
    rules: int = 0
    # What thread listings filter on (tplog.lifecycle.note keeps them, on every backend).
    activity: str = "idle"
    title: str | None = None
    metadata: dict[str, Any] | None = None
    agent_ids: list[str] = []
    parent: str | None = None
    # A fork (tplog.fork): its seqs 2..fork_at are thread ``fork_of``'s (same scope), read
    # from there, not copied; its own rows are seq 1 (its ThreadStarted) and seqs > fork_at.
    fork_of: str | None = None
    fork_at: int = 0


def own_seqs(head: ThreadHead) -> list[int]:
    """The seqs a thread's own rows hold: a deleted thread its tombstone; a fork its start and
    what was appended after the fork point; any other thread 1..version."""
    if head.status == "deleted":
        return [head.version]
    if head.fork_of is not None:
        return [1, *range(head.fork_at + 1, head.version + 1)]
    return list(range(1, head.version + 1))


#: One prefix event's link-index input: its seq, the LinkAdded (or ``None``), the
#: thread ids its spawn facts name.
Inherited = tuple[int, Union[LinkAdded, None], tuple[str, ...]]


class ForkSeed(msgspec.Struct, frozen=True, kw_only=True):
    """What makes an append (its one event: the fork's ThreadStarted) create a fork:
    the parent and the fork point, and the head values the parent's first ``at`` events
    lead to (counters and lifecycle fields, as :func:`tplog.fork.seed` folds them).
    The backend checks, in the append's transaction, that the parent is live and
    reaches ``at`` (``NotFoundError``, ``ThreadDeletedError``, ``InvalidInputError``)."""

    parent: str
    at: int
    head: ThreadHead
    #: What the prefix's events index (:func:`inherited`): the backend indexes these rows
    #: under the fork too, so that ``incoming``/``children`` see it as they would a copy.
    inherited: tuple[Inherited, ...] = ()


def inherited(history: Sequence[Any], at: int) -> list[Inherited]:
    """The link-index inputs of seqs 2..``at`` of ``history`` (decoded events from seq 1,
    as a copy holds them): what a fork at ``at`` inherits, indexed under the fork's id
    with the same ordinals (seqs) a copy's rows would have. Every backend indexes these
    when the fork is written and again when it rebuilds (from its parent's events)."""
    out: list[Inherited] = []
    for seq, ev in enumerate(history[1:at], 2):
        if isinstance(ev, LinkAdded):
            out.append((seq, ev, ()))
            continue
        f = facts_of(ev)
        if f is not None and f.spawned:
            out.append((seq, None, tuple(f.spawned)))
    return out


#: A children row's flags: the child links ``spawned_from`` the parent; the parent's events
#: name the child in a spawn fact.
CHILD_LINK: Final = 1
CHILD_SPAWN: Final = 2


def child_spelling(row_id: str | None, row_flags: int, child_id: str, flag: int) -> str:
    """The child id a children row keeps when a ``flag`` row spelling it ``child_id`` is
    written over ``(row_id, row_flags)``: the child's own spelling (its ``spawned_from``
    link's source) once the row has one, else the latest spawn fact's (the parent's events,
    in seq order). Not simply the latest writer's: live appends write in log order, a
    rebuild may go thread by thread (LMDB), and a child named in another case than its own
    would then be spelled differently after a rebuild (and ``verify`` would report it)."""
    return child_id if row_id is None or flag & CHILD_LINK or not row_flags & CHILD_LINK else row_id


def apply_fork(head: ThreadHead, seed: ForkSeed) -> ThreadHead:
    """The fork's head once its ThreadStarted is applied: version ``at``, the seed's values."""
    s = seed.head
    return msgspec.structs.replace(
        head, version=seed.at, fork_of=seed.parent, fork_at=seed.at, user_turns=s.user_turns,
        agent_turns=s.agent_turns, messages=s.messages, links=s.links, activity=s.activity, title=s.title,
        metadata=s.metadata, agent_ids=list(s.agent_ids), parent=s.parent, rules=0, agents=[], turn_end=None,
        open_turn_start=None, open_turn_last=None, open_turn_agent=None, open_turn_seq=0)


def check_fork_parent(seed: ForkSeed, parent: ThreadHead | None) -> None:
    """The parent a fork names, as the append's transaction sees it."""
    from tplog.errors import NotFoundError, ThreadDeletedError

    if parent is None:
        raise NotFoundError(f"thread {seed.parent} does not exist")
    if parent.status == "deleted":
        raise ThreadDeletedError(f"thread {seed.parent} was deleted; it cannot be forked")
    if parent.version < seed.at:
        raise InvalidInputError(f"fork of thread {seed.parent}: at={seed.at} is past its last seq {parent.version}")


class AppendResult(msgspec.Struct, frozen=True, kw_only=True):
    """Where an append's events landed. ``duplicate`` is True when the same
    event ids were already stored (an idempotent retry): nothing was written and
    the original positions are returned."""

    thread_id: str
    first_seq: int
    last_seq: int
    first_position: int
    last_position: int
    event_ids: list[str]
    duplicate: bool = False


class ThreadPage(msgspec.Struct, frozen=True):
    """One page of threads, most recently updated first; pass ``cursor`` back as ``after`` for the next."""

    threads: list[ThreadHead]
    cursor: str | None


class RebuildReport(msgspec.Struct, kw_only=True):
    """What a rebuild did. ``differences`` (with ``verify``) lists every row
    where the live projection and a fresh rebuild disagree; empty means equal."""

    projection: str
    verify: bool
    events: int
    seconds: float
    position: int
    differences: list[str] = []

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0


class VerifyReport(msgspec.Struct, kw_only=True):
    """``problems`` is empty for a sound store; ``skipped`` names checks that could
    not run (a projection being rebuilt by someone else), which is not a problem."""

    events: int = 0
    threads: int = 0
    blobs: int = 0
    problems: list[str] = []
    skipped: list[str] = []

    @property
    def ok(self) -> bool:
        return not self.problems


class ThreadAppend(msgspec.Struct, frozen=True, kw_only=True):
    """One thread's part of an append: its encoded events (in order) and its checks.

    ``fresh_ids``: the ids were generated by the facade (new UUIDv7s), so no
    stored event can have them and the backend may skip the idempotency lookup.
    ``check_rules``: the backend checks the events against the validation rules
    (``tplog.protocol.rules``: per event, then against the thread's history) besides the
    order rules, and keeps the head's rule values; ``False``: the order rules only.
    """

    thread_id: str
    events: list[Encoded]
    expected: ExpectedVersion = ANY
    scope: str | None = None
    fresh_ids: bool = False
    check_rules: bool = True
    fork: ForkSeed | None = None


#: What one caller submits: one or more threads' events, committed all or none.
Append = Sequence[ThreadAppend]


class Tracking(msgspec.Struct, frozen=True, kw_only=True):
    """A projection's bookkeeping: its fold code version, whether appends maintain
    it (``"live"``) or it must be rebuilt (``"stale"``), and the log positions it
    covers (one per log; a live projection covers every log to its end)."""

    name: str
    version: int | None
    code_version: int
    status: str
    position: Cursor


@runtime_checkable
class Handle(Protocol[T_co]):
    """A submitted operation's outcome; :class:`concurrent.futures.Future` is one.

    ``result()`` blocks until done and returns the value or raises the typed
    error the operation failed with; ``add_done_callback`` runs its function
    (from any thread) once done, at once if already done."""

    def done(self) -> bool: ...

    def result(self, timeout: float | None = None) -> T_co: ...

    def add_done_callback(self, fn: Callable[[Any], object]) -> None: ...


class Held(Protocol):
    """A named exclusive lock held until released (or the holder dies)."""

    def release(self) -> None: ...


@runtime_checkable
class Recorder(Protocol):
    """A storage engine for tplog. Thread-safe.

    Threads are named by ``(scope, thread_id)``; two ids name the same thread
    when their :func:`thread_key` is equal (UUIDs compare case-insensitively),
    and the head keeps the first spelling. A scope never sees another scope's
    threads, event ids, links or log entries.

    Errors are the package's typed errors (``tplog.TplogError`` subclasses) and
    a failed append or deletion writes nothing.
    """

    #: How many ordered logs this backend keeps (≥ 1).
    logs: int
    #: The codec events are encoded with (its zstd dictionaries are the store's).
    codec: Codec

    # ------------------------------------------------------------------ writes

    def gate(self) -> None:
        """Called before the facade encodes an append: a backend may hold the caller
        back briefly (LMDB does while a group transaction is being built, so that
        encoding threads do not take the GIL from its writer). Usually a no-op."""
        ...

    def submit(self, append: Append, *, lead: bool = True) -> Handle[list[AppendResult]]:
        """``lead``: the caller will call ``result()`` from a thread that may do the
        commit work itself (the sync API); with ``False`` the backend completes the
        append without the caller's thread (the async API awaits the handle through
        :func:`asyncio.wrap_future`, so the handle is then a concurrent Future).

        Append each :class:`ThreadAppend`'s events to its thread, all or none.

        Per thread, in this order: every event id already stored (same scope)
        → that part is an idempotent retry: its original result with
        ``duplicate=True``, nothing written (ids stored only in part, elsewhere
        or not as one contiguous run → ``IdempotencyError``); a deleted thread →
        ``ThreadDeletedError``; ``expected`` not met → ``WrongExpectedVersionError``;
        an event out of order (``ThreadStarted`` first and once, messages and
        terminal events inside an open agent turn, …) → ``InvalidEventError``;
        with ``check_rules``, an event that breaks a validation rule
        (``tplog.protocol.rules``: ``check_event`` per event, ``Tracker`` against the
        head's rule values) → ``InvalidEventError`` with ``rule``, ``seq`` and
        ``path``, and the new head keeps the values (``advance_rules``).
        Any error fails the whole append. Results come in the append's order.
        Maintains, in the same transaction, the head, the event-id index, the
        log, the link indexes and the ``state`` projection (when live).

        A part with ``fork`` creates a fork (see :class:`ForkSeed`): its ThreadStarted
        lands at seq 1 and the head becomes :func:`apply_fork`'s. Reads of a fork's own
        rows (``read_thread``, ``thread_events``, ``items``) hold seq 1 and seqs past the
        fork point; the facade splices in the parent's. ``thread_state`` answers ``None``
        for a fork. The rules' view of a fork's history (an append's checks) is spliced
        by the backend."""
        ...

    def delete_thread(self, thread_id: str, tombstone: Encoded, *, scope: str | None = None) -> Handle[AppendResult]:
        """Hard-delete a thread: remove its events, their log entries, ids and link
        rows, its ``state`` row; append ``tombstone`` (a ``ThreadDeleted``) at a new
        position; mark the head deleted. ``NotFoundError`` for a thread never seen,
        ``ThreadDeletedError`` for one already deleted, ``HasForksError`` while a live
        fork reads its events (delete the forks first)."""
        ...

    # ------------------------------------------------------------------ reads

    def head(self, thread_id: str, *, scope: str | None = None) -> ThreadHead | None:
        """The thread's head, or ``None`` for a thread never seen."""
        ...

    def read_thread(
        self,
        thread_id: str,
        *,
        scope: str | None = None,
        after: int | None = None,
        limit: int | None = None,
        direction: Direction = "forward",
    ) -> list[RecordedEvent]:
        """A thread's events by seq: forward, those with seq > ``after``; backward,
        those with seq < ``after``, newest first. ``NotFoundError`` for a thread
        never seen. A deleted thread holds only its tombstone."""
        ...

    def log_of(self, thread_id: str, *, scope: str | None = None) -> int:
        """The log a thread belongs to (fixed for the thread's life). A backend may place a
        new thread by more than its id: PostgreSQL puts a spawned child in its parent's log."""
        ...

    def read_log(
        self, log: int, *, after: int = 0, limit: int | None = None, scope: str | None = None
    ) -> list[RecordedEvent]:
        """Log ``log``'s events with position > ``after``, in position order (commit
        order): only the threads of ``scope``. A deleted thread's events leave gaps,
        its tombstone stays."""
        ...

    def positions(self) -> Cursor:
        """The last position of every log (0 for an empty log)."""
        ...

    def wait(self, cursor: Cursor, timeout: float | None = None) -> Cursor:
        """Block until some log's last position passes ``cursor`` (or the timeout
        passes); returns :meth:`positions`. ``cursor`` as :func:`check_cursor` accepts it
        (``InvalidInputError`` otherwise)."""
        ...

    def threads(
        self, *, scope: str | None = None, after: str | None = None, limit: int = 50, include_deleted: bool = False,
        where: ThreadFilter | None = None,
    ) -> ThreadPage:
        """Threads of ``scope`` by last update, newest first (ties: larger key
        first); ``after`` is the ``cursor`` of the previous page. ``where``: only
        the threads it keeps (:func:`tplog.lifecycle.matches`, and ``has_children``
        by the children index), found through indexes on activity, agent and
        last update rather than by reading every head."""
        ...

    def incoming(
        self,
        thread_id: str,
        *,
        scope: str | None = None,
        relation: str | None = None,
        after: tuple[str, str] | None = None,
        limit: int | None = None,
    ) -> list[tuple[str, str]]:
        """``(source_thread_id, relation)`` per link to the thread (the source id as its
        head spells it; a source that added the same link twice is listed twice), ordered by relation (UTF-8
        bytes), then source :func:`thread_key`, then the link's seq. ``after`` is
        the last pair of the previous page: the next page starts after every link
        of that pair, and a page never ends between two links of one pair (it
        holds more than ``limit`` then). A deleted source's links are gone with it.
        ``NotFoundError`` when the answer is empty and the thread is unknown: never
        stored, and no stored thread links to it or names it as spawned.
        ``RebuildRequiredError`` when stale."""
        ...

    def children(
        self, thread_id: str, *, scope: str | None = None, after: str | None = None, limit: int | None = None
    ) -> list[str]:
        """Threads spawned from the thread (a ``spawned_from`` link of the child or
        a spawn fact of the parent's messages), by child :func:`thread_key`;
        ``after`` is the last child id of the previous page. A deleted thread is nobody's
        child. ``NotFoundError`` as :meth:`incoming`."""
        ...

    def has_spawned(self, thread_id: str, *, scope: str | None = None) -> bool:
        """Whether the thread's events (a fork's inherited ones too) name a spawned thread (a
        spawn fact): what tells a fork of it whether its prefix must be read for them.
        ``RebuildRequiredError`` when the links projection is stale."""
        ...

    def thread_state(self, thread_id: str, *, scope: str | None = None) -> ThreadState | None:
        """The ``state`` projection's row for the thread (an empty state for a thread
        with no row), or ``None`` when the projection is stale (the facade then
        folds the thread's items itself). ``NotFoundError`` for a thread never seen."""
        ...

    def thread_events(self, thread_id: str, *, scope: str | None = None,
                      after: int = 0) -> tuple[ThreadHead, list[Any]]:
        """The head and the decoded events (``Event``s) with seq > ``after``, in one
        snapshot: from seq 1 instead when the thread is not active or its version is
        below ``after``. What the facade's fold cache extends. ``NotFoundError`` if unknown."""
        ...

    def items(self, thread_id: str, *, scope: str | None = None) -> list[Item]:
        """The thread's events as the id-only folds see them (kind, facts, and the
        event only where a fold reads it: :func:`fold_item`), in seq order. ``NotFoundError`` if unknown."""
        ...

    def descendants(self, thread_id: str, *, scope: str | None = None,
                    max_depth: int | None = None) -> list[tuple[str, int]]:
        """Every thread spawned from the thread, transitively, breadth-first, each once
        (by :func:`thread_key`): ``(thread_id, depth)``; ``max_depth`` limits the depth
        (0: no query). ``NotFoundError`` as :meth:`children`."""
        ...

    def links(self, thread_id: str, *, scope: str | None = None) -> list[Any]:
        """The thread's outgoing links (``ThreadLink``s, as :func:`outgoing` finds them):
        declared at its start, then added. A deleted thread has none. ``NotFoundError``
        for a thread never seen."""
        ...

    # ------------------------------------------------------------------ projections

    def tracking(self) -> list[Tracking]:
        """Every projection's bookkeeping, in a fixed order."""
        ...

    def rebuild(
        self,
        names: Sequence[str],
        *,
        verify: bool = False,
        force: bool = False,
        chunk: int = 20_000,
        progress: Callable[[int, int], None] | None = None,
    ) -> list[RebuildReport]:
        """Rebuild projections from the log, online (appends go on meanwhile): one
        ``RebuildReport`` per name. With ``verify``, report differences instead of
        swapping. One rebuild per projection at a time (``RebuildInProgressError``;
        a dead rebuild's claim is taken over, ``force`` takes a live one's)."""
        ...

    # ------------------------------------------------------------------ maintenance

    def try_lock(self, name: str) -> Held | None:
        """Take the named exclusive lock (ASCII letters, digits, ``-``, ``_``) without
        waiting; ``None`` if someone else holds it. Released when the holder dies."""
        ...

    def backup(self, dest: str, *, compact: bool = True) -> None:
        """A consistent copy of the store at ``dest``."""
        ...

    def stats(self) -> dict[str, Any]:
        """At least ``threads``, ``events`` and ``logs`` (ints); engines add their own keys."""
        ...

    def verify(self, *, projections: bool = True) -> VerifyReport:
        """Check the store against itself; each problem names the thread and seq."""
        ...

    def sync(self) -> None:
        """Make everything committed durable (a no-op where commits already are)."""
        ...

    def train_dictionary(self, *, samples: int = 2000, size: int = 64 << 10) -> int:
        """Train a zstd dictionary on stored bodies for new values (0: too few samples,
        or a backend that does not compress)."""
        ...

    def check_open(self) -> None:
        """``StoreClosedError`` once closed."""
        ...

    def close(self) -> None:
        """Finish pending submissions, then release the engine; later calls raise
        ``StoreClosedError``."""
        ...


def thread_key(thread_id: str, scope: str | None = None) -> bytes:
    """The identity and sort key of a thread (16 bytes) within ``scope``, if given.
    Every backend orders children and incoming links by it, so pages come out the
    same on every engine.

    Unscoped: a UUID in canonical text form (any case) keys by its 16 bytes,
    so ids compare as UUIDs; any other id keys by the first 16 bytes of
    ``BLAKE2b(b"tplog:" + id)``. Scoped: ``BLAKE2b(b"tplog-scope:" + scope +
    0x00 + id)``, so each scope is its own key space.
    """
    if scope is not None:
        return hashlib.blake2b(b"tplog-scope:" + scope.encode() + b"\x00" + thread_id.encode(),
                               digest_size=16).digest()
    if len(thread_id) == 36 and type(thread_id) is str:
        # Fast path, same answer as the uuid.UUID check below (much cheaper: this is
        # on every append and every query). Canonical = 32 ASCII hex digits, any case,
        # as 8-4-4-4-12 around hyphens. ``bytes.fromhex`` rejects anything else that
        # uuid.UUID would parse (signs, underscores, non-ASCII digits, "urn:"/braces,
        # hyphens elsewhere all leave no canonical form): a non-hex character raises,
        # and whitespace (skipped between byte pairs) leaves fewer than 16 bytes.
        if thread_id[8] == thread_id[13] == thread_id[18] == thread_id[23] == "-":
            try:
                b = _fromhex(thread_id.replace("-", ""))
            except ValueError:
                pass
            else:
                if len(b) == 16:
                    return b
    elif len(thread_id) == 36:  # not exactly str: the reference check (its errors included)
        try:
            u = uuid.UUID(thread_id)
        except ValueError:
            pass
        else:
            if str(u) == thread_id.lower():
                return u.bytes
    return hashlib.blake2b(b"tplog:" + thread_id.encode(), digest_size=16).digest()


#: The ``links_in`` ordinal of a link declared in ``ThreadStarted.relationships`` is
#: ``DECLARED | i`` (an added link's is its seq): declared links sort after added ones.
DECLARED: Final = 1 << 63


def outgoing(seq: int, event: Any) -> list[tuple[int, m.ThreadLink]]:
    """The links ``event`` records, each with its ordinal: a LinkAdded's link (its seq),
    or the links a ThreadStarted declares in ``relationships`` (in their order). Every
    backend indexes exactly these as incoming links."""
    if isinstance(event, LinkAdded):
        return [(seq, event.link)]
    if isinstance(event, ThreadStarted):
        rel = event.relationships
        if isinstance(rel, m.ThreadRelationships) and isinstance(rel.links, list):
            return [(DECLARED | i, lk) for i, lk in enumerate(rel.links)]
    return []


def check_cursor(cursor: object, logs: int) -> None:
    """What :meth:`Recorder.wait` accepts: a tuple of int positions, one per log, or fewer (the first
    logs' only: ``Store.wait_for_position`` passes log 0's alone, -1 for position 0). Anything else
    is the caller's bug, answered alike on every backend."""
    if not isinstance(cursor, tuple) or not 1 <= len(cursor) <= logs or any(type(p) is not int for p in cursor):
        raise InvalidInputError(f"cursor must be a tuple of 1 to {logs} ints (a position per log), not {cursor!r}")


#: The kinds whose event :meth:`Recorder.items` hands out: what the id-only folds read (agent turn
#: boundaries, as the event or its header's TurnFacts; links). Every other item's event is None.
FOLD_KINDS: Final = frozenset(KIND_CODE[c] for c in (AgentTurnStarted, AgentTurnCompleted, AgentTurnInterrupted,
                                                     LinkAdded))


def fold_item(seq: int, kind: int, facts: Any, event: Any) -> Item:
    """An item of :meth:`Recorder.items`: ``event`` kept for :data:`FOLD_KINDS` only, as LMDB,
    which reads no other body, hands it out."""
    return Item(seq, kind, facts, event if kind in FOLD_KINDS else None)


def check_append(append: Append) -> None:
    """What every backend refuses before touching storage: an empty append, one
    thread twice, an empty part, an event id twice (in one scope)."""
    if not append:
        raise InvalidInputError("an append needs at least one thread")
    seen_threads: set[bytes] = set()
    seen_ids: set[tuple[str | None, str]] = set()
    for part in append:
        tk = thread_key(part.thread_id, part.scope)
        if tk in seen_threads:
            raise InvalidInputError(f"thread {part.thread_id}: named twice in one append")
        seen_threads.add(tk)
        if not part.events:
            raise InvalidInputError(f"thread {part.thread_id}: append needs at least one event")
        for e in part.events:
            key = (part.scope, e.event_id)
            if key in seen_ids:
                raise InvalidInputError(f"thread {part.thread_id}: event id {e.event_id!r} appears twice in one append")
            seen_ids.add(key)
        if part.fork is not None and (len(part.events) != 1 or not isinstance(part.events[0].event, ThreadStarted)
                                      or part.expected != NO_STREAM or part.fork.at < 1):
            raise InvalidInputError(f"thread {part.thread_id}: a fork's append is its ThreadStarted alone, "
                                    "expected no_stream, at ≥ 1")


def advance(thread_id: str, head: ThreadHead, events: Sequence[Encoded],
            stored: list[Any] | Callable[[], list[Any]] | None, state: ThreadState | None = None,
            checks: Sequence[EventCheck] | None = None) -> ThreadHead:
    """The order rules and (``stored``: the thread's events, or what reads them, given
    when the append checks the rules) the validation rules of tplog.protocol.rules, checked
    event by event; the head they lead to (a copy). Every backend checks an append with this.
    Without ``state`` (the state projection's row) the tool-call check takes the slow path:
    simple, the same answers. ``checks``: the events' ``check_event`` results, if the caller
    computed them already (outside the writer)."""
    h = msgspec.structs.replace(head)
    tracker = None
    if stored is not None:
        load = stored if callable(stored) else (lambda: stored)
        if h.rules == 0 and h.version > 0:
            rules_from_log(h, load())
        tracker = Tracker(thread_id, h, state, lambda before: exported_calls([*load(), *before]))
    for i, enc in enumerate(events):
        ev = enc.event
        seq = h.version + 1
        where = f"thread {thread_id}, events[{i}] (would be seq {seq})"
        if isinstance(ev, ThreadStarted):
            if h.version != 0:
                raise InvalidEventError(f"{where}: ThreadStarted must be the first event of a thread")
            if ev.thread_id != thread_id:
                raise InvalidEventError(
                    f"{where}: ThreadStarted names thread {ev.thread_id!r} but is appended to {thread_id!r}"
                )
            h.links += len(outgoing(seq, ev))  # the links it declares
        elif h.version == 0:
            raise InvalidEventError(f"{where}: the first event of a thread must be ThreadStarted, "
                                    f"not {type(ev).__name__}")
        elif isinstance(ev, (MessageRecorded, AgentTurnCompleted, AgentTurnInterrupted)):
            if h.open_turn_agent is None:
                raise InvalidEventError(f"{where}: {type(ev).__name__} needs an open agent turn; "
                                        "append AgentTurnStarted first")
            if isinstance(ev, MessageRecorded):
                h.messages += 1
            else:
                h.open_turn_agent = None
                h.open_turn_seq = 0
        elif isinstance(ev, (UserTurnSubmitted, AgentTurnStarted)):
            if h.open_turn_agent is not None:
                raise InvalidEventError(
                    f"{where}: the agent turn of {h.open_turn_agent!r} opened at seq {h.open_turn_seq} is "
                    "still open; append AgentTurnCompleted or AgentTurnInterrupted first"
                )
            if isinstance(ev, UserTurnSubmitted):
                h.user_turns += 1
            else:
                h.open_turn_agent = ev.agent_id
                h.open_turn_seq = seq
                h.agent_turns += 1
        elif isinstance(ev, LinkAdded):
            h.links += 1
        elif isinstance(ev, ThreadDeleted):
            raise InvalidEventError(f"{where}: delete a thread with Store.delete_thread(), not by appending")
        elif not isinstance(ev, (AgentRegistered, ThreadInfoChanged)):  # pragma: no cover
            raise InvalidEventError(f"{where}: unknown event {type(ev).__name__}")
        if tracker is not None:
            tracker.step(ev, checks[i] if checks is not None else check_event(ev), seq, i)
        note(h, ev)
        h.version = seq
    advance_rules(h, tracker)
    return h
