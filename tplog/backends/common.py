"""The rules every backend shares: what memory, LMDB and PostgreSQL check and answer alike.

:mod:`tplog.backends.contract` says what a backend must do (the Protocol and the values
it trades in); this module is how much of it is done, once: thread keys, the append's
order rules, the id-collision, deleted-thread and expected-version checks, the idempotent
retry, the deletion preconditions, a fork's history splice, the head decoder, the link
relation and children flags, the projections' code versions. A backend keeps only what
its engine does differently (where rows live, how a transaction reads them), so that the
same input gives the same error, message and result on every engine.

Never imports an engine's driver.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Final

import msgspec

from tplog.backends.contract import (
    EXISTS,
    NO_STREAM,
    Append,
    AppendResult,
    ExpectedVersion,
    ForkSeed,
    Inherited,
    ThreadHead,
)
from tplog.codec import Encoded, facts_of
from tplog.errors import (
    HasForksError,
    IdempotencyError,
    InvalidEventError,
    InvalidInputError,
    NotFoundError,
    ThreadDeletedError,
    WrongExpectedVersionError,
)
from tplog.events import (
    KIND_CODE,
    AgentRegistered,
    AgentTurnCompleted,
    AgentTurnInterrupted,
    AgentTurnStarted,
    LinkAdded,
    MessageRecorded,
    ThreadDeleted,
    ThreadInfoChanged,
    ThreadStarted,
    UserTurnSubmitted,
)
from tplog.lifecycle import SPAWNED_FROM, note
from tplog.projections.fold import Item, ThreadState
from tplog.protocol import model as m
from tplog.protocol.rules import EventCheck, Tracker, advance_rules, check_event, exported_calls, rules_from_log

__all__ = [
    "CHILD_LINK",
    "CHILD_SPAWN",
    "DECLARED",
    "FOLD_KINDS",
    "LINKS",
    "PROJECTIONS",
    "SPAWNED_FROM",
    "STATE",
    "VERSIONS",
    "advance",
    "apply_fork",
    "check_append",
    "check_collision",
    "check_cursor",
    "check_deletable",
    "check_expected",
    "check_fork_parent",
    "check_no_forks",
    "check_threads_page",
    "check_tombstone",
    "child_spelling",
    "decode_head",
    "encode_head",
    "fold_item",
    "inherited",
    "outgoing",
    "own_seqs",
    "retry_refs",
    "retry_result",
    "tombstone_taken",
    "thread_key",
    "with_prefix",
]

#: A thread's head as every backend stores it (msgpack of :class:`ThreadHead`).
decode_head: Final = msgspec.msgpack.Decoder(ThreadHead).decode
encode_head: Final = msgspec.msgpack.Encoder().encode

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


def own_seqs(head: ThreadHead) -> list[int]:
    """The seqs a thread's own rows hold: a deleted thread its tombstone; a fork its start and
    what was appended after the fork point; any other thread 1..version."""
    if head.status == "deleted":
        return [head.version]
    if head.fork_of is not None:
        return [1, *range(head.fork_at + 1, head.version + 1)]
    return list(range(1, head.version + 1))


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
        metadata=s.metadata, agent_ids=list(s.agent_ids), agent_names=dict(s.agent_names), parent=s.parent,
        rules=0, agents=[], turn_end=None, open_turn_start=None, open_turn_last=None, open_turn_agent=None,
        open_turn_seq=0)


def check_fork_parent(seed: ForkSeed, parent: ThreadHead | None) -> None:
    """The parent a fork names, as the append's transaction sees it."""
    if parent is None:
        raise NotFoundError(f"thread {seed.parent} does not exist")
    if parent.status == "deleted":
        raise ThreadDeletedError(f"thread {seed.parent} was deleted; it cannot be forked")
    if parent.version < seed.at:
        raise InvalidInputError(f"fork of thread {seed.parent}: at={seed.at} is past its last seq {parent.version}")


# ------------------------------------------------------------------ an append's thread


def check_collision(thread_id: str, stored: ThreadHead | None) -> None:
    """Two ids with one :func:`thread_key` name one thread only if they differ in case alone
    (a UUID's spelling); any other pair is a key collision, refused."""
    if stored is not None and stored.thread_id != thread_id and stored.thread_id.lower() != thread_id.lower():
        raise InvalidInputError(f"thread id {thread_id!r} collides with stored thread {stored.thread_id!r}")


