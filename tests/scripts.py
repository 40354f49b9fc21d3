"""Load a script of ``experiments/`` as a module, and fake its runs, for tests of its functions."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def load_script(name: str) -> ModuleType:
    """``experiments/<name>.py`` as a module, registered in ``sys.modules`` (for dataclasses)."""
    spec = importlib.util.spec_from_file_location(name, EXPERIMENTS / f"{name}.py")
    assert spec is not None and spec.loader is not None, name
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def fake_run(run_dir: Path, metrics: dict[str, object]) -> Path:
    """A run directory with a ``checkpoints/last.ckpt`` and the given ``metrics.json``.

    ``{"stopped_by": "signal"}`` is what SIGTERM leaves: a metrics.json without evaluation.
    """
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"")
    (run_dir / "metrics.json").write_text(json.dumps(metrics))
    return run_dir
