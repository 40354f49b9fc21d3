"""The few lines ``selfcaps run`` prints at the end: the headline numbers and where the rest is.

``metrics.json`` holds every number of a run (PoE alone writes about a hundred);
the console shows the method's headline metrics (the ones ``selfcaps bench``
reports: its protocol's top-1 and top-5, the baselines, its notes), how long it
trained, and the paths of the full metrics and the figures.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["format_summary"]

_KEY_LABELS = {
    "top1": "{protocol}",
    "top5": "{protocol}, top-5",
    "pixels": "baseline: raw pixels",
    "random_init": "baseline: untrained network",
}


def _value(v: Any) -> str:
    return f"{v:.2f}" if isinstance(v, float) else str(v)


def format_summary(
    metrics: dict[str, Any],
    out: Path,
    protocol: str,
    keys: Mapping[str, str | None],
    notes: Mapping[str, str],
) -> str:
    """The end-of-run summary.

    Args:
        metrics: The run's metrics.json content.
        out: The run directory.
        protocol: The method's evaluation protocol (e.g. ``"kNN"``).
        keys: ``{"top1" | "top5" | "pixels" | "random_init": metrics key or None}``.
        notes: Further ``{label: metrics key}`` worth a line.

    Examples:
        >>> m = {"method": "coca", "dataset": "mnist5k", "knn_top1_backbone": 91.234,
        ...      "epochs_trained": 8, "train_time_s": 201.0, "best_checkpoint": "last"}
        >>> print(format_summary(m, Path("runs/x"), "kNN top-1", {"top1": "knn_top1_backbone"}, {}))
        <BLANKLINE>
        coca on mnist5k: runs/x
          kNN top-1  91.23
          trained 8 epochs in 3.4 min; evaluated checkpoint: last
          every metric: runs/x/metrics.json; figures: runs/x/figures/
    """
    rows = [
        (_KEY_LABELS.get(name, name).format(protocol=protocol), metrics[key])
        for name, key in keys.items()
        if key and key in metrics
    ]
    rows += [(label, metrics[key]) for label, key in notes.items() if key in metrics]
    width = max((len(label) for label, _ in rows), default=0)
    lines = ["", f"{metrics.get('method')} on {metrics.get('dataset')}: {out}"]
    lines += [f"  {label:<{width}}  {_value(v)}" for label, v in rows]
    minutes = float(metrics.get("train_time_s", 0.0)) / 60
    lines.append(
        f"  trained {metrics.get('epochs_trained')} epochs in {minutes:.1f} min; "
        f"evaluated checkpoint: {metrics.get('best_checkpoint')}"
    )
    lines.append(f"  every metric: {out / 'metrics.json'}; figures: {out / 'figures'}/")
    return "\n".join(lines)
