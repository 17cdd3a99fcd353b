"""The public module layout (issue 19): public homes, and the tool that moves code onto them.

``tools/fix_imports.py`` rewrites code written against the old private module paths; run over
this repository it finds nothing left to rewrite.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("fix_imports", REPO / "tools" / "fix_imports.py")
assert _spec is not None and _spec.loader is not None
fix: Any = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fix)


@pytest.mark.parametrize("old,new", [
    ("from tplog._store import Store, AsyncStore", "from tplog.store import Store, AsyncStore"),
    ("from tplog._fold import fold", "from tplog.projections.fold import fold"),
    ("from tplog import _model as m", "from tplog.protocol import model as m"),
    ("from tplog import _validate\n", "from tplog.protocol import validate as _validate\n"),
    ("import tplog._canonical, tplog._cli", "import tplog.protocol.canonical, tplog.cli"),
    ('monkeypatch.setattr("tplog._codec.Codec.check", f)', 'monkeypatch.setattr("tplog.codec.Codec.check", f)'),
    ("see tplog/_rules.py and `tplog._errors`", "see tplog/protocol/rules.py and `tplog.errors`"),
    ("from tplog._json_extra import x", "from tplog._json_extra import x"),  # not a moved module
    ("from tplog import _storage", "from tplog import _storage"),  # moved earlier, by hand
])
def test_fix_imports_rewrites_old_paths(old: str, new: str) -> None:
    assert fix.rewrite(old) == new


def test_every_rewritten_path_is_a_module() -> None:
    for new in fix.MOVES.values():
        importlib.import_module(f"tplog.{new}")


def test_nothing_in_the_repository_uses_an_old_path() -> None:
    skip = {REPO / "tools" / "fix_imports.py", REPO / "tests" / "test_layout.py",
            REPO / "tests" / "test_architecture.py"}
    files = [p for d in ("tplog", "tests", "benchmarks", "tools") for p in (REPO / d).rglob("*.py") if p not in skip]
    stale = [str(p.relative_to(REPO)) for p in files if fix.rewrite(p.read_text()) != p.read_text()]
    assert not stale, stale


def test_public_homes_hold_the_exported_objects() -> None:
    import tplog
    import tplog.aio
    import tplog.errors
    import tplog.events
    import tplog.store

    assert tplog.aio.AsyncStore is tplog.AsyncStore
    assert tplog.store.ExpectedVersion is not None and "ExpectedVersion" in tplog.store.__all__
    for module in (tplog.errors, tplog.events):  # each name at the top, or moved off it to here (issue 39)
        assert all(n in tplog.__all__ or tplog.MOVED.get(n) == module.__name__ for n in module.__all__)
        assert all(getattr(module, n) is getattr(tplog, n) for n in set(module.__all__) & set(tplog.__all__))
