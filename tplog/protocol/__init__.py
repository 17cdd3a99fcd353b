"""The ThreadProtocol itself, independent of storage.

- :mod:`tplog.protocol.model`: the document model (msgspec structs, v0.0.4);
- :mod:`tplog.protocol.json`: lossless JSON in and out (unknown fields kept);
- :mod:`tplog.protocol.validate`: the spec's rules over a whole document;
- :mod:`tplog.protocol.canonical`: the canonical form and the thread hash;
- :mod:`tplog.protocol.versions`: upgrade v0.0.3 → v0.0.4 and back;
- :mod:`tplog.protocol.rules`: the same rules checked event by event at append.

Import from the submodules (or from ``tplog``); this package re-exports nothing,
so that importing one submodule does not import the others.
"""

__all__: list[str] = []