def check_expected(thread_id: str, head: ThreadHead, expected: ExpectedVersion) -> None:
    """A deleted thread's id is never reused; then the append's expected version against the head."""
    if head.status == "deleted":
        raise ThreadDeletedError(f"thread {thread_id} was deleted; its id cannot be reused")
    if (expected == NO_STREAM and head.version != 0) or (expected == EXISTS and head.version == 0) or (
            isinstance(expected, int) and expected != head.version):
        raise WrongExpectedVersionError(thread_id, expected, head.version)


#: Where a stored event id points: (thread key, seq, position — whatever the backend's is).
Ref = tuple[bytes, int, Any]


def retry_refs(thread_id: str, tk: bytes, events: Sequence[Encoded], found: Sequence[Ref | None]) -> list[Ref] | None:
    """The idempotent retry: ``found`` is where each event id is stored (``None``: not stored).
    ``None`` when none is (a new append); the refs when all are, in this thread, as one
    contiguous append in this order (the caller answers with the original result); else
    ``IdempotencyError``."""
    if all(f is None for f in found):
        return None
    if any(f is None for f in found):
        stored = [e.event_id for e, f in zip(events, found, strict=True) if f is not None]
        raise IdempotencyError(
            f"thread {thread_id}: event ids {stored} are already stored but the others of this append are "
            "not; an idempotent retry must resend exactly the original events")
    refs = [f for f in found if f is not None]
    for e, f in zip(events, refs, strict=True):
        if f[0] != tk:
            raise IdempotencyError(f"event id {e.event_id!r} is already stored in another thread")
    seqs = [f[1] for f in refs]
    if seqs != list(range(seqs[0], seqs[0] + len(seqs))):
        raise IdempotencyError(f"thread {thread_id}: event ids {[e.event_id for e in events]} are stored, "
                               "but not as one contiguous append in this order")
    return refs


def retry_result(thread_id: str, events: Sequence[Encoded], refs: Sequence[Ref]) -> AppendResult:
    """The original result an idempotent retry gets (refs' positions are the log's)."""
    return AppendResult(thread_id=thread_id, first_seq=refs[0][1], last_seq=refs[-1][1], first_position=refs[0][2],
                        last_position=refs[-1][2], event_ids=[e.event_id for e in events], duplicate=True)


def with_prefix(head: ThreadHead | None, own: list[Any], parent: Callable[[str], list[Any] | None]) -> list[Any]:
    """The thread's events as a copy would hold them: ``own`` (its stored ones) with, for a
    live fork, seqs 2..fork_at from its parent (``parent(fork_of)``: the parent's events the
    same way, ``None`` for a parent gone) spliced in after its ThreadStarted."""
    if head is None or head.fork_of is None or head.status != "active":
        return own
    prefix = parent(head.fork_of)
    return [*own[:1], *(prefix[1:head.fork_at] if prefix is not None else []), *own[1:]]


def check_threads_page(after: str | None, limit: object) -> bytes | None:
    """A thread listing's page arguments, refused alike: ``limit`` an int > 0; ``after`` a
    cursor a listing returned (hex of the last head's updated_ns and thread key). Its bytes."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        raise InvalidInputError("limit must be > 0")
    if after is None:
        return None
    try:
        raw = bytes.fromhex(after)
        if len(raw) != 24:
            raise ValueError
    except ValueError as exc:
        raise InvalidInputError(f"cursor {after!r} is not one this store returned") from exc
    return raw


# ------------------------------------------------------------------ deletion


def check_tombstone(thread_id: str, tombstone: Encoded) -> None:
    if not isinstance(tombstone.event, ThreadDeleted):
        raise InvalidInputError(f"thread {thread_id}: a deletion's tombstone must be a ThreadDeleted event")


def check_deletable(thread_id: str, head: ThreadHead | None) -> ThreadHead:
    """The head of a thread that can be deleted: stored, not deleted already."""
    if head is None:
        raise NotFoundError(f"thread {thread_id} does not exist")
    if head.status == "deleted":
        raise ThreadDeletedError(f"thread {thread_id} is already deleted")
    return head


def check_no_forks(thread_id: str, forks: Sequence[str]) -> None:
    """A thread whose events live forks read (``forks``: their ids) is not deleted under them."""
    if forks:
        raise HasForksError(f"thread {thread_id} has live forks that read its events: {sorted(forks)}; "
                            "delete them first (Store.delete_thread(..., cascade=True))", sorted(forks))


def tombstone_taken(event_id: str) -> IdempotencyError:
    """What a deletion whose tombstone's id is stored already raises."""
    return IdempotencyError(f"event id {event_id!r} is already stored")


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
