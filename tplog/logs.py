"""Structured logs: every record carries the thread it is about, and can be written as JSON lines.

Code that works on a thread logs with ``extra={"thread_id": ...}``, or runs inside
:func:`thread_context` (the server sets it per request); :class:`ThreadIdFilter` gives every
record a ``thread_id`` attribute from one or the other (None when a line is about no thread),
and :class:`JsonFormatter` writes one JSON object per line with it. ``tplog serve --log-format
json`` installs both for tplog's and uvicorn's loggers (:func:`log_config`). Stdlib logging only.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import logging
from collections.abc import Iterator
from typing import Any

import msgspec

__all__ = ["JsonFormatter", "ThreadIdFilter", "current_thread_id", "log_config", "set_thread_id", "thread_context"]

_thread_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("tplog_thread_id", default=None)

# LogRecord's own attributes: everything else on a record came from ``extra=`` and is written out
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "thread_id"}

_enc = msgspec.json.Encoder(enc_hook=str)  # an extra that JSON cannot hold is written as its str()


def current_thread_id() -> str | None:
    """The thread the running code works on (set by :func:`thread_context`), or None."""
    return _thread_id.get()


def set_thread_id(thread_id: str | None) -> None:
    """Mark the rest of this context (an asyncio task: one HTTP request) as working on ``thread_id``."""
    _thread_id.set(thread_id)


@contextlib.contextmanager
def thread_context(thread_id: str | None) -> Iterator[None]:
    """Records logged inside are about ``thread_id`` (unless they name another in ``extra``)."""
    token = _thread_id.set(thread_id)
    try:
        yield
    finally:
        _thread_id.reset(token)


class ThreadIdFilter(logging.Filter):
    """Gives each record a ``thread_id``: its own (``extra``), else the context's, else None."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "thread_id", None) is None:
            record.thread_id = _thread_id.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``time`` (ISO 8601 UTC), ``level``, ``logger``, ``thread_id``,
    ``message``, then the record's ``extra`` fields, and ``exception`` when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        t = dt.datetime.fromtimestamp(record.created, tz=dt.UTC)
        out: dict[str, Any] = {
            "time": t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "thread_id": getattr(record, "thread_id", None) or _thread_id.get(),
            "message": record.getMessage(),
        }
        for k, v in vars(record).items():
            if k not in _STANDARD and not k.startswith("_") and k not in out:
                out[k] = v
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return _enc.encode(out).decode()


def log_config(fmt: str, level: str = "info") -> dict[str, Any] | None:
    """The ``logging.config.dictConfig`` for ``tplog serve --log-format FMT`` (uvicorn's ``log_config``):
    ``json`` sends tplog's and uvicorn's records through :class:`JsonFormatter` to stderr;
    ``text`` (None) keeps uvicorn's default configuration."""
    if fmt == "text":
        return None
    if fmt != "json":
        raise ValueError(f"log format must be 'text' or 'json', not {fmt!r}")
    lvl = level.upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"thread": {"()": "tplog.logs.ThreadIdFilter"}},
        "formatters": {"json": {"()": "tplog.logs.JsonFormatter"}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "stream": "ext://sys.stderr",
                                "formatter": "json", "filters": ["thread"]}},
        "loggers": {
            "tplog": {"handlers": ["stderr"], "level": lvl, "propagate": False},
            "uvicorn": {"handlers": ["stderr"], "level": lvl, "propagate": False},
            "uvicorn.error": {"level": lvl},
            "uvicorn.access": {"handlers": ["stderr"], "level": lvl, "propagate": False},
        },
    }
