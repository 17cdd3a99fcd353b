"""The memory backend's own promises, beyond the contract every backend keeps: its
arguments, messages, stats, rebuild reports and its backup, read back after damage.

Written for the survivors of its mutation run (tests/MUTANTS.md): each test asserts the
exact value, error type and message that a surviving mutant changed.
"""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import agent_start, completed, link, register, started, user
from contract_helpers import append, encode, part, tombstone
from test_backend_contract import fork_part

from tplog import Store
from tplog.backends.common import VERSIONS, thread_key
from tplog.backends.contract import ThreadAppend
from tplog.backends.memory import BACKUP_FILE, BACKUP_FORMAT, MemoryRecorder
from tplog.codec import Limits
from tplog.errors import (
    CorruptionError,
    HasForksError,
    IdempotencyError,
    InvalidInputError,
    LimitExceededError,
    NotFoundError,
    RebuildInProgressError,
    StoreClosedError,
    ThreadDeletedError,
)


def tid() -> str:
    return str(uuid.uuid4())


def lines_of(d: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (d / BACKUP_FILE).read_bytes().splitlines()]


def write_lines(d: Path, lines: list[dict[str, Any]]) -> None:
    (d / BACKUP_FILE).write_bytes(b"".join(json.dumps(x).encode() + b"\n" for x in lines))


# ------------------------------------------------------------------ construction, messages


@pytest.mark.parametrize("logs", [0, -2, True, "2", 1.0])
def test_logs_must_be_an_int_of_at_least_one(logs: Any) -> None:
    with pytest.raises(InvalidInputError, match=rf"^logs must be an int ≥ 1, not {logs!r}$"):
        MemoryRecorder(logs=logs)


def test_the_limits_reach_the_codec_also_of_a_restored_store(tmp_path: Path) -> None:
    small = Limits(max_event_bytes=300)
    a = tid()
    with Store("memory:", limits=small) as s:
        assert s.backend.codec.limits == small
        with pytest.raises(LimitExceededError):
            s.append(a, [started(a), user("x" * 1000)])
        s.append(a, [started(a)])
        s.backup(str(tmp_path / "b"))
    with Store(f"memory:{tmp_path / 'b'}", limits=small) as r:
        assert r.backend.codec.limits == small
        with pytest.raises(LimitExceededError):
            r.append(a, [user("x" * 1000)])


def test_messages_name_the_thread_ids_and_what_to_do() -> None:
    rec = MemoryRecorder()
    a, b, f = tid(), tid(), tid()
    append(rec, part(a, [started(a), register(), user(), agent_start(), completed()], ids=["e1", "e2", "e3", "e4",
                                                                                           "e5"]))
    append(rec, part(b, [started(b)], ids=["b1"]))
    with pytest.raises(IdempotencyError) as exc:
        append(rec, part(a, [user(), user()], ids=["e2", "x"]))
    assert str(exc.value) == (f"thread {a}: event ids ['e2'] are already stored but the others of this append are "
                              "not; an idempotent retry must resend exactly the original events")
    with pytest.raises(IdempotencyError, match=r"^event id 'b1' is already stored in another thread$"):
        append(rec, part(a, [user()], ids=["b1"]))
    with pytest.raises(IdempotencyError) as exc:
        append(rec, part(a, [user(), started(a)], ids=["e2", "e1"]))
    assert str(exc.value) == (f"thread {a}: event ids ['e2', 'e1'] are stored, "
                              "but not as one contiguous append in this order")
    with pytest.raises(InvalidInputError) as exc2:
        rec.delete_thread(a, encode([user()])[0]).result()
    assert str(exc2.value) == f"thread {a}: a deletion's tombstone must be a ThreadDeleted event"
    with pytest.raises(IdempotencyError, match=r"^event id 'b1' is already stored$"):
        rec.delete_thread(a, encode([tombstone().event], ["b1"])[0]).result()
    append(rec, fork_part(f, a, 5))
    with pytest.raises(HasForksError) as exc3:
        rec.delete_thread(a, tombstone()).result()
    assert str(exc3.value) == (f"thread {a} has live forks that read its events: {[f]}; "
                               "delete them first (Store.delete_thread(..., cascade=True))")
    rec.delete_thread(f, tombstone()).result()
    rec.delete_thread(a, tombstone()).result()
    with pytest.raises(ThreadDeletedError, match=rf"^thread {a} was deleted; its id cannot be reused$"):
        append(rec, part(a, [user()]))
    with pytest.raises(ThreadDeletedError, match=rf"^thread {a} is already deleted$"):
        rec.delete_thread(a, tombstone()).result()
    u = tid()
    for call in (lambda: rec.delete_thread(u, tombstone()).result(), lambda: rec.read_thread(u),
                 lambda: rec.thread_state(u), lambda: rec.thread_events(u), lambda: rec.items(u),
                 lambda: rec.links(u)):
        with pytest.raises(NotFoundError, match=rf"^thread {u} does not exist$"):
            call()
    for call in (lambda: rec.incoming(u), lambda: rec.children(u), lambda: rec.descendants(u)):
        with pytest.raises(NotFoundError, match=rf"^thread {u} does not exist, and no stored thread links to it$"):
            call()
    with pytest.raises(InvalidInputError, match=r"^log 1 does not exist: this store keeps 1 log\(s\)$"):
        rec.read_log(1)
    for bad in (True, "3"):
        with pytest.raises(InvalidInputError, match=r"^limit must be > 0$"):
            rec.threads(limit=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=r"^cursor 'zz' is not one this store returned$"):
        rec.threads(after="zz")
    with pytest.raises(InvalidInputError, match=r"^lock name must be ASCII letters, digits, '-' or '_', not 'a b'$"):
        rec.try_lock("a b")
    with pytest.raises(InvalidInputError, match=r"^unknown projection 'nope'; known: links, state$"):
        rec.rebuild(["nope"])
    assert rec.train_dictionary() == 0  # nothing is compressed in memory
    rec.close()
    with pytest.raises(StoreClosedError, match=r"^memory: cannot use the store, as it has been closed$"):
        rec.head(a)


