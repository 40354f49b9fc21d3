"""Helpers for tests that run the command: tiny CoCa arguments, real subprocesses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

#: Flags every tiny test run shares: no progress bar, batch 32, deterministic, one thread.
FAST = ["--no-progress", "--batch-size", "32", "--deterministic", "--threads", "1"]

#: A CoCa run of a few seconds: 256 mnist5k images, batch 32, deterministic.
TINY = [
    *FAST,
    "data.train_subset=256",
    "data.eval_batch_size=256",
    "monitor.knn_every_n_epochs=1",
    "monitor.knn_k=10",
    "eval.knn_k=10",
    "eval.baselines=false",
]


#: Files every run directory has (DESIGN.md), whatever the method.
RUN_FILES = (
    "config.yaml",
    "metrics.json",
    "metrics.csv",
    "model.safetensors",
    "config.json",
    "checkpoints/last.ckpt",
    "checkpoints/best.ckpt",
    "figures/curves.png",
)


def assert_run_files(run_dir: Path, *extra: str) -> None:
    """Every file of a run directory (:data:`RUN_FILES` and ``extra``) exists; no temporaries."""
    missing = [name for name in (*RUN_FILES, *extra) if not (run_dir / name).is_file()]
    assert missing == [], f"missing from {run_dir}: {missing}"
    assert not list(run_dir.rglob("*.tmp")), "temporary files left behind"


def selfcaps_cmd(*args: str) -> list[str]:
    """The command line of ``python -m selfcaps ARGS`` for this checkout."""
    return [sys.executable, "-m", "selfcaps", *args]


def subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("SELFCAPS_OUT", None)
    return env


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``selfcaps ARGS`` in a subprocess and return the completed process."""
    return subprocess.run(
        selfcaps_cmd(*args), env=subprocess_env(), capture_output=True, text=True, timeout=timeout
    )


def run_signalled_at(
    point: str, n: int, *args: str, timeout: float = 600
) -> subprocess.CompletedProcess:
    """Run ``selfcaps ARGS`` in a subprocess that signals itself at ``point`` number ``n``.

    See ``tests/reliability/kill_at.py`` for the points (SIGKILL, SIGTERM, SIGINT).
    """
    env = subprocess_env()
    env["PYTHONPATH"] = str(SRC.parent) + os.pathsep + env["PYTHONPATH"]
    cmd = [sys.executable, "-m", "tests.reliability.kill_at", point, str(n), *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def run_killed_at(point: str, n: int, *args: str, timeout: float = 600) -> None:
    """:func:`run_signalled_at` with a SIGKILL point; asserts that the kill happened."""
    done = run_signalled_at(point, n, *args, timeout=timeout)
    assert done.returncode == -signal.SIGKILL, f"not killed at {point}: {done.stderr[-3000:]}"


def assert_evaluation_record(run_dir: Path, prefix: str, query_split: str = "test") -> dict:
    """The run's ``<prefix>_*`` record names the split it scored and the weights it saved.

    The digest is recomputed from the weights on disk (``selfcaps.load_run``: ``best.ckpt``,
    what the run evaluated), not taken from the method object that wrote the record.
    Returns the run's metrics.
    """
    import json

    import selfcaps
    from selfcaps.eval.method_metrics import weights_digest

    m = json.loads((run_dir / "metrics.json").read_text())
    assert m[f"{prefix}_query_split"] == query_split
    assert m[f"{prefix}_query_n"] > 0
    assert m[f"{prefix}_weights"] == weights_digest(selfcaps.load_run(run_dir).network)
    return m
