"""EBPOTrainer end to end on the tiny local Llama (2 layers, width 128): advantages, logs, eval,
checkpoint/resume, DAPO filtering and overlong shaping, Clip-Cov, clusters, data order."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")

from datasets import Dataset  # noqa: E402

import ebpo  # noqa: E402
from ebpo.integrations.trl import (  # noqa: E402
    ESTIMATOR_STATE_FILE,
    EBPOTrainer,
    make_config,
    zero_variance_groups,
)
from ebpo.models import build_char_tokenizer, build_tiny_llama  # noqa: E402

pytestmark = pytest.mark.trl

G = 4  # num_generations
BATCH = 16  # completions per step = 4 groups


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


def dataset(n: int = 32) -> Dataset:
    return Dataset.from_dict(
        {
            "prompt": [f"{i}+{i}=" for i in range(n)],
            "topic": [["algebra", "geometry", "calculus"][i % 3] for i in range(n)],
            "difficulty": [float((7 * i) % n) for i in range(n)],
        }
    )


def parity(text: str) -> float:
    return float(sum(map(ord, text)) % 2)


class RecordingReward:
    """Parity of the completion's characters; ``None`` (unscorable) for the first completion of a call."""

    __name__ = "parity"

    def __init__(self, unscorable_first: bool = False) -> None:
        self.unscorable_first = unscorable_first
        self.calls: list[list[float]] = []

    def __call__(self, completions, **kwargs):
        out = [parity(c) for c in completions]
        if self.unscorable_first:
            out[0] = None
        self.calls.append([float("nan") if r is None else r for r in out])
        return out


class RecordingTrainer(EBPOTrainer):
    """Records what the estimator produced and what the loss received."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outputs: list[dict] = []
        self.loss_advantages: list[torch.Tensor] = []
        self.logged_advantages: list[list[float]] = []
        self.rewards_per_func: list[torch.Tensor] = []

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self.rewards_per_func.append(rewards.clone())
        return rewards

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        self.outputs.append({k: v.clone() for k, v in output.items() if isinstance(v, torch.Tensor)})
        n = output["advantages"].numel()
        self.logged_advantages.append(list(self._logs["advantages"])[-n:])
        return output

    def _compute_loss(self, model, inputs):
        self.loss_advantages.append(inputs["advantages"].detach().clone())
        return super()._compute_loss(model, inputs)


def tiny_args(tmp_path: Path, preset: str = "ebpo", **overrides):
    options = {
        "output_dir": str(tmp_path / "out"),
        "num_generations": G,
        "per_device_train_batch_size": BATCH,
        "max_completion_length": 8,
        "max_steps": 3,
        "beta": 0.0,
        "learning_rate": 1e-3,
        "logging_steps": 1,
        "report_to": "none",
        "save_strategy": "no",
        "bf16": False,
        "use_cpu": True,
        "seed": 0,
        **overrides,
    }
    return make_config(preset, **options)


def build(tokenizer, args, reward, cls=RecordingTrainer, **kwargs):
    model = build_tiny_llama(tokenizer, num_layers=2, hidden_size=128, seed=0)
    kwargs.setdefault("train_dataset", dataset())
    return cls(model=model, reward_funcs=reward, args=args, processing_class=tokenizer, **kwargs)


# ---------------------------------------------------------------------- one shared EBPO run
@pytest.fixture(scope="module")
def ebpo_run(tokenizer, tmp_path_factory):
    reward = RecordingReward(unscorable_first=True)
    root = tmp_path_factory.mktemp("ebpo")
    args = tiny_args(
        root, per_device_eval_batch_size=8, num_generations_eval=2, eval_strategy="no",
        report_to=["tensorboard"],
    )
    trainer = build(tokenizer, args, reward, eval_dataset=dataset(8))
    trainer.train()
    train_calls = list(reward.calls)
    state_after_train = trainer.estimator.state_dict()
    eval_metrics = trainer.evaluate()
    return types.SimpleNamespace(
        trainer=trainer,
        reward=reward,
        train_calls=train_calls,
        state_after_train=state_after_train,
        eval_metrics=eval_metrics,
        output_dir=root / "out",
    )


def replay(train_calls, name="ebpo", **options):
    """A fresh estimator fed the same rewards: what the trainer must have computed."""
    estimator = ebpo.make_estimator(name, nan_policy="mask", **options)
    results = [estimator(torch.tensor(r), torch.arange(len(r)) // G) for r in train_calls]
    return estimator, results


def test_advantages_are_the_estimators_on_the_gathered_rewards(ebpo_run):
    run = ebpo_run
    assert len(run.train_calls) == 3 and all(len(r) == BATCH for r in run.train_calls)
    estimator, results = replay(run.train_calls)
    for output, result, logged in zip(run.trainer.outputs, results, run.trainer.logged_advantages, strict=False):
        torch.testing.assert_close(output["advantages"], result.advantages.float())
        # the completions table shows our advantages, not TRL's
        torch.testing.assert_close(torch.tensor(logged), result.advantages.float())
    # unscorable completions (reward None → NaN) get no advantage and stay out of the prior
    for output in run.trainer.outputs[:3]:
        assert output["advantages"][0] == 0
    assert run.state_after_train == estimator.state_dict()
    assert run.state_after_train["global"]["rewards"]["count"] == 3 * (BATCH - 1)
    # the loss got exactly these advantages (TRL shuffles rows after scoring)
    for output, seen in zip(run.trainer.outputs[:3], run.trainer.loss_advantages[:3], strict=True):
        assert torch.equal(output["advantages"].sort().values, seen.sort().values)


def test_advantages_differ_from_trls_grpo(ebpo_run):
    """Guard against the override silently not applying: EBPO ≠ TRL's group-scaled GRPO here."""
    rewards = torch.tensor(ebpo_run.train_calls[-1]).view(-1, G)
    grpo = (rewards - rewards.nanmean(1, keepdim=True)) / (rewards.std(1, keepdim=True).nan_to_num(0) + 1e-4)
    assert not torch.allclose(ebpo_run.trainer.outputs[2]["advantages"], grpo.flatten().nan_to_num(0), atol=1e-3)


