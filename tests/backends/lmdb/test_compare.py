"""The rebuild's comparison of live and shadow rows (tplog/backends/lmdb/compare.py): every kind
of row is named exactly in ``rebuild --verify``'s report, a live-only row after every rebuilt one
is still reported, and what threads deleted during the rebuild contributed to the shadow rows is
left out of what is swapped in (a deleted parent's spawns, a deleted child's spawner rows)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import ToyStore as Store

from tplog.backends.common import CHILD_LINK, CHILD_SPAWN
from tplog.backends.lmdb import projections as proj
from tplog.backends.lmdb.rebuild import rebuild
from tplog.errors import NotFoundError
from tplog.events import AgentTurnCompleted, AgentTurnStarted, LinkAdded, MessageRecorded, ThreadStarted
from tplog.protocol import model as m

T = "2025-01-20T10:00:00Z"
# Thread ids chosen for their keys (a thread's key is its UUID's bytes): the parent's events come
# first in the key-order scan, the children's last.
P = "00000000-0000-4000-8000-000000000001"
C1 = "ffffffff-0000-4000-8000-000000000001"
C2 = "ffffffff-0000-4000-8000-000000000002"
X = "77777777-0000-4000-8000-000000000001"
PK, C1K, C2K, XK = (uuid.UUID(t).bytes for t in (P, C1, C2, X))


def start(tid: str) -> ThreadStarted:
    return ThreadStarted(thread_id=tid, created_at=T)


def link(target: str, rel: str = "spawned_from") -> LinkAdded:
    return LinkAdded(link=m.ThreadLink(thread_id=target, relation=rel))


def spawn_turn(child: str) -> list[Any]:
    return [AgentTurnStarted(agent_id="a", started_at=T),
            MessageRecorded(message=m.SystemMessage(timestamp=T, event_type="data-tp-thread_spawn",
                                                    event_data={"spawned_thread_id": child})),
            AgentTurnCompleted(completed_at=T)]


def link_rows(s: Store) -> dict[str, dict[bytes, Any]]:
    """Every live row of the links projection, values decoded."""
    with s.backend.engine.read() as txn:
        return {
            "links_in": {bytes(k): msgspec.msgpack.decode(v) for k, v in txn.range("links_in")},
            "children": {bytes(k): msgspec.msgpack.decode(v) for k, v in txn.range("children")},
            "spawner": {bytes(k): bytes(v) for k, v in txn.range("proj", proj.SPAWNER_PREFIX,
                                                                 proj.SPAWNER_PREFIX[:-1] + b"\x01")},
        }


def family(s: Store) -> int:
    """P links to X and spawns C1 and C2; C1 says it was spawned from P. Returns P's event count."""
    s.append(C1, [start(C1), link(P)])
    s.append(C2, [start(C2)])
    p_events = [start(P), link(X, "referenced"), *spawn_turn(C1), *spawn_turn(C2)]
    s.append(P, p_events)
    return len(p_events)


def test_every_kind_of_link_row_is_named_in_the_report(tmp_path: Path) -> None:
    """A spawner row (empty value: "present"), a children row and a links_in row at a declared
    link's ordinal, each only live or only rebuilt."""
    with Store(tmp_path / "s") as s:
        family(s)
        ghost = uuid.UUID("eeeeeeee-0000-4000-8000-000000000001").bytes
        declared = proj.link_key(X, "referenced", ghost, proj.DECLARED | 3)
        s.backend.engine.run_write(lambda txn: (
            txn.delete("proj", proj.SPAWNER_PREFIX + C1K + PK),
            txn.put("proj", proj.SPAWNER_PREFIX + ghost + PK, b""),
            txn.delete("children", PK + C2K),
            txn.put("links_in", declared, msgspec.msgpack.encode(["g", X]))))
        expected = [
            f"links: links_in[{XK.hex()} … {ghost.hex()} declared link 3]: live ['g', '{X}'], rebuilt absent",
            f"links: children[{PK.hex()} → {C2K.hex()}]: live absent, rebuilt ['{C2}', 2]",
            f"links: spawner[{ghost.hex()} ← {PK.hex()}]: live present, rebuilt absent",
            f"links: spawner[{C1K.hex()} ← {PK.hex()}]: live absent, rebuilt present",
        ]
        assert [r.differences for r in s.rebuild("links", verify=True)] == [expected]
        s.rebuild("links")
        assert [r.differences for r in s.rebuild(verify=True)] == [[], []]
        rows = link_rows(s)
        assert set(rows["spawner"]) == {proj.SPAWNER_PREFIX + C1K + PK, proj.SPAWNER_PREFIX + C2K + PK}
        assert rows["children"][PK + C2K] == [C2, CHILD_SPAWN]


