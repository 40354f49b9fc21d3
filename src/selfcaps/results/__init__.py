"""Many runs compared: the results registry, paired statistics, claims, bench and reports.

- :mod:`~selfcaps.results.registry`: ``results/registry.yaml`` read and checked (rows, arms,
  configuration hashes).
- :mod:`~selfcaps.results.paired`: paired differences, intervals, equivalence and Holm.
- :mod:`~selfcaps.results.suite_runs`: running the arms of a suite in child processes.

The package imports nothing on its own.
"""
