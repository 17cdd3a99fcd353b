"""tplog benchmarks: runnable modules (``python -m benchmarks.NAME [--quick]``).

Every module measures tplog and its baselines in the same process on identical
events from :mod:`benchmarks._data`, prints a table of rates and ratios, writes
``benchmarks/results/NAME.json`` (with machine and library versions) and
rewrites its own section of ``benchmarks/RESULTS.md``. Never part of the test run.
"""
