"""What the facades (:class:`~tplog.store.Store`, :class:`~tplog.aio.AsyncStore`,
:func:`tplog.fork.fork`, :class:`~tplog.pipeline.Pipeline`) check and build before they
hand an append or a read to the backend: one place, so every entry point refuses the
same input with the same message.

An append's events are checked and encoded (:func:`encode`), its expected version
checked (:func:`check_expected_version`), and its outcome logged (:func:`log_appended`,
:func:`log_refused`, on the ``tplog.store`` logger); reads check their positions, page
limits and chunk sizes alike.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import Final

from tplog.backends.common import outgoing
from tplog.backends.contract import ANY, EXISTS, NO_STREAM, AppendResult, Recorder
from tplog.codec import Encoded
from tplog.errors import InvalidInputError, TplogError
from tplog.events import KIND_CODE, Event, LinkAdded, RecordedEvent, ThreadStarted
from tplog.ids import new_event_id

__all__ = ["EVENT_CLASSES", "MAX_RELATION_BYTES", "check_chunk", "check_expected_version", "check_page_limit",
           "check_position", "drain", "encode", "log_appended", "log_refused"]

EVENT_CLASSES: Final = tuple(KIND_CODE)
_LINKING: Final = (LinkAdded, ThreadStarted)  # the events that may record links (outgoing)
MAX_RELATION_BYTES: Final = 400  # keeps LMDB's link keys under its 511-byte key limit

log = logging.getLogger("tplog.store")


def encode(backend: Recorder, thread_id: str, events: Sequence[Event], event_ids: Sequence[str] | None,
           bodies: Sequence[bytes] | None = None) -> list[Encoded]:
    """Check and encode an append's events with the backend's codec (``bodies``: their
    msgpack bodies, if known); ``event_ids`` ``None``: new ones."""
    backend.check_open()
    if not isinstance(thread_id, str) or not thread_id or len(thread_id.encode()) > 512:
        raise InvalidInputError(f"thread id must be a non-empty string of at most 512 bytes, not {thread_id!r}")
    if isinstance(events, (str, bytes)) or not isinstance(events, Sequence):
        raise InvalidInputError("events must be a sequence of tplog events")
    if not events:
        raise InvalidInputError(f"thread {thread_id}: append needs at least one event")
    if event_ids is not None and len(event_ids) != len(events):
        raise InvalidInputError(
            f"thread {thread_id}: {len(event_ids)} event ids for {len(events)} events"
        )
    now = time.time_ns()
    codec = backend.codec
    out: list[Encoded] = []
    for i, ev in enumerate(events):
        if not isinstance(ev, EVENT_CLASSES):
            raise InvalidInputError(
                f"thread {thread_id}: events[{i}] is a {type(ev).__name__}, not a tplog event "
                f"(one of {', '.join(c.__name__ for c in EVENT_CLASSES)})"
            )
        for j, (_, lk) in enumerate(outgoing(0, ev) if isinstance(ev, _LINKING) else ()):
            # The relation is part of the links_in key (NUL-terminated, under LMDB's key limit).
            at = "link" if isinstance(ev, LinkAdded) else f"relationships.links[{j}]"
            if "\x00" in lk.relation:
                raise InvalidInputError(f"thread {thread_id}: events[{i}] {at} relation contains a NUL character")
            if len(lk.relation.encode()) > MAX_RELATION_BYTES:
                raise InvalidInputError(
                    f"thread {thread_id}: events[{i}] {at} relation is {len(lk.relation.encode())} bytes; "
                    f"at most {MAX_RELATION_BYTES} are allowed"
                )
        eid = new_event_id() if event_ids is None else event_ids[i]
        if not isinstance(eid, str) or not eid or len(eid.encode()) > 256:
            raise InvalidInputError(f"thread {thread_id}: event_ids[{i}] must be a non-empty string ≤ 256 bytes")
        try:
            out.append(codec.encode(ev, eid, now, None if bodies is None else bodies[i]))
        except InvalidInputError as exc:
            if exc.path is None or type(exc) is not InvalidInputError:
                raise
            base = str(exc.args[0]).removesuffix(f" (at {exc.path})")
            raise InvalidInputError(f"thread {thread_id}: events[{i}]: {base}", path=exc.path) from exc
    if event_ids is not None and len(set(event_ids)) != len(event_ids):
        raise InvalidInputError(f"thread {thread_id}: the same event id appears twice in one append")
    return out


def check_expected_version(expected: object) -> None:
    if isinstance(expected, bool) or not (
        (isinstance(expected, int) and expected >= 0) or expected in (ANY, NO_STREAM, EXISTS)
    ):
        raise InvalidInputError(
            f"expected_version must be 'any', 'no_stream', 'exists' or an int ≥ 0, not {expected!r}"
        )


def log_appended(res: AppendResult) -> None:
    if log.isEnabledFor(logging.DEBUG):  # one per append: built only when someone reads it
        log.debug("appended" if not res.duplicate else "append repeated (idempotent retry, nothing written)",
                  extra={"thread_id": res.thread_id, "first_seq": res.first_seq, "last_seq": res.last_seq,
                         "first_position": res.first_position, "last_position": res.last_position})


def log_refused(thread_id: str, exc: TplogError) -> None:
    log.info("append refused: %s", exc, extra={"thread_id": thread_id, "error": type(exc).__name__})


def check_page_limit(limit: object) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise InvalidInputError(f"limit must be None or an int ≥ 0, not {limit!r}")


def check_position(after: object) -> None:
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise InvalidInputError(f"after must be a log position (an int ≥ 0), not {after!r}")


def check_chunk(chunk: object) -> None:
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk <= 0:
        raise InvalidInputError(f"chunk must be an int > 0, not {chunk!r}")


def drain(page: list[RecordedEvent]) -> Iterator[RecordedEvent]:
    """``page``'s events in order, each dropped from the list as it is handed over
    (the caller decides how long an event lives, not the chunk)."""
    page.reverse()
    while page:
        yield page.pop()
