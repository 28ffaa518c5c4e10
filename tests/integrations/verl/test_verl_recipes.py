"""Every recipe's full Hydra config composes and validates on CPU (dry-run mode); the launcher's
defaults and the CLI behave."""

from __future__ import annotations

import pytest

from ebpo.commands.verl.launcher import (
    CALLBACK_FQN,
    ENV_FORWARD,
    dry_run,
    override_value,
    with_defaults,
)
from ebpo.integrations.verl.advantage import PLUGIN_KEYS
from ebpo.integrations.verl.recipes import PAPER, RECIPES, recipe_overrides

pytestmark = pytest.mark.verl


@pytest.fixture(autouse=True)
def plugin_checked_elsewhere(monkeypatch):
    """``launcher.run`` probes a fresh interpreter before launching (tests/commands/verl/
    test_nodes.py tests that); here it would only cost time."""
    from ebpo.commands.verl import launcher

    monkeypatch.setattr(launcher, "check_plugin_where_it_runs", lambda args, env: None)


#: What the authors' verl scripts set (read from their published scripts; issue #10 item 9), by
#: composed-config key. Every recipe must agree, except the documented deliberate differences
#: (recipes/verl/README.md, "Differences from the authors' scripts").
AUTHORS_COMMON = {
    "data.train_batch_size": 512,
    "data.max_prompt_length": 4096,
    "data.max_response_length": 8192,
    "actor_rollout_ref.rollout.n": 4,
    "actor_rollout_ref.rollout.val_kwargs.n": 8,
    "actor_rollout_ref.actor.ppo_mini_batch_size": 128,
    "actor_rollout_ref.actor.optim.lr": 1e-6,
    "actor_rollout_ref.actor.optim.weight_decay": 0.01,
    "actor_rollout_ref.actor.use_kl_loss": True,
    "actor_rollout_ref.actor.kl_loss_coef": 0.001,
    "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
    "actor_rollout_ref.actor.loss_agg_mode": "token-mean",
    "actor_rollout_ref.actor.strategy": "fsdp2",
    "actor_rollout_ref.rollout.name": "vllm",
    "algorithm.use_kl_in_reward": False,
    "trainer.test_freq": 5,
    "trainer.save_freq": 10,
    "trainer.val_before_train": True,
    "trainer.total_epochs": 20,
}
AUTHORS = {
    "ebpo": {"algorithm.adv_estimator": "ebpo", "data.shuffle": False},  # "naive": file order
    "ebpo_topic": {"algorithm.adv_estimator": "ebpo", "data.shuffle": False},
    "ebpo_diff": {
        "algorithm.adv_estimator": "ebpo",
        "data.shuffle": False,
        "trainer.total_epochs": 1,
    },
    "grpo": {"algorithm.adv_estimator": "grpo"},
    "dr_grpo": {"algorithm.adv_estimator": "grpo", "algorithm.norm_adv_by_std_in_grpo": False},
    "dapo": {
        "algorithm.adv_estimator": "grpo",
        "algorithm.norm_adv_by_std_in_grpo": False,
        "algorithm.filter_groups.enable": True,
        "algorithm.filter_groups.metric": "acc",
        "actor_rollout_ref.actor.clip_ratio_high": 0.28,
        "reward.reward_kwargs.overlong_buffer_cfg.enable": True,
        "reward.reward_kwargs.overlong_buffer_cfg.len": 4096,
        "reward.reward_kwargs.overlong_buffer_cfg.penalty_factor": 1.0,
    },
    "entropy_mech": {
        "algorithm.adv_estimator": "grpo",
        "actor_rollout_ref.actor.use_kl_loss": False,
        "actor_rollout_ref.actor.clip_ratio_low": 1.0,
        "actor_rollout_ref.actor.clip_ratio_high": 1.0,
        "actor_rollout_ref.actor.clip_ratio_c": 10.0,
        "actor_rollout_ref.actor.policy_loss.loss_mode": "clip_cov",
        "actor_rollout_ref.actor.policy_loss.clip_cov_ratio": 0.0002,
        "actor_rollout_ref.actor.policy_loss.clip_cov_lb": 1.0,
        "actor_rollout_ref.actor.policy_loss.clip_cov_ub": 5.0,
    },
}


