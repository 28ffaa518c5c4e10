"""EBPOTrainer end to end on the tiny local Llama (2 layers, width 128): advantages, logs, eval,
parity with TRL's GRPOTrainer, checkpoint/resume, DAPO filtering and overlong shaping, Clip-Cov,
clusters, data order, defaults."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")

from datasets import Dataset  # noqa: E402
from transformers import TrainerState  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

import ebpo  # noqa: E402
from ebpo.analysis.compare.runs import read_run  # noqa: E402
from ebpo.estimators.validation import stable_key_hash  # noqa: E402
from ebpo.evaluation.models import build_char_tokenizer, build_tiny_llama  # noqa: E402
from ebpo.integrations.trl import (  # noqa: E402
    ESTIMATOR_STATE_FILE,
    GENERATION_STATE_FILE,
    EBPOConfig,
    EBPOTrainer,
    has_lone_response_baseline,
    make_config,
    save_and_resume,
    zero_variance_groups,
)
from ebpo.utils.checkpoints import incomplete_reason  # noqa: E402
from tests.integrations.trl.conftest import assert_resume_continues_the_run  # noqa: E402

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


def parity_reward(completions, **kwargs):
    return [parity(c) for c in completions]


class RecordingReward:
    """Parity of the completion's characters.

    With ``unscorable_first``: ``None`` (unscorable) for the first completion of a call, and for
    completions 5-7, so that the second group has one scored completion (a lone response).
    """

    __name__ = "parity"

    def __init__(self, unscorable_first: bool = False) -> None:
        self.unscorable_first = unscorable_first
        self.calls: list[list[float]] = []

    def __call__(self, completions, **kwargs):
        out = [parity(c) for c in completions]
        if self.unscorable_first:
            for i in (0, 5, 6, 7):
                out[i] = None
        self.calls.append([float("nan") if r is None else r for r in out])
        return out


class PatchyReward:
    """Parity, with holes chosen by the group's position ``j`` in the call (groups are contiguous):

    ``j % 4 == 0``: None for every completion (an unscorable group); ``j % 4 == 1``: only the first
    completion is scored (a lone response); ``j % 4 == 2``: 1 for every completion (constant
    accuracy), except None for the second; ``j % 4 == 3``: parity.
    """

    __name__ = "patchy"

    def __init__(self) -> None:
        self.calls: list[list[float]] = []

    def __call__(self, completions, **kwargs):
        out: list[float | None] = []
        for i, completion in enumerate(completions):
            j, k = divmod(i, G)
            if j % 4 == 0 or (j % 4 == 1 and k > 0) or (j % 4 == 2 and k == 1):
                out.append(None)
            else:
                out.append(1.0 if j % 4 == 2 else parity(completion))
        self.calls.append([float("nan") if r is None else r for r in out])
        return out


#: the untrained tiny model rarely ends a completion before max_completion_length; a bias on <eos>
#: (generation only) gives completions of every length, so the overlong punishment varies
VARIED_LENGTHS = {"generation_kwargs": {"sequence_bias": [[[2], 2.0]]}}


def length_reward(completions, **kwargs):
    """A continuous second objective."""
    return [len(c) / 8 for c in completions]


class Recording:
    """Records what the estimator produced and what the loss received (mixed into a trainer class)."""

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
        self.outputs.append(
            {k: v.clone() for k, v in output.items() if isinstance(v, torch.Tensor)}
        )
        n = output["advantages"].numel()
        self.logged_advantages.append(list(self._logs["advantages"])[-n:])
        return output

    def _compute_loss(self, model, inputs):
        self.loss_advantages.append(inputs["advantages"].detach().clone())
        return super()._compute_loss(model, inputs)


class RecordingTrainer(Recording, EBPOTrainer):
    pass


class RecordingGRPOTrainer(Recording, GRPOTrainer):
    pass


def tiny_options(tmp_path: Path, **overrides) -> dict:
    return {
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


def tiny_args(tmp_path: Path, preset: str = "ebpo", **overrides):
    return make_config(preset, **tiny_options(tmp_path, **overrides))


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
        root,
        per_device_eval_batch_size=8,
        num_generations_eval=2,
        eval_strategy="no",
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
    for output, result, logged in zip(
        run.trainer.outputs, results, run.trainer.logged_advantages, strict=False
    ):
        torch.testing.assert_close(output["advantages"], result.advantages.float())
        # the completions table shows our advantages, not TRL's
        torch.testing.assert_close(torch.tensor(logged), result.advantages.float())
    # unscorable completions (reward None → NaN) get no advantage and stay out of the prior; the lone
    # scored completion of group 2 keeps EBPO's advantage (the prior is its baseline)
    assert has_lone_response_baseline("ebpo")
    for output in run.trainer.outputs[:3]:
        assert output["advantages"][0] == 0 and (output["advantages"][5:8] == 0).all()
        assert output["advantages"][4] != 0
    assert run.state_after_train == estimator.state_dict()
    assert run.state_after_train["global"]["rewards"]["count"] == 3 * (BATCH - 4)
    # the loss got exactly these advantages (TRL shuffles rows after scoring)
    for output, seen in zip(run.trainer.outputs[:3], run.trainer.loss_advantages[:3], strict=True):
        assert torch.equal(output["advantages"].sort().values, seen.sort().values)


def test_advantages_differ_from_trls_grpo(ebpo_run):
    """Guard against the override silently not applying: EBPO ≠ TRL's group-scaled GRPO here."""
    rewards = torch.tensor(ebpo_run.train_calls[-1]).view(-1, G)
    grpo = (rewards - rewards.nanmean(1, keepdim=True)) / (
        rewards.std(1, keepdim=True).nan_to_num(0) + 1e-4
    )
    assert not torch.allclose(
        ebpo_run.trainer.outputs[2]["advantages"], grpo.flatten().nan_to_num(0), atol=1e-3
    )


