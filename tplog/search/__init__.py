"""Full-text search over a store's threads (``Store.search``, ``tplog search``, ``GET /threads?q=``).

The index is a catch-up projection: in SQLite FTS5 (:mod:`tplog.search.index`) beside an
LMDB store in ``<store>/search.sqlite``, or in memory for ``"memory:"`` (built from the log on a
process's first search); a PostgreSQL store keeps its own in its schema (``tsvector``,
:mod:`tplog.backends.postgres.search`). A search first catches its scope's rows
up with the log for at most :data:`~tplog.search.index.BUDGET` seconds, then answers one
hit per thread, best first (bm25), from the caller's scope only.

Queries are words by default (``syntax="words"``): every whitespace-separated token is
matched as a phrase of its own (``delete_file`` finds the tool, ``refund`` the word), all
of them required. ``syntax="fts5"`` passes the query to FTS5 as written (``refund OR
chargeback``, ``"exact phrase"``, ``pay*``); one it cannot parse raises
:class:`SearchQueryError` naming it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, Literal

import msgspec

from tplog.backends.contract import ThreadHead
from tplog.errors import InvalidInputError
from tplog.search.index import MARK_END, MARK_START, Index, SearchIndex, SearchQueryError, words

if TYPE_CHECKING:
    from tplog.store import Store

__all__ = [
    "INDEX_FILE",
    "MARK_END",
    "MARK_START",
    "MAX_QUERY",
    "SearchHit",
    "SearchIndex",
    "SearchPage",
    "SearchQueryError",
    "SearchSlot",
    "search",
    "words",
]

INDEX_FILE: Final = "search.sqlite"
MAX_QUERY: Final = 1000  # characters: longer is a SearchQueryError (nobody types it; it would only cost)


class SearchHit(msgspec.Struct, frozen=True, kw_only=True):
    """A thread's best match. ``turn`` numbers the thread's turns from 1 (0: a title or metadata
    row), ``seq`` is the event's; ``field`` is what matched (``title``, ``metadata``, ``prompt``,
    ``response``, ``thinking``, ``tool_call``, ``tool_return``); ``snippet`` is FTS5's excerpt of it
    with each match between :data:`MARK_START` and :data:`MARK_END` (escape the text, then replace
    them with ``<mark>``/``</mark>``); ``score`` is bm25's relevance (higher is better);
    ``matches`` counts the thread's matching rows; ``head`` is the thread's head when answered."""

    thread_id: str
    turn: int
    seq: int
    field: str
    snippet: str
    score: float
    matches: int
    head: ThreadHead


class SearchPage(msgspec.Struct, frozen=True):
    """One page of hits, best first; pass ``cursor`` back as ``after`` for the next (``None``: the last
    page). ``behind``: log positions the index had not yet covered when it answered (0: up to date)."""

    hits: list[SearchHit]
    cursor: str | None
    behind: int


class SearchSlot:
    """Where a store keeps its index: opened on first use (views share it), closed with the store."""

    def __init__(self, directory: str | None, *, thinking: bool = False) -> None:
        self.directory = directory
        self.thinking = thinking
        self._index: Index | None = None
        self._lock = threading.Lock()

    def exists(self, store: Store) -> bool:
        """Whether the store has an index to rebuild or verify (without making one)."""
        if self._index is not None:
            return True
        own = getattr(store.backend, "search_index_exists", None)
        if callable(own):
            return bool(own())
        return self.directory is not None and os.path.exists(os.path.join(self.directory, INDEX_FILE))

    def index(self, store: Store) -> Index:
        with self._lock:
            if self._index is None:
                self._index = self._open(store)
            return self._index

    def _open(self, store: Store) -> Index:
        import sqlite3

        own = getattr(store.backend, "search_index", None)  # a backend with an index of its own (PostgreSQL)
        if callable(own):
            index: Index = own(store, thinking=self.thinking)
            return index
        if self.directory is not None:
            try:
                return SearchIndex(store, os.path.join(self.directory, INDEX_FILE), thinking=self.thinking)
            except sqlite3.OperationalError:  # a directory this process cannot write (read-only): in memory
                pass
        return SearchIndex(store, None, thinking=self.thinking)

    def close(self) -> None:
        with self._lock:
            if self._index is not None:
                self._index.close()
                self._index = None


def search(
    store: Store,
    root: Store,
    query: str,
    *,
    limit: int,
    after: str | None,
    syntax: Literal["words", "fts5"],
    keep: Callable[[ThreadHead], bool],
    slot: SearchSlot,
) -> SearchPage:
    """What :meth:`tplog.store.Store.search` answers, for ``store``'s scope (``root``: the unscoped store,
    whose backend the index reads)."""
    if not isinstance(query, str):
        raise InvalidInputError(f"query must be a string, not {type(query).__name__}")
    if syntax not in ("words", "fts5"):
        raise InvalidInputError(f"syntax must be 'words' or 'fts5', not {syntax!r}")
    if not query.strip():
        raise SearchQueryError("search query is empty: give at least one word", query=query)
    if len(query) > MAX_QUERY:
        raise SearchQueryError(
            f"search query of {len(query)} characters is over the limit of {MAX_QUERY}", query=query[:60] + "…"
        )
    if after is not None and (not isinstance(after, str) or not after):
        raise InvalidInputError(f"after must be the cursor of a previous search page, not {after!r}")
    index = slot.index(root)
    scope = store.scope
    behind = index.catch_up(scope)
    hits: list[SearchHit] = []
    cursor: str | None = None
    last = ""
    for g in index.groups(scope, query, syntax=syntax, after=after):
        head = store.backend.head(g.thread_id, scope=scope)
        if head is None or head.status != "active" or not keep(head):
            continue
        if len(hits) == limit:  # one more exists: the page ends here
            cursor = last
            break
        turn, seq, field, snippet = index.best_row(query, syntax, g.row)
        hits.append(
            SearchHit(
                thread_id=head.thread_id,
                turn=turn,
                seq=seq,
                field=field,
                snippet=snippet,
                score=g.score,
                matches=g.matches,
                head=head,
            )
        )
        last = g.cursor
    return SearchPage(hits, cursor, behind)
