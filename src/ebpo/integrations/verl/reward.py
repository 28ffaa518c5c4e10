"""The math reward as verl's ``custom_reward_function``:

    reward.custom_reward_function.path=pkg://ebpo.integrations.verl.reward
    reward.custom_reward_function.name=compute_score

(a file path to this module works too). Scoring is :func:`ebpo.rewards.score_math_detailed`;
this module imports nothing from verl.
"""

from __future__ import annotations

from typing import Any

from ebpo.rewards import DEFAULT_TIMEOUT, UNSCORABLE, score_math_detailed

__all__ = ["compute_score"]


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    **verl_kwargs: Any,
) -> dict[str, float]:
    """verl ``custom_reward_function`` (see the module docstring). Options come through
    ``reward.custom_reward_function.reward_kwargs`` (``timeout``); other keyword arguments verl
    may add (e.g. ``reward_router_address``) are ignored.

    Returns ``{"score", "acc", "timed_out", "unscorable"}``: verl uses ``score`` as the reward
    (1.0/0.0; note verl's built-in DAPO scorer gives +1/-1) and logs the other keys per sample;
    ``unscorable`` is 1.0 when the ground truth is missing or an input is neither text nor a number
    (see :func:`ebpo.rewards.score_math_detailed`). verl's reward loop calls this from a thread
    pool, where the helper-process time limit applies. A bad ``timeout`` is a ValueError."""
    result = score_math_detailed(solution_str, ground_truth, timeout=timeout)
    return {
        "score": result.score,
        "acc": result.score,
        "timed_out": float(result.status == "timeout"),
        "unscorable": float(result.status in UNSCORABLE),
    }
