"""``metrics.csv`` of a run: Lightning's CSV logger, rewritten atomically and resumable.

A resumed run appends to the same file: the rows of an epoch it repeats replace the
earlier ones, and a crash while writing leaves the previous file whole.

The ``epoch`` column counts from 1, as the console, ``best_epoch`` and the figures do
(Lightning counts from 0: rows are kept as Lightning logs them and shifted on writing).
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment

from selfcaps.engine.checkpoints import atomic_write_text, atomic_write_yaml

__all__ = ["RunCSVLogger"]


def _shift_epoch(row: dict[str, Any], by: int) -> dict[str, Any]:
    """``row`` with its ``epoch`` moved by ``by`` (from Lightning's 0-based count and back).

    Examples:
        >>> _shift_epoch({"epoch": 0, "step": 7}, +1), _shift_epoch({"epoch": "3"}, -1)
        ({'epoch': 1, 'step': 7}, {'epoch': 2})
        >>> _shift_epoch({"epoch": "", "x": 1}, +1)
        {'epoch': '', 'x': 1}
    """
    epoch = row.get("epoch", "")
    if epoch in ("", None):
        return row
    return {**row, "epoch": int(float(epoch)) + by}


class _AtomicExperimentWriter(ExperimentWriter):
    """Keeps every row in memory and rewrites ``metrics.csv`` atomically on each save.

    On resume, rows of epochs after the one being resumed (written after the checkpoint
    being resumed from) are dropped, so no epoch appears twice. Rows of the resumed
    epoch itself are kept only when it is resumed in its middle (a budget stopped it
    there; the stopped run logged it as it was then) and until the resumed run logs the
    same metrics for it.
    """

    def __init__(self, log_dir: str, resume_epoch: int | None, mid_epoch: bool = False) -> None:
        self.rows: list[dict[str, Any]] = []
        self._replaceable: int | None = resume_epoch if mid_epoch else None
        path = Path(log_dir) / self.NAME_METRICS_FILE
        if resume_epoch is not None and path.is_file():
            last = resume_epoch + 1 if mid_epoch else resume_epoch
            with open(path, newline="") as f:
                for row in csv.DictReader(f):
                    row = _shift_epoch(row, -1)
                    epoch = row.get("epoch", "")
                    if epoch == "" or float(epoch) < last:
                        self.rows.append({k: v for k, v in row.items() if v != ""})
        super().__init__(log_dir=log_dir)

    def _replace_resumed_epoch(self, new: dict[str, Any]) -> None:
        """Drop kept rows of the resumed epoch that ``new`` logs again."""
        if self._replaceable is None or new.get("epoch") != self._replaceable:
            return
        keys = set(new) - {"epoch", "step"}
        self.rows = [
            r
            for r in self.rows
            if r.get("epoch", "") == ""
            or float(r["epoch"]) != self._replaceable
            or not keys & (set(r) - {"epoch", "step"})
        ]

    def _check_log_dir_exists(self) -> None:  # never delete earlier logs
        return

    def log_hparams(self, params: dict[str, Any]) -> None:
        self.hparams.update(params)
        atomic_write_yaml(os.path.join(self.log_dir, self.NAME_HPARAMS_FILE), self.hparams)

    def save(self) -> None:
        for row in self.metrics:
            self._replace_resumed_epoch(row)
        self.rows.extend(self.metrics)
        self.metrics = []
        if not self.rows:
            return
        keys = sorted(set().union(*self.rows))
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=keys)
        writer.writeheader()
        writer.writerows(_shift_epoch(r, +1) for r in self.rows)
        atomic_write_text(self.metrics_file_path, buf.getvalue())


class RunCSVLogger(CSVLogger):
    """CSV logger writing ``<run>/metrics.csv`` directly, atomically, resume-aware.

    Args:
        run_dir: The run directory.
        resume_epoch: Epoch being resumed (older rows are kept, newer dropped).
        mid_epoch: Whether it is resumed in its middle (its rows are kept until replaced).
    """

    def __init__(
        self, run_dir: Path, resume_epoch: int | None = None, mid_epoch: bool = False
    ) -> None:
        super().__init__(save_dir=str(run_dir), name="", version="")
        self._resume_epoch, self._mid_epoch = resume_epoch, mid_epoch

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        """The atomic writer."""
        if self._experiment is None:
            os.makedirs(self.log_dir, exist_ok=True)
            self._experiment = _AtomicExperimentWriter(
                self.log_dir, self._resume_epoch, self._mid_epoch
            )
        return self._experiment
