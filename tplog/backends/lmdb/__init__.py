"""The LMDB backend: one ordered log in an LMDB environment (the embedded default).

The only package that imports ``lmdb``. Its key/value tables (``engine``), key
layouts (``keys``), the projections' rows (``projections``) and their rebuild (``rebuild``), the append
path (``recorder``) with group commit and the writer cache (``commit``), reads
(``reads``), deletion and maintenance (``maintenance``) and the store check
(``verify``) are this backend's private detail; the rest of tplog sees the contract.
"""

from tplog.backends.lmdb.recorder import LmdbOptions, LmdbRecorder

__all__ = ["LmdbOptions", "LmdbRecorder"]
