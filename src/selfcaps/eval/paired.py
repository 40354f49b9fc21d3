"""Paired, seeded comparisons: treatment vs control over the same seeds, with a verdict.

A claim such as "sparse capsules generalise better than dense ones" is tested by
running both arms with the same data, budget and seeds, and looking at the
per-seed differences ``d_s = treatment_s - control_s``. Their mean and a
Student-t confidence interval (``n - 1`` degrees of freedom) decide the verdict:

- *holds*: the whole interval lies on the side the claim predicts;
- *reversed*: the whole interval lies on the other side;
- *not resolved at this budget*: the interval contains 0, or there are fewer than two seeds.

Examples:
    >>> r = paired_comparison([92.0, 93.0, 91.5], [89.0, 90.5, 89.0])
    >>> r.verdict, round(r.diff_mean, 3)
    ('holds', 2.667)
    >>> paired_comparison([50.0, 48.0], [49.0, 50.0]).verdict
    'not resolved at this budget'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "HOLDS",
    "NOT_RESOLVED",
    "REVERSED",
    "PairedResult",
    "overall_verdict",
    "paired_comparison",
]

HOLDS = "holds"
REVERSED = "reversed"
NOT_RESOLVED = "not resolved at this budget"


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
        verdict: ``holds``, ``reversed`` or ``not resolved at this budget``.
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
    standard choice for a handful of seeds.

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
        verdict = NOT_RESOLVED
    else:
        from scipy.stats import t as student_t

        half = float(student_t.ppf((1.0 + level) / 2.0, n - 1)) * d_std / math.sqrt(n)
        low, high = d_mean - half, d_mean + half
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
    *not resolved at this budget*.

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
    return NOT_RESOLVED
