"""``tplog verify``: check a whole store against itself.

The backend does the checking (LMDB: ``tplog.backends.lmdb.verify``): every
stored value, the indexes, heads and, with ``projections``, each live projection
against a fresh rebuild. Each problem names the thread and seq (or the key).
"""

from __future__ import annotations

from tplog.backends.contract import VerifyReport
from tplog.store import Store

__all__ = ["VerifyReport", "verify_store"]


def verify_store(store: Store, *, projections: bool = True) -> VerifyReport:
    return store.verify(projections=projections)
