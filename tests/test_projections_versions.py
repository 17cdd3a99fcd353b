"""The projections' tracking rows on open and the error a read of a projection that is not
current raises (tplog/backends/lmdb/projections.py `init_infos`, `require_live`; written for
their surviving mutants, tests/MUTANTS.md): a new store starts every projection live at
position 0; an older store's missing rows are written stale; a projection folded by another
version of tplog is marked stale where it was (its version and position kept); a current or
already stale one is left alone. Real LMDB files, each store reopened.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ToyStore as Store
from conftest import agent_start, completed, spawn_message, started, user

from tplog.backends.lmdb import projections as proj
from tplog.errors import RebuildRequiredError

NAMES = ("links", "state")


def _infos(s: Store) -> dict[str, tuple[int, int, str] | None]:
    with s.backend.engine.read() as txn:
        out: dict[str, tuple[int, int, str] | None] = {}
        for name in NAMES:
            info = proj.read_info(txn, name)
            out[name] = None if info is None else (info.version, info.position, info.status)
        return out


def _with_events(path: Path) -> None:
    with Store(path) as s:
        s.append("p", [started("p"), user(), agent_start(), spawn_message("kid"), completed()])


def test_a_new_store_starts_every_projection_live_at_position_0(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as s:
        assert _infos(s) == {n: (proj.VERSIONS[n], 0, "live") for n in NAMES}


def test_an_older_store_without_tracking_rows_gets_them_stale(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _with_events(path)
    with Store(path) as s:
        s.backend.engine.run_write(lambda txn: [txn.delete("meta", proj.meta_key(n)) for n in NAMES])
    with Store(path) as s:
        assert _infos(s) == {n: (proj.VERSIONS[n], 0, "stale") for n in NAMES}


def test_a_projection_of_another_version_is_marked_stale_where_it_was(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _with_events(path)
    with Store(path) as s:
        s.backend.engine.run_write(lambda txn: [
            proj.write_info(txn, "links", proj.ProjectionInfo(proj.VERSIONS["links"] - 1, 4, "live")),
            proj.write_info(txn, "state", proj.ProjectionInfo(proj.VERSIONS["state"] + 1, 3, "stale")),
        ])
    with Store(path) as s:
        assert _infos(s) == {"links": (proj.VERSIONS["links"] - 1, 4, "stale"),
                             "state": (proj.VERSIONS["state"] + 1, 3, "stale")}


def test_current_projections_are_left_alone_on_open(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _with_events(path)
    with Store(path) as s:
        before = _infos(s)
        s.backend.engine.run_write(lambda txn: proj.write_info(
            txn, "state", proj.ProjectionInfo(proj.VERSIONS["state"], 2, "stale")))
    assert before == {n: (proj.VERSIONS[n], 0, "live") for n in NAMES}
    with Store(path) as s:
        assert _infos(s) == {"links": (proj.VERSIONS["links"], 0, "live"),
                             "state": (proj.VERSIONS["state"], 2, "stale")}


@pytest.mark.parametrize("info", [None, (2, 5, "live"), (3, 1, "stale")], ids=["missing", "v2-live", "v3-stale"])
def test_a_links_read_names_why_the_projection_is_not_current(tmp_path: Path,
                                                              info: tuple[int, int, str] | None) -> None:
    with Store(tmp_path / "s") as s:
        s.append("p", [started("p"), user(), agent_start(), spawn_message("kid"), completed()])
        if info is None:
            s.backend.engine.run_write(lambda txn: txn.delete("meta", proj.meta_key("links")))
            have = "missing"
        else:
            s.backend.engine.run_write(lambda txn: proj.write_info(txn, "links", proj.ProjectionInfo(*info)))
            have = f"version {info[0]}, {info[2]}"
        with pytest.raises(RebuildRequiredError) as exc:
            s.children("p")
        assert str(exc.value) == (
            f"{s.path}: the 'links' projection is not current ({have}; this tplog folds version "
            f"{proj.VERSIONS['links']}); run `tplog rebuild {s.path} --projection links`")
