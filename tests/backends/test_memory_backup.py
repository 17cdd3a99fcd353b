"""A memory store's backup opens again: ``Store("memory:DIR")`` holds exactly what was backed up.

The backup is JSON lines (``DIR/memory.jsonl``): heads, events (bodies as the codec's msgpack),
positions and the projections' rows. Equality is checked through every read verb, by going on
appending to both stores alike, and by backing up the restored store: the same bytes.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import agent_start, completed, link, register, response, spawn_message, started, user
from test_store_backends import scenario

from tplog import Store
from tplog.backends.memory import BACKUP_FILE, MemoryRecorder
from tplog.errors import InvalidInputError, StorageError, ThreadDeletedError


def _answers(s: Store) -> list[Any]:
    """What every read verb answers, for every thread the log names (deleted ones too)."""
    log = s.read_all()
    out: list[Any] = [log, s.last_position, s.projections(), s.threads(limit=1000, include_deleted=True),
                      list(s.iter_all(chunk=3))]
    for tid in sorted({e.thread_id for e in log}):
        head = s.head(tid)
        out += [head, s.read(tid), s.read(tid, direction="backward", limit=2), s.links(tid), s.incoming(tid),
                s.children(tid), s.descendants(tid)]
        if head.status == "active":
            out += [s.load(tid), s.pending(tid), s.interrupts(tid)]
        else:
            with pytest.raises(ThreadDeletedError):
                s.thread(tid)
    return out


def _filled(s: Store) -> tuple[str, str]:
    """A store with links, spawns, an open turn, a deletion and a scoped view; the scenario's ids."""
    scenario(s)  # threads a, b (linked, spawned) and c (deleted), a view "tenant", rebuilt projections
    d, e = str(uuid.uuid4()), str(uuid.uuid4())
    s.append(d, [started(d), register(), user(), agent_start(), spawn_message(e), response(), completed()])
    s.append(e, [started(e), register(), link(d, "spawned_from")])
    s.append(e, [user("open"), agent_start()])  # left open
    return d, e


def test_backup_of_a_memory_store_opens_as_the_same_store(tmp_path: Path) -> None:
    dest = tmp_path / "backup"
    with Store("memory:") as s:
        d, e = _filled(s)
        view = s.scoped("tenant")
        s.backup(str(dest))
        before, before_view = _answers(s), _answers(view)
        assert (dest / BACKUP_FILE).is_file()
        with Store(f"memory:{dest}") as r:
            assert isinstance(r.backend, MemoryRecorder)
            assert _answers(r) == before
            assert _answers(r.scoped("tenant")) == before_view
            assert r.verify().problems == []
            # The restored store goes on like the original: positions, seqs, rules, the event-id index.
            went_on = [(st.append(e, [response("more")], event_ids=["after-restore"]),
                        st.append(e, [response("more")], event_ids=["after-restore"]),  # a retry
                        st.append(d, [user("again")], event_ids=["again"]),
                        st.delete_thread(d, reason="x").first_position,
                        st.scoped("tenant").append(e, [started(e)], event_ids=["tenant-e"]))
                       for st in (s, r)]
            assert went_on[0] == went_on[1] and went_on[1][1].duplicate
            assert [_untimed(h) for h in r.threads(include_deleted=True).threads] == [
                _untimed(h) for h in s.threads(include_deleted=True).threads]
            deleted = [h.thread_id for h in r.threads(include_deleted=True).threads if h.status == "deleted"]
            assert len(deleted) == 2  # the scenario's, backed up deleted, and d
            for tid in deleted:
                with pytest.raises(ThreadDeletedError):  # a deleted id stays taken
                    r.append(tid, [started(tid)])


def _untimed(head: Any) -> Any:
    return msgspec.structs.replace(head, created_ns=0, updated_ns=0)


def test_a_restored_store_backs_up_to_the_same_bytes(tmp_path: Path) -> None:
    with Store("memory:") as s:
        _filled(s)
        s.backup(str(tmp_path / "one"))
    with Store(f"memory:{tmp_path / 'one'}") as r:
        r.backup(str(tmp_path / "two"))
    one, two = ((tmp_path / n / BACKUP_FILE).read_bytes() for n in ("one", "two"))
    assert one == two and one.count(b"\n") > 5


def test_backup_refuses_to_overwrite_and_restore_names_what_is_wrong(tmp_path: Path) -> None:
    t = str(uuid.uuid4())
    with Store("memory:") as s:
        s.append(t, [started(t), user()])
        s.backup(str(tmp_path / "b"))
        with pytest.raises(StorageError, match="not empty"):
            s.backup(str(tmp_path / "b"))
    path = tmp_path / "b" / BACKUP_FILE
    lines = path.read_bytes().splitlines()
    with pytest.raises(InvalidInputError, match="no memory backup"):
        Store(f"memory:{tmp_path / 'nothing-here'}")
    path.write_bytes(b"\n".join([lines[0], b'{"type": "thread", "key": 1}', *lines[2:]]) + b"\n")
    with pytest.raises(InvalidInputError, match=r"line 2: not a tplog memory backup line"):
        Store(f"memory:{tmp_path / 'b'}")
    path.write_bytes(b"\n".join(lines[:-1]) + b"\n")  # cut before the projection rows
    with pytest.raises(InvalidInputError, match="truncated"):
        Store(f"memory:{tmp_path / 'b'}")
    path.write_bytes(b"{not json\n")
    with pytest.raises(InvalidInputError, match="line 1: not JSON"):
        Store(f"memory:{tmp_path / 'b'}")
    with pytest.raises(InvalidInputError, match="read-only"):
        Store(f"memory:{tmp_path / 'b'}", readonly=True)
