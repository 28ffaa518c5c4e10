"""What a job trains and evaluates on: the RL prompt stream, the held-out and validation sets,
the warm-start examples, and how a completion is scored.

Built-in datasets (:data:`ebpo.lab.cpu_task.task.BUILTIN_DATASETS`):

* RL prompts: ``steps × prompts_per_step`` fresh training problems from the seeded stream
  (:func:`ebpo.lab.cpu_task.task.problem_stream`), each used once, in stream order; the job turns TRL's
  shuffling off, so RL step k sees prompts ``k·P .. (k+1)·P − 1``. Every method run with the same
  seed therefore sees the same prompts (a curriculum reorders the same prompts);
* held-out and validation sets: ``eval_problems`` distinct problems per (topic, tier) cell, fixed
  (seed 0, whatever the job's seed), disjoint from training by construction;
* warm-start examples: a second training stream; after the first ``warm_start_clean`` share of
  the warm-start steps, answers are corrupted in one digit with probability ``warm_start_corrupt``.

Any other dataset (registered name or local file, schema of :mod:`ebpo.data`): a seeded sample
of ``eval_problems`` rows is held out, the rest are the RL prompts (TRL shuffles them unless an
order is asked for); there is no validation split.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

from ebpo.data import DatasetUnavailableError, load_dataset
from ebpo.data.templates import render_prompt
from ebpo.integrations.trl.reward import math_reward
from ebpo.lab.cpu_task import task
from ebpo.rewards import score_math

__all__ = ["JobData", "Scorer", "load_job_data", "render_prompts", "trl_reward"]


@dataclass(frozen=True)
class Scorer:
    """``scorer(completion, answer) -> reward``, and which reward it is (so that
    :func:`trl_reward` can pick the matching TRL adapter): ``kind`` is ``"math"``
    (:func:`ebpo.rewards.score_math`), ``"integer"`` (:func:`ebpo.lab.cpu_task.task.integer_reward`) or
    ``"exact"`` (:func:`ebpo.lab.cpu_task.task.reward` on the ``reversed`` task)."""

    kind: str
    fn: Callable[[str, str], float]

    def __call__(self, completion: str, answer: str) -> float:
        return self.fn(completion, answer)


def _scorer(reward: str, style: str | None) -> Scorer:
    """The scorer of a job's ``reward`` option (``"auto"``, ``"integer"`` or ``"math"``) on a
    built-in dataset of ``style`` (None for any other dataset). ``"auto"`` is the built-in task's
    own reward, and the math reward on any other dataset; ``"integer"`` on the ``reversed`` task
    is its exact-answer reward."""
    if reward == "math" or (style is None and reward != "integer"):
        return Scorer("math", score_math)
    if style == "reversed":
        return Scorer("exact", task.reward)
    return Scorer("integer", task.integer_reward)


@dataclass
class JobData:
    """Rows follow the :mod:`ebpo.data` schema ``{id, prompt, answer, source, topic, difficulty}``."""

    #: ``reversed`` / ``word`` for a built-in dataset, None for any other
    style: str | None
    rl_rows: list[dict[str, Any]]
    heldout: list[dict[str, Any]]
    #: None when the dataset has no validation split (not built-in)
    validation: list[dict[str, Any]] | None
    #: ``score(completion, answer) -> reward`` for RL and evaluation
    score: Scorer
    #: the default longest completion in tokens (characters for the built-in model)
    completion_length: int
    warm_rows: Callable[[], Iterator[dict[str, Any]]]
    """A fresh endless iterator of warm-start rows (answers already corrupted where asked)."""


def load_job_data(config: Any) -> JobData:
    """The data of a :class:`ebpo.lab.train.job.TrainJobConfig` (ValueError for an unusable dataset)."""
    if config.dataset in task.BUILTIN_DATASETS:
        return _builtin(config)
    return _external(config)


def _builtin(config: Any) -> JobData:
    style = task.BUILTIN_DATASETS[config.dataset]
    cells = {"topics": config.topics, "tiers": config.tiers}
    stream = task.problem_stream("train", seed=config.seed, **cells)
    rl_rows = [p.row(style) for p in islice(stream, config.steps * config.prompts_per_step)]

    def warm_rows() -> Iterator[dict[str, Any]]:
        rng = random.Random(f"corrupt:{config.seed}")
        # the first warm_start_clean of the steps learn the algorithm on clean answers; the rest
        # teach doubt
        clean_rows = (
            round(config.warm_start_clean * config.warm_steps) * config.warm_start_batch_size
        )
        for i, problem in enumerate(
            task.problem_stream("train", seed=config.seed + 1_000_003, **cells)
        ):
            row = problem.row(style)
            if i >= clean_rows and rng.random() < config.warm_start_corrupt:
                row["answer"] = task.corrupt_digit(row["answer"], rng)
            yield row

    # the longest answer of the largest tier (mul of a d-digit number has at most d + 1 digits), + EOS
    length = max(config.tiers) + 2 if style == "reversed" else 256
    return JobData(
        style=style,
        rl_rows=rl_rows,
        heldout=[
            p.row(style)
            for p in task.fixed_problems("heldout", config.eval_problems, seed=0, **cells)
        ],
        validation=[
            p.row(style)
            for p in task.fixed_problems("validation", config.eval_problems, seed=0, **cells)
        ],
        score=_scorer(config.reward, style),
        completion_length=length,
        warm_rows=warm_rows,
    )


def _external(config: Any) -> JobData:
    try:
        rows = load_dataset(config.dataset)  # ValueError for a file without prompt/answer columns
    except DatasetUnavailableError as error:
        raise ValueError(f"dataset {config.dataset!r} is unavailable: {error}") from error
    if len(rows) < 2:
        raise ValueError(
            f"dataset {config.dataset!r} has {len(rows)} rows; need at least 2 (train + held-out)"
        )
    for row in rows:  # rows without labels form one topic / tier
        row["topic"] = row.get("topic") or "all"
        row["difficulty"] = row.get("difficulty") or "all"
    order = list(range(len(rows)))
    random.Random(f"heldout:{config.seed}").shuffle(order)
    heldout_ids = set(order[: min(config.eval_problems, len(rows) // 2)])
    train = [r for i, r in enumerate(rows) if i not in heldout_ids]
    heldout = [r for i, r in enumerate(rows) if i in heldout_ids]
    if config.order in ("difficulty", "topic_then_difficulty"):
        bad = [r["difficulty"] for r in train if not _is_number(r["difficulty"])][:3]
        if bad:
            raise ValueError(
                f"order={config.order!r} needs numeric difficulty labels; dataset {config.dataset!r} has {bad} "
                "(label it with `ebpo data label --difficulty`)"
            )
        for r in train:
            r["difficulty"] = float(r["difficulty"])

    def warm_rows() -> Iterator[dict[str, Any]]:
        rng = random.Random(f"warm:{config.seed}")
        while True:
            yield rng.choice(train)

    return JobData(
        style=None,
        rl_rows=train,
        heldout=heldout,
        validation=None,
        score=_scorer(config.reward, None),
        completion_length=256,
        warm_rows=warm_rows,
    )


def _is_number(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def render_prompts(
    rows: Sequence[Mapping[str, Any]], tokenizer: Any, style: str | None
) -> list[str]:
    """The text the policy sees: the bare prompt for the ``reversed`` task; for ``word`` a worked
    example (:data:`ebpo.lab.cpu_task.task.WORD_EXAMPLE`) as a first chat turn, then the problem; for any
    other dataset the problem in the DAPO template through the tokenizer's chat template."""
    if style == "reversed":
        return [r["prompt"] for r in rows]
    if style == "word":  # a worked example first, so small models write the Answer: line
        if getattr(tokenizer, "chat_template", None):
            return [
                tokenizer.apply_chat_template(
                    task.word_messages(r["prompt"]), tokenize=False, add_generation_prompt=True
                )
                for r in rows
            ]
        return [task.word_text(r["prompt"]) for r in rows]
    return [render_prompt(r["prompt"], tokenizer, template="dapo") for r in rows]


def trl_reward(score: Callable[[str, str], float]) -> Callable[..., list[float]]:
    """A TRL reward function (dataset column ``answer``) around ``score(completion, answer)``: for
    a :class:`Scorer` of kind ``"math"``, :data:`ebpo.integrations.trl.math_reward` (which also
    reads conversational completions and logs unscorable answers); otherwise a plain wrapper."""
    if isinstance(score, Scorer) and score.kind == "math":
        return math_reward

    def correct(prompts: list, completions: list, answer: list, **_: Any) -> list[float]:
        """1.0 for a correct completion (ebpo.lab.cpu_task.task), else 0.0."""
        return [
            score(c if isinstance(c, str) else c[-1]["content"], a)
            for c, a in zip(completions, answer, strict=True)
        ]

    return correct
