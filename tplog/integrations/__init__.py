"""Optional integrations (install the ``tplog[pydantic-ai]`` extra).

- :mod:`tplog.integrations.pydantic_ai`: Pydantic AI ``ModelMessage`` <->
  ThreadProtocol mapping, ``history_from_thread`` and the live
  :class:`~tplog.integrations.pydantic_ai.ThreadRecorder`.
- :mod:`tplog.integrations.vercel`: assemble ThreadProtocol turns from a
  Vercel AI SDK UI message stream, and a server-side stream wrapper that
  injects ``data-tp-*`` chunks so the client can rebuild the server's thread
  exactly.

Neither module is imported by ``import tplog``.
"""

__all__: list[str] = []
