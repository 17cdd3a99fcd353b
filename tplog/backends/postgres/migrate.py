"""``tplog migrate URL``: create a PostgreSQL store's schema, or upgrade an older one to this tplog's."""

from __future__ import annotations

from typing import Any

from tplog.backends.postgres.recorder import PostgresRecorder
from tplog.backends.postgres.schema import SCHEMA_VERSION

__all__ = ["migrate"]


def migrate(url: str) -> dict[str, Any]:
    """Open ``url`` creating its schema if missing and upgrading an older one (each step in
    one transaction, under the schema's DDL lock); what was there before and what is now."""
    rec = PostgresRecorder(url, create=True, migrate=True)
    try:
        return {"url": rec.url, "schema": rec.schema, "logs": rec.logs, "created": rec.schema_created,
                "from_version": rec.schema_found, "version": SCHEMA_VERSION}
    finally:
        rec.close()
