"""TRL's settings → the estimator (``ebpo.integrations.trl.estimator_settings``): variant names,
TRL's eps for its GRPO, ``scale_rewards`` mapped to the option that means the same or refused in
one line naming both settings — never a warning followed by another algorithm (no training: fast)."""

from __future__ import annotations

import warnings

import pytest
import torch

pytest.importorskip("trl")

import ebpo  # noqa: E402
from ebpo.estimators import available_estimators, estimator_spec  # noqa: E402
from ebpo.integrations.trl import PRESETS, EBPOConfig  # noqa: E402
from ebpo.integrations.trl.estimator_settings import TRAINER_PRESETS, TRL_GRPO_EPS  # noqa: E402

pytestmark = pytest.mark.trl

CPU = {"use_cpu": True, "bf16": False, "report_to": "none"}


def config(**kwargs) -> EBPOConfig:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning is never the answer to a setting
        return EBPOConfig(output_dir="unused", **{**CPU, **kwargs})


@pytest.mark.parametrize("name", available_estimators())
def test_every_estimator_name_is_an_advantage_estimator(name):
    cfg = config(advantage_estimator=name, cluster_column="topic")
    estimator, options = estimator_spec(name)
    assert (cfg.advantage_estimator, cfg.estimator_options) == (estimator, options)
    built = ebpo.make_estimator(cfg.advantage_estimator, **cfg.estimator_kwargs)
    for key, value in options.items():
        assert getattr(built, key) == value


def test_options_given_with_a_variant_win_key_by_key():
    cfg = config(advantage_estimator="ebpo_batch", estimator_options={"prior_mean_from": "rewards"})
    assert cfg.estimator_options == {"prior": "batch", "prior_mean_from": "rewards"}
    # parsing a resolved config again changes nothing (TRL and transformers copy configs)
    again = config(
        advantage_estimator=cfg.advantage_estimator, estimator_options=cfg.estimator_options
    )
    assert again.estimator_kwargs == cfg.estimator_kwargs


@pytest.mark.parametrize("name", TRAINER_PRESETS)
def test_a_preset_that_sets_the_trainer_is_refused_with_the_flags_that_write_it_out(name):
    assert set(TRAINER_PRESETS) == {"dapo", "entropy_mech"}
    with pytest.raises(ValueError) as info:
        config(advantage_estimator=name)
    message = str(info.value)
    assert "\n" not in message and f"advantage_estimator {name!r} is a paper preset" in message
    for key, value in PRESETS[name].items():
        shown = str(value).lower() if isinstance(value, bool) else str(value)
        assert f"--{key} {shown}" in message


def test_an_unknown_name_lists_estimators_and_presets_and_how_to_bring_ones_own():
    with pytest.raises(ValueError) as info:
        config(advantage_estimator="ebpo_wthin")
    message = str(info.value)
    assert "unknown advantage_estimator 'ebpo_wthin'" in message
    for name in [*ebpo.available_estimators(), "ebpo_within", "ebpo_batch", *TRAINER_PRESETS]:
        assert repr(name) in message
    assert "estimator_module" in message


@pytest.mark.parametrize("estimator", ["grpo", "dr_grpo"])
def test_trls_grpo_divides_by_trls_eps(estimator):
    assert config(advantage_estimator=estimator).estimator_kwargs["eps"] == TRL_GRPO_EPS == 1e-4
    # an eps the user gives wins; verl's convention stays the core's default
    assert (
        config(advantage_estimator=estimator, estimator_options={"eps": 1e-6}).estimator_kwargs[
            "eps"
        ]
        == 1e-6
    )
    assert ebpo.estimator_options(estimator)["eps"] == 1e-6


