"""Paired, seeded comparisons: treatment vs control over the same seeds, with a verdict.

A claim such as "sparse capsules generalise better than dense ones" is tested by
running both arms with the same data, budget and seeds, and looking at the
per-seed differences ``d_s = treatment_s - control_s``. Their mean and a
Student-t confidence interval (``n - 1`` degrees of freedom) decide the verdict:

- *holds*: the whole interval lies on the side the claim predicts;
- *reversed*: the whole interval lies on the other side;
- *not resolved at this budget*: the interval contains 0;
- *not resolved (too few seeds)*: fewer than :data:`MIN_SEEDS` (3) seeds, whatever the
  differences: two seeds give an interval but no verdict;
- *not resolved (zero spread)*: every seed gave the same difference, so the interval has
  zero width and says nothing about the seed-to-seed noise (two identical arms, a metric
  that cannot move, or too coarse a metric).

These are the only words the project uses for a comparison; ``is_not_resolved`` tells the
three "not resolved" forms from a verdict.

Examples:
    >>> r = paired_comparison([92.0, 93.0, 91.5], [89.0, 90.5, 89.0])
    >>> r.verdict, round(r.diff_mean, 3)
    ('holds', 2.667)
    >>> paired_comparison([50.0, 48.0, 47.0], [49.0, 50.0, 46.5]).verdict
    'not resolved at this budget'
    >>> paired_comparison([52.0, 53.0], [49.0, 50.5]).verdict
    'not resolved (too few seeds)'
    >>> paired_comparison([2.0, 2.0, 2.0], [1.0, 1.0, 1.0]).verdict
    'not resolved (zero spread)'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "HOLDS",
    "MIN_SEEDS",
    "NOT_RESOLVED",
    "REVERSED",
    "TOO_FEW_SEEDS",
    "VERDICTS",
    "ZERO_SPREAD",
    "PairedResult",
    "is_not_resolved",
    "overall_verdict",
    "paired_comparison",
]

HOLDS = "holds"
REVERSED = "reversed"
NOT_RESOLVED = "not resolved at this budget"
TOO_FEW_SEEDS = "not resolved (too few seeds)"
ZERO_SPREAD = "not resolved (zero spread)"
#: Every verdict a comparison can get.
VERDICTS = (HOLDS, REVERSED, NOT_RESOLVED, TOO_FEW_SEEDS, ZERO_SPREAD)
#: Fewer seeds than this give no verdict (the design's rule: "fewer than 3 seeds is no verdict").
MIN_SEEDS = 3


def is_not_resolved(verdict: str) -> bool:
    """Whether ``verdict`` is one of the "not resolved" forms (no verdict either way).

    Examples:
        >>> is_not_resolved("not resolved (too few seeds)"), is_not_resolved("holds")
        (True, False)
    """
    return verdict.startswith("not resolved")


@dataclass(frozen=True)
class PairedResult:
    """Summary of one paired comparison.

    Attributes:
        n: Number of paired seeds.
        treatment_mean: Mean of the treatment arm.
        treatment_std: Sample standard deviation (``ddof=1``; NaN for one seed).
        control_mean: Mean of the control arm.
        control_std: Sample standard deviation of the control arm.
        diff_mean: Mean of the per-seed differences (treatment - control).
        diff_low: Lower end of the confidence interval of ``diff_mean`` (NaN below 2 seeds).
        diff_high: Upper end of that interval.
        level: Confidence level of the interval.
        verdict: One of :data:`VERDICTS`: ``holds``, ``reversed``, ``not resolved at this
            budget``, ``not resolved (too few seeds)`` or ``not resolved (zero spread)``.
    """

    n: int
    treatment_mean: float
    treatment_std: float
    control_mean: float
    control_std: float
    diff_mean: float
    diff_low: float
    diff_high: float
    level: float
    verdict: str

    def as_dict(self) -> dict[str, Any]:
        """The fields as a flat dict (for CSV rows)."""
        return asdict(self)


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, math.nan
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))


def paired_comparison(
    treatment: Sequence[float],
    control: Sequence[float],
    higher_is_better: bool = True,
    level: float = 0.95,
) -> PairedResult:
    """Compare two arms measured on the same seeds (position ``s`` of each list is seed ``s``).

    The interval is ``mean(d) +- t_{(1+level)/2, n-1} * std(d) / sqrt(n)`` over the
    per-seed differences ``d``; it is exact for normally distributed differences and the
    standard choice for a handful of seeds. The interval is computed from two seeds on, but
    the verdict needs :data:`MIN_SEEDS` seeds and a non-zero spread of ``d``.

    Args:
        treatment: The treatment arm's metric, one value per seed.
        control: The control arm's metric, for the same seeds in the same order.
        higher_is_better: Direction the claim predicts (treatment above control if True).
        level: Confidence level of the interval.

    Returns:
        The :class:`PairedResult`.

    Raises:
        ValueError: Arms of different lengths, no seeds, a non-finite value, or a level
            outside (0, 1).
    """
    if len(treatment) != len(control):
        raise ValueError(
            f"paired comparison: treatment has {len(treatment)} seeds, control {len(control)}; "
            "both arms must be measured on the same seeds"
        )
    if not treatment:
        raise ValueError("paired comparison: no seeds")
    if not 0.0 < level < 1.0:
        raise ValueError(f"paired comparison: level must be in (0, 1), got {level}")
    values = [float(v) for v in (*treatment, *control)]
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"paired comparison: non-finite value in {values}")
    t_vals = [float(v) for v in treatment]
    c_vals = [float(v) for v in control]
    diffs = [a - b for a, b in zip(t_vals, c_vals, strict=True)]
    n = len(diffs)
    t_mean, t_std = _mean_std(t_vals)
    c_mean, c_std = _mean_std(c_vals)
    d_mean, d_std = _mean_std(diffs)
    if n < 2:
        low = high = math.nan
    else:
        from scipy.stats import t as student_t

        half = float(student_t.ppf((1.0 + level) / 2.0, n - 1)) * d_std / math.sqrt(n)
        low, high = d_mean - half, d_mean + half
    if n < MIN_SEEDS:
        verdict = TOO_FEW_SEEDS
    elif d_std == 0.0:
        verdict = ZERO_SPREAD
    else:
        better_low, better_high = (low, high) if higher_is_better else (-high, -low)
        if better_low > 0:
            verdict = HOLDS
        elif better_high < 0:
            verdict = REVERSED
        else:
            verdict = NOT_RESOLVED
    return PairedResult(n, t_mean, t_std, c_mean, c_std, d_mean, low, high, level, verdict)


def overall_verdict(verdicts: Sequence[str]) -> str:
    """One verdict for a claim made of several comparisons.

    *holds* only if every comparison holds; *reversed* if any is reversed; otherwise
    *not resolved at this budget*, or the one "not resolved" reason every unresolved
    comparison shares (e.g. all had too few seeds).

    Examples:
        >>> overall_verdict(["holds", "holds"])
        'holds'
        >>> overall_verdict(["holds", "not resolved at this budget"])
        'not resolved at this budget'
    """
    if not verdicts:
        return NOT_RESOLVED
    if any(v == REVERSED for v in verdicts):
        return REVERSED
    if all(v == HOLDS for v in verdicts):
        return HOLDS
    reasons = {v for v in verdicts if v != HOLDS}
    return reasons.pop() if len(reasons) == 1 else NOT_RESOLVED
