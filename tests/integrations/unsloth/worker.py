"""Runs of Unsloth's GRPO and of ebpo's EBPOTrainer over it, in a process of their own (``import
unsloth`` has to come before trl and transformers, and chooses its path once): ``python
worker.py PATH MODEL_DIR OUT_DIR`` writes ``OUT_DIR/results.json``.

PATH ``cpu``: Unsloth's CPU backend (no GPU): ``trl.GRPOTrainer`` stays TRL's; the model is loaded by
``FastLanguageModel`` with LoRA (``get_peft_model``), as in Unsloth's notebooks.
PATH ``cuda``: Unsloth on a real GPU (tests/gpu/test_unsloth_cuda.py): the generated trainer,
``FastLanguageModel`` with LoRA, 4-bit where bitsandbytes is installed, under ``full_determinism``.
PATH ``gpu-path``: Unsloth's GPU-path trainer on the CPU, through Unsloth's test switch
``UNSLOTH_ALLOW_CPU=1`` (the caller sets it) and ``patch_trl_rl_trainers()``: ``trl.GRPOTrainer`` is
the generated ``UnslothGRPOTrainer``. ``FastLanguageModel`` cannot load there (CPU torch has no CUDA),
so a plain transformers model gets no-op ``for_training`` / ``for_inference``.

Jobs: ``unsloth`` (Unsloth's own GRPOTrainer) and ``grpo`` (EBPOTrainer, advantage_estimator grpo),
3 steps each, same seed; ``ebpo`` (EBPOTrainer, its default estimator); ``grpo_bn``, ``spo``, ``krpo``,
``opo`` and the user's ``running_mean`` (tests/fixtures/user_estimator, named by file path in
``estimator_module``), 2 steps each; ``clip_cov`` (refused on the generated trainer); for ``ebpo``
and ``spo``: ``full_<estimator>`` (4 steps, a checkpoint at step 2) and ``resumed_<estimator>``
(resumed from it). Every generation batch's rewards, prompts, completion token counts and
advantages are recorded, so the test can replay the core estimator on them."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import unsloth  # noqa: F401  (first: it patches trl and transformers)

PATH, MODEL, OUT = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
CUDA = PATH == "cuda"
#: 4-bit needs bitsandbytes, which the CPU environment leaves out
BNB = CUDA and importlib.util.find_spec("bitsandbytes") is not None
if PATH == "gpu-path":
    from unsloth.models.rl import patch_trl_rl_trainers

    patch_trl_rl_trainers()

import torch  # noqa: E402
import trl  # noqa: E402
from datasets import Dataset  # noqa: E402

from ebpo.integrations.trl.checkpoint_files import ESTIMATOR_STATE_FILE  # noqa: E402
from ebpo.integrations.unsloth import GENERATED, EBPOConfig, EBPOTrainer  # noqa: E402

G, STEPS = 4, 3
LOGGED = ("loss", "reward", "grad_norm")
#: estimators new to the Unsloth suite (issue 51): each trains 2 steps on every path
NEW_ESTIMATORS = ("grpo_bn", "spo", "krpo", "opo")
#: a user's own estimators, written outside the package
USER_ESTIMATORS = Path(__file__).parents[2] / "fixtures" / "user_estimator" / "my_estimator.py"
#: what each trainer's _generate_and_score_completions returned (keys, advantages' shape and dtype,
#: their values) and what it scored (summed rewards, prompts, completion token counts)
OUTPUTS: dict[str, list] = {}


def parity_reward(completions, **kwargs):
    return [float((len(c) + sum(map(ord, c))) % 2) for c in completions]


def recording(trainer_class, job: str):
    """``trainer_class`` recording the keys of every generation batch it hands to the loss."""

    class Recording(trainer_class):
        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
            rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            self.scored = {"rewards": rewards.sum(1).tolist(), "prompts": list(prompts)}
            return rewards

        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            advantages = output["advantages"]
            OUTPUTS.setdefault(job, []).append(
                {
                    "keys": sorted(output),
                    "advantages": [list(advantages.shape), str(advantages.dtype)],
                    "same_device": advantages.device == output["completion_ids"].device,
                    "values": advantages.tolist(),
                    "tokens": output["completion_mask"].sum(1).tolist(),
                    **self.scored,
                }
            )
            return output

    return Recording


def load_model(lora: bool):
    """The policy and its tokenizer, loaded afresh for every run (same weights, same LoRA init)."""
    torch.manual_seed(0)
    if lora:
        from unsloth import FastLanguageModel

        model, tokenizer = FastLanguageModel.from_pretrained(
            str(MODEL), max_seq_length=64, load_in_4bit=BNB, fast_inference=False
        )
        model = FastLanguageModel.get_peft_model(
            model, r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], random_state=0
        )
        return model, tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(MODEL))
    model.for_training = model.for_inference = lambda *args, **kwargs: None
    return model, AutoTokenizer.from_pretrained(str(MODEL))


def run(
    job, config_class, trainer_class, resume=None, lora=PATH != "gpu-path", prompts=16, **settings
):
    model, tokenizer = load_model(lora)
    options = {
        "output_dir": str(OUT / job), "use_cpu": not CUDA, "seed": 0, "full_determinism": CUDA,
        "report_to": "none", "save_strategy": "no", "logging_steps": 1, "max_steps": STEPS,
        "num_generations": G, "per_device_train_batch_size": 2 * G, "max_completion_length": 6,
        "learning_rate": 1e-2, "beta": 0.04, "generation_kwargs": {"sequence_bias": [[[2], 2.0]]},
    }  # fmt: skip
    if not CUDA:  # Unsloth's defaults (8-bit AdamW) need bitsandbytes and a GPU
        options.update(bf16=False, fp16=False, optim="adamw_torch")
    elif not BNB:
        options.update(optim="adamw_torch")
    args = config_class(**{**options, **settings})
    data = Dataset.from_list([{"prompt": f"{a}+{a}="} for a in range(prompts)])
    trainer = recording(trainer_class, job)(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[parity_reward],
        args=args,
        train_dataset=data,
    )
    trainer.train(resume_from_checkpoint=resume)
    logs = [{k: h[k] for k in LOGGED if k in h} for h in trainer.state.log_history if "loss" in h]
    result = {"logs": logs, "optim": str(args.optim)}
    if isinstance(trainer, EBPOTrainer):
        result["estimator"] = trainer.estimator.state_dict()
        result["estimator_kwargs"] = args.estimator_kwargs
        result["ebpo_metrics"] = sorted(
            {k for h in trainer.state.log_history for k in h if k.startswith("ebpo/")}
        )
    trainable = [p.detach().clone() for p in trainer.model.parameters() if p.requires_grad]
    torch.save(trainable, OUT / f"{job}.pt")
    return result


def config_checks() -> dict:
    """EBPOConfig over the config in place: EBPO's defaults and checks run inside its __init__."""
    out = str(OUT / "defaults")
    default = EBPOConfig(out)
    centred = EBPOConfig(out, scale_rewards="none")
    try:
        EBPOConfig(out, scale_rewards="group")  # the ebpo estimator cannot honour it
        refused = ""
    except ValueError as error:
        refused = str(error)
    return {
        "estimator": default.advantage_estimator,
        "scale_rewards": default.scale_rewards,
        "unsloth_fields": hasattr(default, "unsloth_num_chunks"),
        "centred_kwargs": centred.estimator_kwargs,
        "refused": refused,
    }


