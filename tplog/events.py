"""History events: the closed, versioned set of facts a thread's log is made of.

A thread's log is a sequence of these events; every view (the ThreadProtocol
document, interrupt state, pending tools, links) is a fold over it. Events are
msgspec Structs tagged by ``type``; the tag values and field names are the
persisted format (see tplog/FORMAT.md) and never change meaning. New
fields only ever get defaults, so every stored event stays decodable; golden
files in ``tests/golden`` pin that.

Order rules the store enforces at append time (an event that breaks them is an
:class:`~tplog.InvalidEventError` and nothing is written):

- ``ThreadStarted`` is the first event of a thread and appears once;
- ``MessageRecorded``, ``AgentTurnCompleted`` and ``AgentTurnInterrupted`` need
  an open agent turn (after ``AgentTurnStarted``); a turn closes with exactly
  one of the two terminal events;
- ``UserTurnSubmitted`` and ``AgentTurnStarted`` need no agent turn open;
- nothing follows ``ThreadDeleted``.

It also refuses an event that would break an error rule of ``tplog.validate``
(an unregistered agent, overlapping turns, an answer to no tool call, a thread
id that is not a UUID, ...; see :mod:`tplog.protocol.rules`), unless the store was
opened with ``check_rules=False``.

Event ids and the time an event was recorded are kept beside the event (see
:class:`RecordedEvent`), not inside it.
"""

from __future__ import annotations

from typing import Any, Final, Union

import msgspec
from msgspec import UNSET

from tplog.protocol.model import (
    AgentConfig,
    Interruption,
    Message,
    Opt,
    ThreadLink,
    ThreadRelationships,
    Usage,
    UserTurn,
)

__all__ = [
    "AgentRegistered",
    "AgentTurnCompleted",
    "AgentTurnInterrupted",
    "AgentTurnStarted",
    "EVENT_TYPES",
    "Event",
    "LinkAdded",
    "MessageRecorded",
    "RecordedEvent",
    "ThreadDeleted",
    "ThreadInfoChanged",
    "ThreadStarted",
    "UserTurnSubmitted",
]

#: Version of the event schema. Bumped only when a new event type or field is added.
EVENT_SCHEMA_VERSION: Final = 1


class _Event(msgspec.Struct, tag_field="type", kw_only=True, omit_defaults=True, frozen=True, gc=False):
    def time(self) -> str | None:
        """The protocol time this event states (drives the thread's ``updated_at``)."""
        return None


class ThreadStarted(_Event, tag="thread_started", kw_only=True, omit_defaults=True, frozen=True, gc=False):
    """The thread exists. First event of every thread.

    ``version`` is the protocol version the thread came from (export always
    writes v0.0.4). ``updated_at`` is set by imports to keep the document's
    value. ``relationships`` keeps the shell of the document's relationships
    object (its unknown fields, and ``links: []`` if it was present); imports
    record the links themselves as ``LinkAdded`` events. Links an application
    declares here are the thread's first links: exported, indexed and listed
    like added ones. ``extra`` keeps unknown thread fields.
    """

    thread_id: str
    created_at: str
    version: str = "0.0.4"
    updated_at: Opt[str] = UNSET
    title: Opt[str] = UNSET
    metadata: Opt[dict[str, Any]] = UNSET
    relationships: Opt[ThreadRelationships] = UNSET
    extra: dict[str, Any] = {}

    def time(self) -> str | None:
        return self.updated_at if isinstance(self.updated_at, str) else self.created_at


class AgentRegistered(_Event, tag="agent_registered", kw_only=True, omit_defaults=True, frozen=True, gc=False):
    """An agent joins the thread's registry under ``key`` (default: its ``agent_id``).

    Registering the same key again replaces its config.
    """

    agent: AgentConfig
    key: Opt[str] = UNSET

    @property
    def registry_key(self) -> str:
        return self.key if isinstance(self.key, str) else self.agent.agent_id


class UserTurnSubmitted(_Event, tag="user_turn", kw_only=True, omit_defaults=True, frozen=True, gc=False):
    """A whole user turn."""

    turn: UserTurn

    def time(self) -> str | None:
        return self.turn.submitted_at


