"""Run machinery: the Lightning trainer a method trains with and what it leaves on disk.

- :mod:`~selfcaps.engine.trainer`: :func:`~selfcaps.engine.trainer.build_trainer` (precision,
  devices, checkpoints, loggers, stopping, progress) and resuming at a batch.
- :mod:`~selfcaps.engine.finetune_runs`: a supervised finetuning phase inside a run (its
  Trainer settings, ``metrics.csv``, ``last.ckpt`` and the selected ``best.ckpt`` and weights).
- :mod:`~selfcaps.engine.stopping`, :mod:`~selfcaps.engine.clock`: budgets (epochs, steps,
  ``--max-time``), signals and the time each phase took.
- :mod:`~selfcaps.engine.checkpoints`, :mod:`~selfcaps.engine.atomic`: checkpoints and weights
  written atomically (no half-written file), and read back with clear errors.
- :mod:`~selfcaps.engine.csv_logs`, :mod:`~selfcaps.engine.metric_names`,
  :mod:`~selfcaps.engine.progress`: logs, metric names and progress bars.
- :mod:`~selfcaps.engine.threads`: how many CPU threads a run uses (torch-free).

The package imports nothing on its own: its torch-free modules (threads, atomic,
metric_names) load without Lightning.
"""
