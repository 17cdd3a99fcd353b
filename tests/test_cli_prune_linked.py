"""``tplog prune --dry-run`` with a linked thread: the policy it reports, what it keeps and why, and
``--no-keep-linked`` (nothing written either way)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from conftest import link, register, started

from tplog import Store
from tplog.cli import main


def _plan(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    rc = main(["prune", *argv, "--dry-run"])
    out, err = capsys.readouterr()
    assert rc == 0 and err == "", err
    plan: dict[str, object] = json.loads(out)
    return plan


def test_prune_dry_run_keeps_a_linked_thread_unless_told_not_to(capsys: pytest.CaptureFixture[str],
                                                                tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    target, other, source = (str(uuid.uuid4()) for _ in range(3))
    with Store(store) as s:
        s.append(target, [started(target), register()])
        s.append(other, [started(other), register()])
        s.append(source, [started(source), register(), link(target)])  # the newest: within --max-threads 1
    plan = _plan(capsys, store, "--max-threads", "1")
    assert plan["dry_run"] is True
    assert plan["policy"] == {"max_age_ns": None, "max_threads": 1, "keep_if_linked": True}
    assert [r["thread_id"] for r in plan["removed"]] == [other]  # type: ignore[attr-defined]
    assert plan["kept"] == [{"thread_id": target, "why": f"linked to by {[source]}"}]
    plan = _plan(capsys, store, "--max-threads", "1", "--no-keep-linked")
    assert plan["policy"] == {"max_age_ns": None, "max_threads": 1, "keep_if_linked": False}
    assert sorted(r["thread_id"] for r in plan["removed"]) == sorted([target, other])  # type: ignore[attr-defined]
    assert plan["kept"] == []
    with Store(store, readonly=True) as s:  # a dry run writes nothing
        assert [s.head(t).status for t in (target, other, source)] == ["active"] * 3
        assert s.stats()["threads"] == 3
