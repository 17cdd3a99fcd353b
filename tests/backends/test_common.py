"""The rules every backend shares (tplog.backends.common), checked on their own: the
contract and differential suites check that each backend answers with them."""

from __future__ import annotations

import msgspec
import pytest
from conftest import started, user
from contract_helpers import encode, tid

from tplog.backends import common
from tplog.backends.common import (
    CHILD_LINK,
    CHILD_SPAWN,
    check_collision,
    check_deletable,
    check_expected,
    check_no_forks,
    check_tombstone,
    decode_head,
    encode_head,
    retry_refs,
    retry_result,
    tombstone_taken,
    with_prefix,
)
from tplog.backends.contract import ThreadHead
from tplog.errors import (
    HasForksError,
    IdempotencyError,
    InvalidInputError,
    NotFoundError,
    ThreadDeletedError,
    WrongExpectedVersionError,
)
from tplog.events import ThreadDeleted

U = "0f8fad5b-d9cb-469f-a165-70867728950e"


def test_two_spellings_of_one_uuid_name_one_thread_other_ids_collide() -> None:
    check_collision(U.upper(), ThreadHead(thread_id=U))
    check_collision("x", None)
    with pytest.raises(InvalidInputError, match=r"thread id 'b' collides with stored thread 'a'"):
        check_collision("b", ThreadHead(thread_id="a"))


@pytest.mark.parametrize(("version", "expected", "ok"), [
    (0, "any", True), (3, "any", True), (0, "no_stream", True), (1, "no_stream", False),
    (0, "exists", False), (2, "exists", True), (2, 2, True), (2, 1, False), (0, 0, True)])
def test_the_expected_version_against_the_head(version: int, expected: object, ok: bool) -> None:
    head = ThreadHead(thread_id="t", version=version)
    if ok:
        check_expected("t", head, expected)  # type: ignore[arg-type]
        return
    with pytest.raises(WrongExpectedVersionError) as exc:
        check_expected("t", head, expected)  # type: ignore[arg-type]
    assert (exc.value.thread_id, exc.value.expected, exc.value.actual) == ("t", expected, version)


def test_a_deleted_thread_is_refused_before_its_version_is_compared() -> None:
    with pytest.raises(ThreadDeletedError, match="thread t was deleted; its id cannot be reused"):
        check_expected("t", ThreadHead(thread_id="t", version=4, status="deleted"), 4)


def test_the_idempotent_retry() -> None:
    events = encode([started("t"), user()])
    assert retry_refs("t", b"k", events, [None, None]) is None
    refs = retry_refs("t", b"k", events, [(b"k", 3, 10), (b"k", 4, 11)])
    assert refs is not None
    res = retry_result("t", events, refs)
    assert (res.first_seq, res.last_seq, res.first_position, res.last_position, res.duplicate) == (3, 4, 10, 11, True)
    assert res.event_ids == [e.event_id for e in events]
    with pytest.raises(IdempotencyError, match=r"are already stored but the others"):
        retry_refs("t", b"k", events, [(b"k", 3, 10), None])
    with pytest.raises(IdempotencyError, match=r"already stored in another thread"):
        retry_refs("t", b"k", events, [(b"k", 3, 10), (b"other", 4, 11)])
    with pytest.raises(IdempotencyError, match=r"not as one contiguous append in this order"):
        retry_refs("t", b"k", events, [(b"k", 4, 11), (b"k", 3, 10)])


def test_a_fork_reads_its_prefix_from_its_parent() -> None:
    asked: list[str] = []

    def parent(fork_of: str) -> list[object] | None:
        asked.append(fork_of)
        return ["p1", "p2", "p3", "p4"] if fork_of == "p" else None

    fork = ThreadHead(thread_id="f", version=5, fork_of="p", fork_at=3)
    assert with_prefix(fork, ["f1", "f4", "f5"], parent) == ["f1", "p2", "p3", "f4", "f5"]
    gone = msgspec.structs.replace(fork, fork_of="q")
    assert with_prefix(gone, ["f1", "f4"], parent) == ["f1", "f4"]  # a parent gone: no prefix
    assert asked == ["p", "q"]
    for head in (None, ThreadHead(thread_id="t", version=2), msgspec.structs.replace(fork, status="deleted")):
        assert with_prefix(head, ["a", "b"], parent) == ["a", "b"]
    assert asked == ["p", "q"]  # not a live fork: the parent is not read


def test_the_deletion_preconditions() -> None:
    t = tid()
    check_tombstone(t, encode([ThreadDeleted()])[0])
    with pytest.raises(InvalidInputError, match=f"thread {t}: a deletion's tombstone must be a ThreadDeleted"):
        check_tombstone(t, encode([user()])[0])
    head = ThreadHead(thread_id=t, version=2)
    assert check_deletable(t, head) is head
    with pytest.raises(NotFoundError, match=f"thread {t} does not exist"):
        check_deletable(t, None)
    with pytest.raises(ThreadDeletedError, match=f"thread {t} is already deleted"):
        check_deletable(t, msgspec.structs.replace(head, status="deleted"))
    check_no_forks(t, [])
    with pytest.raises(HasForksError) as exc:
        check_no_forks(t, ["b", "a"])
    assert exc.value.forks == ["a", "b"]
    assert "['a', 'b']" in str(exc.value)
    err = tombstone_taken("e1")
    assert isinstance(err, IdempotencyError) and str(err) == "event id 'e1' is already stored"


def test_the_head_decoder_reads_what_the_backends_write() -> None:
    head = ThreadHead(thread_id="t", version=3, fork_of="p", fork_at=2, agents=["a"])
    assert decode_head(encode_head(head)) == head == msgspec.msgpack.decode(encode_head(head), type=ThreadHead)


def test_the_shared_constants() -> None:
    assert (CHILD_LINK, CHILD_SPAWN) == (1, 2)  # stored in LMDB's and PostgreSQL's children rows
    assert common.SPAWNED_FROM == "spawned_from"
    assert common.PROJECTIONS == ("links", "state") == tuple(common.VERSIONS)


def test_a_thread_listing_s_page_arguments() -> None:
    raw = bytes(range(24))
    assert common.check_threads_page(raw.hex(), 1) == raw
    assert common.check_threads_page(None, 50) is None
    for limit in (0, -1, True, 2.0, "5"):
        with pytest.raises(InvalidInputError, match="limit must be > 0"):
            common.check_threads_page(None, limit)
    for after in ("zz", raw[:23].hex(), (raw + b"x").hex()):
        with pytest.raises(InvalidInputError, match=f"cursor {after!r} is not one this store returned"):
            common.check_threads_page(after, 1)
