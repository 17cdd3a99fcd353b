"""Retention on a schedule: the server applies a :class:`~tplog.retire.RetentionPolicy` every so often.

``tplog serve --prune-every 1h --prune-max-age 90d`` (the policy flags of ``tplog prune``, with
``--prune-`` in front) or ``create_app(..., prune=PruneSchedule(...))``. Every worker keeps the
schedule; a run takes the store's ``scheduled-prune`` lock first (``Recorder.try_lock``), so two
workers never prune at once and a worker that finds it held skips that round. Each run is an
ordinary ``Store.prune``: every removed thread leaves a tombstone saying why and when, and the
report is kept (``tplog prune-reports``, ``Store.prune_reports``); a round that would remove
nothing writes nothing. A policy that would remove every
thread is never applied on a schedule (there is nobody to confirm it): that round is skipped and
logged, as is any other error; the schedule goes on.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from typing import TYPE_CHECKING, Final

import msgspec

from tplog.errors import ConfirmationRequiredError, InvalidInputError, TplogError
from tplog.retire import PruneReport, RetentionPolicy

if TYPE_CHECKING:
    from tplog.store import Store

__all__ = ["ENV_PRUNE", "LOCK", "PruneSchedule", "duration", "prune_loop", "run_once", "schedule_from_env"]

#: How ``serve`` hands the schedule to its workers: JSON ``{"every": s, "max_age": s | null,
#: "max_threads": n | null, "keep_if_linked": bool}``.
ENV_PRUNE: Final = "TPLOG_SERVER_PRUNE"
LOCK: Final = "scheduled-prune"
log = logging.getLogger("tplog.server")
_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def duration(text: str, name: str) -> float:
    """Seconds in ``text`` (``90d``, ``12h``, ``30m``, ``45s``, or a number of seconds), > 0;
    ``InvalidInputError`` naming the option ``name`` otherwise."""
    t = text.strip().lower() if isinstance(text, str) else ""
    num, unit = (t[:-1], t[-1]) if t and t[-1] in _UNITS else (t, "s")
    try:
        secs = float(num) * _UNITS[unit]
    except ValueError:
        secs = -1.0
    if not secs > 0 or secs == float("inf"):
        raise InvalidInputError(f"{name}: {text!r} is not a positive duration like 90d, 12h, 30m, 45s")
    return secs


class PruneSchedule(msgspec.Struct, frozen=True, kw_only=True):
    """Apply ``policy`` every ``every`` seconds (the first run ``every`` seconds after start)."""

    every: float
    policy: RetentionPolicy

    def check(self) -> None:
        if isinstance(self.every, bool) or not isinstance(self.every, (int, float)) or not 0 < self.every < 1e9:
            raise InvalidInputError(f"prune schedule: every must be seconds > 0, not {self.every!r}")
        self.policy.check()

    def to_env(self) -> str:
        age = self.policy.max_age
        if isinstance(age, dt.timedelta):
            age = age.total_seconds()
        elif isinstance(age, int):
            age = age / 1e9
        return msgspec.json.encode({"every": self.every, "max_age": age, "max_threads": self.policy.max_threads,
                                    "keep_if_linked": self.policy.keep_if_linked}).decode()


class _Env(msgspec.Struct, forbid_unknown_fields=True):
    every: float
    max_age: float | None = None
    max_threads: int | None = None
    keep_if_linked: bool = True


def schedule_from_env(value: str | None) -> PruneSchedule | None:
    """The schedule :data:`ENV_PRUNE` holds (``None`` if unset); ``InvalidInputError`` if malformed."""
    if not value:
        return None
    try:
        e = msgspec.json.decode(value, type=_Env)
    except msgspec.DecodeError as exc:
        raise InvalidInputError(f"{ENV_PRUNE}: not a prune schedule ({exc})") from exc
    age = dt.timedelta(seconds=e.max_age) if e.max_age is not None else None
    s = PruneSchedule(every=e.every, policy=RetentionPolicy(max_age=age, max_threads=e.max_threads,
                                                            keep_if_linked=e.keep_if_linked))
    s.check()
    return s


def run_once(store: Store, policy: RetentionPolicy) -> PruneReport | None:
    """One scheduled run: the report (a dry run's when nothing was to go), or ``None`` when another
    worker holds the lock or the run was refused (logged)."""
    held = store.backend.try_lock(LOCK)
    if held is None:
        return None
    try:
        # A round that would remove nothing writes nothing (no empty report every period).
        report = store.prune(policy, dry_run=True)
        if report.removed:
            report = store.prune(policy)
    except ConfirmationRequiredError as exc:
        log.warning("scheduled prune skipped: %s", exc)
        return None
    except TplogError as exc:
        log.warning("scheduled prune failed: %s", exc)
        return None
    finally:
        held.release()
    if report.removed:
        log.info("scheduled prune removed %d threads", len(report.removed))
    return report


async def prune_loop(store: Store, schedule: PruneSchedule) -> None:
    """Run :func:`run_once` every ``schedule.every`` seconds until cancelled (the server's lifespan)."""
    while True:
        await asyncio.sleep(schedule.every)
        await asyncio.to_thread(run_once, store, schedule.policy)
