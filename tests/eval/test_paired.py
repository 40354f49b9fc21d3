"""Paired comparisons against hand-computed values and the published t table."""

import math

import pytest

from selfcaps.results.paired import (
    EQUIVALENT,
    HOLDS,
    NO_MARGIN,
    NOT_FAMILY_WISE,
    NOT_RESOLVED,
    REVERSED,
    TOO_FEW_SEEDS,
    TOO_FEW_UNITS,
    ZERO_SPREAD,
    family_verdict,
    holm_adjust,
    is_not_resolved,
    mean_std,
    overall_verdict,
    paired_comparison,
)

T_975_DF2 = 4.303  # Student t, two-sided 95%, 2 degrees of freedom (printed tables)
T_975_DF4 = 2.776


def test_mean_std_is_the_exact_mean_whatever_the_order_of_the_values():
    """The registry row whose mean Python 3.11's ``sum`` put at 79.75500000000001 (rendered
    79.76) and 3.12's at 79.755 (79.75): the exact mean, by fractions, in every order."""
    import itertools
    from fractions import Fraction

    values = [80.99, 84.27, 80.08, 85.65, 69.87, 77.67]
    exact = sum(map(Fraction, values)) / 6
    exact_var = sum((Fraction(v) - exact) ** 2 for v in values) / 5
    results = {mean_std(list(order)) for order in itertools.permutations(values)}
    assert len(results) == 1
    ((mean, sd),) = results
    assert mean == float(exact) == 79.755
    assert sd == pytest.approx(math.sqrt(float(exact_var)), rel=1e-15)
    assert math.isnan(mean_std([3.0])[1]) and mean_std([3.0])[0] == 3.0


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


def test_differences_equal_up_to_float_rounding_have_zero_spread():
    # 1.3 - 1.0, 2.3 - 2.0 and 3.3 - 3.0 are all 0.3; in floats they are 0.30000000000000004,
    # 0.2999999999999998 and 0.2999999999999998, whose sd (~1.3e-16) is rounding, not noise.
    r = paired_comparison([1.3, 2.3, 3.3], [1.0, 2.0, 3.0])
    assert r.verdict == ZERO_SPREAD
    assert r.diff_mean == pytest.approx(0.3)
    # the sd is set to exactly 0, as for a genuine zero spread: a one-point interval, no test
    assert r.diff_low == r.diff_high == r.diff_mean
    assert math.isnan(r.p_value)


def test_a_real_spread_far_below_the_metric_is_not_taken_for_rounding():
    # differences 0.3, 0.3, 0.3001: sd 5.8e-5, ten thousand times above the tolerance
    r = paired_comparison([1.3, 2.3, 3.3001], [1.0, 2.0, 3.0])
    assert r.verdict == HOLDS
    assert r.diff_high - r.diff_low > 1e-4


def test_the_p_value_is_the_paired_t_test_by_hand():
    # d = 3, 2.5, 2.5: mean 8/3, sd sqrt(1/12), se 1/6, t = 16 with 2 degrees of freedom,
    # whose two-sided p is 1 - t / sqrt(2 + t^2) (the t(2) distribution in closed form)
    r = paired_comparison([92.0, 93.0, 91.5], [89.0, 90.5, 89.0])
    assert r.p_value == pytest.approx(1 - 16 / math.sqrt(258))
    assert r.units == 3 and r.margin is None


def test_seeds_of_one_unit_give_no_verdict_and_fewer_units_widen_the_interval():
    # three finetunings of one pretraining: one unit of a pretraining claim
    r = paired_comparison([64.69, 63.26, 64.27], [61.95, 61.91, 62.46], units=1)
    assert r.verdict == TOO_FEW_UNITS
    assert math.isnan(r.diff_low) and math.isnan(r.p_value)
    # six seeds that are three units: t(0.975, 2) and sqrt(3), not t(0.975, 5) and sqrt(6)
    t = [3.0, 2.0, 4.0, 3.0, 2.0, 4.0]
    c = [0.0] * 6
    r = paired_comparison(t, c, units=3)
    sd = math.sqrt(sum((x - 3.0) ** 2 for x in t) / 5)  # 0.894
    assert r.diff_low == pytest.approx(3.0 - T_975_DF2 * sd / math.sqrt(3), abs=2e-3)
    assert r.verdict == HOLDS and r.n == 6 and r.units == 3


def test_a_no_difference_claim_needs_a_margin_and_an_interval_inside_it():
    # d = -0.1, +0.1, -0.1: mean -1/30, sd sqrt(1/75), se 1/15; half-width 4.303/15 = 0.287,
    # so the interval is [-0.320, +0.254]
    t, c = [40.0, 41.0, 42.0], [40.1, 40.9, 42.1]
    r = paired_comparison(t, c, margin=1.0)
    assert r.diff_low == pytest.approx(-1 / 30 - T_975_DF2 / 15, abs=1e-3)
    assert r.verdict == EQUIVALENT
    # TOST: the worse one-sided t is (mean + m) / se = 14.5; doubled p = 1 - x / sqrt(2 + x^2)
    assert r.p_value == pytest.approx(1 - 14.5 / math.sqrt(2 + 14.5**2))
    assert paired_comparison(t, c, margin=0.3).verdict == NOT_RESOLVED  # -0.320 is outside
    r = paired_comparison(t, c, no_difference=True)
    assert r.verdict == NO_MARGIN and math.isnan(r.p_value)
    # a difference far outside the margin is not resolved either (no signed verdict)
    assert paired_comparison([1.0, 2.0, 1.5], [3.0, 4.0, 3.2], margin=0.5).verdict == NOT_RESOLVED


@pytest.mark.parametrize(
    "kwargs, match",
    [({"units": 0}, "units must be in 1..3"), ({"units": 4}, "units must be in 1..3"),
     ({"margin": 0.0}, "margin must be > 0"), ({"margin": -1.0}, "margin must be > 0")],
)  # fmt: skip
def test_bad_units_or_margin_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        paired_comparison([1.0, 2.0, 3.0], [0.0, 0.0, 0.5], **kwargs)


def test_holm_by_hand():
    # sorted 0.01, 0.03, 0.04 times 3, 2, 1: 0.03, 0.06, 0.04 -> monotone 0.03, 0.06, 0.06
    assert holm_adjust([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    # a comparison without a test is neither adjusted nor counted in m
    adjusted = holm_adjust([0.02, math.nan, 0.5])
    assert adjusted[0] == pytest.approx(0.04) and adjusted[2] == pytest.approx(0.5)
    assert math.isnan(adjusted[1])
    # 0.8 x 2 = 1.6 is capped at 1, and 0.9 x 1 below it is raised to 1 (monotone)
    assert holm_adjust([0.9, 0.8]) == pytest.approx([1.0, 1.0])
    assert holm_adjust([0.3, 0.2]) == pytest.approx([0.4, 0.4])


def test_the_family_verdict_keeps_only_what_survives_holm():
    r = paired_comparison([92.0, 93.0, 91.5], [89.0, 90.5, 89.0])  # p = 0.0039
    assert family_verdict(r, holm_adjust([r.p_value] * 10)[0]) == HOLDS  # 0.039 < 0.05
    assert family_verdict(r, holm_adjust([r.p_value] * 20)[0]) == NOT_FAMILY_WISE  # 0.078
    unresolved = paired_comparison([1.0, 3.0, 2.0], [2.0, 2.0, 2.1])
    assert family_verdict(unresolved, 1.0) == NOT_RESOLVED
