"""ebpo.lab.simulation.sweeps: the learning rate is chosen on validation seeds only; the prior study
applies its normalize override to the estimators that have the option."""

from __future__ import annotations

import math

import pytest

from ebpo.lab import simulation as sim
from tests.lab.simulation.helpers import SMALL


def test_learning_rate_study_chooses_on_validation_seeds():
    study = sim.learning_rate_study(
        SMALL,
        estimators=("grpo", "dr_grpo"),
        group_sizes=(4,),
        learning_rates=(10.0, 100.0, 1000.0),
        steps=8,
        validation_seeds=(100,),
        report_seeds=(0, 1),
    )
    for (spec, g), lr in study["best_lr"].items():
        val = [
            r
            for r in study["rows"]
            if r["split"] == "validation" and r["estimator"] == spec and r["G"] == g
        ]
        assert len(val) == 3 and lr == max(val, key=lambda r: r["final"])["lr"]
        assert (spec, g, lr) in study["curves"] and study["curves"][(spec, g, lr)].shape == (2, 9)
        assert (spec, g, 100.0) in study["curves"]  # equal-lr table
    with pytest.raises(ValueError, match="disjoint"):
        sim.learning_rate_study(
            SMALL,
            estimators=("grpo",),
            group_sizes=(4,),
            learning_rates=(1.0,),
            steps=2,
            validation_seeds=(0,),
            report_seeds=(0,),
        )


def test_prior_study_rows_and_normalize_override():
    variants = (("grpo", "grpo", "shuffled"), ("ebpo batch / topic", "ebpo_batch", "topic"))
    study = sim.prior_study(
        SMALL,
        variants=variants,
        learning_rates=(100.0,),
        steps=6,
        validation_seeds=(9,),
        report_seeds=(0, 1),
        normalize="none",
    )
    rows = {r["variant"]: r for r in study["rows"]}
    assert rows["grpo"]["estimator"] == "grpo" and math.isnan(rows["grpo"]["prior_error"])
    assert sim.parse_estimator_spec(rows["ebpo batch / topic"]["estimator"]) == (
        "ebpo",
        {"prior": "batch", "prior_mean_from": "group_means", "normalize": "none"},
    )
    assert rows["ebpo batch / topic"]["prior_error"] >= 0
    assert study["curves"]["grpo"]["train_acc"].shape == (2, 7)


def test_prior_study_default_variants_are_the_paper_s_priors():
    """The default study writes its EMA prior's half-life (3 steps) explicitly: it does not depend
    on the ``ebpo_ema`` variant's default."""
    specs = {spec for _, spec, _ in sim.PRIOR_VARIANTS}
    assert "ebpo:prior=ema,half_life=3" in specs and "ebpo_ema" not in specs
    assert {order for _, _, order in sim.PRIOR_VARIANTS} == {"shuffled", "topic"}
