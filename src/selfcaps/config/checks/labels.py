"""Names and checks of a labelled-subset request (``--label-fraction`` / ``--labels-per-class``).

Torch-free, so that the command line refuses a bad request at once;
:mod:`selfcaps.eval.labels` draws the subset.
"""

from __future__ import annotations

__all__ = ["check_label_request", "label_suffix"]


def check_label_request(fraction: float | None, per_class: int | None) -> None:
    """Raise :class:`ValueError` unless exactly one valid request is given.

    Args:
        fraction: Share of each class's training images, in ``(0, 1]``.
        per_class: Labelled images per class, ``>= 1``.
    """
    if (fraction is None) == (per_class is None):
        raise ValueError(
            "give exactly one of fraction (--label-fraction) and labels per class "
            f"(--labels-per-class), got fraction={fraction}, per_class={per_class}"
        )
    if fraction is not None and not 0.0 < fraction <= 1.0:
        raise ValueError(f"label fraction must be in (0, 1], got {fraction}")
    if per_class is not None and per_class < 1:
        raise ValueError(f"labels per class must be >= 1, got {per_class}")


def label_suffix(fraction: float | None = None, per_class: int | None = None) -> str:
    """The metrics-key suffix naming a labelled subset: ``_lf10`` (10%), ``_lpc25`` (25 a class).

    Fractions are written in percent, a decimal point as ``p`` (``0.005`` -> ``_lf0p5``).

    Examples:
        >>> label_suffix(0.1), label_suffix(0.01), label_suffix(0.005), label_suffix(per_class=25)
        ('_lf10', '_lf1', '_lf0p5', '_lpc25')
    """
    check_label_request(fraction, per_class)
    if per_class is not None:
        return f"_lpc{per_class}"
    assert fraction is not None
    return "_lf" + f"{round(100 * fraction, 6):g}".replace(".", "p")
