"""Isolation: a scope (tenant) never sees another scope's threads, events or links."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from conftest import ToyStore as Store

from tplog.errors import InvalidInputError, NotFoundError
from tplog.events import (
    AgentTurnCompleted,
    AgentTurnStarted,
    LinkAdded,
    MessageRecorded,
    ThreadStarted,
)
from tplog.protocol import model as m
from tplog.verify import verify_store

T = "2025-01-20T10:00:00Z"


def events(tid: str, parent: str | None = None, call: str = "c1") -> list:
    evs: list = [ThreadStarted(thread_id=tid, created_at=T, title=f"title of {tid}")]
    if parent is not None:
        evs.append(LinkAdded(link=m.ThreadLink(thread_id=parent, relation="spawned_from")))
    evs += [
        AgentTurnStarted(agent_id="a", started_at=T),
        MessageRecorded(message=m.ResponseMessage(timestamp=T, agent_id="a", parts=[
            m.ToolCallPart(tool_name="t", tool_call_id=call, args={})])),
        AgentTurnCompleted(completed_at=T),
    ]
    return evs


@pytest.fixture
def store(tmp_path: Path):
    s = Store(tmp_path / "s")
    yield s
    s.close()


def test_scopes_are_disjoint_key_spaces(store: Store) -> None:
    a, b = store.scoped("tenant-a"), store.scoped("tenant-b")
    shared_id = str(uuid.uuid4())
    parent = str(uuid.uuid4())
    a.append(parent, events(parent))
    a.append(shared_id, events(shared_id, parent), event_ids=["e1", "e2", "e3", "e4", "e5"])
    # The same thread id and the same event ids in scope B are a different thread: no conflict, no leak.
    rb = b.append(shared_id, events(shared_id, parent), expected_version="no_stream",
                  event_ids=["e1", "e2", "e3", "e4", "e5"])
    assert rb.duplicate is False and rb.first_seq == 1
    assert a.head(shared_id).scope == "tenant-a" and b.head(shared_id).scope == "tenant-b"
    # B named A's parent, but in B that id is a thread B does not have.
    with pytest.raises(NotFoundError):
        b.read(parent)
    assert b.children(parent) == [shared_id]  # B's own link to an (unknown in B) id
    assert a.children(parent) == [shared_id]
    assert b.incoming(parent) == [(shared_id, "spawned_from")]
    # The unscoped store sees neither.
    with pytest.raises(NotFoundError):
        store.read(shared_id)
    with pytest.raises(NotFoundError):  # nor the parent its scoped threads link to
        store.children(parent)
    assert store.threads().threads == []


def test_reads_listings_and_links_never_cross(store: Store) -> None:
    a, b = store.scoped("A"), store.scoped("B")
    a_ids = [str(uuid.uuid4()) for _ in range(5)]
    b_ids = [str(uuid.uuid4()) for _ in range(3)]
    for t in a_ids:
        a.append(t, events(t, a_ids[0] if t != a_ids[0] else None))
    for t in b_ids:
        b.append(t, events(t, a_ids[0]))  # B links to A's root id: stays inside B
    assert {h.thread_id for h in a.threads().threads} == set(a_ids)
    assert {h.thread_id for h in b.threads().threads} == set(b_ids)
    # Paging stays inside the scope too.
    page1 = a.threads(limit=2)
    page2 = a.threads(limit=2, after=page1.cursor)
    page3 = a.threads(limit=2, after=page2.cursor)
    listed = [h.thread_id for p in (page1, page2, page3) for h in p.threads]
    assert sorted(listed) == sorted(a_ids) and page3.cursor is None
    assert sorted(a.children(a_ids[0])) == sorted(a_ids[1:])
    assert sorted(b.children(a_ids[0])) == sorted(b_ids)
    assert {t for t, _ in a.descendants(a_ids[0])} == set(a_ids[1:])
    # Guessing ids from another scope finds nothing.
    for t in b_ids:
        with pytest.raises(NotFoundError):
            a.head(t)
        with pytest.raises(NotFoundError):
            a.thread(t)
        with pytest.raises(NotFoundError):
            a.pending(t)
        assert not a.exists(t)
    # The global log, read through a scope, holds only that scope's events.
    assert {e.thread_id for e in a.read_all()} == set(a_ids)
    assert {e.thread_id for e in b.read_all()} == set(b_ids)
    assert len(store.read_all()) == 0
    # Deleting in B leaves A untouched.
    b.delete_thread(b_ids[0])
    assert sorted(b.children(a_ids[0])) == sorted(b_ids[1:])
    assert sorted(a.children(a_ids[0])) == sorted(a_ids[1:])
    # Rebuilding keeps scopes apart, and the store verifies clean.
    assert all(r.differences == [] for r in store.rebuild(verify=True))
    store.rebuild()
    assert sorted(b.children(a_ids[0])) == sorted(b_ids[1:])
    assert sorted(a.children(a_ids[0])) == sorted(a_ids[1:])
    rep = verify_store(store)
    assert rep.ok, rep.problems


def test_scope_names_are_checked_and_views_do_not_close_the_store(store: Store) -> None:
    for bad in ("", "x" * 300, None, 5):
        with pytest.raises(InvalidInputError):
            store.scoped(bad)  # type: ignore[arg-type]
    view = store.scoped("t")
    view.close()  # a view's close leaves the store open
    tid = str(uuid.uuid4())
    view.append(tid, events(tid))
    assert view.head(tid).version == 4
