"""The package's layering, checked from the source (``ast``), not by importing it.

- No import cycle between tplog's modules (imports inside functions count; those
  under ``if TYPE_CHECKING:`` do not, they never run). Importing ``a.b.c`` runs the
  package ``a.b``'s ``__init__`` too, so that counts as an import of it.
- Only the LMDB backend imports ``lmdb``, only the PostgreSQL backend ``psycopg``;
  the contract and the reference backend import no engine at all.
- Integrations import only public names of tplog: no ``tplog._*`` module, no
  ``_``-prefixed name, nothing a module leaves out of its ``__all__``.
- No module reaches another module's ``_name``: imported, or through a module alias
  (``import x as y; y._name``, ``from a import b; b._c``).
- The public layout: no module under an old private path (``tplog._store``, ...).
- Every module says what it exports (``__all__``) and star-imports nothing.
- tests/ mirrors tplog/: each test directory is a package's path (or listed, with why).
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


def _packages_run(importer: str, target: str) -> set[str]:
    """The packages whose ``__init__`` importing ``target`` runs, besides ``target``: its
    ancestors, except the root (every module is under it) and the importer's own ancestors
    (already being imported when the importer runs)."""
    parts = target.split(".")
    mine = {".".join(importer.split(".")[:i]) for i in range(1, importer.count(".") + 1)}
    return {p for p in (".".join(parts[:i]) for i in range(2, len(parts))) if p in MODULES and p not in mine}


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        direct = {m for m, _ in _imports(path) if m in MODULES}
        graph[name] = (direct | {p for m in direct for p in _packages_run(name, m)}) - {name}
    return graph


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


def test_importing_a_submodule_counts_as_importing_its_package() -> None:
    """A package ``__init__`` importing a module that imports one of the package's
    submodules is a cycle Python can trip on: the graph has that edge."""
    graph = _graph()
    assert "tplog.protocol" in graph["tplog.codec"]  # it imports tplog.protocol.model
    assert "tplog.backends.lmdb" not in graph["tplog.backends.lmdb.recorder"]  # its own package
    graph["tplog.protocol"].add("tplog.protocol.rules")  # as if protocol/__init__ re-exported the rules
    assert any("tplog.protocol" in c and "tplog.protocol.rules" in c for c in _cycles(graph))


def test_only_the_lmdb_backend_imports_lmdb() -> None:
    offenders = [f"{name}:{line}" for name, path in MODULES.items() if not name.startswith("tplog.backends.lmdb")
                 for mod, line in _imports(path) if mod == "lmdb" or mod.startswith("lmdb.")]
    assert not offenders, f"lmdb imported outside tplog/backends/lmdb: {offenders}"
    assert any(mod == "lmdb" for mod, _ in _imports(MODULES["tplog.backends.lmdb.engine"]))


def test_only_the_postgres_backend_imports_psycopg() -> None:
    offenders = [f"{name}:{line}" for name, path in MODULES.items() if not name.startswith("tplog.backends.postgres")
                 for mod, line in _imports(path) if mod.split(".")[0] in ("psycopg", "psycopg_pool")]
    assert not offenders, f"psycopg imported outside tplog/backends/postgres: {offenders}"
    assert any(mod.startswith("psycopg") for mod, _ in _imports(MODULES["tplog.backends.postgres.recorder"]))


@pytest.mark.parametrize("name", ["tplog.backends.contract", "tplog.backends.common", "tplog.backends.memory"])
def test_contract_and_reference_import_no_engine(name: str) -> None:
    bad = [mod for mod, _ in _imports(MODULES[name])
           if mod.startswith(("lmdb", "tplog.backends.lmdb", "tplog.backends.postgres", "tplog.store", "psycopg"))]
    assert not bad, f"{name} imports {bad}"


def _exports(name: str) -> set[str] | None:
    """A module's ``__all__`` when it is a literal list of strings (read from the source)."""
    for node in ast.parse(MODULES[name].read_text()).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else (
            node.target if isinstance(node, ast.AnnAssign) else None)
        if isinstance(target, ast.Name) and target.id == "__all__":
            value = node.value  # type: ignore[union-attr]
            if isinstance(value, ast.List) and all(isinstance(e, ast.Constant) for e in value.elts):
                return {e.value for e in value.elts}  # type: ignore[attr-defined]
    return None


