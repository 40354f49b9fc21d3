"""``selfcaps eval RUN_DIR --protocol ...`` and ``selfcaps profile METHOD``.

``eval`` reloads a finished (or pretrained) run, rebuilds its data, and runs an
evaluation protocol on its best checkpoint; results are printed and merged
into the run's ``metrics.json`` (atomically, under a lock) under keys prefixed by the
protocol, e.g. ``linear_top1_backbone``.

Label efficiency (every method): ``--label-fraction F`` or ``--labels-per-class N``
trains the ``linear``, ``svm`` or ``finetune`` protocol on a stratified labelled
subset of the training split, fixed by ``--label-seed`` (default: the run's seed;
:mod:`selfcaps.eval.labels`); validation and test stay whole. The keys then end in
the subset's name, e.g. ``finetune_top1_backbone_lf10`` for 10% of the labels, and
``..._lf10_ls1`` for a subset drawn with ``--label-seed 1`` in a run of another seed
(several subsets of one run keep every result). ``--finetune-epochs N`` finetunes for
another number of epochs than the run's; the keys then end in ``_ftN``.
``--pretrained-lr-scale S`` (MCAE) finetunes the pretrained layers at S times the
finetuning rate; the keys then end in ``_plrS``. ``--seed S`` repeats a protocol with
other randomness (initialisation of what it trains, batch order, augmentation) on the
same images and labelled subset (``finetune`` only: the kNN, linear and SVM probes
have no randomness); the keys then end in ``_seedS``.
A method that finetunes its own classifier (MCAE's class capsules) does so for
``--protocol finetune`` unless ``--feature`` asks for a feature and a linear head.

``--protocol method`` runs the method's own evaluation, the one ``selfcaps run`` ends
with (CoCa's kNN with its baselines, SparseCaps' SVMs on MNIST and affNIST-like, ...), on a
run that ``selfcaps pretrain`` trained, or again on a finished run with the installed code; its
keys are the ones ``selfcaps run`` writes and replace them in ``metrics.json``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from selfcaps.config.loading import default_preset, load_config, parse_overrides
from selfcaps.methods import get_method, list_methods
from selfcaps.run.evaluate import EvalRequest, evaluate_run, resolved_run_config, save_metrics
from selfcaps.run.rundir import stopped_by_signal
from selfcaps.run.train import resume_command

__all__ = [
    "PROTOCOLS",
    "add_eval_arguments",
    "add_profile_arguments",
    "cmd_eval",
    "cmd_profile",
]

PROTOCOLS = ("knn", "linear", "svm", "finetune", "method")


def add_eval_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of ``selfcaps eval``."""
    p.add_argument("run_dir", type=Path, help="a run directory written by run/pretrain")
    p.add_argument("--protocol", default="knn", choices=PROTOCOLS)
    p.add_argument("--feature", help="feature kind (default: the method's monitor feature)")
    p.add_argument("--checkpoint", default="best", choices=["best", "last"])
    p.add_argument("--data-root", help="dataset root (default: the run's)")
    p.add_argument(
        "--bank",
        default="train",
        choices=["train", "train_full"],
        help="knn: the bank of labelled images; train (default): the training split, the carved "
        "validation images left out; train_full: the whole official training split (keys end "
        "in _train_full)",
    )
    p.add_argument(
        "--finetune-epochs",
        type=int,
        metavar="N",
        help="finetune: train N epochs instead of the run's eval.finetune_epochs (keys then end "
        "in _ftN)",
    )
    p.add_argument(
        "--pretrained-lr-scale",
        type=float,
        metavar="S",
        help="finetune, methods that finetune their own classifier (mcae): the pretrained "
        "layers learn at S x the finetuning rate (eval.finetune_pretrained_lr_scale; keys then "
        "end in _plrS)",
    )
    labels = p.add_mutually_exclusive_group()
    labels.add_argument(
        "--label-fraction",
        type=float,
        metavar="F",
        help="train the protocol on this stratified share of the training labels (e.g. 0.1)",
    )
    labels.add_argument(
        "--labels-per-class",
        type=int,
        metavar="N",
        help="train the protocol on N labelled training images per class",
    )
    p.add_argument(
        "--label-seed", type=int, help="seed of the labelled subset (default: the run's seed)"
    )
    p.add_argument(
        "--seed",
        type=int,
        help="--protocol finetune: seed of the finetuning's randomness (new layers' "
        "initialisation, batch order, augmentation; default: the run's seed); the run's images "
        "and labelled subset stay the run's; keys end in _seedS",
    )
    p.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="torch intra-op threads (default: the run's trainer.threads, else every core)",
    )
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bars or timing notes on stderr (for logs of sweeps)",
    )