def _select(config, key):
    from omegaconf import OmegaConf

    return OmegaConf.select(config, key, throw_on_missing=True)


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipe_dry_run_validates_and_matches_the_authors(name, tmp_path):
    config, notes = dry_run(with_defaults(recipe_overrides(name, data_dir=str(tmp_path))))
    want = {**AUTHORS_COMMON, **AUTHORS[name]}
    got = {key: _select(config, key) for key in want}
    assert got == want
    # Each recipe's own settings.
    recipe = RECIPES[name]
    assert config.data.shuffle is (recipe.order == "shuffle")
    assert config.data.train_files.endswith(f"dapo_math_17k.{recipe.order}.parquet")
    assert list(config.data.val_files) == [str(tmp_path / "aime24.parquet")]  # AIME 2024 only
    # Deliberate difference: validation samples at the paper's temperature (not verl's greedy).
    val = config.actor_rollout_ref.rollout.val_kwargs
    assert val.do_sample is True and val.temperature == 1.0 and val.top_p == 1.0
    if name.startswith("ebpo"):
        # The authors' released code: the batch is the prior, μ the mean of its group means.
        assert dict(config.algorithm.ebpo) == {"prior": "batch", "prior_mean_from": "group_means"}
        assert config.trainer.checkpoint_callback_class == CALLBACK_FQN
    if name == "ebpo":
        assert recipe.order == "file"
    if name != "entropy_mech":
        assert config.actor_rollout_ref.actor.policy_loss.loss_mode == "vanilla"
    assert config.actor_rollout_ref.actor.optim.lr == PAPER["lr"]
    # Data is not there (CPU box): reported, not fatal.
    assert any("prepare-data" in note for note in notes)


def test_dry_run_rejects_broken_configs(tmp_path):
    base = recipe_overrides("ebpo", data_dir=str(tmp_path))
    with pytest.raises(ValueError, match="prior"):
        dry_run(
            with_defaults(
                recipe_overrides(
                    "ebpo", data_dir=str(tmp_path), extra=["+algorithm.ebpo.prior=forever"]
                )
            )
        )
    with pytest.raises(ValueError, match="half_lif"):
        dry_run(with_defaults([*base, "+algorithm.ebpo.half_lif=3"]))
    with pytest.raises(ValueError, match="ppo_mini_batch_size"):
        dry_run(with_defaults([*base, "data.train_batch_size=64"]))
    with pytest.raises(ValueError, match="resume_mode"):
        dry_run(with_defaults([*base, "trainer.resume_mode=sometimes"]))
    with pytest.raises(Exception, match="FSDPActorConfig"):  # verl's own validation runs too
        dry_run(with_defaults([*base, "actor_rollout_ref.actor.loss_agg_mode=bogus"]))
    extra = ["+algorithm.ebpo.prior=ema", "+algorithm.ebpo.half_life=20"]
    config, _ = dry_run(
        with_defaults(recipe_overrides("ebpo", data_dir=str(tmp_path), extra=extra))
    )
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
    overrides = recipe_overrides(
        "ebpo_topic", extra=["+algorithm.ebpo.prior=history", "data.shuffle=True"]
    )
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
    assert (
        main(
            [
                "verl",
                "recipe",
                "ebpo_topic",
                "--dry-run",
                f"--data-dir={tmp_path}",
                "+algorithm.ebpo.prior=ema",
            ]
        )
        == 0
    )
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

    import ebpo.commands.verl.launcher as launcher

    calls = []
    monkeypatch.setattr(
        launcher.subprocess, "call", lambda command, env=None: calls.append((command, env)) or 0
    )
    monkeypatch.setattr(launcher, "entry_point_active", lambda: entry_point)
    monkeypatch.delenv("VERL_USE_EXTERNAL_MODULES", raising=False)
    checked = []  # the dry run's checks (this machine has no GPU: tests/commands/verl/test_machine.py)
    monkeypatch.setattr(launcher, "check_launchable", lambda args: checked.append(list(args)))
    assert launcher.run(["data.train_batch_size=64"]) == 0
    ((command, env),) = calls
    assert command[:3] == [sys.executable, "-m", "verl.trainer.main_ppo"]
    assert checked == [command[3:]]  # checked: exactly what main_ppo gets
    assert "data.train_batch_size=64" in command and "algorithm.adv_estimator=ebpo" in command
    if entry_point:  # verl >= 0.9 loads the plug-in by itself
        assert env is None and ENV_FORWARD not in command
    else:  # verl 0.6-0.8: driver env AND Ray workers' env
        assert env["VERL_USE_EXTERNAL_MODULES"] == launcher.PLUGIN_MODULE and ENV_FORWARD in command


