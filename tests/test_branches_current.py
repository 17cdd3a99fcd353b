"""``tplog.integrations.branches`` on a store: ``current`` names the chat's newest branch, however many
it has (a search over the branch numbers, which are stored 1..k), and refuses a thread under a branch id
that is not a fork of the branch before; the branch ids; ``point``."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from conftest import T, agent_start, completed, exchange, register, response, started

from tplog import Store
from tplog.errors import WrongExpectedVersionError
from tplog.events import UserTurnSubmitted
from tplog.integrations import branches
from tplog.integrations.vercel import MESSAGE_ID_KEY
from tplog.protocol.model import UserPromptPart, UserTurn


def test_current_names_the_newest_of_each_count_of_branches(tmp_path: Path) -> None:
    root = str(uuid.uuid4())
    with Store(tmp_path / "store") as s:
        s.append(root, [started(root), register(), *exchange()])
        assert branches.current(s, root) == (root, 0)
        thread = root
        for k in range(6):  # 1, 2, 3 (the search's first odd case), ... branches
            thread = branches.branch(s, root, k, thread, 2, branches.REASON_EDIT)
            assert thread == branches.branch_id(root, k + 1)
            assert branches.current(s, root) == (thread, k + 1), f"{k + 1} branches"


def _user(mid: str) -> UserTurnSubmitted:
    return UserTurnSubmitted(
        turn=UserTurn(submitted_at=T, parts=[UserPromptPart(content=mid)], extra={MESSAGE_ID_KEY: mid})
    )


def test_branch_ids_are_fixed_and_ignore_the_roots_case() -> None:
    root = "0b6e7b52-3f2e-4c1a-9a57-6a1f0c7d2e11"
    assert branches.branch_id(root, 1) == str(
        uuid.uuid5(uuid.UUID("5b0f3c9e-8a51-4c1e-9d3e-2f6a7c1b4e80"), f"{root}/1")
    )
    assert branches.branch_id(root.upper(), 2) == branches.branch_id(root, 2) != branches.branch_id(root, 1)


def test_a_thread_under_a_branch_id_that_is_not_a_fork_of_the_branch_before_is_a_conflict(tmp_path: Path) -> None:
    root = str(uuid.uuid4())
    with Store(tmp_path / "store") as s:
        s.append(root, [started(root), register(), *exchange()])
        b1 = branches.branch(s, root, 0, root, 2, branches.REASON_REGENERATE)
        assert s.head(b1).fork_of == root
        [spawned] = s.export(b1).relationships.links  # the branch says why it was made
        assert (spawned.thread_id, spawned.metadata["reason"]) == (root, "regenerate-message")  # type: ignore[index]
        # branch 2's id taken by a thread of its own (a new chat), and by a fork of another thread
        taker = branches.branch_id(root, 2)
        s.append(taker, [started(taker)])
        with pytest.raises(branches.BranchConflictError) as exc:
            branches.current(s, root)
        assert (exc.value.root, exc.value.k, exc.value.thread_id) == (root, 2, taker)
        assert taker in str(exc.value) and root in str(exc.value) and "not a fork of its branch 1;" in str(exc.value)
        s.delete_thread(taker)  # deleted, it answers as the chat's deleted newest branch (410), not a conflict
        assert branches.current(s, root) == (taker, 2)
    other = str(uuid.uuid4())
    with Store(tmp_path / "store2") as s:
        s.append(root, [started(root), register(), *exchange()])
        s.append(other, [started(other), register(), *exchange()])
        s.fork(other, 2, new_thread_id=branches.branch_id(root, 1))
        with pytest.raises(branches.BranchConflictError):
            branches.current(s, root)


def test_the_fork_check_ignores_case_and_lets_a_deleted_branch_be(tmp_path: Path) -> None:
    root = str(uuid.uuid4())
    with Store(tmp_path / "store") as s:
        s.append(root, [started(root), register(), *exchange()])
        b1 = branches.branch(s, root, 0, root, 2, branches.REASON_EDIT)
        b2 = branches.branch(s, root.upper(), 1, b1, 2, branches.REASON_EDIT)  # the same chat, its id upper-cased
        assert branches.current(s, root.upper()) == (b2, 2) == branches.current(s, root)
        s.delete_thread(b2)
        assert branches.current(s, root) == (b2, 2)  # the tombstone answers (410), not a conflict
        with pytest.raises(WrongExpectedVersionError):  # the next branch's id is taken: the second one fails
            branches.branch(s, root, 0, root, 2, branches.REASON_EDIT)


def test_point_is_the_seq_before_the_latest_turn_with_that_message_id(tmp_path: Path) -> None:
    t = str(uuid.uuid4())
    with Store(tmp_path / "store") as s:
        assert branches.point(s, t, "u1") is None  # no such chat yet
        s.append(
            t,
            [
                started(t),
                register(),
                _user("u1"),
                agent_start(),
                response(),
                completed(),
                _user("u2"),
                agent_start(),
                response(),
                completed(),
                _user("u1"),
            ],
        )
        assert branches.point(s, t, "u1") == 10
        assert branches.point(s, t, "u2") == 6
        assert branches.point(s, t, "u3") is None
