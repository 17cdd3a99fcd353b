"""Pipelined appends for live recorders: :class:`Pipeline` (``Store.pipeline``).

A live run records one message at a time, and a durable append waits for the
device flushes of its own commit. A pipeline acknowledges an in-progress turn's
messages once they are checked, encoded and queued for the group commit, without
waiting for that commit; an append that ends a turn (``AgentTurnCompleted`` /
``AgentTurnInterrupted``), :meth:`Pipeline.commit` and leaving the ``with`` block
wait until it and everything queued before it is durable. Queued appends commit in
order, several per transaction, each with the store's durability.

What a crash can lose: appends acknowledged by the pipeline but not yet committed,
i.e. the tail of the turn in progress, never anything before an end that returned.
The rules of v0.0.4 drop an unfinished turn's messages from a thread anyway.

Each queued append carries the version the thread will have before it
(``expected_version``), so when one fails, every later one fails too: nothing
after a failed append is written, and the pipeline reports the first failure
(:class:`~tplog.errors.PipelineError`) on its next call. One writer per thread
while a pipeline records it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from tplog.backends.contract import ANY, EXISTS, NO_STREAM, AppendResult, ExpectedVersion, ThreadAppend
from tplog.errors import PipelineError, TplogError, WrongExpectedVersionError
from tplog.events import AgentTurnCompleted, AgentTurnInterrupted, Event
from tplog.prepare import check_expected_version, encode

if TYPE_CHECKING:
    from tplog.store import Store

__all__ = ["Pipeline", "ends_turn"]

_TURN_ENDS = (AgentTurnCompleted, AgentTurnInterrupted)


def ends_turn(events: Sequence[Event]) -> bool:
    """Whether ``events`` close an agent turn (the append a pipeline makes durable)."""
    return any(isinstance(e, _TURN_ENDS) for e in events)


class Pipeline:
    """Appends to one thread, acknowledged when queued; turn ends wait for durability.

    ``append(events)`` checks and encodes the events (bad input raises at once,
    nothing queued) and queues them behind the pipeline's earlier appends; it
    returns a future of their :class:`AppendResult`. If the events end an agent
    turn, it first waits until they and every earlier append are durable.
    ``commit()`` waits for everything queued; ``aappend`` / ``acommit`` are the same
    for asyncio (they never block the event loop). After a failure every later call
    raises :class:`~tplog.errors.PipelineError` naming the first failed append.

    ``expected_version`` applies to the first append (default ``"any"``: the thread's
    version when the pipeline first appends). One pipeline per recorder: it is not
    meant to be shared between threads.
    """

    def __init__(self, store: Store, thread_id: str, *, expected_version: ExpectedVersion = ANY) -> None:
        check_expected_version(expected_version)
        self.store = store
        self.thread_id = thread_id
        self._expected: ExpectedVersion = expected_version
        self._version: int | None = None  # the thread's version after everything queued
        self._pending: deque[tuple[Future[Any], int, int]] = deque()  # (handle, first seq, last seq)
        self._failure: BaseException | None = None
        self._failed_at = (0, 0)
        self._last: AppendResult | None = None
        backend = store.backend
        # Backends that commit one process's submissions in submission order (LMDB's and
        # the memory store's queue); on others each append waits for the one before it.
        self._in_order = backend.submits_in_order

    # ------------------------------------------------------------------ sync

    def append(self, events: Sequence[Event], *, event_ids: Sequence[str] | None = None) -> Future[Any]:
        # As Store.append: not while a group's transaction is being built (encoding now would
        # take the GIL from the leader at each of its LMDB calls); a short wait, never a flush.
        self.store.backend.gate()
        handle = self._queue(events, event_ids, lead=False)
        if ends_turn(events):
            self.commit()
        return handle

    def commit(self) -> AppendResult | None:
        """Wait until every queued append is durable; the last one's result (None if none was queued)."""
        while self._pending:
            handle = self._pending[0][0]
            with contextlib.suppress(TplogError):
                handle.result()
            self._settle()
        self._raise_failure()
        return self._last

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.commit()
        else:  # the block failed: still wait for what was queued, but keep the block's error
            with contextlib.suppress(TplogError):
                self.commit()

    # ------------------------------------------------------------------ asyncio

    async def aappend(self, events: Sequence[Event], *, event_ids: Sequence[str] | None = None) -> Future[Any]:
        if not self._in_order:  # waiting for the previous append must not block the loop
            await self._await_all()
        handle = self._queue(events, event_ids, lead=False)
        if ends_turn(events):
            await self.acommit()
        return handle

    async def acommit(self) -> AppendResult | None:
        await self._await_all()
        return self.commit()

    async def _await_all(self) -> None:
        for handle, _, _ in list(self._pending):
            await asyncio.wait([asyncio.wrap_future(handle)])

    # ------------------------------------------------------------------ inside

    def _queue(self, events: Sequence[Event], event_ids: Sequence[str] | None, *, lead: bool) -> Future[Any]:
        self._settle()
        self._raise_failure()
        if not self._in_order and self._pending:
            self.commit()
        s = self.store
        encoded = encode(s.backend, self.thread_id, events, event_ids)
        version = self._version
        if version is None:
            version = self._start_version()
        part = ThreadAppend(thread_id=self.thread_id, events=encoded, expected=version, scope=s.scope,
                            fresh_ids=event_ids is None, check_rules=s.check_rules)
        handle: Future[Any] = s.backend.submit((part,), lead=lead)  # type: ignore[assignment]
        self._pending.append((handle, version + 1, version + len(encoded)))
        self._version = version + len(encoded)
        return handle

    def _start_version(self) -> int:
        exp = self._expected
        if isinstance(exp, int):
            return exp
        if exp == NO_STREAM:
            return 0
        head = self.store.backend.head(self.thread_id, scope=self.store.scope)
        version = 0 if head is None else head.version
        if exp == EXISTS and version == 0:
            raise WrongExpectedVersionError(self.thread_id, exp, 0)
        return version

    def _settle(self) -> None:
        """Take the finished appends off the front of the queue; keep the first failure."""
        pending = self._pending
        while pending and pending[0][0].done():
            handle, first, last = pending.popleft()
            exc = handle.exception()
            if exc is None:
                res = handle.result()
                self._last = res[0] if isinstance(res, list) else res
            elif self._failure is None:
                self._failure, self._failed_at = exc, (first, last)

    def _raise_failure(self) -> None:
        exc = self._failure
        if exc is not None:
            first, last = self._failed_at
            raise PipelineError(
                f"thread {self.thread_id}: the pipelined append of seq {first}..{last} failed ({exc}); "
                "nothing queued after it was written"
            ) from exc
