"""Chat branches: the AI SDK's regenerate and edit-and-resend as forks of the chat's thread.

A thread's log is append-only, yet an AI SDK v6 chat can take back its last answer
(``regenerate()``: a request with ``trigger: "regenerate-message"`` whose messages end with
the user message to answer again) or edit an earlier user message and send it again
(``sendMessage({text, messageId})``: ``trigger: "submit-message"`` with ``messageId`` naming
that user message, which ends the messages). The server answers either on a *new branch*: a
copy-on-write fork (:meth:`tplog.Store.fork`) of the chat's current thread at the turn
boundary just before that user message, where the (same or edited) message is then submitted.

- The new branch is a child of the branch it replaces (its ``spawned_from`` link, whose
  metadata carries the branch point and the reason, ``"regenerate-message"`` or
  ``"edit-and-resend"``): ``children(old)`` lists it, and the old branch stays readable under
  its own thread id, unchanged.
- The chat id keeps naming the conversation: it resolves to its *newest* branch. Branch ``k``
  of the chat whose first thread is ``root`` has the id :func:`branch_id` ``(root, k)``
  (UUIDv5), so resolving needs no index: one head lookup when the chat never branched, and
  O(log k) after ``k`` branches. A deleted branch still counts (its tombstone keeps the id),
  so a chat whose newest branch was deleted answers 410 like a deleted chat.
- A thread under a branch id is the chat's branch only if it is a fork of the branch before it
  (its head's ``fork_of``): any client can name a thread id, and one that made the next branch
  id of another user's chat (a fork, a new chat) would otherwise have taken that chat over --
  served its history, received its next message. The chat then answers 409
  (:class:`BranchConflictError`), nothing written.
- A regenerate for a message the chat's current branch never recorded is refused (409
  ``unknown_message``), nothing written; an edit of a message that was never recorded is
  just a new message.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Final

from tplog.errors import ConflictError, NotFoundError
from tplog.events import UserTurnSubmitted
from tplog.integrations.vercel import MESSAGE_ID_KEY

if TYPE_CHECKING:
    from tplog.store import Store

__all__ = [
    "BRANCH_NAMESPACE", "REASON_EDIT", "REASON_REGENERATE", "BranchConflictError", "branch", "branch_id", "current",
    "point",
]

#: The UUIDv5 namespace of branch ids (fixed: a chat's branches must resolve the same forever).
BRANCH_NAMESPACE: Final = uuid.UUID("5b0f3c9e-8a51-4c1e-9d3e-2f6a7c1b4e80")
REASON_REGENERATE: Final = "regenerate-message"
REASON_EDIT: Final = "edit-and-resend"


class BranchConflictError(ConflictError):
    """A thread stored under a chat's branch id is not a branch of that chat (not a fork of the
    branch before it): someone else made it. ``thread_id``: that thread; ``root``: the chat's."""

    def __init__(self, root: str, k: int, thread_id: str) -> None:
        super().__init__(f"chat thread {root}: thread {thread_id}, stored under the id of its branch {k}, is not "
                         f"a fork of its branch {k - 1}; the chat cannot be resolved")
        self.root = root
        self.k = k
        self.thread_id = thread_id


def branch_id(root: str, k: int) -> str:
    """The thread id of branch ``k`` (≥ 1) of the chat whose first thread is ``root``."""
    return str(uuid.uuid5(BRANCH_NAMESPACE, f"{root.lower()}/{k}"))


def _stored(store: Store, root: str, k: int) -> bool:
    if k == 0:
        return True
    try:
        store.head(branch_id(root, k))
    except NotFoundError:
        return False
    return True


def current(store: Store, root: str) -> tuple[str, int]:
    """The chat's newest branch: its thread id and number (``(root, 0)`` if it never branched).
    Branches are made in order and their ids never freed, so the stored ones are 1..k."""
    if not _stored(store, root, 1):
        return root, 0
    lo, hi = 1, 2
    while _stored(store, root, hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # lo is stored, hi is not
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _stored(store, root, mid) else (lo, mid)
    tid = branch_id(root, lo)
    _check_fork(store, root, lo, tid)
    return tid, lo


def _check_fork(store: Store, root: str, k: int, tid: str) -> None:
    """Branch ``k`` must be a fork of branch ``k - 1``; a deleted one is let be (its tombstone
    answers 410). Only the newest is checked: each was checked as the newest before the next was made."""
    head = store.head(tid)
    prev = root if k == 1 else branch_id(root, k - 1)
    if head.status != "deleted" and (head.fork_of is None or head.fork_of.lower() != prev.lower()):
        raise BranchConflictError(root, k, tid)


def point(store: Store, thread_id: str, ui_id: str) -> int | None:
    """The seq just before the (latest) user turn recorded with UI message id ``ui_id``: the turn
    boundary a branch that replaces that message forks at; ``None`` if no such turn."""
    found = None
    try:
        events = store.read(thread_id)
    except NotFoundError:  # a chat not started yet
        return None
    for e in events:
        ev = e.event
        if isinstance(ev, UserTurnSubmitted) and ev.turn.extra.get(MESSAGE_ID_KEY) == ui_id:
            found = e.seq - 1
    return found


def branch(store: Store, root: str, k: int, thread_id: str, at: int, reason: str) -> str:
    """Fork ``thread_id`` (the chat's branch ``k``) at ``at`` as branch ``k + 1``; its id. A
    concurrent branching of the same chat makes the second one fail (the id exists: a
    ``WrongExpectedVersionError``), nothing written."""
    return store.fork(thread_id, at, new_thread_id=branch_id(root, k + 1), reason=reason).thread_id
