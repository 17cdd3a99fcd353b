"""A thread's key is the documented function of its id and scope, byte for byte: every
backend stores rows under it and orders pages by it, so a store written by one version is
read by the next only if the formula never changes (tplog.backends.common.thread_key).

Written for the survivors of contract.py's first mutation pass (tests/MUTANTS.md).
"""

from __future__ import annotations

import hashlib
import uuid

import pytest

from tplog.backends.common import thread_key

U = "0f8fad5b-d9cb-469f-a165-70867728950e"


class Sub(str):
    """An id that is a str but not exactly one: thread_key takes the reference path."""


def test_a_canonical_uuid_keys_by_its_sixteen_bytes_in_any_case() -> None:
    want = uuid.UUID(U).bytes
    assert thread_key(U) == thread_key(U.upper()) == want
    assert thread_key(Sub(U)) == thread_key(Sub(U.upper())) == want


@pytest.mark.parametrize("tid", ["toy", "x" * 36, "{" + U[:34] + "}", U.replace("-", "_"),
                                 U[:8] + U[9:13] + "-" + U[8] + U[13:], "urn:uuid:" + U, U + "0"])
def test_any_other_id_keys_by_its_hash(tid: str) -> None:
    want = hashlib.blake2b(b"tplog:" + tid.encode(), digest_size=16).digest()
    assert thread_key(tid) == thread_key(Sub(tid)) == want


def test_a_scoped_key_hashes_the_scope_and_the_id() -> None:
    for tid in (U, "toy"):
        want = hashlib.blake2b(b"tplog-scope:tenant\x00" + tid.encode(), digest_size=16).digest()
        assert thread_key(tid, "tenant") == want
    # pinned (BLAKE2b-128 of the documented inputs), so that a change of the formula itself is seen too
    assert thread_key(U, "tenant").hex() == "2f8b8d6a6772061875cd3eea1c3b72bd"
    assert thread_key("toy").hex() == "e5bf13d2d0f90323b59135ee7d7e898a"