def add_profile_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of ``selfcaps profile``."""
    p.usage = "selfcaps profile METHOD [key=value ...] [options]"
    p.add_argument("method", metavar="METHOD", help=f"one of: {', '.join(list_methods())}")
    p.set_defaults(overrides=[])  # key=value pairs are collected by main()
    p.add_argument("--preset", help="default: quick_<data> if the method has one, else quick")
    p.add_argument("--data", help="dataset whose image shape to profile (default: the preset's)")


def cmd_eval(args: argparse.Namespace) -> int:
    """``selfcaps eval``: :func:`~selfcaps.run.evaluate.evaluate_run`, saved and printed."""
    cfg, _ = resolved_run_config(args.run_dir, args.data_root)  # before torch is imported
    _warn_if_stopped(args.run_dir, str(cfg.method), args.checkpoint)
    fields = {f: getattr(args, f) for f in EvalRequest.__dataclass_fields__ if f != "progress"}
    metrics, title = evaluate_run(EvalRequest(**fields, progress=not args.no_progress))
    return _save_and_print(args.run_dir, metrics, title)


def _warn_if_stopped(run_dir: Path, method: str, checkpoint: str) -> None:
    """Say on stderr that a run a stop signal interrupted is being evaluated unfinished."""
    stopped = stopped_by_signal(run_dir)
    if stopped is None:
        return
    done, planned = stopped.get("epochs_trained", "?"), stopped.get("epochs_planned", "?")
    print(
        f"warning: {run_dir} was stopped by a signal after {done} of {planned} epochs "
        f"(metrics.json: stopped_by: signal); this evaluates the {checkpoint}.ckpt of an "
        f"unfinished run. `{resume_command(method, run_dir)}` "
        "finishes it.",
        file=sys.stderr,
    )


def _save_and_print(run_dir: Path, metrics: dict, title: str) -> int:
    """Merge ``metrics`` into the run's ``metrics.json`` (under its lock) and print them.

    The record of what was scored (``<prefix>_query_split``, ``..._bank_n``,
    ``..._weights``: :func:`~selfcaps.eval.method_metrics.evaluation_record`) is printed as
    one sentence per prefix, not as numbers beside the results; the last line says which
    file holds them all.
    """
    path = save_metrics(run_dir, metrics)  # locked: concurrent evals keep both
    records = _record_prefixes(metrics)
    shown = {k: v for k, v in metrics.items() if not any(k.startswith(f"{p}_") for p in records)}
    width = max((len(k) for k in shown), default=0)
    print(title)
    for k, v in shown.items():
        print(f"  {k:<{width}}  {v:.2f}" if isinstance(v, float) else f"  {k:<{width}}  {v}")
    for prefix in records:
        print(f"  {_describe_record(prefix, metrics)}")
    print(
        f"written to {path}: {len(metrics)} keys merged into the run's metrics "
        "(a key already there takes the new value)"
    )
    return 0


def _record_prefixes(metrics: dict) -> list[str]:
    """The prefixes of the evaluation records among ``metrics``' keys (``eval_knn_backbone``).

    Examples:
        >>> _record_prefixes({"knn_top1": 1.0, "eval_knn_x_query_split": "test",
        ...                   "eval_knn_x_query_n": 5, "eval_knn_x_weights": "ab"})
        ['eval_knn_x']
    """
    return [k.removesuffix("_query_split") for k in metrics if k.endswith("_query_split")]


def _describe_record(prefix: str, m: dict) -> str:
    """One sentence for an evaluation record: the images scored and the weights' digest.

    Examples:
        >>> text = _describe_record("eval_knn_backbone", {
        ...     "eval_knn_backbone_query_split": "test", "eval_knn_backbone_query_n": 1000,
        ...     "eval_knn_backbone_bank_split": "train", "eval_knn_backbone_bank_n": 3600,
        ...     "eval_knn_backbone_weights": "49afa9bb"})
        >>> for part in text.split("; "): print(part)
        eval_knn_backbone_*: scored 1000 test images against 3600 train images
        weights 49afa9bb (the first digits of their SHA-256: equal digests, equal weights)
    """
    text = (
        f"{prefix}_*: scored {m.get(f'{prefix}_query_n')} {m.get(f'{prefix}_query_split')} images"
    )
    if f"{prefix}_bank_n" in m:
        text += f" against {m[f'{prefix}_bank_n']} {m.get(f'{prefix}_bank_split')} images"
    if f"{prefix}_weights" in m:
        text += (
            f"; weights {m[f'{prefix}_weights']} (the first digits of their SHA-256: "
            "equal digests, equal weights)"
        )
    return text


def cmd_profile(args: argparse.Namespace) -> int:
    """``selfcaps profile``: parameters and FLOPs of a method's network on its data's images."""
    overrides = parse_overrides(args.overrides)
    if args.data:
        overrides.append(("data.name", args.data))
    preset = args.preset or default_preset(args.method, args.data)
    cfg = load_config(args.method, preset, overrides, methods=list_methods())
    from selfcaps.eval import format_profile, profile_model

    method = get_method(args.method)(cfg)
    net = method.network.eval()
    shape = tuple(method.example_input().shape)
    prof = profile_model(net, shape)
    print(f"{method.name} ({cfg.model.name}) on {cfg.data.name} images {shape[1:]}")
    print(format_profile(prof))
    return 0