class AgentTurnStarted(_Event, tag="agent_turn_started", kw_only=True, omit_defaults=True, frozen=True, gc=False):
    """``agent.run()`` began. ``extra`` keeps unknown fields of the turn object."""

    agent_id: str
    started_at: str
    extra: dict[str, Any] = {}

    def time(self) -> str | None:
        return self.started_at


class MessageRecorded(_Event, tag="message", kw_only=True, omit_defaults=True, frozen=True, gc=False):
    """A complete request, response or system message of the open agent turn.

    Never a streaming delta: the message as it stands once complete.
    """

    message: Message

    def time(self) -> str | None:
        return self.message.timestamp


class AgentTurnCompleted(_Event, tag="agent_turn_completed", kw_only=True, omit_defaults=True, frozen=True, gc=False):
    """The open agent turn finished normally.

    ``deferred`` maps tool_call_id → ``"approval"`` or ``"external"`` for tool
    calls the run ended on without executing (Pydantic AI deferred tools); it
    is store metadata for the pending-tools projection, not protocol content.
    """

    completed_at: Opt[str] = UNSET
    total_usage: Opt[Usage] = UNSET
    deferred: dict[str, str] = {}

    def time(self) -> str | None:
        return self.completed_at if isinstance(self.completed_at, str) else None


class AgentTurnInterrupted(
    _Event, tag="agent_turn_interrupted", kw_only=True, omit_defaults=True, frozen=True, gc=False
):
    """The open agent turn was cut off (v0.0.4). Its complete cycles are kept."""

    interruption: Interruption
    total_usage: Opt[Usage] = UNSET

    def time(self) -> str | None:
        return self.interruption.interrupted_at


class LinkAdded(_Event, tag="link_added", kw_only=True, omit_defaults=True, frozen=True, gc=False):
    """An outgoing link to another thread (``spawned_from``, ``merged_from``, ...)."""

    link: ThreadLink
    at: Opt[str] = UNSET

    def time(self) -> str | None:
        return self.at if isinstance(self.at, str) else None


class ThreadInfoChanged(_Event, tag="thread_info_changed", kw_only=True, omit_defaults=True, frozen=True, gc=False):
    """Title and/or metadata replaced (fields left ``UNSET`` are unchanged)."""

    title: Opt[str] = UNSET
    metadata: Opt[dict[str, Any]] = UNSET
    updated_at: Opt[str] = UNSET

    def time(self) -> str | None:
        return self.updated_at if isinstance(self.updated_at, str) else None


class ThreadDeleted(_Event, tag="thread_deleted", kw_only=True, omit_defaults=True, frozen=True, gc=False):
    """The thread was hard-deleted; only this tombstone event remains in its log."""

    reason: Opt[str] = UNSET
    at: Opt[str] = UNSET


Event = Union[
    ThreadStarted,
    AgentRegistered,
    UserTurnSubmitted,
    AgentTurnStarted,
    MessageRecorded,
    AgentTurnCompleted,
    AgentTurnInterrupted,
    LinkAdded,
    ThreadInfoChanged,
    ThreadDeleted,
]

#: Event type tag → class, in a fixed order: the index is the one-byte kind code
#: stored in each value's header (append only; never reorder).
EVENT_TYPES: Final[tuple[type, ...]] = (
    ThreadStarted,
    AgentRegistered,
    UserTurnSubmitted,
    AgentTurnStarted,
    MessageRecorded,
    AgentTurnCompleted,
    AgentTurnInterrupted,
    LinkAdded,
    ThreadInfoChanged,
    ThreadDeleted,
)
KIND_CODE: Final = {cls: i for i, cls in enumerate(EVENT_TYPES)}


class RecordedEvent(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """An event as stored: where it is, its id, and when the store recorded it.

    ``seq`` counts from 1 within the thread; ``position`` is its place in the
    store-wide log (commit order, gap-free, from 1); ``recorded_at`` is the
    store's clock in nanoseconds since the epoch.
    """

    thread_id: str
    seq: int
    position: int
    event_id: str
    recorded_at: int
    event: Event