def test_estimator_metrics_reach_trl_logs(ebpo_run):
    _, results = replay(ebpo_run.train_calls)
    logs = [entry for entry in ebpo_run.trainer.state.log_history if "ebpo/prior_mean" in entry]
    assert len(logs) == 3
    for entry, result in zip(logs, results, strict=True):
        for key in (
            "prior_mean",
            "sigma2",
            "tau2",
            "shrinkage_mean",
            "zero_variance_group_frac",
            "zero_signal_group_frac",
        ):
            assert entry[f"ebpo/{key}"] == pytest.approx(result.metrics[key]), key
        assert entry["ebpo/grpo_zero_signal_group_frac"] == pytest.approx(
            result.metrics["zero_variance_group_frac"]
        )


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
    for key in (
        "prior_mean",
        "tau2",
        "shrinkage_mean",
        "grpo_zero_signal_group_frac",
        "zero_signal_group_frac",
    ):
        assert f"train/ebpo/{key}" in tags, key
    written = [e.value for e in events.Scalars("train/ebpo/tau2")]
    assert written == pytest.approx([r.metrics["tau2"] for r in results], rel=1e-6)


def test_evaluation_reports_but_never_updates_the_prior(ebpo_run):
    assert ebpo_run.trainer.estimator.state_dict() == ebpo_run.state_after_train
    assert "eval_ebpo/prior_mean" in ebpo_run.eval_metrics
    # evaluation groups are blocks of num_generations_eval (2), not num_generations (4): 8 / 2 = 4
    # groups, of which the fourth (completions 6 and 7) has no scored completion
    assert ebpo_run.eval_metrics["eval_ebpo/num_groups"] == 3
    assert len(ebpo_run.reward.calls) > len(
        ebpo_run.train_calls
    )  # evaluation did score completions


# ---------------------------------------------------------------------- checkpoints
@pytest.mark.slow
def test_resume_continues_with_exactly_the_uninterrupted_state(tokenizer, tmp_path):
    overrides = {"max_steps": 4, "save_strategy": "steps", "save_steps": 2}
    full = build(
        tokenizer, tiny_args(tmp_path / "full", **overrides), RecordingReward(), cls=EBPOTrainer
    )
    full.train()
    checkpoint = tmp_path / "full" / "out" / "checkpoint-2"
    saved = json.loads((checkpoint / ESTIMATOR_STATE_FILE).read_text())
    assert saved["steps"] == 2
    final_saved = json.loads(
        (tmp_path / "full" / "out" / "checkpoint-4" / ESTIMATOR_STATE_FILE).read_text()
    )
    assert final_saved == full.estimator.state_dict()

    class Resumed(EBPOTrainer):
        def _load_optimizer_and_scheduler(self, checkpoint):
            super()._load_optimizer_and_scheduler(checkpoint)
            self.state_at_resume = self.estimator.state_dict()

    resumed = build(
        tokenizer, tiny_args(tmp_path / "resumed", **overrides), RecordingReward(), cls=Resumed
    )
    resumed.train(resume_from_checkpoint=str(checkpoint))
    assert resumed.state_at_resume == saved
    assert resumed.estimator.state_dict() == full.estimator.state_dict()
    assert resumed.estimator.state_dict()["steps"] == 4


#: two ways a checkpoint falls inside a generation batch: 2 optimizer steps per generation batch
INSIDE_A_GENERATION_BATCH = {
    "steps_per_generation": {"gradient_accumulation_steps": 2, "steps_per_generation": 4},
    "num_iterations": {"gradient_accumulation_steps": 2, "num_iterations": 2},
}


def resumable_args(tmp_path: Path, setting: str, preset: str = "ebpo", **overrides):
    # 8 completions per micro-step, 4 micro-steps per generation batch: 4 optimizer steps = 2 batches
    return tiny_args(
        tmp_path,
        preset,
        max_steps=4,
        per_device_train_batch_size=8,
        save_strategy="steps",
        save_steps=1,
        **INSIDE_A_GENERATION_BATCH[setting],
        **overrides,
    )


