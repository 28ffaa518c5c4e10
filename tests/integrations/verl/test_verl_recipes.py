"""Every recipe's full Hydra config composes and validates on CPU (dry-run mode); the launcher's
defaults and the CLI behave."""

from __future__ import annotations

import pytest

from ebpo.integrations.verl.launcher import (
    CALLBACK_FQN,
    ENV_FORWARD,
    dry_run,
    override_value,
    with_defaults,
)
from ebpo.integrations.verl.recipes import PAPER, RECIPES, recipe_overrides

pytestmark = pytest.mark.verl


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipe_dry_run_validates(name, tmp_path):
    config, notes = dry_run(with_defaults(recipe_overrides(name, data_dir=str(tmp_path))))
    actor = config.actor_rollout_ref.actor
    # The paper's shared setup reached the composed config.
    assert config.data.train_batch_size == PAPER["train_batch_size"]
    assert config.actor_rollout_ref.rollout.n == PAPER["group_size"]
    assert actor.ppo_mini_batch_size == PAPER["ppo_mini_batch_size"]
    assert actor.optim.lr == PAPER["lr"]
    assert config.data.max_response_length == PAPER["max_response_length"]
    assert actor.strategy == "fsdp2" and config.actor_rollout_ref.rollout.name == "vllm"
    # Each recipe's own settings.
    recipe = RECIPES[name]
    assert config.data.shuffle is (recipe.order == "shuffle")
    assert config.data.train_files.endswith(f"dapo_math_17k.{recipe.order}.parquet")
    if name.startswith("ebpo"):
        assert config.algorithm.adv_estimator == "ebpo"
        assert config.algorithm.ebpo.prior == "batch"  # the authors' released code
        assert config.trainer.checkpoint_callback_class == CALLBACK_FQN
    else:
        assert config.algorithm.adv_estimator == "grpo"
    if name == "dr_grpo":
        assert config.algorithm.norm_adv_by_std_in_grpo is False and actor.loss_agg_mode == "seq-mean-token-sum-norm"
    if name == "dapo":
        assert actor.clip_ratio_high == 0.28 and config.algorithm.filter_groups.enable
        assert config.reward.reward_kwargs.overlong_buffer_cfg.len == 4096
    if name == "entropy_mech":
        assert actor.policy_loss.loss_mode == "clip_cov" and not actor.use_kl_loss
    else:
        assert actor.policy_loss.loss_mode == "vanilla"
    if name == "ebpo_diff":
        assert config.trainer.total_epochs == 1
    # Data is not there (CPU box): reported, not fatal.
    assert any("prepare-data" in note for note in notes)


def test_dry_run_rejects_broken_configs(tmp_path):
    base = recipe_overrides("ebpo", data_dir=str(tmp_path))
    with pytest.raises(ValueError, match="prior"):
        dry_run(with_defaults(recipe_overrides("ebpo", data_dir=str(tmp_path), extra=["+algorithm.ebpo.prior=forever"])))
    with pytest.raises(ValueError, match="half_lif"):
        dry_run(with_defaults([*base, "+algorithm.ebpo.half_lif=3"]))
    with pytest.raises(ValueError, match="ppo_mini_batch_size"):
        dry_run(with_defaults([*base, "data.train_batch_size=64"]))
    with pytest.raises(ValueError, match="resume_mode"):
        dry_run(with_defaults([*base, "trainer.resume_mode=sometimes"]))
    with pytest.raises(Exception, match="FSDPActorConfig"):  # verl's own validation runs too
        dry_run(with_defaults([*base, "actor_rollout_ref.actor.loss_agg_mode=bogus"]))
    extra = ["+algorithm.ebpo.prior=ema", "+algorithm.ebpo.half_life=20"]
    config, _ = dry_run(with_defaults(recipe_overrides("ebpo", data_dir=str(tmp_path), extra=extra)))
    assert config.algorithm.ebpo.half_life == 20


