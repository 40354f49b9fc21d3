"""``selfcaps eval RUN_DIR --protocol ...`` and ``selfcaps profile METHOD``.

``eval`` reloads a finished (or pretrained) run, rebuilds its data, and runs an
evaluation protocol on its best checkpoint; results are printed and merged
into the run's ``metrics.json`` (atomically) under keys prefixed by the
protocol, e.g. ``linear_top1_backbone``.

Label efficiency (every method): ``--label-fraction F`` or ``--labels-per-class N``
trains the ``linear``, ``svm`` or ``finetune`` protocol on a stratified labelled
subset of the training split, fixed by ``--label-seed`` (default: the run's seed;
:mod:`selfcaps.eval.labels`); validation and test stay whole. The keys then end in
the subset's name, e.g. ``finetune_top1_backbone_lf10`` for 10% of the labels.
A method that finetunes its own classifier (MCAE's class capsules) does so for
``--protocol finetune`` unless ``--feature`` asks for a feature and a linear head.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # heavy modules are imported inside the functions that use them
    from torch.utils.data import DataLoader

    from selfcaps.methods import CapsuleMethod
    from selfcaps.methods.datamodule import SelfcapsDataModule

__all__ = ["PROTOCOLS", "add_eval_arguments", "add_profile_arguments", "cmd_eval", "cmd_profile"]

PROTOCOLS = ("knn", "linear", "svm", "finetune")


def add_eval_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of ``selfcaps eval``."""
    p.add_argument("run_dir", type=Path, help="a run directory written by run/pretrain")
    p.add_argument("--protocol", default="knn", choices=PROTOCOLS)
    p.add_argument("--feature", help="feature kind (default: the method's monitor feature)")
    p.add_argument("--checkpoint", default="best", choices=["best", "last"])
    p.add_argument("--data-root", help="dataset root (default: the run's)")
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


