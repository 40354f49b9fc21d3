"""A finished run reloaded for evaluation: its configuration, its method and its data.

``selfcaps eval`` and scripts start here; the protocols themselves are in
:mod:`selfcaps.eval.protocols`::

    from selfcaps.eval.protocols import run_protocol
    from selfcaps.run.evaluate import load_run_dir

    method, dm = load_run_dir("runs/coca/mnist5k/20261129-101500")
    print(run_protocol(method, dm, "knn", method.monitor_feature))
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig, OmegaConf

from selfcaps.config.loading import ConfigError, load_yaml
from selfcaps.data.paths import resolve_data_root

if TYPE_CHECKING:
    from selfcaps.data.datamodule import SelfcapsDataModule
    from selfcaps.methods import CapsuleMethod

__all__ = ["load_for_evaluation", "load_run_dir", "resolved_run_config"]


def resolved_run_config(run_dir: Path, data_root: str | None = None) -> tuple[DictConfig, str]:
    """The configuration of the run in ``run_dir`` (data root resolved) and the root's source.

    ``data_root`` (the command line's ``--data-root``), then ``SELFCAPS_DATA``, override the
    run's ``data.root``. Torch is not imported.

    Raises:
        ConfigError: ``run_dir`` holds no ``config.yaml``.
    """
    cfg_path = Path(run_dir) / "config.yaml"
    if not cfg_path.is_file():
        raise ConfigError(f"{run_dir} is not a run directory: {cfg_path} does not exist")
    cfg = OmegaConf.create(load_yaml(cfg_path))
    cfg.data.root, source = resolve_data_root(data_root, cfg.data.root)
    return cfg, source


def load_for_evaluation(
    run_dir: Path,
    checkpoint: str,
    cfg: DictConfig,
    root_source: str,
    subset_seed: int | None = None,
) -> tuple[CapsuleMethod, SelfcapsDataModule]:
    """The method of a run directory with its checkpoint loaded, in eval mode, and its data.

    Args:
        run_dir: The run directory.
        checkpoint: ``best`` or ``last``.
        cfg: The run's configuration with ``data.root`` resolved (:func:`resolved_run_config`).
        root_source: Where ``data.root`` came from, for error messages.
        subset_seed: The run's seed when ``cfg.seed`` was changed for the evaluation
            (``--seed``): the training subset stays the run's.
    """
    from selfcaps.data.datamodule import SelfcapsDataModule
    from selfcaps.run.trained import load_method

    method = load_method(run_dir, checkpoint, cfg)
    train_tf, eval_tf = method.build_transforms()
    dm = SelfcapsDataModule(
        method.cfg, train_tf, eval_tf, root_source=root_source, subset_seed=subset_seed
    )
    return method, dm


def load_run_dir(
    run_dir: Path | str,
    data_root: str | None = None,
    method: str | None = None,
    checkpoint: str = "best",
) -> tuple[CapsuleMethod, SelfcapsDataModule]:
    """A finished run's method (checkpoint loaded, eval mode) and data module, for scripts.

    Args:
        run_dir: The run directory.
        data_root: Overrides the run's ``data.root`` (as ``--data-root``; then
            ``SELFCAPS_DATA``).
        method: If given, the method the run must be of.
        checkpoint: ``best`` or ``last``.

    Raises:
        ConfigError: ``run_dir`` holds no ``config.yaml``.
        ValueError: The run is not of ``method``.
    """
    cfg, source = resolved_run_config(Path(run_dir), data_root)
    if method is not None and str(cfg.method) != method:
        raise ValueError(f"{run_dir}: a run of {cfg.method}, expected {method}")
    return load_for_evaluation(Path(run_dir), checkpoint, cfg, source)
