"""Thread lifecycle facts every backend keeps in the head, and the listing filter.

``note`` advances a head's lifecycle fields by one event (every backend calls it
from its append, so all engines derive the same values); ``ThreadFilter`` is what
``Store.threads(...)`` filters on and ``check_filter`` turns user arguments into
one, or an :class:`InvalidInputError` naming the filter.

Activity (the ``activity`` filter), derived from the log alone:

- ``"running"`` (stored, and shown in the head's JSON, as ``"active"``): an agent turn is open;
- ``"interrupted"``: the last agent turn ended with ``AgentTurnInterrupted``;
- ``"waiting_approval"`` / ``"waiting_tools"``: the last agent turn completed
  on deferred tool calls (an approval among them / external results only);
  ``"waiting"`` is either;
- ``"idle"``: none of these (a user turn after any of them makes a thread idle).
"""

from __future__ import annotations

import datetime as _dt
import warnings
from typing import Any, Final

import msgspec

from tplog.errors import InvalidInputError
from tplog.events import (
    AgentRegistered,
    AgentTurnCompleted,
    AgentTurnInterrupted,
    AgentTurnStarted,
    LinkAdded,
    ThreadInfoChanged,
    ThreadStarted,
    UserTurnSubmitted,
)
from tplog.protocol import model as m

__all__ = ["ACTIVITIES", "ACTIVITY_CODE", "ACTIVITY_NAMES", "ThreadFilter", "activity_argument", "check_filter",
           "matches", "note", "parse_meta", "parse_time"]

ACTIVITIES: Final = ("idle", "active", "interrupted", "waiting_tools", "waiting_approval")
#: One byte per activity in the LMDB index keys (append only).
ACTIVITY_CODE: Final = {a: i for i, a in enumerate(ACTIVITIES)}
#: The names the ``activity`` filter takes (API, HTTP, CLI) → the stored activities each means:
#: ``running`` is stored ``active`` (old clients read the head's JSON), still taken as an alias.
ACTIVITY_NAMES: Final = {"idle": ("idle",), "running": ("active",), "active": ("active",),
                         "interrupted": ("interrupted",), "waiting": ("waiting_approval", "waiting_tools"),
                         "waiting_approval": ("waiting_approval",), "waiting_tools": ("waiting_tools",)}
SPAWNED_FROM: Final = "spawned_from"


def note(h: Any, ev: Any) -> None:
    """Advance the lifecycle fields of head ``h`` (a ThreadHead, mutated) by ``ev``."""
    if isinstance(ev, AgentTurnStarted):
        h.activity = "active"
        _agent(h, ev.agent_id)
    elif isinstance(ev, AgentTurnCompleted):
        kinds = set(ev.deferred.values())
        h.activity = "waiting_approval" if "approval" in kinds else "waiting_tools" if kinds else "idle"
    elif isinstance(ev, AgentTurnInterrupted):
        h.activity = "interrupted"
    elif isinstance(ev, UserTurnSubmitted):
        h.activity = "idle"
    elif isinstance(ev, AgentRegistered):
        _agent(h, ev.agent.agent_id)
        name = ev.agent.agent_name
        if isinstance(name, str):
            h.agent_names = {**h.agent_names, ev.agent.agent_id: name, ev.registry_key: name}
    elif isinstance(ev, ThreadStarted):
        h.title = ev.title if isinstance(ev.title, str) else None
        h.metadata = ev.metadata if isinstance(ev.metadata, dict) else None
        rel = ev.relationships
        if isinstance(rel, m.ThreadRelationships) and isinstance(rel.links, list):
            for lk in rel.links:
                if lk.relation == SPAWNED_FROM and h.parent is None:
                    h.parent = lk.thread_id
    elif isinstance(ev, ThreadInfoChanged):
        if isinstance(ev.title, str):
            h.title = ev.title
        if isinstance(ev.metadata, dict):
            h.metadata = ev.metadata
    elif isinstance(ev, LinkAdded) and ev.link.relation == SPAWNED_FROM and h.parent is None:
        h.parent = ev.link.thread_id


def _agent(h: Any, agent_id: str) -> None:
    if agent_id not in h.agent_ids:
        h.agent_ids = [*h.agent_ids, agent_id]


class ThreadFilter(msgspec.Struct, frozen=True, kw_only=True):
    """What a thread listing keeps (every given filter must hold). Times are the
    store's clock in nanoseconds since the epoch; ``*_after`` is inclusive,
    ``*_before`` exclusive."""

    activity: tuple[str, ...] | None = None  # stored activities (ACTIVITIES)
    agent: str | None = None
    title: str | None = None
    metadata: dict[str, Any] | None = None
    created_after: int | None = None
    created_before: int | None = None
    updated_after: int | None = None
    updated_before: int | None = None
    roots: bool = False
    has_children: bool | None = None

    @property
    def empty(self) -> bool:
        return self == _EMPTY


_EMPTY: Final = ThreadFilter()


