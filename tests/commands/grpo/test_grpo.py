"""``ebpo grpo``: a YAML written for ``trl grpo`` (TRL's documented shape) runs with one added line,
``advantage_estimator: ebpo``; the trainer is EBPOTrainer and its state is in every checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("trl")

import trl  # noqa: E402

from ebpo.cli import main  # noqa: E402
from ebpo.commands.grpo.grpo_script import parse  # noqa: E402
from ebpo.integrations.trl import EBPOTrainer  # noqa: E402
from tests.commands.grpo.grpo_files import write_model_and_prompts  # noqa: E402

pytestmark = [pytest.mark.trl]

#: a `trl grpo` recipe as TRL documents it (flat GRPOConfig / ModelConfig keys, a `datasets:`
#: mixture), for a tiny local model and 2 steps
TRL_YAML = """\
model_name_or_path: {model}
datasets:
  - path: json
    data_files: {data}
reward_funcs:
  - ebpo.integrations.trl.math_reward
num_generations: 2
per_device_train_batch_size: 4
max_completion_length: 8
max_steps: 2
save_steps: 1
learning_rate: 1.0e-4
beta: 0.0
logging_steps: 1
report_to: none
use_cpu: true
bf16: false
output_dir: {out}
"""


@pytest.fixture(scope="module")
def local_model_and_data(tmp_path_factory):
    return write_model_and_prompts(
        tmp_path_factory.mktemp("grpo"), 8, num_layers=1, hidden_size=32, seed=0
    )


def write_yaml(root: Path, name: str, extra: str = "") -> Path:
    text = TRL_YAML.format(model=root / "model", data=root / "data.jsonl", out=root / name)
    path = root / f"{name}.yaml"
    path.write_text(text + extra)
    return path


def test_a_trl_grpo_yaml_runs_with_one_added_line(local_model_and_data, monkeypatch):
    root = local_model_and_data
    built: list[type] = []
    original_init = EBPOTrainer.__init__

    def recording_init(self, *args, **kwargs):
        built.append(type(self))
        original_init(self, *args, **kwargs)

    monkeypatch.setattr(EBPOTrainer, "__init__", recording_init)
    config = write_yaml(root, "run", "advantage_estimator: ebpo\n")
    assert main(["grpo", "--config", str(config)]) == 0
    assert built == [EBPOTrainer]
    assert trl.GRPOTrainer is not EBPOTrainer  # the swap ends with the run
    out = root / "run"
    assert (out / "model.safetensors").is_file()  # TRL's script saved the final model
    checkpoints = sorted(out.glob("checkpoint-*"))
    assert [c.name for c in checkpoints] == ["checkpoint-1", "checkpoint-2"]
    for step, checkpoint in enumerate(checkpoints, start=1):
        saved = json.loads((checkpoint / "ebpo_estimator_state.json").read_text())
        # the estimator saw every reward of every step: 4 completions (2 prompts x G = 2) a step
        assert saved["estimator"] == "ebpo" and saved["steps"] == step
        assert saved["global"]["rewards"]["count"] == 4 * step


def test_trl_flags_override_the_yaml_and_ours_are_parsed(local_model_and_data):
    config = write_yaml(local_model_and_data, "parsed", "advantage_estimator: ebpo\n")
    script, training, model, _ = parse(
        ["--config", str(config), "--max_steps", "7", "--use_peft", "--lora_r", "4",
         "--reward_funcs", "math_reward", "--estimator_options", '{"prior": "ema"}']
    )  # fmt: skip
    assert training.max_steps == 7 and training.advantage_estimator == "ebpo"
    assert training.estimator_options == {"prior": "ema"}
    assert model.use_peft and model.lora_r == 4
    assert script.reward_funcs == ["ebpo.integrations.trl.math_reward"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--reward_funcs", "acuracy_reward"], "reward_funcs: unknown name"),
        (["--advantage_estimator", "ebpoo"], "ebpoo"),
        (["--no_such_flag", "1"], "no_such_flag"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(local_model_and_data, capsys, argv, message):
    config = write_yaml(local_model_and_data, "bad")
    code = main(["grpo", "--config", str(config), *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and message in err and err.startswith("ebpo grpo: error:")


@pytest.mark.parametrize(
    "argv, missing",
    [
        (["--dataset_train_split", "training"], "['training']"),
        (["--eval_strategy", "steps", "--eval_steps", "1"], "['test']"),
    ],
)
def test_a_missing_split_stops_the_real_run_in_one_line(
    local_model_and_data, capsys, monkeypatch, argv, missing
):
    """TRL's script would index the loaded data and end in a KeyError traceback; the split is
    checked when the data loads, before the model does, and nothing is written."""
    import transformers

    monkeypatch.setattr(
        transformers.AutoModelForCausalLM,
        "from_pretrained",
        lambda *a, **k: pytest.fail("the model was loaded"),
    )
    config = write_yaml(local_model_and_data, "nosplit", "advantage_estimator: ebpo\n")
    code = main(["grpo", "--config", str(config), *argv])
    # datasets' own progress bar may come first ("Generating train split: …", while it loads)
    lines = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()
    err = lines[-1]
    assert code == 2, lines
    assert all(line.startswith("Generating train split") for line in lines[:-1]), lines
    assert err.startswith("ebpo grpo: error:")
    assert f"no split {missing}" in err and "its splits are ['train']" in err
    assert not (local_model_and_data / "nosplit").exists()
    assert trl.get_dataset.__name__ == "get_dataset"  # the loaders are TRL's again


def test_help_documents_the_dry_run(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["grpo", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert stop.value.code == 0
    assert "--dry-run parses the arguments exactly as a run would" in out
    assert "--advantage_estimator" in out and "ebpo grpo recipe --list" in out
    assert "ebpo docs trl" in out and "docs/" not in out.replace("ebpo docs", "")


def test_trls_resume_from_its_own_checkpoints_passes_the_output_dir_guard(local_model_and_data):
    """``output_dir`` holding a training run (TRL's own files) is TRL's: a run resumes from its
    checkpoints; a run into a folder of the user's own files is refused (tests/hostile)."""
    root = local_model_and_data
    config = write_yaml(root, "resumed", "advantage_estimator: ebpo\n")
    assert main(["grpo", "--config", str(config), "--max_steps", "1"]) == 0
    out = root / "resumed"
    assert (out / "training_args.bin").is_file() and (out / "config.json").is_file()
    flags = ["--max_steps", "2", "--resume_from_checkpoint", str(out / "checkpoint-1")]
    assert main(["grpo", "--config", str(config), *flags]) == 0
    state = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())
    assert state["global_step"] == 2
    saved = json.loads((out / "checkpoint-2" / "ebpo_estimator_state.json").read_text())
    assert saved["steps"] == 2  # the estimator went on from checkpoint-1's state


