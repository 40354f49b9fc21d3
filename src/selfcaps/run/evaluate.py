"""A finished run reloaded for evaluation: its configuration, its method and its data.

``selfcaps eval`` is :func:`evaluate_run` then :func:`save_metrics`; scripts can also take the
method and its data and call the protocols of :mod:`selfcaps.eval.protocols` themselves::

    from selfcaps.eval.protocols import run_protocol
    from selfcaps.run.evaluate import load_run_dir

    method, dm = load_run_dir("runs/coca/mnist5k/20261129-101500")
    print(run_protocol(method, dm, "knn", method.monitor_feature))
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from selfcaps.config.checks.labels import check_label_request
from selfcaps.config.loading import ConfigError, load_yaml
from selfcaps.data.layouts import check_files_present
from selfcaps.data.paths import resolve_data_root
from selfcaps.engine.atomic import update_json

if TYPE_CHECKING:
    from selfcaps.data.datamodule import SelfcapsDataModule
    from selfcaps.methods import CapsuleMethod

__all__ = [
    "EvalRequest",
    "evaluate_run",
    "load_for_evaluation",
    "load_run_dir",
    "resolved_run_config",
    "save_metrics",
]


@dataclass
class EvalRequest:
    """One evaluation of a finished run, as ``selfcaps eval`` asks for it (same names as its flags).

    Attributes:
        run_dir: The run directory.
        protocol: ``knn``, ``linear``, ``svm``, ``finetune`` or ``method`` (the run's own).
        feature: Feature kind (default: the method's monitor feature; ``finetune``: the
            method's own classifier if it has one).
        checkpoint: ``best`` or ``last``.
        data_root: Dataset root (default: the run's; ``SELFCAPS_DATA`` first).
        bank: ``knn``: ``train`` or ``train_full`` (keys end in ``_train_full``).
        finetune_epochs: ``finetune``: epochs instead of the run's (keys end in ``_ftN``).
        pretrained_lr_scale: ``finetune`` of the method's own classifier: the pretrained
            layers learn at this factor of the rate (keys end in ``_plrS``).
        label_fraction: Train the protocol on this share of the training labels.
        labels_per_class: Or on this many labelled images per class.
        label_seed: Seed of the labelled subset (default: the run's).
        seed: ``finetune``: seed of its randomness (keys end in ``_seedS``).
        threads: Torch threads (default: the run's ``trainer.threads``, else every core).
        progress: Progress bars and timing notes on stderr.
    """

    run_dir: Path
    protocol: str = "knn"
    feature: str | None = None
    checkpoint: str = "best"
    data_root: str | None = None
    bank: str = "train"
    finetune_epochs: int | None = None
    pretrained_lr_scale: float | None = None
    label_fraction: float | None = None
    labels_per_class: int | None = None
    label_seed: int | None = None
    seed: int | None = None
    threads: int | None = None
    progress: bool = True


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


def evaluate_run(args: EvalRequest) -> tuple[dict[str, Any], str]:
    """One evaluation protocol on a finished run: its metrics and a title.

    The metrics' keys are those ``selfcaps eval`` writes; the title says what was evaluated.

    Everything that can be checked without torch (the run directory, the combination of
    options, the data files) is checked before the run is loaded. Nothing is written:
    :func:`save_metrics` merges the metrics into the run's ``metrics.json``.

    Raises:
        ConfigError: Options that do not apply to the protocol or the method (named as the
            command line's flags), or missing data files.
    """
    cfg, source = resolved_run_config(args.run_dir, args.data_root)  # before torch
    wants_labels = args.label_fraction is not None or args.labels_per_class is not None
    if args.protocol == "method":
        given = [
            flag
            for flag, value in (
                ("--feature", args.feature), ("--finetune-epochs", args.finetune_epochs),
                ("--pretrained-lr-scale", args.pretrained_lr_scale), ("--seed", args.seed),
                ("--label-fraction", args.label_fraction),
                ("--labels-per-class", args.labels_per_class),
            )
            if value is not None
        ] + (["--bank"] if args.bank != "train" else [])  # fmt: skip
        if given:
            raise ConfigError(
                f"--protocol method is the run's own evaluation, with its own settings; "
                f"{', '.join(given)} do not apply to it"
            )
    if args.bank != "train" and args.protocol != "knn":
        raise ConfigError(f"--bank applies to the knn protocol, not {args.protocol}")
    epochs = args.finetune_epochs
    if epochs is not None and (args.protocol != "finetune" or epochs < 1):
        raise ConfigError(
            f"--finetune-epochs: expected >= 1 with --protocol finetune, got {epochs} with "
            f"--protocol {args.protocol}"
        )
    if args.seed is not None and args.protocol != "finetune":
        raise ConfigError(
            f"--seed applies to --protocol finetune (the knn, linear and svm probes have no "
            f"randomness), got --protocol {args.protocol}"
        )
    retrained = epochs is not None and epochs != int(cfg.eval.finetune_epochs)
    if retrained:
        cfg.eval.finetune_epochs = epochs
    scale = args.pretrained_lr_scale
    if scale is not None:
        if args.protocol != "finetune" or args.feature is not None or scale < 0:
            raise ConfigError(
                "--pretrained-lr-scale: expected a factor >= 0 with --protocol finetune and no "
                f"--feature (the method's own classifier), got {scale} with --protocol "
                f"{args.protocol}" + ("" if args.feature is None else f" --feature {args.feature}")
            )
        cfg.eval.finetune_pretrained_lr_scale = scale
    if wants_labels and args.protocol == "knn":
        raise ConfigError(
            "--label-fraction / --labels-per-class apply to the linear, svm and finetune "
            "protocols, not knn"
        )
    if wants_labels:
        try:  # the request is checked before torch is imported and the run is loaded
            check_label_request(args.label_fraction, args.labels_per_class)
        except ValueError as err:
            raise ConfigError(str(err)) from err
    threads = args.threads if args.threads is not None else OmegaConf.select(cfg, "trainer.threads")
    if threads not in (None, "auto") and int(threads) < 1:
        raise ConfigError(f"--threads: expected a number of threads >= 1, got {threads}")
    # Every protocol reads the train and test splits: missing files are reported now.
    check_files_present(str(cfg.data.name), cfg.data.root, source)
    from selfcaps.engine.progress import set_progress
    from selfcaps.engine.threads import apply_threads
    from selfcaps.eval.protocols import LabelSubset, feature_kind, run_protocol

    set_progress(args.progress)
    apply_threads({"threads": threads})  # else every core (engine/threads.py)

    run_seed = int(cfg.seed)
    reseeded = args.seed is not None and args.seed != run_seed
    if reseeded:  # the evaluation's randomness; the run's images stay (subset_seed)
        cfg.seed = args.seed
    method, dm = load_for_evaluation(
        args.run_dir, args.checkpoint, cfg, source, subset_seed=run_seed
    )
    if args.protocol == "method":
        metrics = dict(method.evaluate(dm))
        metrics["evaluated_by"] = f"selfcaps eval --protocol method ({args.checkpoint}.ckpt)"
        return metrics, f"the method's own evaluation of {args.run_dir} ({args.checkpoint}.ckpt)"
    kind = feature_kind(method, args.feature)
    labels = None
    if wants_labels:  # default seed: the run's
        seed = run_seed if args.label_seed is None else args.label_seed
        labels = LabelSubset(args.label_fraction, args.labels_per_class, seed, seed != run_seed)
    own = args.feature is None and hasattr(method, "finetune_classifier")
    if scale is not None and not own:
        raise ConfigError(
            f"--pretrained-lr-scale: {method.name} has no classifier of its own to finetune "
            "(methods that have one: mcae)"
        )
    metrics = run_protocol(method, dm, args.protocol, kind, labels, own, bank=args.bank)
    # Another bank or finetuning length than the run's: keys of their own, the run's kept.
    tag = ("" if args.bank == "train" else f"_{args.bank}") + (f"_ft{epochs}" if retrained else "")
    tag += "" if scale is None else f"_plr{scale:g}"
    tag += f"_seed{args.seed}" if reseeded else ""
    metrics = {f"{k}{tag}": v for k, v in metrics.items()}
    title = f"{args.protocol} evaluation of {args.run_dir} ({args.checkpoint}.ckpt, feature {kind})"
    return metrics, title


def save_metrics(run_dir: Path, metrics: dict[str, Any]) -> Path:
    """Merge ``metrics`` into the run's ``metrics.json`` (atomically, under its lock); the file.

    A key already there takes the new value; concurrent evaluations of one run keep both.
    """
    path = Path(run_dir) / "metrics.json"
    update_json(path, metrics)
    return path
