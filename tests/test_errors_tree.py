"""Every error tplog raises is a ``TplogError`` and is drawn, under its own parent, in the tree of
``tplog.errors``' docstring (where a user looks first), wherever the class is defined."""

from __future__ import annotations

import importlib
import pkgutil
import re

import tplog
from tplog import errors
from tplog.errors import TplogError


def _all_errors() -> list[type[TplogError]]:
    for m in pkgutil.walk_packages(tplog.__path__, "tplog."):
        if not m.name.endswith("__main__"):
            importlib.import_module(m.name)  # the dev extras are installed: every module imports
    out: list[type[TplogError]] = []
    todo: list[type[TplogError]] = [TplogError]
    while todo:
        cls = todo.pop()
        out.append(cls)
        todo += cls.__subclasses__()
    return out


def _drawn_parents() -> dict[str, str]:
    """Each class name in the docstring's tree, with the name drawn one level above it."""
    doc = errors.__doc__ or ""
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in doc.splitlines():
        m = re.match(r"^ {4}((?:[│ ] {3})*)(?:[├└]── )?(\w+Error)\b", line)
        if not m:
            continue
        depth = len(m.group(1)) // 4 + (1 if "──" in line else 0)
        stack = [(d, n) for d, n in stack if d < depth]
        if stack:
            parents[m.group(2)] = stack[-1][1]
        stack.append((depth, m.group(2)))
    return parents


def test_every_error_is_in_the_tree_under_its_parent() -> None:
    parents = _drawn_parents()
    for cls in _all_errors():
        if cls is TplogError:
            continue
        assert cls.__name__ in parents, f"{cls.__module__}.{cls.__name__} is not in tplog.errors' tree"
        base = next(b for b in cls.__bases__ if issubclass(b, TplogError))
        assert parents[cls.__name__] == base.__name__, cls


def test_the_tree_draws_no_error_that_does_not_exist() -> None:
    names = {c.__name__ for c in _all_errors()}
    assert set(_drawn_parents()) <= names
