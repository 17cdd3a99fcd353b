"""Storage backends behind one contract (:mod:`tplog.backends.contract`), sharing its rules
(:mod:`tplog.backends.common`).

``memory`` is the pure-Python reference; ``lmdb`` is the embedded default. Only
``tplog.backends.lmdb`` imports the ``lmdb`` driver; nothing here imports a
backend eagerly.
"""

__all__: list[str] = []
