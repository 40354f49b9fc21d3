"""Running the runs of ``selfcaps bench`` and its claims suite, and what their reports share.

:class:`BenchRow` is one run (method, dataset, run directory, command); :func:`run_command`
builds its ``selfcaps run`` command line and :func:`execute` runs it in a subprocess, or
resumes it, or skips it when it finished earlier (:func:`~selfcaps.run.rundir.run_finished`:
a run stopped by a signal is not finished). :func:`environment` and :func:`png_figure_html`
are the pieces both suites' reports use. Both :mod:`~selfcaps.results.bench` and
:mod:`~selfcaps.results.claims` import from here, so neither imports the other's internals.
"""

from __future__ import annotations

import base64
import html
import json
import os
import platform
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from selfcaps._version import __version__
from selfcaps.engine.atomic import atomic_write_text
from selfcaps.records import get_record
from selfcaps.run.provenance import git_commit, machine
from selfcaps.run.rundir import SELFCAPS_COMMAND, args_to_run

__all__ = ["BenchRow", "environment", "execute", "fmt_value", "png_figure_html", "run_command"]


@dataclass
class BenchRow:
    """One (method, dataset) pair of the report."""

    dataset: str
    method: str
    run_dir: Path
    command: list[str]
    status: str = "not run"
    metrics: dict[str, Any] = field(default_factory=dict)
    wall_time_s: float | None = None

    def values(self) -> dict[str, Any]:
        """The report's columns for this row (None where a value does not apply)."""
        record = get_record(self.method)
        m = self.metrics

        def key(name: str) -> Any:
            k = record.bench_keys.get(name)
            return m.get(k) if k else None

        wall = self.wall_time_s if self.wall_time_s is not None else m.get("bench_wall_time_s")
        return {
            "dataset": self.dataset,
            "method": self.method,
            "protocol": record.bench_protocol,
            "top1": key("top1"),
            "top5": key("top5"),
            "paper_top1": record.paper_results.get(self.dataset),
            "pixels_top1": key("pixels"),
            "random_init_top1": key("random_init"),
            "params": m.get("params"),
            "flops_per_image": m.get("flops_per_image"),
            "train_images_per_s": m.get("train_images_per_s"),
            "wall_time_min": round(wall / 60, 1) if wall is not None else None,
            "status": self.status,
            "notes": "; ".join(
                [f"{label} {fmt_value(m[k])}" for label, k in record.bench_notes.items() if k in m]
                + _stop_note(m)
            ),
            "git_commit": m.get("git_commit"),
            "run_dir": str(self.run_dir),
            "command": " ".join(self.command),
        }


def _stop_note(m: dict[str, Any]) -> list[str]:
    """``stopped by max_time: 2 of 8 epochs`` when a budget ended the run's training early."""
    if m.get("stopped_by", "epochs") == "epochs":
        return []
    return [f"stopped by {m['stopped_by']}: {m['epochs_trained']} of {m['epochs_planned']} epochs"]


def fmt_value(v: Any) -> str:
    """A report cell: "–" for None, 2 decimals (4 digits below 0.01), millions from 10,000."""
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 0.01 and v != 0 else f"{v:.2f}"
    if isinstance(v, int) and v >= 10_000:
        return f"{v / 1e6:.2f} M"
    return str(v)


def run_command(
    method: str,
    preset: str,
    dataset: str,
    run_dir: Path,
    *,
    seed: int | None = None,
    budget: float | None = None,
    data_root: str | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """The ``selfcaps run`` command line of one bench or claims run.

    Args:
        method: Method name.
        preset: Preset name.
        dataset: Dataset name.
        run_dir: The run's ``--out``.
        seed: ``--seed`` (None: the preset's).
        budget: ``--max-time`` in minutes (None: the preset's epoch or step budget).
        data_root: ``--data-root`` (None: the default).
        extra: Further arguments (flags or ``key=value``), last.
    """
    cmd = ["selfcaps", "run", method, "--preset", preset, "--data", dataset]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    if budget is not None:
        cmd += ["--max-time", f"{budget:g}"]
    cmd += ["--out", str(run_dir), "--no-progress"]
    if data_root:
        cmd += ["--data-root", data_root]
    return cmd + list(extra)


def execute(row: BenchRow) -> None:
    """Run ``row.command`` in a subprocess, or resume it from its ``last.ckpt``.

    A row whose run finished (a ``metrics.json`` not written by a stop signal) is not run
    again. An interrupted one (a ``last.ckpt``, or a run stopped by SIGTERM / SIGINT)
    resumes with the run's saved configuration and the same ``--max-time`` budget, if the
    command had one.
    """
    budget = []
    if "--max-time" in row.command:
        budget = ["--max-time", row.command[row.command.index("--max-time") + 1]]
    # A resumed run keeps its saved configuration; only the budget goes with it.
    args = args_to_run(row.method, row.run_dir, row.command[1:], resume_extra=budget)
    if args is None:
        row.status = "done (earlier)"
        return
    cmd = ["selfcaps", *args]
    print(f"[bench] {row.method} on {row.dataset}: {' '.join(cmd)}", flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [*SELFCAPS_COMMAND, *args],
        capture_output=True,
        text=True,
        env=_child_env(),
    )
    row.wall_time_s = time.perf_counter() - t0
    row.status = "done" if proc.returncode == 0 else f"failed (exit {proc.returncode})"
    row.run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(row.run_dir / "bench.log", proc.stdout + proc.stderr)
    if proc.returncode == 0:
        metrics_path = row.run_dir / "metrics.json"
        metrics = json.loads(metrics_path.read_text())
        metrics["bench_wall_time_s"] = round(row.wall_time_s, 1)
        atomic_write_text(metrics_path, json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    else:
        print(f"[bench]   {row.status}; see {row.run_dir / 'bench.log'}", flush=True)


def _child_env() -> dict[str, str]:
    """The environment of a bench run: this very ``selfcaps`` first on the path.

    So a checkout that is not installed (or another installed copy) never runs
    different code from the bench that launched it.
    """
    src = str(Path(__file__).resolve().parents[2])  # the directory holding selfcaps/
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    return env


def environment() -> dict[str, str]:
    """The selfcaps version, git commit, torch, device, Python and date of a report."""
    import torch

    commit = git_commit()
    device = (
        torch.cuda.get_device_name(0)
        if torch.cuda.is_available()
        else "CPU ({cpu}, {cpu_capability}, {cpu_count} cores; ".format(**machine())
        + "each run's threads: trainer.threads in its command, else torch's default)"
    )
    return {
        "selfcaps": __version__,
        "git commit": commit,
        "torch": torch.__version__,
        "device": device,
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }


def png_figure_html(png: bytes, caption: str) -> str:
    """A PNG embedded in HTML (a self-contained report), with a caption."""
    data = base64.b64encode(png).decode()
    return (
        f'<figure><img src="data:image/png;base64,{data}" style="max-width:100%">'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
    )
