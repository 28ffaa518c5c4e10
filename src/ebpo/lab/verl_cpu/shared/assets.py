"""What the CPU loop trains on: the built-in arithmetic task written by ``ebpo verl prepare-data``
(:func:`ebpo.integrations.verl.data_prep.prepare`), and the built-in tiny model saved as a
Hugging Face directory verl can load (``actor_rollout_ref.model.path``).

Data: one-digit ``add`` / ``sub`` / ``mul`` problems of the lab task (reversed-digit answers),
written as JSONL in ebpo's unified schema (``id, prompt, answer, source, topic, difficulty``) and
handed to ``prepare`` as local copies: it writes ``dapo_math_17k.{file,shuffle,topic,difficulty}.parquet``
(topics from the ``topic`` column) and ``aime24.parquet`` (here: validation problems) with the
``raw`` template, so a prompt is the bare problem, e.g. ``7+8=``.

Model: the lab's two-layer Llama with the character tokenizer, warm-started (supervised, cached by
:func:`ebpo.lab.cpu_task.policy.warm_start`) to answer ``Answer: <digits>`` — the form ebpo's
``compute_score`` grades — with a digit corrupted in some of the examples (:data:`CORRUPT`), so
that sampled groups mix right and wrong answers and the estimators see rewards with variance.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ebpo.integrations.verl.data_prep import prepare
from ebpo.lab.cpu_task.policy import BUILTIN_MODEL, corrupted_examples, load_policy, warm_start
from ebpo.lab.cpu_task.task import Problem, fixed_problems, problem_stream
from ebpo.lab.verl_cpu.shared.task import TIERS, training_problems

__all__ = [
    "ANSWER_PREFIX",
    "build_model",
    "prepare_data",
    "train_file",
    "val_file",
    "with_short_groups",
]

#: what the model is warm-started to write before its digits (graded by ``compute_score``)
ANSWER_PREFIX = "Answer: "
#: share of warm-start answers with a corrupted digit: the model samples right answers 15-40% of
#: the time per topic after the default warm start, so most groups mix right and wrong answers
CORRUPT = 0.3
TOPIC_ORDER = "topic"


def _write_jsonl(path: Path, problems: list[Problem]) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for problem in problems:
            handle.write(json.dumps(problem.row("reversed")) + "\n")


def prepare_data(out_dir: Path, *, train_size: int, val_size: int, seed: int = 0) -> dict[str, str]:
    """Write the parquet files with ``prepare`` (see module docstring); returns ``{what: path}``."""
    out_dir = Path(out_dir)
    source = out_dir / "source"
    source.mkdir(parents=True, exist_ok=True)
    if train_size > training_problems():  # the stream is endless: it would never find them
        raise ValueError(f"train_size {train_size} > the {training_problems()} training problems")
    stream = distinct(problem_stream("train", seed=seed, tiers=TIERS))
    train = list(itertools.islice(stream, train_size))
    per_cell = max(1, -(-val_size // 3))
    val = fixed_problems("validation", per_cell, seed=seed, tiers=TIERS)[:val_size]
    _write_jsonl(source / "train.jsonl", train)
    _write_jsonl(source / "val.jsonl", val)
    written, _ = prepare(
        str(out_dir / "parquet"),
        train_file=str(source / "train.jsonl"),
        eval_sets=("aime-2024",),
        eval_files={"aime-2024": str(source / "val.jsonl")},
        topic_method="metadata",
        template="raw",
        seed=seed,
    )
    return written


def distinct(problems: Iterator[Problem]) -> Iterator[Problem]:
    """``problems`` without repeats: ``prepare`` (DAPO-Math-17K's loader) would drop a repeated
    prompt and leave the epoch short of steps (the stream repeats itself; its first 16 are
    distinct, so the default smoke's data is the stream's start)."""
    seen: set[Problem] = set()
    for problem in problems:
        if problem not in seen:
            seen.add(problem)
            yield problem


def with_short_groups(written: dict[str, str], *, group_size: int, every: int) -> dict[str, str]:
    """The training files with verl's per-prompt sample count ``__rollout_n__``: ``group_size - 1``
    for every ``every``-th row (by position), ``group_size`` for the others; written next to the
    originals (``*.uneven.parquet``), returned in their place."""
    import pandas as pd  # heavy optional import

    out = dict(written)
    for key, path in written.items():
        if not key.startswith("train."):
            continue
        frame = pd.read_parquet(path)
        frame["__rollout_n__"] = [
            group_size - 1 if every and i % every == every - 1 else group_size
            for i in range(len(frame))
        ]
        target = Path(path).with_suffix(".uneven.parquet")
        frame.to_parquet(target)
        out[key] = str(target)
    return out


def train_file(written: dict[str, str], order: str) -> str:
    """The training parquet of ``order`` (``file``, ``shuffle``, ``topic``, ``difficulty``)."""
    return written[f"train.{order}"]


def val_file(written: dict[str, str]) -> str:
    """The validation parquet."""
    return written["aime-2024"]


def _examples(tokenizer: Any, seed: int) -> Iterator[tuple[str, str]]:
    for problem in problem_stream("train", seed=seed + 1, tiers=TIERS):
        messages = [{"role": "user", "content": problem.prompt("reversed")}]
        prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        yield prompt, ANSWER_PREFIX + problem.target("reversed")


def build_model(
    out_dir: Path,
    *,
    cache: Path | None,
    warm_steps: int = 800,
    hidden_size: int = 64,
    seed: int = 0,
    progress: bool = False,
) -> str:
    """Save the warm-started tiny model and its tokenizer into ``out_dir``; returns the path."""
    out_dir = Path(out_dir)
    model, tokenizer = load_policy(
        BUILTIN_MODEL, tiny_layers=2, tiny_hidden_size=hidden_size, tiny_heads=4, seed=seed
    )
    recipe = {
        "purpose": "ebpo.lab.verl_cpu",
        "hidden_size": hidden_size,
        "steps": warm_steps,
        "seed": seed,
        "answer_prefix": ANSWER_PREFIX,
        "tiers": list(TIERS),
        "corrupt": CORRUPT,
    }
    model, _ = warm_start(
        model,
        tokenizer,
        corrupted_examples(_examples(tokenizer, seed), CORRUPT, seed),
        steps=warm_steps,
        batch_size=32,
        lr=3e-3,
        seed=seed,
        cache=cache,
        recipe=recipe,
        progress=progress,
    )
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return str(out_dir)
