"""Conversion between ThreadProtocol v0.0.3 and v0.0.4 threads.

v0.0.4 changed three things this module maps:

- ``AgentTurn.completion_status`` (``"complete"``/``"interrupted"``) and
  ``AgentTurn.interruption`` are new; v0.0.3 turns are all complete;
- the normative system event names moved into the ``data-tp-*`` namespace
  (:data:`EVENT_TYPES_V003_TO_V004`);
- ``version`` is ``"0.0.4"``.

Both functions return new frozen Structs (built with
``msgspec.structs.replace``; untouched turns and messages are shared, not
copied), never mutate their input, and return the input object itself when it
already is at the target version. Any other ``version`` raises
:class:`~tplog.InvalidInputError` at ``$.version``.

Known limits, by design:

- name collisions are not detected: a v0.0.3 custom event literally named
  ``data-tp-error`` becomes indistinguishable from an upgraded ``error``, and a
  v0.0.4 custom event named ``error`` (legal there: only ``data-tp-*`` names
  are normative) looks normative after :func:`downgrade`;
- :func:`downgrade` is lossy: interrupted turns are dropped whole, and any
  ``completion_status`` other than ``"interrupted"`` (an extension value) is
  removed and comes back as ``"complete"`` on upgrade. v0.0.3 requires
  ``completed_at`` on every agent turn while v0.0.4 makes it optional, so
  :func:`downgrade` fills a missing (or ``null``) one (see there), and it stays
  on upgrade. ``upgrade(downgrade(t)) == t`` holds for every v0.0.4 thread
  whose agent turns all have ``completion_status: "complete"`` (no
  ``interruption``) and a ``completed_at`` string, and that uses no v0.0.3
  event name as a custom event.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from msgspec import UNSET
from msgspec.structs import replace

from tplog.errors import InvalidInputError
from tplog.protocol.model import (
    AGENT_HANDOFF,
    ERROR_EVENT,
    THREAD_END,
    THREAD_MERGE,
    THREAD_SPAWN,
    AgentTurn,
    Interruption,
    Message,
    SystemMessage,
    Thread,
    Turn,
)

__all__ = [
    "EVENT_TYPES_V003_TO_V004",
    "EVENT_TYPES_V004_TO_V003",
    "SUPPORTED_VERSIONS",
    "V003_AGENT_HANDOFF",
    "V003_ERROR",
    "V003_THREAD_END",
    "V003_THREAD_MERGE",
    "V003_THREAD_SPAWN",
    "VERSION_0_0_3",
    "VERSION_0_0_4",
    "downgrade",
    "upgrade",
]

VERSION_0_0_3: Final = "0.0.3"
VERSION_0_0_4: Final = "0.0.4"
#: The ``version`` values :func:`upgrade` and :func:`downgrade` accept.
SUPPORTED_VERSIONS: Final = frozenset({VERSION_0_0_3, VERSION_0_0_4})

# v0.0.3 normative system event names.
V003_AGENT_HANDOFF: Final = "agent.handoff"
V003_THREAD_SPAWN: Final = "thread.spawn"
V003_THREAD_MERGE: Final = "thread.merge"
V003_THREAD_END: Final = "thread.end"
V003_ERROR: Final = "error"

#: v0.0.3 normative ``event_type`` -> its v0.0.4 ``data-tp-*`` name (read-only).
EVENT_TYPES_V003_TO_V004: Final[Mapping[str, str]] = MappingProxyType(
    {
        V003_AGENT_HANDOFF: AGENT_HANDOFF,
        V003_THREAD_SPAWN: THREAD_SPAWN,
        V003_THREAD_MERGE: THREAD_MERGE,
        V003_THREAD_END: THREAD_END,
        V003_ERROR: ERROR_EVENT,
    }
)
#: The inverse of :data:`EVENT_TYPES_V003_TO_V004` (read-only).
EVENT_TYPES_V004_TO_V003: Final[Mapping[str, str]] = MappingProxyType(
    {v: k for k, v in EVENT_TYPES_V003_TO_V004.items()}
)

_COMPLETE: Final = "complete"
_INTERRUPTED: Final = "interrupted"


def _check_version(thread: Thread) -> str:
    if not isinstance(thread, Thread):
        raise TypeError(f"expected a tplog.Thread, not {type(thread).__name__}")
    if thread.version not in SUPPORTED_VERSIONS:
        raise InvalidInputError(
            f"Unsupported ThreadProtocol version {thread.version!r}; expected one of {sorted(SUPPORTED_VERSIONS)}",
            path="$.version",
        )
    return thread.version


def _rename_events(messages: list[Message], mapping: Mapping[str, str]) -> list[Message]:
    """``messages`` with system event names mapped; the same list object if none changed."""
    out: list[Message] | None = None
    for i, msg in enumerate(messages):
        if isinstance(msg, SystemMessage) and msg.event_type in mapping:
            if out is None:
                out = list(messages)
            out[i] = replace(msg, event_type=mapping[msg.event_type])
    return messages if out is None else out


def upgrade(thread: Thread) -> Thread:
    """The v0.0.4 form of a v0.0.3 ``thread``; a v0.0.4 thread is returned as is.

    Sets ``version`` to ``"0.0.4"``; gives every agent turn whose
    ``completion_status`` is absent or ``null`` the value ``"complete"`` (a
    status already present is kept); renames the v0.0.3 normative system
    events (``agent.handoff``, ``thread.spawn``, ``thread.merge``,
    ``thread.end``, ``error``) to their ``data-tp-*`` names. Everything else,
    unknown fields and extensions included, is carried over unchanged.
    """
    if _check_version(thread) == VERSION_0_0_4:
        return thread
    turns: list[Turn] = []
    for turn in thread.turns:
        if isinstance(turn, AgentTurn):
            changes: dict[str, Any] = {}
            if turn.completion_status is UNSET or turn.completion_status is None:
                changes["completion_status"] = _COMPLETE
            messages = _rename_events(turn.messages, EVENT_TYPES_V003_TO_V004)
            if messages is not turn.messages:
                changes["messages"] = messages
            if changes:
                turn = replace(turn, **changes)
        turns.append(turn)
    return replace(thread, version=VERSION_0_0_4, turns=turns)


def _completed_at(turn: AgentTurn, index: int) -> str:
    """The ``completed_at`` a v0.0.3 form of ``turn`` (``$.turns[index]``) gets; see :func:`downgrade`."""
    if isinstance(turn.completed_at, str):
        return turn.completed_at
    if isinstance(turn.interruption, Interruption) and isinstance(turn.interruption.interrupted_at, str):
        return turn.interruption.interrupted_at
    last = getattr(turn.messages[-1], "timestamp", None) if turn.messages else None
    if isinstance(last, str):
        return last
    if isinstance(turn.started_at, str):
        return turn.started_at
    raise InvalidInputError(
        "Agent turn has no completed_at, and no interruption time, message timestamp or started_at "
        "to fill it from for v0.0.3 (which requires it)",
        path=f"$.turns[{index}].completed_at",
    )


def downgrade(thread: Thread) -> Thread:
    """The v0.0.3 form of a v0.0.4 ``thread``; a v0.0.3 thread is returned as is.

    Drops every agent turn with ``completion_status: "interrupted"`` (v0.0.3
    has complete turns only, and the v0.0.4 amendments' ``downgradeToV3``
    discards them; the turns around it are kept in order, so two user turns
    may end up adjacent); removes ``completion_status`` and ``interruption``
    from the remaining agent turns; renames the ``data-tp-*`` normative events
    back to their v0.0.3 names; sets ``version`` to ``"0.0.3"``. Unknown fields
    and extensions are carried over unchanged.

    ``completed_at``: v0.0.3 requires it on every agent turn (``agent.run()``
    end); v0.0.4 makes it optional. A kept turn whose ``completed_at`` is
    missing or ``null`` gets, in this order, the first of:

    1. ``interruption.interrupted_at``, when the turn carries an
       ``interruption`` (possible only with an extension
       ``completion_status``, as ``"interrupted"`` turns are dropped): the
       time its run ended;
    2. the timestamp of its last message -- the v0.0.3 spec's own rule
       ("Transformation Rules": ``completed_at:
       messages[messages.length - 1].timestamp``);
    3. its ``started_at``, for a turn without messages: the only time known
       for that run (a later, invented one could break v0.0.3's rule that a
       turn's ``completed_at`` precede the next turn's ``started_at``).

    No clock is read, so the result depends on the input alone. A turn with
    none of these as a string (a Struct built with wrong types) raises
    :class:`~tplog.InvalidInputError` at ``$.turns[i].completed_at``.
    """
    if _check_version(thread) == VERSION_0_0_3:
        return thread
    turns: list[Turn] = []
    for index, turn in enumerate(thread.turns):
        if isinstance(turn, AgentTurn):
            if turn.completion_status == _INTERRUPTED:
                continue
            changes: dict[str, Any] = {}
            if not isinstance(turn.completed_at, str):
                changes["completed_at"] = _completed_at(turn, index)
            if turn.completion_status is not UNSET:
                changes["completion_status"] = UNSET
            if turn.interruption is not UNSET:
                changes["interruption"] = UNSET
            messages = _rename_events(turn.messages, EVENT_TYPES_V004_TO_V003)
            if messages is not turn.messages:
                changes["messages"] = messages
            if changes:
                turn = replace(turn, **changes)
        turns.append(turn)
    return replace(thread, version=VERSION_0_0_3, turns=turns)
