"""EBPO on Unsloth (:mod:`ebpo.integrations.unsloth`), on the CPU, in the environment that ``make
test-unsloth`` builds (unsloth 2026.10.9, trl 1.15.0; skipped where unsloth is not installed). Each
Unsloth path runs in a process of its own (tests/integrations/unsloth/worker.py), a tiny local
Llama, 3 steps a run:

* Unsloth's CPU backend (``import unsloth`` without a GPU; ``trl.GRPOTrainer`` stays TRL's; the
  model from ``FastLanguageModel`` with LoRA): ``advantage_estimator="grpo"`` logs exactly what
  Unsloth's own GRPOTrainer logs; an ``ebpo`` and an ``spo`` LoRA run (beta 0) resumed from its
  step-2 checkpoint ends as the uninterrupted run (estimator state, logs, LoRA weights);
* Unsloth's GPU-path trainer (the generated ``UnslothGRPOTrainer``, through Unsloth's test switch
  ``UNSLOTH_ALLOW_CPU=1``; a plain transformers model): the same grpo parity and exact resumes,
  Unsloth's config defaults and output keys (``max_left_pad``) kept, ``ebpo`` trains.

On both paths ``grpo_bn``, ``spo``, ``krpo``, ``opo`` and a user's own estimator (tests/fixtures/
user_estimator, through ``estimator_module``) train 2 steps, each step's advantages those of the core
estimator replayed on the recorded rewards, groups, prompt keys and token counts."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import ebpo
from ebpo.estimators.validation import stable_key_hash

UNSLOTH = importlib.util.find_spec("unsloth") is not None
pytestmark = [
    pytest.mark.unsloth,
    pytest.mark.skipif(
        not UNSLOTH, reason="needs unsloth: `make test-unsloth` builds its environment"
    ),
]

WORKER = Path(__file__).with_name("worker.py")
STEPS = 3
G = 4  # completions per prompt (the worker's num_generations)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from ebpo.evaluation.models import save_tiny_llama

    root = tmp_path_factory.mktemp("unsloth_model")
    return save_tiny_llama(root / "model", num_layers=1, hidden_size=32, num_heads=2, seed=0)


def run_worker(path: str, model: Path, out: Path, **env: str) -> dict:
    out.mkdir()
    # a user's environment: no UNSLOTH_* switches, and no CI (seen: with CI=true, as CI runs, the
    # GPU-path trainer's compiled step fails on the CPU with inductor's "must not alias" error)
    environment = {
        k: v for k, v in os.environ.items() if not k.startswith("UNSLOTH_") and k != "CI"
    }
    environment.update(CUDA_VISIBLE_DEVICES="", **env)  # the CPU paths, even on a GPU machine
    done = subprocess.run(
        [sys.executable, str(WORKER), path, str(model), str(out)],
        capture_output=True, text=True, timeout=600, env=environment, cwd=out,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    results = json.loads((out / "results.json").read_text())
    results["dir"] = str(out)
    return results


@pytest.fixture(scope="module")
def cpu(model_dir, tmp_path_factory) -> dict:
    return run_worker("cpu", model_dir, tmp_path_factory.mktemp("unsloth_cpu") / "out")


@pytest.fixture(scope="module")
def gpu_path(model_dir, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("unsloth_gpu_path") / "out"
    return run_worker("gpu-path", model_dir, out, UNSLOTH_ALLOW_CPU="1")


def weights(results: dict, job: str) -> list[torch.Tensor]:
    return torch.load(Path(results["dir"]) / f"{job}.pt")


def assert_unsloths_grpo(results: dict) -> None:
    expected, got = results["unsloth"]["logs"], results["grpo"]["logs"]
    assert len(expected) == STEPS and got == expected  # to the last digit
    assert any(0 < h["reward"] < 1 for h in expected) and any(h["loss"] != 0 for h in expected)
    for a, b in zip(weights(results, "unsloth"), weights(results, "grpo"), strict=True):
        assert torch.equal(a, b)


def assert_outputs_kept(results: dict) -> None:
    """Every key of Unsloth's generation batch is handed on; advantages 1-D float32, one a row."""
    theirs = results["outputs"]["unsloth"]
    for job in ("grpo", "ebpo"):
        ours = results["outputs"][job]
        assert [o["keys"] for o in ours] == [o["keys"] for o in theirs[: len(ours)]]
        for output in ours:
            (rows,), dtype = output["advantages"]
            assert rows > 0 and dtype == "torch.float32" and output["same_device"]


def test_cpu_backend_keeps_trls_trainer_underneath(cpu):
    assert cpu["generated"] is False and cpu["trl_grpo_trainer"] == "GRPOTrainer"
    assert cpu["ebpo_bases"] == ["EBPOTrainerMixin", "CheckpointingMixin", "GRPOTrainer"]


def test_cpu_backend_grpo_is_unsloths_grpo_to_the_last_digit(cpu):
    assert_unsloths_grpo(cpu)
    assert_outputs_kept(cpu)


#: the part of each estimator's state that moves after the checkpoint (EBPO's prior, SPO's table)
MOVING_STATE = {"ebpo": "global", "spo": "prompts"}


