"""The HTTP plumbing of ``tplog serve``: error responses and Server-Sent Event responses.

Shared by the app (:mod:`tplog.integrations.server`) and the resumable chat streams
(:mod:`tplog.integrations.resume`); depends on neither.
"""

from __future__ import annotations

import contextlib
import json
import logging
from typing import Any, Final

import anyio
from starlette.responses import JSONResponse, StreamingResponse
from starlette.types import Receive, Scope, Send

from tplog.errors import (
    ConflictError,
    InvalidEventError,
    InvalidInputError,
    NotFoundError,
    ReadOnlyError,
    StorageFullError,
    StoreClosedError,
    ThreadDeletedError,
    TplogError,
    WrongExpectedVersionError,
)

__all__ = ["SSE_HEADERS", "UI_STREAM_HEADERS", "HTTPError", "SSEResponse", "error_response", "header_safe",
           "http_error"]

SSE_HEADERS: Final = {
    "cache-control": "no-cache",
    "x-accel-buffering": "no",
}
UI_STREAM_HEADERS: Final = {**SSE_HEADERS, "x-vercel-ai-ui-message-stream": "v1"}

class HTTPError(Exception):
    """An error response: ``status``, a short ``code`` and a message naming the problem."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.extra = extra


def error_response(err: HTTPError) -> JSONResponse:
    body = {"error": {"status": err.status, "code": err.code, "message": err.message, **err.extra}}
    resp = JSONResponse(body, status_code=err.status)
    resp.tplog_code = err.code  # type: ignore[attr-defined]  # read by the error counter of /metrics
    return resp


def http_error(exc: BaseException) -> HTTPError:
    """The HTTP shape of a tplog (or other) error."""
    if isinstance(exc, HTTPError):
        return exc
    msg = str(exc)
    if isinstance(exc, WrongExpectedVersionError):
        return HTTPError(409, "version_conflict", msg, expected=exc.expected, actual=exc.actual)
    if isinstance(exc, ConflictError):
        return HTTPError(409, "conflict", msg)
    if isinstance(exc, InvalidEventError):  # the thread's state does not allow it (e.g. a turn is open)
        return HTTPError(409, "invalid_state", msg)
    if isinstance(exc, InvalidInputError):
        extra = {"path": exc.path} if exc.path is not None else {}
        return HTTPError(422, "invalid_input", msg, **extra)
    if isinstance(exc, NotFoundError):
        return HTTPError(404, "not_found", msg)
    if isinstance(exc, ThreadDeletedError):
        return HTTPError(410, "thread_deleted", msg)
    if isinstance(exc, ReadOnlyError):
        return HTTPError(503, "read_only", msg)
    if isinstance(exc, StorageFullError):
        return HTTPError(507, "storage_full", msg)
    if isinstance(exc, StoreClosedError):
        return HTTPError(503, "unavailable", msg)
    if isinstance(exc, TplogError):
        return HTTPError(500, type(exc).__name__, msg)
    # not tplog's: its text is a dependency's (or a path, a query): for the log, not the client
    logging.getLogger("tplog.server").error("internal error: %s", type(exc).__name__, exc_info=exc)
    return HTTPError(500, "internal_error", "internal error; the server's log has the details")


def header_safe(s: str) -> str:
    return s if s.isascii() and s.isprintable() else json.dumps(s)


class SSEResponse(StreamingResponse):
    """A streaming response that notices a client going away even while idle (any ASGI spec
    version), so a tail or a run stream is detached at once, not at its next write."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as tg:

            async def stream() -> None:
                try:
                    await self.stream_response(send)
                except OSError:
                    pass
                finally:
                    with contextlib.suppress(BaseException):
                        await self.body_iterator.aclose()  # type: ignore[attr-defined]
                    tg.cancel_scope.cancel()

            tg.start_soon(stream)
            await self.listen_for_disconnect(receive)
            tg.cancel_scope.cancel()