def test_a_live_only_row_after_every_rebuilt_row_is_reported_and_deleted(tmp_path: Path) -> None:
    """The merge of the two row streams goes on past the end of the rebuilt one."""
    with Store(tmp_path / "s") as s:
        family(s)
        last = b"\xff" * 16  # after every real thread's key
        empty = proj.encode_state(proj.decode_state(None))
        s.backend.engine.run_write(lambda txn: txn.put("proj", proj.STATE_PREFIX + last, empty))
        expected = [f"state: state of thread key {last.hex()}: live {msgspec.msgpack.decode(empty)!r}, rebuilt absent"]
        assert [r.differences for r in s.rebuild("state", verify=True)] == [expected]
        s.rebuild("state")
        with s.backend.engine.read() as txn:
            assert txn.get("proj", proj.STATE_PREFIX + last) is None
        assert [r.differences for r in s.rebuild(verify=True)] == [[], []]


@pytest.mark.parametrize("names", [["links"], ["links", "state"]])
def test_a_parent_deleted_after_the_scan_folded_it_leaves_no_rows(tmp_path: Path, names: list[str]) -> None:
    """The key-order scan folds P (its own chunk) into the shadow rows, then P is deleted: what
    is swapped in must be what the deletion left in the live rows — C1's own link to P (flag
    CHILD_LINK alone), no row for C2 (only P's spawn named it), no spawner row, no link of P's.
    Regression: a rebuild of ``links`` alone swapped all of P's rows back in (the scan noted a
    thread deleted between its chunks only when it carried the state projection's fold)."""
    with Store(tmp_path / "s") as s:
        n = family(s)
        before = link_rows(s)
        assert before["children"][PK + C1K] == [C1, CHILD_LINK | CHILD_SPAWN]
        calls = 0

        def progress(done: int, total: int) -> None:
            nonlocal calls
            calls += 1
            if calls == 1:  # after the chunk holding exactly P's events
                s.delete_thread(P)

        reports = rebuild(s.backend.engine, s.codec, names, chunk=n, progress=progress)
        assert calls > 2 and [r.projection for r in reports] == names
        rows = link_rows(s)
        assert rows["children"] == {PK + C1K: [C1, CHILD_LINK]}
        assert rows["spawner"] == {}
        assert rows["links_in"] == {proj.link_key(P, "spawned_from", C1K, 2): [C1, P]}
        with pytest.raises(NotFoundError, match="no stored thread links to it"):  # P's link to X is gone
            s.incoming(X)
        with s.backend.engine.read() as txn:  # nor P's state row (the scan wrote one, then dropped it)
            assert txn.get("proj", proj.STATE_PREFIX + PK) is None
        assert [r.differences for r in s.rebuild(verify=True)] == [[], []]


@pytest.mark.parametrize("names", [["links"], ["links", "state"]])
def test_a_child_deleted_after_its_parent_was_folded_is_nobodys_child(tmp_path: Path, names: list[str]) -> None:
    """P's spawn of C1 and C2 is folded into the shadow rows (children and spawner rows), then the
    children are deleted before the scan reaches them: neither is P's child in what is swapped in."""
    with Store(tmp_path / "s") as s:
        n = family(s)
        calls = 0

        def progress(done: int, total: int) -> None:
            nonlocal calls
            calls += 1
            if calls == 1:
                s.delete_thread(C1)
                s.delete_thread(C2)

        rebuild(s.backend.engine, s.codec, names, chunk=n, progress=progress)
        rows = link_rows(s)
        assert rows["children"] == {} and rows["spawner"] == {}
        assert rows["links_in"] == {proj.link_key(X, "referenced", PK, 2): [P, X]}
        assert s.children(P) == []
        assert [r.differences for r in s.rebuild(verify=True)] == [[], []]