def test_estimator_metrics_reach_trl_logs(ebpo_run):
    _, results = replay(ebpo_run.train_calls)
    logs = [entry for entry in ebpo_run.trainer.state.log_history if "ebpo/prior_mean" in entry]
    assert len(logs) == 3
    for entry, result in zip(logs, results, strict=True):
        for key in ("prior_mean", "sigma2", "tau2", "shrinkage_mean", "zero_variance_group_frac", "zero_signal_group_frac"):
            assert entry[f"ebpo/{key}"] == pytest.approx(result.metrics[key]), key
        assert entry["ebpo/grpo_zero_signal_group_frac"] == pytest.approx(result.metrics["zero_variance_group_frac"])


def test_estimator_metrics_reach_tensorboard(ebpo_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    files = sorted(ebpo_run.output_dir.glob("runs/*/events.out.tfevents.*"))
    assert files, "no tensorboard event file written"
    train_events = []
    for path in files:
        events = EventAccumulator(str(path))
        events.Reload()
        if "train/ebpo/tau2" in events.Tags()["scalars"]:
            train_events.append(events)
    assert len(train_events) == 1
    events = train_events[0]
    _, results = replay(ebpo_run.train_calls)
    tags = events.Tags()["scalars"]
    for key in ("prior_mean", "tau2", "shrinkage_mean", "grpo_zero_signal_group_frac", "zero_signal_group_frac"):
        assert f"train/ebpo/{key}" in tags, key
    written = [e.value for e in events.Scalars("train/ebpo/tau2")]
    assert written == pytest.approx([r.metrics["tau2"] for r in results], rel=1e-6)


def test_evaluation_reports_but_never_updates_the_prior(ebpo_run):
    assert ebpo_run.trainer.estimator.state_dict() == ebpo_run.state_after_train
    assert "eval_ebpo/prior_mean" in ebpo_run.eval_metrics
    # evaluation groups are blocks of num_generations_eval (2), not num_generations (4)
    assert ebpo_run.eval_metrics["eval_ebpo/num_groups"] == 8 / 2
    assert len(ebpo_run.reward.calls) > len(ebpo_run.train_calls)  # evaluation did score completions


# ---------------------------------------------------------------------- checkpoints
@pytest.mark.slow
def test_resume_continues_with_exactly_the_uninterrupted_state(tokenizer, tmp_path):
    overrides = {"max_steps": 4, "save_strategy": "steps", "save_steps": 2}
    full = build(tokenizer, tiny_args(tmp_path / "full", **overrides), RecordingReward(), cls=EBPOTrainer)
    full.train()
    checkpoint = tmp_path / "full" / "out" / "checkpoint-2"
    saved = json.loads((checkpoint / ESTIMATOR_STATE_FILE).read_text())
    assert saved["steps"] == 2
    final_saved = json.loads((tmp_path / "full" / "out" / "checkpoint-4" / ESTIMATOR_STATE_FILE).read_text())
    assert final_saved == full.estimator.state_dict()

    class Resumed(EBPOTrainer):
        def _load_optimizer_and_scheduler(self, checkpoint):
            super()._load_optimizer_and_scheduler(checkpoint)
            self.state_at_resume = self.estimator.state_dict()

    resumed = build(tokenizer, tiny_args(tmp_path / "resumed", **overrides), RecordingReward(), cls=Resumed)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    assert resumed.state_at_resume == saved
    assert resumed.estimator.state_dict() == full.estimator.state_dict()
    assert resumed.estimator.state_dict()["steps"] == 4


# ---------------------------------------------------------------------- DAPO
class HalfConstantReward:
    """Prompts with an even number always get 1 (zero-variance group); odd ones the parity."""

    __name__ = "half_constant"

    def __init__(self):
        self.calls: list[list[float]] = []

    def __call__(self, prompts, completions, **kwargs):
        out = [1.0 if int(p.split("+")[0]) % 2 == 0 else parity(c) for p, c in zip(prompts, completions, strict=True)]
        self.calls.append(out)
        return out


def test_dapo_filters_zero_variance_groups_and_shapes_overlong_rewards(tokenizer, tmp_path):
    reward = HalfConstantReward()
    trainer = build(tokenizer, tiny_args(tmp_path, "dapo", max_steps=2), reward)
    assert trainer.reward_func_names[-1] == "soft_overlong_punishment"
    trainer.train()
    expected_fracs = []
    for output, base, per_func in zip(trainer.outputs, reward.calls, trainer.rewards_per_func, strict=True):
        assert torch.equal(per_func[:, 0], torch.tensor(base))
        penalty = per_func[:, 1]  # TRL's soft overlong punishment, buffer 0.5 * 8 = 4 tokens
        assert penalty.le(0).all() and penalty.ge(-1).all()
        summed = torch.tensor(base) + 1.0 * penalty  # overlong_penalty_factor = 1
        dropped_groups = zero_variance_groups(summed, G)
        expected_fracs.append(float(dropped_groups.float().mean()))
        dropped = dropped_groups.repeat_interleave(G)
        kept_tokens = output["completion_mask"].sum(1)
        assert torch.all(kept_tokens[dropped] == 0) and torch.all(kept_tokens[~dropped] > 0)
        assert int(output["num_items_in_batch"]) == int(output["completion_mask"].sum())
        # advantages are the grpo estimator's on base + penalty (the estimator sees the summed reward)
        expected = ebpo.make_estimator("grpo", nan_policy="mask")(summed, torch.arange(len(summed)) // G)
        torch.testing.assert_close(output["advantages"], expected.advantages.float(), rtol=1e-4, atol=1e-4)
    assert sum(expected_fracs) > 0  # some group was filtered: the masking was exercised
    # the tiny model does run long: shaping was exercised
    assert torch.cat([r[:, 1] for r in trainer.rewards_per_func]).lt(0).any()
    logs = [e for e in trainer.state.log_history if "ebpo/filtered_group_frac" in e]
    assert [e["ebpo/filtered_group_frac"] for e in logs] == pytest.approx(expected_fracs)
    assert all("rewards/soft_overlong_punishment/mean" in e for e in logs)


def test_zero_variance_groups_handles_nan():
    rewards = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, float("nan"), 1.0, float("nan"), float("nan"), 0.0, float("nan"), 1.0, 1.0])
    assert zero_variance_groups(rewards, 4).tolist() == [True, False, True, False]