@pytest.mark.parametrize("setting", sorted(INSIDE_A_GENERATION_BATCH))
def test_resume_inside_a_generation_batch_is_exact(tokenizer, tmp_path, setting):
    full = build(tokenizer, resumable_args(tmp_path / "full", setting), RecordingReward())
    full.train()
    assert full.estimator.state_dict()["steps"] == 2 and len(full.outputs) == 2
    checkpoint = (
        tmp_path / "full" / "out" / "checkpoint-1"
    )  # after micro-step 2 of 4 of the first batch
    cycle = json.loads((checkpoint / GENERATION_STATE_FILE).read_text())
    assert (cycle["micro_step"], cycle["generate_every"]) == (2, 4)
    assert cycle["estimator_state_before_batch"] == ebpo.make_estimator("ebpo").state_dict()
    assert (checkpoint / "ebpo_generation_buffer_0.pt").exists()
    assert not (
        tmp_path / "full" / "out" / "checkpoint-2" / "ebpo_generation_buffer_0.pt"
    ).exists()  # a boundary

    resumed = build(tokenizer, resumable_args(tmp_path / "resumed", setting), RecordingReward())
    assert_resume_continues_the_run(full, resumed, checkpoint)


def test_jspo_plus_plus_resumes_with_the_uninterrupted_smoothing_state(tokenizer, tmp_path):
    """Checkpoints carry any stateful estimator, not only EBPO: JSPO++'s smoothing of λ and the
    mean (0.999: the EMA remembers within two steps) resumes inside a generation batch exactly."""

    def args(run):
        return resumable_args(
            tmp_path / run,
            "steps_per_generation",
            "jspo_plus_plus",
            estimator_options={"smooth_coef": 0.999},
        )

    full = build(tokenizer, args("full"), RecordingReward())
    full.train()
    final = full.estimator.state_dict()
    assert isinstance(full.estimator, ebpo.JSPOPlusPlus) and final["steps"] == 2
    assert (
        final["weight"] > 1
    )  # the first batch still counts: the state is more than the last batch
    checkpoint = tmp_path / "full" / "out" / "checkpoint-1"  # inside the first generation batch
    assert json.loads((checkpoint / ESTIMATOR_STATE_FILE).read_text())["steps"] == 1
    before = json.loads((checkpoint / GENERATION_STATE_FILE).read_text())[
        "estimator_state_before_batch"
    ]
    assert (
        before
        == ebpo.make_estimator("jspo_plus_plus", smooth_coef=0.999, nan_policy="mask").state_dict()
    )

    assert_resume_continues_the_run(
        full, build(tokenizer, args("resumed"), RecordingReward()), checkpoint
    )


class PromptRecordingReward(RecordingReward):
    """Parity, recording the prompt of every completion too."""

    def __init__(self) -> None:
        super().__init__()
        self.prompts: list[list[str]] = []

    def __call__(self, completions, prompts, **kwargs):
        self.prompts.append(list(prompts))
        return super().__call__(completions, **kwargs)


def test_spo_tracks_each_prompt_by_its_text_and_resumes_exactly(tokenizer, tmp_path):
    """SPO's tracker is keyed by the prompt's text (not the group's position), is what a fresh SPO
    fed the same batches with those keys holds, and resumes inside a generation batch exactly."""

    def args(run):
        return resumable_args(tmp_path / run, "steps_per_generation", "spo")

    reward = PromptRecordingReward()
    full = build(tokenizer, args("full"), reward)
    full.train()
    final = full.estimator.state_dict()
    assert isinstance(full.estimator, ebpo.estimators.SPO) and final["steps"] == 2
    replayed = ebpo.make_estimator("spo", nan_policy="mask")
    for rewards, prompts, output in zip(reward.calls, reward.prompts, full.outputs, strict=True):
        expected = replayed(
            torch.tensor(rewards),
            torch.arange(len(rewards)) // G,
            prompt_keys=[stable_key_hash(p) for p in prompts],
        )
        torch.testing.assert_close(output["advantages"], expected.advantages.float())
    assert replayed.state_dict() == final
    # the trainer hands the estimator each prompt's hash; the tracker stores the hash of that key
    prompts = {p for call in reward.prompts for p in call}
    assert set(final["prompts"]["keys"]) == {stable_key_hash(stable_key_hash(p)) for p in prompts}

    checkpoint = tmp_path / "full" / "out" / "checkpoint-1"  # inside the first generation batch
    assert_resume_continues_the_run(
        full, build(tokenizer, args("resumed"), RecordingReward()), checkpoint
    )


