"""Paired comparisons against hand-computed values and the published t table."""

import math

import pytest

from selfcaps.eval.paired import (
    HOLDS,
    NOT_RESOLVED,
    REVERSED,
    TOO_FEW_SEEDS,
    ZERO_SPREAD,
    is_not_resolved,
    overall_verdict,
    paired_comparison,
)

T_975_DF2 = 4.303  # Student t, two-sided 95%, 2 degrees of freedom (printed tables)
T_975_DF4 = 2.776


def test_three_seeds_against_a_hand_computation():
    r = paired_comparison([92.0, 93.0, 91.5], [89.0, 90.5, 89.0])
    # differences 3.0, 2.5, 2.5: mean 8/3, sample sd sqrt(1/12)
    assert r.n == 3
    assert r.diff_mean == pytest.approx(8 / 3)
    half = T_975_DF2 * math.sqrt(1 / 12) / math.sqrt(3)
    assert r.diff_low == pytest.approx(8 / 3 - half, abs=2e-3)
    assert r.diff_high == pytest.approx(8 / 3 + half, abs=2e-3)
    assert r.treatment_mean == pytest.approx(92.1666667)
    assert r.treatment_std == pytest.approx(
        math.sqrt(((-1 / 6) ** 2 + (5 / 6) ** 2 + (2 / 3) ** 2) / 2)
    )
    assert r.control_std == pytest.approx(math.sqrt(0.75))
    assert r.verdict == HOLDS


def test_pairing_is_by_seed_not_by_arm_means():
    # Arm means overlap widely, but every seed moves the same way by 1: a paired test resolves it.
    t = [50.0, 60.0, 70.0, 80.0, 90.0]
    c = [49.0, 59.2, 68.8, 79.1, 88.9]
    r = paired_comparison(t, c)
    d = [a - b for a, b in zip(t, c)]
    mean = sum(d) / 5
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / 4)
    assert r.diff_low == pytest.approx(mean - T_975_DF4 * sd / math.sqrt(5), abs=1e-3)
    assert r.verdict == HOLDS


def test_reversed_and_unresolved_and_direction():
    assert paired_comparison([1.0, 2.0, 1.5], [3.0, 4.0, 3.2]).verdict == REVERSED
    assert paired_comparison([1.0, 3.0, 2.0], [2.0, 2.0, 2.1]).verdict == NOT_RESOLVED
    # lower is better (an error rate): the same numbers flip the verdict
    assert (
        paired_comparison([1.0, 2.0, 1.5], [3.0, 4.0, 3.2], higher_is_better=False).verdict == HOLDS
    )


def test_lower_is_better_straddling_zero_is_not_resolved():
    # differences -2, +1, -0.5: mean -0.5, the interval contains 0 in either direction
    r = paired_comparison([10.0, 13.0, 11.5], [12.0, 12.0, 12.0], higher_is_better=False)
    assert r.diff_low < 0 < r.diff_high
    assert r.verdict == NOT_RESOLVED


def test_two_seeds_give_an_interval_but_no_verdict():
    # Both seeds improve by 3.0 and 3.1 points: the t interval (12.71 x sd / sqrt 2) excludes
    # 0, yet two seeds are below the design's minimum of three.
    r = paired_comparison([52.0, 53.1], [49.0, 50.0])
    half = 12.706 * math.sqrt(0.005) / math.sqrt(2)
    assert r.diff_low == pytest.approx(3.05 - half, abs=2e-3)
    assert r.diff_low > 0
    assert r.verdict == TOO_FEW_SEEDS
    assert is_not_resolved(r.verdict)


def test_zero_spread_is_not_a_verdict():
    # The review's example: two identical differences gave a zero-width interval and "holds".
    assert paired_comparison([2, 2], [1, 1]).verdict == TOO_FEW_SEEDS
    r = paired_comparison([2.0, 2.0, 2.0], [1.0, 1.0, 1.0])
    assert r.diff_low == r.diff_high == 1.0
    assert r.verdict == ZERO_SPREAD
    # PoE's "1 class vs 1 class" on every seed: no difference, no spread
    assert paired_comparison([1.0] * 3, [1.0] * 3).verdict == ZERO_SPREAD


def test_one_seed_is_never_a_verdict():
    r = paired_comparison([99.0], [1.0])
    assert r.verdict == TOO_FEW_SEEDS
    assert math.isnan(r.diff_low) and math.isnan(r.treatment_std)
    assert r.diff_mean == 98.0


@pytest.mark.parametrize(
    ("t", "c", "match"),
    [
        ([1.0, 2.0], [1.0], "same seeds"),
        ([], [], "no seeds"),
        ([1.0, math.nan], [1.0, 2.0], "non-finite"),
    ],
)
def test_bad_input_is_refused(t, c, match):
    with pytest.raises(ValueError, match=match):
        paired_comparison(t, c)


def test_overall_verdict():
    assert overall_verdict([HOLDS, HOLDS]) == HOLDS
    assert overall_verdict([HOLDS, REVERSED]) == REVERSED
    assert overall_verdict([HOLDS, NOT_RESOLVED]) == NOT_RESOLVED
    assert overall_verdict([]) == NOT_RESOLVED
    assert overall_verdict([TOO_FEW_SEEDS, TOO_FEW_SEEDS]) == TOO_FEW_SEEDS
    assert overall_verdict([HOLDS, TOO_FEW_SEEDS]) == TOO_FEW_SEEDS
    assert overall_verdict([TOO_FEW_SEEDS, ZERO_SPREAD]) == NOT_RESOLVED