# ---------------------------------------------------------------------- Clip-Cov
def test_clip_cov_detaches_selected_tokens_in_the_policy_loss(tokenizer, tmp_path):
    # ratio 1 and an all-inclusive window: every token the PPO clip leaves alone is detached.
    # On the first step the policy equals the sampler (ratio 1, nothing clipped), so no gradient at all.
    args = tiny_args(tmp_path, "entropy_mech", max_steps=1, clip_cov_ratio=1.0, clip_cov_lb=-1e9, clip_cov_ub=1e9)
    trainer = build(tokenizer, args, RecordingReward(), cls=EBPOTrainer)
    trainer.train()
    log = trainer.state.log_history[0]
    assert log["reward_std"] > 0  # there was signal to learn from
    assert log["ebpo/clip_cov_frac"] == pytest.approx(1.0)
    assert log["grad_norm"] == 0.0

    # Same setup without Clip-Cov: the gradient is not zero (so the test above could fail).
    plain = build(tokenizer, tiny_args(tmp_path / "plain", "grpo", max_steps=1), RecordingReward(), cls=EBPOTrainer)
    plain.train()
    assert plain.state.log_history[0]["grad_norm"] > 0


# ---------------------------------------------------------------------- clusters and data order
def test_cluster_column_feeds_per_cluster_priors(tokenizer, tmp_path):
    # Also: one update per GENERATION batch. 2 optimizer steps x 2 accumulation steps = 4 micro-steps,
    # and with num_iterations=2 TRL generates once every 2 x 2 micro-steps: a single generation batch.
    args = tiny_args(
        tmp_path, "ebpo", max_steps=2, cluster_column="topic", per_device_train_batch_size=BATCH // 2,
        gradient_accumulation_steps=2, num_iterations=2,
        estimator_options={"per_cluster": True, "min_cluster_groups": 1},
    )
    trainer = build(tokenizer, args, RecordingReward(), cls=EBPOTrainer)
    trainer.train()
    state = trainer.estimator.state_dict()
    assert state["steps"] == 1
    labels = {label for label, _ in state["clusters"]}
    assert labels and labels <= {"algebra", "geometry", "calculus"}
    total = sum(prior["rewards"]["count"] for _, prior in state["clusters"])
    assert total == state["global"]["rewards"]["count"] == BATCH