@pytest.mark.parametrize("estimator", sorted(MOVING_STATE))
@pytest.mark.parametrize("path", ["cpu", "gpu_path"])
def test_resumed_ends_as_the_uninterrupted_run(path, estimator, request):
    results = request.getfixturevalue(path)
    runs = results[f"resume_{estimator}"]
    full, resumed = runs["full"], runs["resumed"]
    assert len(full["logs"]) == 4 and resumed["logs"] == full["logs"]
    assert resumed["estimator"] == full["estimator"] and full["estimator"]["steps"] == 4
    # the state at the checkpoint was restored, not rebuilt: it had already moved
    saved, moving = runs["checkpoint_state"], MOVING_STATE[estimator]
    assert saved["steps"] == 2 and saved[moving] != full["estimator"][moving]
    assert saved["estimator"] == estimator
    if estimator == "spo":  # the prompts after the checkpoint had been seen before it
        seen = [set(o["prompts"]) for o in results["outputs"][f"full_{estimator}"]]
        assert len(seen) == 4 and seen[2] | seen[3] <= seen[0] | seen[1]
    for a, b in zip(
        weights(results, f"full_{estimator}"), weights(results, f"resumed_{estimator}"), strict=True
    ):
        assert torch.equal(a, b)


def assert_replays_the_core_estimator(results: dict, job: str, estimator: Any) -> None:
    """``job`` trained 2 finite steps, each with the advantages ``estimator`` gives on the recorded
    rewards, groups (G in a row), prompt keys (each prompt's text) and completion token counts,
    and ended with the state that estimator ends with."""
    logs, outputs = results[job]["logs"], results["outputs"][job]
    assert len(logs) == 2 and all(math.isfinite(h["loss"]) for h in logs)
    assert len(outputs) == 2
    for output in outputs:
        rewards = torch.tensor(output["rewards"], dtype=torch.float64)
        expected = estimator(
            rewards,
            torch.arange(len(rewards)) // G,
            prompt_keys=[stable_key_hash(p) for p in output["prompts"]],
            token_counts=torch.tensor(output["tokens"]),
        ).advantages
        got = torch.tensor(output["values"])
        assert got.isfinite().all()
        torch.testing.assert_close(got, expected.float())
    assert results[job]["estimator"] == json.loads(json.dumps(estimator.state_dict()))


@pytest.mark.parametrize("estimator", ["grpo_bn", "spo", "krpo", "opo"])
@pytest.mark.parametrize("path", ["cpu", "gpu_path"])
def test_new_estimators_train_with_the_core_estimators_advantages(path, estimator, request):
    results = request.getfixturevalue(path)
    kwargs = results[estimator]["estimator_kwargs"]
    assert_replays_the_core_estimator(results, estimator, ebpo.make_estimator(estimator, **kwargs))
    assert results["outputs"][estimator][0]["values"] != results["outputs"]["grpo"][0]["values"]


@pytest.mark.parametrize("path", ["cpu", "gpu_path"])
def test_a_users_estimator_module_trains(path, request, user_estimators):
    results = request.getfixturevalue(path)
    kwargs = results["running_mean"]["estimator_kwargs"]
    estimator = ebpo.make_estimator("running_mean", **kwargs)
    assert isinstance(estimator, user_estimators.RunningMean)
    assert_replays_the_core_estimator(results, "running_mean", estimator)
    scored = sum(len(output["rewards"]) for output in results["outputs"]["running_mean"])
    assert results["running_mean"]["estimator"]["count"] == scored > 0  # every completion counted


def test_gpu_path_is_unsloths_generated_trainer_with_its_config_defaults(gpu_path):
    assert gpu_path["generated"] is True
    assert gpu_path["trl_grpo_trainer"] == "UnslothGRPOTrainer"
    assert gpu_path["ebpo_bases"] == [
        "EBPOTrainerMixin",
        "CheckpointingMixin",
        "UnslothGRPOTrainer",
    ]
    # Unsloth's GRPOConfig default (TRL's is adamw_torch), kept by EBPOConfig
    assert (
        gpu_path["default_optim"] == gpu_path["stock_default_optim"] == "OptimizerNames.ADAMW_8BIT"
    )


def test_gpu_path_grpo_is_unsloths_grpo_and_keeps_its_keys(gpu_path):
    assert_unsloths_grpo(gpu_path)
    assert_outputs_kept(gpu_path)
    assert all("max_left_pad" in o["keys"] for o in gpu_path["outputs"]["grpo"])


@pytest.mark.parametrize("path", ["cpu", "gpu_path"])
def test_ebpo_trains_on_both_paths(path, request):
    results = request.getfixturevalue(path)
    logs = results["ebpo"]["logs"]
    assert len(logs) == STEPS and all(math.isfinite(h["loss"]) for h in logs)
    assert results["ebpo"]["estimator"]["steps"] == STEPS
    assert {"ebpo/prior_mean", "ebpo/shrinkage_mean"} <= set(results["ebpo"]["ebpo_metrics"])
    assert logs != results["unsloth"]["logs"]  # another estimator, another update


@pytest.mark.parametrize("path", ["cpu", "gpu_path"])
def test_ebpo_config_checks_run_inside_the_config_in_place(path, request):
    config = request.getfixturevalue(path)["config"]
    assert config["estimator"] == "ebpo" and config["scale_rewards"] is None
    assert config["unsloth_fields"] is (path == "gpu_path")  # Unsloth's own fields kept
    assert config["centred_kwargs"] == {"nan_policy": "mask", "normalize": "center"}
    assert config["refused"].startswith("scale_rewards='group'")


def test_clip_cov_is_refused_on_the_generated_trainer_only(cpu, gpu_path):
    assert cpu["clip_cov"] == "trained"
    assert gpu_path["clip_cov"].startswith("clip_cov_ratio > 0 is not supported on Unsloth's")