def test_the_grpo_estimator_with_trls_eps_is_trls_formula():
    """(r − group mean) / (group std + 1e-4), TRL's expression, on uneven 0/1 groups."""
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    grouped = rewards.view(-1, 4)
    for scale in ("group", "batch", "none"):
        cfg = config(advantage_estimator="grpo", scale_rewards=scale)
        ours = ebpo.make_estimator("grpo", **cfg.estimator_kwargs)(rewards, torch.arange(12) // 4)
        centred = (grouped - grouped.mean(1, keepdim=True)).flatten()
        std = {"group": grouped.std(1).repeat_interleave(4), "batch": rewards.std(), "none": None}[
            scale
        ]
        theirs = centred if std is None else centred / (std + 1e-4)
        torch.testing.assert_close(ours.advantages, theirs, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
    ("estimator", "scale_rewards", "option"),
    [
        ("ebpo", False, {"normalize": "center"}),  # Dr. GRPO's unscaled advantages
        ("ebpo", "none", {"normalize": "center"}),
        ("ebpo", "batch", {"normalize": "batch"}),
        ("ebpo_bb", "none", {"normalize": "center"}),
        ("ebpo_none", "none", {"normalize": "none"}),  # raw r − V is unscaled too: kept
        ("ebpo_batch", False, {"normalize": "center", "prior": "batch"}),
        ("reinforce_pp_baseline", "batch", {"whiten": "responses"}),
        ("rloo", "none", {}),
        ("jspo", False, {}),
    ],
)
def test_scale_rewards_maps_to_the_option_that_means_the_same(estimator, scale_rewards, option):
    cfg = config(advantage_estimator=estimator, scale_rewards=scale_rewards)
    built = ebpo.make_estimator(cfg.advantage_estimator, **cfg.estimator_kwargs)
    for key, value in option.items():
        assert getattr(built, key) == value


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"scale_rewards": "group"}, "scale_rewards='group' (each group divided by its own std"),
        ({"scale_rewards": True}, "no counterpart in advantage_estimator='ebpo'"),
        ({"advantage_estimator": "ebpo_bb", "scale_rewards": "group"}, "'ebpo_bb', which normalises"),
        (
            {"scale_rewards": "none", "estimator_options": {"normalize": "batch"}},
            "and estimator_options {'normalize': 'batch'} disagree",
        ),
        ({"advantage_estimator": "ebpo_center", "scale_rewards": "batch"}, "'ebpo_center' is 'ebpo'"),
        ({"advantage_estimator": "rloo", "scale_rewards": "batch"}, "never scales its advantages"),
        ({"advantage_estimator": "jspo", "scale_rewards": "group"}, "set it to none"),
        ({"advantage_estimator": "reinforce_pp", "scale_rewards": "none"}, "always whitens"),
        (
            {"advantage_estimator": "grpo", "scale_rewards": "none",
             "multi_objective_aggregation": "normalize_then_sum"},
            "TRL ignores scale_rewards there",
        ),
    ],
)  # fmt: skip
def test_a_scale_the_estimator_cannot_honour_is_refused_naming_both_settings(settings, message):
    with pytest.raises(ValueError) as info:
        config(**settings)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert "scale_rewards" in str(info.value)


def test_grpo_scales_the_normalised_sum_over_the_batch_as_trl_does():
    cfg = config(advantage_estimator="grpo", multi_objective_aggregation="normalize_then_sum")
    assert cfg.estimator_kwargs["scale"] == "batch"
    # dr_grpo stays unscaled: it is not TRL's GRPO
    dr = config(advantage_estimator="dr_grpo", multi_objective_aggregation="normalize_then_sum")
    assert "scale" not in dr.estimator_kwargs


def test_help_and_docs_say_the_default_and_the_one_flag_for_trls_grpo(capsys):
    from pathlib import Path

    from ebpo.cli import main

    with pytest.raises(SystemExit):
        main(["grpo", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "ESTIMATOR: the default is --advantage_estimator ebpo (the paper's Algorithm 1" in out
    assert "--advantage_estimator grpo is exactly TRL's GRPO" in out
    docs = (Path(__file__).resolve().parents[3] / "docs" / "trl.md").read_text()
    section = docs.split("**Which estimator.**")[1].split("\n\n")[0]
    assert "train **`ebpo`** unless told otherwise" in section
    assert "**`--advantage_estimator grpo`\nis exactly TRL's GRPO**" in section
    assert EBPOConfig.__dataclass_fields__["advantage_estimator"].default == "ebpo"
