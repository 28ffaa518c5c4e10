"""ebpo.lab.simulation.specs: specs name variants of ebpo.estimators.VARIANTS, with overrides; the
experiments ask the estimators for their traits, not their names."""

from __future__ import annotations

import pytest

from ebpo.estimators import EBPO, estimator_spec
from ebpo.lab import simulation as sim


def test_parse_estimator_spec():
    assert sim.parse_estimator_spec("ebpo_batch") == (
        "ebpo",
        {"prior": "batch", "prior_mean_from": "group_means"},
    )
    assert sim.parse_estimator_spec("ebpo:prior=ema,half_life=5,per_cluster=true") == (
        "ebpo",
        {"prior": "ema", "half_life": 5, "per_cluster": True},
    )


def test_variant_names_are_those_of_ebpo_estimators():
    for name in (
        "grpo",
        "rloo",
        "reinforce_pp",
        "jspo",
        "ebpo",
        "ebpo_batch",
        "ebpo_ema",
        "ebpo_within",
        "ebpo_center",
        "ebpo_none",
        "ebpo_bb",
        "reinforce_pp_baseline",
    ):
        assert sim.parse_estimator_spec(name) == estimator_spec(name)
    assert sim.parse_estimator_spec("reinforce_pp") == ("reinforce_pp_baseline", {})
    # options after ':' override the variant's
    assert sim.parse_estimator_spec("ebpo_batch:normalize=none,prior=history") == (
        "ebpo",
        {"prior": "history", "prior_mean_from": "group_means", "normalize": "none"},
    )
    est = sim.build_estimator("ebpo_ema:half_life=7.5")
    assert isinstance(est, EBPO) and est.prior == "ema" and est.half_life == 7.5


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: sim.parse_estimator_spec("ebpo:prior"), "expected option=value, got 'prior'"),
        (lambda: sim.parse_estimator_spec(""), "non-empty string"),
        (lambda: sim.build_estimator("ebpo:prior=sometimes"), "prior"),
        (lambda: sim.build_estimator("nope"), r"unknown estimator 'nope'; expected one of"),
        (lambda: sim.build_estimator("grpo:prior=batch"), r"unknown option\(s\) \['prior'\]"),
    ],
)
def test_bad_specs_raise_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_traits():
    for spec in ("ebpo", "ebpo_none", "ebpo_bb", "ebpo:per_cluster=true"):
        assert sim.accepts_normalize(spec) and sim.reports_shrinkage(spec)
    for spec in ("grpo", "dr_grpo", "rloo", "reinforce_pp"):
        assert not sim.accepts_normalize(spec) and not sim.reports_shrinkage(spec)
    assert sim.reports_shrinkage("jspo") and not sim.accepts_normalize("jspo")


def test_with_normalize_overrides_only_estimators_with_the_option():
    assert (
        sim.with_normalize("ebpo_batch", "none")
        == "ebpo:prior=batch,prior_mean_from=group_means,normalize=none"
    )
    assert sim.with_normalize("ebpo:normalize=center", "none") == "ebpo:normalize=none"
    assert sim.with_normalize("grpo", "none") == "grpo"
    assert sim.with_normalize("ebpo_batch", None) == "ebpo_batch"
    assert sim.build_estimator(sim.with_normalize("ebpo_bb", "center")).normalize == "center"
