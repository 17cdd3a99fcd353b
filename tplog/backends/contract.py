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

Only the Protocol and the values it trades in: the rules every backend shares are
:mod:`tplog.backends.common`. Never imports ``lmdb`` (nor any engine's driver):
engines implement this, not the other way round.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final, Literal, Protocol, TypeVar, Union, runtime_checkable

import msgspec

from tplog.codec import Codec, Encoded
from tplog.events import LinkAdded, RecordedEvent
from tplog.lifecycle import ThreadFilter
from tplog.projections.fold import Item, ThreadState

__all__ = [
    "ANY",
    "EXISTS",
    "NO_STREAM",
    "Append",
    "AppendResult",
    "Cursor",
    "Direction",
    "ExpectedVersion",
    "ForkSeed",
    "Handle",
    "Held",
    "Inherited",
    "RebuildReport",
    "Recorder",
    "ThreadAppend",
    "ThreadFilter",
    "ThreadHead",
    "ThreadPage",
    "Tracking",
    "VerifyReport",
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
    # agent id (and registry key) -> registered agent_name, for listings that show who took part
    # without reading the thread; heads written before it decode with {} (listings then show ids).
    agent_names: dict[str, str] = {}


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
    #: Whether submissions commit in the order ``submit`` was called, so a caller may queue
    #: the next append of a thread before the previous one is done (tplog.pipeline): memory and
    #: LMDB (one queue); not PostgreSQL (concurrent writers).
    submits_in_order: bool

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

    def wait_for_position(self, position: int, timeout: float | None = None, *, poll: float = 0.05) -> int:
        """Block until log 0 holds ``position`` (or the timeout passes); its last position then.
        ``poll``: how often a backend that cannot be woken by other processes' appends looks
        (LMDB); the memory and PostgreSQL backends are woken and wait as :meth:`wait`."""
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

