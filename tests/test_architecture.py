"""The package's layering, checked from the source (``ast``), not by importing it.

- No import cycle between tplog's modules (imports inside functions count; those
  under ``if TYPE_CHECKING:`` do not, they never run).
- Only the LMDB backend imports ``lmdb``; the contract and the reference backend
  import no engine at all.
- Every backend module says what it exports (``__all__``) and star-imports nothing.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "tplog"


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(path: Path) -> list[tuple[str, int]]:
    """(imported module, line) for every runtime import in the file."""
    tree = ast.parse(path.read_text(), str(path))
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _type_checking_only(node):
            for inner in node.body:
                skip.update(id(n) for n in ast.walk(inner))
    out: list[tuple[str, int]] = []
    me = _module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.append((sub if sub in MODULES else base, node.lineno))
    return out


def _graph() -> dict[str, set[str]]:
    return {name: {m for m, _ in _imports(path) if m in MODULES and m != name} for name, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def visit(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                cycles.append([*stack[stack.index(m):], m])
            elif m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n)
    return cycles


def test_no_import_cycles() -> None:
    cycles = _cycles(_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_cycle_check_finds_a_cycle() -> None:
    """The checker itself: a deliberate cycle between two of our modules is found."""
    graph = _graph()
    assert "tplog.codec" in graph["tplog.store"]
    graph["tplog.codec"].add("tplog.store")
    assert any("tplog.codec" in c and "tplog.store" in c for c in _cycles(graph))


def test_only_the_lmdb_backend_imports_lmdb() -> None:
    offenders = [f"{name}:{line}" for name, path in MODULES.items() if not name.startswith("tplog.backends.lmdb")
                 for mod, line in _imports(path) if mod == "lmdb" or mod.startswith("lmdb.")]
    assert not offenders, f"lmdb imported outside tplog/backends/lmdb: {offenders}"
    assert any(mod == "lmdb" for mod, _ in _imports(MODULES["tplog.backends.lmdb.engine"]))


@pytest.mark.parametrize("name", ["tplog.backends.contract", "tplog.backends.memory"])
def test_contract_and_reference_import_no_engine(name: str) -> None:
    bad = [mod for mod, _ in _imports(MODULES[name])
           if mod.startswith(("lmdb", "tplog.backends.lmdb", "tplog.store", "psycopg"))]
    assert not bad, f"{name} imports {bad}"


def test_backend_modules_declare_their_exports() -> None:
    for name, path in MODULES.items():
        if not name.startswith("tplog.backends"):
            continue
        tree = ast.parse(path.read_text())
        names = {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
                 if isinstance(t, ast.Name)}
        names |= {node.target.id for node in tree.body
                  if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)}
        assert "__all__" in names, f"{name} has no __all__"
        stars = [n.lineno for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names)]
        assert not stars, f"{name} star-imports at lines {stars}"
