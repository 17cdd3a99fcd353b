"""The PostgreSQL backend (``pip install tplog[postgres]``): the contract on psycopg 3.

The only package that imports ``psycopg``. See ``recorder.py`` for how positions,
appends and group commit work (its bases: ``connections``, ``reads``, ``maintenance``),
and ``schema.py`` for the tables (and Citus).
"""

from tplog.backends.postgres.errors import LockTimeoutError, PostgresUnavailableError, SchemaError
from tplog.backends.postgres.recorder import PostgresRecorder

__all__ = ["LockTimeoutError", "PostgresRecorder", "PostgresUnavailableError", "SchemaError"]