def test_entry_point_active_follows_verl_policy(monkeypatch):
    from ebpo.commands.verl.launcher import entry_point_active

    monkeypatch.delenv("VERL_USE_EXTERNAL_PLUGINS", raising=False)
    assert entry_point_active()
    monkeypatch.setenv("VERL_USE_EXTERNAL_PLUGINS", "other,ebpo")
    assert entry_point_active()
    monkeypatch.setenv("VERL_USE_EXTERNAL_PLUGINS", "none")
    assert not entry_point_active()


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_recipe_passes_the_launch_check(name):
    from ebpo.commands.verl.launcher import check_overrides

    check_overrides(with_defaults(recipe_overrides(name)))  # raises if a recipe had a bad key


def test_algorithm_overrides_follow_hydra_order():
    from ebpo.commands.verl.launcher import algorithm_overrides

    got = algorithm_overrides(
        [
            "data.x=1",
            "algorithm.adv_estimator=ebpo",
            "algorithm.ebpo={prior: batch, eps: 1e-3}",
            "+algorithm.ebpo.prior=ema",
            "++algorithm.ebpo.half_life=20",
            "~algorithm.ebpo.eps",
            "algorithm.norm_adv_by_std_in_grpo=False",
        ]
    )
    assert got == {
        "adv_estimator": "ebpo",
        "ebpo": {"prior": "ema", "half_life": 20},
        "norm_adv_by_std_in_grpo": False,
    }


def test_bad_estimator_overrides_never_launch(monkeypatch):
    import ebpo.commands.verl.launcher as launcher
    from ebpo.estimators import estimator_options

    calls = []
    monkeypatch.setattr(
        launcher.subprocess, "call", lambda command, env=None: calls.append(command) or 0
    )
    monkeypatch.setattr(launcher, "entry_point_active", lambda: True)
    monkeypatch.setattr(launcher, "check_launchable", lambda args: None)  # this machine: no GPU
    with pytest.raises(ValueError, match=r"'prir' .*did you mean 'prior'\?") as error:
        launcher.run(["+algorithm.ebpo.prir=ema"])
    # The valid keys are the estimator's constructor options (+ the plug-in's), not a copied list.
    listed = str(error.value).split("valid keys: ")[1].split(", ")
    assert set(listed) == set(estimator_options("ebpo")) | set(PLUGIN_KEYS)
    with pytest.raises(
        ValueError, match=r"prior must be one of \['history', 'batch', 'ema'\], got 'forever'"
    ):
        launcher.run(["+algorithm.ebpo.prior=forever"])
    with pytest.raises(ValueError, match="warmup_groups must be a positive integer"):
        launcher.run(["algorithm.adv_estimator=ebpo_bb", "+algorithm.ebpo.warmup_groups=0"])
    with pytest.raises(ValueError, match="'docter' is not a Hydra override"):
        launcher.run(["docter"])
    assert calls == []
    # Not our estimator: verl ignores algorithm.ebpo, so any key there (a typo too) is refused
    # rather than silently dropped; without the section verl's own estimators launch.
    with pytest.raises(
        ValueError, match=r"algorithm\.ebpo\.prir is read only by ebpo's estimators"
    ):
        launcher.run(["algorithm.adv_estimator=grpo", "+algorithm.ebpo.prir=1"])
    assert calls == []
    assert launcher.run(["algorithm.adv_estimator=grpo"]) == 0
    # Interpolated values are left to the dry run; the keys are still checked.
    assert launcher.run(["+algorithm.ebpo.prior=${oc.env:PRIOR,batch}"]) == 0
    assert len(calls) == 2


