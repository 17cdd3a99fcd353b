"""``tplog search``: JSON when piped, a table on a (pseudo-)terminal; ``tplog rebuild --projection search``
and ``tplog verify`` on the index."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from test_cli_human import on_terminal, piped

from search.helpers import conversation, new_id
from tplog import Store
from tplog.search import INDEX_FILE


@pytest.fixture
def store(tmp_path: Path) -> tuple[str, list[str]]:
    path = str(tmp_path / "store")
    tids = [new_id() for _ in range(3)]
    with Store(path) as s:
        s.append(
            tids[0],
            conversation(
                tids[0], title="Order 1042", prompt="a refund for my order", tool="issue_refund", args={"order": 1042}
            ),
        )
        s.append(tids[1], conversation(tids[1], title="Lost parcel", prompt="where is my refund", agent="helper"))
        s.append(tids[2], conversation(tids[2], title="Hello", prompt="hello"))
        s.scoped("team").append(tids[2], conversation(tids[2], title="Scoped", prompt="team refund"))
    return path, tids


def test_piped_output_is_the_page_as_json(store: tuple[str, list[str]]) -> None:
    path, tids = store
    page = json.loads(piped("search", path, "refund"))
    assert set(page) == {"hits", "cursor", "behind"} and page["behind"] == 0 and page["cursor"] is None
    assert [h["thread_id"] for h in page["hits"]] == [tids[0], tids[1]]
    hit = page["hits"][0]
    assert {"turn", "seq", "field", "snippet", "score", "matches", "head"} <= set(hit)
    assert "\ue000refund\ue001" in hit["snippet"] and hit["head"]["title"] == "Order 1042"
    one = json.loads(piped("search", path, "refund", "--limit", "1"))
    rest = json.loads(piped("search", path, "refund", "--after", one["cursor"]))
    assert [h["thread_id"] for h in one["hits"] + rest["hits"]] == [tids[0], tids[1]]
    assert [h["thread_id"] for h in json.loads(piped("search", path, "refund", "--agent", "helper"))["hits"]] == [
        tids[1]
    ]
    scoped = json.loads(piped("search", path, "refund", "--scope", "team"))
    assert [(h["thread_id"], h["head"]["title"]) for h in scoped["hits"]] == [(tids[2], "Scoped")]
    assert json.loads(piped("search", path, "refund", "--activity", "running"))["hits"] == []
    assert json.loads(piped("search", path, "issue_refund OR nothing", "--fts5"))["hits"][0]["thread_id"] == tids[0]


def test_a_terminal_shows_a_table_with_the_match_bracketed(store: tuple[str, list[str]]) -> None:
    path, tids = store
    out = on_terminal("search", path, "parcel", columns=160)
    assert "thread" in out and "snippet" in out and tids[1] in out and "[parcel]" in out, out
    assert "no matches" in on_terminal("search", path, "zzzz")


def test_a_bad_query_is_an_error_naming_it(store: tuple[str, list[str]]) -> None:
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "tplog", "search", store[0], "refund AND (", "--fts5"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "refund AND (" in r.stderr and r.stdout == ""


def test_rebuild_and_verify_cover_the_index(store: tuple[str, list[str]]) -> None:
    path, tids = store
    piped("search", path, "refund")  # the index exists from here on
    [rep] = json.loads(piped("rebuild", path, "--projection", "search"))
    assert rep["projection"] == "search" and rep["differences"] == []
    every = json.loads(piped("rebuild", path))  # all projections: the index too, once it exists
    assert [r["projection"] for r in every] == ["links", "state", "search"]
    assert json.loads(piped("verify", path))["ok"] is True
    db = sqlite3.connect(Path(path) / INDEX_FILE)
    db.execute("UPDATE rows SET text = 'tampered' WHERE thread_id = ? AND field = 'title'", (tids[1],))
    db.commit()
    db.close()
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "tplog", "verify", path], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    problems = json.loads(r.stdout)["problems"]
    assert any(tids[1] in p and "title" in p for p in problems), problems
    piped("rebuild", path, "--projection", "search")
    assert json.loads(piped("verify", path))["ok"] is True
