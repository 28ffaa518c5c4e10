"""``ebpo verl smoke --recipe NAME``: a recipe of ``ebpo verl recipe --list`` through the CPU loop
with only what a CPU cannot do replaced (model, sizes, rollout engine, strategy, the trainer's
nodes and cadence). The composed configs are compared key by key with the recipe's own; the real
runs (``ebpo`` and ``grpo``, with their reference policy and KL loss) are in
tests/integrations/verl/test_verl_fit_cpu.py's module fixture."""

from __future__ import annotations

import pytest

pytest.importorskip("verl")
pytestmark = pytest.mark.verl

from ebpo.integrations.verl.recipes import RECIPES, recipe_overrides  # noqa: E402
from ebpo.lab.verl_cpu.settings import (  # noqa: E402
    RECIPE_REPLACED,
    SmokeSettings,
    recipe_run,
    recipe_smoke_overrides,
)


def _flat(node, prefix=""):
    """``{dotted key: value}`` of a plain nested dict."""
    out = {}
    for key, value in node.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flat(value, path + "."))
        else:
            out[path] = value
    return out


def _composed_sections(overrides):
    from omegaconf import OmegaConf

    from ebpo.commands.verl.launcher import compose

    config = compose([o for o in overrides if not o.startswith("hydra.")])
    plain = OmegaConf.to_container(config, resolve=True)
    return {
        "algorithm": _flat(plain["algorithm"], "algorithm."),
        "actor": _flat(plain["actor_rollout_ref"]["actor"], "actor_rollout_ref.actor."),
        "reward": _flat(plain["reward"], "reward."),
    }, config


@pytest.mark.parametrize("name", ["ebpo", "grpo", "dapo", "entropy_mech"])
def test_a_recipe_run_keeps_every_algorithm_and_actor_key(name, tmp_path):
    """The CPU run's composed ``algorithm``, ``actor`` and ``reward`` sections equal the
    recipe's (as ``ebpo verl recipe NAME`` composes it) except for the keys the smoke replaces
    (:data:`RECIPE_REPLACED`) and the keys derived from them by verl's interpolations."""
    from ebpo.commands.verl.launcher import with_defaults
    from ebpo.lab.verl_cpu.smoke import run_spec
    from ebpo.lab.verl_cpu.v1.launch import v1_overrides

    run = recipe_run(name)
    settings = SmokeSettings(work_dir=str(tmp_path), estimators=(), recipes=(name,))
    files = {f"train.{order}": "t.parquet" for order in ("file", "shuffle", "topic")}
    files["aime-2024"] = "v.parquet"
    spec = run_spec(settings, run, files, str(tmp_path / "model"), tmp_path / "run")
    cpu, cpu_config = _composed_sections(v1_overrides(spec, ray_temp_dir=str(tmp_path / "ray")))
    paper, _ = _composed_sections(with_defaults(recipe_overrides(name)))
    # sizes of the 8-GPU run that verl derives from the replaced ones (token budgets, batch sizes)
    derived = ("_per_gpu", "ppo_micro_batch_size", "mini_batch_size", "total_training_steps")
    for section in ("algorithm", "actor", "reward"):
        differ = {
            key
            for key in cpu[section].keys() | paper[section].keys()
            if cpu[section].get(key) != paper[section].get(key)
        }
        unexplained = {
            key
            for key in differ
            if key not in RECIPE_REPLACED
            and not key.endswith(derived)
            and not key.startswith("actor_rollout_ref.actor.optim.lr")
            and key != "actor_rollout_ref.actor.strategy"
            and "checkpoint" not in key  # the CPU worker's own checkpoint format
            and key != "reward.num_workers"  # reward workers: 1 on 2 cores (a resource size)
        }
        assert not unexplained, {
            k: (cpu[section].get(k), paper[section].get(k)) for k in unexplained
        }
    # what the paper's recipes need from the CPU worker: a reference policy with the KL loss
    assert cpu_config.actor_rollout_ref.actor.use_kl_loss == (name != "entropy_mech")
    assert cpu_config.actor_rollout_ref.actor.kl_loss_type == "low_var_kl"
    assert cpu_config.algorithm.adv_estimator == run.registry_name


def test_only_the_cpu_impossible_keys_are_replaced():
    """Every override of every recipe is kept or listed as replaced, and what is replaced is the
    engine, the sizes, the files and the trainer's cadence: never an algorithm key."""
    for name in RECIPES:
        kept, replaced = recipe_smoke_overrides(name)
        assert sorted([*kept, *replaced]) == sorted(recipe_overrides(name))
        keys = [o.split("=", 1)[0].lstrip("+~") for o in replaced]
        assert not [k for k in keys if k.startswith("algorithm.")], name
        actor = [k for k in keys if k.startswith("actor_rollout_ref.actor.")]
        assert set(actor) <= set(RECIPE_REPLACED), name
        assert any(k.startswith("algorithm.adv_estimator") for k in (o.split("=")[0] for o in kept))


def test_recipe_settings_are_checked_before_anything_runs():
    with pytest.raises(ValueError, match=r"--recipe must be some of .*got \['ebpo_topci'\]"):
        SmokeSettings(work_dir=".", recipes=("ebpo_topci",)).check()
    with pytest.raises(ValueError, match=r"--recipe runs on verl's default trainer"):
        SmokeSettings(work_dir=".", recipes=("ebpo",), trainer="legacy").check()
    SmokeSettings(work_dir=".", estimators=(), recipes=("grpo",)).check()
    runs = SmokeSettings(work_dir=".", estimators=("ebpo",), recipes=("grpo",)).runs()
    assert [r.name for r in runs] == ["ebpo", "recipe_grpo"]
    assert runs[1].kl_loss and not runs[1].ours and runs[1].metric_prefixes == ("actor",)
