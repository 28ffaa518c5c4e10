"""ebpo.lab.simulation.saturation: the signal of all-zero groups (Theorem 3.2, Corollary 3.5) and
what batch normalisation does to it."""

from __future__ import annotations

import math

import pytest

from ebpo.lab import simulation as sim
from tests.lab.simulation.helpers import one_row


@pytest.fixture(scope="module")
def saturation_rows():
    return sim.saturation(
        scenarios={k: sim.SCENARIOS[k] for k in ("easy", "hard")},
        estimators=("grpo", "rloo", "reinforce_pp", "ebpo", "ebpo_center", "ebpo_none"),
        steps=5,
        prompts_per_step=128,
        seed=0,
    )


def test_grpo_gives_no_signal_to_all_zero_groups_and_ebpo_does(saturation_rows):
    for scenario in ("easy", "hard"):
        for name in ("grpo", "rloo", "reinforce_pp"):
            r = one_row(saturation_rows, scenario=scenario, estimator=name)
            assert (
                r["failed_frac"] > 0 and r["failed_signal_frac"] == 0.0 and r["failed_adv"] == 0.0
            )
        for name in ("ebpo", "ebpo_center", "ebpo_none"):
            r = one_row(saturation_rows, scenario=scenario, estimator=name)
            assert r["failed_signal_frac"] == 1.0 and r["failed_adv"] < 0


def test_penalty_matches_theorem_3_2_and_centring_turns_it_into_batch_mean(saturation_rows):
    for scenario in ("easy", "hard"):
        raw = one_row(saturation_rows, scenario=scenario, estimator="ebpo_none")
        assert raw["failed_adv"] == pytest.approx(raw["predicted_raw"], abs=1e-9)  # −S·μ_glob
        centred = one_row(saturation_rows, scenario=scenario, estimator="ebpo_center")
        assert centred["failed_adv"] == pytest.approx(
            centred["predicted_centred"], abs=1e-9
        )  # −S·r̄_batch
    # Corollary 3.5: failing on an easy distribution is punished harder.
    easy = one_row(saturation_rows, scenario="easy", estimator="ebpo_none")["failed_adv"]
    hard = one_row(saturation_rows, scenario="hard", estimator="ebpo_none")["failed_adv"]
    assert easy < 2 * hard < 0


def test_batch_normalisation_removes_the_penalty_when_the_whole_batch_fails(saturation_rows):
    for scenario in ("easy", "hard"):
        for name in ("ebpo", "ebpo_center"):
            assert (
                one_row(saturation_rows, scenario=scenario, estimator=name)["allfail_signal_frac"]
                == 0.0
            )
        none = one_row(saturation_rows, scenario=scenario, estimator="ebpo_none")
        assert none["allfail_signal_frac"] == 1.0 and none["allfail_adv"] < 0


def test_penalty_curve_grows_with_mean_success_corollary_3_5():
    rows = sim.penalty_curve(means=(0.1, 0.5, 0.9), steps=3, prompts_per_step=128, seed=0)
    for r in rows:
        assert r["raw"] == pytest.approx(r["predicted_raw"], abs=1e-9)
    raw = [r["raw"] for r in rows]
    normalised = [r["normalised"] for r in rows]
    assert raw[0] > raw[1] > raw[2] and normalised[0] > normalised[1] > normalised[2]


def test_theorem_3_2_prediction_is_given_for_ebpo_itself_only(saturation_rows):
    for r in saturation_rows:
        predicted = (r["predicted_raw"], r["predicted_centred"])
        if r["estimator"] in ("ebpo", "ebpo_center", "ebpo_none"):
            assert all(math.isfinite(p) for p in predicted), r
        else:
            assert all(math.isnan(p) for p in predicted), r
    bb = sim.saturation(
        scenarios={"hard": sim.SCENARIOS["hard"]},
        estimators=("ebpo_bb",),
        steps=2,
        prompts_per_step=32,
    )
    assert math.isnan(bb[0]["predicted_raw"]) and math.isnan(bb[0]["predicted_centred"])


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: sim.saturation(group_size=1), "group_size"),
        (lambda: sim.penalty_curve(means=(0.0, 0.5)), "means must lie strictly between 0 and 1"),
        (lambda: sim.penalty_curve(concentration=0), "concentration must be a positive number"),
    ],
)
def test_saturation_rejects_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