def test_checkpoints_written_after_a_resume_are_the_uninterrupted_runs(tokenizer, tmp_path):
    # a generation batch spans 4 optimizer steps: checkpoints 5-7 fall inside the second one
    settings = {
        "max_steps": 8,
        "per_device_train_batch_size": 8,
        "steps_per_generation": 4,
        "save_strategy": "steps",
        "save_steps": 1,
    }
    full = build(tokenizer, tiny_args(tmp_path / "full", **settings), RecordingReward())
    full.train()
    resumed = build(tokenizer, tiny_args(tmp_path / "resumed", **settings), RecordingReward())
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "out" / "checkpoint-5"))
    for step in (6, 7, 8):
        theirs, ours = (
            tmp_path / run / "out" / f"checkpoint-{step}" for run in ("full", "resumed")
        )
        for name in (ESTIMATOR_STATE_FILE, GENERATION_STATE_FILE):
            assert json.loads((ours / name).read_text()) == json.loads(
                (theirs / name).read_text()
            ), (step, name)
        buffer = "ebpo_generation_buffer_0.pt"
        assert (ours / buffer).exists() == (theirs / buffer).exists() == (step < 8)
        if step < 8:
            for a, b in zip(torch.load(theirs / buffer), torch.load(ours / buffer), strict=True):
                assert a.keys() == b.keys() and all(
                    torch.equal(a[k], b[k]) for k in a if isinstance(a[k], torch.Tensor)
                )
    assert (
        json.loads(
            (tmp_path / "full" / "out" / "checkpoint-6" / GENERATION_STATE_FILE).read_text()
        )["estimator_state_before_batch"]["steps"]
        == 1
    )


def test_an_incomplete_checkpoint_is_refused_and_true_takes_the_newest_complete_one(
    tokenizer, tmp_path, caplog
):
    setting = "steps_per_generation"
    full = build(tokenizer, resumable_args(tmp_path / "full", setting), RecordingReward())
    full.train()
    out = tmp_path / "full" / "out"
    assert all(incomplete_reason(out / f"checkpoint-{step}") is None for step in (1, 2, 3, 4))

    # a checkpoint inside a generation batch that lost its buffered batch: refused, nothing trained
    (out / "checkpoint-1" / "ebpo_generation_buffer_0.pt").unlink()
    refused = build(tokenizer, resumable_args(tmp_path / "refused", setting), RecordingReward())
    with pytest.raises(
        ValueError,
        match=r"checkpoint-1' is not a complete checkpoint: ebpo_generation_buffer_0\.pt is missing; "
        r"the newest complete one beside it is .*checkpoint-4'",
    ):
        refused.train(resume_from_checkpoint=str(out / "checkpoint-1"))
    assert refused.outputs == [] and refused.state.global_step == 0

    # resume_from_checkpoint=True passes over the newest checkpoint, which lost its RNG state
    (out / "checkpoint-4" / "rng_state.pth").unlink()
    again = build(tokenizer, resumable_args(tmp_path / "full", setting), RecordingReward())
    with caplog.at_level("WARNING", logger="ebpo.integrations.trl.save_and_resume"):
        again.train(resume_from_checkpoint=True)
    assert (
        "checkpoint-4 is incomplete (rng_state.pth is missing): resuming from checkpoint-3"
        in caplog.text
    )
    assert again.estimator.state_dict() == full.estimator.state_dict()
    for (name, a), (_, b) in zip(
        full.model.named_parameters(), again.model.named_parameters(), strict=True
    ):
        torch.testing.assert_close(a, b, msg=name, rtol=0, atol=0)
    assert incomplete_reason(out / "checkpoint-4") is None  # written again, complete


def test_resume_with_another_generation_layout_warns_and_counts_each_batch_once(
    tokenizer, tmp_path, caplog
):
    full = build(
        tokenizer,
        resumable_args(tmp_path / "full", "steps_per_generation"),
        RecordingReward(),
        cls=EBPOTrainer,
    )
    full.train()
    checkpoint = tmp_path / "full" / "out" / "checkpoint-1"  # micro-step 2 of a 4-step cycle
    # the resumed run generates every 2 micro-steps instead of 4
    other_layout = tiny_args(
        tmp_path / "resumed",
        max_steps=4,
        per_device_train_batch_size=8,
        gradient_accumulation_steps=2,
        steps_per_generation=2,
    )
    resumed = build(tokenizer, other_layout, RecordingReward())
    with caplog.at_level("WARNING", logger="ebpo.integrations.trl.save_and_resume"):
        resumed.train(resume_from_checkpoint=str(checkpoint))
    assert "inside a generation batch" in caplog.text and "generation layout changed" in caplog.text
    # the interrupted batch is generated again and counted once: the estimator resumed from its
    # state before that batch (no batch yet) and counted each batch the resumed run generated
    assert len(resumed.outputs) == 3
    assert resumed.estimator.state_dict()["steps"] == 3


