"""The server's resource limits (issue 37): one group of options (:class:`ServerLimits`), the
admission counters that enforce the caps on runs and streams, the cheap checks of a request
body's shape made before any full validation, and the HTTP protocol with a header-read deadline.

Every limit answers with a JSON error (413 too large, 429 too many from one client, 503 too many
in all, 408 too slow) and writes nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, fields
from typing import Any, Final

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from tplog.integrations.http import HTTPError

__all__ = [
    "ENV_LIMITS", "H11_PROTOCOL", "Admission", "ServerLimits", "check_chat_shape", "check_depth", "check_fork_id",
    "held", "limits_from_env",
]

#: The limits as a JSON object of :class:`ServerLimits` fields (``serve`` sets it for its workers).
ENV_LIMITS: Final = "TPLOG_SERVER_LIMITS"


@dataclass(frozen=True)
class ServerLimits:
    """The server's resource limits (``create_app(limits=...)``, ``tplog serve --max-…``).

    ``max_messages`` / ``max_parts``: messages, and parts over all of them, in one chat request
    (the AI SDK sends the whole chat each time; only its last message is read, which may have at
    most ``max_message_parts``: the run handles each of them on the event loop). ``max_depth``:
    how deeply the JSON of what a request hands to the run nests (the last message, tool results,
    approvals; kept below the store's own event depth limit, so a run never fails to record it).
    ``max_items``: JSON values (objects, arrays, scalars) in those. ``body_timeout``: seconds a
    client gets to send a request body (408 after); ``header_timeout``: seconds to send a request's
    headers before the connection is closed (``serve``'s protocol). ``max_runs``: agent runs at
    once per worker (503 when full). ``max_run_seconds``: a run still going after this long is
    stopped and recorded as interrupted, reason ``timeout`` (0: no limit). ``max_streams`` /
    ``max_streams_per_client``: open event tails and resumed chat streams per worker, in all (503)
    and per client address (429).
    """

    max_messages: int = 10_000
    max_parts: int = 10_000
    max_message_parts: int = 1_000
    max_depth: int = 48
    max_items: int = 100_000
    body_timeout: float = 30.0
    header_timeout: float = 30.0
    max_runs: int = 256
    max_run_seconds: float = 600.0
    max_streams: int = 1_000
    max_streams_per_client: int = 100

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not v >= 0:
                raise ValueError(f"server limit {f.name} must be a number ≥ 0, not {v!r}")
        for name in ("max_messages", "max_parts", "max_message_parts", "max_depth", "max_items", "max_runs",
                     "max_streams", "max_streams_per_client"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"server limit {name} must be an integer ≥ 1, not {getattr(self, name)!r}")

    def to_env(self) -> str:
        return json.dumps(asdict(self))


def limits_from_env(value: str | None) -> ServerLimits:
    """The limits ``TPLOG_SERVER_LIMITS`` holds (a JSON object of fields; unset: the defaults)."""
    if not value:
        return ServerLimits()
    try:
        data = json.loads(value)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return ServerLimits(**data)
    except (ValueError, TypeError) as exc:
        raise RuntimeError(f"{ENV_LIMITS} must be a JSON object of server limits: {exc}") from None


# --------------------------------------------------------------------------- admission


class Admission:
    """Counts what is open (runs, streams) in all and per client; refuses past the caps."""

    def __init__(self, what: str, total: int, per_client: int | None = None) -> None:
        self.what = what
        self.total = total
        self.per_client = per_client
        self.open = 0
        self._by_client: dict[str, int] = {}

    @contextlib.contextmanager
    def slot(self, client: str | None = None) -> Iterator[None]:
        """Hold one place for the ``with`` block; :class:`HTTPError` 503/429 when there is none."""
        release = self.acquire(client)
        try:
            yield
        finally:
            release()

    def acquire(self, client: str | None = None) -> Callable[[], None]:
        """Take one place (:class:`HTTPError` 503/429 when there is none); returns its release."""
        if self.open >= self.total:
            raise HTTPError(503, "too_many_" + self.what.replace(" ", "_"),
                            f"this server has {self.total} {self.what} open, its limit; try again later",
                            limit=self.total)
        key = client or "?"
        mine = self._by_client.get(key, 0)
        if self.per_client is not None and mine >= self.per_client:
            raise HTTPError(429, "too_many_" + self.what.replace(" ", "_"),
                            f"this client has {mine} {self.what} open, the limit per client; close some first",
                            limit=self.per_client)
        self.open += 1
        self._by_client[key] = mine + 1
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            self.open -= 1
            left = self._by_client[key] - 1
            if left:
                self._by_client[key] = left
            else:
                del self._by_client[key]

        return release


class _Held(Response):
    """A response that gives its place back when it has been sent or cut off, whatever happened."""

    def __init__(self, inner: Response, release: Callable[[], None]) -> None:
        self.inner = inner
        self.release = release
        self.status_code = inner.status_code
        self.raw_headers = inner.raw_headers
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.inner(scope, receive, send)
        finally:
            self.release()


def held(resp: Response, release: Callable[[], None]) -> Response:
    """``resp``, releasing ``release`` (an :meth:`Admission.acquire`) once it is over."""
    return _Held(resp, release)


# --------------------------------------------------------------------------- body shape


def check_fork_id(thread_id: Any) -> None:
    """A fork's id chosen by the client must be a UUID of its own making (version 4 or 7): the
    server derives ids in the other namespaces -- UUIDv5 for chat ids and chat branches
    (:mod:`tplog.integrations.branches`), and a stored non-UUID id is what an AI SDK chat id
    names -- so a client picking one could take over another user's chat. 422, nothing written."""
    import uuid

    if thread_id is None:
        return
    try:
        u = uuid.UUID(thread_id) if isinstance(thread_id, str) else None
    except ValueError:
        u = None
    if u is None or u.version not in (4, 7) or str(u) != thread_id:
        raise HTTPError(422, "reserved_thread_id", f"thread_id {thread_id!r}: a fork's id must be a UUID "
                        "(version 4 or 7, in its canonical form) or left out (the server makes one); ids the "
                        "server derives (UUIDv5: chat ids, chat branches) and chat ids are not accepted")


def check_chat_shape(body: dict[str, Any], limits: ServerLimits) -> None:
    """Count a chat request's messages and parts before anything validates them (a 40,000-part
    body took seconds to validate in full): 413 naming the count and the limit."""
    msgs = body.get("messages")
    if not isinstance(msgs, list):
        return  # the full validation names the wrong type
    if len(msgs) > limits.max_messages:
        raise HTTPError(413, "too_many_messages", f"the request has {len(msgs)} messages; at most "
                        f"{limits.max_messages} are accepted", limit=limits.max_messages)
    parts = sum(len(p) for msg in msgs if isinstance(msg, dict) and isinstance(p := msg.get("parts"), list))
    if parts > limits.max_parts:
        raise HTTPError(413, "too_many_parts", f"the request's messages have {parts} parts; at most "
                        f"{limits.max_parts} are accepted", limit=limits.max_parts)
    last = msgs[-1].get("parts") if msgs and isinstance(msgs[-1], dict) else None
    if isinstance(last, list) and len(last) > limits.max_message_parts:
        raise HTTPError(413, "too_many_parts", f"the last message has {len(last)} parts; at most "
                        f"{limits.max_message_parts} are accepted", limit=limits.max_message_parts,
                        path="$.messages[-1].parts")


def check_depth(value: Any, limits: ServerLimits, path: str) -> None:
    """Walk ``value`` (decoded JSON) without recursion: 413 when it nests deeper than
    ``max_depth`` (naming the JSON path where) or holds more than ``max_items`` values."""
    stack: list[tuple[Any, int, str]] = [(value, 0, path)]
    items = 0
    while stack:
        v, depth, where = stack.pop()
        items += 1
        if items > limits.max_items:
            raise HTTPError(413, "too_many_items", f"{path} holds more than {limits.max_items} JSON values",
                            limit=limits.max_items, path=path)
        if isinstance(v, dict | list):
            if depth >= limits.max_depth:
                raise HTTPError(413, "too_deep", f"{path} nests deeper than {limits.max_depth} levels",
                                limit=limits.max_depth, path=where)
            kids = v.items() if isinstance(v, dict) else enumerate(v)
            for k, c in kids:
                if isinstance(c, dict | list):
                    stack.append((c, depth + 1, f"{where}[{json.dumps(k)}]"))
                else:
                    items += 1
    if items > limits.max_items:
        raise HTTPError(413, "too_many_items", f"{path} holds more than {limits.max_items} JSON values",
                        limit=limits.max_items, path=path)


# --------------------------------------------------------------------------- header deadline


def _header_timeout() -> float:
    return limits_from_env(os.environ.get(ENV_LIMITS)).header_timeout


#: uvicorn's ``http=`` for :func:`~tplog.integrations.server.serve`: its h11 protocol with a deadline on
#: reading a request's headers. uvicorn closes idle keep-alive connections, but a connection that
#: sent half a request line or half its headers (or nothing) stayed open for good. ``header_timeout``
#: (read from ``TPLOG_SERVER_LIMITS``: uvicorn makes the protocol in each worker) counts from the
#: connection, or from the first bytes of a request after the previous response.
H11_PROTOCOL: Final = "tplog.integrations.server.limits:_TimedH11"


def _make_timed_h11() -> type[Any]:
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class TimedH11(H11Protocol):
        header_timeout = _header_timeout()
        _header_task: Any = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm_header_deadline()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is h11.IDLE:  # still (or again) between requests: headers incomplete
                self._arm_header_deadline()
            else:
                self._disarm_header_deadline()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._disarm_header_deadline()  # the keep-alive timeout takes over until the next bytes

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_header_deadline()
            super().connection_lost(exc)

        def _arm_header_deadline(self) -> None:
            if self._header_task is None and self.header_timeout > 0:
                self._header_task = self.loop.call_later(self.header_timeout, self._header_expired)

        def _disarm_header_deadline(self) -> None:
            if self._header_task is not None:
                self._header_task.cancel()
                self._header_task = None

        def _header_expired(self) -> None:
            self._header_task = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    TimedH11.__name__ = TimedH11.__qualname__ = "_TimedH11"
    return TimedH11


def __getattr__(name: str) -> Any:
    # Made on first use: importing uvicorn and h11 is for the server only (the class is named by
    # an import string, ``tplog.integrations.server.limits:_TimedH11``, in every worker).
    if name == "_TimedH11":
        cls = _make_timed_h11()
        globals()["_TimedH11"] = cls
        return cls
    raise AttributeError(name)