def test_jspo_plus_plus_options_are_checked_before_launch(monkeypatch):
    import ebpo.commands.verl.launcher as launcher
    from ebpo.estimators import estimator_options

    calls = []
    monkeypatch.setattr(
        launcher.subprocess, "call", lambda command, env=None: calls.append(command) or 0
    )
    monkeypatch.setattr(launcher, "entry_point_active", lambda: True)
    monkeypatch.setattr(launcher, "check_launchable", lambda args: None)  # this machine: no GPU
    jspo_pp = "algorithm.adv_estimator=jspo_plus_plus"
    with pytest.raises(ValueError, match=r"'smoth_coef' .*did you mean 'smooth_coef'\?") as error:
        launcher.run([jspo_pp, "+algorithm.ebpo.smoth_coef=0.99"])
    listed = str(error.value).split("valid keys: ")[1].split(", ")
    assert set(listed) == set(estimator_options("jspo_plus_plus")) | set(PLUGIN_KEYS)
    with pytest.raises(
        ValueError, match=r"adv_estimator=jspo_plus_plus: smooth_coef must be a number in \[0, 1\]"
    ):
        launcher.run([jspo_pp, "+algorithm.ebpo.smooth_coef=1.5"])
    # The authors' key is checked too, and the error says where the value came from.
    with pytest.raises(
        ValueError, match=r"\(smooth_coef from algorithm.js_smooth_coef\): smooth_coef must be"
    ):
        launcher.run([jspo_pp, "+algorithm.js_smooth_coef=2"])
    assert calls == []
    assert launcher.run([jspo_pp, "+algorithm.ebpo.smooth_coef=0.99"]) == 0
    assert launcher.run([jspo_pp, "+algorithm.js_smooth_coef=0.99"]) == 0
    assert (
        launcher.run(["algorithm.adv_estimator=jspo", "+algorithm.js_smooth_coef=2"]) == 0
    )  # not jspo's key
    # Our estimator, so the launcher persists its state with the checkpoints.
    assert all(f"trainer.checkpoint_callback_class={CALLBACK_FQN}" in command for command in calls)


def test_jspo_plus_plus_dry_run_with_the_authors_key(tmp_path):
    extra = ["algorithm.adv_estimator=jspo_plus_plus", "+algorithm.js_smooth_coef=0.99"]
    config, notes = dry_run(
        with_defaults(recipe_overrides("grpo", data_dir=str(tmp_path), extra=extra))
    )
    assert config.algorithm.adv_estimator == "jspo_plus_plus"
    assert config.trainer.checkpoint_callback_class == CALLBACK_FQN
    assert any(
        "estimator jspo_plus_plus with options" in note and "'smooth_coef': 0.99" in note
        for note in notes
    )


def test_cli_subcommand_typo_does_not_launch(monkeypatch, capsys):
    import ebpo.commands.verl.launcher as launcher
    from ebpo.cli import main

    calls = []
    monkeypatch.setattr(
        launcher.subprocess, "call", lambda command, env=None: calls.append(command) or 0
    )
    assert main(["verl", "docter"]) == 2
    assert "did you mean 'doctor'?" in capsys.readouterr().err
    assert calls == []


def test_dry_run_names_every_option_of_the_estimator_defaults_included(tmp_path):
    """The dry run's note is what the run will use: the prior (history by default) is named even
    though no override set it."""
    extra = ["algorithm.adv_estimator=ebpo", "+algorithm.ebpo.within_variance=within"]
    _, notes = dry_run(with_defaults(recipe_overrides("grpo", data_dir=str(tmp_path), extra=extra)))
    (note,) = [note for note in notes if note.startswith("estimator ebpo with options")]
    for option in ("'prior': 'history'", "'within_variance': 'within'", "'half_life'"):
        assert option in note, option
