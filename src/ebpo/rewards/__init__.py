"""Verifiable math reward: 1.0 if a response's final answer equals the ground truth, else 0.0.

    from ebpo.rewards import score_math
    score_math("... so the total is 12.\\nAnswer: 12", "12")          # 1.0
    score_math("... hence $\\boxed{\\frac{1}{2}}$.", "0.5")           # 1.0

Modules:

* :mod:`~ebpo.rewards.extract` — the final answer of a response (last ``Answer:`` line or
  ``\\boxed{}``), :func:`normalize_answer`, canonical forms, inputs as text;
* :mod:`~ebpo.rewards.verify` — math-verify under a time limit: options, helper-process pool,
  fork handling, :func:`shutdown_workers`;
* :mod:`~ebpo.rewards.timer` — the in-process timer, and math-verify loaded outside the limit
  (the limit measures verification only; imports are never interrupted);
* :mod:`~ebpo.rewards.score` — :func:`score_math`, :func:`score_math_detailed`,
  :func:`score_math_batch` and :class:`ScoreResult` (the pipeline is described there);
* :mod:`~ebpo.rewards.stats` — :data:`STATUSES` and the counters of :func:`reward_stats`;
* :mod:`~ebpo.rewards.shaping` — :func:`overlong_penalty` (DAPO's length shaping).

Nothing here raises on any response or ground truth: a missing ground truth (None, NaN,
pandas.NA, empty or invisible-only text, or a missing value written as text — ``nan``, ``None``,
``null``, ``N/A``, ``NA``, ``[]``…, listed in :mod:`~ebpo.rewards.extract`) or an input that is
neither text nor a number scores 0 and is counted (statuses ``missing_ground_truth`` and
``bad_input``). Only bad options raise (ValueError):
``timeout`` must be finite, in (0, ``MAX_TIMEOUT`` = 3600] seconds.

The trainer adapters live with their frameworks: the TRL reward in
:mod:`ebpo.integrations.trl.reward` (``math_reward``, ``make_trl_reward``), verl's
``compute_score`` in :mod:`ebpo.integrations.verl.reward`; the old names here raise an ImportError
that says where they went.
"""

from __future__ import annotations

from ebpo.rewards.extract import MAX_ANSWER_CHARS, MAX_BRACE_DEPTH, extract_answer, normalize_answer
from ebpo.rewards.score import ScoreResult, score_math, score_math_batch, score_math_detailed
from ebpo.rewards.shaping import overlong_penalty
from ebpo.rewards.stats import STATUSES, UNSCORABLE, reset_reward_stats, reward_stats
from ebpo.rewards.verify import DEFAULT_TIMEOUT, MAX_TIMEOUT, shutdown_workers

__all__ = [
    "DEFAULT_TIMEOUT",
    "MAX_ANSWER_CHARS",
    "MAX_BRACE_DEPTH",
    "MAX_TIMEOUT",
    "STATUSES",
    "UNSCORABLE",
    "ScoreResult",
    "extract_answer",
    "normalize_answer",
    "overlong_penalty",
    "reset_reward_stats",
    "reward_stats",
    "score_math",
    "score_math_batch",
    "score_math_detailed",
    "shutdown_workers",
]
