"""The math reward as a TRL reward function: :func:`make_trl_reward` builds one,
:data:`math_reward` is the default (dataset column ``answer``, the schema of :mod:`ebpo.data`).

    from ebpo.integrations.trl import math_reward
    trainer = GRPOTrainer(reward_funcs=[math_reward], ...)

Scoring is :func:`ebpo.rewards.score_math_batch`; this module only adapts TRL's call
(``prompts``, ``completions`` in standard or conversational format, dataset columns as keyword
arguments, ``log_metric``). It imports nothing from trl.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ebpo.rewards import DEFAULT_TIMEOUT, UNSCORABLE, overlong_penalty, score_math_batch
from ebpo.rewards.verify import check_timeout
from ebpo.utils.checks import check_positive_int

__all__ = ["make_trl_reward", "math_reward"]


def _completion_text(completion: Any) -> Any:
    """TRL completions are strings (standard format) or message lists (conversational format):
    the text of the last message. Anything else is passed on for score_math to judge."""
    if isinstance(completion, list) and completion:
        message = completion[-1]
        content = message.get("content", "") if isinstance(message, dict) else message
        if isinstance(content, list):  # multimodal parts: keep the text ones
            return "".join(
                t for p in content if isinstance(p, dict) and isinstance(t := p.get("text"), str)
            )
        return content
    return completion


def _answers_from_columns(columns: dict[str, Any], answer_column: str, n: int) -> list[Any]:
    if answer_column in columns:
        answers = columns[answer_column]
    elif "reward_model" in columns:  # verl-style rows: {"ground_truth": ..., "style": "rule"}
        answers = [
            rm.get("ground_truth") if isinstance(rm, dict) else rm for rm in columns["reward_model"]
        ]
    else:
        raise ValueError(
            f"the reward needs a column {answer_column!r} with the ground-truth answers; "
            f"got columns {sorted(k for k in columns if k not in ('trainer_state', 'log_extra', 'log_metric'))}"
        )
    if len(answers) != n:
        raise ValueError(f"column {answer_column!r} has {len(answers)} entries for {n} completions")
    return list(answers)  # as given: score_math_detailed handles missing or odd values


def make_trl_reward(
    answer_column: str = "answer",
    *,
    timeout: float = DEFAULT_TIMEOUT,
    num_workers: int = 1,
    overlong: tuple[int, int] | None = None,
    overlong_penalty_factor: float = 1.0,
) -> Callable[..., list[float]]:
    """A TRL reward function ``(prompts, completions, **columns) -> list[float]`` scoring each
    completion with :func:`ebpo.rewards.score_math` against ``columns[answer_column]``.

    ``overlong=(max_length, buffer_length)`` adds :func:`ebpo.rewards.overlong_penalty` on the
    completion's token count (TRL passes ``completion_ids``). If TRL provides ``log_metric`` the
    function logs ``math_reward/timeouts`` (responses that hit the time limit in this batch),
    ``math_reward/no_answer`` and ``math_reward/unscorable`` (missing ground truth or an input
    that is neither text nor a number; they score 0). Options are checked here, not at the first
    batch: a bad ``timeout`` or ``num_workers`` is a ValueError."""
    check_timeout(timeout)
    check_positive_int("num_workers", num_workers)

    def math_reward(prompts: list, completions: list, **columns: Any) -> list[float]:
        answers = _answers_from_columns(columns, answer_column, len(completions))
        texts = [_completion_text(c) for c in completions]
        results = score_math_batch(texts, answers, timeout=timeout, num_workers=num_workers)
        rewards = [r.score for r in results]
        if overlong is not None:
            ids = columns.get("completion_ids")
            if ids is None:
                raise ValueError("overlong shaping needs the completion_ids column that TRL passes")
            rewards = [
                r
                + overlong_penalty(
                    len(t),
                    max_length=overlong[0],
                    buffer_length=overlong[1],
                    penalty_factor=overlong_penalty_factor,
                )
                for r, t in zip(rewards, ids, strict=True)
            ]
        log_metric = columns.get("log_metric")
        if callable(log_metric):
            log_metric("math_reward/timeouts", float(sum(r.status == "timeout" for r in results)))
            log_metric(
                "math_reward/no_answer", float(sum(r.status == "no_answer" for r in results))
            )
            log_metric(
                "math_reward/unscorable", float(sum(r.status in UNSCORABLE for r in results))
            )
        return rewards

    return math_reward


math_reward = make_trl_reward()
"""The default TRL reward: ``GRPOTrainer(reward_funcs=[ebpo.integrations.trl.math_reward], ...)``
on a dataset with an ``answer`` column (the schema of :mod:`ebpo.data`)."""
