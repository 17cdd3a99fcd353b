"""The store: the facade users call (``Store``; ``AsyncStore`` is in :mod:`tplog.aio`).

It checks arguments, encodes events (in the caller's thread, outside any
writer), confines scoped views, keeps the fold cache and turns a thread's log
into documents; everything stored goes through a backend implementing
:mod:`tplog.backends.contract` (LMDB by default, the in-memory reference for
``"memory:"``). An append: check and encode here → ``backend.submit`` (one
future-like handle, awaited by the sync and the async API alike) → the
backend's transaction (LMDB: group commit, see ``tplog.backends.lmdb.recorder``).
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, Literal, Unpack

import msgspec

from tplog import fork as _fork
from tplog import forklog as _forklog
from tplog import retire as _retire
from tplog.backends import contract
from tplog.backends.common import PROJECTIONS, thread_key
from tplog.backends.contract import (
    ANY,
    EXISTS,
    NO_STREAM,
    AppendResult,
    RebuildReport,
    Recorder,
    ThreadAppend,
    ThreadHead,
    ThreadPage,
    VerifyReport,
)
from tplog.backends.lmdb import LmdbOptions
from tplog.backends.urls import MEMORY, open_backend
from tplog.codec import Codec, Encoded
from tplog.errors import InvalidInputError, NotFoundError, ThreadDeletedError, TplogError
from tplog.events import Event, RecordedEvent, ThreadDeleted
from tplog.foldcache import FoldCache
from tplog.lifecycle import activity_argument, check_filter
from tplog.pipeline import Pipeline
from tplog.prepare import (
    check_chunk,
    check_expected_version,
    check_page_limit,
    check_position,
    drain,
    encode,
    log_appended,
    log_refused,
)
from tplog.projections.fold import (
    Folder,
    FoldResult,
    InterruptState,
    Item,
    PendingState,
    ThreadState,
    events_from_thread,
    interrupts_of,
    pending_of,
    state_of,
)
from tplog.protocol import model as m
from tplog.retire import PruneReport, RetentionPolicy
from tplog.search import SearchPage, SearchSlot

__all__ = ["ANY", "EXISTS", "NO_STREAM", "AppendResult", "ExpectedVersion", "Store", "ThreadHead",
           "ThreadPage"]

ExpectedVersion = contract.ExpectedVersion  # the types live in the backend contract; re-exported here

CHUNK: Final = 20_000  # events a rebuild folds per snapshot and per commit (see Store.rebuild)
SEARCH: Final = "search"  # the search index's name as a projection (rebuild, verify)


log = logging.getLogger("tplog.store")


class Store:
    """A tplog store: in the directory ``path`` (created if missing; ``lmdb:///dir``
    names one too), or ``"memory:"`` for the in-memory reference backend (its
    content lives as long as the object; handy in tests; ``"memory:DIR"`` starts
    from what :meth:`backup` of a memory store wrote into DIR), or a backend object
    (a :class:`~tplog.backends.contract.Recorder` the caller opened with its own
    options; ``path`` is then ``""``, and closing the store closes it).

    Thread-safe; several processes may open the same directory (LMDB allows
    one writer at a time; readers are never blocked). Options:

    - ``durability``: ``"durable"`` (default) — an acknowledged append has been
      fsynced; ``"relaxed"`` — one fsync per commit instead of two: an OS crash
      or power loss may undo the last committed group, never corrupts.
    - ``readonly``: open without write access (appends raise ReadOnlyError).
    - ``map_size``: the initial LMDB map; it grows by itself (doubling) up to
      ``max_map_size``.
    - ``limits``: :class:`~tplog.codec.Limits` on event size, parts, depth,
      decompressed size and the blob threshold.
    - ``auto_dictionary``: once the log holds this many events and the store
      has no zstd dictionary, one is trained from its latest events in a
      background thread (:meth:`train_dictionary`); new values use it, old ones
      keep theirs. 0 turns it off.
    - ``check_rules``: ``True`` (default) — every append is checked against the
      validation rules of ``tplog.validate`` (``tplog.protocol.rules``), so what the
      store accepts, ``validate`` accepts; ``False`` — only the order rules:
      a raw log of well-ordered events (replaying logs recorded without the
      rules, tests of storage mechanics with toy ids).
    - ``fold_cache``: how many folded events :meth:`load` keeps in memory (the
      turns of recently loaded threads, each with the seq it covers), so a
      later load folds only what was appended since; 0 turns it off. A folded
      event holds several KB of Python objects (see benchmarks/README.md).
    - ``search_thinking``: :meth:`search` indexes thinking parts too (off by default:
      they are the model's scratch work; an index built with the other setting is rebuilt).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | Recorder,
        *,
        fold_cache: int = 20_000,
        check_rules: bool = True,
        search_thinking: bool = False,
        **options: Unpack[LmdbOptions],
    ) -> None:
        if not isinstance(check_rules, bool):
            raise InvalidInputError(f"check_rules must be True or False, not {check_rules!r}")
        if isinstance(fold_cache, bool) or not isinstance(fold_cache, int) or fold_cache < 0:
            raise InvalidInputError(f"fold_cache must be an int ≥ 0 (events), not {fold_cache!r}")
        unknown = sorted(set(options) - LmdbOptions.__optional_keys__)
        if unknown:  # as Python says it of a signature: the memory and PostgreSQL backends ignore these
            raise TypeError(f"Store() got unexpected keyword arguments: {', '.join(unknown)}")
        if not isinstance(path, (str, os.PathLike)):  # a backend opened by the caller, with its own options
            if options:
                raise InvalidInputError(f"Store() of a backend object takes no backend options: {sorted(options)}")
            self.backend: Recorder = path
            self.path = ""
        else:
            self.path = path if isinstance(path, str) and path.startswith(MEMORY) else os.fspath(path)
            self.backend = open_backend(path, **options)
            if isinstance(self.path, str) and self.path.startswith("lmdb://"):
                self.path = self.path[len("lmdb://"):]
        self.codec: Codec = self.backend.codec
        self._folds = FoldCache(fold_cache)
        self.readonly = options.get("readonly", False)
        self.check_rules = check_rules
        self._scope: str | None = None
        self._view = False
        if not isinstance(search_thinking, bool):
            raise InvalidInputError(f"search_thinking must be True or False, not {search_thinking!r}")
        # the search index (tplog.search): beside an LMDB store's files, else in memory; opened on first use
        self._search = SearchSlot(self.path if self.path and os.path.isdir(self.path) else None,
                                  thinking=search_thinking)
        self._root = self

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def scoped(self, scope: str) -> Store:
        """A view of this store confined to ``scope`` (a tenant).

        Thread ids, event ids, listings and link queries of the view live in the
        scope's own key space: a view of scope A never sees scope B's threads,
        events or links, whatever ids it names (the same id in two scopes is two
        threads). Views share the store's backend (and its group commit); closing
        a view does nothing, close the store itself.
        """
        if not isinstance(scope, str) or not scope or len(scope.encode()) > 256:
            raise InvalidInputError(f"scope must be a non-empty string of at most 256 bytes, not {scope!r}")
        view = copy.copy(self)
        view._scope = scope
        view._view = True
        return view

    @property
    def scope(self) -> str | None:
        """The scope of this view, or ``None`` for the unscoped store."""
        return self._scope

    def close(self) -> None:
        """Close the store. Pending appends finish first; later calls raise StoreClosedError."""
        if self._view:
            return
        self._search.close()
        self.backend.close()

    def _check_open(self) -> None:
        self.backend.check_open()

    # ------------------------------------------------------------------ append

    def _encode(self, thread_id: str, events: Sequence[Event], event_ids: Sequence[str] | None) -> list[Encoded]:
        return encode(self.backend, thread_id, events, event_ids)

    def append(
        self,
        thread_id: str,
        events: Sequence[Event],
        *,
        expected_version: ExpectedVersion = ANY,
        event_ids: Sequence[str] | None = None,
    ) -> AppendResult:
        """Append ``events`` to a thread, atomically: all of them or none.

        ``expected_version``: ``"any"`` (default); ``"no_stream"`` — the thread
        must have no events; ``"exists"`` — it must have some; an int — its
        version (last seq) must be exactly that. A mismatch raises
        :class:`WrongExpectedVersionError` and writes nothing.

        ``event_ids``: one id per event (default: new UUIDs). Re-appending
        events whose ids are all stored already, in the same order, returns the
        original result with ``duplicate=True`` and writes nothing — safe to
        retry after a lost acknowledgement. Ids stored elsewhere or for only
        some of the events raise :class:`IdempotencyError`.

        Returns once the commit is durable (see ``durability``).
        """
        backend = self.backend
        backend.gate()
        encoded = self._encode(thread_id, events, event_ids)
        check_expected_version(expected_version)
        part = ThreadAppend(thread_id=thread_id, events=encoded, expected=expected_version, scope=self._scope,
                            fresh_ids=event_ids is None, check_rules=self.check_rules)
        try:
            res: AppendResult = backend.submit((part,)).result()[0]
        except TplogError as exc:
            log_refused(thread_id, exc)
            raise
        log_appended(res)
        return res

    def pipeline(self, thread_id: str, *, expected_version: ExpectedVersion = ANY) -> Pipeline:
        """A :class:`~tplog.pipeline.Pipeline` recording ``thread_id``: appends acknowledged
        once queued, each turn's end (and ``commit()``) durable with everything before it."""
        return Pipeline(self, thread_id, expected_version=expected_version)

    # ------------------------------------------------------------------ fork

    def fork(self, thread_id: str, at: int, *, new_thread_id: str | None = None,
             reason: str | None = None) -> AppendResult:
        """A new thread whose history is this thread's events up to seq ``at`` (a turn
        boundary: no agent turn open there), started by a ``ThreadStarted`` declaring
        ``spawned_from`` → ``thread_id`` with ``{"branch_point": "turn_N", "seq": at,
        "reason": reason}`` as the link's metadata; title, metadata and other links as
        the parent's start. ``new_thread_id`` defaults to a new UUID (the result's
        ``thread_id``). Copy-on-write (see ``tplog.fork``): the fork stores its own
        ThreadStarted and what is appended to it later, and reads seqs 2..``at`` from
        the parent; reads, loads, exports, hashes, pending tools and interrupts answer as
        for a copied thread. It is listed among the parent's children; the parent
        cannot be deleted while it lives (``delete_thread(..., cascade=True)``).

        Errors, nothing written: a parent never stored (:class:`NotFoundError`) or
        deleted (:class:`ThreadDeletedError`); ``at`` not a turn boundary or past the
        parent's end (:class:`InvalidInputError`); ``new_thread_id`` already used
        (:class:`WrongExpectedVersionError`, or :class:`ThreadDeletedError` for a
        deleted one)."""
        return _fork.fork(self, thread_id, at, new_thread_id=new_thread_id, reason=reason)

    # ------------------------------------------------------------------ retention

    def prune(self, policy: RetentionPolicy, *, dry_run: bool = False, confirm_all: bool = False,
              now: Any = None, progress: Callable[[str, int, int | None], None] | None = None) -> PruneReport:
        """Remove the threads ``policy`` retires (see ``tplog.retire``): each leaves a
        tombstone saying why and when, the report is kept (:meth:`prune_reports`) and
        names every live child left with a ``spawned_from`` target that is gone.
        ``dry_run``: the report of what would go, nothing written. A policy that would
        remove every thread raises :class:`ConfirmationRequiredError` unless ``confirm_all``.
        ``now`` (aware datetime or ns): the time ``max_age`` counts back from (default: now).
        ``progress(step, done, total)`` is called as it lists, checks and deletes threads
        (``total`` None while the listing's size is unknown)."""
        return _retire.prune(self, policy, dry_run=dry_run, confirm_all=confirm_all, now=now, progress=progress)

    def prune_reports(self, *, after: str | None = None, limit: int = 50) -> tuple[list[PruneReport], str | None]:
        """The kept prune reports, newest first, and the ``after`` cursor of the next page."""
        return _retire.prune_reports(self, after=after, limit=limit)

    # ------------------------------------------------------------------ delete

    def delete_thread(self, thread_id: str, *, reason: str | None = None, cascade: bool = False) -> AppendResult:
        """Hard-delete a thread: its events and index entries are removed, shared blobs
        released, and a ``ThreadDeleted`` tombstone kept so the id is never reused.
        Space is reused by later writes; ``tplog backup`` (compacting) shrinks the file.

        A thread whose events live forks read (see :meth:`fork`) raises
        :class:`HasForksError` (naming them) and nothing is deleted; with ``cascade``
        its forks, and theirs, are deleted first (each its own deletion, deepest first)."""
        if not isinstance(cascade, bool):
            raise InvalidInputError(f"cascade must be True or False, not {cascade!r}")
        if cascade:
            for f in _fork.forks_of(self, thread_id):
                self.delete_thread(f, reason=reason, cascade=True)
        tomb = ThreadDeleted(reason=reason if reason is not None else msgspec.UNSET)
        enc = self._encode(thread_id, [tomb], None)[0]
        res: AppendResult = self.backend.delete_thread(thread_id, enc, scope=self._scope).result()
        log.info("thread deleted", extra={"thread_id": thread_id, "reason": reason, "seq": res.last_seq})
        return res

    # ------------------------------------------------------------------ read

    def head(self, thread_id: str) -> ThreadHead:
        """The thread's head record; :class:`NotFoundError` if it has none."""
        head = self.backend.head(thread_id, scope=self._scope)
        if head is None:
            raise NotFoundError(f"thread {thread_id} does not exist")
        return head

    def exists(self, thread_id: str) -> bool:
        head = self.backend.head(thread_id, scope=self._scope)
        return head is not None and head.status == "active"

    def read(
        self,
        thread_id: str,
        *,
        after: int | None = None,
        limit: int | None = None,
        direction: Literal["forward", "backward"] = "forward",
    ) -> list[RecordedEvent]:
        """A thread's events after seq ``after`` (exclusive), forward or backward.

        Forward: seqs above ``after``, oldest first; backward: seqs below it,
        newest first. ``after=None`` starts at the first (forward) or last
        (backward) event, so a page continues with ``after=page[-1].seq`` either
        way. ``limit`` caps how many are returned. Each value's CRC is verified; a
        mismatch raises :class:`CorruptionError` naming the thread and seq.
        Raises :class:`NotFoundError` for a thread the store never had.
        """
        if direction not in ("forward", "backward"):
            raise InvalidInputError(f"direction must be 'forward' or 'backward', not {direction!r}")
        for name, value in (("after", after), ("limit", limit)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise InvalidInputError(f"{name} must be None or an int, not {value!r}")
            if value is not None and value < 0:
                raise InvalidInputError(f"{name} must be ≥ 0, not {value}")
        return _fork.read(self, thread_id, after=after, limit=limit, direction=direction)

    def read_all(self, *, after: int = 0, limit: int | None = None) -> list[RecordedEvent]:
        """The store-wide log after ``position`` ``after`` (exclusive) in commit order
        (catch-up readers: continue with ``after=page[-1].position``).

        Positions are gap-free at commit; events of a deleted thread leave gaps
        (their positions are skipped), except its ``ThreadDeleted`` tombstone.
        A fork's ``ThreadStarted`` comes with the events it inherits, all at its
        position, as a copy's would be in the log (:mod:`tplog.forklog`): such a
        page may hold more than ``limit`` events.
        """
        check_position(after)
        check_page_limit(limit)
        page = self.backend.read_log(0, after=after, limit=limit, scope=self._scope)
        return _forklog.expand(self, page) if limit != 0 else page

    def iter_all(self, *, after: int = 0, chunk: int = 64) -> Iterator[RecordedEvent]:
        """The store-wide log after position ``after``, streamed: what :meth:`read_all`
        returns, read ``chunk`` events per read transaction, so memory and the time a
        read transaction is held stay bounded on a store of any size.

        Runs to the end of the log as each chunk finds it: events committed while
        iterating are included once their positions are reached. Each chunk is its own
        snapshot: a thread deleted between chunks leaves the rest of its events out.
        """
        check_position(after)
        check_chunk(chunk)
        self._check_open()
        return self._iter_all(after, chunk)

    def _iter_all(self, pos: int, chunk: int) -> Iterator[RecordedEvent]:
        while page := self.read_all(after=pos, limit=chunk):
            pos = page[-1].position
            yield from drain(page)

    @property
    def last_position(self) -> int:
        """The newest position in the store-wide log (re-read from disk)."""
        return self.backend.positions()[0]

    def wait_for_position(self, position: int, timeout: float | None = None, *, poll: float = 0.05) -> int:
        """Block until the log holds ``position`` (or the timeout passes); returns the last position.

        On timeout it returns the last position it saw, which is then below
        ``position`` (no exception): compare the result with ``position`` to
        tell a timeout from a wake-up. Appends in this process wake waiters at
        once; appends by other processes are seen by polling every ``poll`` seconds.
        """
        return self.backend.wait_for_position(position, timeout, poll=poll)

    def threads(
        self,
        *,
        after: str | None = None,
        limit: int = 50,
        include_deleted: bool = False,
        activity: str | Sequence[str] | None = None,
        agent: str | None = None,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        created_after: Any = None,
        created_before: Any = None,
        updated_after: Any = None,
        updated_before: Any = None,
        roots: bool = False,
        has_children: bool | None = None,
        status: str | Sequence[str] | None = None,
    ) -> ThreadPage:
        """Threads by last update, newest first, ``limit`` per page; pass the page's
        ``cursor`` as ``after`` for the next. Filters (all given must hold):

        - ``activity``: ``"running"`` (an agent turn is open; the head's ``activity``
          says ``"active"``, also taken here), ``"interrupted"``, ``"waiting_tools"``,
          ``"waiting_approval"`` (the last agent turn ended on deferred tool calls; ``"waiting"``:
          either) or ``"idle"``; one or a list (see ``tplog.lifecycle``). ``status=`` is its old
          name, deprecated (a DeprecationWarning): a head's ``status`` is whether it is deleted;
        - ``agent``: an agent id that registered or ran a turn in the thread;
        - ``title``: a substring of the title (case-insensitive);
        - ``metadata``: ``{key: value}`` pairs the thread's metadata holds (equal values);
        - ``created_after``/``created_before``, ``updated_after``/``updated_before``:
          aware datetimes or the store's nanoseconds (after inclusive, before exclusive);
        - ``roots``: only threads with no ``spawned_from`` link; ``has_children``:
          only threads with (True) or without (False) spawned children.

        Scope: a :meth:`scoped` view lists its scope's threads only. Activity, agent
        and update range are answered from indexes. A bad value raises
        :class:`InvalidInputError` naming the filter."""
        check_page_limit(limit)
        if limit is None or limit <= 0:
            raise InvalidInputError("limit must be > 0")
        if after is not None and (not isinstance(after, str) or not after):
            raise InvalidInputError(f"after must be the cursor of a previous page, not {after!r}")
        activity = activity_argument(activity, status, "Store.threads")
        where = check_filter(activity=activity, agent=agent, title=title, metadata=metadata,  # type: ignore[arg-type]
                             created_after=created_after, created_before=created_before,
                             updated_after=updated_after, updated_before=updated_before, roots=roots,
                             has_children=has_children)
        return self.backend.threads(scope=self._scope, after=after, limit=limit, include_deleted=include_deleted,
                                    where=None if where.empty else where)

    def search(
        self,
        query: str,
        *,
        scope: str | None = None,
        limit: int = 20,
        after: str | None = None,
        syntax: Literal["words", "fts5"] = "words",
        activity: str | Sequence[str] | None = None,
        agent: str | None = None,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        created_after: Any = None,
        created_before: Any = None,
        updated_after: Any = None,
        updated_before: Any = None,
        roots: bool = False,
        has_children: bool | None = None,
    ) -> SearchPage:
        """Threads whose titles, prompts, responses, tool calls and returns or metadata
        (thinking with ``search_thinking``) match ``query``: one :class:`~tplog.search.SearchHit`
        per thread (its best match: turn, seq, field, highlighted snippet), best first
        (bm25), ``limit`` per page; pass the page's ``cursor`` as ``after`` for the next.

        ``query``: plain words, all required (``syntax="fts5"``: FTS5's query syntax; one it
        cannot parse raises :class:`~tplog.search.SearchQueryError`, as does an empty one or one
        over :data:`~tplog.search.MAX_QUERY` characters). ``scope``: search that scope (a view
        searches its own; another one raises :class:`InvalidInputError`). The filters are
        :meth:`threads`' and must all hold. The index is brought up to date with the log first
        (for at most half a second): the page's ``behind`` says how many log positions it
        still lacked (0: none). Deleted threads are never found."""
        check_page_limit(limit)
        if limit is None or limit <= 0:
            raise InvalidInputError("limit must be > 0")
        view = self
        if scope is not None and scope != self._scope:
            if self._scope is not None:
                raise InvalidInputError(f"a view of scope {self._scope!r} cannot search scope {scope!r}")
            view = self.scoped(scope)
        from tplog.lifecycle import matches
        from tplog.search import search

        where = check_filter(activity=activity, agent=agent, title=title,  # type: ignore[arg-type]
                             metadata=metadata, created_after=created_after, created_before=created_before,
                             updated_after=updated_after, updated_before=updated_before, roots=roots,
                             has_children=has_children)

        def keep(head: ThreadHead) -> bool:
            if not matches(where, head):
                return False
            return has_children is None or bool(view.children(head.thread_id, limit=1)) == has_children

        self._check_open()
        return search(view, self._root, query, limit=limit, after=after, syntax=syntax, keep=keep, slot=self._search)

    # ------------------------------------------------------------------ links (exact indexes)

    def incoming(
        self,
        thread_id: str,
        *,
        relation: str | None = None,
        limit: int | None = None,
        after: tuple[str, str] | None = None,
    ) -> list[tuple[str, str]]:
        """Threads that link to ``thread_id``: ``(source_thread_id, relation)`` pairs,
        one per link, declared at the source's start or added since (a thread that
        carries the same link twice is listed twice), ordered by relation, then by
        source key. Deleted sources are not listed; a deleted ``thread_id`` is still
        answered (its live sources' links are their history), as is one stored
        elsewhere that a stored thread links to; one neither stored nor linked to
        raises :class:`NotFoundError`.

        Page with ``limit`` and ``after=<the last pair of the previous page>``: the
        next page starts after every link of that pair, so a page never ends
        between two links of one pair (it holds more than ``limit`` pairs then)."""
        check_page_limit(limit)
        if after is not None:
            if (not isinstance(after, tuple) or len(after) != 2
                    or not all(isinstance(x, str) and x for x in after)):
                raise InvalidInputError(f"after must be a (source_thread_id, relation) pair, not {after!r}")
            if relation is not None and after[1] != relation:
                raise InvalidInputError(f"after names relation {after[1]!r}, but relation={relation!r} was asked")
        return self.backend.incoming(thread_id, scope=self._scope, relation=relation, after=after, limit=limit)

    def children(self, thread_id: str, *, limit: int | None = None, after: str | None = None) -> list[str]:
        """Threads spawned from ``thread_id`` (by their ``spawned_from`` link or the
        parent's thread_spawn event), ordered by key; page with ``after=<last child id>``.
        A deleted thread is nobody's child (whatever spawned it); the children of a
        deleted parent are those live threads whose own ``spawned_from`` link names it.
        A ``thread_id`` neither stored nor linked to raises :class:`NotFoundError`."""
        check_page_limit(limit)
        return self.backend.children(thread_id, scope=self._scope, after=after, limit=limit)

    # ------------------------------------------------------------------ projections (folds)

    def load(self, thread_id: str) -> FoldResult:
        """Fold the thread's log: its v0.0.4 document and the agent turn in progress.

        The fold of a recently loaded thread is kept in memory with the seq it
        covers (see ``fold_cache``): a later load reads and folds only the events
        appended since (by any process: the head says how far the log goes). A
        deleted thread is folded from its log (the tombstone alone). Treat the
        result as read-only: its turns are shared with the cache."""
        tk = thread_key(thread_id, self._scope)
        cache = self._folds
        folder = cache.take(tk) if cache.budget else None
        after = folder.seq if folder is not None else 0
        head, events = _fork.thread_events(self, thread_id, after)
        if folder is None or head.status != "active" or folder.seq > head.version:
            folder = Folder()
        folder.feed_all(events)
        res = folder.result()
        if cache.budget and head.status == "active":
            cache.give(tk, folder)
        return res

    def thread(self, thread_id: str) -> m.Thread:
        """The thread as a ThreadProtocol v0.0.4 document (canonical turns only)."""
        res = self.load(thread_id)
        if res.deleted:
            raise ThreadDeletedError(f"thread {thread_id} was deleted")
        if res.thread is None:  # pragma: no cover - ThreadStarted is always first
            raise NotFoundError(f"thread {thread_id} has no ThreadStarted event")
        return res.thread

    def _items(self, thread_id: str) -> list[Item]:
        return _fork.items(self, thread_id)

    def _state(self, thread_id: str) -> ThreadState:
        """The thread's id-only fold state: from the ``state`` projection when live,
        else folded from the thread's headers."""
        st = self.backend.thread_state(thread_id, scope=self._scope)
        return st if st is not None else state_of(self._items(thread_id))

    def pending(self, thread_id: str) -> PendingState:
        """Tool calls still waiting (deferred / executing) and those abandoned by an interruption."""
        return pending_of(self._state(thread_id))

    def interrupts(self, thread_id: str) -> InterruptState:
        """Whether and where the thread was interrupted, from recorded facts only."""
        return interrupts_of(self._state(thread_id))

    def rebuild(
        self,
        projection: str | None = None,
        *,
        verify: bool = False,
        progress: Callable[[str, int, int], None] | None = None,
        force: bool = False,
        chunk: int = CHUNK,
    ) -> list[RebuildReport]:
        """Rebuild one projection (or all) from the log; safe while other threads and
        processes append. With ``verify`` the live projection is left alone and every
        difference from a fresh rebuild is reported instead. One rebuild of a projection
        runs at a time (:class:`RebuildInProgressError` otherwise; the claim of one
        that died, however it died, is taken over); ``force`` takes over the claim of
        another one that still runs (e.g. stuck), which then stops without swapping
        anything in. ``chunk``: events folded
        per read snapshot and per write transaction (bounds memory and how long an
        append waits behind the rebuild; each chunk costs one commit)."""
        self._check_open()
        if projection == SEARCH:
            return [self._rebuild_search(verify, progress)]
        names = [projection] if projection is not None else list(PROJECTIONS)
        label = "+".join(names)
        cb = None if progress is None else (lambda done, total: progress(label, done, total))
        reports = self.backend.rebuild(names, verify=verify, progress=cb, force=force, chunk=chunk)
        if projection is None and self._search.exists(self._root):
            reports.append(self._rebuild_search(verify, progress))
        return reports

    def _rebuild_search(self, verify: bool, progress: Callable[[str, int, int], None] | None) -> RebuildReport:
        """The search index (``projection="search"``, tplog.search): rebuilt from the log, or with
        ``verify`` compared with a fresh build. Its ``events`` count log positions covered."""
        import time

        t0 = time.perf_counter()
        index = self._search.index(self._root)
        cb = None if progress is None else (lambda done, total: progress(SEARCH, done, total))
        if verify:
            diffs = index.differences()
            pos = index.position()
        else:
            diffs, pos = [], index.rebuild(cb)
        return RebuildReport(projection=SEARCH, verify=verify, events=pos, seconds=time.perf_counter() - t0,
                             position=pos, differences=diffs)

    def projections(self) -> dict[str, dict[str, Any]]:
        """Each projection's fold version, status and the log position it covers."""
        return {t.name: {"code_version": t.code_version, "version": t.version, "status": t.status,
                         "position": t.position[0]} for t in self.backend.tracking()}

    def links(self, thread_id: str) -> list[m.ThreadLink]:
        """The thread's outgoing links, in the order its export lists them: those declared
        in its ``ThreadStarted.relationships``, then those added (``LinkAdded``). A link
        to a thread deleted since stays listed (it is the source's history); a deleted
        thread has none."""
        return _fork.links(self, thread_id)

    def descendants(self, thread_id: str, *, max_depth: int | None = None) -> list[tuple[str, int]]:
        """Every thread spawned from ``thread_id``, transitively: ``(thread_id, depth)``,
        breadth-first; each thread once, so cycles end. ``max_depth`` limits the depth
        (0: no walk, no query). As :meth:`children`: deleted threads are nobody's child,
        a ``thread_id`` neither stored nor linked to raises :class:`NotFoundError`."""
        return self.backend.descendants(thread_id, scope=self._scope, max_depth=max_depth)

    def import_thread(self, thread: m.Thread, *, expected_version: ExpectedVersion = NO_STREAM) -> AppendResult:
        """Store a ThreadProtocol document as its history events (upgrade v0.0.3 first).

        The document is validated first (``tplog.validate``; unless the store was
        opened with ``check_rules=False``): one with errors raises
        :class:`ValidationError` (its ``report`` lists every finding) and nothing is
        written, so an import succeeds exactly when ``validate`` reports no error.
        By default the thread must not exist yet. ``export(thread_id)`` gives back a
        document with the same canonical hash.
        """
        from tplog.protocol.validate import validate

        if not isinstance(thread, m.Thread):
            raise InvalidInputError(f"import_thread takes a tplog.Thread, not a {type(thread).__name__}")
        if self.check_rules:
            validate(thread).raise_for_errors(f"thread {thread.thread_id}: ")
        return self.append(thread.thread_id, events_from_thread(thread), expected_version=expected_version)

    def export(self, thread_id: str) -> m.Thread:
        """The thread as a v0.0.4 document (same as :meth:`thread`)."""
        return self.thread(thread_id)

    # ------------------------------------------------------------------ maintenance

    def backup(self, dest: str, *, compact: bool = True) -> None:
        """A consistent copy of the live store into the empty directory ``dest`` (made if missing)."""
        self._check_open()
        self.backend.backup(dest, compact=compact)

    def sync(self) -> None:
        """Force everything committed so far to disk (useful in ``relaxed`` mode)."""
        self.backend.sync()

    def train_dictionary(self, *, samples: int = 2000, size: int = 64 << 10) -> int:
        """Train a zstd dictionary on up to ``samples`` stored event bodies; new values use it.

        Returns the new dictionary id (old values keep theirs). Returns 0 and
        trains nothing when the store holds fewer than 64 event bodies (of at
        most 64 KiB each): zstd's trainer needs many samples to find what recurs
        across values; from fewer it fails or gives a dictionary that does not help.
        """
        return self.backend.train_dictionary(samples=samples, size=size)

    def stats(self) -> dict[str, Any]:
        """Counts and sizes: threads, events, bytes, map size, per-table entries."""
        return self.backend.stats()

    def fold_cache_stats(self) -> dict[str, int]:
        """This process's fold cache (shared with the scoped views): ``hits`` and ``misses``
        (loads that found a thread's fold in it, or not), the ``events`` its folds cover
        and its ``budget`` (``fold_cache``). With ``fold_cache=0`` nothing is counted."""
        c = self._folds
        with c.lock:
            return {"hits": c.hits, "misses": c.misses, "events": c.events, "budget": c.budget}

    def verify(self, *, projections: bool = True) -> VerifyReport:
        """Check the whole store against itself (``tplog verify``); with ``projections``, the search
        index too (when it exists) against a fresh build from the log."""
        report = self.backend.verify(projections=projections)
        if projections and self._search.exists(self._root):
            report.problems += self._search.index(self._root).differences()
        return report
