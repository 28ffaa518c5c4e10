"""What a TRL run says about its estimator: the line at the start, the line on resume (the
checkpoint and the prior's count), and transformers' missing-``lm_head.weight`` notice left out
only where the tensor is tied to one that was loaded."""

from __future__ import annotations

import json
import re

import pytest
import safetensors.torch
import torch

pytest.importorskip("trl")

import transformers.trainer  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import LlamaForCausalLM  # noqa: E402

import ebpo  # noqa: E402
from ebpo.evaluation.models import build_char_tokenizer, build_tiny_llama  # noqa: E402
from ebpo.integrations.trl import ESTIMATOR_STATE_FILE, EBPOTrainer, make_config  # noqa: E402
from ebpo.integrations.trl.notices import (  # noqa: E402
    estimator_line,
    restored_line,
    tied_missing_keys,
)

pytestmark = pytest.mark.trl


def parity_reward(completions, **kwargs):
    return [float(sum(map(ord, c)) % 2) for c in completions]


def trainer(tmp_path, **overrides):
    tokenizer = build_char_tokenizer()
    options = {
        "output_dir": str(tmp_path / "out"),
        "num_generations": 2,
        "per_device_train_batch_size": 4,
        "max_completion_length": 4,
        "max_steps": 2,
        "beta": 0.0,
        "logging_steps": 1,
        "report_to": "none",
        "save_strategy": "steps",
        "save_steps": 1,
        "bf16": False,
        "use_cpu": True,
        "seed": 0,
    }
    args = make_config("ebpo", **{**options, **overrides})
    model = build_tiny_llama(tokenizer, num_layers=1, hidden_size=32, num_heads=2, seed=0)
    data = Dataset.from_dict({"prompt": [f"{i}+{i}=" for i in range(8)]})
    return EBPOTrainer(
        model=model,
        reward_funcs=parity_reward,
        args=args,
        train_dataset=data,
        processing_class=tokenizer,
    )


def test_a_run_names_its_estimator_once_and_a_resume_the_state_it_restored(
    tmp_path, capsys, monkeypatch
):
    first = trainer(tmp_path / "a")
    first.train()
    start = capsys.readouterr().out.splitlines()
    lines = [line for line in start if line.startswith("EBPOTrainer: ")]
    assert lines == [estimator_line("ebpo", first.estimator, first.args)]
    assert lines[0].startswith(
        "EBPOTrainer: advantage estimator ebpo: EBPO(prior='history', half_life=50.0, "
    )
    assert "nan_policy='mask'" in lines[0] and "4 completions = 2 prompts x G 2" in lines[0]

    warnings: list[str] = []
    monkeypatch.setattr(
        transformers.trainer.logger, "warning", lambda msg, *a, **k: warnings.append(str(msg))
    )
    checkpoint = tmp_path / "a" / "out" / "checkpoint-1"
    saved = json.loads((checkpoint / ESTIMATOR_STATE_FILE).read_text())
    resumed = trainer(tmp_path / "b")
    resumed.train(resume_from_checkpoint=str(checkpoint))
    out = [line for line in capsys.readouterr().out.splitlines() if line.startswith("EBPO")]
    assert out[0] == lines[0]
    assert out[1] == (
        f"EBPOTrainer: estimator state (ebpo) restored from {checkpoint}: 1 update, "
        "prior_count 4 (rewards in the prior)"
    )
    assert saved["global"]["rewards"]["count"] == 4 and len(out) == 2
    # the tiny Llama ties lm_head to the embedding: transformers' "missing keys" notice is gone
    assert not [w for w in warnings if "missing keys" in w], warnings
    model = resumed.model
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


def test_the_restored_line_says_what_each_kind_of_state_holds():
    assert restored_line("c", {"estimator": "grpo"}) == (
        "EBPOTrainer: estimator state (grpo) restored from c: no running statistics"
    )
    jspo = {"estimator": "jspo_plus_plus", "steps": 3, "weight": 2.0}
    assert restored_line("c", jspo, ", x").endswith("from c: 3 updates, x")
    estimator = ebpo.make_estimator("ebpo")
    estimator(torch.tensor([0.0, 1.0, 1.0, 1.0]), torch.tensor([0, 0, 1, 1]))
    assert restored_line("c", estimator.state_dict()).endswith(
        "from c: 1 update, prior_count 4 (rewards in the prior)"
    )


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_only_a_tied_missing_key_counts_as_loaded(tmp_path, tied):
    """What transformers' notice says on resume, checked: the saved file of a tied model lacks
    lm_head.weight, and loading it still gives lm_head the saved embedding (one tensor)."""
    tokenizer = build_char_tokenizer()
    config = build_tiny_llama(tokenizer, num_layers=1, hidden_size=32, num_heads=2).config
    config.tie_word_embeddings = tied
    torch.manual_seed(1)
    LlamaForCausalLM(config).save_pretrained(tmp_path)
    state = safetensors.torch.load_file(str(tmp_path / "model.safetensors"))
    assert ("lm_head.weight" in state) is not tied
    if not tied:
        del state["lm_head.weight"]  # a checkpoint that really lacks it
    torch.manual_seed(2)
    model = LlamaForCausalLM(config)
    result = model.load_state_dict(state, False)
    assert result.missing_keys == ["lm_head.weight"]
    assert tied_missing_keys(model, result.missing_keys) == (["lm_head.weight"] if tied else [])
    embedding = state["model.embed_tokens.weight"]
    assert torch.equal(model.lm_head.weight, embedding) is tied


def test_other_missing_keys_are_still_reported(tmp_path, monkeypatch):
    built = trainer(tmp_path)
    warnings: list[str] = []
    monkeypatch.setattr(
        transformers.trainer.logger, "warning", lambda msg, *a, **k: warnings.append(str(msg))
    )
    result = torch.nn.modules.module._IncompatibleKeys(["lm_head.weight", "model.norm.weight"], [])
    built._issue_warnings_after_load(result)
    assert len(warnings) == 1 and re.search(r"\['model\.norm\.weight'\]", warnings[0])


def test_a_caller_that_owns_the_console_turns_the_lines_off(tmp_path, capsys):
    """``ebpo train --quiet`` sets ``announce = False`` (ebpo.lab.train.trainer)."""
    quiet = trainer(tmp_path, max_steps=1, save_strategy="no")
    quiet.announce = False
    quiet.train()
    assert "EBPOTrainer: advantage estimator" not in capsys.readouterr().out