def test_a_run_that_saves_no_checkpoint_leaves_its_log_history(local_model_and_data):
    """save_strategy "no": TRL writes trainer_state.json only inside checkpoints; ebpo grpo leaves
    it in output_dir (transformers' format, the log history of every step), for ebpo compare."""
    root = local_model_and_data
    config = write_yaml(root, "nosave", "save_strategy: 'no'\n")
    assert main(["grpo", "--config", str(config)]) == 0
    out = root / "nosave"
    assert not list(out.glob("checkpoint-*"))
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 2
    logged = [e for e in state["log_history"] if "loss" in e]
    assert [e["step"] for e in logged] == [1, 2]
    assert all("ebpo/prior_count" in e for e in logged)


def test_the_dry_run_checks_the_real_model_and_says_what_stood_in(
    local_model_and_data, capsys, monkeypatch
):
    """The model's config and tokenizer are loaded here through the resolver of the real run
    (never its weights), and the summary says a tiny model stood in for it."""
    import transformers

    monkeypatch.setattr(
        transformers.AutoModelForCausalLM,
        "from_pretrained",
        lambda *a, **k: pytest.fail("the real model's weights were loaded"),
    )
    root = local_model_and_data
    config = write_yaml(root, "dry")
    assert main(["grpo", "--config", str(config), "--dry-run"]) == 0
    out = capsys.readouterr().out
    model = root / "model"
    assert (
        f"\n              resolves to {model}: LlamaForCausalLM, 1 layers, 32 hidden units, a "
        "tokenizer of 104 tokens; config and tokenizer checked, weights not loaded\n"
    ) in out
    assert f"substituted here: a tiny random Llama in place of {model} (the trainer" in out


@pytest.mark.parametrize(
    "model, said",
    [
        ("no-org/no-such-model", "not checked: a hub id not in this machine's Hugging Face cache"),
        ("/no/such/model", "not checked: no such path on this machine"),
    ],
)
def test_a_model_the_dry_run_cannot_see_is_said_unchecked(
    local_model_and_data, capsys, monkeypatch, model, said
):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = write_yaml(local_model_and_data, "dry")
    assert main(["grpo", "--config", str(config), "--model_name_or_path", model, "--dry-run"]) == 0
    assert f"  model       {model} (dtype float32)" in (out := capsys.readouterr().out)
    assert f"\n              {said}" in out


def test_a_local_model_that_does_not_resolve_stops_the_dry_run(local_model_and_data, capsys):
    """A local directory without a tokenizer: the real run would fail on it, so does its dry run."""
    root = local_model_and_data
    broken = root / "no-tokenizer"
    broken.mkdir(exist_ok=True)
    (broken / "config.json").write_text((root / "model" / "config.json").read_text())
    config = write_yaml(root, "dry")
    code = main(["grpo", "--config", str(config), "--model_name_or_path", str(broken), "--dry-run"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"ebpo grpo: error: model {str(broken)!r} does not resolve")
