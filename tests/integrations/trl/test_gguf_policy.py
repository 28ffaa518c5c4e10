"""ebpo.integrations.trl.gguf_policy: which model names ebpo loads for TRL (a GGUF file), with
what dtype, and the tokenizer it hands over. The real SmolLM2 run: tests/commands/grpo/
test_grpo_smollm.py."""

from __future__ import annotations

import logging
import types

import pytest
import torch

pytest.importorskip("trl")

from ebpo.integrations.trl import gguf_policy  # noqa: E402


@pytest.fixture
def loads(monkeypatch):
    calls: list[tuple] = []

    def fake_load(name, *, dtype, device):
        calls.append((name, dtype, device))
        tokenizer = types.SimpleNamespace(padding_side="right", truncation_side="right")
        return f"model:{name}", tokenizer

    monkeypatch.setattr(gguf_policy, "load_model_and_tokenizer", fake_load)
    return calls


@pytest.mark.parametrize(
    "init, dtype",
    [
        (None, "float32"),
        ({"dtype": "bfloat16"}, "bfloat16"),
        ({"dtype": torch.float16}, torch.float16),
    ],
    ids=["TRL's default", "named", "a torch dtype"],
)
def test_a_gguf_name_is_loaded_in_the_configs_dtype_with_a_left_padded_tokenizer(
    loads, init, dtype
):
    args = types.SimpleNamespace(model_init_kwargs=init)
    model, tokenizer, loaded = gguf_policy.load_gguf_policy("w/m.Q4.gguf", args, None)
    assert loaded and model == "model:w/m.Q4.gguf" and loads == [("w/m.Q4.gguf", dtype, "cpu")]
    assert tokenizer.padding_side == tokenizer.truncation_side == "left"  # as TRL loads one
    mine = object()
    _, kept, _ = gguf_policy.load_gguf_policy("smollm2-135m", args, mine)
    assert kept is mine


@pytest.mark.parametrize("model", ["Qwen/Qwen3-0.6B", "./checkpoints/run", torch.nn.Linear(1, 1)])
def test_anything_else_goes_to_trl_unchanged(loads, model):
    args = types.SimpleNamespace(model_init_kwargs={"dtype": "bfloat16"})
    assert gguf_policy.load_gguf_policy(model, args, None) == (model, None, False)
    assert loads == []


def test_only_trls_ignored_kwargs_warning_is_left_out(caplog):
    logger = logging.getLogger("trl.trainer.grpo_trainer")
    ignored = "You passed `model_init_kwargs` ..., but your model is already instantiated. ..."
    with caplog.at_level(logging.WARNING, logger=logger.name):
        with gguf_policy.model_init_kwargs_used(True):
            logger.warning(ignored)
            logger.warning("another warning")
        with gguf_policy.model_init_kwargs_used(False):
            logger.warning(ignored)
        logger.warning(ignored)
    assert [r.getMessage() for r in caplog.records] == ["another warning", ignored, ignored]
