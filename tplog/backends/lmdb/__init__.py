"""The LMDB backend: one ordered log in an LMDB environment (the embedded default).

The only package that imports ``lmdb``. Its key/value tables (``engine``), key
layouts (``keys``), the projections' rows and rebuild (``projections``), group
commit and the writer cache (``recorder``) and the store check (``verify``) are
this backend's private detail; the rest of tplog sees the contract.
"""

from tplog.backends.lmdb.recorder import LmdbRecorder

__all__ = ["LmdbRecorder"]