def test_bad_inputs_raise_before_any_compute(tokenizer, tmp_path):
    from trl import GRPOConfig

    model = build_tiny_llama(tokenizer, seed=0)
    with pytest.raises(ValueError, match="cluster_column"):
        EBPOTrainer(model=model, reward_funcs=RecordingReward(), args=tiny_args(tmp_path, cluster_column="domain"),
                    train_dataset=dataset(), processing_class=tokenizer)
    with pytest.raises(ValueError, match="EBPOConfig"):
        EBPOTrainer(model=model, reward_funcs=RecordingReward(),
                    args=GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none"),
                    train_dataset=dataset(), processing_class=tokenizer)
    with pytest.raises(ValueError, match="difficulty"):
        EBPOTrainer(model=model, reward_funcs=RecordingReward(), args=tiny_args(tmp_path, data_order="difficulty"),
                    train_dataset=dataset().remove_columns("difficulty"), processing_class=tokenizer)


def test_data_order_reorders_with_the_curriculum_and_disables_shuffling(tokenizer, tmp_path):
    curriculum = pytest.importorskip("ebpo.curriculum")
    data = dataset()
    args = tiny_args(tmp_path, data_order="topic_then_difficulty", seed=7)
    trainer = build(tokenizer, args, RecordingReward(), cls=EBPOTrainer, train_dataset=data)
    order = curriculum.order_indices(
        len(data), "topic_then_difficulty", topic=data["topic"], difficulty=data["difficulty"], seed=7
    )
    assert sorted(order) == list(range(len(data))) and order != list(range(len(data)))
    assert trainer.shuffle_dataset is False
    assert trainer.train_dataset["prompt"] == [data["prompt"][i] for i in order]
    topics = trainer.train_dataset["topic"]
    assert topics == sorted(topics)  # contiguous topic blocks
    block = [d for t, d in zip(topics, trainer.train_dataset["difficulty"], strict=True) if t == topics[0]]
    assert block == sorted(block)  # easy → hard inside a block
    # TRL's sampler now walks the curriculum in order, each prompt repeated num_generations times
    assert list(trainer._get_train_sampler())[: 2 * G] == [0] * G + [1] * G


def test_kl_reference_is_a_copy_of_an_in_memory_policy(tokenizer, tmp_path):
    # TRL alone would try to reload the tiny model from its (empty) hub path and fail.
    trainer = build(tokenizer, tiny_args(tmp_path, "grpo", beta=0.01), RecordingReward(), cls=EBPOTrainer)
    assert trainer.ref_model is not None and trainer.ref_model is not trainer.model
    for (name, ours), (_, ref) in zip(trainer.model.named_parameters(), trainer.ref_model.named_parameters(), strict=True):
        assert torch.equal(ours, ref), name
        assert ours.data_ptr() != ref.data_ptr(), name
