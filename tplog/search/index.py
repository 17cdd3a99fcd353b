"""The search index: SQLite FTS5 over the log, a catch-up projection kept outside the store.

Appends never touch it. Each scope's rows are brought up to date from the log (the
backend's ``read_log`` for that scope, forks expanded as :mod:`tplog.forklog` gives them
to every catch-up reader) when a search of that scope runs, within a time budget, and
the log positions covered are recorded per scope in the same SQLite transaction as the
rows (as the store's own projections record theirs), so a crash never indexes an event
twice or skips one. A ``ThreadDeleted`` in the log removes the thread's rows.

Tables: ``rows`` (one per event and field: scope, thread key, id, turn, seq, field, text),
``docs`` (the FTS5 index over ``rows.text``, external content: the text is stored once),
``threads`` (each thread's turn count so far, for the turn numbers of later events),
``scopes`` (each scope's covered positions, one per log) and ``meta``. Several processes
may share the file: catch-up takes SQLite's write lock (``BEGIN IMMEDIATE``) and re-reads
the covered positions under it; one that finds the lock taken answers from what is
indexed and says how far behind that is. All scopes share the tables: a query ranks every
scope's matching rows and keeps the caller's (one file, at the cost of other tenants' matches).
"""

from __future__ import annotations

import base64
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Final, Protocol

import msgspec

from tplog import forklog
from tplog.backends.common import thread_key
from tplog.errors import InvalidInputError
from tplog.events import AgentTurnStarted, RecordedEvent, ThreadDeleted, UserTurnSubmitted
from tplog.search.extract import rows_of

if TYPE_CHECKING:
    from tplog.store import Store

__all__ = [
    "BUDGET",
    "FORMAT",
    "MARK_END",
    "MARK_START",
    "STEP",
    "TOP_ROWS",
    "Group",
    "Index",
    "SearchIndex",
    "SearchQueryError",
    "compare",
    "decode_cursor",
    "encode_cursor",
    "scope_key",
    "words",
]

