r"""Linear probe: multinomial logistic regression on frozen features.

Features are standardised with the training split's mean and standard deviation,
then a linear layer (zero-initialised) is fitted by full-batch L-BFGS with a
strong-Wolfe line search to the exact objective

.. math::
    \frac{1}{N} \sum_n \mathrm{CE}(W x_n + b, y_n) + \frac{\lambda}{2} \|W\|_F^2

(the bias is not penalised). The problem is convex and nothing is random, so the
result does not depend on a seed, a learning-rate schedule or the batch order:
the same features give the same probe on every run. With a validation split the
weight decay :math:`\lambda` is chosen from a grid by validation top-1; the test
split is evaluated once, with the chosen probe.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from selfcaps.eval._checks import check_features, check_labels, check_positive
from selfcaps.eval.metrics import topk_accuracy

__all__ = ["DEFAULT_WEIGHT_DECAY", "WEIGHT_DECAY_GRID", "linear_probe"]

WEIGHT_DECAY_GRID: tuple[float, ...] = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1)
"""Weight decays tried when a validation split is given and ``weight_decay`` is ``None``."""

DEFAULT_WEIGHT_DECAY = 1e-4
"""Weight decay used without a validation split when ``weight_decay`` is ``None``."""


def _fit(
    x: Tensor,
    y: Tensor,
    num_classes: int,
    weight_decay: float,
    epochs: int,
    lr: float,
    batch_size: int,
) -> nn.Linear:
    """Minimise the regularised cross-entropy with L-BFGS; gradients summed over row chunks."""
    linear = nn.Linear(x.shape[1], num_classes, device=x.device, dtype=x.dtype)
    nn.init.zeros_(linear.weight)
    nn.init.zeros_(linear.bias)
    opt = torch.optim.LBFGS(
        linear.parameters(), lr=lr, max_iter=epochs, line_search_fn="strong_wolfe"
    )
    chunks = list(zip(x.split(batch_size), y.split(batch_size)))

    def closure() -> Tensor:
        opt.zero_grad()
        total = 0.5 * weight_decay * linear.weight.pow(2).sum()
        total.backward()
        for xc, yc in chunks:
            loss = F.cross_entropy(linear(xc), yc, reduction="sum") / x.shape[0]
            loss.backward()
            total = total.detach() + loss.detach()
        return total

    with torch.enable_grad():
        opt.step(closure)
    return linear


def linear_probe(
    train_f: Tensor,
    train_y: Tensor,
    test_f: Tensor,
    test_y: Tensor,
    num_classes: int,
    *,
    val_f: Tensor | None = None,
    val_y: Tensor | None = None,
    epochs: int = 100,
    lr: float = 1.0,
    weight_decay: float | Sequence[float] | None = None,
    batch_size: int | None = None,
) -> dict[str, float]:
    """Fit a multinomial logistic regression on frozen features and report test accuracy.

    Runs on the device of ``train_f`` (CPU or GPU); the other splits are moved there.

    Args:
        train_f: Training features ``(N, D)``.
        train_y: Training class indices ``(N,)``.
        test_f: Test features ``(M, D)``, evaluated once.
        test_y: Test class indices ``(M,)``.
        num_classes: Number of classes.
        val_f: Validation features (carved from the training set) to choose the weight decay.
        val_y: Validation class indices.
        epochs: Maximum L-BFGS iterations; each costs one or more full passes over ``train_f``.
        lr: L-BFGS step length (1 is the natural step; the line search adapts it).
        weight_decay: One value, or several to choose from by validation top-1 (ties go
            to the later value; in the ascending grid, the stronger regularisation).
            ``None``: :data:`WEIGHT_DECAY_GRID` with a validation split, else
            :data:`DEFAULT_WEIGHT_DECAY`.
        batch_size: Rows per chunk when summing the full-batch loss and gradient; it
            bounds memory (``batch_size x num_classes`` logits) and does not change the
            objective. ``None``: one chunk.

    Returns:
        ``top1`` and ``top5`` on the test split (percent; top-5 means
        top-``min(5, num_classes)``), ``train_top1``, ``val_top1`` (with a
        validation split) and the ``weight_decay`` used.

    Raises:
        ValueError: For bad shapes or labels, several weight decays without a
            validation split, or non-positive ``epochs``/``lr``/``batch_size``.

    Examples:
        >>> g = torch.Generator().manual_seed(0)
        >>> y = torch.arange(40) % 2
        >>> x = torch.randn(40, 3, generator=g) + 3 * y[:, None]
        >>> result = linear_probe(x[:30], y[:30], x[30:], y[30:], num_classes=2)
        >>> result["top1"], result["weight_decay"]
        (100.0, 0.0001)
    """
    check_features(train_f, train_y, ("train_f", "train_y"))
    dim = train_f.shape[1]
    check_features(test_f, test_y, ("test_f", "test_y"), dim)
    splits = {"train": (train_f, train_y), "test": (test_f, test_y)}
    if (val_f is None) != (val_y is None):
        raise ValueError("val_f and val_y must be given together")
    if val_f is not None and val_y is not None:
        check_features(val_f, val_y, ("val_f", "val_y"), dim)
        splits["val"] = (val_f, val_y)
    for split, (_, y) in splits.items():
        check_labels(y, num_classes, f"{split}_y")
    for name, value in {"epochs": epochs, "lr": lr, "batch_size": batch_size or 1}.items():
        check_positive(name, value)
    if weight_decay is None:
        weight_decay = WEIGHT_DECAY_GRID if "val" in splits else DEFAULT_WEIGHT_DECAY
    grid = [weight_decay] if isinstance(weight_decay, int | float) else weight_decay
    candidates = [float(wd) for wd in grid]
    if not candidates or min(candidates) < 0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay!r}")
    if len(candidates) > 1 and "val" not in splits:
        raise ValueError("weight_decay: choosing among several values needs val_f and val_y")

    device, dtype = train_f.device, torch.promote_types(train_f.dtype, torch.float32)
    mean = train_f.to(dtype).mean(dim=0)
    std = train_f.to(dtype).std(dim=0)
    std = torch.where(std > 0, std, torch.ones_like(std))
    data = {
        split: ((f.detach().to(device, dtype) - mean) / std, y.to(device).long())
        for split, (f, y) in splits.items()
    }
    x, y = data["train"]

    def score(linear: nn.Linear, split: str) -> dict[str, float]:
        with torch.no_grad():
            return topk_accuracy(linear(data[split][0]), data[split][1], ks=(1, 5))

    probes = [
        _fit(x, y, num_classes, wd, epochs, lr, batch_size or x.shape[0]) for wd in candidates
    ]
    val_top1 = [score(p, "val")["top1"] if "val" in splits else 0.0 for p in probes]
    best = max(range(len(probes)), key=lambda i: (val_top1[i], i))  # ties: the later candidate
    linear = probes[best]
    result = {**score(linear, "test"), "train_top1": score(linear, "train")["top1"]}
    if "val" in splits:
        result["val_top1"] = val_top1[best]
    result["weight_decay"] = candidates[best]
    return result