def test_a_checkpoint_is_marked_complete_last_and_older_ones_go_only_then(
    tokenizer, tmp_path, monkeypatch
):
    seen = []
    real_mark = save_and_resume.mark_complete

    def mark(path, **kwargs):
        present = sorted(p.name for p in Path(path).iterdir())
        others = sorted(p.name for p in Path(path).parent.glob("checkpoint-*"))
        seen.append((Path(path).name, present, others))
        real_mark(path, **kwargs)

    monkeypatch.setattr(save_and_resume, "mark_complete", mark)
    args = tiny_args(tmp_path, save_strategy="steps", save_steps=1, save_total_limit=1)
    build(tokenizer, args, RecordingReward(), cls=EBPOTrainer).train()
    assert [name for name, _, _ in seen] == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]
    for name, present, others in seen:
        # everything is written when the marker is; ours, TRL's and the RNG state included
        assert {
            "model.safetensors",
            "optimizer.pt",
            "scheduler.pt",
            "rng_state.pth",
            "trainer_state.json",
            ESTIMATOR_STATE_FILE,
            GENERATION_STATE_FILE,
        } <= set(present), present
        # the previous (complete) checkpoint is still there: the limit of 1 is applied afterwards
        step = int(name.split("-")[1])
        assert others == sorted({f"checkpoint-{step - 1}", name} - {"checkpoint-0"}), others
    out = tmp_path / "out"
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-3"]
    assert incomplete_reason(out / "checkpoint-3") is None


# ---------------------------------------------------------------------- DAPO
def test_dapo_filters_on_accuracy_and_never_scores_unscored_completions(tokenizer, tmp_path):
    reward = PatchyReward()
    trainer = build(tokenizer, tiny_args(tmp_path, "dapo", max_steps=2, **VARIED_LENGTHS), reward)
    assert tokenizer.eos_token_id == 2
    assert trainer.reward_func_names[-1] == "soft_overlong_punishment"
    trainer.train()
    nan = float("nan")
    constant_accuracy_but_varying_reward = 0
    for output, base, per_func in zip(
        trainer.outputs, reward.calls, trainer.rewards_per_func, strict=True
    ):
        accuracy = torch.tensor(base)
        torch.testing.assert_close(per_func[:, 0], accuracy, equal_nan=True)
        penalty = per_func[:, 1]  # TRL's soft overlong punishment, buffer 0.5 * 8 = 4 tokens
        unscored = accuracy.isnan()
        # a completion no user reward function scored gets no penalty either: it stays unscored
        assert penalty[unscored].isnan().all()
        assert penalty[~unscored].le(0).all() and penalty[~unscored].ge(-1).all()
        summed = (accuracy + penalty).view(-1, G)  # overlong_penalty_factor = 1

        # grpo advantages on accuracy + penalty; unscored and lone completions get 0 (as in TRL)
        lone = (~unscored).view(-1, G).sum(1, keepdim=True) == 1
        masked = torch.where(lone, nan, summed).flatten()
        expected = ebpo.make_estimator("grpo", nan_policy="mask", eps=1e-4)(  # TRL's eps
            masked, torch.arange(len(masked)) // G
        )
        torch.testing.assert_close(
            output["advantages"], expected.advantages.float(), rtol=1e-4, atol=1e-4
        )
        assert (output["advantages"][unscored] == 0).all()
        assert (output["advantages"].view(-1, G)[lone.squeeze(1)] == 0).all()

        # the filter compares accuracy, not accuracy + penalty
        dropped = zero_variance_groups(accuracy, G)
        constant_accuracy_but_varying_reward += int(
            (dropped & ~zero_variance_groups(summed.flatten(), G)).sum()
        )
        kept_tokens = output["completion_mask"].sum(1).view(-1, G)
        assert torch.all(kept_tokens[dropped] == 0) and torch.all(kept_tokens[~dropped] > 0)
        assert int(output["num_items_in_batch"]) == int(output["completion_mask"].sum())
    assert constant_accuracy_but_varying_reward > 0  # the accuracy/reward distinction was exercised
    assert (
        torch.cat([r[:, 1] for r in trainer.rewards_per_func]).lt(0).any()
    )  # the tiny model runs long
    logs = [e for e in trainer.state.log_history if "ebpo/filtered_group_frac" in e]
    assert len(logs) == 2
    for entry, base, per_func in zip(logs, reward.calls, trainer.rewards_per_func, strict=True):
        assert entry["ebpo/filtered_group_frac"] == pytest.approx(
            float(zero_variance_groups(torch.tensor(base), G).float().mean())
        )
        assert "rewards/soft_overlong_punishment/mean" in entry
        # TRL's own reward metric leaves the unscored completions out too
        summed = per_func[:, 0] + per_func[:, 1]
        assert entry["reward"] == pytest.approx(float(summed.nanmean()), rel=1e-5)
        # TRL's GRPO keeps a lone completion in the batch statistics (advantage 0)
        assert entry["ebpo/num_responses"] == float((~summed.isnan()).sum())


