"""Argument checks shared by the evaluation protocols; every error names the offending key."""

from __future__ import annotations

from torch import Tensor

__all__ = ["check_features", "check_labels", "check_positive"]


def check_positive(name: str, value: float) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value > 0``."""
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")


def check_features(
    features: Tensor, labels: Tensor, names: tuple[str, str], dim: int | None = None
) -> None:
    """Check that ``features`` is ``(N, D)`` with ``N >= 1`` and ``labels`` is ``(N,)``.

    Args:
        features: Feature matrix.
        labels: Class indices.
        names: The argument names of ``features`` and ``labels``, for messages.
        dim: The required ``D``, if any (that of the training features).
    """
    f_name, y_name = names
    if features.dim() != 2 or (dim is not None and features.shape[1] != dim):
        want = f"(N, {dim})" if dim is not None else "(N, D)"
        raise ValueError(
            f"{f_name} must be {want}, got shape {tuple(features.shape)}; "
            "flatten each sample's feature first"
        )
    if labels.dim() != 1 or labels.shape[0] != features.shape[0]:
        raise ValueError(
            f"{y_name} must be ({features.shape[0]},) to match {f_name}, "
            f"got shape {tuple(labels.shape)}"
        )
    if features.shape[0] == 0:
        raise ValueError(f"{f_name} is empty")


def check_labels(labels: Tensor, num_classes: int, name: str) -> None:
    """Check that integer ``labels`` lie in ``[0, num_classes)``."""
    check_positive("num_classes", num_classes)
    if labels.is_floating_point() or labels.is_complex():
        raise ValueError(f"{name} must hold integer class indices, got dtype {labels.dtype}")
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= num_classes):
        raise ValueError(
            f"{name} must lie in [0, num_classes={num_classes}), "
            f"got values in [{int(labels.min())}, {int(labels.max())}]"
        )
