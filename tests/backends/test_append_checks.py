"""What every backend refuses before touching storage (tplog.backends.common.check_append),
on every backend in FACTORIES: each refusal typed and naming the thread, nothing written; and
one id in two scopes is two threads, which one append may touch together.

Written for the survivors of contract.py's first mutation pass (tests/MUTANTS.md).
"""

from __future__ import annotations

import msgspec
import pytest
from conftest import started, user
from contract_helpers import (
    append,
    part,
    rec_fixture,  # noqa: F401  (the `rec` fixture)
    tid,
)
from test_backend_contract import fork_part

from tplog.backends.contract import Recorder, ThreadAppend
from tplog.errors import InvalidInputError


def test_one_append_may_touch_one_id_in_two_scopes(rec: Recorder) -> None:
    a = tid()
    results = append(rec, part(a, [started(a)], scope="s1"), part(a, [started(a)], scope="s2"))
    assert [(r.thread_id, r.first_seq) for r in results] == [(a, 1), (a, 1)]
    assert rec.head(a) is None and rec.head(a, scope="s1") is not None and rec.head(a, scope="s2") is not None


def test_each_refusal_names_the_thread_and_writes_nothing(rec: Recorder) -> None:
    a, p, f = tid(), tid(), tid()
    append(rec, part(a, [started(a)]))
    append(rec, part(p, [started(p), user()]))
    before = rec.positions()
    with pytest.raises(InvalidInputError, match=r"^an append needs at least one thread$"):
        rec.submit([]).result(timeout=30)
    with pytest.raises(InvalidInputError, match=rf"^thread {a}: named twice in one append$"):
        append(rec, part(a, [user()]), part(a, [user()]))
    with pytest.raises(InvalidInputError, match=rf"^thread {a}: append needs at least one event$"):
        append(rec, ThreadAppend(thread_id=a, events=[]))
    with pytest.raises(InvalidInputError, match=rf"^thread {a}: event id 'x' appears twice in one append$"):
        append(rec, part(a, [user(), user()], ids=["x", "x"]))
    good = fork_part(f, p, 2)
    fork_msg = rf"^thread {f}: a fork's append is its ThreadStarted alone, expected no_stream, at ≥ 1$"
    for bad in (msgspec.structs.replace(good, events=[*good.events, *part(f, [user()]).events]),
                msgspec.structs.replace(good, events=part(f, [user()]).events),
                msgspec.structs.replace(good, expected="any"),
                msgspec.structs.replace(good, fork=msgspec.structs.replace(good.fork, at=0))):
        with pytest.raises(InvalidInputError, match=fork_msg):
            append(rec, bad)
    assert rec.positions() == before and rec.head(f) is None