def _private_uses(path: Path) -> list[str]:
    """Every import in ``path`` of a private tplog module or name, or of a name a core module
    (outside ``tplog.integrations``) does not export."""
    bad: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            bad += [f"{node.lineno}: import {a.name}" for a in node.names
                    if a.name.split(".")[0] == "tplog" and any(p.startswith("_") for p in a.name.split("."))]
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "tplog":
            mod = node.module or ""
            if any(p.startswith("_") for p in mod.split(".")):
                bad.append(f"{node.lineno}: from {mod}")
                continue
            # Integrations share helpers among themselves freely, but never a private one.
            exported = _exports(mod) if mod in MODULES and not mod.startswith("tplog.integrations") else None
            for a in node.names:
                if f"{mod}.{a.name}" in MODULES:
                    continue  # a submodule
                if a.name.startswith("_") or (exported is not None and a.name not in exported):
                    bad.append(f"{node.lineno}: from {mod} import {a.name}")
    return bad


#: The modules that may still reach another module's private names, each with why (keep it short:
#: each entry names a file another branch is editing).
PRIVATE_IMPORTS_ALLOWED: dict[tuple[str, str], str] = {
    ("tplog.backends.lmdb.recorder", "tplog.backends.lmdb.projections"):
        "proj._Tables (kept as an alias of Tables): lmdb/recorder.py is being reworked on the multi-process "
        "commit branch; switch it to Tables and drop the alias after that lands",
    ("tplog.cli", "tplog.protocol.model"):
        "m._Base (any protocol model value): cli.py is being edited on the search branch; give _Base a public "
        "name after that lands",
    ("tplog.integrations.server.app", "tplog.protocol.model"): "m._Base, as above (the server family branch)",
}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_names_used(path: Path, me: str | None = None) -> list[tuple[str, str, int]]:
    """Every use in ``path`` of another tplog module's ``_name`` (dunders such as ``__version__``
    aside), as (module, name, line): imported (``from tplog.x import _n``, relative imports
    resolved), or reached through a name bound to a module (``import tplog.x as y; y._n``,
    ``from tplog import x; x._n``, ``import tplog.x; tplog.x._n``) or to one of its names
    (``from tplog.store import Store; Store._encode``). ``me``: the module ``path`` is (read from
    its path under tplog/ if not given)."""
    tree = ast.parse(path.read_text())
    me = me if me is not None else _module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    modules: dict[str, str] = {}  # local name -> the tplog module it is bound to
    names: dict[str, str] = {}  # local name -> the tplog module it was imported from (not a module)
    out: set[tuple[str, str, int]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "tplog":
                    modules[a.asname or "tplog"] = a.name if a.asname else "tplog"
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            if base.split(".")[0] != "tplog":
                continue
            for a in node.names:
                if f"{base}.{a.name}" in MODULES:
                    modules[a.asname or a.name] = f"{base}.{a.name}"
                elif _private(a.name):
                    out.add((base, a.name, node.lineno))
                else:
                    names[a.asname or a.name] = base
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        chain: list[str] = []
        value: ast.expr = node
        while isinstance(value, ast.Attribute):
            chain.append(value.attr)
            value = value.value
        if not isinstance(value, ast.Name):
            continue
        if value.id in names and _private(chain[-1]):
            out.add((names[value.id], f"{value.id}.{chain[-1]}", node.lineno))
            continue
        mod = modules.get(value.id)
        for attr in reversed(chain if mod is not None else []):
            if f"{mod}.{attr}" in MODULES:
                mod = f"{mod}.{attr}"
                continue
            if _private(attr):
                out.add((mod, attr, node.lineno))  # type: ignore[arg-type]
            break
    return sorted((mod, n, line) for mod, n, line in out if mod != me)


def test_no_module_reaches_another_modules_private_names() -> None:
    """A module's ``_name`` is its own: what siblings share is public (in ``__all__``), so that
    a module can be read, changed and tested knowing who depends on what. Imported or reached
    through a module alias alike."""
    used = {name: _private_names_used(path) for name, path in MODULES.items()}
    found = {f"{name}:{line}: {mod} {n}" for name, uses in used.items() for mod, n, line in uses
             if (name, mod) not in PRIVATE_IMPORTS_ALLOWED}
    assert not found, sorted(found)
    pairs = {(name, mod) for name, uses in used.items() for mod, _, _ in uses}
    assert set(PRIVATE_IMPORTS_ALLOWED) <= pairs, set(PRIVATE_IMPORTS_ALLOWED) - pairs  # no stale entries


def test_the_private_names_check_finds_them(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from tplog.store import Store, _x\n"  # 1
        "from tplog import __version__, store\n"  # 2
        "from tplog.backends.lmdb.commit import _Z as z\n"  # 3
        "from tplog.backends.lmdb import projections as proj, rebuild\n"  # 4
        "import tplog.codec as c\n"  # 5
        "import tplog.backends.lmdb.keys\n"  # 6
        "from .. import _up\n"  # 7: relative, resolved
        "proj._Tables(proj.Tables), rebuild.items_in, c.__name__\n"  # 8
        "c._private_thing\n"  # 9
        "tplog.backends.lmdb.keys._k, tplog.backends.lmdb.keys.tkey\n"  # 10
        "store._check()\n"  # 11
        "Store._encode, Store.append\n"  # 12
        "x = object(); x._fine\n"  # 13: nothing tplog's
    )
    assert _private_names_used(probe, me="tplog.backends.probe") == [
        ("tplog", "_up", 7), ("tplog.backends.lmdb.commit", "_Z", 3),
        ("tplog.backends.lmdb.keys", "_k", 10),
        ("tplog.backends.lmdb.projections", "_Tables", 8), ("tplog.codec", "_private_thing", 9),
        ("tplog.store", "Store._encode", 12), ("tplog.store", "_check", 11), ("tplog.store", "_x", 1),
    ]
    own = tmp_path / "own.py"
    own.write_text("import tplog.codec as c\nc._mine\n")
    assert _private_names_used(own, me="tplog.codec") == []  # a module's own names are its own


def test_integrations_import_only_public_names() -> None:
    found = {name: _private_uses(path) for name, path in MODULES.items() if name.startswith("tplog.integrations")}
    assert not {k: v for k, v in found.items() if v}, found


def test_the_public_names_check_finds_private_imports(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("from tplog.store import _check_chunk\nfrom tplog.store import MEMORY\nimport tplog._store\n"
                     "from tplog.protocol import model as m\nfrom tplog.errors import TplogError\nimport tplog.aio\n")
    assert _private_uses(probe) == ["1: from tplog.store import _check_chunk", "2: from tplog.store import MEMORY",
                                    "3: import tplog._store"]


OLD_PRIVATE_PATHS = ["_model", "_json", "_validate", "_canonical", "_versions", "_rules", "_errors", "_events",
                     "_store", "_cli", "_fold", "_codec", "_verify", "_storage", "_keys", "_projections"]


def test_no_module_under_an_old_private_path() -> None:
    assert not [m for m in OLD_PRIVATE_PATHS if f"tplog.{m}" in MODULES or (ROOT / m).exists()]
    underscored = [name for name in MODULES if any(p.startswith("_") for p in name.split("."))]
    assert underscored == ["tplog.__main__"], underscored


def test_modules_declare_their_exports() -> None:
    for name, path in MODULES.items():
        if name == "tplog.__main__":
            continue
        assert _exports(name) is not None, f"{name} has no literal __all__"
        stars = [n.lineno for n in ast.walk(ast.parse(path.read_text()))
                 if isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names)]
        assert not stars, f"{name} star-imports at lines {stars}"


TESTS = Path(__file__).resolve().parent

#: Test directories that mirror no package under tplog/, each with why (their subdirectories too).
UNMIRRORED_TEST_DIRS: dict[str, str] = {
    "aisdk": "the AI SDK client (tplog/integrations/vercel) driven under Node.js, with its page's sources",
    "fixtures": "data: the spec's example documents",
    "golden": "data: stored values pinned byte for byte, one file per format",
    "integrations/fixtures": "data: recorded model runs",
    "postgres": "tplog/backends/postgres's tests and their server harness: to move to backends/postgres once no "
                "branch is adding to it",
    "server": "tplog/integrations/server's tests and their harness: to move to integrations/server likewise",
}


def _unmirrored(tests: Path, package: Path, allowed: dict[str, str]) -> list[str]:
    """The directories under ``tests`` that are not a package's path under ``package`` (a directory
    with an ``__init__.py``) and are not in ``allowed`` nor below an entry of it."""
    out = []
    for d in sorted(p for p in tests.rglob("*") if p.is_dir()):
        rel = d.relative_to(tests)
        if any(part.startswith((".", "__")) or part == "node_modules" for part in rel.parts):
            continue
        if any(rel.as_posix() == a or rel.as_posix().startswith(a + "/") for a in allowed):
            continue
        if not (package / rel / "__init__.py").is_file():
            out.append(rel.as_posix())
    return out


def test_test_directories_mirror_the_package() -> None:
    """tests/ is laid out as tplog/ is (tests/backends/lmdb/ for tplog/backends/lmdb/, ...), so that
    a module's tests are found where the module is."""
    assert not _unmirrored(TESTS, ROOT, UNMIRRORED_TEST_DIRS), _unmirrored(TESTS, ROOT, UNMIRRORED_TEST_DIRS)
    stale = [a for a in UNMIRRORED_TEST_DIRS if not (TESTS / a).is_dir()]
    assert not stale, stale


def test_the_mirror_check_finds_a_stray_directory(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "sub" / "__init__.py").write_text("")
    for d in ("sub", "campaign", "data/more", "sub/__pycache__"):
        (tmp_path / "tests" / d).mkdir(parents=True)
    assert _unmirrored(tmp_path / "tests", tmp_path / "pkg", {"data": "data"}) == ["campaign"]
