"""The PostgreSQL schema: DDL, its version row, and the Citus distribution (when present).

Every table's primary key begins with ``log_id``, the distribution column on Citus:
a thread, its events, its head, its projection rows and the links *to* it live in
one log, so an append is a single-shard transaction there. No column takes its
value from a sequence: positions come from the per-log counter row (see
``recorder.py`` for why). ``meta`` and ``tracking`` are store-wide (reference
tables on Citus).
"""

from __future__ import annotations

import re
from typing import Any, Final

__all__ = ["SCHEMA_VERSION", "TABLES", "DISTRIBUTED", "ddl", "citus_ddl", "check_schema_name"]

#: Bumped with every change to the DDL; an older schema is upgraded by ``migrate``.
SCHEMA_VERSION: Final = 3

_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

#: Tables distributed by ``log_id`` on Citus, colocated with ``events``.
DISTRIBUTED: Final = ("events", "heads", "logs", "links", "children", "states", "blobs")
TABLES: Final = ("meta", "tracking", *DISTRIBUTED)


#: Threads by activity and by agent (what filtered listings use; tplog.lifecycle): the
#: head's activity code and agent ids, kept beside it by every head write.
_FINDER: Final = [
    "ALTER TABLE heads ADD COLUMN activity smallint NOT NULL DEFAULT 0, ADD COLUMN agents text[] NOT NULL DEFAULT '{}'",
    "CREATE INDEX heads_activity ON heads (scope, activity, updated_ns DESC, tk DESC)",
    "CREATE INDEX heads_agents ON heads USING gin (agents)",
]


#: Upgrades: the statements taking version N to N + 1 (run with ``search_path`` set to the schema).
#: A new schema gets them from :func:`ddl` too, so both ways end with the same tables.
MIGRATIONS: Final[dict[int, list[str]]] = {
    # 2: where a thread lives, whatever its log (a child inherits its parent's log, so the
    # log is no longer a function of the id alone; looked up once per thread and cached).
    1: ["CREATE INDEX heads_tk ON heads (scope, tk)"],
    # 3: the finder columns (threads written before list as idle with no agents until their next append).
    2: list(_FINDER),
}


def check_schema_name(name: str) -> str:
    from tplog.errors import InvalidInputError

    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidInputError(f"PostgreSQL schema name must match {_NAME.pattern}, not {name!r}")
    return name




def ddl(schema: str, logs: int) -> list[str]:
    """The statements creating schema version :data:`SCHEMA_VERSION` in ``schema`` (run in one transaction)."""
    return [
        f"CREATE SCHEMA IF NOT EXISTS {schema}",
        f"SET LOCAL search_path TO {schema}",
        "CREATE TABLE meta (key text PRIMARY KEY, value text NOT NULL)",
        # The ordered logs: one counter row each, updated last in every append and held to commit.
        "CREATE TABLE logs (log_id int PRIMARY KEY, position bigint NOT NULL)",
        "CREATE TABLE events (log_id int NOT NULL, position bigint NOT NULL, scope text NOT NULL, tk bytea NOT NULL,"
        " seq int NOT NULL, event_id text NOT NULL, value bytea NOT NULL, PRIMARY KEY (log_id, position),"
        " UNIQUE (log_id, scope, tk, seq), UNIQUE (log_id, scope, event_id))",
        # Idempotency lookups search every log (an id names one event per scope); the UNIQUE above
        # only guards one log: with P > 1 the recorder locks each given id first (recorder._lock_ids).
        "CREATE INDEX events_ids ON events (scope, event_id)",
        # head IS NULL only inside an appending transaction (the row is its lock); never committed.
        "CREATE TABLE heads (log_id int NOT NULL, scope text NOT NULL, tk bytea NOT NULL, thread_id text NOT NULL,"
        " updated_ns bigint NOT NULL DEFAULT 0, last_position bigint NOT NULL DEFAULT 0, deleted boolean NOT NULL"
        " DEFAULT false, head bytea,"
        " PRIMARY KEY (log_id, scope, tk))",
        "CREATE INDEX heads_updated ON heads (scope, updated_ns DESC, tk DESC)",
        *MIGRATIONS[1],
        *MIGRATIONS[2],
        # Incoming links, in the target's log; relation as bytes so it orders as UTF-8 bytes everywhere.
        # ord: the contract's link ordinal (seq, or DECLARED | i) shifted by -2**63 to fit a bigint.
        "CREATE TABLE links (log_id int NOT NULL, scope text NOT NULL, target bytea NOT NULL, relation bytea NOT NULL,"
        " source bytea NOT NULL, ord bigint NOT NULL, source_id text NOT NULL,"
        " PRIMARY KEY (log_id, scope, target, relation, source, ord))",
        "CREATE INDEX links_source ON links (scope, source)",
        # flags: 1 = the child's spawned_from link, 2 = a spawn fact in the parent's messages.
        "CREATE TABLE children (log_id int NOT NULL, scope text NOT NULL, parent bytea NOT NULL, child bytea NOT NULL,"
        " child_id text NOT NULL, flags int NOT NULL, PRIMARY KEY (log_id, scope, parent, child))",
        "CREATE INDEX children_child ON children (scope, child)",
        "CREATE TABLE states (log_id int NOT NULL, scope text NOT NULL, tk bytea NOT NULL, state bytea NOT NULL,"
        " PRIMARY KEY (log_id, scope, tk))",
        "CREATE TABLE blobs (log_id int NOT NULL, sha bytea NOT NULL, value bytea NOT NULL, PRIMARY KEY (log_id, sha))",
        "CREATE TABLE tracking (name text PRIMARY KEY, status text NOT NULL, version int NOT NULL)",
        *citus_ddl(),
        f"INSERT INTO logs SELECT g, 0 FROM generate_series(0, {int(logs) - 1}) AS g",
        f"INSERT INTO meta VALUES ('schema_version', '{SCHEMA_VERSION}'), ('logs', '{int(logs)}')",
    ]


def citus_ddl() -> list[str]:
    """Distribute the tables by ``log_id`` when the ``citus`` extension is installed; a no-op without it.

    Guarded inside PL/pgSQL so that the same DDL runs on plain PostgreSQL."""
    calls = ["PERFORM create_reference_table('meta')", "PERFORM create_reference_table('tracking')",
             "PERFORM create_distributed_table('events', 'log_id')"]
    calls += [f"PERFORM create_distributed_table('{t}', 'log_id', colocate_with => 'events')"
              for t in DISTRIBUTED if t != "events"]
    body = "; ".join(calls)
    return [f"DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN {body}; "
            "END IF; END $$"]




def describe(rows: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(rows.items()))