def test_stored_bytes_count_every_event_as_stored() -> None:
    rec = MemoryRecorder()
    a = tid()
    first, more = encode([started(a), user()]), encode([agent_start(), completed()])
    append(rec, ThreadAppend(thread_id=a, events=first, check_rules=False))
    append(rec, ThreadAppend(thread_id=a, events=more, check_rules=False))
    head = rec.head(a)
    assert head is not None and head.stored_bytes == sum(14 + len(e.head_and_body) for e in first + more)


def test_threads_updated_at_one_instant_are_listed_by_key_descending() -> None:
    rec = MemoryRecorder(clock=lambda: 7)
    ts = [tid() for _ in range(5)]
    for t in ts:
        append(rec, part(t, [started(t)]))
    assert [h.thread_id for h in rec.threads().threads] == sorted(ts, key=thread_key, reverse=True)


def test_stats_and_verify_count_threads_and_events() -> None:
    rec = MemoryRecorder(logs=2)
    a, b = tid(), tid()
    append(rec, part(a, [started(a), user()]))
    append(rec, part(b, [started(b)]))
    assert rec.stats() == {"backend": "memory", "threads": 2, "events": 3, "last_position": 3, "logs": 2}
    rep = rec.verify()
    assert (rep.events, rep.threads, rep.problems) == (3, 2, [])


# ------------------------------------------------------------------ rebuild


def test_rebuild_reports_what_it_folded_and_calls_progress_with_it() -> None:
    rec = MemoryRecorder()
    a = tid()
    append(rec, part(a, [started(a), user(), agent_start()]))
    seen: list[tuple[int, int]] = []
    reports = rec.rebuild(["links", "state"], progress=lambda done, total: seen.append((done, total)))
    assert seen == [(3, 3)]
    for r, name in zip(reports, ["links", "state"], strict=True):
        assert (r.projection, r.verify, r.events, r.position, r.differences) == (name, False, 3, 3, [])
        assert 0 <= r.seconds < 60
    [v] = rec.rebuild(["state"], verify=True)
    assert (v.verify, v.events) == (True, 3)


def test_a_rebuild_under_the_projections_lock_needs_force() -> None:
    rec = MemoryRecorder()
    a = tid()
    append(rec, part(a, [started(a)]))
    held = rec.try_lock("links")
    assert held is not None
    with pytest.raises(RebuildInProgressError, match=r"^memory: a rebuild of links is in progress$"):
        rec.rebuild(["links"])
    assert rec.rebuild(["links"], force=True)[0].differences == []
    held.release()
    rec.rebuild(["links"])


# ------------------------------------------------------------------ backup and restore


def _backed_up(tmp_path: Path, **kw: Any) -> tuple[MemoryRecorder, Path, str]:
    rec = MemoryRecorder(**kw)
    a, x = tid(), tid()
    append(rec, part(x, [started(x)]))
    append(rec, part(a, [started(a), register(), user(), agent_start(), completed(), link(x), user()],
                     ids=[f"a{i}" for i in range(1, 8)]))
    d = tmp_path / "b"
    rec.backup(str(d))
    return rec, d, a


