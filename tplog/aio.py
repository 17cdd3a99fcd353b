"""The asyncio API: :class:`AsyncStore`, the same verbs as :class:`tplog.store.Store`, awaitable.

Appends join the backend's writes like a thread's would; reads run in the
default executor, so the event loop never blocks. Open one with
``await AsyncStore.open(path)`` or wrap a :class:`~tplog.store.Store`.
"""

from tplog.store import AsyncStore

__all__ = ["AsyncStore"]
