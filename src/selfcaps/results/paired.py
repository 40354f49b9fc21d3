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
  that cannot move, or too coarse a metric). Differences that agree up to float rounding
  count as the same (:data:`SPREAD_RTOL`): ``[1.3, 2.3, 3.3]`` against ``[1.0, 2.0, 3.0]``
  differ by 0.3 on every seed, though the float subtractions give 0.30000000000000004 and
  0.2999999999999998; their spread is rounding, so it is set to exactly 0 and the interval
  is the single point ``[0.3, 0.3]``, as for any other zero spread;
- *not resolved (too few independent units)*: the seeds are fewer than :data:`MIN_SEEDS`
  independent units for the claim (three finetunings of one pretraining are one unit of a
  claim about pretraining), whatever the interval.

A claim of *no difference* ("Sinkhorn and KL barely differ") is judged against an
equivalence margin ``m`` stated beforehand, in the metric's units, by two one-sided tests
(TOST): *equivalent* only if the whole interval lies inside ``(-m, m)``, otherwise *not
resolved at this budget*; without a margin it gets *not resolved (no equivalence margin)*.
The 95% two-sided interval is used (each one-sided test at 2.5%), stricter than the usual
90% TOST interval.

These are the only words the project uses for a comparison; ``is_not_resolved`` tells the
"not resolved" forms from a verdict. Several comparisons of one paper are a family: with
:func:`holm_adjust` over their :attr:`PairedResult.p_value` and :func:`family_verdict`, a
verdict stands only if it survives Holm's step-down rule at 5% family-wise error.

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
    >>> paired_comparison([1.3, 2.3, 3.3], [1.0, 2.0, 3.0]).verdict
    'not resolved (zero spread)'
    >>> paired_comparison([64.7, 63.3, 64.3], [62.0, 61.9, 62.5], units=1).verdict
    'not resolved (too few independent units)'
    >>> paired_comparison([40.0, 41.0, 42.0], [40.1, 40.9, 42.1], margin=1.0).verdict
    'equivalent'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "EQUIVALENT",
    "FAMILY_ALPHA",
    "HOLDS",
    "MIN_SEEDS",
    "NOT_FAMILY_WISE",
    "NOT_RESOLVED",
    "NO_MARGIN",
    "REVERSED",
    "SIGNED",
    "SPREAD_RTOL",
    "TOO_FEW_SEEDS",
    "TOO_FEW_UNITS",
    "VERDICTS",
    "ZERO_SPREAD",
    "PairedResult",
    "family_verdict",
    "holm_adjust",
    "is_not_resolved",
    "mean_std",
    "overall_verdict",
    "paired_comparison",
]

