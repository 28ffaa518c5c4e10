"""The TRL recipes shipped with the package (``ebpo/integrations/trl/recipes/<model>/<method>.yaml``,
``ebpo grpo recipe --list``): every one dry-runs
(``ebpo grpo --config R --dry-run``: parsed as a real run, EBPOTrainer built on a tiny model,
stopped), has the paper's settings, and has exactly its paper preset's method settings — so a
recipe and ``PAPER_METHODS`` cannot drift apart. The files are discovered: a new recipe is tested
without being listed, and a missing one fails the count."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

pytest.importorskip("trl")
pytest.importorskip("peft")

import ebpo  # noqa: E402
from ebpo.cli import main  # noqa: E402
from ebpo.commands.grpo import dry_run as dry_run_module  # noqa: E402
from ebpo.commands.grpo.dry_run import METHOD_FIELDS  # noqa: E402
from ebpo.curriculum import is_contiguous  # noqa: E402
from ebpo.data import load_dataset  # noqa: E402
from ebpo.evaluation.models import save_tiny_llama  # noqa: E402
from ebpo.integrations.trl import (  # noqa: E402
    PAPER_METHODS,
    EBPOTrainer,
    available_presets,
    make_config,
)
from ebpo.integrations.trl.recipes import RECIPES_DIR as RECIPES_PACKAGE_DIR  # noqa: E402

pytestmark = [pytest.mark.trl]

REPO = Path(__file__).resolve().parents[3]
RECIPES_DIR = RECIPES_PACKAGE_DIR
RECIPES = sorted(RECIPES_DIR.glob("**/*.yaml"))
FIXTURES = REPO / "tests" / "fixtures" / "datasets"

#: recipe (file stem) -> the preset of PAPER_METHODS whose method settings it must have
METHOD_PRESETS = {
    "ebpo_batch": "ebpo_batch",
    "ebpo_topic": "ebpo_batch",
    "ebpo_diff": "ebpo_batch",
    "grpo": "grpo",
    "dr_grpo": "dr_grpo",
    "dapo": "dapo",
    "entropy_mech": "entropy_mech",
}
#: model directory -> (hub id, LoRA?, dtype, learning rate)
MODELS = {
    "qwen3-1.7b": ("Qwen/Qwen3-1.7B", False, "float32", 1e-6),
    "qwen3-8b-lora": ("Qwen/Qwen3-8B", True, "bfloat16", 1e-5),
}
#: the paper's batch (recipes/verl): G (the issue's 8), prompts per step, PPO mini-batch in prompts
G, PROMPTS_PER_STEP, MINI_BATCH_PROMPTS = 8, 512, 128
NODE_PROCESSES = 8
#: YAML keys that may differ between the two models of one method, and between the methods of
#: one model (beyond the method fields of the presets)
MODEL_KEYS = {
    "model_name_or_path", "dtype", "use_peft", "lora_r", "lora_alpha", "lora_dropout",
    "lora_target_modules", "learning_rate", "vllm_gpu_memory_utilization", "output_dir",
    "dataset_name",  # ebpo_diff only (tested with the recipe)
}  # fmt: skip
METHOD_KEYS = {
    *METHOD_FIELDS, "data_order", "shuffle_dataset", "num_train_epochs",
    "estimator_options", "output_dir", "dataset_name",
}  # fmt: skip


def recipe_id(path: Path) -> str:
    return path.relative_to(RECIPES_DIR).with_suffix("").as_posix()


def run_dry(argv: list[str], monkeypatch) -> tuple[int, list]:
    """``ebpo grpo ARGV --dry-run`` through the CLI; (exit code, the DryRun objects built)."""
    built: list = []
    original = dry_run_module.dry_run

    def recording(*args, **kwargs):
        built.append(original(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(dry_run_module, "dry_run", recording)
    return main(["grpo", *argv, "--dry-run"]), built


@pytest.fixture(autouse=True)
def _offline_elsewhere(tmp_path, monkeypatch):
    # data/ebpo (the recipes' dataset_name) is relative: run where it does not exist, so the dry
    # run takes its synthetic rows whatever the developer has under the repository.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_every_method_has_a_recipe_for_each_model():
    found = sorted(recipe_id(p) for p in RECIPES)
    assert found == sorted(f"{m}/{k}" for m in MODELS for k in METHOD_PRESETS)
    assert len(found) == 14


@pytest.mark.parametrize("recipe", RECIPES, ids=recipe_id)
def test_recipe_dry_runs_with_the_paper_settings(recipe, monkeypatch, capsys, tmp_path):
    model_dir, method = recipe.parent.name, recipe.stem
    preset = METHOD_PRESETS[method]
    code, built = run_dry(["--config", str(recipe)], monkeypatch)
    out = capsys.readouterr().out
    assert code == 0 and len(built) == 1
    run = built[0]
    config, trainer = run.config, run.trainer
    assert out.startswith(f"ebpo grpo --dry-run: {recipe} parsed as a real run")
    assert f"paper preset: {preset}\n" in out

    # The trainer is ours, with the recipe's estimator, built with the CPU substitutions.
    assert isinstance(trainer, EBPOTrainer)
    assert trainer.args.advantage_estimator == config.advantage_estimator
    assert type(trainer.estimator) is type(ebpo.make_estimator(config.advantage_estimator))
    assert trainer.args.estimator_kwargs == config.estimator_kwargs
    assert not trainer.args.use_vllm and not trainer.args.bf16 and trainer.args.use_cpu

    # Method settings = the preset's, on every field any paper preset sets (as a run parses them,
    # and as the trainer got them).
    reference = make_config(preset, output_dir=str(tmp_path), use_cpu=True, bf16=False)
    for field in METHOD_FIELDS:
        assert getattr(config, field) == getattr(reference, field), field
        assert getattr(trainer.args, field) == getattr(reference, field), field
    assert run.preset == preset

    # The paper's run on one node: G = 8, 512 prompts a generation batch, PPO mini-batch 128.
    assert config.num_generations == G
    assert config.generation_batch_size == PROMPTS_PER_STEP * G
    optimizer_step = (
        config.per_device_train_batch_size * config.gradient_accumulation_steps * NODE_PROCESSES
    )
    assert optimizer_step == MINI_BATCH_PROMPTS * G
    steps_per_batch = config.generation_batch_size // optimizer_step  # optimizer steps a paper step
    assert steps_per_batch == 4 and config.num_iterations == 1
    assert (config.eval_strategy, config.eval_steps) == ("steps", 5 * steps_per_batch)
    assert config.eval_on_start and config.num_generations_eval == 8
    assert (config.save_strategy, config.save_steps) == ("steps", 10 * steps_per_batch)
    assert config.use_vllm and config.vllm_mode == "colocate" and config.bf16
    assert not config.vllm_importance_sampling_correction and not config.use_bias_correction_kl
    assert (config.max_completion_length, config.temperature, config.top_p) == (8192, 1.0, 1.0)
    assert config.vllm_max_model_length == 4096 + 8192
    assert config.lr_scheduler_type == "constant" and config.weight_decay == 0.01
    # prepare_data.sh's directories; difficulty is the model's own pass rate: ebpo_diff reads a
    # directory prepared for its model
    order = "file" if method.startswith("ebpo") else "shuffle"
    data_dir = (
        "data/ebpo-" + model_dir.removesuffix("-lora") if method == "ebpo_diff" else "data/ebpo"
    )
    assert run.script_args.dataset_name == f"{data_dir}/trl/{order}"
    assert run.script_args.dataset_config is None
    assert (run.script_args.dataset_train_split, run.script_args.dataset_test_split) == (
        "train",
        "test",
    )
    assert run.script_args.reward_funcs == ["ebpo.integrations.trl.math_reward"]
    assert config.output_dir == f"runs/trl/{model_dir}/{method}"

    # The model: the full fine-tune or LoRA, with the learning rate that goes with it.
    hub_id, lora, dtype, learning_rate = MODELS[model_dir]
    model_args = run.model_args
    assert (model_args.model_name_or_path, model_args.use_peft) == (hub_id, lora)
    assert (model_args.dtype, config.learning_rate) == (dtype, learning_rate)
    trainable = {n: p for n, p in trainer.model.named_parameters() if p.requires_grad}
    if lora:
        assert type(trainer.model).__name__.startswith("Peft")
        assert (model_args.lora_r, model_args.lora_dropout) == (32, 0.0)
        assert trainable and all("lora_" in n for n in trainable)
        # the adapters train in fp32 over the bf16 base; the reference is the base without them
        assert {p.dtype for p in trainable.values()} == {torch.float32}
        frozen = {p.dtype for p in trainer.model.parameters() if not p.requires_grad}
        assert frozen == {torch.bfloat16} and trainer.ref_model is None
        # every linear layer of the tiny Llama carries an adapter (all-linear), not the lm_head
        adapted = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in trainable}
        assert adapted == {
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        }
    else:
        assert len(trainable) == len(list(trainer.model.parameters()))
        assert {p.dtype for p in trainable.values()} == {torch.float32}
        # a separate reference model exactly when the method has a KL term
        assert (trainer.ref_model is not None) == (config.beta > 0)

    # The data order of the method, applied to the rows the trainer got.
    rows = trainer.train_dataset
    if method == "ebpo_batch":
        assert config.data_order == "shuffle"
        assert not config.shuffle_dataset
    elif method == "ebpo_topic":
        assert config.data_order == "topic"
        assert not config.shuffle_dataset and is_contiguous(rows["topic"])
        assert len(set(rows["topic"])) == 2
    elif method == "ebpo_diff":
        assert config.data_order == "difficulty"
        assert rows["difficulty"] == sorted(rows["difficulty"]) and config.num_train_epochs == 1
    else:
        assert config.data_order == "shuffle"
        assert config.shuffle_dataset
    if method not in ("ebpo_diff",):
        assert config.num_train_epochs == 20

    # The ground truth reaches the reward through TRL's columns: a correct answer scores 1.
    assert run.rewards["math_reward"] == 1.0
    if method == "dapo":
        assert run.rewards["soft_overlong_punishment"] == 0.0  # a short completion
    assert "synthetic rows" in run.data


def test_a_recipe_named_after_a_preset_is_that_preset():
    """One name, one meaning: ``ebpo.yaml`` would read as the ``ebpo`` preset (the history
    prior), so the batch-prior recipe is ``ebpo_batch.yaml``; the dry-run test above checks that
    each recipe has its METHOD_PRESETS preset."""
    named = {m: p for m, p in METHOD_PRESETS.items() if m in available_presets()}
    assert named and all(preset == method for method, preset in named.items())
    assert set(METHOD_PRESETS) - set(named) == {"ebpo_topic", "ebpo_diff"}  # the paper's names


@pytest.mark.parametrize("method", list(METHOD_PRESETS))
def test_the_two_models_of_a_method_differ_only_in_the_model(method):
    small, large = (
        yaml.safe_load((RECIPES_DIR / m / f"{method}.yaml").read_text()) for m in MODELS
    )
    differ = {k for k in small.keys() | large.keys() if small.get(k) != large.get(k)}
    assert differ <= MODEL_KEYS, differ - MODEL_KEYS


@pytest.mark.parametrize("model_dir", list(MODELS))
def test_the_methods_of_a_model_share_everything_but_the_method(model_dir):
    recipes = {
        m: yaml.safe_load((RECIPES_DIR / model_dir / f"{m}.yaml").read_text())
        for m in METHOD_PRESETS
    }
    base = recipes["grpo"]
    for method, recipe in recipes.items():
        differ = {k for k in base.keys() | recipe.keys() if base.get(k) != recipe.get(k)}
        assert differ <= METHOD_KEYS, (method, differ - METHOD_KEYS)


@pytest.mark.parametrize(
    "flags",
    [["--beta", "0.0"], ["--epsilon_high", "0.28"], ["--advantage_estimator", "dr_grpo"]],
)
def test_a_changed_method_setting_matches_no_preset(flags, monkeypatch, capsys):
    code, built = run_dry(
        ["--config", str(RECIPES_DIR / "qwen3-1.7b" / "grpo.yaml"), *flags], monkeypatch
    )
    assert code == 0 and built[0].preset is None
    assert "paper preset: none" in capsys.readouterr().out


@pytest.mark.parametrize("name, in_yaml", [("dapo", False), ("entropy_mech", True)])
def test_a_trainer_preset_as_estimator_is_refused_with_its_settings_written_out(
    name, in_yaml, tmp_path, monkeypatch, capsys
):
    """``advantage_estimator`` takes estimators and named variants; a paper preset that also sets
    the trainer (dapo, entropy_mech) named there is one line, exit 2, giving the flags that
    reproduce it — and those flags, given, are the preset."""
    recipe = RECIPES_DIR / "qwen3-1.7b" / "grpo.yaml"
    if in_yaml:
        text = recipe.read_text().replace(
            "advantage_estimator: grpo", f"advantage_estimator: {name}"
        )
        recipe = tmp_path / "recipe.yaml"
        recipe.write_text(text)
    flag = [] if in_yaml else ["--advantage_estimator", name]
    code, built = run_dry(["--config", str(recipe), *flag], monkeypatch)
    err = capsys.readouterr().err.strip()
    assert code == 2 and not built and len(err.splitlines()) == 1
    assert f"advantage_estimator {name!r} is a paper preset that also sets the trainer" in err
    written = err.split("write it out as ")[1].split(" (the same keys")[0]

    code, built = run_dry(["--config", str(RECIPES_DIR / "qwen3-1.7b" / "grpo.yaml"),
                           *shlex.split(written)], monkeypatch)  # fmt: skip
    assert code == 0
    reference = make_config(name, output_dir=str(tmp_path), use_cpu=True, bf16=False)
    for field in METHOD_FIELDS:
        assert getattr(built[0].config, field) == getattr(reference, field), field
    assert built[0].preset == (name if name in PAPER_METHODS else None)


def prepare_data(cwd: Path, data_dir: str, *args: str) -> None:
    """``ebpo grpo prepare-data --out-dir data_dir ARGS`` in ``cwd``, offline: the hub datasets
    come from the fixture copies (``EBPO_DATA_DIR``), only AIME 2024 is prepared for evaluation."""
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",  # ebpo
        "EBPO_DATA_DIR": str(FIXTURES),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
    }
    done = subprocess.run(
        [sys.executable, "-m", "ebpo", "grpo", "prepare-data", "--out-dir", data_dir,
         "--eval", "aime-2024", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    for order in ("file", "shuffle"):
        assert f"wrote {data_dir}/trl/{order}: train.parquet" in done.stdout


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    """``ebpo grpo prepare-data``'s directory for the fixture rows, with topic and pass-rate
    labels (as the commands of the recipes' README give them)."""
    root = tmp_path_factory.mktemp("data")
    rows = load_dataset("dapo-math-17k", data_files=FIXTURES / "dapo-math-17k.parquet")
    labels = [
        {"id": r["id"], "topic": ["Geometry", "Algebra"][i % 2], "pass_rate": [0.5, 0.9, 0.1][i]}
        for i, r in enumerate(rows)
    ]
    (root / "labels.jsonl").write_text("".join(json.dumps(r) + "\n" for r in labels))
    prepare_data(root, "ebpo", "--labels", "labels.jsonl")
    return root / "ebpo"


@pytest.mark.parametrize("method", ["ebpo_topic", "ebpo_diff", "dapo"])
def test_dry_run_on_the_prepared_data(prepared, method, monkeypatch):
    recipe = RECIPES_DIR / "qwen3-1.7b" / f"{method}.yaml"
    data = prepared / "trl" / ("shuffle" if method == "dapo" else "file")
    code, built = run_dry(["--config", str(recipe), "--dataset_name", str(data)], monkeypatch)
    assert code == 0
    run = built[0]
    trainer = run.trainer
    assert run.data.startswith(f"{data}: train 3 rows, test 2 rows (2 topics in train)")
    # the rows TRL's script loaded: the DAPO template as a chat turn, AIME 2024 for evaluation
    prompt = trainer.train_dataset[0]["prompt"]
    assert prompt[0]["role"] == "user" and "Answer:" in prompt[0]["content"]
    assert [r["data_source"] for r in trainer.eval_dataset] == ["aime-2024", "aime-2024"]
    # the ground truth (reward_model.ground_truth) reaches math_reward through TRL's columns
    assert run.rewards["math_reward"] == 1.0
    if method == "ebpo_topic":
        assert is_contiguous(trainer.train_dataset["topic"])
    if method == "ebpo_diff":  # easy -> hard: 1 - pass rate
        assert list(trainer.train_dataset["difficulty"]) == pytest.approx([0.1, 0.5, 0.9])


def test_a_data_directory_without_its_test_split_is_one_line_and_exit_2(
    prepared, tmp_path, monkeypatch, capsys
):
    copy = tmp_path / "ebpo"
    shutil.copytree(prepared, copy, symlinks=True)
    (copy / "trl" / "file" / "test.parquet").unlink()
    recipe = RECIPES_DIR / "qwen3-1.7b" / "ebpo_batch.yaml"
    code, built = run_dry(
        ["--config", str(recipe), "--dataset_name", str(copy / "trl" / "file")], monkeypatch
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and not built and len(err.splitlines()) == 1
    assert err.startswith("ebpo grpo: error:") and "no split ['test']" in err


@pytest.mark.parametrize(
    "text, message",
    [
        ("dry_run: true\n", "dry_run"),
        ("no_such_key: 1\n", "no_such_key"),
        ("beta: [oops\n", "not valid YAML"),
        # the recipe sets it already: a second value would silently win in TRL's parser
        ("advantage_estimator: ebpoo\n", "key 'advantage_estimator' appears twice"),
    ],
)
def test_a_bad_recipe_is_one_line_and_exit_2(text, message, tmp_path, monkeypatch, capsys):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text((RECIPES_DIR / "qwen3-1.7b" / "grpo.yaml").read_text() + text)
    code, built = run_dry(["--config", str(recipe)], monkeypatch)
    err = capsys.readouterr().err.strip()
    assert code == 2 and not built
    assert len(err.splitlines()) == 1 and err.startswith("ebpo grpo: error:") and message in err


def test_a_missing_config_file_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    code, _ = run_dry(["--config", str(tmp_path / "nowhere.yaml")], monkeypatch)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "no such file" in err


def test_the_readme_data_commands_feed_the_ebpo_diff_recipe(tmp_path, monkeypatch, capsys):
    """The recipes' README (``ebpo grpo recipe --readme``), "Data", as a user meets it, with a
    tiny model in place of Qwen3 (2 samples of 4 tokens), 2 TF-IDF topics and the fixture copies
    of the hub datasets: without labels the ebpo_diff recipe refuses to start (no difficulty);
    ``ebpo data label`` then ``ebpo grpo prepare-data --labels`` give it the pass rates, and the
    recipe, unchanged, dry-runs on
    what they wrote, easy -> hard."""
    monkeypatch.setenv("EBPO_DATA_DIR", str(FIXTURES))  # ebpo.data's local copies of the hub sets
    recipe = str(RECIPES_DIR / "qwen3-1.7b" / "ebpo_diff.yaml")
    data = "data/ebpo-qwen3-1.7b"  # the recipe's dataset_name is relative to the run
    prepare_data(tmp_path, data, "--num-topics", "2")
    code, built = run_dry(["--config", recipe], monkeypatch)
    err = capsys.readouterr().err.strip()
    assert code == 2 and not built and len(err.splitlines()) == 1 and "difficulty" in err

    save_tiny_llama("tiny", num_layers=1, hidden_size=32, num_heads=2)
    label = ["data", "label", "dapo-math-17k", "--output", "labels.jsonl", "--topic", "tfidf",
             "--num-topics", "2", "--difficulty", "pass-rate", "--model", "tiny",
             "--samples", "2", "--max-new-tokens", "4"]  # fmt: skip
    assert main(label) == 0
    # A random tiny model solves nothing (every pass rate 0): give the rows the distinct pass
    # rates a real model would, in the file the command wrote, so that the order is visible.
    written = [json.loads(line) for line in Path("labels.jsonl").read_text().splitlines()]
    assert [r["pass_rate"] for r in written] == [0.0, 0.0, 0.0]
    for row, pass_rate in zip(written, [0.25, 0.75, 0.5], strict=True):
        row["pass_rate"] = pass_rate
    Path("labels.jsonl").write_text("".join(json.dumps(r) + "\n" for r in written))
    prepare_data(tmp_path, data, "--labels", "labels.jsonl")

    code, built = run_dry(["--config", recipe], monkeypatch)
    assert code == 0
    run = built[0]
    assert run.data.startswith(f"{data}/trl/file: train 3 rows, test 2 rows")
    labels = {r["id"]: r for r in written}
    rows = run.trainer.train_dataset
    expected = [1 - labels[info["id"]]["pass_rate"] for info in rows["extra_info"]]
    assert list(rows["difficulty"]) == expected == [0.25, 0.5, 0.75]
    assert run.rewards["math_reward"] == 1.0
