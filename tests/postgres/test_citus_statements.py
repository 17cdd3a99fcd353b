"""Static check for Citus: which statements on distributed tables do not name ``log_id``.

On Citus a statement that filters on the distribution column is routed to one shard;
one that does not fans out to every shard. The append and read paths must route; the
few that fan out (listings, maintenance, lookups across logs) are listed here with the
reason, so a new one cannot slip in unnoticed.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tplog.backends.postgres.schema import DISTRIBUTED

SOURCES = ["recorder.py", "rebuild.py", "placement.py"]
ROOT = Path(__file__).resolve().parents[2] / "tplog" / "backends" / "postgres"

#: Statements allowed to fan out, by a snippet of their text, and why.
FAN_OUT = {
    "FROM heads WHERE scope = %s AND head IS NOT NULL": "threads(): a listing spans every log",
    "JOIN events e ON e.scope = x.s AND e.event_id = x.eid": "idempotency: an id is unique per scope, any log",
    "SELECT 1 FROM events WHERE scope = %s AND event_id = %s": "a tombstone's id, in any log",
    "JOIN heads h ON h.scope = x.s AND h.tk = x.tk": "placement: which log a thread lives in (then cached)",
    "DELETE FROM links WHERE scope = %s AND source = %s": "a deleted source's links live in their targets' logs",
    "DELETE FROM children WHERE scope = %s AND child = %s": "a deleted child's rows live in its parents' logs",
    "DELETE FROM children WHERE scope = %s AND (child = %s OR parent = %s) AND flags = 0": "as above",
    "SELECT 1 FROM children WHERE scope = %(s)s AND child = %(t)s AND flags & 2 = 2": "known-thread check",
    "SELECT count(*) FROM heads WHERE head IS NOT NULL": "stats()",
    "SELECT count(*), coalesce(sum(length(value)), 0) FROM events": "stats()",
    "SELECT count(*) FROM events": "rebuild progress",
    "SELECT scope, tk FROM heads WHERE deleted": "rebuild: deleted threads",
    "COPY {table} TO STDOUT": "backup()",
    "DELETE FROM links": "rebuild swap",
    "DELETE FROM children": "rebuild swap",
    "DELETE FROM states": "rebuild swap",
    "SELECT * FROM links": "rebuild verify",
    "SELECT * FROM children": "rebuild verify",
    "SELECT * FROM states": "rebuild verify",
    "LOCK TABLE links, children, states": "rebuild swap",
}


def _sql_strings(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                "execute", "copy") and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr == "encode":
                arg = arg.func.value  # "...".encode()
            if isinstance(arg, ast.BinOp):
                arg = arg.left
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                out.append(arg.value)
            elif isinstance(arg, ast.JoinedStr):
                out.append("".join(v.value if isinstance(v, ast.Constant) else "{table}" for v in arg.values))
    return out


def test_statements_on_distributed_tables_route_by_log_id() -> None:
    tables = "|".join(DISTRIBUTED)
    touches = re.compile(rf"\b(FROM|INTO|UPDATE|JOIN|TABLE|COPY)\s+({tables}|\{{table\}})\b")
    seen = 0
    unlisted = []
    for name in SOURCES:
        for sql in _sql_strings(ROOT / name):
            if not touches.search(sql):
                continue
            seen += 1
            if "log_id" in sql or any(snippet in sql for snippet in FAN_OUT):
                continue
            if sql.startswith("INSERT INTO") and "SELECT * FROM unnest(%s::int[]" in sql:
                # Every row carries its log_id (each table's first column): Citus puts each row in its
                # shard, though an INSERT … SELECT goes through the coordinator (a real cluster would
                # show what that costs).
                continue
            unlisted.append(f"{name}: {sql}")
    assert seen > 20  # the parse found the statements
    assert not unlisted, "statements that fan out on Citus:\n" + "\n".join(unlisted)
