"""``selfcaps eval RUN_DIR --protocol ...`` and ``selfcaps profile METHOD``.

``eval`` reloads a finished (or pretrained) run, rebuilds its data, and runs an
evaluation protocol on its best checkpoint; results are printed and merged
into the run's ``metrics.json`` (atomically) under keys prefixed by the
protocol, e.g. ``linear_top1_backbone``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from selfcaps.cli.config import (
    ConfigError,
    default_preset,
    load_config,
    load_yaml,
    parse_overrides,
)
from selfcaps.cli.run import resolve_data_root
from selfcaps.eval import finetune, format_profile, linear_probe, profile_model, svm_probe
from selfcaps.methods import CapsuleMethod, get_method, list_methods
from selfcaps.methods.datamodule import SelfcapsDataModule
from selfcaps.methods.evaluation import collect_features, knn_metrics
from selfcaps.methods.io import atomic_write_json, load_checkpoint

__all__ = ["PROTOCOLS", "add_eval_arguments", "add_profile_arguments", "cmd_eval", "cmd_profile"]

PROTOCOLS = ("knn", "linear", "svm", "finetune")


def add_eval_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of ``selfcaps eval``."""
    p.add_argument("run_dir", type=Path, help="a run directory written by run/pretrain")
    p.add_argument("--protocol", default="knn", choices=PROTOCOLS)
    p.add_argument("--feature", help="feature kind (default: the method's monitor feature)")
    p.add_argument("--checkpoint", default="best", choices=["best", "last"])
    p.add_argument("--data-root", help="dataset root (default: the run's)")


def add_profile_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of ``selfcaps profile``."""
    p.add_argument("method", help=f"one of: {', '.join(list_methods())}")
    p.add_argument("overrides", nargs="*", metavar="key=value")
    p.add_argument("--preset", help="default: quick_<data> if the method has one, else quick")
    p.add_argument("--data", help="dataset whose image shape to profile (default: the preset's)")


def _load_run(args: argparse.Namespace) -> tuple[CapsuleMethod, SelfcapsDataModule]:
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


def _probe_features(method: CapsuleMethod, dm: SelfcapsDataModule, kind: str) -> dict[str, Any]:
    out = {}
    for split in ("train", "val", "test"):
        feats, labels = collect_features(method, dm.eval_loader(split), method.features, [kind])
        out[split] = (feats[kind], labels)
    return out


def run_protocol(
    method: CapsuleMethod, dm: SelfcapsDataModule, protocol: str, kind: str
) -> dict[str, float | int | str]:
    """One evaluation protocol on a trained method; flat metrics with protocol-prefixed keys."""
    e, nc = method.cfg.eval, method.info.num_classes
    if protocol == "knn":
        return knn_metrics(method, dm, method.features, [kind], nc)
    if protocol in ("linear", "svm"):
        f = _probe_features(method, dm, kind)
        (tr, ytr), (va, yva), (te, yte) = f["train"], f["val"], f["test"]
        if protocol == "linear":
            res = linear_probe(tr, ytr, te, yte, nc, val_f=va, val_y=yva, epochs=e.linear_epochs)
        else:
            res = svm_probe(
                tr, ytr, te, yte, C=e.svm_c, gamma=e.svm_gamma, max_train=e.svm_max_train
            )
        return {
            f"{protocol}_top1_{kind}": float(res["top1"]),
            f"{protocol}_top5_{kind}": float(res["top5"]),
        }
    backbone = _FeatureBackbone(method, kind)
    dim = int(backbone(method.example_input(2)).shape[1])
    res = finetune(
        backbone,
        dim,
        nc,
        dm.eval_loader("train").dataset,
        dm.eval_loader("val").dataset,
        dm.eval_loader("test").dataset,
        epochs=int(e.finetune_epochs),
        lr=float(e.finetune_lr),
        weight_decay=1e-4,
        batch_size=int(method.cfg.data.batch_size),
        seed=int(method.cfg.seed),
    )
    return {
        f"finetune_top1_{kind}": float(res["test_top1"]),
        f"finetune_top5_{kind}": float(res["test_top5"]),
        "finetune_best_epoch": int(res["best_epoch"]) + 1,
    }


class _FeatureBackbone(torch.nn.Module):
    """The method's network as a feature extractor of one kind (for finetuning)."""

    def __init__(self, method: CapsuleMethod, kind: str) -> None:
        super().__init__()
        self.method, self.kind = method, kind

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.method.features(x)[self.kind].flatten(1)


def cmd_eval(args: argparse.Namespace) -> int:
    """``selfcaps eval``."""
    method, dm = _load_run(args)
    kind = _feature_kind(method, args.feature)
    metrics = run_protocol(method, dm, args.protocol, kind)
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
