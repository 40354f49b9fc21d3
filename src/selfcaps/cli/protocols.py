"""The evaluation protocols of ``selfcaps eval`` on a reloaded run (imports torch)."""

from __future__ import annotations

import argparse
from typing import Any

import torch
from omegaconf import OmegaConf

from selfcaps.cli.config import ConfigError, load_yaml
from selfcaps.cli.run import resolve_data_root
from selfcaps.eval import finetune, linear_probe, svm_probe
from selfcaps.methods import CapsuleMethod, get_method
from selfcaps.methods.datamodule import SelfcapsDataModule
from selfcaps.methods.evaluation import collect_features, knn_metrics
from selfcaps.methods.io import load_checkpoint

__all__ = ["feature_kind", "load_run", "run_protocol"]


def load_run(args: argparse.Namespace) -> tuple[CapsuleMethod, SelfcapsDataModule]:
    """The method of a run directory with its checkpoint loaded, in eval mode, and its data."""
    cfg = OmegaConf.create(load_yaml(args.run_dir / "config.yaml"))
    cfg.data.root, source = resolve_data_root(args.data_root, cfg.data.root)
    method = get_method(cfg.method)(cfg)
    ckpt = load_checkpoint(args.run_dir / "checkpoints" / f"{args.checkpoint}.ckpt")
    method.load_state_dict(ckpt["state_dict"])
    method.eval()
    train_tf, eval_tf = method.build_transforms()
    return method, SelfcapsDataModule(method.cfg, train_tf, eval_tf, root_source=source)


def feature_kind(method: CapsuleMethod, requested: str | None) -> str:
    """The requested feature kind (default: the monitor feature), checked against the method."""
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
