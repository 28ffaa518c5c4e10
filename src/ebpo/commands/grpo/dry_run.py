"""``ebpo grpo --dry-run``: parse a recipe as a real run would, build its trainer on this CPU, stop.

What runs is TRL's own ``trl.scripts.grpo.main`` — the reward registry and import paths, the
model-loading arguments, the dataset branch (``datasets:`` mixture or ``dataset_name``),
``get_peft_config`` / ``get_quantization_config`` and the trainer's construction — after the same
parsing as ``ebpo grpo`` (:func:`ebpo.commands.grpo.grpo_script.parse`: every GRPOConfig,
EBPOConfig and ModelConfig key, reward names, estimator options). Nothing of ``main`` is repeated:
three things are swapped while it runs, and the run stops inside ``main`` when the trainer exists:

* ``trl.GRPOTrainer`` builds an :class:`EBPOTrainer` and stops there (``main`` calls
  ``trainer.train()`` next);
* ``trl.get_dataset`` and ``datasets.load_dataset`` return a few rows: the first rows of the
  recipe's own data when it is on this disk (then its files and splits are checked for real, and
  the trainer sees its columns and labels), otherwise synthetic rows in the layout of the recipes'
  data (``ebpo grpo prepare-data``: the DAPO template as a chat message,
  ``reward_model.ground_truth``, ``topic``, ``difficulty``);
* command-line flags appended after the user's (they win, as any flag over ``--config``): a tiny
  random Llama saved to a temporary directory in place of the model (whose config and tokenizer
  are checked first, :func:`ebpo.evaluation.models.check_model_here`: the summary says what
  resolved and what stood in), ``use_cpu``, ``bf16`` / ``fp16`` / ``tf32`` off, ``use_vllm``
  off, no reporting, no Hub push, no 4/8-bit loading, and a temporary ``output_dir``.

The recipe itself is also parsed with only ``--use_cpu true`` added (TrainingArguments refuses
``bf16`` on a machine without a GPU otherwise): that is the configuration a real run gets, the one
the summary describes and :attr:`DryRun.config` holds. Finally the reward functions score, through
TRL's own ``_calculate_rewards`` (dataset columns as keyword arguments), a completion ``Answer:
<ground truth>`` for each sample row: a reward that cannot find its ground truth fails here, not on
the GPU node.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import datasets
import torch
import trl
from trl import GRPOTrainer
from trl.scripts import grpo as trl_grpo

from ebpo.commands.grpo.grpo_script import (
    check_splits,
    parse,
    parse_here,
    recipe_values,
    splits_read,
)
from ebpo.commands.grpo.output_dir import check_output_dir
from ebpo.data.templates import build_messages
from ebpo.evaluation.models import check_model_here, no_progress_bars, save_tiny_llama
from ebpo.integrations.trl.config import EBPOConfig, parse_estimator_options
from ebpo.integrations.trl.paper_methods import PAPER_METHODS, PRESETS
from ebpo.integrations.trl.trainer import EBPOTrainer

__all__ = [
    "METHOD_FIELDS",
    "DryRun",
    "dry_run",
    "paper_preset",
    "score_correct_answers",
]

#: the loaders TRL's script calls, as imported before any swap
_GET_DATASET = trl.get_dataset
_LOAD_DATASET = datasets.load_dataset

#: rows of each split the trainer is built on
SAMPLE_ROWS = 8
#: the EBPOConfig fields that any of the paper's presets sets (:data:`PRESETS`)
METHOD_FIELDS: tuple[str, ...] = tuple(sorted({key for p in PRESETS.values() for key in p}))

# (problem, answer, topic, difficulty): topics interleaved and difficulties unsorted, so that a
# curriculum (data_order) visibly reorders them
_TRAIN_PROBLEMS = [
    ("What is $3 + 4$?", "7", "Arithmetic", 0.2),
    ("A square has side length 5. What is its area?", "25", "Geometry", 0.5),
    ("What is $12 \\times 12$?", "144", "Arithmetic", 0.4),
    ("A triangle has angles 50 and 60 degrees. What is the third angle in degrees?", "70", "Geometry", 0.1),
    ("What is $2^{10}$?", "1024", "Arithmetic", 0.7),
    ("A circle has radius 3. What is its diameter?", "6", "Geometry", 0.3),
    ("What is $100 - 37$?", "63", "Arithmetic", 0.9),
    ("A rectangle is 4 by 6. What is its perimeter?", "20", "Geometry", 0.6),
]  # fmt: skip
_EVAL_PROBLEMS = [("Find $x$ if $2x + 3 = 11$.", "4"), ("What is $7 \\times 8$?", "56")]


@dataclasses.dataclass
class DryRun:
    """What a dry run built and found.

    ``config`` / ``script_args`` / ``model_args`` / ``dataset_args``: the recipe parsed as a real run
    gets it (only ``use_cpu`` added); ``trainer``: the EBPOTrainer built with the substitutions;
    ``data``: where the sample rows came from; ``rewards``: mean reward per reward function of a
    correct completion (``Answer: <ground truth>``) of each sample row, or None when the rows carry
    no ground truth; ``preset``: the paper preset whose method settings the config has (or None).
    """

    config: EBPOConfig
    script_args: Any
    model_args: Any
    dataset_args: Any
    trainer: EBPOTrainer
    data: str
    rewards: dict[str, float] | None
    preset: str | None
    #: whether the recipe sets ``generation_batch_size`` (else TRL derives it from the number of
    #: processes: ``per_device_train_batch_size x processes x steps_per_generation``)
    generation_batch_given: bool = False
    #: what :func:`ebpo.evaluation.models.check_model_here` found of the recipe's model on this machine
    model_check: str = ""

    def summary(self, source: str, processes: int = 1) -> list[str]:
        """The lines ``ebpo grpo --dry-run`` prints: what a real run of ``source`` would do, on
        ``processes`` processes (the launch the dry run reports)."""
        return _summary(self, source, processes)


class _TrainerBuilt(Exception):
    """Raised by the swapped ``trl.GRPOTrainer`` to leave ``main`` before ``trainer.train()``."""

    def __init__(self, trainer: EBPOTrainer) -> None:
        super().__init__("trainer built")
        self.trainer = trainer


def dry_run(argv: Sequence[str], workdir: str | Path | None = None) -> DryRun:
    """Parse ``argv`` (``ebpo grpo``'s arguments, without ``--dry-run``), build the trainer with the
    CPU substitutions (see the module docstring) and return what was built, untrained.

    ``workdir``: where the tiny model and the output directory go (default: a temporary directory,
    removed afterwards). Raises ValueError for anything the recipe gets wrong (bad keys or values,
    unknown rewards, data that does not load or lacks a column the trainer needs).
    """
    argv = list(argv)
    (script_args, config, model_args, dataset_args), *_ = parse_here(argv)
    check_output_dir(config.output_dir, config.resume_from_checkpoint)  # as the real run does
    model_check = check_model_here(model_args.model_name_or_path)
    if (
        script_args.reward_model_name_or_path
        and not Path(script_args.reward_model_name_or_path).exists()
    ):
        raise ValueError(
            f"reward_model_name_or_path {script_args.reward_model_name_or_path!r}: a dry run cannot "
            "load a reward model from the Hub; give a local directory"
        )
    with contextlib.ExitStack() as stack:
        stack.enter_context(no_progress_bars())  # the summary is the dry run's output
        if workdir is None:
            workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="ebpo-dry-run-"))
        workdir = Path(workdir)
        model_dir = save_tiny_llama(workdir / "model", num_layers=1, hidden_size=32, num_heads=2)
        flags = _cpu_flags(model_dir, workdir / "output", model_args)
        built = parse([*argv, *flags])
        loaded: dict[str, str] = {}
        loader = _sample_loader(built[0], built[3], splits_read(built[0], built[1]), loaded)
        with (
            _swapped(trl, "GRPOTrainer", _build_and_stop),
            _swapped(trl, "get_dataset", lambda mixture: loader()),
            _swapped(datasets, "load_dataset", lambda *args, **kwargs: loader()),
        ):
            try:
                trl_grpo.main(*built)
            except _TrainerBuilt as stop:
                trainer = stop.trainer
            else:  # pragma: no cover - TRL's main always builds a trainer before training
                raise RuntimeError("TRL's grpo script returned without building a trainer")
    rows = [trainer.train_dataset[i] for i in range(min(len(trainer.train_dataset), 4))]
    return DryRun(
        config=config,
        script_args=script_args,
        model_args=model_args,
        dataset_args=dataset_args,
        trainer=trainer,
        data=loaded["note"],
        rewards=score_correct_answers(trainer, rows),
        preset=paper_preset(config),
        generation_batch_given=recipe_values(argv, ["generation_batch_size"])[
            "generation_batch_size"
        ]
        is not None,
        model_check=model_check,
    )


def paper_preset(config: EBPOConfig) -> str | None:
    """The preset of :data:`PAPER_METHODS` whose settings ``config`` has on every field any paper
    preset sets (:data:`METHOD_FIELDS`; a field a preset leaves out must keep EBPOConfig's
    default), or None."""
    defaults = {f.name: f.default for f in dataclasses.fields(EBPOConfig)}
    for name in PAPER_METHODS:
        preset = PRESETS[name]
        if all(
            _comparable(key, getattr(config, key))
            == _comparable(key, preset.get(key, defaults[key]))
            for key in METHOD_FIELDS
        ):
            return name
    return None


def score_correct_answers(
    trainer: EBPOTrainer, rows: list[dict[str, Any]]
) -> dict[str, float] | None:
    """Mean reward per reward function of the completion ``Answer: <ground truth>`` for each row,
    scored by TRL's ``GRPOTrainer._calculate_rewards`` (the columns reach the functions as TRL
    passes them); None when a row has no ``answer`` / ``solution`` (TRL's ``accuracy_reward``
    reads it) / ``reward_model.ground_truth``."""
    truths = [_ground_truth(row) for row in rows]
    if not rows or any(truth is None for truth in truths):
        return None
    texts = [f"Answer: {truth}" for truth in truths]
    prompts = [row["prompt"] for row in rows]
    completions = [
        [{"role": "assistant", "content": text}] if isinstance(prompt, list) else text
        for prompt, text in zip(prompts, texts, strict=True)
    ]
    tokenizer: Any = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
    ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
    # TRL's method, not EBPOTrainer's wrapper: nothing of the estimator's hand-off is touched.
    rewards = GRPOTrainer._calculate_rewards(trainer, rows, prompts, completions, ids)
    return {
        name: float(torch.nanmean(rewards[:, i]))
        for i, name in enumerate(trainer.reward_func_names)
    }


# ---------------------------------------------------------------------------------- substitutions
@contextlib.contextmanager
def _swapped(owner: Any, name: str, value: Any) -> Iterator[None]:
    original = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, original)


def _build_and_stop(*args: Any, **kwargs: Any) -> None:
    raise _TrainerBuilt(EBPOTrainer(*args, **kwargs))


def _cpu_flags(model_dir: Path, output_dir: Path, model_args: Any) -> list[str]:
    flags = [
        "--model_name_or_path", str(model_dir), "--output_dir", str(output_dir),
        "--use_cpu", "true", "--bf16", "false", "--fp16", "false", "--tf32", "false",
        "--use_vllm", "false", "--report_to", "none", "--push_to_hub", "false",
        "--load_in_4bit", "false", "--load_in_8bit", "false",
    ]  # fmt: skip
    if model_args.attn_implementation not in (None, "eager", "sdpa"):  # flash attention: GPU only
        flags += ["--attn_implementation", "sdpa"]
    return flags


def _sample_loader(
    script_args: Any, dataset_args: Any, needed: Sequence[str], note: dict[str, str]
) -> Callable[[], datasets.DatasetDict]:
    """What ``get_dataset`` / ``load_dataset`` return inside the dry run: the splits TRL's script
    reads (``needed``, :func:`~ebpo.commands.grpo.grpo_script.splits_read`), ``SAMPLE_ROWS``
    rows each (``note["note"]`` says where they came from)."""
    splits = [script_args.dataset_train_split, script_args.dataset_test_split]

    def load() -> datasets.DatasetDict:
        source = _local_source(script_args, dataset_args)
        if source is None:
            note["note"] = (
                f"{SAMPLE_ROWS} synthetic rows per split in the layout of `ebpo grpo prepare-data` "
                "(the recipe's data is not on this disk)"
            )
            return datasets.DatasetDict(
                {splits[0]: _synthetic("train"), splits[1]: _synthetic("test")}
            )
        full = _load_local(source, script_args, dataset_args)
        check_splits(full, needed, source)
        sizes = ", ".join(f"{name} {len(split)} rows" for name, split in full.items())
        train = full[splits[0]]
        if "topic" in train.column_names:
            sizes += f" ({len(set(train['topic']))} topics in {splits[0]})"
        note["note"] = (
            f"{source}: {sizes}; the trainer is built on the first {SAMPLE_ROWS} rows (at most) "
            "of each split"
        )
        return datasets.DatasetDict(
            {
                name: split.select(range(min(SAMPLE_ROWS, len(split))))
                for name, split in full.items()
            }
        )

    return load


def _local_source(script_args: Any, dataset_args: Any) -> str | None:
    """The recipe's data when it is on this disk (a directory or file, or a mixture of local
    files), else None: a dry run never reaches for the Hub."""
    if dataset_args.datasets:
        for entry in dataset_args.datasets:
            files = entry.data_files
            if isinstance(files, dict):
                files = list(files.values())
            files = [files] if isinstance(files, str) else list(files or [])
            paths = [Path(f).expanduser() for f in files] or [Path(entry.path).expanduser()]
            if not all(p.exists() for p in paths):
                return None
        return "datasets: " + ", ".join(str(e.data_files or e.path) for e in dataset_args.datasets)
    name = script_args.dataset_name
    return name if name and Path(name).expanduser().exists() else None


def _load_local(source: str, script_args: Any, dataset_args: Any) -> datasets.DatasetDict:
    """The recipe's local data, loaded by the functions TRL's script calls, as it calls them (the
    originals: the swap is active), but never streamed (the dry run takes the first rows)."""
    try:
        if dataset_args.datasets:
            mixture = dataclasses.replace(dataset_args, streaming=False)
            # TRL's get_dataset calls datasets.load_dataset, which the dry run has swapped for
            # the loader that called this: the original while it runs
            with _swapped(datasets, "load_dataset", _LOAD_DATASET):
                return _GET_DATASET(mixture)
        return _LOAD_DATASET(script_args.dataset_name, name=script_args.dataset_config)
    except (ValueError, OSError) as error:  # no such config / file / split, unreadable file
        raise ValueError(f"cannot load the recipe's data ({source}): {error}") from error


def _synthetic(split: str) -> datasets.Dataset:
    problems = (
        _TRAIN_PROBLEMS if split == "train" else [(p, a, "", math.nan) for p, a in _EVAL_PROBLEMS]
    )
    source = "dapo-math-17k" if split == "train" else "aime-2024"
    rows = [
        {
            "data_source": source,
            "prompt": build_messages(problem, "dapo"),
            "ability": "MATH",
            "reward_model": {"ground_truth": answer, "style": "rule"},
            "extra_info": {"index": i, "split": split, "id": f"{source}-{i}"},
            "topic": topic,
            "difficulty": difficulty,
        }
        for i, (problem, answer, topic, difficulty) in enumerate(problems)
    ]
    return datasets.Dataset.from_list(rows)


def _ground_truth(row: dict[str, Any]) -> Any:
    for column in ("answer", "solution"):  # solution: what TRL's accuracy_reward reads
        if row.get(column) is not None:
            return row[column]
    reward_model = row.get("reward_model")
    return reward_model.get("ground_truth") if isinstance(reward_model, dict) else None


def _comparable(key: str, value: Any) -> Any:
    if key == "estimator_options":
        return parse_estimator_options(value)
    if key == "scale_rewards" and isinstance(value, bool):
        return "group" if value else "none"
    return value


# ---------------------------------------------------------------------------------- summary
def _summary(run: DryRun, source: str, processes: int) -> list[str]:
    c, m, s, t = run.config, run.model_args, run.script_args, run.trainer
    g = c.num_generations
    per_process = c.per_device_train_batch_size * c.gradient_accumulation_steps
    step = processes * per_process  # completions per optimizer step, all processes together
    # TRL derives the generation batch from the number of processes unless the recipe sets it
    generation_batch = (
        c.generation_batch_size
        if run.generation_batch_given
        else c.per_device_train_batch_size * processes * c.steps_per_generation
    )
    lines = [
        f"ebpo grpo --dry-run: {source} parsed as a real run; EBPOTrainer built on a tiny local "
        "model; nothing trained",
        f"  model       {m.model_name_or_path} (dtype {m.dtype})"
        + (
            f", LoRA r={m.lora_r} alpha={m.lora_alpha} dropout={m.lora_dropout} "
            f"targets={m.lora_target_modules}"
            if m.use_peft
            else ", full fine-tune"
        ),
        f"              {run.model_check}",
        f"  data        {_data_source(s, run.dataset_args)}",
        f"              here: {run.data}",
        f"  order       data_order={c.data_order}, shuffle_dataset={c.shuffle_dataset}, "
        + (
            f"max_steps={c.max_steps}"
            if c.max_steps > 0
            else f"num_train_epochs={c.num_train_epochs:g}"
        ),
        f"  rewards     {', '.join(t.reward_func_names)} (weights {[float(w) for w in t.reward_weights]})",
        "              "
        + (
            "a completion 'Answer: <ground truth>' scores "
            + ", ".join(f"{name} {value:g}" for name, value in run.rewards.items())
            if run.rewards is not None
            else "not checked: the rows have no answer / solution / reward_model.ground_truth column"
        ),
        f"  estimator   {c.advantage_estimator} {c.estimator_kwargs}; paper preset: "
        + (run.preset or "none (the method settings match no preset of PAPER_METHODS)"),
        f"  batch       G = {g}; generation batch {generation_batch} completions = "
        f"{generation_batch / g:g} prompts (the estimator's batch)",
        f"              optimizer step: {c.per_device_train_batch_size} per device x "
        f"{c.gradient_accumulation_steps} accumulation = {per_process} completions per process; "
        f"on {processes} process{'es' if processes > 1 else ''} (the launch below) {step} = "
        f"{step / g:g} prompts, {generation_batch / step:g} optimizer steps per generation "
        "batch",
        f"  loss        loss_type={c.loss_type}, clip epsilon={c.epsilon} epsilon_high="
        f"{c.epsilon_high if c.epsilon_high is not None else c.epsilon}"
        + (f" delta={c.delta}" if c.delta is not None else "")
        + f", KL beta={c.beta}, lr={c.learning_rate:g} "
        f"({getattr(c.lr_scheduler_type, 'value', c.lr_scheduler_type)} schedule)",
        f"              DAPO: overlong_buffer_ratio={c.overlong_buffer_ratio} "
        f"filter_zero_variance_groups={c.filter_zero_variance_groups}; Clip-Cov ratio={c.clip_cov_ratio}",
        f"  eval        {_eval_line(c)}",
        f"  generation  max_completion_length={c.max_completion_length}, temperature={c.temperature}, "
        f"top_p={c.top_p}; "
        + (
            f"vLLM {c.vllm_mode} (gpu_memory_utilization={c.vllm_gpu_memory_utilization}, "
            f"max_model_length={c.vllm_max_model_length}, importance_sampling_correction="
            f"{c.vllm_importance_sampling_correction})"
            if c.use_vllm
            else "transformers generate (no vLLM)"
        )
        + f"; bf16={c.bf16}",
        f"  substituted here: a tiny random Llama in place of {m.model_name_or_path} (the trainer "
        "above was built on it), the sample rows, use_cpu, bf16/fp16/tf32 off, use_vllm off, "
        "report_to none, a temporary output_dir",
    ]
    return lines


def _data_source(script_args: Any, dataset_args: Any) -> str:
    splits = f"train split {script_args.dataset_train_split!r}, eval split {script_args.dataset_test_split!r}"
    if dataset_args.datasets:
        names = ", ".join(str(e.data_files or e.path) for e in dataset_args.datasets)
        return f"datasets mixture [{names}] ({splits})"
    config = f" config {script_args.dataset_config!r}" if script_args.dataset_config else ""
    return f"{script_args.dataset_name}{config} ({splits})"


def _eval_line(c: EBPOConfig) -> str:
    strategy = getattr(c.eval_strategy, "value", c.eval_strategy)
    if strategy == "no":
        return "none"
    every = (
        f"every {c.eval_steps:g} optimizer steps" if strategy == "steps" else f"every {strategy}"
    )
    samples = c.num_generations_eval or c.num_generations
    return f"{every}, {samples} samples per prompt" + (
        ", and before training" if c.eval_on_start else ""
    )
