"""Store.search on PostgreSQL (one log and four): the index lives in memory and catches up from every
log; scopes, deletion, rebuild and verify as on LMDB."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from backends.contract_helpers import FACTORIES

from search.helpers import conversation, more, new_id
from tplog import Store
from tplog.backends.postgres.search import PgSearchIndex
from tplog.search import MARK_END, MARK_START


@pytest.fixture(params=["postgres", "postgres-p4"])
def pg_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    counter = itertools.count(time.time_ns())
    with Store(FACTORIES[request.param](tmp_path, lambda: next(counter))) as s:
        yield s


def test_search_on_postgres(pg_store: Store) -> None:
    assert not pg_store.verify().problems and not pg_store._search.exists(pg_store)  # no index made by verify
    tids = [new_id() for _ in range(8)]  # spread over the logs of a P=4 store
    for i, tid in enumerate(tids):
        pg_store.append(tid, conversation(tid, prompt=f"olive number{i}", tool="press_olives"))
    other = pg_store.scoped("other")
    other.append(tids[0], conversation(tids[0], prompt="olive in another scope"))
    page = pg_store.search("olive")
    assert isinstance(pg_store._search.index(pg_store), PgSearchIndex)  # tsvector rows in the store's schema
    assert sorted(h.thread_id for h in page.hits) == sorted(tids) and page.behind == 0
    assert [h.thread_id for h in other.search("olive").hits] == [tids[0]]
    assert [h.thread_id for h in pg_store.search("number3").hits] == [tids[3]]
    assert f"{MARK_START}number3{MARK_END}" in pg_store.search("number3").hits[0].snippet
    seen, after = [], None  # pages: no thread twice, none left out
    while True:
        p = pg_store.search("olive", limit=3, after=after)
        seen += [h.thread_id for h in p.hits]
        if p.cursor is None:
            break
        after = p.cursor
    assert sorted(seen) == sorted(tids)
    assert [h.thread_id for h in pg_store.search("number3 OR number4", syntax="fts5").hits] != []
    pg_store.append(tids[5], more("late cherry", "ok"))
    pg_store.delete_thread(tids[3])
    assert [h.thread_id for h in pg_store.search("cherry").hits] == [tids[5]]
    assert pg_store.search("number3").hits == []
    assert pg_store.rebuild("search", verify=True)[0].differences == []
    [rep] = pg_store.rebuild("search")
    assert rep.differences == [] and pg_store.verify().ok
    again = Store(pg_store.backend)  # another store on the schema (not closed: the backend is pg_store's)
    assert again._search.exists(again) and again.search("cherry").hits[0].thread_id == tids[5]
    assert sorted(h.thread_id for h in pg_store.search("press_olives", limit=50).hits) == sorted(
        t for t in tids if t != tids[3])
