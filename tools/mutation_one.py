"""Mutation-test one core module with a narrowed test selection (`make mutation MODULE=... TESTS=...`).

mutmut reads its configuration only from pyproject.toml, and its first step traces the whole test
selection once; for one module a few test files suffice. So this copies tplog/, tests/ and
pyproject.toml into mutants-one/<module>/, rewrites [tool.mutmut] there (only_mutate = the module,
the test selection = TESTS) and runs mutmut and tools/mutation_report.py in that copy. A later run
with the same module refreshes the copied tests and re-runs only the mutants not killed before.

    python tools/mutation_one.py tplog/codec.py tests/test_store.py tests/test_damage.py -k "not postgres"
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__)
        return 2
    module, tests = argv[0], argv[1:]
    work = ROOT / "mutants-one" / module.replace("/", "_").replace("*", "all")
    work.mkdir(parents=True, exist_ok=True)
    for name in ("tplog", "tests"):
        shutil.rmtree(work / name, ignore_errors=True)
        shutil.copytree(ROOT / name, work / name, ignore=shutil.ignore_patterns("__pycache__", "node_modules"))
    # mutmut copies a file into its mutants/ only once: new or changed tests must reach it too.
    shutil.rmtree(work / "mutants" / "tests", ignore_errors=True)
    # ...and which tests reach which function is traced once and kept: a test added since (or now
    # reaching other functions) would never run against a mutant, so the tracing is redone.
    (work / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)
    (work / "tools").mkdir(exist_ok=True)
    shutil.copy2(ROOT / "tools" / "mutation_report.py", work / "tools")
    text = (ROOT / "pyproject.toml").read_text()
    text = re.sub(r"only_mutate = \[.*?\]", lambda _: f"only_mutate = [{json.dumps(module)}]", text, flags=re.S)
    selection = ", ".join(json.dumps(t) for t in tests)
    text = re.sub(r"pytest_add_cli_args_test_selection = \[.*?\n\]",
                  lambda _: f"pytest_add_cli_args_test_selection = [{selection}]", text, flags=re.S)
    (work / "pyproject.toml").write_text(text)
    previous = _undecided_or_survived(work)
    bin_dir = Path(sys.executable).parent
    run = ["nice", "-n", "10", str(bin_dir / "mutmut"), "run", "--max-children", "2", *previous]
    subprocess.run(run, cwd=work, check=False)
    return subprocess.run([sys.executable, "tools/mutation_report.py"], cwd=work, check=False).returncode


def _undecided_or_survived(work: Path) -> list[str]:
    """On a re-run, the survivors of the last run and the mutants it did not reach (mutmut keeps the
    killed ones decided and runs only the named ones)."""
    if not (work / "mutants").exists():
        return []
    out = subprocess.run([str(Path(sys.executable).parent / "mutmut"), "results"], cwd=work,
                         capture_output=True, text=True, check=False).stdout
    again = (": survived", ": no tests", ": not checked")
    return [line.split(":")[0].strip() for line in out.splitlines() if line.rstrip().endswith(again)]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
