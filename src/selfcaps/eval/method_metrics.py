"""Final-evaluation helpers shared by the methods: features of whole splits, kNN reports.

Every evaluation records what it measured beside its numbers (:func:`evaluation_record`):
the split it queried and its size, the split its bank (or training set) came from and its
size, and a digest of the weights it evaluated, so that ``metrics.json`` shows that a test
accuracy came from the test split and that an "untrained" baseline ran on untrained weights.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from selfcaps.eval import knn_evaluate
from selfcaps.eval.features import extract_named_features

__all__ = ["collect_features", "evaluation_record", "knn_metrics", "weights_digest"]


def weights_digest(module: nn.Module) -> str:
    """First 16 hex digits of the SHA-256 of a module's parameters and buffers.

    Names, shapes, dtypes and the bytes of every tensor of ``state_dict()``, in its order: two
    modules have the same digest exactly when they hold the same weights. A method (anything
    with a ``network``, such as :class:`~selfcaps.methods.base.CapsuleMethod`) is digested by
    its network, uncompiled: the weights that compute its features and predictions, and what
    ``selfcaps.load_run(run).network`` returns. So a run's own evaluation, ``selfcaps eval`` of
    the same checkpoint and a user's ``load_run`` give one digest for one set of weights, with
    or without ``--compile``, and training-only state (EncapNet's feedback units, PoE's epoch
    counter) does not enter it.
    """
    module = getattr(module, "network", module)
    module = getattr(module, "_orig_mod", module)  # torch.compile's wrapper
    h = hashlib.sha256()
    for name, t in module.state_dict().items():
        t = t.detach().cpu().contiguous()
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype};".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


def evaluation_record(
    prefix: str,
    query_split: str,
    query_n: int,
    bank_split: str | None,
    bank_n: int | None,
    module: nn.Module | None,
) -> dict[str, str | int]:
    """What an evaluation measured, as flat ``metrics.json`` keys under ``prefix``.

    Keys: ``<prefix>_query_split``, ``<prefix>_query_n`` (the images scored),
    ``<prefix>_bank_split``, ``<prefix>_bank_n`` (the labelled images it voted or trained
    with; omitted when there are none) and ``<prefix>_weights`` (:func:`weights_digest` of
    the network evaluated; omitted for features that use no weights, such as raw pixels).
    """
    out: dict[str, str | int] = {f"{prefix}_query_split": query_split, f"{prefix}_query_n": query_n}
    if bank_split is not None and bank_n is not None:
        out[f"{prefix}_bank_split"], out[f"{prefix}_bank_n"] = bank_split, bank_n
    if module is not None:
        out[f"{prefix}_weights"] = weights_digest(module)
    return out


def collect_features(
    module: nn.Module, loader: Any, fn: Callable[[Tensor], dict[str, Tensor]], kinds: Sequence[str]
) -> tuple[dict[str, Tensor], Tensor]:
    """Features per kind and labels of a loader, ``module`` in eval mode (with a progress bar).

    :func:`~selfcaps.eval.features.extract_named_features` on ``module``'s device.

    Args:
        module: Put in ``eval()`` for the pass and restored afterwards.
        loader: Yields ``(images, labels)``.
        fn: Images -> ``{kind: (B, D) features}``.
        kinds: The kinds to keep.

    Returns:
        ``({kind: (N, D) float32 CPU features}, (N,) labels)``.
    """
    return extract_named_features(fn, loader, kinds, module=module, desc="features")


def knn_metrics(
    module: nn.Module,
    dm: Any,
    fn: Callable[[Tensor], dict[str, Tensor]],
    kinds: Sequence[str],
    num_classes: int,
    bank_split: str = "train",
    query_split: str = "test",
    record: str | None = None,
    weights: bool = True,
) -> dict[str, float | int | str]:
    """Weighted-kNN top-1/top-5 (percent) of ``query_split`` against ``bank_split``, per kind.

    Keys: ``knn_top1_<kind>``, ``knn_top5_<kind>``. k and T come from ``dm.cfg.eval``; the
    bank is the deterministic evaluation transform of ``bank_split``. With ``record``, also
    the :func:`evaluation_record` of the images actually scored and voted with, and (with
    ``weights``) the digest of ``module``.
    """
    cfg = dm.cfg
    bank_loader, query_loader = dm.eval_loader(bank_split), dm.eval_loader(query_split)
    bank, bank_y = collect_features(module, bank_loader, fn, kinds)
    query, query_y = collect_features(module, query_loader, fn, kinds)
    out: dict[str, float | int | str] = {}
    if record is not None:
        out.update(
            evaluation_record(
                record, query_split, len(query_y), bank_split, len(bank_y),
                module if weights else None,
            )
        )  # fmt: skip
    for k in kinds:
        res = knn_evaluate(
            bank[k], bank_y, query[k], query_y, num_classes, k=cfg.eval.knn_k, t=cfg.eval.knn_t
        )
        out[f"knn_top1_{k}"] = float(res["top1"])
        out[f"knn_top5_{k}"] = float(res["top5"])
    return out