def test_a_restored_store_keeps_ids_logs_and_clock(tmp_path: Path) -> None:
    _, d, a = _backed_up(tmp_path, logs=4)
    r = MemoryRecorder.restore(str(d), clock=lambda: 42)
    assert r.logs == 4
    [again] = append(r, part(a, [started(a)], ids=["a1"]))  # a retry of a backed-up append
    assert again.duplicate and (again.first_seq, again.last_seq) == (1, 1)
    b = tid()
    append(r, part(b, [started(b)]))
    head = r.head(b)
    assert head is not None and head.created_ns == head.updated_ns == 42


def test_an_empty_store_backs_up_and_restores(tmp_path: Path) -> None:
    MemoryRecorder(logs=2).backup(str(tmp_path / "e"))
    r = MemoryRecorder.restore(str(tmp_path / "e"))
    assert (r.logs, r.positions(), r.stats()["threads"]) == (2, (0, 0), 0)


def test_restore_names_the_line_that_is_not_a_backup(tmp_path: Path) -> None:
    _, d, a = _backed_up(tmp_path)
    good = lines_of(d)
    path = d / BACKUP_FILE
    (d / BACKUP_FILE).write_bytes(b"")
    with pytest.raises(InvalidInputError, match=rf"^{path}, line 1: not a {BACKUP_FORMAT} backup$"):
        MemoryRecorder.restore(str(d))
    write_lines(d, [{**good[0], "format": "tplog-memory-backup-0"}, *good[1:]])
    with pytest.raises(InvalidInputError, match=rf"^{path}, line 1: not a {BACKUP_FORMAT} backup$"):
        MemoryRecorder.restore(str(d))
    write_lines(d, good[1:])
    with pytest.raises(InvalidInputError, match=rf"^{path}, line 1: not a {BACKUP_FORMAT} backup$"):
        MemoryRecorder.restore(str(d))
    write_lines(d, [good[0], good[1], good[0], *good[2:]])
    with pytest.raises(InvalidInputError, match=rf"^{path}, line 3: a thread was expected here$"):
        MemoryRecorder.restore(str(d))
    # A body that does not decode: named by its thread and seq.
    thread = next(x for x in good if x["type"] == "thread" and x["head"][0] == a)
    thread["events"][2][6] = base64.b64encode(b"\xc1\xc1").decode()
    write_lines(d, good)
    with pytest.raises(CorruptionError) as exc:
        MemoryRecorder.restore(str(d))
    assert (exc.value.thread_id, exc.value.seq) == (a, 3)


def test_verify_of_a_restored_store_names_each_damaged_projection_and_thread(tmp_path: Path) -> None:
    _, d, a = _backed_up(tmp_path)
    good = lines_of(d)
    rows = good[-1]
    assert rows["links"] and not rows["children"]  # one referenced link, no parent/child rows
    for damaged, name in (("links", "links: the live index differs from a rebuild"),
                          ("states", "state: the live rows differ from a rebuild")):
        write_lines(d, [*good[:-1], {**rows, damaged: []}])
        r = MemoryRecorder.restore(str(d))
        assert r.verify().problems == [name]
        # each projection's report names its own difference only
        assert [rep.differences for rep in r.rebuild(["links", "state"], verify=True)] == [
            [name] if damaged == "links" else [], [name] if damaged == "states" else []]
    thread = next(x for x in good if x["type"] == "thread" and x["head"][0] == a)
    del thread["events"][3]
    write_lines(d, good)
    problems = MemoryRecorder.restore(str(d)).verify(projections=False).problems
    assert problems == [f"thread {a}: seqs [1, 2, 3, 5, 6]… do not match its head"]


def test_a_projection_of_another_version_is_stale_after_restore_until_rebuilt(tmp_path: Path) -> None:
    rec, _, a = _backed_up(tmp_path)
    rec.rebuild(["links", "state"])
    folded = rec.positions()
    b = tid()
    append(rec, part(b, [started(b), user()]))
    d2 = tmp_path / "b2"
    rec.backup(str(d2))
    lines = lines_of(d2)
    lines[0]["tracking"]["state"][1] = VERSIONS["state"] + 1
    write_lines(d2, lines)
    r = MemoryRecorder.restore(str(d2))
    by_name = {t.name: t for t in r.tracking()}
    assert (by_name["state"].status, by_name["state"].position) == ("stale", folded)
    assert (by_name["links"].status, by_name["links"].position) == ("live", r.positions())
    assert r.thread_state(a) is None
    c = tid()
    append(r, part(c, [started(c), user()]))  # no state row while stale
    r.delete_thread(c, tombstone()).result()
    [rep] = r.rebuild(["state"])
    assert rep.verify is False and {t.name: t.status for t in r.tracking()} == {"links": "live", "state": "live"}
    assert r.thread_state(a) == rec.thread_state(a)