def add_profile_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of ``selfcaps profile``."""
    p.add_argument("method", help="a method name (selfcaps list methods)")
    p.add_argument("overrides", nargs="*", metavar="key=value")
    p.add_argument("--preset", help="default: quick_<data> if the method has one, else quick")
    p.add_argument("--data", help="dataset whose image shape to profile (default: the preset's)")


def _load_run(args: argparse.Namespace) -> tuple[CapsuleMethod, SelfcapsDataModule]:
    from omegaconf import OmegaConf

    from selfcaps.cli.config import ConfigError, load_yaml
    from selfcaps.cli.run import resolve_data_root
    from selfcaps.methods import get_method
    from selfcaps.methods.datamodule import SelfcapsDataModule
    from selfcaps.methods.io import load_checkpoint

    cfg_path = args.run_dir / "config.yaml"
    if not cfg_path.is_file():
        raise ConfigError(f"{args.run_dir} is not a run directory: {cfg_path} does not exist")
    cfg = OmegaConf.create(load_yaml(cfg_path))
    cfg.data.root, source = resolve_data_root(args.data_root, cfg.data.root)
    method = get_method(cfg.method)(cfg)
    ckpt = load_checkpoint(args.run_dir / "checkpoints" / f"{args.checkpoint}.ckpt")
    method.load_state_dict(ckpt["state_dict"])
    method.eval()
    train_tf, eval_tf = method.build_transforms()
    return method, SelfcapsDataModule(method.cfg, train_tf, eval_tf, root_source=source)


def _feature_kind(method: CapsuleMethod, requested: str | None) -> str:
    import torch

    from selfcaps.cli.config import ConfigError

    kind = requested or method.monitor_feature
    with torch.no_grad():
        x = method.example_input()
        method.eval()
        available = list(method.features(x))
    if kind not in available:
        raise ConfigError(
            f"--feature: {kind!r} is not a feature of {method.name}; valid: {', '.join(available)}"
        )
    return kind


@dataclass(frozen=True)
class LabelSubset:
    """A label-efficiency request: ``fraction`` or ``per_class`` labelled images, ``seed``."""

    fraction: float | None = None
    per_class: int | None = None
    seed: int = 0

    @property
    def suffix(self) -> str:
        """Metrics-key suffix, e.g. ``_lf10``."""
        from selfcaps.eval.labels import label_suffix

        return label_suffix(self.fraction, self.per_class)

    def indices(self, train: Any) -> list[int]:
        """Indices of the labelled images in the raw training split ``train``."""
        from selfcaps.eval.labels import dataset_targets, stratified_label_indices

        return stratified_label_indices(
            dataset_targets(train), fraction=self.fraction, per_class=self.per_class, seed=self.seed
        ).tolist()


def _eval_split(dm: SelfcapsDataModule, split: str, labels: LabelSubset | None) -> DataLoader:
    """A split through the evaluation transform; ``train`` restricted to the labelled images."""
    if split != "train" or labels is None:
        return dm.eval_loader(split)
    from torch.utils.data import DataLoader, Subset

    from selfcaps.methods.datamodule import TransformDataset

    train = dm.split("train")
    subset = Subset(train, labels.indices(train))
    return DataLoader(
        TransformDataset(subset, dm.eval_transform), batch_size=int(dm.cfg.data.eval_batch_size)
    )


def _probe_features(
    method: CapsuleMethod, dm: SelfcapsDataModule, kind: str, labels: LabelSubset | None
) -> dict[str, Any]:
    from selfcaps.methods.evaluation import collect_features

    out = {}
    for split in ("train", "val", "test"):
        loader = _eval_split(dm, split, labels)
        feats, targets = collect_features(method, loader, method.features, [kind])
        out[split] = (feats[kind], targets)
    return out


def run_protocol(
    method: CapsuleMethod,
    dm: SelfcapsDataModule,
    protocol: str,
    kind: str,
    labels: LabelSubset | None = None,
    own_classifier: bool = False,
) -> dict[str, float | int | str]:
    """One evaluation protocol on a trained method; flat metrics with protocol-prefixed keys.

    Args:
        method: The trained method (weights loaded, ``eval()``).
        dm: Its data.
        protocol: ``knn``, ``linear``, ``svm`` or ``finetune``.
        kind: Feature kind for the probes and the generic finetuning.
        labels: Train on a labelled subset of the training split (not for ``knn``); keys
            then end in ``labels.suffix``.
        own_classifier: ``finetune`` the method's own classifier (``finetune_classifier``,
            MCAE) instead of the feature with a linear head.
    """
    from selfcaps.cli.config import ConfigError
    from selfcaps.eval import finetune, linear_probe, svm_probe
    from selfcaps.methods.evaluation import knn_metrics

    e, nc = method.cfg.eval, method.info.num_classes
    sfx = labels.suffix if labels is not None else ""
    if protocol == "knn":
        if labels is not None:
            raise ConfigError(
                "--label-fraction / --labels-per-class apply to the linear, svm and finetune "
                "protocols, not knn"
            )
        return knn_metrics(method, dm, method.features, [kind], nc)
    if protocol in ("linear", "svm"):
        f = _probe_features(method, dm, kind, labels)
        (tr, ytr), (va, yva), (te, yte) = f["train"], f["val"], f["test"]
        if protocol == "linear":
            res = linear_probe(tr, ytr, te, yte, nc, val_f=va, val_y=yva, epochs=e.linear_epochs)
        else:
            res = svm_probe(
                tr, ytr, te, yte, C=e.svm_c, gamma=e.svm_gamma, max_train=e.svm_max_train
            )
        return {
            f"{protocol}_top1_{kind}{sfx}": float(res["top1"]),
            f"{protocol}_top5_{kind}{sfx}": float(res["top5"]),
            **_subset_size(f["train"][1], sfx),
        }
    if own_classifier:
        labelled = labels.indices(dm.split("train")) if labels is not None else None
        _, res = method.finetune_classifier(dm, labelled=labelled)  # type: ignore[attr-defined]
        return {
            f"finetune_top1{sfx}": float(res["test_top1"]),
            f"finetune_top5{sfx}": float(res["test_top5"]),
            f"finetune_best_epoch{sfx}": int(res["best_epoch"]) + 1,
            **({f"labelled_images{sfx}": len(labelled)} if labelled is not None else {}),
        }
    backbone = _feature_backbone(method, kind)
    dim = int(backbone(method.example_input(2)).shape[1])
    train = _eval_split(dm, "train", labels).dataset
    res = finetune(
        backbone,
        dim,
        nc,
        train,
        dm.eval_loader("val").dataset,
        dm.eval_loader("test").dataset,
        epochs=int(e.finetune_epochs),
        lr=float(e.finetune_lr),
        weight_decay=1e-4,
        batch_size=int(method.cfg.data.batch_size),
        seed=int(method.cfg.seed),
    )
    return {
        f"finetune_top1_{kind}{sfx}": float(res["test_top1"]),
        f"finetune_top5_{kind}{sfx}": float(res["test_top5"]),
        f"finetune_best_epoch{sfx}": int(res["best_epoch"]) + 1,
        **_subset_size(train, sfx),
    }


def _subset_size(train: Any, sfx: str) -> dict[str, int]:
    """``labelled_images<sfx>``: how many labelled images trained the protocol (subsets only)."""
    return {f"labelled_images{sfx}": len(train)} if sfx else {}


def _feature_backbone(method: CapsuleMethod, kind: str) -> Any:
    """The method's network as an ``nn.Module`` giving features of one kind (for finetuning)."""
    from torch import Tensor, nn

    class FeatureBackbone(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.method = method

        def forward(self, x: Tensor) -> Tensor:
            return self.method.features(x)[kind].flatten(1)

    return FeatureBackbone()


def cmd_eval(args: argparse.Namespace) -> int:
    """``selfcaps eval``."""
    from selfcaps.cli.config import ConfigError
    from selfcaps.methods.io import atomic_write_json

    method, dm = _load_run(args)
    kind = _feature_kind(method, args.feature)
    labels = None
    if args.label_fraction is not None or args.labels_per_class is not None:
        seed = int(method.cfg.seed) if args.label_seed is None else args.label_seed
        labels = LabelSubset(args.label_fraction, args.labels_per_class, seed)
        try:
            labels.suffix  # noqa: B018  (validates the request before any work)
        except ValueError as err:
            raise ConfigError(str(err)) from err
    own = args.feature is None and hasattr(method, "finetune_classifier")
    metrics = run_protocol(method, dm, args.protocol, kind, labels, own_classifier=own)
    path = args.run_dir / "metrics.json"
    merged = json.loads(path.read_text()) if path.is_file() else {}
    merged.update(metrics)
    atomic_write_json(path, merged)
    width = max(len(k) for k in metrics)
    print(f"{args.protocol} evaluation of {args.run_dir} ({args.checkpoint}.ckpt, feature {kind})")
    for k, v in metrics.items():
        print(f"  {k:<{width}}  {v:.2f}" if isinstance(v, float) else f"  {k:<{width}}  {v}")
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    """``selfcaps profile``: parameters and FLOPs of a method's network on its data's images."""
    from selfcaps.cli.config import default_preset, load_config, parse_overrides
    from selfcaps.eval import format_profile, profile_model
    from selfcaps.methods import get_method, list_methods

    method_cls = get_method(args.method)
    overrides = parse_overrides(args.overrides)
    if args.data:
        overrides.append(("data.name", args.data))
    preset = args.preset or default_preset(method_cls.name, args.data)
    cfg = load_config(method_cls.name, preset, overrides, methods=list_methods())
    method = method_cls(cfg)
    net = method.network.eval()
    shape = tuple(method.example_input().shape)
    prof = profile_model(net, shape)
    print(f"{method.name} ({cfg.model.name}) on {cfg.data.name} images {shape[1:]}")
    print(format_profile(prof))
    return 0