def resume_runs(estimator: str, prompts: int = 16) -> dict:
    """``full_<estimator>`` (4 steps, checkpoints every 2) and ``resumed_<estimator>`` (resumed from
    its step-2 checkpoint), and the estimator state in that checkpoint; ``prompts``: the dataset's
    size."""
    saving = {
        "save_strategy": "steps", "save_steps": 2, "max_steps": 4, "beta": 0.0,
        "advantage_estimator": estimator, "prompts": prompts,
    }  # fmt: skip
    full = run(f"full_{estimator}", EBPOConfig, EBPOTrainer, **saving)
    checkpoint = OUT / f"full_{estimator}" / "checkpoint-2"
    saved = json.loads((checkpoint / ESTIMATOR_STATE_FILE).read_text())
    resumed = run(f"resumed_{estimator}", EBPOConfig, EBPOTrainer, resume=str(checkpoint), **saving)
    return {"full": full, "resumed": resumed, "checkpoint_state": saved}


def main() -> None:
    results = {
        "path": PATH,
        "four_bit": BNB,
        "generated": GENERATED,
        "trl_grpo_trainer": trl.GRPOTrainer.__name__,
        "ebpo_bases": [c.__name__ for c in EBPOTrainer.__mro__[1:4]],
        # Unsloth's config defaults as EBPOConfig keeps them (no argument given)
        "default_optim": str(EBPOConfig(output_dir=str(OUT / "defaults")).optim),
        "stock_default_optim": str(trl.GRPOConfig(output_dir=str(OUT / "defaults")).optim),
    }
    results["config"] = config_checks()
    results["unsloth"] = run("unsloth", trl.GRPOConfig, trl.GRPOTrainer)
    results["grpo"] = run("grpo", EBPOConfig, EBPOTrainer, advantage_estimator="grpo")
    results["ebpo"] = run("ebpo", EBPOConfig, EBPOTrainer)  # the default estimator
    for name in NEW_ESTIMATORS:
        results[name] = run(name, EBPOConfig, EBPOTrainer, advantage_estimator=name, max_steps=2)
    results["running_mean"] = run(
        "running_mean", EBPOConfig, EBPOTrainer, max_steps=2,
        advantage_estimator="running_mean", estimator_module=str(USER_ESTIMATORS),
    )  # fmt: skip
    try:
        run("clip_cov", EBPOConfig, EBPOTrainer, clip_cov_ratio=0.1, max_steps=1)
        results["clip_cov"] = "trained"
    except ValueError as error:
        results["clip_cov"] = str(error)
    # ebpo's checkpoints through Unsloth's save and resume. Beta 0 (TRL's default): with beta > 0
    # and a LoRA model TRL adds a "ref" adapter, and a resumed run then differs from step 3 on,
    # under Unsloth's own GRPOTrainer too (measured: step 3's grad norm 0.07532 uninterrupted,
    # 0.07702 resumed).
    results["resume_ebpo"] = resume_runs("ebpo")
    # 4 prompts, 2 or 4 a step: steps 3-4 see prompts of steps 1-2 again, so SPO's advantages
    # there depend on the tracker restored from the checkpoint
    results["resume_spo"] = resume_runs("spo", prompts=4)
    results["outputs"] = OUTPUTS
    (OUT / "results.json").write_text(json.dumps(results, default=str))


if __name__ == "__main__":
    os.chdir(OUT)  # Unsloth writes its compiled cache into the working directory
    main()