def matches(f: ThreadFilter, h: Any) -> bool:
    """Whether head ``h`` passes every filter but ``has_children`` (which needs the
    children index: the backend checks it)."""
    if f.activity is not None and h.activity not in f.activity:
        return False
    if f.agent is not None and f.agent not in h.agent_ids:
        return False
    if f.title is not None and (h.title is None or f.title.casefold() not in h.title.casefold()):
        return False
    if f.metadata is not None:
        md = h.metadata or {}
        for k, v in f.metadata.items():
            if k not in md or md[k] != v:
                return False
    if f.created_after is not None and h.created_ns < f.created_after:
        return False
    if f.created_before is not None and h.created_ns >= f.created_before:
        return False
    if f.updated_after is not None and h.updated_ns < f.updated_after:
        return False
    if f.updated_before is not None and h.updated_ns >= f.updated_before:
        return False
    return not (f.roots and h.parent is not None)


def _ns(name: str, v: object) -> int | None:
    if v is None:
        return None
    if isinstance(v, _dt.datetime):
        if v.tzinfo is None:
            raise InvalidInputError(f"filter {name}: a datetime needs a timezone, not {v!r}")
        return int(v.timestamp() * 1_000_000_000)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise InvalidInputError(f"filter {name}: must be an aware datetime or int nanoseconds ≥ 0, not {v!r}")
    return v


def check_filter(
    *,
    activity: str | list[str] | tuple[str, ...] | None = None,
    agent: str | None = None,
    title: str | None = None,
    metadata: dict[str, Any] | None = None,
    created_after: object = None,
    created_before: object = None,
    updated_after: object = None,
    updated_before: object = None,
    roots: bool = False,
    has_children: bool | None = None,
) -> ThreadFilter:
    """The filter these arguments ask for; :class:`InvalidInputError` naming the bad one."""
    stored: tuple[str, ...] | None = None
    if activity is not None:
        raw = (activity,) if isinstance(activity, str) else activity
        names = ", ".join(n for n in ACTIVITY_NAMES if n != "active")
        if not isinstance(raw, (list, tuple)) or not raw:
            raise InvalidInputError(f"filter activity: one of {names} (or a list), not {activity!r}")
        for name in raw:
            if not isinstance(name, str) or name not in ACTIVITY_NAMES:
                raise InvalidInputError(f"filter activity: {name!r} is not one of {names}")
        stored = tuple(dict.fromkeys(s for name in raw for s in ACTIVITY_NAMES[name]))
    for name, v in (("agent", agent), ("title", title)):
        if v is not None and (not isinstance(v, str) or not v):
            raise InvalidInputError(f"filter {name}: must be a non-empty string, not {v!r}")
    if metadata is not None and (
            not isinstance(metadata, dict) or not metadata or not all(isinstance(k, str) and k for k in metadata)):
        raise InvalidInputError(f"filter metadata: must be a non-empty dict of key → value, not {metadata!r}")
    if not isinstance(roots, bool):
        raise InvalidInputError(f"filter roots: must be True or False, not {roots!r}")
    if has_children is not None and not isinstance(has_children, bool):
        raise InvalidInputError(f"filter has_children: must be None, True or False, not {has_children!r}")
    times = {n: _ns(n, v) for n, v in (("created_after", created_after), ("created_before", created_before),
                                        ("updated_after", updated_after), ("updated_before", updated_before))}
    for lo, hi in (("created_after", "created_before"), ("updated_after", "updated_before")):
        a, b = times[lo], times[hi]
        if a is not None and b is not None and a >= b:
            raise InvalidInputError(f"filter {lo}/{hi}: the range is empty ({lo} must be before {hi})")
    return ThreadFilter(activity=stored, agent=agent, title=title, metadata=metadata, roots=roots,
                        has_children=has_children, **times)


def activity_argument(activity: Any, status: Any, caller: str) -> Any:
    """The ``activity`` filter of ``caller(activity=, status=)``: ``status`` is its old name
    (deprecated: a thread's ``status`` is live or deleted), taken with a DeprecationWarning."""
    if status is None:
        return activity
    if activity is not None:
        raise InvalidInputError(f"filter activity: {caller}() takes activity= (status= is its old name), not both")
    warnings.warn(f"{caller}(status=...) is deprecated: pass activity=... (a thread's status is whether it is "
                  "deleted; what it is doing is its activity)", DeprecationWarning, stacklevel=3)
    return status


def parse_time(name: str, text: str | None) -> int | _dt.datetime | None:
    """A time filter given as text (CLI, HTTP): nanoseconds, or an ISO 8601 date-time
    (UTC when it names no zone)."""
    if text is None or text == "":
        return None
    if text.isascii() and text.isdigit():  # not '²': isdigit() takes it, int() does not
        return int(text)
    try:
        t = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise InvalidInputError(f"filter {name}: {text!r} is neither an ISO 8601 date-time nor nanoseconds") from exc
    return t if t.tzinfo is not None else t.replace(tzinfo=_dt.UTC)


def parse_meta(name: str, pairs: list[str] | None) -> dict[str, Any] | None:
    """``KEY=VALUE`` metadata filters given as text; a VALUE that parses as JSON is
    that value (``n=3`` matches the number 3), else the string itself."""
    if not pairs:
        return None
    out: dict[str, Any] = {}
    for p in pairs:
        key, eq, value = p.partition("=")
        if not eq or not key:
            raise InvalidInputError(f"filter {name}: {p!r} is not KEY=VALUE")
        try:
            out[key] = msgspec.json.decode(value)
        except msgspec.DecodeError:
            out[key] = value
    return out
