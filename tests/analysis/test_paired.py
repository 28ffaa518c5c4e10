"""ebpo.analysis.paired against hand computations (values from scipy.stats.t.ppf)."""

from __future__ import annotations

import math

import pytest

from ebpo.analysis import paired as stats

T_975_DF2 = 4.302652729911275  # scipy.stats.t.ppf(0.975, 2)
T_975_DF4 = 2.7764451051977987  # scipy.stats.t.ppf(0.975, 4)


@pytest.mark.parametrize("scale", [1.0, 1e200, 1e-200])
def test_mean_ci_matches_a_hand_computed_t_interval(scale):
    """At any scale: deviations of 1e200 (squares overflow) or 1e-200 (squares underflow to 0)
    give the interval scaled, the deviations scaled before squaring."""
    result = stats.mean_ci([0.2 * scale, 0.4 * scale, 0.9 * scale])
    sd = math.sqrt(((0.2 - 0.5) ** 2 + (0.4 - 0.5) ** 2 + (0.9 - 0.5) ** 2) / 2)
    assert result["n"] == 3 and result["mean"] == pytest.approx(0.5 * scale)
    assert result["ci"] == pytest.approx(T_975_DF2 * sd / math.sqrt(3) * scale, rel=1e-8, abs=0)


def test_mean_ci_edge_cases():
    one = stats.mean_ci([0.3])
    assert one["mean"] == 0.3 and math.isnan(one["ci"]) and one["n"] == 1
    assert stats.mean_ci([])["n"] == 0 and math.isnan(stats.mean_ci([])["mean"])
    assert stats.mean_ci([0.1, float("nan"), None, 0.3])["n"] == 2
    assert stats.mean_ci([0.4, 0.4])["ci"] == 0.0


def test_paired_difference_by_hand():
    # five seeds; differences 0.02, 0.05, 0.01, 0.04, 0.03: mean 0.03, sd by hand
    method = [0.52, 0.45, 0.41, 0.64, 0.33]
    grpo = [0.50, 0.40, 0.40, 0.60, 0.30]
    d = [0.02, 0.05, 0.01, 0.04, 0.03]
    mean = sum(d) / 5
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / 4)
    half = T_975_DF4 * sd / math.sqrt(5)
    result = stats.paired_difference(method, grpo)
    assert result["n"] == 5
    assert result["mean_diff"] == pytest.approx(0.03)
    assert result["ci_low"] == pytest.approx(mean - half)
    assert result["ci_high"] == pytest.approx(mean + half)
    # pairing matters: the unpaired intervals of these means overlap widely, the paired one excludes 0
    assert result["ci_low"] > 0
    assert stats.mean_ci(method)["mean"] - stats.mean_ci(method)["ci"] < stats.mean_ci(grpo)["mean"]


def test_paired_difference_needs_pairs():
    with pytest.raises(ValueError, match="pair"):
        stats.paired_difference([0.1, 0.2], [0.1])
    one = stats.paired_difference([0.3], [0.1])
    assert one["mean_diff"] == pytest.approx(0.2) and math.isnan(one["ci_low"])


def test_t_quantile_table_and_large_df():
    assert stats.t_quantile_975(2) == pytest.approx(T_975_DF2)
    assert stats.t_quantile_975(4) == pytest.approx(T_975_DF4)
    assert stats.t_quantile_975(40) == pytest.approx(2.0210753903, abs=1e-6)
    assert stats.t_quantile_975(1000) == pytest.approx(1.9623390808, abs=1e-6)
    with pytest.raises(ValueError, match="df"):
        stats.t_quantile_975(0)


def test_steps_to_target_interpolates_between_evaluations():
    assert stats.steps_to_target([0, 25, 50], [0.2, 0.3, 0.5], 0.4) == pytest.approx(37.5)
    assert stats.steps_to_target([0, 25, 50], [0.2, 0.3, 0.5], 0.3) == 25
    assert stats.steps_to_target([0, 25, 50], [0.2, 0.3, 0.5], 0.6) is None
    # already there at the start
    assert stats.steps_to_target([0, 25, 50], [0.5, 0.3, 0.6], 0.4) == 0
    # a missing point is skipped
    assert stats.steps_to_target([0, 25, 50], [0.2, None, 0.6], 0.4) == pytest.approx(25)
    with pytest.raises(ValueError, match="length"):
        stats.steps_to_target([0, 5], [0.1], 0.2)


@pytest.mark.parametrize("df", [1, 2, 3, 4, 5, 9, 10, 29, 30, 31, 100])
@pytest.mark.parametrize("t", [0.0, 0.3, 1.0, 2.0, 2.5, 4.0, 12.0, -2.0])
def test_t_two_sided_p_matches_scipy(t, df):
    scipy_stats = pytest.importorskip("scipy.stats")
    assert stats.t_two_sided_p(t, df) == pytest.approx(2 * scipy_stats.t.sf(abs(t), df), abs=1e-12)


def test_t_two_sided_p_at_the_975_quantile_is_five_percent():
    for df in (1, 2, 7, 30, 45):
        assert stats.t_two_sided_p(stats.t_quantile_975(df), df) == pytest.approx(0.05, abs=1e-6)
    assert stats.t_two_sided_p(math.inf, 3) == 0.0 and math.isnan(stats.t_two_sided_p(math.nan, 3))


def test_holm_by_hand():
    # m = 4: sorted 0.001 <= 0.05/4, 0.012 <= 0.05/3, 0.03 > 0.05/2 stops: 0.04 is not rejected
    # either, although 0.04 <= 0.05/1
    p = [0.03, 0.001, 0.04, 0.012]
    assert stats.holm_rejections(p) == [False, True, False, True]
    assert stats.holm_rejections([0.01, 0.02]) == [True, True]  # 0.01 <= 0.025, 0.02 <= 0.05
    assert stats.holm_rejections([0.01, math.nan]) == [True, False]  # NaN counts in m
    assert stats.holm_rejections([0.03, math.nan]) == [False, False]  # 0.03 > 0.05 / 2
    assert stats.holm_rejections([]) == []
