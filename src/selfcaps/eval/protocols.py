"""The evaluation protocols of a trained method on its data: kNN, linear, SVM, finetuning.

:func:`run_protocol` is what ``selfcaps eval`` runs, and what a user calls from Python on
a method reloaded from its run directory and its data module::

    from selfcaps.data.datamodule import SelfcapsDataModule
    from selfcaps.eval.protocols import run_protocol
    from selfcaps.run.trained import load_method

    method = load_method("runs/coca")
    dm = SelfcapsDataModule(method.cfg, *method.build_transforms())
    print(run_protocol(method, dm, "linear", method.monitor_feature))

The protocols need of a method only what :class:`TrainedMethod` names (every
:class:`~selfcaps.methods.base.CapsuleMethod` has it), so this module imports no method.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch
from omegaconf import DictConfig
from torch import Tensor

from selfcaps.config.loading import ConfigError
from selfcaps.data.datamodule import SelfcapsDataModule, TransformDataset
from selfcaps.eval import finetune, linear_probe, svm_probe
from selfcaps.eval.labels import dataset_targets, label_suffix, stratified_label_indices
from selfcaps.eval.method_metrics import collect_features, evaluation_record, knn_metrics

__all__ = ["LabelSubset", "TrainedMethod", "feature_kind", "run_protocol"]


class TrainedMethod(Protocol):
    """What the protocols use of a trained method (:class:`~selfcaps.methods.base.CapsuleMethod`).

    Attributes:
        name: The method's name.
        cfg: Its resolved configuration (``eval``, ``data`` and ``seed`` keys).
        info: Its dataset's info (``num_classes``).
        network: The network whose weights are evaluated (digested in the records).
        monitor_feature: The feature kind evaluated by default.
    """

    name: str
    cfg: DictConfig
    info: Any
    network: torch.nn.Module
    monitor_feature: str
    training: bool

    def features(self, x: Tensor) -> dict[str, Tensor]:
        """Images -> ``{kind: (B, ...) features}``."""
        ...

    def feature_kinds(self) -> list[str]:
        """The kinds :meth:`features` returns."""
        ...

    def example_input(self, batch: int) -> Tensor:
        """A batch of inputs of the right shape."""
        ...

    def parameters(self) -> Any:
        """The module's parameters (their device is where features are computed)."""
        ...

    def eval(self) -> Any:
        """Evaluation mode."""
        ...

    def train(self, mode: bool = True) -> Any:
        """Training mode."""
        ...


def feature_kind(method: TrainedMethod, requested: str | None) -> str:
    """The requested feature kind (default: the monitor feature), checked against the method."""
    kind = requested or method.monitor_feature
    available = method.feature_kinds()
    if kind not in available:
        raise ConfigError(
            f"--feature: {kind!r} is not a feature of {method.name}; valid: {', '.join(available)}"
        )
    return kind


@dataclass(frozen=True)
class LabelSubset:
    """A label-efficiency request: ``fraction`` or ``per_class`` labelled images, ``seed``.

    ``seed_in_name``: the subset was drawn with another seed than the run's, and the keys
    say so (``_lf10_ls1``), so that evaluating several subsets of one run keeps every result.
    """

    fraction: float | None = None
    per_class: int | None = None
    seed: int = 0
    seed_in_name: bool = False

    @property
    def suffix(self) -> str:
        """Metrics-key suffix, e.g. ``_lf10`` or ``_lf10_ls1`` (``ValueError``: a bad request)."""
        name = label_suffix(self.fraction, self.per_class)
        return f"{name}_ls{self.seed}" if self.seed_in_name else name

    def indices(self, train: Any) -> list[int]:
        """Indices of the labelled images in the raw training split ``train``."""
        return stratified_label_indices(
            dataset_targets(train),
            fraction=self.fraction,
            per_class=self.per_class,
            seed=self.seed,
        ).tolist()


def _eval_split(
    dm: SelfcapsDataModule, split: str, labels: LabelSubset | None
) -> torch.utils.data.DataLoader:
    """A split through the evaluation transform; ``train`` restricted to the labelled images."""
    if split != "train" or labels is None:
        return dm.eval_loader(split)
    train = dm.split("train")
    subset = torch.utils.data.Subset(train, labels.indices(train))
    return torch.utils.data.DataLoader(
        TransformDataset(subset, dm.eval_transform), batch_size=int(dm.cfg.data.eval_batch_size)
    )


def _probe_features(
    method: TrainedMethod, dm: SelfcapsDataModule, kind: str, labels: LabelSubset | None
) -> dict[str, Any]:
    out = {}
    for split in ("train", "val", "test"):
        loader = _eval_split(dm, split, labels)
        feats, targets = collect_features(method, loader, method.features, [kind])
        out[split] = (feats[kind], targets)
    return out


def run_protocol(
    method: TrainedMethod,
    dm: SelfcapsDataModule,
    protocol: str,
    kind: str,
    labels: LabelSubset | None = None,
    own_classifier: bool = False,
    bank: str = "train",
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
        bank: ``knn``: the split of labelled images the test images vote with, ``train`` or
            ``train_full`` (the official training split with the validation images).
    """
    e, nc = method.cfg.eval, method.info.num_classes
    sfx = labels.suffix if labels is not None else ""
    if protocol == "knn":
        if labels is not None:
            raise ConfigError(
                "--label-fraction / --labels-per-class apply to the linear, svm and finetune "
                "protocols, not knn"
            )
        return knn_metrics(
            method, dm, method.features, [kind], nc, bank_split=bank, record=f"eval_knn_{kind}"
        )
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
            **evaluation_record(
                f"eval_{protocol}_{kind}{sfx}", "test", len(yte), "train", len(ytr), method
            ),
        }
    # Finetuning changes the weights: the digest is of the pretrained weights it starts from.
    record = evaluation_record(
        f"eval_finetune{sfx}",
        "test",
        len(dm.eval_loader("test").dataset),
        "train",
        len(_eval_split(dm, "train", labels).dataset),
        method,
    )
    if own_classifier:
        labelled = labels.indices(dm.split("train")) if labels is not None else None
        _, res = method.finetune_classifier(dm, labelled=labelled)  # type: ignore[attr-defined]
        return {
            f"finetune_top1{sfx}": float(res["test_top1"]),
            f"finetune_top5{sfx}": float(res["test_top5"]),
            f"finetune_best_epoch{sfx}": int(res["best_epoch"]) + 1,
            **({f"labelled_images{sfx}": len(labelled)} if labelled is not None else {}),
            **record,
        }
    backbone = _FeatureBackbone(method, kind)
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
        **record,
    }


def _subset_size(train: Any, sfx: str) -> dict[str, int]:
    """``labelled_images<sfx>``: how many labelled images trained the protocol (subsets only)."""
    return {f"labelled_images{sfx}": len(train)} if sfx else {}


class _FeatureBackbone(torch.nn.Module):
    """The method's network as a feature extractor of one kind (for finetuning)."""

    def __init__(self, method: TrainedMethod, kind: str) -> None:
        super().__init__()
        self.method, self.kind = method, kind

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.method.features(x)[self.kind].flatten(1)
