"""One run as a unit: train it, load it back, evaluate it, and what its directory holds.

- :mod:`~selfcaps.run.trained`: :func:`~selfcaps.run.trained.load_run` (``selfcaps.load_run``)
  and :func:`~selfcaps.run.trained.load_method`.
- :mod:`~selfcaps.run.rundir`: the run directory (creation, finished or stopped, resume).
- :mod:`~selfcaps.run.provenance`: git commit, machine and CPU of a run.
- :mod:`~selfcaps.run.summary`: the headline a finished run prints.

The package imports nothing on its own, so its torch-free modules stay light.
"""