def test_dapo_filter_can_compare_the_full_reward(tokenizer, tmp_path):
    reward = PatchyReward()
    trainer = build(
        tokenizer,
        tiny_args(tmp_path, "dapo", max_steps=1, filter_groups_metric="reward", **VARIED_LENGTHS),
        reward,
    )
    trainer.train()
    (output,), (per_func,) = trainer.outputs, trainer.rewards_per_func
    dropped = zero_variance_groups(per_func[:, 0] + per_func[:, 1], G)
    assert not torch.equal(
        dropped, zero_variance_groups(per_func[:, 0], G)
    )  # not the accuracy filter
    kept_tokens = output["completion_mask"].sum(1).view(-1, G)
    assert torch.all(kept_tokens[dropped] == 0) and torch.all(kept_tokens[~dropped] > 0)


# ---------------------------------------------------------------------- parity with TRL's GRPOTrainer
def first_step(tokenizer, tmp_path, cls, args, reward):
    trainer = build(tokenizer, args, reward, cls=cls)
    trainer.train()
    return trainer.outputs[0], trainer.rewards_per_func[0]


@pytest.mark.parametrize(
    ("scale_rewards", "reward"),
    [("group", PatchyReward), ("none", PatchyReward), ("batch", lambda: length_reward)],
)
def test_grpo_reproduces_trls_grpo_trainer(tokenizer, tmp_path, scale_rewards, reward):
    """Same model, seed and rollouts: EBPOTrainer's ``grpo`` (with TRL's eps 1e-4) gives TRL's advantages,
    unscorable and lone completions (0) included."""
    common = tiny_options(tmp_path, max_steps=1, scale_rewards=scale_rewards)
    theirs, their_rewards = first_step(
        tokenizer, tmp_path / "trl", RecordingGRPOTrainer, GRPOConfig(**common), reward()
    )
    args = make_config(
        "grpo", **{**common, "output_dir": str(tmp_path / "ours")}, estimator_options={"eps": 1e-4}
    )
    ours, our_rewards = first_step(tokenizer, tmp_path / "ebpo", RecordingTrainer, args, reward())
    assert torch.equal(theirs["completion_ids"], ours["completion_ids"])  # same rollouts
    torch.testing.assert_close(their_rewards, our_rewards, equal_nan=True)
    torch.testing.assert_close(ours["advantages"], theirs["advantages"])


