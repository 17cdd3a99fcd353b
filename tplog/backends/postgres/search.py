"""The search index of a PostgreSQL store: a ``tsvector`` column with a GIN index in the store's schema.

The same catch-up projection as :mod:`tplog.search.index` (rows per event and field, the covered
log positions per scope recorded in the rows' transaction, a thread's deletion dropping its rows),
in three tables created on first use: ``search_rows`` (its ``tsv`` generated from the text with the
``simple`` configuration: no stemming, as FTS5's unicode61), ``search_threads`` (turn counts) and
``search_scopes``. Catch-up holds a transaction-scoped advisory lock, so of several servers one
indexes a stretch of the log at a time. Ranking is ``ts_rank``; snippets are ``ts_headline`` with
the same markers. ``syntax="fts5"`` queries go through ``websearch_to_tsquery`` (``OR``, ``-word``,
``"phrases"``), which never refuses a query.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from tplog import forklog
from tplog.backends.common import thread_key
from tplog.events import AgentTurnStarted, RecordedEvent, ThreadDeleted, UserTurnSubmitted
from tplog.search.extract import rows_of
from tplog.search.index import (
    BUDGET,
    MARK_END,
    MARK_START,
    STEP,
    Group,
    SearchIndex,
    compare,
    decode_cursor,
    encode_cursor,
    scope_key,
)

if TYPE_CHECKING:
    from tplog.backends.postgres.recorder import PostgresRecorder
    from tplog.store import Store

__all__ = ["PgSearchIndex"]

_DDL = """
CREATE TABLE IF NOT EXISTS search_scopes(scope text PRIMARY KEY, cursor text NOT NULL);
CREATE TABLE IF NOT EXISTS search_threads(tk text PRIMARY KEY, turn int NOT NULL);
CREATE TABLE IF NOT EXISTS search_rows(id bigserial PRIMARY KEY, scope text NOT NULL, tk text NOT NULL,
    thread_id text NOT NULL, turn int NOT NULL, seq bigint NOT NULL, field text NOT NULL, text text NOT NULL,
    tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED);
