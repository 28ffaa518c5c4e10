"""EBPOConfig validation and the presets (no training: fast)."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

import ebpo  # noqa: E402
from ebpo.integrations.trl import PRESETS, EBPOConfig, available_presets, make_config  # noqa: E402

pytestmark = pytest.mark.trl

CPU = {"use_cpu": True, "bf16": False, "report_to": "none"}


def config(**kwargs) -> EBPOConfig:
    return EBPOConfig(output_dir="unused", **{**CPU, **kwargs})


def test_presets_are_the_papers_methods():
    assert set(PRESETS) == {
        "grpo",
        "dr_grpo",
        "dapo",
        "entropy_mech",
        "rloo",
        "jspo",
        "ebpo",
        "ebpo_bb",
        "ebpo_batch",
    }
    for name, overrides in PRESETS.items():
        assert overrides["advantage_estimator"] in ebpo.available_estimators(), name
    # every estimator is reachable by name too
    assert set(ebpo.available_estimators()) <= set(available_presets())


def test_estimator_help_names_every_registered_estimator():
    import dataclasses

    (field,) = [f for f in dataclasses.fields(EBPOConfig) if f.name == "advantage_estimator"]
    listed = field.metadata["help"].split("One of the estimators ")[1].split(" (a name such")[0]
    assert listed.split(", ") == [repr(name) for name in ebpo.available_estimators()]
    assert "'jspo_plus_plus'" in listed


def test_make_config_applies_preset_then_overrides():
    dapo = make_config("dapo", output_dir="unused", **CPU)
    assert isinstance(dapo, EBPOConfig)
    assert dapo.advantage_estimator == "grpo"
    assert dapo.epsilon == 0.2 and dapo.epsilon_high == 0.28
    assert dapo.loss_type == "dapo" and dapo.beta == 0.0
    assert dapo.filter_zero_variance_groups is True
    assert dapo.overlong_buffer_ratio == 0.5 and dapo.overlong_penalty_factor == 1.0

    entropy = make_config("entropy_mech", output_dir="unused", **CPU)
    assert (entropy.clip_cov_ratio, entropy.clip_cov_lb, entropy.clip_cov_ub) == (2e-4, 1.0, 5.0)
    assert entropy.beta == 0.0 and entropy.advantage_estimator == "grpo"

    dr = make_config("dr_grpo", output_dir="unused", **CPU)
    assert dr.loss_type == "dr_grpo" and dr.advantage_estimator == "dr_grpo"

    ours = make_config(
        "ebpo", output_dir="unused", beta=0.0, estimator_options={"prior": "ema"}, **CPU
    )
    assert ours.advantage_estimator == "ebpo" and ours.beta == 0.0 and ours.loss_type == "dapo"
    assert ours.estimator_kwargs == {"nan_policy": "mask", "prior": "ema"}

    bare = make_config("reinforce_pp_baseline", output_dir="unused", **CPU)
    assert bare.advantage_estimator == "reinforce_pp_baseline"


def test_make_config_unknown_preset_lists_choices():
    with pytest.raises(ValueError, match="unknown preset 'nope'") as info:
        make_config("nope", output_dir="unused", **CPU)
    assert "entropy_mech" in str(info.value) and "reinforce_pp_baseline" in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"advantage_estimator": "ppo"}, "unknown advantage_estimator 'ppo'"),
        ({"estimator_options": {"shrink": 1}}, "unknown option"),
        ({"estimator_options": {"prior": "forever"}}, "prior must be one of"),
        ({"estimator_options": "{not json"}, "estimator_options must be a dict or a JSON"),
        ({"num_generations": 1}, "num_generations must be at least 2"),
        ({"data_order": "random"}, "data_order must be one of"),
        ({"clip_cov_ratio": -0.1}, "clip_cov_ratio"),
        ({"clip_cov_lb": 5.0, "clip_cov_ub": 1.0}, "clip_cov_lb"),
        (
            {"clip_cov_ratio": 2e-4, "importance_sampling_level": "sequence"},
            "importance_sampling_level",
        ),
        ({"overlong_buffer_ratio": 1.0}, "overlong_buffer_ratio"),
        ({"overlong_penalty_factor": float("nan")}, "overlong_penalty_factor"),
        ({"cluster_column": ""}, "cluster_column"),
        ({"estimator_options": {"per_cluster": True}}, "cluster_column"),
        ({"multi_objective_aggregation": "mean"}, "multi_objective_aggregation must be one of"),
        ({"filter_groups_metric": "acc"}, "filter_groups_metric must be one of"),
        ({"scale_rewards": "std"}, "scale_rewards must be one of"),
        (
            {
                "advantage_estimator": "grpo",
                "scale_rewards": "batch",
                "estimator_options": {"scale": "group"},
            },
            "scale_rewards='batch' .* and estimator_options {'scale': 'group'} disagree",
        ),
    ],
)
def test_bad_options_raise_value_error_naming_them(kwargs, match):
    with pytest.raises(ValueError, match=match):
        config(**kwargs)


def test_estimator_options_accept_json_and_curriculum_turns_shuffle_off():
    cfg = config(estimator_options='{"prior": "ema", "half_life": 20}', data_order="topic")
    assert cfg.estimator_options == {"prior": "ema", "half_life": 20}
    assert cfg.shuffle_dataset is False
    assert config().shuffle_dataset is True


def test_normalize_then_sum_is_accepted():
    assert (
        config(multi_objective_aggregation="normalize_then_sum").multi_objective_aggregation
        == "normalize_then_sum"
    )


@pytest.mark.parametrize(
    ("value", "scale"),
    [("group", "group"), ("batch", "batch"), ("none", "none"), (True, "group"), (False, "none")],
)
@pytest.mark.parametrize("estimator", ["grpo", "dr_grpo"])
def test_scale_rewards_becomes_the_scale_of_estimators_that_have_one(value, scale, estimator):
    cfg = config(advantage_estimator=estimator, scale_rewards=value)
    assert cfg.scale_rewards == scale
    # TRL's GRPO divides by std + 1e-4 (verl's: 1e-6)
    assert cfg.estimator_kwargs == {"nan_policy": "mask", "eps": 1e-4, "scale": scale}
    assert ebpo.make_estimator(estimator, **cfg.estimator_kwargs).scale == scale


def test_scale_rewards_unset_leaves_the_estimator_alone():
    assert config(advantage_estimator="dr_grpo").estimator_kwargs == {
        "nan_policy": "mask",
        "eps": 1e-4,
    }
    assert config().scale_rewards is None
    assert config().estimator_kwargs == {"nan_policy": "mask"}


def test_every_preset_builds_a_valid_config():
    for name in PRESETS:
        cfg = make_config(name, output_dir="unused", **CPU)
        ebpo.make_estimator(cfg.advantage_estimator, **cfg.estimator_kwargs)


def test_ebpo_keeps_the_papers_history_prior_and_ebpo_batch_is_the_authors_code():
    history = ebpo.make_estimator(
        "ebpo", **make_config("ebpo", output_dir="unused", **CPU).estimator_kwargs
    )
    assert (history.prior, history.prior_mean_from) == ("history", "rewards")
    batch_cfg = make_config("ebpo_batch", output_dir="unused", **CPU)
    batch = ebpo.make_estimator(batch_cfg.advantage_estimator, **batch_cfg.estimator_kwargs)
    assert (batch.prior, batch.prior_mean_from) == ("batch", "group_means")


def test_make_config_merges_estimator_options_into_the_presets():
    cfg = make_config(
        "ebpo_batch", output_dir="unused", estimator_options='{"normalize": "center"}', **CPU
    )
    assert cfg.estimator_options == {
        "prior": "batch",
        "prior_mean_from": "group_means",
        "normalize": "center",
    }
    cfg = make_config(
        "ebpo_batch", output_dir="unused", estimator_options={"prior": "history"}, **CPU
    )
    assert cfg.estimator_options == {"prior": "history", "prior_mean_from": "group_means"}
    assert (
        make_config("ebpo", output_dir="unused", estimator_options=None, **CPU).estimator_options
        == {}
    )


def test_estimator_options_none_keeps_the_options_of_the_preset():
    """What ``ebpo train`` passes when no options are given: the preset's own must stay (they were
    erased, so that the ebpo_batch preset trained the history prior)."""
    cfg = make_config("ebpo_batch", output_dir="unused", estimator_options=None, **CPU)
    assert cfg.estimator_options == {"prior": "batch", "prior_mean_from": "group_means"}
    cfg = make_config("ebpo_ema", output_dir="unused", estimator_options=None, **CPU)
    assert cfg.estimator_options == {"prior": "ema", "half_life": 20.0}


def test_presets_keep_their_trainer_settings_and_take_the_estimator_from_the_variants():
    common = {"loss_type": "dapo", "beta": 0.001, "epsilon": 0.2}
    assert {
        "grpo": {**common, "advantage_estimator": "grpo"},
        "dr_grpo": {
            **common,
            "advantage_estimator": "dr_grpo",
            "loss_type": "dr_grpo",
            "scale_rewards": "none",
        },
        "dapo": {
            **common,
            "advantage_estimator": "grpo",
            "beta": 0.0,
            "epsilon_high": 0.28,
            "overlong_buffer_ratio": 0.5,
            "overlong_penalty_factor": 1.0,
            "filter_zero_variance_groups": True,
        },
        "entropy_mech": {
            **common,
            "advantage_estimator": "grpo",
            "beta": 0.0,
            "clip_cov_ratio": 2e-4,
            "clip_cov_lb": 1.0,
            "clip_cov_ub": 5.0,
        },
        "rloo": {**common, "advantage_estimator": "rloo"},
        "jspo": {**common, "advantage_estimator": "jspo"},
        "ebpo": {**common, "advantage_estimator": "ebpo"},
        "ebpo_bb": {**common, "advantage_estimator": "ebpo_bb"},
        "ebpo_batch": {
            **common,
            "advantage_estimator": "ebpo",
            "estimator_options": {"prior": "batch", "prior_mean_from": "group_means"},
        },
    } == PRESETS


def test_any_variant_is_a_preset_with_the_paper_common_settings():
    cfg = make_config("ebpo_within", output_dir="unused", **CPU)
    assert (cfg.loss_type, cfg.beta, cfg.epsilon) == ("dapo", 0.001, 0.2)
    assert cfg.advantage_estimator == "ebpo"
    assert cfg.estimator_options == {"within_variance": "within", "tau2_mode": "corrected"}
    assert "ebpo_within" in available_presets() and "reinforce_pp_baseline" in available_presets()
    with pytest.raises(ValueError, match="cluster_column"):  # ebpo_cluster reads clusters
        make_config("ebpo_cluster", output_dir="unused", **CPU)
