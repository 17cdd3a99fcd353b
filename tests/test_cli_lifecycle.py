"""``tplog threads`` filters and ``tplog fork`` through the CLI entry point (real LMDB stores)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import agent_start, exchange, register, started, user

from tplog import Store
from tplog.cli import main


def ok_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    assert rc == 0 and err == "", err
    return json.loads(out)


def fails(capsys: pytest.CaptureFixture[str], *argv: str, match: str) -> None:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.startswith("error: ") and match in err, err


def test_threads_filters_and_fork(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    with Store(store) as s:
        s.append(a, [started(a, title="Alpha plan", metadata={"team": "red", "n": 3}), register(), *exchange()])
        s.append(b, [started(b, title="Beta"), register("b1"), user(), agent_start("b1")])
    ids = lambda page: [h["thread_id"] for h in page["threads"]]  # noqa: E731
    assert ids(ok_json(capsys, "threads", store, "--activity", "running")) == [b]
    assert ids(ok_json(capsys, "threads", store, "--activity", "running", "--activity", "idle")) == [b, a]
    assert ids(ok_json(capsys, "threads", store, "--agent", "a1")) == [a]
    assert ids(ok_json(capsys, "threads", store, "--title", "ALPHA")) == [a]
    assert ids(ok_json(capsys, "threads", store, "--meta", "team=red", "--meta", "n=3")) == [a]
    assert ids(ok_json(capsys, "threads", store, "--meta", "n=4")) == []
    assert ids(ok_json(capsys, "threads", store, "--updated-after", "2000-01-01T00:00:00Z")) == [b, a]
    assert ids(ok_json(capsys, "threads", store, "--updated-before", "2000-01-01")) == []
    first = ok_json(capsys, "threads", store, "--limit", "1")
    assert ids(first) == [b] and first["cursor"]
    assert ids(ok_json(capsys, "threads", store, "--limit", "1", "--after", first["cursor"])) == [a]
    fails(capsys, "threads", store, "--updated-after", "soon", match="updated-after")
    fails(capsys, "threads", store, "--meta", "team", match="KEY=VALUE")
    # fork: at the end of a's first exchange (seq 6), then a fork of a fork
    res = ok_json(capsys, "fork", store, a, "--at", "6", "--reason", "try again")
    assert (res["first_seq"], res["last_seq"]) == (1, 6)
    named = str(uuid.uuid4())
    assert ok_json(capsys, "fork", store, res["thread_id"], "--at", "6", "--new-id", named)["thread_id"] == named
    assert ids(ok_json(capsys, "threads", store, "--has-children")) == [res["thread_id"], a]
    assert ids(ok_json(capsys, "threads", store, "--roots", "--title", "alpha")) == [a]
    fails(capsys, "fork", store, b, "--at", "4", match="not a turn boundary")
    fails(capsys, "fork", store, a, "--at", "6", "--new-id", named, match=named)
    with Store(store) as s:
        assert s.export(named).turns == s.export(a).turns


def test_prune_and_reports(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    ts = [str(uuid.uuid4()) for _ in range(3)]
    with Store(store) as s:
        for t in ts:
            s.append(t, [started(t), user()])
    plan = ok_json(capsys, "prune", store, "--max-threads", "1", "--dry-run")
    assert plan["dry_run"] and [r["thread_id"] for r in plan["removed"]] == [ts[1], ts[0]]
    assert plan["report_thread_id"] is None
    with Store(store) as s:
        assert all(s.exists(t) for t in ts)
    fails(capsys, "prune", store, "--max-threads", "0", match="every thread")
    fails(capsys, "prune", store, "--max-age", "soon", match="--max-age")
    fails(capsys, "prune", store, match="max_age and/or max_threads")
    assert plan["removed"] == ok_json(capsys, "prune", store, "--max-threads", "1")["removed"]
    assert ok_json(capsys, "prune", store, "--max-age", "365d")["removed"] == []
    reports = ok_json(capsys, "prune-reports", store)["reports"]
    assert [len(r["removed"]) for r in reports] == [0, 2]
    assert "max_threads" in reports[1]["removed"][0]["why"]
    with Store(store) as s:
        assert [s.exists(t) for t in ts] == [False, False, True]
        assert s.read(ts[0])[-1].event.reason.startswith("retention: beyond the newest 1")  # type: ignore[union-attr]
