"""Projections: what a thread's log means, computed by pure folds.

:mod:`tplog.projections.fold` turns events into documents, turns, pending tool
calls and interrupts, and documents back into events (import). The backends keep
materialized projections (links, per-thread state) built from these folds: see
``tplog.backends.lmdb.projections`` and ``tplog.backends.postgres``.
"""

__all__: list[str] = []
