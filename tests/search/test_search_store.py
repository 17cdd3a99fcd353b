"""Store.search on real stores (LMDB files, the memory backend): fields, ranking, scopes,
deletion, catch-up, paging, filters, errors, rebuild and verify."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from search.helpers import conversation, more, new_id, retitle
from tplog import AsyncStore, InvalidInputError, Store
from tplog.search import INDEX_FILE, MARK_END, MARK_START, MAX_QUERY, SearchQueryError


@pytest.fixture(params=["lmdb", "memory"])
def any_store(request: pytest.FixtureRequest, open_store: Callable[..., Store]) -> Store:
    return open_store() if request.param == "lmdb" else open_store("memory:")


def found(store: Store, query: str, **kw: object) -> list[str]:
    return [h.thread_id for h in store.search(query, **kw).hits]  # type: ignore[arg-type]


def test_each_field_is_indexed_and_named(any_store: Store) -> None:
    tid = new_id()
    any_store.append(
        tid,
        conversation(
            tid,
            title="Quarterly invoice",
            prompt="please refund my order",
            answer="the parcel shipped",
            tool="delete_file",
            args={"path": "notes.txt"},
            returned="removed okay",
            metadata={"customer": "acme"},
        ),
    )
    want = {
        "invoice": ("title", 0),
        "refund": ("prompt", 1),
        "parcel": ("response", 2),
        "notes": ("tool_call", 2),
        "removed": ("tool_return", 2),
        "acme": ("metadata", 0),
    }
    for word, (field, turn) in want.items():
        page = any_store.search(word)
        assert [h.thread_id for h in page.hits] == [tid], word
        hit = page.hits[0]
        assert (hit.field, hit.turn) == (field, turn), word
        assert hit.head.thread_id == tid and hit.matches >= 1 and page.behind == 0
    tool = any_store.search("delete_file").hits[0]  # the tool's name: in its call and in its return
    assert tool.field in ("tool_call", "tool_return") and tool.matches == 2
    seqs = {any_store.search(w).hits[0].seq for w in ("refund", "notes", "removed", "parcel")}
    assert seqs == {3, 5, 6, 7}  # the user turn, the call, the return, the answer


def test_snippet_marks_the_match(any_store: Store) -> None:
    tid = new_id()
    any_store.append(tid, conversation(tid, prompt="my espresso machine leaks water all over the counter"))
    snippet = any_store.search("leaks").hits[0].snippet
    assert f"{MARK_START}leaks{MARK_END}" in snippet and "espresso" in snippet


def test_thinking_is_indexed_only_when_asked(tmp_path: Path, open_store: Callable[..., Store]) -> None:
    tid = new_id()
    s = open_store(tmp_path / "s")
    s.append(tid, conversation(tid, thinking="the user seems grumpy"))
    assert found(s, "grumpy") == []
    s.close()
    with Store(tmp_path / "s", search_thinking=True) as s2:  # the index is rebuilt with thinking
        page = s2.search("grumpy")
        assert [(h.thread_id, h.field) for h in page.hits] == [(tid, "thinking")]
    with pytest.raises(InvalidInputError):
        Store("memory:", search_thinking="yes")  # type: ignore[arg-type]


def test_ranking_puts_the_denser_match_first(any_store: Store) -> None:
    a, b, c = new_id(), new_id(), new_id()
    any_store.append(a, conversation(a, prompt="refund " * 5 + "now"))
    any_store.append(
        b,
        conversation(
            b,
            prompt="I would like a refund of the whole order, which arrived broken, "
            "as I explained in my earlier letter to your service desk",
        ),
    )
    any_store.append(c, conversation(c, prompt="nothing to see"))
    page = any_store.search("refund")
    assert [h.thread_id for h in page.hits] == [a, b]
    assert page.hits[0].score > page.hits[1].score


def test_one_hit_per_thread_counting_its_matches(any_store: Store) -> None:
    tid = new_id()
    any_store.append(tid, conversation(tid, prompt="the router is down", answer="restart the router"))
    any_store.append(tid, more("router again", "the router is fine"))
    page = any_store.search("router")
    assert len(page.hits) == 1 and page.hits[0].matches == 4


def test_plain_words_need_no_syntax_and_fts5_errors_are_typed(any_store: Store) -> None:
    tid = new_id()
    any_store.append(tid, conversation(tid, prompt='the "a-b" test: AND ( OR NOT*', tool="delete_file"))
    for q in ["delete_file", '"a-b"', "AND (", "NOT*", "a-b test"]:
        assert found(any_store, q) == [tid], q
    assert found(any_store, "delete_file OR nothing", syntax="fts5") == [tid]
    with pytest.raises(SearchQueryError) as err:
        any_store.search("refund AND (", syntax="fts5")
    assert err.value.query == "refund AND (" and "refund AND (" in str(err.value)
    for bad in ["", "   ", "x" * (MAX_QUERY + 1)]:
        with pytest.raises(SearchQueryError):
            any_store.search(bad)
    for kw in [{"limit": 0}, {"after": ""}, {"after": "not-a-cursor"}, {"syntax": "regex"}]:
        with pytest.raises(InvalidInputError):
            any_store.search("delete_file", **kw)  # type: ignore[arg-type]


def test_scopes_never_see_each_other(any_store: Store) -> None:
    a, b = any_store.scoped("alice"), any_store.scoped("bob")
    ta, tb, tu = new_id(), new_id(), new_id()
    a.append(ta, conversation(ta, prompt="secret plan alpha"))
    b.append(tb, conversation(tb, prompt="secret plan beta"))
    any_store.append(tu, conversation(tu, prompt="secret plan gamma"))
    assert found(a, "secret") == [ta]
    assert found(b, "secret") == [tb]
    assert found(any_store, "secret") == [tu]
    assert found(any_store, "secret", scope="bob") == [tb]
    assert found(a, "beta") == [] and found(any_store, "alpha") == []
    with pytest.raises(InvalidInputError):
        a.search("secret", scope="bob")
    # the same thread id in two scopes is two threads, each found in its own scope only
    a.append(tb, conversation(tb, prompt="shared id delta"))
    assert found(a, "delta") == [tb] and found(b, "delta") == []


def test_deleting_a_thread_removes_its_rows(any_store: Store) -> None:
    keep, gone = new_id(), new_id()
    any_store.append(keep, conversation(keep, prompt="kiwi fruit"))
    any_store.append(gone, conversation(gone, prompt="kiwi bird"))
    assert set(found(any_store, "kiwi")) == {keep, gone}  # indexed before the deletion
    any_store.delete_thread(gone)
    assert found(any_store, "kiwi") == [keep] and found(any_store, "bird") == []
    index = any_store._search.index(any_store)
    assert all(tid == keep for tid, _, _ in index.rows(None).values())


def test_appends_after_a_search_are_caught_up(any_store: Store) -> None:
    tid = new_id()
    any_store.append(tid, conversation(tid, title="first"))
    assert found(any_store, "zebra") == []
    any_store.append(tid, more("tell me about the zebra", "stripes"))
    any_store.append(tid, [retitle("zoo notes")])
    page = any_store.search("zebra")
    assert [h.thread_id for h in page.hits] == [tid] and page.behind == 0
    assert page.hits[0].turn == 3  # the thread's second user turn, after its first user and agent turns
    assert found(any_store, "zoo") == [tid] and found(any_store, "stripes") == [tid]


def test_forks_are_found_with_what_they_inherit(any_store: Store) -> None:
    parent = new_id()
    any_store.append(parent, conversation(parent, prompt="original pelican question"))
    fork = any_store.fork(parent, 6, reason="retry").thread_id
    any_store.append(fork, more("follow-up about walruses", "ok"))
    assert set(found(any_store, "pelican")) == {parent, fork}
    assert found(any_store, "walruses") == [fork]


def test_paging_has_no_duplicates_or_omissions(any_store: Store) -> None:
    tids = [new_id() for _ in range(23)]
    for i, tid in enumerate(tids):
        any_store.append(tid, conversation(tid, prompt="apple " * (1 + i % 5) + "pie"))
    seen: list[str] = []
    after = None
    while True:
        page = any_store.search("apple", limit=5, after=after)
        assert len(page.hits) <= 5
        seen += [h.thread_id for h in page.hits]
        if page.cursor is None:
            break
        after = page.cursor
    assert sorted(seen) == sorted(tids) and len(seen) == len(set(seen))
    assert seen == found(any_store, "apple", limit=100)  # the same order as one page


def test_filters_apply_to_hits(any_store: Store) -> None:
    idle, other, waiting = new_id(), new_id(), new_id()
    any_store.append(idle, conversation(idle, prompt="mango", metadata={"team": "red"}))
    any_store.append(other, conversation(other, prompt="mango", agent="helper"))
    ev = conversation(waiting, prompt="mango")
    any_store.append(waiting, ev[:-1])  # the agent turn is still open
    assert set(found(any_store, "mango")) == {idle, other, waiting}
    assert found(any_store, "mango", activity="running") == [waiting]
    assert set(found(any_store, "mango", activity="idle")) == {idle, other}
    assert found(any_store, "mango", agent="helper") == [other]
    assert found(any_store, "mango", metadata={"team": "red"}) == [idle]
    assert found(any_store, "mango", has_children=True) == []
    later = any_store.head(waiting).updated_ns
    assert waiting not in found(any_store, "mango", updated_before=later)
    assert waiting in found(any_store, "mango", updated_after=later)
    # filtered pages still page without losing any
    first = any_store.search("mango", limit=1, activity="idle")
    rest = any_store.search("mango", limit=5, activity="idle", after=first.cursor)
    assert {h.thread_id for h in first.hits + rest.hits} == {idle, other} and rest.cursor is None


def test_rebuild_equals_live_and_verify_finds_a_planted_difference(
    tmp_path: Path, open_store: Callable[..., Store]
) -> None:
    s = open_store(tmp_path / "s")
    tids = [new_id() for _ in range(6)]
    for tid in tids:
        s.append(tid, conversation(tid, prompt=f"thread {tid[:4]} talks about lemons", tool="juicer"))
    s.scoped("t1").append(tids[0], conversation(tids[0], prompt="scoped lemons"))
    s.delete_thread(tids[5])
    assert found(s, "lemons") and found(s.scoped("t1"), "lemons")
    index = s._search.index(s)
    live = {sc: index.rows(sc) for sc in (None, "t1")}
    [rep] = s.rebuild("search")
    assert rep.projection == "search" and rep.differences == [] and rep.position == s.last_position
    assert {sc: index.rows(sc) for sc in (None, "t1")} == live
    [check] = s.rebuild("search", verify=True)
    assert check.differences == [] and s.verify().ok
    # plant a difference: a row removed from the index file behind the store's back
    db = sqlite3.connect(tmp_path / "s" / INDEX_FILE)
    rid, text = db.execute(
        "SELECT id, text FROM rows WHERE thread_id = ? AND field = 'tool_call'", (tids[2],)
    ).fetchone()
    db.execute("INSERT INTO docs(docs, rowid, text) VALUES ('delete', ?, ?)", (rid, text))
    db.execute("DELETE FROM rows WHERE id = ?", (rid,))
    db.commit()
    db.close()
    problems = s.verify().problems
    assert len(problems) == 1 and tids[2] in problems[0] and "tool_call" in problems[0] and "missing" in problems[0]
    [check] = s.rebuild("search", verify=True)
    assert check.differences == problems
    s.rebuild("search")
    assert s.verify().ok


def test_the_index_survives_reopening(tmp_path: Path) -> None:
    tid = new_id()
    with Store(tmp_path / "s") as s:
        s.append(tid, conversation(tid, prompt="persistent walnut"))
        assert found(s, "walnut") == [tid]
    assert (tmp_path / "s" / INDEX_FILE).exists()
    with Store(tmp_path / "s") as s:
        assert s._search.index(s).behind(None) == 0  # nothing to catch up: its position was kept
        assert found(s, "walnut") == [tid]


def test_async_store_searches_the_same(any_store: Store) -> None:
    tid = new_id()
    any_store.append(tid, conversation(tid, prompt="async aubergine"))

    async def main() -> None:
        page = await AsyncStore(any_store).search("aubergine", limit=5)
        assert page == any_store.search("aubergine", limit=5)
        scoped = await AsyncStore(any_store).scoped("x").search("aubergine")
        assert scoped.hits == []

    asyncio.run(main())


@pytest.mark.parametrize("top_rows", [1, 4, 9, 10_000])
def test_a_page_from_the_best_rows_is_the_order_of_ranking_every_match(
        any_store: Store, monkeypatch: pytest.MonkeyPatch, top_rows: int) -> None:
    """A query reads the best TOP_ROWS rows and ranks every match only when a page needs more:
    with any TOP_ROWS, every page, its cursors and match counts are those of ranking every match
    (ties included: threads of identical text score alike and sort by thread key)."""
    from tplog.search import index as search_index

    tids = [new_id() for _ in range(30)]
    for i, tid in enumerate(tids):
        text = "plum " * (1 + i % 4) + "tart " * (i % 7) if i % 3 else "plum tart"  # every third the same
        any_store.append(tid, conversation(tid, prompt=text, answer="plum" if i % 5 == 0 else "hi"))
    monkeypatch.setattr(search_index, "TOP_ROWS", 0)  # no best rows read: every match ranked and grouped
    ranked = any_store.search("plum", limit=100).hits
    oracle, counts = [h.thread_id for h in ranked], {h.thread_id: h.matches for h in ranked}
    assert sorted(oracle) == sorted(tids)
    assert max(counts.values()) == 2  # the prompt and the answer
    monkeypatch.setattr(search_index, "TOP_ROWS", top_rows)
    seen: list[str] = []
    after = None
    while True:
        page = any_store.search("plum", limit=4, after=after)
        seen += [h.thread_id for h in page.hits]
        assert all(h.matches == counts[h.thread_id] for h in page.hits)
        if page.cursor is None:
            break
        after = page.cursor
    assert seen == oracle
