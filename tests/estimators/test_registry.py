"""make_estimator, estimator_options and register_estimator: names, options and their errors."""

from __future__ import annotations

import pytest

import ebpo


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("nope", {}, "unknown estimator 'nope'"),
        ("ebpo", {"priorr": "history"}, r"unknown option\(s\) \['priorr'\]"),
        ("ebpo", {"prior": "forever"}, "prior must be one of"),
        ("ebpo", {"half_life": 0}, "half_life must be a positive"),
        ("ebpo", {"normalize": "group"}, "normalize must be one of"),
        ("grpo", {"scale": "token"}, "scale must be one of"),
        ("grpo", {"eps": -1.0}, "eps must be a positive"),
        ("ebpo", {"nan_policy": "ignore"}, "nan_policy must be one of"),
        ("ebpo_bb", {"warmup_groups": 0}, "warmup_groups must be a positive integer"),
    ],
)
def test_bad_construction(name, options, message):
    with pytest.raises(ValueError, match=message):
        ebpo.make_estimator(name, **options)


def test_estimator_options_are_the_constructor_keywords_with_their_defaults():
    assert ebpo.estimator_options("grpo") == {"scale": "group", "eps": 1e-6, "nan_policy": "raise"}
    assert ebpo.estimator_options("ebpo_bb")["warmup_groups"] == 8
    with pytest.raises(ValueError, match="unknown estimator 'nope'; expected one of"):
        ebpo.estimator_options("nope")


def test_options_and_repr_follow_the_constructor():
    est = ebpo.make_estimator("jspo", lambda_form="project_page")
    assert repr(est) == "JSPO(lambda_form='project_page', eps=1e-06, nan_policy='raise')"


def test_a_name_is_registered_once():
    with pytest.raises(ValueError, match=r"already registered \(GRPO\)"):
        ebpo.register_estimator("grpo")(type("Other", (ebpo.AdvantageEstimator,), {}))
    assert ebpo.register_estimator("grpo")(ebpo.GRPO) is ebpo.GRPO  # the same class again: no-op
    assert ebpo.make_estimator("grpo").__class__ is ebpo.GRPO