HOLDS = "holds"
REVERSED = "reversed"
NOT_RESOLVED = "not resolved at this budget"
TOO_FEW_SEEDS = "not resolved (too few seeds)"
ZERO_SPREAD = "not resolved (zero spread)"
TOO_FEW_UNITS = "not resolved (too few independent units)"
EQUIVALENT = "equivalent"
NO_MARGIN = "not resolved (no equivalence margin)"
#: A verdict that did not survive Holm's rule across its paper's comparisons.
NOT_FAMILY_WISE = "not resolved (Holm)"
#: Every verdict a comparison can get (:data:`NOT_FAMILY_WISE` only from :func:`family_verdict`).
VERDICTS = (
    HOLDS, REVERSED, EQUIVALENT, NOT_RESOLVED, TOO_FEW_SEEDS, ZERO_SPREAD, TOO_FEW_UNITS,
    NO_MARGIN, NOT_FAMILY_WISE,
)  # fmt: skip
#: The verdicts that say something either way (the rest are "not resolved").
SIGNED = (HOLDS, REVERSED, EQUIVALENT)
#: Fewer seeds than this give no verdict (the design's rule: "fewer than 3 seeds is no verdict").
MIN_SEEDS = 3
#: Differences whose sample sd is at most this fraction of the largest value in either arm
#: have zero spread: float rounding of a subtraction is about 1e-16 of its operands, and no
#: metric is recorded to 9 significant digits, so anything below is rounding, not noise.
SPREAD_RTOL = 1e-9
#: Family-wise error rate of :func:`family_verdict` (matches the 95% intervals).
FAMILY_ALPHA = 0.05


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
        verdict: One of :data:`VERDICTS` (never :data:`NOT_FAMILY_WISE`).
        p_value: Two-sided p-value of the paired t-test of a difference (of the TOST pair for
            an equivalence claim, doubled so that ``p < 1 - level`` exactly when the interval
            gives a signed verdict); NaN when there is no test (too few seeds or units, zero
            spread, a no-difference claim without a margin).
        units: Independent units behind the seeds (``n`` unless the row says fewer).
        margin: Equivalence margin of a no-difference claim, or None.
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
    p_value: float = math.nan
    units: int = 0
    margin: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """The fields as a flat dict (for CSV rows)."""
        return asdict(self)


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (``n - 1``; NaN for one value).

    Both sums are ``math.fsum``, correctly rounded, so the numbers (and the docs' tables made
    from them) do not depend on the Python version: Python 3.12's built-in ``sum`` of floats
    compensates its rounding and 3.11's does not, which moved a registry mean across a
    rounding boundary (79.755 against 79.75500000000001: "79.75" against "79.76").

    Examples:
        >>> mean_std([80.99, 84.27, 80.08, 85.65, 69.87, 77.67])[0]
        79.755
    """
    n = len(values)
    mean = math.fsum(values) / n
    if n < 2:
        return mean, math.nan
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))


def _spread_is_rounding(d_std: float, values: Sequence[float]) -> bool:
    """Whether a sample sd of differences is float rounding (see :data:`SPREAD_RTOL`)."""
    return d_std <= SPREAD_RTOL * max((abs(v) for v in values), default=0.0)


def _verdict(low: float, high: float, higher_is_better: bool, margin: float | None) -> str:
    """The verdict of an interval that may speak (enough units, non-zero spread)."""
    if margin is not None:
        return EQUIVALENT if -margin < low and high < margin else NOT_RESOLVED
    better_low, better_high = (low, high) if higher_is_better else (-high, -low)
    if better_low > 0:
        return HOLDS
    if better_high < 0:
        return REVERSED
    return NOT_RESOLVED


def _p_value(d_mean: float, se: float, df: int, margin: float | None) -> float:
    """Two-sided t-test p of ``d_mean`` (or the doubled TOST p against ``margin``)."""
    from scipy.stats import t as student_t

    if margin is None:
        return float(min(1.0, 2.0 * student_t.sf(abs(d_mean) / se, df)))
    worst = max(student_t.sf((d_mean + margin) / se, df), student_t.sf((margin - d_mean) / se, df))
    return float(min(1.0, 2.0 * worst))


def paired_comparison(
    treatment: Sequence[float],
    control: Sequence[float],
    higher_is_better: bool = True,
    level: float = 0.95,
    *,
    units: int | None = None,
    no_difference: bool = False,
    margin: float | None = None,
) -> PairedResult:
    """Compare two arms measured on the same seeds (position ``s`` of each list is seed ``s``).

    The interval is ``mean(d) +- t_{(1+level)/2, n-1} * std(d) / sqrt(n)`` over the
    per-seed differences ``d``; it is exact for normally distributed differences and the
    standard choice for a handful of seeds. The interval is computed from two seeds on, but
    the verdict needs :data:`MIN_SEEDS` seeds and a non-zero spread of ``d`` (up to
    :data:`SPREAD_RTOL`). When the seeds are fewer independent units than seeds (``units <
    n``), the interval uses ``units - 1`` degrees of freedom and ``sqrt(units)``: the seeds
    are read as if only ``units`` of them had been drawn, which is conservative; below
    :data:`MIN_SEEDS` units there is no verdict.

    Args:
        treatment: The treatment arm's metric, one value per seed.
        control: The control arm's metric, for the same seeds in the same order.
        higher_is_better: Direction the claim predicts (treatment above control if True).
        level: Confidence level of the interval.
        units: Independent units the seeds are (default: one per seed); at most ``n``.
        no_difference: The claim is that the arms do not differ (no direction).
        margin: Equivalence margin of a no-difference claim (implies ``no_difference``).

    Returns:
        The :class:`PairedResult`.

    Raises:
        ValueError: Arms of different lengths, no seeds, a non-finite value, a level
            outside (0, 1), units outside 1..n or a margin that is not positive.
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
    units = n if units is None else units
    if not 1 <= units <= n:
        raise ValueError(f"paired comparison: units must be in 1..{n} (the seeds), got {units}")
    if margin is not None and not (math.isfinite(margin) and margin > 0):
        raise ValueError(f"paired comparison: the equivalence margin must be > 0, got {margin}")
    t_mean, t_std = mean_std(t_vals)
    c_mean, c_std = mean_std(c_vals)
    d_mean, d_std = mean_std(diffs)
    zero_spread = n >= 2 and _spread_is_rounding(d_std, values)
    if zero_spread:
        d_std = 0.0
    low = high = p = math.nan
    if n >= 2 and units >= 2:
        from scipy.stats import t as student_t

        se = d_std / math.sqrt(units)
        half = float(student_t.ppf((1.0 + level) / 2.0, units - 1)) * se
        low, high = d_mean - half, d_mean + half
    if n < MIN_SEEDS:
        verdict = TOO_FEW_SEEDS
    elif units < MIN_SEEDS:
        verdict = TOO_FEW_UNITS
    elif zero_spread:
        verdict = ZERO_SPREAD
    elif no_difference and margin is None:
        verdict = NO_MARGIN
    else:
        verdict = _verdict(low, high, higher_is_better, margin)
        p = _p_value(d_mean, d_std / math.sqrt(units), units - 1, margin)
    return PairedResult(
        n, t_mean, t_std, c_mean, c_std, d_mean, low, high, level, verdict, p, units, margin
    )