FORMAT: Final = "1"  # the index's layout and extraction rules: another value is rebuilt from the log
MARK_START: Final = "\ue000"  # snippet highlight markers (private-use code points: never in escaped HTML)
MARK_END: Final = "\ue001"
BUDGET: Final = 0.5  # seconds a search may spend catching the index up before it answers
STEP: Final = 512  # log entries read per catch-up step
TOP_ROWS: Final = 512  # best matching rows a query reads before it ranks and groups every match

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS scopes(scope TEXT PRIMARY KEY, cursor TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS threads(tk TEXT PRIMARY KEY, turn INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS rows(id INTEGER PRIMARY KEY, scope TEXT NOT NULL, tk TEXT NOT NULL,
    thread_id TEXT NOT NULL, turn INTEGER NOT NULL, seq INTEGER NOT NULL, field TEXT NOT NULL, text TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS rows_tk ON rows(tk);
CREATE VIRTUAL TABLE IF NOT EXISTS docs USING fts5(text, content='rows', content_rowid='id',
    tokenize='unicode61 remove_diacritics 2');
"""

_cursor_enc = msgspec.msgpack.Encoder()
_cursor_dec = msgspec.msgpack.Decoder(tuple[float, str])


class SearchQueryError(InvalidInputError):
    """A search query the full-text engine cannot parse (FTS5 syntax), or an empty or too long one;
    ``query`` is the query as given."""

    def __init__(self, message: str, *, query: str) -> None:
        super().__init__(message)
        self.query = query


class Group(msgspec.Struct, frozen=True, kw_only=True):
    """One thread's matches: its best row (``row``: its id), its score (-bm25) and how many rows matched."""

    thread_id: str
    row: int
    score: float
    matches: int
    cursor: str


def scope_key(scope: str | None) -> str:
    return "" if scope is None else scope  # a scope is never empty (Store.scoped), so "" is the unscoped store


def words(query: str) -> str:
    """``query`` as an FTS5 expression of plain words: each token a quoted phrase, all required."""
    return " ".join('"' + t.replace('"', '""') + '"' for t in query.split())


class Index(Protocol):
    """What a search index does (:class:`SearchIndex` in SQLite; PostgreSQL's in its backend)."""

    def catch_up(
        self, scope: str | None, *, budget: float | None = ..., until: tuple[int, ...] | None = ...
    ) -> int: ...

    def groups(self, scope: str | None, query: str, *, syntax: str, after: str | None = None) -> Iterator[Group]: ...

    def best_row(self, query: str, syntax: str, rid: int) -> tuple[int, int, str, str]: ...

    def rebuild(self, progress: Callable[[int, int], None] | None = None) -> int: ...

    def differences(self) -> list[str]: ...

    def position(self) -> int: ...

    def rows(self, scope: str | None) -> dict[tuple[str, int, str], tuple[str, int, str]]: ...

    def behind(self, scope: str | None) -> int: ...

    def close(self) -> None: ...


def encode_cursor(score: float, tk: str) -> str:
    return base64.urlsafe_b64encode(_cursor_enc.encode((score, tk))).decode().rstrip("=")


def decode_cursor(after: str) -> tuple[float, str]:
    try:
        return _cursor_dec.decode(base64.urlsafe_b64decode(after + "=" * (-len(after) % 4)))
    except (ValueError, msgspec.DecodeError):
        raise InvalidInputError(f"after must be the cursor of a previous search page, not {after!r}") from None


class SearchIndex:
    """The index of one store, in the SQLite file ``path`` (``None``: in memory, this process only).

    ``thinking``: index thinking parts too (an index built with the other setting is
    rebuilt from the log when opened). Thread-safe (one connection behind a lock)."""

    def __init__(self, store: Store, path: str | None, *, thinking: bool = False) -> None:
        self.store = store
        self.path = path
        self.thinking = thinking
        self._lock = threading.RLock()
        self._db = self._connect(path)

    def _connect(self, path: str | None) -> sqlite3.Connection:
        db = sqlite3.connect(path or ":memory:", isolation_level=None, check_same_thread=False, timeout=5.0)
        if path is not None:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")  # a lost tail is caught up again from the log
        db.executescript(_SCHEMA)
        want = {"format": FORMAT, "thinking": "1" if self.thinking else "0"}
        have = dict(db.execute("SELECT key, value FROM meta").fetchall())
        if have != want:
            db.execute("BEGIN IMMEDIATE")
            if dict(db.execute("SELECT key, value FROM meta").fetchall()) != want:
                self._clear(db)
                db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", list(want.items()))
            db.execute("COMMIT")
        return db

    @staticmethod
    def _clear(db: sqlite3.Connection) -> None:
        db.execute("INSERT INTO docs(docs) VALUES ('delete-all')")
        for t in ("rows", "threads", "scopes"):
            db.execute(f"DELETE FROM {t}")  # fixed table names

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # ------------------------------------------------------------------ catch-up

    def _covered(self, sk: str) -> list[int]:
        row = self._db.execute("SELECT cursor FROM scopes WHERE scope = ?", (sk,)).fetchone()
        logs = self.store.backend.logs
        have = [int(x) for x in row[0].split(",")] if row else []
        return (have + [0] * logs)[:logs]

    def behind(self, scope: str | None) -> int:
        """Log positions (summed over the logs, every scope's) not yet covered for ``scope``."""
        with self._lock:
            covered = self._covered(scope_key(scope))
        return sum(max(0, p - c) for p, c in zip(self.store.backend.positions(), covered, strict=False))

    def catch_up(
        self, scope: str | None, *, budget: float | None = BUDGET, until: tuple[int, ...] | None = None
    ) -> int:
        """Index ``scope``'s log entries not yet covered, for at most ``budget`` seconds (``None``: to the
        end, or to the positions ``until``); returns :meth:`behind`. The write lock taken by another
        process for longer than the budget leaves the index as it is."""
        sk = scope_key(scope)
        deadline = None if budget is None else time.monotonic() + budget
        view = self.store if scope is None else self.store.scoped(scope)
        with self._lock:
            while True:
                target = until or self.store.backend.positions()
                if all(c >= t for c, t in zip(self._covered(sk), target, strict=False)):
                    break
                self._db.execute(f"PRAGMA busy_timeout = {int(1000 * (budget if budget is not None else 60))}")
                try:
                    self._db.execute("BEGIN IMMEDIATE")
                except sqlite3.OperationalError:  # another process holds the write lock: answer as we are
                    break
                try:
                    self._step(view, sk, target)
                    self._db.execute("COMMIT")
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                if deadline is not None and time.monotonic() > deadline:
                    break
        if until is not None:
            with self._lock:
                covered = self._covered(sk)
            return sum(max(0, p - c) for p, c in zip(until, covered, strict=False))
        return self.behind(scope)

    def _step(self, view: Store, sk: str, target: tuple[int, ...]) -> None:
        """One read of each log that is behind ``target``, indexed, and the new positions recorded."""
        covered = self._covered(sk)
        backend = view.backend
        batch = _Batch(self._db, sk, view.scope, self.thinking)
        for log, (have, want) in enumerate(zip(covered, target, strict=False)):
            if have >= want:
                continue
            raw = backend.read_log(log, after=have, limit=STEP, scope=view.scope)
            raw = [e for e in raw if e.position <= want]
            for e in forklog.expand(view, raw):
                batch.add(e)
            full = len(raw) == STEP
            covered[log] = raw[-1].position if full else want
        batch.flush()
        self._db.execute("INSERT OR REPLACE INTO scopes VALUES (?, ?)", (sk, ",".join(map(str, covered))))

    # ------------------------------------------------------------------ queries

    def groups(self, scope: str | None, query: str, *, syntax: str, after: str | None = None) -> Iterator[Group]:
        """``scope``'s threads with rows matching ``query`` (``syntax``: ``"words"`` or ``"fts5"``), best
        first (bm25, then thread key), after the ``after`` cursor.

        A page needs the best rows only: the ``TOP_ROWS`` best matching rows first (FTS5's ``ORDER BY
        rank LIMIT``: no join, no grouping of every match), each thread in order of its first row
        there; a thread is certain once its best row scores strictly better than the last row read
        (no row left unread can beat it). If the page needs more, the query that ranks and groups
        every match answers the rest, as exactly (:meth:`_all_groups`)."""
        match = words(query) if syntax == "words" else query
        sk = scope_key(scope)
        last = decode_cursor(after) if after is not None else None
        done = (-last[0], last[1]) if last is not None else None  # (bm25, tk) of the last thread given
        with self._lock:
            try:  # parsed on its own first, so that only the query's own faults become SearchQueryError
                self._db.execute("SELECT rowid FROM docs WHERE docs MATCH ? LIMIT 1", (match,)).fetchall()
            except sqlite3.OperationalError as exc:
                raise SearchQueryError(f"search query {query!r} is not valid: {exc}", query=query) from exc
            top = self._db.execute(
                "SELECT d.id, d.score, r.scope, r.tk, r.thread_id FROM (SELECT rowid AS id, rank AS score FROM docs "
                "WHERE docs MATCH ? ORDER BY rank LIMIT ?) d JOIN rows r ON r.id = d.id", (match, TOP_ROWS)
            ).fetchall()
        every = len(top) < TOP_ROWS  # every matching row was read
        cut = max((row[1] for row in top), default=0.0)
        best: dict[str, tuple[float, int, str]] = {}
        for rid, score, row_scope, tk, tid in top:
            if row_scope == sk and (tk not in best or score < best[tk][0]):
                best[tk] = (score, rid, tid)
        given = done
        for score, tk, rid, tid in sorted((v[0], tk, v[1], v[2]) for tk, v in best.items()):
            if not every and score >= cut:
                break  # a row not read may tie it or belong to a thread that sorts before it
            if done is not None and (score, tk) <= done:
                continue
            given = (score, tk)
            yield Group(thread_id=tid, row=rid, score=-score, matches=self._matches(match, tk),
                        cursor=encode_cursor(-score, tk))
        if not every:
            yield from self._all_groups(match, sk, given)

    def _matches(self, match: str, tk: str) -> int:
        with self._lock:
            return int(self._db.execute(
                "SELECT count(*) FROM docs WHERE docs MATCH ? AND rowid IN (SELECT id FROM rows WHERE tk = ?)",
                (match, tk)).fetchone()[0])

    def _all_groups(self, match: str, sk: str, done: tuple[float, str] | None) -> Iterator[Group]:
        """Every matching row ranked and grouped by thread: the threads after ``done`` (bm25, tk)."""
        sql = (
            "WITH d AS MATERIALIZED (SELECT rowid AS id, bm25(docs) AS score FROM docs WHERE docs MATCH ?) "
            "SELECT r.tk, r.thread_id, d.id, min(d.score) AS best, count(*) FROM d "
            "JOIN rows r ON r.id = d.id WHERE r.scope = ? GROUP BY r.tk"
        )
        args: list[Any] = [match, sk]
        if done is not None:
            sql += " HAVING min(d.score) > ? OR (min(d.score) = ? AND r.tk > ?)"
            args += [done[0], done[0], done[1]]
        sql += " ORDER BY best, r.tk"
        with self._lock:
            found = self._db.execute(sql, args).fetchall()
        for tk, tid, rid, best, n in found:  # rid: the best row's (SQLite's bare column beside min())
            yield Group(thread_id=tid, row=rid, score=-best, matches=n, cursor=encode_cursor(-best, tk))

    def best_row(self, query: str, syntax: str, rid: int) -> tuple[int, int, str, str]:
        """Row ``rid``'s turn, seq, field and snippet of its matches of ``query``."""
        match = words(query) if syntax == "words" else query
        with self._lock:
            turn, seq, field = self._db.execute("SELECT turn, seq, field FROM rows WHERE id = ?", (rid,)).fetchone()
            row = self._db.execute(
                "SELECT snippet(docs, 0, ?, ?, '…', 16) FROM docs WHERE docs MATCH ? AND rowid = ?",
                (MARK_START, MARK_END, match, rid),
            ).fetchone()
        return turn, seq, field, row[0] if row else ""

    # ------------------------------------------------------------------ rebuild and verify

    def scopes(self) -> list[str | None]:
        with self._lock:
            keys = [r[0] for r in self._db.execute("SELECT scope FROM scopes ORDER BY scope")]
        return [None, *[k for k in keys if k]]

    def rebuild(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Every known scope's rows dropped and indexed again from the log; the position reached (log 0)."""
        scopes = self.scopes()
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            self._clear(self._db)
            self._db.execute("COMMIT")
            for i, scope in enumerate(scopes):
                self.catch_up(scope, budget=None)
                if progress is not None:
                    progress(i + 1, len(scopes))
            return self._covered("")[0]

    def position(self) -> int:
        """The log-0 position the unscoped store's rows cover."""
        with self._lock:
            return self._covered("")[0]

    def rows(self, scope: str | None) -> dict[tuple[str, int, str], tuple[str, int, str]]:
        """``scope``'s rows: (thread key, seq, field) → (thread id, turn, text)."""
        with self._lock:
            return {
                (tk, seq, f): (tid, turn, text)
                for tk, tid, turn, seq, f, text in self._db.execute(
                    "SELECT tk, thread_id, turn, seq, field, text FROM rows WHERE scope = ?", (scope_key(scope),)
                )
            }

    def differences(self) -> list[str]:
        """Every row where this index and one built afresh from the log disagree (each known scope,
        both at the same positions), and what FTS5's own integrity check finds."""
        out: list[str] = []
        with self._lock:
            try:
                self._db.execute("INSERT INTO docs(docs, rank) VALUES ('integrity-check', 1)")
            except sqlite3.DatabaseError as exc:
                out.append(f"search: the full-text index does not match its rows ({exc})")
        for scope in self.scopes():
            self.catch_up(scope, budget=None)
            with self._lock:
                until = tuple(self._covered(scope_key(scope)))
            fresh = SearchIndex(self.store, None, thinking=self.thinking)
            try:
                fresh.catch_up(scope, budget=None, until=until)
                out += compare(scope, self.rows(scope), fresh.rows(scope))
            finally:
                fresh.close()
        return out


class _Batch:
    """One catch-up step's rows, written with one ``executemany`` per table (ids given here, so the
    FTS rows need no lookup); a thread's deletion first writes what came before it."""

    def __init__(self, db: sqlite3.Connection, sk: str, scope: str | None, thinking: bool) -> None:
        self.db, self.sk, self.scope, self.thinking = db, sk, scope, thinking
        self.next_id = db.execute("SELECT coalesce(max(id), 0) + 1 FROM rows").fetchone()[0]
        self.rows: list[tuple[Any, ...]] = []
        self.turns: dict[str, int] = {}
        self.keys: dict[str, str] = {}

    def add(self, e: RecordedEvent) -> None:
        tk = self.keys.get(e.thread_id)
        if tk is None:
            tk = self.keys[e.thread_id] = thread_key(e.thread_id, self.scope).hex()
        ev = e.event
        if isinstance(ev, ThreadDeleted):
            self.flush()
            self.drop(tk)
            self.turns.pop(tk, None)
            return
        turn = self.turns.get(tk)
        if turn is None and e.seq == 1:  # a new thread (or a fork's start): no turns yet, nothing to look up
            turn = 0
        elif turn is None:
            row = self.db.execute("SELECT turn FROM threads WHERE tk = ?", (tk,)).fetchone()
            turn = row[0] if row else 0
        if isinstance(ev, (UserTurnSubmitted, AgentTurnStarted)):
            turn += 1
        self.turns[tk] = turn
        for field, text in rows_of(ev, thinking=self.thinking):
            self.rows.append(
                (
                    self.next_id,
                    self.sk,
                    tk,
                    e.thread_id,
                    0 if field in ("title", "metadata") else turn,
                    e.seq,
                    field,
                    text,
                )
            )
            self.next_id += 1

    def flush(self) -> None:
        db = self.db
        db.executemany(
            "INSERT INTO rows(id, scope, tk, thread_id, turn, seq, field, text) VALUES (?,?,?,?,?,?,?,?)", self.rows
        )
        db.executemany("INSERT INTO docs(rowid, text) VALUES (?, ?)", [(r[0], r[7]) for r in self.rows])
        db.executemany("INSERT OR REPLACE INTO threads VALUES (?, ?)", list(self.turns.items()))
        self.rows = []

    def drop(self, tk: str) -> None:
        db = self.db
        db.executemany(
            "INSERT INTO docs(docs, rowid, text) VALUES ('delete', ?, ?)",
            db.execute("SELECT id, text FROM rows WHERE tk = ?", (tk,)).fetchall(),
        )
        db.execute("DELETE FROM rows WHERE tk = ?", (tk,))
        db.execute("DELETE FROM threads WHERE tk = ?", (tk,))


def compare(scope: str | None, live: dict[Any, Any], fresh: dict[Any, Any]) -> list[str]:
    where = "" if scope is None else f" (scope {scope!r})"
    out: list[str] = []
    for key in sorted(live.keys() | fresh.keys()):
        _tk, seq, field = key
        tid = (live.get(key) or fresh[key])[0]
        if key not in live:
            out.append(f"search{where}: thread {tid} seq {seq} {field}: missing from the index")
        elif key not in fresh:
            out.append(f"search{where}: thread {tid} seq {seq} {field}: indexed, but not in the log")
        elif live[key] != fresh[key]:
            out.append(
                f"search{where}: thread {tid} seq {seq} {field}: indexed as {live[key][1:]!r}, "
                f"the log gives {fresh[key][1:]!r}"
            )
    return out
