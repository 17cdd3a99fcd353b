"""Print the mutation score of each mutated module from mutmut's results in ./mutants (`make mutation`).

Run from the repository root after `mutmut run`; the survivors it lists are the ones tests/MUTANTS.md
must account for (an equivalent mutant, or a test to add).
"""

from __future__ import annotations

import sys
from collections import Counter

from mutmut.mutation.data import SourceFileMutationData
from mutmut.stats import status_by_exit_code
from mutmut.utils.file_utils import walk_mutatable_files


def main() -> int:
    total: Counter[str] = Counter()
    survivors: list[str] = []
    print(f"{'module':45} {'killed':>7} {'survived':>8} {'no tests':>8} {'timeout':>7} {'other':>6} {'score':>7}")
    for path in walk_mutatable_files():
        data = SourceFileMutationData(path=path)
        data.load()
        counts: Counter[str] = Counter()
        for name, code in data.exit_code_by_key.items():
            status = status_by_exit_code[code]
            counts[status] += 1
            if status in ("survived", "no tests"):
                survivors.append(f"{name}: {status}")
        if not counts:
            continue
        total.update(counts)
        print(_row(str(path), counts))
    print(_row("core (all of the above)", total))
    print("\nSurvivors (each needs an entry in tests/MUTANTS.md; `mutmut show NAME` prints the diff):")
    for line in survivors:
        print(f"  {line}")
    return 0


def _row(label: str, counts: Counter[str]) -> str:
    # A timeout counts as killed (the mutant changed behaviour: it hung); "not checked" is a run cut short.
    killed = counts["killed"] + counts["timeout"]
    tested = killed + counts["survived"] + counts["no tests"]
    other = sum(counts.values()) - tested
    score = f"{100 * killed / tested:.1f}%" if tested else "-"
    return (f"{label:45} {counts['killed']:>7} {counts['survived']:>8} {counts['no tests']:>8} "
            f"{counts['timeout']:>7} {other:>6} {score:>7}")


if __name__ == "__main__":
    sys.exit(main())