def holm_adjust(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values; NaN (no test) stays NaN and is not counted.

    With the ``m`` finite p-values sorted, ``p_(1) <= ... <= p_(m)``, the adjusted value of
    ``p_(k)`` is ``max_{j <= k} min(1, (m - j + 1) p_(j))``; a comparison whose adjusted
    p is below ``alpha`` is rejected with family-wise error at most ``alpha`` (Holm 1979).

    Examples:
        >>> [round(p, 3) for p in holm_adjust([0.01, 0.04, 0.03])]
        [0.03, 0.06, 0.06]
        >>> holm_adjust([0.2, float("nan")])
        [0.2, nan]
    """
    tested = sorted((p, i) for i, p in enumerate(p_values) if not math.isnan(p))
    m = len(tested)
    out = [math.nan] * len(p_values)
    running = 0.0
    for k, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (m - k) * p))
        out[i] = running
    return out


def family_verdict(result: PairedResult, adjusted_p: float, alpha: float = FAMILY_ALPHA) -> str:
    """``result``'s verdict after Holm's rule across its family.

    A signed verdict whose adjusted p is not below ``alpha`` becomes :data:`NOT_FAMILY_WISE`;
    any other verdict is unchanged.

    Examples:
        >>> r = paired_comparison([92.0, 93.0, 91.5], [89.0, 90.5, 89.0])
        >>> family_verdict(r, 0.01), family_verdict(r, 0.2)
        ('holds', 'not resolved (Holm)')
    """
    if result.verdict in SIGNED and not adjusted_p < alpha:
        return NOT_FAMILY_WISE
    return result.verdict


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
