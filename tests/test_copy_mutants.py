"""``copy_store`` beyond the whole-store round trips of tests/test_copy.py: scoped views, the progress it
reports, a copy interrupted after any page and run again, a destination written while copying, the
conflict report's wording, ``verify_copy`` on its own, and ``open_store`` (the mutants of tplog/copy.py
these kill: tests/MUTANTS.md)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import T, agent_start, completed, exchange, register, started, user
from copy_source import digests, fill

from tplog import Store
from tplog.copy import CopyConflictError, Mismatch, copy_store, open_store, verify_copy
from tplog.errors import InvalidInputError, StorageError, TplogError, WrongExpectedVersionError
from tplog.events import MessageRecorded
from tplog.protocol.model import SystemMessage


class _Stop(Exception):
    pass


def _thread(s: Store, *events: Any) -> str:
    t = str(uuid.uuid4())
    s.append(t, [started(t), register(), *events])
    return t


def _live(s: Store) -> list[str]:
    return [h.thread_id for h in s.threads(limit=1000, include_deleted=True).threads]


def test_a_scoped_copy_reads_one_scope_and_writes_another(tmp_path: Path) -> None:
    with Store(tmp_path / "a", check_rules=False) as a, Store(tmp_path / "b", check_rules=False) as b:
        src, dest = a.scoped("tenant-a"), b.scoped("tenant-b")
        info = fill(src, extra=3)
        _thread(a)  # unscoped: not the view's
        # the destination's unscoped key space holds a thread under a source id: another key space, no conflict
        t0 = info["threads"][0]
        b.append(t0, [started(t0, title="unscoped, someone else's")])
        rep = copy_store(src, dest, chunk=5)
        assert rep.ok and rep.tombstones == 1
        assert digests(dest) == digests(src) and _live(b) == [t0]
        assert dest.head(info["forks"][1]).fork_of == info["forks"][0]
        again = copy_store(src, dest, chunk=5)  # resumed in the scope: nothing left to write
        assert again.ok and again.events == 0
        # a conflict inside the scope is found there
        t = _thread(src)
        dest.append(t, [started(t, title="not the source's")])
        with pytest.raises(CopyConflictError, match=t):
            copy_store(src, dest)


def test_progress_counts_positions_per_page_and_threads_per_50(tmp_path: Path) -> None:
    with Store(tmp_path / "a") as a, Store(tmp_path / "b") as b:
        for _ in range(52):
            _thread(a)
        total = sum(a.backend.positions())
        calls: list[tuple[str, int, int]] = []
        rep = copy_store(a, b, chunk=20, progress=lambda *c: calls.append(c))
        assert rep.ok and rep.threads == 52 and 0 <= rep.seconds < 60
        copied = [c for c in calls if c[0] == "copy"]
        per_log = [len(a.backend.read_log(log)) for log in range(a.backend.logs)]
        assert len(copied) == 1 + sum(-(-n // 20) for n in per_log)  # the start, then one per page
        assert copied[0] == ("copy", 0, total) and copied[-1] == ("copy", total, total)
        assert all(c[2] == total for c in copied) and [c[1] for c in copied] == sorted(c[1] for c in copied)
        assert [c for c in calls if c[0] == "verify"] == [("verify", 1, 52), ("verify", 51, 52), ("verify", 52, 52)]
        assert calls == copied + [c for c in calls if c[0] == "verify"]


def test_more_than_500_source_threads(tmp_path: Path) -> None:
    with Store(tmp_path / "a") as a, Store(tmp_path / "b") as b:
        for _ in range(502):
            t = str(uuid.uuid4())
            a.append(t, [started(t)])
        rep = copy_store(a, b)
        assert rep.ok and rep.threads == 502 and len(_live(b)) == 502


def test_a_copy_interrupted_after_any_page_finishes_when_run_again(tmp_path: Path) -> None:
    with Store(tmp_path / "a", check_rules=False) as a:
        fill(a, extra=3)
        want = digests(a)
        whole = copy_store(a, Store("memory:"), chunk=4)
        k = 1
        while True:
            seen = [0]

            def stop_at(phase: str, _done: int, _total: int, k: int = k, seen: list[int] = seen) -> None:
                seen[0] += phase == "copy"
                if seen[0] > k:
                    raise _Stop

            with Store(tmp_path / f"b{k}", check_rules=False) as b:
                try:
                    first = copy_store(a, b, chunk=4, progress=stop_at)
                except _Stop:
                    pass
                else:  # past the last page: a whole copy
                    assert first.events == whole.events
                    break
                rest = copy_store(a, b, chunk=4)
                assert rest.ok and digests(b) == want, f"interrupted after page {k}"
                assert rest.skipped <= whole.events and b.stats()["events"] == a.stats()["events"]
            k += 1
        assert k > 5


def test_a_destination_written_while_copying_stops_the_copy(tmp_path: Path) -> None:
    with Store(tmp_path / "a") as a, Store(tmp_path / "b") as b:
        t = _thread(a, *exchange(), *exchange())
        calls = [0]

        def meddle(phase: str, _done: int, _total: int) -> None:
            calls[0] += 1
            if calls[0] == 2:  # after the first page: the copier knows t's version
                b.append(t, [user("someone else")])

        with pytest.raises(WrongExpectedVersionError):
            copy_store(a, b, chunk=3, progress=meddle)
        # deleted in the destination after the check: named, never appended to
        u = _thread(a, *exchange())
        with Store(tmp_path / "c") as c:

            def delete_first(phase: str, done: int, _total: int) -> None:
                if done == 0:
                    c.append(u, [started(u)])
                    c.delete_thread(u)

            with pytest.raises(
                StorageError,
                match=rf"thread {u}: the destination holds \d+ events \(deleted: True\) "
                r"but the source's next event is seq 3",
            ):
                copy_store(a, c, progress=delete_first)


def test_the_conflicts_each_say_what_differs(tmp_path: Path) -> None:
    with Store(tmp_path / "a") as a, Store(tmp_path / "b") as b:
        one = _thread(a)
        b.append(one, [started(one)])  # another first event, alone
        with pytest.raises(CopyConflictError) as exc:
            copy_store(a, b)
        assert str(exc.value) == (
            f"the destination already holds 1 thread(s) of the source with other content: thread {one}: seq 1 holds "
            "another event in the destination; nothing was copied (copy into an empty store, or delete those "
            "threads from the destination)"
        )
    with Store(tmp_path / "c") as a, Store(tmp_path / "d") as b:
        longer, gone, dead = _thread(a), _thread(a), _thread(a)
        [e1, e2] = a.read(longer)
        b.append(longer, [e1.event, e2.event, user()], event_ids=[e1.event_id, e2.event_id, str(uuid.uuid4())])
        b.append(dead, [started(dead)])
        b.delete_thread(dead)
        a.delete_thread(gone)
        b.append(gone, [started(gone), register()])
        many = [_thread(a) for _ in range(10)]
        for t in many:
            b.append(t, [started(t)])
        with pytest.raises(CopyConflictError) as exc:
            copy_store(a, b)
        why = dict(exc.value.threads)
        assert why[longer] == "the destination holds 3 events, the source 2"
        assert why[dead] == "deleted in the destination"
        assert why[gone] == (
            "deleted in the source, live in the destination with events of its own "
            "(delete it there to copy the deletion)"
        )
        assert len(why) == 13 and str(exc.value).count("; thread ") == 9 and " (and 3 more); nothing" in str(exc.value)


@pytest.mark.parametrize("n", [10, 11])
def test_the_conflict_message_lists_ten_and_counts_the_rest(tmp_path: Path, n: int) -> None:
    with Store(tmp_path / "a") as a, Store(tmp_path / "b") as b:
        for _ in range(n):
            t = _thread(a)
            b.append(t, [started(t)])
        with pytest.raises(CopyConflictError) as exc:
            copy_store(a, b)
        assert len(exc.value.threads) == n and str(exc.value).count("; thread ") == 9
        assert (" (and 1 more); nothing" in str(exc.value)) == (n == 11) and "(and 0 more)" not in str(exc.value)


def test_a_tombstone_copied_after_another_is_still_checked(tmp_path: Path) -> None:
    """The check goes past a deleted source thread that the destination already deleted."""
    with Store(tmp_path / "a") as a, Store(tmp_path / "b") as b:
        kept = _thread(a)
        gone = _thread(a)
        a.delete_thread(gone)  # the newest update: listed before `kept`
        assert copy_store(a, b).ok
        b.append(kept, [user("only in the destination")])
        with pytest.raises(CopyConflictError, match=kept):
            copy_store(a, b)


def test_tombstones_are_counted(tmp_path: Path) -> None:
    with Store(tmp_path / "a") as a, Store(tmp_path / "b") as b:
        gone = [_thread(a), _thread(a)]
        for t in gone:
            a.delete_thread(t)
        rep = copy_store(a, b)
        assert rep.ok and rep.tombstones == 2 and [b.head(t).status for t in gone] == ["deleted", "deleted"]


def test_rules_are_off_unless_asked_for(tmp_path: Path) -> None:
    with Store(tmp_path / "a", check_rules=False) as a:
        t = str(uuid.uuid4())
        a.append(t, [started(t), *exchange()])  # a1 never registered: against the rules, as a store may hold
        with Store(tmp_path / "b") as b:
            assert copy_store(a, b).ok
        with Store(tmp_path / "c") as c, pytest.raises(InvalidInputError, match="a1"):
            copy_store(a, c, check_rules=True)


def test_chunk_bounds(tmp_path: Path) -> None:
    with Store(tmp_path / "a") as a, Store(tmp_path / "b") as b:
        _thread(a, *exchange())
        assert copy_store(a, b, chunk=1).ok
        for bad in (0, 1.5, "2", True):
            with pytest.raises(InvalidInputError, match="chunk"):
                copy_store(a, b, chunk=bad)  # type: ignore[arg-type]


def test_verify_copy_names_what_differs(tmp_path: Path) -> None:
    with Store(tmp_path / "a") as a, Store(tmp_path / "b") as b:
        missing, gone = _thread(a), _thread(a)
        a.delete_thread(gone)
        b.append(gone, [started(gone)])
        # the same events but a system message's data: what only a hash of every event tells apart
        sys_msg = [
            MessageRecorded(message=SystemMessage(timestamp=T, event_type="data-sys-note", event_data={"n": n}))
            for n in (1, 2)
        ]
        odd = str(uuid.uuid4())
        ids = [str(uuid.uuid4()) for _ in range(6)]
        a.append(odd, [started(odd), register(), user(), agent_start(), sys_msg[0], completed()], event_ids=ids)
        b.append(odd, [started(odd), register(), user(), agent_start(), sys_msg[1], completed()], event_ids=ids)
        hashes = {t: digests(a).get(t) for t in (missing, odd)}
        got = sorted(verify_copy(a, b), key=lambda m: m.thread_id)
        assert got == sorted(
            [
                Mismatch(missing, hashes[missing], "missing"),  # type: ignore[arg-type]
                Mismatch(gone, "deleted", digests(b)[gone]),
                Mismatch(odd, hashes[odd], digests(b)[odd]),
            ],
            key=lambda m: m.thread_id,
        )


@pytest.fixture
def a_store(tmp_path: Path) -> Iterator[Path]:
    with Store(tmp_path / "a") as s:
        _thread(s)
    yield tmp_path / "a"


def test_open_store_targets(tmp_path: Path, a_store: Path) -> None:
    (tmp_path / "empty").mkdir()  # a directory without a store: not a source
    with open_store(f"lmdb://{a_store}", source=True) as src:
        assert len(_live(src)) == 1
        with pytest.raises(TplogError):
            _thread(src)  # a source is opened read-only
    with open_store(str(a_store), source=True) as src:
        assert len(_live(src)) == 1
    with open_store(f"lmdb://{tmp_path / 'new'}") as dest:  # a destination is created
        _thread(dest)
    assert (tmp_path / "new" / "data.mdb").exists()
    with open_store(str(tmp_path / "new2")) as dest:
        _thread(dest)
    for target, source, named in (
        ("memory:", False, "memory:"),
        ("memory:", True, "memory:"),
        (str(tmp_path / "nowhere"), True, "no tplog store here"),
        (str(a_store / "data.mdb"), False, "is a file"),
    ):
        with pytest.raises(InvalidInputError, match=named):
            open_store(target, source=source)
    assert not (tmp_path / "nowhere").exists()