def test_normalize_then_sum_reproduces_trls_gdpo(tokenizer, tmp_path):
    """multi_objective_aggregation="normalize_then_sum": the estimator gets TRL's per-function normalised
    sum. TRL then normalises it over the batch, which is ``reinforce_pp_baseline`` with eps 1e-4 here
    (the sum has group mean 0), so the advantages must agree."""
    common = tiny_options(
        tmp_path,
        max_steps=1,
        multi_objective_aggregation="normalize_then_sum",
        reward_weights=[1.0, 0.5],
    )
    rewards = [RecordingReward(), length_reward]
    theirs, their_rewards = first_step(
        tokenizer, tmp_path / "trl", RecordingGRPOTrainer, GRPOConfig(**common), rewards
    )
    args = make_config("reinforce_pp_baseline", **common, estimator_options={"eps": 1e-4})
    ours, our_rewards = first_step(
        tokenizer, tmp_path / "ebpo", RecordingTrainer, args, [RecordingReward(), length_reward]
    )
    assert torch.equal(theirs["completion_ids"], ours["completion_ids"])
    torch.testing.assert_close(their_rewards, our_rewards)
    torch.testing.assert_close(ours["advantages"], theirs["advantages"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "preset",
    [
        "grpo",
        "dr_grpo",
        "rloo",
        "jspo",
        "jspo_plus_plus",
        "reinforce_pp_baseline",
        "ebpo",
        "ebpo_bb",
        "ebpo_batch",
    ],
)
def test_lone_completions_get_zero_advantage_unless_the_estimator_has_a_prior(
    tokenizer, tmp_path, preset
):
    reward = PatchyReward()
    args = tiny_args(tmp_path, preset, max_steps=1)
    trainer = build(tokenizer, args, reward)
    trainer.train()
    rewards = torch.tensor(reward.calls[0])
    scored = ~rewards.isnan()
    lone = scored & (scored.view(-1, G).sum(1, keepdim=True) == 1).expand(-1, G).flatten()
    assert lone.any() and (scored.view(-1, G).sum(1) == G - 1).any()  # lone and uneven groups
    advantages = trainer.outputs[0]["advantages"]
    prior = has_lone_response_baseline(args.advantage_estimator)
    assert prior == preset.startswith("ebpo")
    # the preset's estimator (ebpo_batch: the authors' batch prior) on the gathered rewards
    replay = ebpo.make_estimator(args.advantage_estimator, **args.estimator_kwargs)(
        rewards if prior else rewards.masked_fill(lone, float("nan")),
        torch.arange(len(rewards)) // G,
    )
    torch.testing.assert_close(advantages, replay.advantages.float())
    if prior:
        assert (advantages[lone] != 0).all()
    else:
        assert (advantages[lone] == 0).all()


def test_args_none_builds_the_default_config_as_grpo_trainer_does(tokenizer, tmp_path, monkeypatch):
    import transformers.training_args

    # TRL's default is bf16=True, which this CPU-only machine rejects in both trainers alike; pretend
    # bf16 is available to compare the configs the two trainers build.
    monkeypatch.setattr(transformers.training_args, "is_torch_bf16_gpu_available", lambda: True)
    monkeypatch.chdir(tmp_path)
    model = build_tiny_llama(tokenizer, num_layers=2, hidden_size=128, seed=0)
    model.config._name_or_path = "org/tiny-model"
    theirs = GRPOTrainer(
        model=model, reward_funcs=parity_reward, train_dataset=dataset(), processing_class=tokenizer
    ).args
    ours = EBPOTrainer(
        model=model, reward_funcs=parity_reward, train_dataset=dataset(), processing_class=tokenizer
    ).args
    assert type(ours) is EBPOConfig
    assert (theirs.output_dir, ours.output_dir) == ("tiny-model-GRPO", "tiny-model-EBPO")
    assert ours.advantage_estimator == "ebpo" and ours.estimator_kwargs == {"nan_policy": "mask"}
    assert ours.scale_rewards is None  # the estimator decides
    differ = {"output_dir", "logging_dir", "scale_rewards"}
    mine, trls = ours.to_dict(), theirs.to_dict()
    assert {k for k in trls if k not in differ and mine[k] != trls[k]} == set()


def test_the_estimator_is_built_once_per_trainer(tokenizer, tmp_path, monkeypatch):
    """The estimator EBPOConfig builds to check its settings is the trainer's (before: two, one
    thrown away); a second trainer of the same configuration gets its own, and so does a trainer
    of a configuration whose estimator settings changed after it was built."""
    built = []  # as tests/estimators/counting.py (which the two-process worker cannot import)
    constructor = ebpo.AdvantageEstimator.__init__

    def counted(self, **options):
        built.append(type(self).name)
        constructor(self, **options)

    monkeypatch.setattr(ebpo.AdvantageEstimator, "__init__", counted)
    args = tiny_args(tmp_path, "ebpo_batch")
    first = build(tokenizer, args, RecordingReward(), cls=EBPOTrainer)
    assert built == ["ebpo"]
    assert "_ebpo_estimator" not in vars(args)  # nothing of it left to pickle with the config
    second = build(tokenizer, args, RecordingReward(), cls=EBPOTrainer)
    assert built == ["ebpo", "ebpo"] and second.estimator is not first.estimator
    changed = tiny_args(tmp_path, "ebpo_batch")
    changed.estimator_options = {**changed.estimator_options, "normalize": "center"}
    assert build(tokenizer, changed, RecordingReward(), cls=EBPOTrainer).estimator.normalize == (
        "center"
    )
    assert built == ["ebpo"] * 4  # the config's (checked, not handed on) and the trainer's


# ---------------------------------------------------------------------- Clip-Cov
def test_clip_cov_detaches_selected_tokens_in_the_policy_loss(tokenizer, tmp_path):
    # ratio 1 and an all-inclusive window: every token the PPO clip leaves alone is detached.
    # On the first step the policy equals the sampler (ratio 1, nothing clipped), so no gradient at all.
    args = tiny_args(
        tmp_path, "entropy_mech", max_steps=1, clip_cov_ratio=1.0, clip_cov_lb=-1e9, clip_cov_ub=1e9
    )
    trainer = build(tokenizer, args, RecordingReward(), cls=EBPOTrainer)
    trainer.train()
    log = trainer.state.log_history[0]
    assert log["reward_std"] > 0  # there was signal to learn from
    assert log["ebpo/clip_cov_frac"] == pytest.approx(1.0)
    assert log["grad_norm"] == 0.0

    # Same setup without Clip-Cov: the gradient is not zero (so the test above could fail).
    plain = build(
        tokenizer,
        tiny_args(tmp_path / "plain", "grpo", max_steps=1),
        RecordingReward(),
        cls=EBPOTrainer,
    )
    plain.train()
    assert plain.state.log_history[0]["grad_norm"] > 0


# ---------------------------------------------------------------------- clusters and data order
def test_cluster_column_feeds_per_cluster_priors(tokenizer, tmp_path):
    # Also: one update per GENERATION batch. 2 optimizer steps x 2 accumulation steps = 4 micro-steps,
    # and with num_iterations=2 TRL generates once every 2 x 2 micro-steps: a single generation batch.
    args = tiny_args(
        tmp_path,
        "ebpo",
        max_steps=2,
        cluster_column="topic",
        per_device_train_batch_size=BATCH // 2,
        gradient_accumulation_steps=2,
        num_iterations=2,
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
        EBPOTrainer(
            model=model,
            reward_funcs=RecordingReward(),
            args=tiny_args(tmp_path, cluster_column="domain"),
            train_dataset=dataset(),
            processing_class=tokenizer,
        )
    with pytest.raises(ValueError, match="EBPOConfig"):
        EBPOTrainer(
            model=model,
            reward_funcs=RecordingReward(),
            args=GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none"),
            train_dataset=dataset(),
            processing_class=tokenizer,
        )
    with pytest.raises(ValueError, match="difficulty"):
        EBPOTrainer(
            model=model,
            reward_funcs=RecordingReward(),
            args=tiny_args(tmp_path, data_order="difficulty"),
            train_dataset=dataset().remove_columns("difficulty"),
            processing_class=tokenizer,
        )


def test_data_order_reorders_with_the_curriculum_and_disables_shuffling(tokenizer, tmp_path):
    curriculum = pytest.importorskip("ebpo.curriculum")
    data = dataset()
    args = tiny_args(tmp_path, data_order="topic_then_difficulty", seed=7)
    trainer = build(tokenizer, args, RecordingReward(), cls=EBPOTrainer, train_dataset=data)
    order = curriculum.order_indices(
        len(data),
        "topic_then_difficulty",
        topic=data["topic"],
        difficulty=data["difficulty"],
        seed=7,
    )
    assert sorted(order) == list(range(len(data))) and order != list(range(len(data)))
    assert trainer.shuffle_dataset is False
    assert trainer.train_dataset["prompt"] == [data["prompt"][i] for i in order]
    topics = trainer.train_dataset["topic"]
    assert topics == sorted(topics)  # contiguous topic blocks
    block = [
        d
        for t, d in zip(topics, trainer.train_dataset["difficulty"], strict=True)
        if t == topics[0]
    ]
    assert block == sorted(block)  # easy → hard inside a block
    # TRL's sampler now walks the curriculum in order, each prompt repeated num_generations times
    assert list(trainer._get_train_sampler())[: 2 * G] == [0] * G + [1] * G


def test_kl_reference_is_a_copy_of_an_in_memory_policy(tokenizer, tmp_path):
    # TRL alone would try to reload the tiny model from its (empty) hub path and fail.
    trainer = build(
        tokenizer, tiny_args(tmp_path, "grpo", beta=0.01), RecordingReward(), cls=EBPOTrainer
    )
    assert trainer.ref_model is not None and trainer.ref_model is not trainer.model
    for (name, ours), (_, ref) in zip(
        trainer.model.named_parameters(), trainer.ref_model.named_parameters(), strict=True
    ):
        assert torch.equal(ours, ref), name
        assert ours.data_ptr() != ref.data_ptr(), name


def test_token_weighted_estimators_get_the_completion_token_counts(tokenizer, tmp_path):
    # reinforce_pp_verl whitens over tokens as verl does: the trainer must hand it each
    # completion's token count (completion_mask row sums), in the order of the gathered rewards.
    args = tiny_args(tmp_path, "reinforce_pp_verl", max_steps=1)
    reward = RecordingReward()
    trainer = build(tokenizer, args, reward)
    trainer.train()
    output = trainer.outputs[0]
    counts = output["completion_mask"].sum(1).cpu()
    rewards = torch.tensor(reward.calls[0])
    group_ids = torch.arange(len(rewards)) // G
    expected = ebpo.make_estimator("reinforce_pp_verl", nan_policy="mask")(
        rewards, group_ids, token_counts=counts
    )
    torch.testing.assert_close(output["advantages"], expected.advantages.float())
    uniform = ebpo.make_estimator("reinforce_pp_verl", nan_policy="mask")(
        rewards, group_ids, token_counts=torch.ones_like(counts)
    )
    assert not torch.allclose(expected.advantages, uniform.advantages)  # the counts mattered


def test_the_summary_gives_the_fraction_of_batches_without_signal(ebpo_run):
    history = ebpo_run.trainer.state.log_history
    per_step = [
        e["ebpo/zero_signal_group_frac"] for e in history if "ebpo/zero_signal_group_frac" in e
    ]
    assert len(per_step) == 3
    (summary,) = [e for e in history if "train_runtime" in e]
    assert summary["ebpo/no_signal_batch_frac"] == sum(f == 1 for f in per_step) / 3 < 1


def test_the_log_history_is_left_in_output_dir_without_any_checkpoint(ebpo_run):
    """save_strategy "no": no checkpoint, yet <output_dir>/trainer_state.json holds the run's log
    history in transformers' own format (what ``ebpo compare`` reads), written at the end of
    train() (the fixture's evaluate() afterwards is not in it)."""
    out = ebpo_run.output_dir
    assert not list(out.glob("checkpoint-*"))
    saved = TrainerState.load_from_json(str(out / "trainer_state.json"))
    assert saved.global_step == 3
    train_history = [e for e in ebpo_run.trainer.state.log_history if "eval_loss" not in e]
    assert saved.log_history == json.loads(json.dumps(train_history))
    assert [e["step"] for e in saved.log_history if "loss" in e] == [1, 2, 3]
    assert "train_runtime" in saved.log_history[-1]
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]  # renamed into place
    # and the config beside it, as save_model writes it: ebpo compare reads estimator and seed
    run = read_run(str(out))
    assert (run.kind, run.estimator, run.seed) == ("trl", "ebpo", str(ebpo_run.trainer.args.seed))
