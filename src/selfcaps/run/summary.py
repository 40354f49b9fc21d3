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
    "pixels_top5": "baseline: raw pixels, top-5",
    "random_init": "baseline: untrained network",
    "random_init_top5": "baseline: untrained network, top-5",
}
#: Each headline's baselines: ``{headline: ((baseline key name, what it is), ...)}``.
_BASELINES = {
    "top1": (("pixels", "raw pixels"), ("random_init", "the untrained network")),
    "top5": (("pixels_top5", "raw pixels"), ("random_init_top5", "the untrained network")),
}


def _value(v: Any) -> str:
    return f"{v:.2f}" if isinstance(v, float) else str(v)


def _plural(n: Any, word: str) -> str:
    """``1 epoch``, ``2 epochs``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _baselines(
    metrics: Mapping[str, Any], keys: Mapping[str, str | None], name: str, chance: float | None
) -> list[tuple[str, float]]:
    """The baselines of headline ``name`` in ``metrics``; chance where there is none."""
    found = [
        (what, float(metrics[k]))
        for b, what in _BASELINES[name]
        if (k := keys.get(b)) and k in metrics
    ]
    if not found and chance is not None:
        found = [("chance", chance if name == "top1" else min(100.0, 5 * chance))]
    return found


def headline_warnings(
    metrics: Mapping[str, Any],
    protocol: str,
    keys: Mapping[str, str | None],
    chance: float | None = None,
) -> list[str]:
    """A sentence for each headline number that is no better than one of its baselines.

    Args:
        metrics: The run's metrics.
        protocol: The headline's name.
        keys: As :func:`format_summary`'s.
        chance: The accuracy of guessing (percent), the baseline of a headline without one.

    Examples:
        >>> m = {"a": 89.5, "a5": 99.2, "p": 91.5, "p5": 99.7, "r": 89.0, "r5": 99.7}
        >>> keys = {"top1": "a", "top5": "a5", "pixels": "p", "pixels_top5": "p5",
        ...         "random_init": "r", "random_init_top5": "r5"}
        >>> for line in headline_warnings(m, "kNN", keys): print(line)
        kNN (89.50) is no better than raw pixels (91.50)
        kNN, top-5 (99.20) is no better than raw pixels (99.70) and the untrained network (99.70)
    """
    out = []
    for name in ("top1", "top5"):
        key = keys.get(name)
        if not key or key not in metrics:
            continue
        value = float(metrics[key])
        below = [(w, b) for w, b in _baselines(metrics, keys, name, chance) if value <= b]
        if below:
            label = _KEY_LABELS[name].format(protocol=protocol)
            as_float = isinstance(metrics[key], float)  # a count (classes covered) stays one
            than = " and ".join(f"{w} ({b:.2f})" if as_float else f"{w} ({b:g})" for w, b in below)
            out.append(f"{label} ({_value(metrics[key])}) is no better than {than}")
    return out


def format_summary(
    metrics: dict[str, Any],
    out: Path,
    protocol: str,
    keys: Mapping[str, str | None],
    notes: Mapping[str, str],
    chance: float | None = None,
) -> str:
    """The end-of-run summary.

    Each headline number is shown with its baselines (raw pixels, the untrained network,
    or else chance), and a line says so when it is no better than one of them: an
    untrained network's summary never reads as a success.

    Args:
        metrics: The run's metrics.json content.
        out: The run directory.
        protocol: The method's evaluation protocol (e.g. ``"kNN"``).
        keys: ``{"top1" | "top5" | "pixels" | "random_init" | "pixels_top5" |
            "random_init_top5": metrics key or None}``.
        notes: Further ``{label: metrics key}`` worth a line.
        chance: The accuracy of guessing, in percent (100 / classes), shown as the
            baseline of a headline accuracy that has no other; None: not an accuracy.

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
    for name in ("top1", "top5"):
        key = keys.get(name)
        has_own = any(keys.get(b) and keys[b] in metrics for b, _ in _BASELINES[name])
        if key and key in metrics and chance is not None and not has_own:
            label = "baseline: chance" + ("" if name == "top1" else ", top-5")
            rows.append((label, chance if name == "top1" else min(100.0, 5 * chance)))
    rows += [(label, metrics[key]) for label, key in notes.items() if key in metrics]
    width = max((len(label) for label, _ in rows), default=0)
    lines = ["", f"{metrics.get('method')} on {metrics.get('dataset')}: {out}"]
    lines += [f"  {label:<{width}}  {_value(v)}" for label, v in rows]
    lines += [f"  note: {w}" for w in headline_warnings(metrics, protocol, keys, chance)]
    minutes = float(metrics.get("train_time_s", 0.0)) / 60
    part = metrics.get("batches_into_next_epoch", 0)
    trained = _plural(metrics.get("epochs_trained"), "epoch")
    if part:
        trained += f" and {part} batch" + ("" if part == 1 else "es")
    lines.append(
        f"  trained {trained} in {minutes:.1f} min; "
        f"evaluated checkpoint: {metrics.get('best_checkpoint')}"
    )
    lines.append(f"  every metric: {out / 'metrics.json'}; figures: {out / 'figures'}/")
    return "\n".join(lines)
