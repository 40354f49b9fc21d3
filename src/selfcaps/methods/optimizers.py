"""The optimiser of a run's ``optim`` section: Adam, AdamW or SGD, fused on an accelerator."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from selfcaps.caps.chunking import sizing

__all__ = ["build_optimizer"]


def _fused(params: list[Any]) -> bool:
    """Fused optimiser kernels: for parameters on an accelerator, or sized as for one.

    A fused Adam or SGD updates every tensor in a few kernels; the per-tensor loop a CPU
    uses by default launches about ten ops per tensor and reads the step count on the host
    once per tensor. On a CPU the loop stays (its arithmetic produced the registry's
    numbers); :func:`selfcaps.caps.chunking.sized_for` ``("accelerator")`` counts the fused
    path there.
    """
    kind = sizing()
    if kind != "device":
        return kind == "accelerator"
    tensors = [t for g in params for t in (g["params"] if isinstance(g, dict) else [g])]
    return any(t.device.type != "cpu" for t in tensors)


def build_optimizer(
    params: Iterable[nn.Parameter], o: Any, lr: float | None = None
) -> torch.optim.Optimizer:
    """The optimiser of an ``optim`` config section (``name``, ``lr``, ``weight_decay``, ...).

    Fused kernels where the parameters live on an accelerator (:func:`_fused`).

    Args:
        params: Parameters to optimise (or parameter groups).
        o: The ``optim`` section.
        lr: Learning rate instead of ``o.lr`` (e.g. a second, finetuning phase).
    """
    params = list(params)
    lr = float(o.lr if lr is None else lr)
    betas = tuple(float(b) for b in (o.get("betas") or (0.9, 0.999)))
    fused = {"fused": True} if _fused(params) else {}
    if o.name == "adam":
        return torch.optim.Adam(params, lr=lr, betas=betas, weight_decay=o.weight_decay, **fused)
    if o.name == "adamw":
        return torch.optim.AdamW(params, lr=lr, betas=betas, weight_decay=o.weight_decay, **fused)
    if o.name == "sgd":
        return torch.optim.SGD(
            params, lr=lr, momentum=o.momentum, weight_decay=o.weight_decay, **fused
        )
    raise ValueError(f"optim.name: unknown optimiser {o.name!r}; valid: adam, adamw, sgd")
