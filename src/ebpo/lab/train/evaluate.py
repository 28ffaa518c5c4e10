"""Pass@1 of a policy on a fixed problem set (held-out or validation), per problem and per cell.

Pass@1 of a problem is the mean reward over ``samples`` completions sampled at the training
temperature (the paper: Pass@1 averaged over many samples). The sampling seed is fixed, so two
evaluations of the same model agree exactly, and "before" / "after" are paired problem by problem.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tqdm.auto import tqdm

from ebpo.evaluation import SamplingConfig, TransformersGenerator

__all__ = ["evaluate_pass1", "format_pass_table", "summarise"]


def evaluate_pass1(
    model: Any,
    tokenizer: Any,
    rows: Sequence[Mapping[str, Any]],
    prompts: Sequence[str],
    score: Callable[[str, str], float],
    *,
    samples: int,
    temperature: float,
    max_new_tokens: int,
    seed: int,
    batch_size: int = 16,
    desc: str = "eval",
    progress: bool = True,
) -> dict[str, Any]:
    """Pass@1 of ``model`` on ``rows`` (schema of :mod:`ebpo.data`; ``prompts`` are their rendered
    texts and ``score(completion, answer)`` their reward).

    Returns ``{"problems": [{id, topic, tier, pass@1}], "cells", "topics", "tiers", "overall",
    "all_fail_frac", "all_pass_frac"}`` (see :func:`summarise`). The model's train / eval mode is
    restored afterwards.
    """
    if len(rows) != len(prompts):
        raise ValueError(f"rows and prompts differ in length: {len(rows)} vs {len(prompts)}")
    sampling = SamplingConfig(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
    generator = TransformersGenerator(model, tokenizer, sampling, batch_size=batch_size)
    was_training = model.training
    with tqdm(
        total=len(prompts) * samples, desc=desc, unit="sample", disable=not progress, leave=False
    ) as bar:
        generations = generator.generate(list(prompts), samples, progress=bar)
    model.train(was_training)
    problems = []
    for row, outputs in zip(rows, generations, strict=True):
        rewards = [score(g.text, row["answer"]) for g in outputs]
        problems.append(
            {
                "id": row["id"],
                "topic": str(row["topic"]),
                "tier": str(row["difficulty"]),
                "pass@1": sum(rewards) / len(rewards),
            }
        )
    return {"problems": problems, **summarise(problems)}


def summarise(problems: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Mean Pass@1 per ``cells`` (``topic/tier``), ``topics``, ``tiers`` and ``overall`` (every
    problem weighs the same), and the fractions of problems whose samples all fail / all pass."""

    def mean(values: list[float]) -> float:
        return sum(values) / len(values) if values else float("nan")

    groups: dict[str, dict[str, list[float]]] = {
        "cells": defaultdict(list),
        "topics": defaultdict(list),
        "tiers": defaultdict(list),
    }
    for p in problems:
        groups["cells"][f"{p['topic']}/{p['tier']}"].append(p["pass@1"])
        groups["topics"][p["topic"]].append(p["pass@1"])
        groups["tiers"][p["tier"]].append(p["pass@1"])
    rates = [p["pass@1"] for p in problems]
    return {
        **{name: {k: mean(v) for k, v in sorted(g.items())} for name, g in groups.items()},
        "overall": mean(rates),
        "all_fail_frac": mean([float(r == 0.0) for r in rates]),
        "all_pass_frac": mean([float(r == 1.0) for r in rates]),
    }


def format_pass_table(
    before: Mapping[str, Any],
    after: Mapping[str, Any] | None = None,
    *,
    title: str = "held-out Pass@1 (%)",
) -> str:
    """Pass@1 per topic, tier and overall (and, with ``after``, after / change), in %."""
    lines = [f"{title:<22}{'before':>8}" + (f"{'after':>8}{'change':>8}" if after else "")]

    def line(label: str, b: float, a: float | None) -> None:
        tail = f"{100 * a:>8.1f}{100 * (a - b):>+8.1f}" if a is not None else ""
        lines.append(f"{label:<22}{100 * b:>8.1f}{tail}")

    for section, prefix in (("topics", "topic "), ("tiers", "tier ")):
        for key, value in before[section].items():
            line(prefix + key, value, after[section].get(key) if after else None)
    line("overall", before["overall"], after["overall"] if after else None)
    line("problems all-fail", before["all_fail_frac"], after["all_fail_frac"] if after else None)
    line("problems all-pass", before["all_pass_frac"], after["all_pass_frac"] if after else None)
    return "\n".join(lines)
