"""Pass@k and maj@k: the metrics of the EBPO paper's evaluation, from per-sample records.

From n samples per problem of which c are correct:

- **Pass@1** = mean over problems of c/n (the paper's headline metric: "Pass@1 averaged over 32
  samples", temperature 1.0, top-p 1.0).
- **pass@k** (k <= n): the unbiased estimator of Chen et al. (2021, "Evaluating Large Language
  Models Trained on Code", eq. 1), averaged over problems:
      pass@k = 1 - C(n - c, k) / C(n, k)
  computed as 1 - prod_{i=n-c+1}^{n} (1 - k/i) to stay exact in floating point for large n.
- **maj@k** (k <= n): majority vote over the extracted answers of the first k samples (answers
  grouped by their normalised string, responses without an answer do not vote, ties go to the
  answer seen first); 1 if the winning answer is correct.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ebpo.rewards import normalize_answer

__all__ = ["maj_at_k", "pass_at_k", "summarize"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of Chen et al. (2021): the probability that at least one of k samples drawn
    without replacement from n samples, c of them correct, is correct: 1 - C(n-c, k)/C(n, k)."""
    for name, value in (("n", n), ("c", c), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} must be an int, got {value!r}")
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"need n >= 1 and 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, n={n}], got {k}")
    if n - c < k:  # every k-subset contains a correct sample
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def maj_at_k(predictions: Sequence[str | None], scores: Sequence[float], k: int) -> float:
    """Majority vote over the first ``k`` samples: 1.0 if the most frequent extracted answer
    (normalised string; None = no answer, does not vote; ties -> first seen) was scored correct."""
    if len(predictions) != len(scores):
        raise ValueError(
            f"predictions and scores differ in length: {len(predictions)} vs {len(scores)}"
        )
    if not 1 <= k <= len(predictions):
        raise ValueError(f"k must be in [1, {len(predictions)}], got {k}")
    votes: Counter[str] = Counter()
    first: dict[str, int] = {}
    for i in range(k):
        prediction = predictions[i]
        if prediction is None:
            continue
        key = normalize_answer(prediction)
        votes[key] += 1
        first.setdefault(key, i)
    if not votes:
        return 0.0
    winner = max(votes, key=lambda key: (votes[key], -first[key]))
    return float(scores[first[winner]] == 1.0)


def summarize(
    records: Iterable[Mapping[str, Any]], ks: Sequence[int] = (1,)
) -> dict[str, dict[str, float]]:
    """Per-benchmark metrics (fractions in [0, 1]) from per-sample records (keys ``benchmark``,
    ``problem_id``, ``sample_index``, ``prediction``, ``score``): ``pass@1`` plus ``pass@k`` and
    ``maj@k`` for every k in ``ks`` with k <= n (n = samples per problem, the minimum over
    problems), and ``n``, ``problems``, ``no_answer``, ``timeouts`` (fractions/counts)."""
    by_problem: dict[str, dict[str, list[Mapping[str, Any]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for record in records:
        by_problem[record["benchmark"]][record["problem_id"]].append(record)
    out: dict[str, dict[str, float]] = {}
    for benchmark, problems in by_problem.items():
        samples = [sorted(s, key=lambda r: r["sample_index"]) for s in problems.values()]
        n = min(len(s) for s in samples)
        metrics: dict[str, float] = {"problems": float(len(samples)), "n": float(n)}
        for k in sorted({1, *ks}):
            if k > n:
                continue
            metrics[f"pass@{k}"] = _mean(
                pass_at_k(len(s), sum(r["score"] == 1.0 for r in s), k) for s in samples
            )
            if k > 1:
                metrics[f"maj@{k}"] = _mean(
                    maj_at_k([r["prediction"] for r in s], [r["score"] for r in s], k)
                    for s in samples
                )
        flat = [r for s in samples for r in s]
        metrics["no_answer"] = _mean(r.get("status") == "no_answer" for r in flat)
        metrics["timeouts"] = float(sum(r.get("status") == "timeout" for r in flat))
        out[benchmark] = metrics
    return out


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return sum(values) / len(values) if values else float("nan")