CREATE INDEX IF NOT EXISTS search_rows_tsv ON search_rows USING gin (tsv);
CREATE INDEX IF NOT EXISTS search_rows_tk ON search_rows (tk);
"""
_HEADLINE = f"StartSel={MARK_START}, StopSel={MARK_END}, MaxWords=24, MinWords=8, ShortWord=0, MaxFragments=1"


class PgSearchIndex:
    """:class:`tplog.search.index.SearchIndex`'s verbs over the store's own PostgreSQL schema."""

    def __init__(self, store: Store, *, thinking: bool = False) -> None:
        self.store = store
        self.thinking = thinking
        self.rec: PostgresRecorder = store.backend  # type: ignore[assignment]
        self._lock = threading.RLock()
        with self.rec._read() as conn:
            conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (self._lock_key,))
            try:
                conn.execute(_DDL.encode())
                meta = ("thinking", "1" if thinking else "0")
                conn.execute("CREATE TABLE IF NOT EXISTS search_meta(key text PRIMARY KEY, value text NOT NULL)")
                row = conn.execute("SELECT value FROM search_meta WHERE key = 'thinking'").fetchone()
                if row is None or row[0] != meta[1]:  # built with the other setting: from the log again
                    self._clear(conn)
                    conn.execute(
                        "INSERT INTO search_meta VALUES (%s, %s) ON CONFLICT (key) DO UPDATE "
                        "SET value = excluded.value",
                        meta,
                    )
            finally:
                conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (self._lock_key,))

    @property
    def _lock_key(self) -> str:
        return f"tplog:{self.rec.schema}:search"

    @staticmethod
    def _clear(conn: Any) -> None:
        conn.execute("TRUNCATE search_rows, search_threads, search_scopes")

    def close(self) -> None:
        pass  # the recorder's connections are the store's

    # ------------------------------------------------------------------ catch-up

    def _covered(self, conn: Any, sk: str) -> list[int]:
        row = conn.execute("SELECT cursor FROM search_scopes WHERE scope = %s", (sk,)).fetchone()
        have = [int(x) for x in row[0].split(",")] if row else []
        return (have + [0] * self.rec.logs)[: self.rec.logs]

    def behind(self, scope: str | None) -> int:
        with self.rec._read() as conn:
            covered = self._covered(conn, scope_key(scope))
        return sum(max(0, p - c) for p, c in zip(self.rec.positions(), covered, strict=False))

    def catch_up(
        self, scope: str | None, *, budget: float | None = BUDGET, until: tuple[int, ...] | None = None
    ) -> int:
        sk = scope_key(scope)
        deadline = None if budget is None else time.monotonic() + budget
        view = self.store if scope is None else self.store.scoped(scope)
        with self._lock:
            while True:
                target = until or self.rec.positions()
                with self.rec._read() as conn, conn.transaction():
                    row = conn.execute(
                        "SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 0))", (self._lock_key,)
                    ).fetchone()
                    if row is None or not row[0]:  # another process indexes: answer as we are
                        break
                    covered = self._covered(conn, sk)
                    if all(c >= t for c, t in zip(covered, target, strict=False)):
                        break
                    self._step(conn, view, sk, covered, target)
                if deadline is not None and time.monotonic() > deadline:
                    break
        return self.behind(scope)

    def _step(self, conn: Any, view: Store, sk: str, covered: list[int], target: tuple[int, ...]) -> None:
        rows: list[tuple[Any, ...]] = []
        turns: dict[str, int] = {}
        for log, (have, want) in enumerate(zip(covered, target, strict=False)):
            if have >= want:
                continue
            raw = self.rec.read_log(log, after=have, limit=STEP, scope=view.scope)
            raw = [e for e in raw if e.position <= want]
            for e in forklog.expand(view, raw):
                self._add(conn, e, sk, view.scope, rows, turns)
            covered[log] = raw[-1].position if len(raw) == STEP else want
        self._flush(conn, rows, turns)
        conn.execute(
            "INSERT INTO search_scopes VALUES (%s, %s) ON CONFLICT (scope) DO UPDATE SET cursor = excluded.cursor",
            (sk, ",".join(map(str, covered))),
        )

    def _add(
        self,
        conn: Any,
        e: RecordedEvent,
        sk: str,
        scope: str | None,
        rows: list[tuple[Any, ...]],
        turns: dict[str, int],
    ) -> None:
        tk = thread_key(e.thread_id, scope).hex()
        ev = e.event
        if isinstance(ev, ThreadDeleted):
            self._flush(conn, rows, turns)
            conn.execute("DELETE FROM search_rows WHERE tk = %s", (tk,))
            conn.execute("DELETE FROM search_threads WHERE tk = %s", (tk,))
            turns.pop(tk, None)
            return
        turn = turns.get(tk)
        if turn is None:
            row = (
                None if e.seq == 1 else conn.execute("SELECT turn FROM search_threads WHERE tk = %s", (tk,)).fetchone()
            )
            turn = row[0] if row else 0
        if isinstance(ev, (UserTurnSubmitted, AgentTurnStarted)):
            turn += 1
        turns[tk] = turn
        for field, text in rows_of(ev, thinking=self.thinking):
            rows.append(
                (
                    sk,
                    tk,
                    e.thread_id,
                    0 if field in ("title", "metadata") else turn,
                    e.seq,
                    field,
                    text.replace("\x00", ""),
                )
            )  # PostgreSQL text holds no NUL

    @staticmethod
    def _flush(conn: Any, rows: list[tuple[Any, ...]], turns: dict[str, int]) -> None:
        with conn.cursor() as cur:
            if rows:
                cur.executemany(
                    "INSERT INTO search_rows(scope, tk, thread_id, turn, seq, field, text) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    rows,
                )
            if turns:
                cur.executemany(
                    "INSERT INTO search_threads VALUES (%s, %s) ON CONFLICT (tk) DO UPDATE SET turn = excluded.turn",
                    list(turns.items()),
                )
        rows.clear()

    # ------------------------------------------------------------------ queries

    @staticmethod
    def _tsquery(match: str, words: bool) -> tuple[str, list[str]]:
        """The SQL of the query (and its parameters): every token a phrase, all required; or websearch."""
        if not words:
            return "websearch_to_tsquery('simple', %s)", [match]
        toks = match.split()
        return " && ".join(["phraseto_tsquery('simple', %s)"] * len(toks)), toks

    def groups(self, scope: str | None, query: str, *, syntax: str, after: str | None = None) -> Iterator[Group]:
        q_sql, q_args = self._tsquery(query, syntax == "words")
        last = decode_cursor(after) if after is not None else None
        sql = (
            f"WITH q AS (SELECT {q_sql} AS q), m AS (SELECT r.id, r.tk, r.thread_id, ts_rank(r.tsv, q.q) AS "
            "score FROM search_rows r, q WHERE r.scope = %s AND r.tsv @@ q.q) "
            "SELECT tk, min(thread_id), (array_agg(id ORDER BY score DESC, id))[1], max(score)::float8, "
            "count(*) FROM m GROUP BY tk"
        )
        args: list[Any] = [*q_args, scope_key(scope)]
        if last is not None:
            sql += " HAVING max(score)::float8 < %s OR (max(score)::float8 = %s AND tk > %s)"
            args += [last[0], last[0], last[1]]
        sql += " ORDER BY 4 DESC, 1"
        with self.rec._read() as conn:
            found = conn.execute(sql.encode(), args).fetchall()
        for tk, tid, rid, score, n in found:
            yield Group(thread_id=tid, row=rid, score=score, matches=n, cursor=encode_cursor(score, tk))

    def best_row(self, query: str, syntax: str, rid: int) -> tuple[int, int, str, str]:
        q_sql, q_args = self._tsquery(query, syntax == "words")
        with self.rec._read() as conn:
            row = conn.execute(
                f"SELECT turn, seq, field, ts_headline('simple', text, {q_sql}, %s) FROM search_rows "
                "WHERE id = %s".encode(),
                [*q_args, _HEADLINE, rid],
            ).fetchone()
        assert row is not None  # the row of a group just found
        return row[0], row[1], row[2], row[3]

    # ------------------------------------------------------------------ rebuild and verify

    def scopes(self) -> list[str | None]:
        with self.rec._read() as conn:
            keys = [r[0] for r in conn.execute("SELECT scope FROM search_scopes ORDER BY scope")]
        return [None, *[k for k in keys if k]]

    def position(self) -> int:
        with self.rec._read() as conn:
            return self._covered(conn, "")[0]

    def rebuild(self, progress: Callable[[int, int], None] | None = None) -> int:
        scopes = self.scopes()
        with self.rec._read() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (self._lock_key,))
            self._clear(conn)
        for i, scope in enumerate(scopes):
            self.catch_up(scope, budget=None)
            if progress is not None:
                progress(i + 1, len(scopes))
        return self.position()

    def rows(self, scope: str | None) -> dict[tuple[str, int, str], tuple[str, int, str]]:
        with self.rec._read() as conn:
            return {
                (tk, seq, f): (tid, turn, text)
                for tk, tid, turn, seq, f, text in conn.execute(
                    "SELECT tk, thread_id, turn, seq, field, text FROM search_rows WHERE scope = %s",
                    (scope_key(scope),),
                )
            }

    def differences(self) -> list[str]:
        out: list[str] = []
        for scope in self.scopes():
            self.catch_up(scope, budget=None)
            with self.rec._read() as conn:
                until = tuple(self._covered(conn, scope_key(scope)))
            fresh = SearchIndex(self.store, None, thinking=self.thinking)  # SQLite in memory: the same rows
            try:
                fresh.catch_up(scope, budget=None, until=until)
                out += compare(scope, self.rows(scope), fresh.rows(scope))
            finally:
                fresh.close()
        return out
