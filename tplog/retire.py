"""Retention: ``Store.prune(policy)`` removes the threads a policy retires, never silently.

A policy (:class:`RetentionPolicy`) names candidates: threads not updated for
``max_age``, and those beyond the newest ``max_threads`` of the scope pruned (a
``Store.scoped`` view prunes its scope; the store itself its unscoped threads).
With ``keep_if_linked`` (default) a candidate that another live thread links to or
that has spawned children stays. A candidate that live forks read stays unless the
forks go too (they are removed first). Whatever goes:

- leaves a tombstone whose reason says why and when (``retention: ...``);
- is listed in a prune report, stored as a thread of its own (title ``tplog prune
  report``, metadata ``{"tplog": "prune-report", "report": {...}}``), which later
  prunes never remove; :meth:`Store.prune_reports` lists them, newest first;
- a live child whose ``spawned_from`` target goes is listed in the report's
  ``dangling`` (with ``keep_if_linked=False`` only: otherwise its parent stays).

A policy that would remove every thread of the scope raises
:class:`ConfirmationRequiredError` unless ``confirm_all=True``; ``dry_run=True``
reports what would go and writes nothing.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from tplog.errors import ConfirmationRequiredError, HasForksError, InvalidInputError, ThreadDeletedError
from tplog.events import ThreadStarted

if TYPE_CHECKING:
    from tplog.backends.contract import ThreadHead
    from tplog.store import Store

__all__ = ["PruneReport", "Removed", "RetentionPolicy", "prune", "prune_reports"]

REPORT_MARK = "prune-report"
_PAGE = 500


class RetentionPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """``max_age``: retire threads whose last update is older (a ``timedelta`` or
    nanoseconds); ``max_threads``: keep only the newest this many threads of the scope;
    ``keep_if_linked``: never retire a thread another live thread links to or spawned
    from. At least one of ``max_age`` / ``max_threads``."""

    max_age: Any = None
    max_threads: int | None = None
    keep_if_linked: bool = True

    def check(self) -> int | None:
        """The maximum age in nanoseconds; ``InvalidInputError`` naming a bad setting."""
        age: Any = self.max_age
        if isinstance(age, dt.timedelta):
            if age.total_seconds() <= 0:
                raise InvalidInputError(f"policy max_age: must be positive, not {age!r}")
            age = int(age.total_seconds() * 1_000_000_000)
        elif age is not None and (isinstance(age, bool) or not isinstance(age, int) or age <= 0):
            raise InvalidInputError(f"policy max_age: a timedelta or nanoseconds > 0, not {age!r}")
        n = self.max_threads
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
            raise InvalidInputError(f"policy max_threads: an int ≥ 0, not {n!r}")
        if not isinstance(self.keep_if_linked, bool):
            raise InvalidInputError(f"policy keep_if_linked: True or False, not {self.keep_if_linked!r}")
        if age is None and n is None:
            raise InvalidInputError("policy: give max_age and/or max_threads")
        return int(age) if age is not None else None


class Removed(msgspec.Struct, frozen=True, kw_only=True):
    thread_id: str
    why: str
    updated_ns: int


class Kept(msgspec.Struct, frozen=True, kw_only=True):
    thread_id: str
    why: str


class PruneReport(msgspec.Struct, kw_only=True):
    """What a prune removed (or would: ``dry_run``), which candidates it kept and why,
    and the live children left with a ``spawned_from`` target that is gone
    (``dangling``: ``[child, removed parent]``). ``report_thread_id``: where it is kept."""

    at_ns: int
    dry_run: bool
    scope: str | None
    policy: dict[str, Any]
    removed: list[Removed] = []
    kept: list[Kept] = []
    dangling: list[list[str]] = []
    failed: list[Kept] = []
    report_thread_id: str | None = None


def _is_report(h: ThreadHead) -> bool:
    return isinstance(h.metadata, dict) and h.metadata.get("tplog") == REPORT_MARK


def _iso(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns / 1e9, dt.timezone.utc).isoformat().replace("+00:00", "Z")  # noqa: UP017


def prune(store: Store, policy: RetentionPolicy, *, dry_run: bool = False, confirm_all: bool = False,
          now: Any = None, progress: Callable[[str, int, int | None], None] | None = None) -> PruneReport:
    """See :meth:`Store.prune`."""
    step = progress if progress is not None else (lambda _desc, _done, _total: None)
    if not isinstance(policy, RetentionPolicy):
        raise InvalidInputError(f"prune takes a RetentionPolicy, not {type(policy).__name__}")
    age = policy.check()
    if isinstance(now, dt.datetime):
        if now.tzinfo is None:
            raise InvalidInputError(f"prune now: a datetime needs a timezone, not {now!r}")
        now = int(now.timestamp() * 1_000_000_000)
    elif now is None:
        now = time.time_ns()
    elif isinstance(now, bool) or not isinstance(now, int) or now < 0:
        raise InvalidInputError(f"prune now: an aware datetime or nanoseconds, not {now!r}")
    cutoff = now - age if age is not None else None
    heads: list[ThreadHead] = []  # every live thread of the scope, newest update first (reports aside)
    after = None
    while True:
        page = store.threads(after=after, limit=_PAGE)
        heads += [h for h in page.threads if not _is_report(h)]
        step("prune: list threads", len(heads), None)
        if page.cursor is None:
            break
        after = page.cursor
    why: dict[str, str] = {}
    for i, h in enumerate(heads):
        reasons = []
        if cutoff is not None and h.updated_ns < cutoff:
            reasons.append(f"not updated since {_iso(h.updated_ns)} (max_age)")
        if policy.max_threads is not None and i >= policy.max_threads:
            reasons.append(f"beyond the newest {policy.max_threads} threads of the scope (max_threads)")
        if reasons:
            why[h.thread_id] = "; ".join(reasons)
    by_id = {h.thread_id: h for h in heads}
    report = PruneReport(at_ns=now, dry_run=dry_run, scope=store.scope,
                         policy={"max_age_ns": age, "max_threads": policy.max_threads,
                                 "keep_if_linked": policy.keep_if_linked})
    # Kept: linked to (keep_if_linked), or read by a live fork that stays. Settled to a fixed point,
    # since keeping a fork keeps the thread it reads.
    changed = True
    while changed:
        changed = False
        candidates = list(why)
        for n, tid in enumerate(candidates, 1):
            step("prune: check links", n, len(candidates))
            kept = None
            forks = [f for f in _forks(store, tid) if f not in why]
            if forks:
                kept = f"live forks read its events: {sorted(forks)[:5]}"
            elif policy.keep_if_linked:
                sources = sorted({s for s, _ in store.incoming(tid) if s not in why})
                kids = [c for c in store.children(tid) if c not in why]
                if kids:
                    kept = f"has spawned children {sorted(kids)[:5]}"
                elif sources:
                    kept = f"linked to by {sources[:5]}"
            if kept is not None:
                del why[tid]
                report.kept.append(Kept(thread_id=tid, why=kept))
                changed = True
    if why and len(why) == len(heads) and not confirm_all:
        raise ConfirmationRequiredError(
            f"the policy would remove every thread of the scope ({len(why)}); pass confirm_all=True "
            "(CLI: --confirm-all) if that is meant")
    # Newest-created first: a fork goes before the thread it reads.
    order = sorted(why, key=lambda t: by_id[t].created_ns, reverse=True)
    report.removed = [Removed(thread_id=t, why=why[t], updated_ns=by_id[t].updated_ns) for t in order]
    if not policy.keep_if_linked:
        for t in order:
            report.dangling += [[c, t] for c in store.children(t) if c not in why]
    if dry_run:
        return report
    done: list[Removed] = []
    for n, r in enumerate(report.removed):
        step("prune: delete", n, len(report.removed))
        try:
            store.delete_thread(r.thread_id, reason=f"retention: {r.why}")
        except (HasForksError, ThreadDeletedError) as exc:  # changed since the plan: say so, go on
            report.failed.append(Kept(thread_id=r.thread_id, why=str(exc)))
            continue
        done.append(r)
    step("prune: delete", len(report.removed), len(report.removed))
    report.removed = done
    report.report_thread_id = _keep(store, report)
    return report


def _forks(store: Store, thread_id: str) -> list[str]:
    from tplog.fork import forks_of

    return forks_of(store, thread_id)


def _keep(store: Store, report: PruneReport) -> str:
    rid = str(uuid.uuid4())
    started = ThreadStarted(thread_id=rid, created_at=_iso(report.at_ns), title="tplog prune report",
                            metadata={"tplog": REPORT_MARK, "report": msgspec.to_builtins(report)})
    store.append(rid, [started], expected_version="no_stream")
    return rid


def prune_reports(store: Store, *, after: str | None = None, limit: int = 50) -> tuple[list[PruneReport], str | None]:
    """The kept prune reports of the scope, newest first, and the cursor of the next page."""
    page = store.threads(after=after, limit=limit, metadata={"tplog": REPORT_MARK})
    out = []
    for h in page.threads:
        raw = (h.metadata or {}).get("report")
        if isinstance(raw, dict):
            rep = msgspec.convert(raw, PruneReport)
            rep.report_thread_id = h.thread_id
            out.append(rep)
    return out, page.cursor
