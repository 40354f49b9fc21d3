"""Support-vector-machine probe on frozen features (scikit-learn ``SVC``).

SparseCaps evaluates its latent capsules with an RBF SVM (``C=100``,
``gamma=0.1``). Top-1 is ``SVC.predict`` (one-vs-one voting, scikit-learn's
default and what ``SVC.score`` reports); top-5 ranks classes by
``decision_function`` with ``decision_function_shape="ovr"`` (the one-vs-one
votes plus a bounded confidence term), which agrees with ``predict`` except on
vote ties. Features are used as given: standardise them first if their scale
does not suit ``gamma``.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.model_selection import train_test_split
from sklearn.svm import SVC
from torch import Tensor

from selfcaps.engine.progress import note
from selfcaps.eval._checks import check_features, check_positive
from selfcaps.eval.metrics import accuracy_from_predictions, topk_accuracy

__all__ = ["svm_probe"]


def _numpy(x: Tensor | np.ndarray) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, Tensor) else np.asarray(x)


def svm_probe(
    train_f: Tensor,
    train_y: Tensor,
    test_f: Tensor,
    test_y: Tensor,
    kernel: str = "rbf",
    C: float = 100.0,
    gamma: float | str = 0.1,
    *,
    max_train: int | None = None,
    seed: int = 0,
    **svc_kwargs: object,
) -> dict[str, float | int]:
    """Fit ``SVC`` on training features and report test top-1/top-5 in percent.

    Args:
        train_f: Training features ``(N, D)`` (tensor on any device, or array).
        train_y: Training class indices ``(N,)``.
        test_f: Test features ``(M, D)``.
        test_y: Test class indices ``(M,)``.
        kernel: ``SVC`` kernel ("rbf", "linear", "poly", "sigmoid").
        C: Regularisation, ``> 0``.
        gamma: Kernel coefficient, ``> 0``, or "scale" / "auto".
        max_train: Fit on at most this many training samples, drawn stratified by
            class with ``seed`` (kernel SVMs cost ``O(N^2)`` memory and up to
            ``O(N^3)`` time; 10,000 keeps MNIST-sized runs to minutes). ``None``: all.
        seed: Seed of the ``max_train`` subsample.
        **svc_kwargs: Further ``SVC`` arguments (e.g. ``cache_size``).

    Returns:
        ``top1``, ``top5`` (top-``min(5, classes seen in training)``) and ``num_train``.

    Raises:
        ValueError: Naming ``C``, ``gamma`` or ``max_train`` when out of range, or a bad shape.

    Examples:
        >>> g = torch.Generator().manual_seed(0)
        >>> y = torch.arange(60) % 3
        >>> x = 4 * torch.eye(3)[y] + torch.randn(60, 3, generator=g)
        >>> svm_probe(x[:45], y[:45], x[45:], y[45:], C=1.0)
        {'top1': 100.0, 'top5': 100.0, 'num_train': 45}
    """
    check_positive("C", C)
    if isinstance(gamma, str):
        if gamma not in ("scale", "auto"):
            raise ValueError(f'gamma must be > 0, "scale" or "auto", got {gamma!r}')
    else:
        check_positive("gamma", gamma)
    x, y = _numpy(train_f), _numpy(train_y).astype(np.int64)
    x_test, y_test = _numpy(test_f), _numpy(test_y).astype(np.int64)
    check_features(torch.as_tensor(x), torch.as_tensor(y), ("train_f", "train_y"))
    check_features(
        torch.as_tensor(x_test), torch.as_tensor(y_test), ("test_f", "test_y"), x.shape[1]
    )
    if max_train is not None:
        check_positive("max_train", max_train)
        if max_train < len(y):
            x, _, y, _ = train_test_split(x, y, train_size=max_train, stratify=y, random_state=seed)
    svc = SVC(kernel=kernel, C=C, gamma=gamma, decision_function_shape="ovr", **svc_kwargs)
    note(f"fitting an {kernel} SVM on {len(y)} feature vectors of {x.shape[1]} dimensions")
    svc.fit(x, y)
    scores = svc.decision_function(x_test)
    if scores.ndim == 1:  # two classes: one column, positive means classes_[1]
        scores = np.stack([-scores, scores], axis=1)
    ranked = svc.classes_[np.argsort(-scores, axis=1, kind="stable")]
    return {
        "top1": accuracy_from_predictions(svc.predict(x_test), y_test),
        "top5": topk_accuracy(torch.as_tensor(ranked), y_test, ks=(5,))["top5"],
        "num_train": len(y),
    }