def test_with_defaults_respects_user_choices():
    assert override_value(with_defaults([]), "algorithm.adv_estimator") == "ebpo"
    assert override_value(with_defaults([]), "trainer.checkpoint_callback_class") == CALLBACK_FQN
    grpo = with_defaults(["algorithm.adv_estimator=grpo"])
    assert override_value(grpo, "trainer.checkpoint_callback_class") is None
    mine = with_defaults(["trainer.checkpoint_callback_class=my.Callback"])
    assert override_value(mine, "trainer.checkpoint_callback_class") == "my.Callback"
    assert ENV_FORWARD in with_defaults([], plugin_via_env=True)
    assert ENV_FORWARD not in with_defaults([])
    assert override_value(["a=1", "++a=2"], "a") == "2"  # Hydra: the last one wins


def test_recipe_extra_overrides_replace_recipe_keys(tmp_path):
    overrides = recipe_overrides("ebpo_topic", extra=["+algorithm.ebpo.prior=history", "data.shuffle=True"])
    assert override_value(overrides, "algorithm.ebpo.prior") == "history"
    assert sum(o.startswith("data.shuffle=") for o in overrides) == 1
    config, _ = dry_run(with_defaults(overrides))
    assert config.algorithm.ebpo.prior == "history" and config.data.shuffle is True


def test_recipe_overrides_unknown_name():
    with pytest.raises(ValueError, match="unknown recipe"):
        recipe_overrides("ppo")


def test_cli_recipe_dry_run_and_list(capsys, tmp_path):
    from ebpo.cli import main

    assert main(["verl", "recipe", "--list"]) == 0
    assert "ebpo_topic" in capsys.readouterr().out
    assert main(["verl", "recipe", "ebpo_topic", "--dry-run", f"--data-dir={tmp_path}", "+algorithm.ebpo.prior=ema"]) == 0
    out = capsys.readouterr().out
    assert "dry run OK: adv_estimator=ebpo" in out and "'prior': 'ema'" in out
    assert main(["verl", "--dry-run", *recipe_overrides("grpo", data_dir=str(tmp_path))]) == 0
    assert main(["verl", "recipe", "ebpo", "--dry-run", "+algorithm.ebpo.bogus=1"]) == 2
    assert "bogus" in capsys.readouterr().err


def test_recipe_scripts_cover_every_recipe():
    from pathlib import Path

    scripts = Path(__file__).resolve().parents[3] / "recipes" / "verl"
    named = {p.stem.removeprefix("run_") for p in scripts.glob("run_*.sh")}
    assert named == set(RECIPES)
    for name in named:
        text = (scripts / f"run_{name}.sh").read_text()
        assert f"ebpo verl recipe {name} " in text and text.startswith("#!/usr/bin/env bash")


@pytest.mark.parametrize("entry_point", [True, False])
def test_launcher_command_and_plugin_fallback(monkeypatch, entry_point):
    import sys

    import ebpo.integrations.verl.launcher as launcher

    calls = []
    monkeypatch.setattr(launcher.subprocess, "call", lambda command, env=None: calls.append((command, env)) or 0)
    monkeypatch.setattr(launcher, "entry_point_active", lambda: entry_point)
    monkeypatch.delenv("VERL_USE_EXTERNAL_MODULES", raising=False)
    assert launcher.run(["data.train_batch_size=64"]) == 0
    (command, env), = calls
    assert command[:3] == [sys.executable, "-m", "verl.trainer.main_ppo"]
    assert "data.train_batch_size=64" in command and "algorithm.adv_estimator=ebpo" in command
    if entry_point:  # verl >= 0.9 loads the plug-in by itself
        assert env is None and ENV_FORWARD not in command
    else:  # verl 0.6-0.8: driver env AND Ray workers' env
        assert env["VERL_USE_EXTERNAL_MODULES"] == launcher.PLUGIN_MODULE and ENV_FORWARD in command


def test_entry_point_active_follows_verl_policy(monkeypatch):
    from ebpo.integrations.verl.launcher import entry_point_active

    monkeypatch.delenv("VERL_USE_EXTERNAL_PLUGINS", raising=False)
    assert entry_point_active()
    monkeypatch.setenv("VERL_USE_EXTERNAL_PLUGINS", "other,ebpo")
    assert entry_point_active()
    monkeypatch.setenv("VERL_USE_EXTERNAL_PLUGINS", "none")
    assert not entry_point_active()
