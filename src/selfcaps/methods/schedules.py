"""Learning-rate schedules that torch does not ship as one scheduler."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["cosine_schedule", "warmup_cosine"]


def cosine_schedule(opt: torch.optim.Optimizer, total: int, warmup: int | None = 0) -> Any:
    """Cosine annealing to 0 over ``total`` scheduler steps, after ``warmup`` linear ones.

    Without a warm-up this is torch's ``CosineAnnealingLR``; with one, a ``LambdaLR`` of
    :func:`warmup_cosine`. ``warmup`` is ``optim.warmup`` (``None`` in older configurations: 0).
    """
    steps = int(warmup or 0)
    if steps == 0:
        return torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, total))
    return torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(steps, total))


def warmup_cosine(warmup: int, total: int) -> Callable[[int], float]:
    """Linear warm-up, then cosine annealing to 0, as a ``LambdaLR`` factor of the base rate.

    The factor after ``t`` scheduler steps is ``(t + 1) / (warmup + 1)`` for ``t < warmup``
    (the first step already trains, at ``1 / (warmup + 1)`` of the rate), then
    ``(1 + cos(pi (t - warmup) / (total - warmup))) / 2``: the closed form of
    ``CosineAnnealingLR`` with ``eta_min = 0`` over the steps after the warm-up (solo-learn's
    and lightly's ``warmup_cosine``, without their separate start and end rates). The factor is
    a pure function of ``t``, so a resumed run continues the schedule exactly.

    Args:
        warmup: Warm-up steps (epochs or optimiser steps, as the scheduler's interval), >= 0.
        total: Scheduler steps in the whole run; the cosine part has ``total - warmup`` of
            them (at least 1).

    Raises:
        ValueError: ``warmup`` is negative.
    """
    if warmup < 0:
        raise ValueError(f"optim.warmup: expected a number of scheduler steps >= 0, got {warmup}")
    span = max(1, total - warmup)

    def factor(t: int) -> float:
        if t < warmup:
            return (t + 1) / (warmup + 1)
        return 0.5 * (1.0 + math.cos(math.pi * min(t - warmup, span) / span))

    return factor
