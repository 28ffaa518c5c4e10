"""Each step's rewards through every estimator, as in training, and what came out.

:class:`Replay` holds one estimator per name (:func:`ebpo.estimators.make_estimator`: any name of
:func:`~ebpo.estimators.available_estimators`), built once, so the stateful ones
(EBPO's running prior, JSPO++'s smoothing) carry their state from step to step exactly as in a
training run that used them — with one difference a replay cannot remove: the run's policy, and so
its rewards, came from the estimator the run actually trained with.

Per step (:meth:`Replay.step`) it measures, vectorised over the groups (segment sums, no loop per
group):

* the input: responses, groups, singleton groups, the groups whose rewards are all equal — GRPO
  gives them no signal — split into all-fail (the common reward ≤ 0: a verifier's 0, DAPO's −1)
  and all-pass (> 0), the responses in those, and the mean reward;
* for each estimator: the responses with a non-zero advantage (``|A| > SIGNAL_THRESHOLD``, the
  threshold of :data:`ebpo.estimators.functional.SIGNAL_THRESHOLD`), the groups where every advantage is zero, the
  responses GRPO leaves at zero that this estimator moves, the all-fail groups it gives a signal,
  the mean advantage of all-fail and of all-pass responses, the mean shrinkage over groups (the
  weight on the prior for EBPO, on the other prompts' mean for JSPO; 0 without shrinkage), the
  advantages' mean and standard deviation, and their difference to GRPO's on the same responses
  (root mean square and largest absolute value).

GRPO (the ``grpo`` variant: verl's GRPO, std-normalised, eps 1e-6) is always replayed: it is the
reference of every comparison.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from tqdm.auto import tqdm

from ebpo.analysis.replay.sources import StepBatch
from ebpo.estimators import AdvantageEstimator, AdvantageResult, estimator_spec, make_estimator
from ebpo.estimators.functional import SIGNAL_THRESHOLD, segment_sum
from ebpo.utils.runtime import torch_threads

__all__ = [
    "DEFAULT_ESTIMATORS",
    "ESTIMATOR_FIELDS",
    "INPUT_FIELDS",
    "REFERENCE",
    "Replay",
    "estimator_names",
    "replay_steps",
    "summarize",
]

REFERENCE = "grpo"
DEFAULT_ESTIMATORS = ("grpo", "ebpo", "ebpo_within", "jspo_plus_plus")
#: per-step numbers about the input (the same for every estimator)
INPUT_FIELDS = (
    "rows",
    "padding_rows",
    "merged_outputs",
    "responses",
    "groups",
    "singleton_groups",
    "all_equal_groups",
    "all_fail_groups",
    "all_pass_groups",
    "all_fail_responses",
    "all_pass_responses",
    "group_size_min",
    "group_size_max",
    "reward_mean",
)
#: per-step numbers of each estimator
ESTIMATOR_FIELDS = (
    "nonzero_advantage_responses",
    "nonzero_advantage_frac",
    "zero_signal_groups",
    "zero_signal_group_frac",
    "signal_where_grpo_has_none",
    "all_fail_groups_with_signal",
    "all_fail_advantage_mean",
    "all_pass_advantage_mean",
    "shrinkage_mean",
    "advantage_mean",
    "advantage_std",
    "diff_to_grpo_rms",
    "diff_to_grpo_max_abs",
)


def estimator_names(names: Sequence[str]) -> list[str]:
    """``names`` checked (each a registered estimator name: ValueError naming the known ones
    otherwise; one that needs each response's token count, e.g. ``opo``, is refused: a replay's
    inputs carry rewards, not tokens), duplicates removed, with GRPO first (the reference)."""
    out: list[str] = [REFERENCE]
    for name in names:
        estimator_spec(name)  # raises on an unknown name
        if make_estimator(name).uses_token_counts:
            raise ValueError(
                f"estimator {name!r} needs the number of tokens of each response, which a replay's "
                "inputs (a prompt id and a reward per response) do not carry"
            )
        if name not in out:
            out.append(name)
    return out


class Replay:
    """The estimators of ``names`` (see :func:`estimator_names`), fed one step at a time."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = estimator_names(names)
        self.estimators: dict[str, AdvantageEstimator] = {
            name: make_estimator(name) for name in self.names
        }
        #: the results of the last step, by estimator name (tests compare them)
        self.last_results: dict[str, AdvantageResult] = {}

    def step(self, batch: StepBatch) -> dict[str, Any]:
        """Run every estimator on ``batch`` (updating the stateful ones) and return the step's
        record: ``step``, ``source``, the :data:`INPUT_FIELDS` and ``estimators`` →
        name → :data:`ESTIMATOR_FIELDS`."""
        rewards = torch.from_numpy(batch.rewards)
        index = torch.from_numpy(batch.group_index)
        keys = (
            prompt_keys(batch)
            if any(e.uses_prompt_keys for e in self.estimators.values())
            else None
        )
        results = {}
        for name, estimator in self.estimators.items():
            try:
                results[name] = estimator(rewards, index, prompt_keys=keys)
            except ValueError as error:  # e.g. ebpo_bb and rewards outside [0, 1]
                raise ValueError(
                    f"{batch.source}: step {batch.step}: {name} cannot take these rewards: {error}"
                ) from None
        self.last_results = results
        groups = GroupStats(rewards, index, batch.num_groups)
        record: dict[str, Any] = {
            "step": batch.step,
            "source": batch.source,
            "rows": batch.rows,
            "padding_rows": batch.padding_rows,
            "merged_outputs": batch.merged_outputs,
            **groups.record(),
        }
        reference = results[REFERENCE].advantages
        record["estimators"] = {
            name: groups.estimator_record(result, reference) for name, result in results.items()
        }
        return record


def prompt_keys(batch: StepBatch) -> list[Any]:
    """Each response's prompt id, the key of an estimator that tracks prompts across steps (SPO).
    A table's prompt ids and verl's legacy dumps (the prompt text) are stable across steps; verl's
    v1 dumps key prompts by verl's uid, drawn afresh every step, so such a tracker sees each prompt
    once there."""
    labels = batch.group_labels
    labels = labels.to_pylist() if hasattr(labels, "to_pylist") else list(labels)
    return [labels[g] for g in batch.group_index.tolist()]


class GroupStats:
    """The group structure of one step and the measurements made on it (module doc)."""

    def __init__(self, rewards: torch.Tensor, index: torch.Tensor, num_groups: int) -> None:
        self.rewards, self.index, self.num_groups = rewards, index, num_groups
        self.count = torch.bincount(index, minlength=num_groups)
        self.low = torch.full((num_groups,), math.inf, dtype=torch.float64).scatter_reduce(
            0, index, rewards, "amin"
        )
        self.high = torch.full((num_groups,), -math.inf, dtype=torch.float64).scatter_reduce(
            0, index, rewards, "amax"
        )
        self.all_equal = (self.count >= 2) & (self.low == self.high)
        self.all_fail = self.all_equal & (self.high <= 0)
        self.all_pass = self.all_equal & (self.low > 0)
        self.fail_rows = self.all_fail[index]
        self.pass_rows = self.all_pass[index]

    def record(self) -> dict[str, Any]:
        return {
            "responses": int(self.rewards.numel()),
            "groups": self.num_groups,
            "singleton_groups": int((self.count == 1).sum()),
            "all_equal_groups": int(self.all_equal.sum()),
            "all_fail_groups": int(self.all_fail.sum()),
            "all_pass_groups": int(self.all_pass.sum()),
            "all_fail_responses": int(self.fail_rows.sum()),
            "all_pass_responses": int(self.pass_rows.sum()),
            "group_size_min": int(self.count.min()),
            "group_size_max": int(self.count.max()),
            "reward_mean": float(self.rewards.mean()),
        }

    def estimator_record(self, result: AdvantageResult, reference: torch.Tensor) -> dict[str, Any]:
        advantages = result.advantages.to(torch.float64)
        signal = advantages.abs() > SIGNAL_THRESHOLD
        group_signal = segment_sum(signal.to(torch.float64), self.index, self.num_groups) > 0
        reference_signal = reference.abs() > SIGNAL_THRESHOLD
        difference = advantages - reference
        count = self.count.to(torch.float64)
        shrinkage = segment_sum(result.shrinkage.to(torch.float64), self.index, self.num_groups)
        n = advantages.numel()
        nonzero = int(signal.sum())
        zero_groups = int((~group_signal).sum())
        return {
            "nonzero_advantage_responses": nonzero,
            "nonzero_advantage_frac": nonzero / n,
            "zero_signal_groups": zero_groups,
            "zero_signal_group_frac": zero_groups / self.num_groups,
            "signal_where_grpo_has_none": int((signal & ~reference_signal).sum()),
            "all_fail_groups_with_signal": int((self.all_fail & group_signal).sum()),
            "all_fail_advantage_mean": _mean_or_none(advantages[self.fail_rows]),
            "all_pass_advantage_mean": _mean_or_none(advantages[self.pass_rows]),
            "shrinkage_mean": float((shrinkage / count).mean()),
            "advantage_mean": float(advantages.mean()),
            "advantage_std": float(advantages.std()) if n > 1 else 0.0,
            "diff_to_grpo_rms": float(difference.square().mean().sqrt()),
            "diff_to_grpo_max_abs": float(difference.abs().max()),
        }


def _mean_or_none(values: torch.Tensor) -> float | None:
    return float(values.mean()) if values.numel() else None


#: the input fields summed over the steps in the run's summary (the others are a min, a max, a mean)
COUNTED = tuple(
    f for f in INPUT_FIELDS if f not in ("group_size_min", "group_size_max", "reward_mean")
)


def summarize(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The run's numbers from its step records (:meth:`Replay.step`), the same fields as a step's:
    counts summed; fractions over all the responses (or groups) of the run; the mean advantage of
    all-fail (all-pass) responses over all of them; ``shrinkage_mean`` the mean of the steps';
    ``advantage_mean`` / ``advantage_std`` over all responses (pooled from the steps' moments);
    ``diff_to_grpo_rms`` over all responses, ``diff_to_grpo_max_abs`` the largest of any step."""
    if not records:
        raise ValueError("no steps to summarise")
    out: dict[str, Any] = {
        "steps": len(records),
        "first_step": records[0]["step"],
        "last_step": records[-1]["step"],
    }
    for field in COUNTED:
        out[field] = sum(int(r[field]) for r in records)
    out["group_size_min"] = min(r["group_size_min"] for r in records)
    out["group_size_max"] = max(r["group_size_max"] for r in records)
    n, groups = out["responses"], out["groups"]
    sizes = [r["responses"] for r in records]
    out["reward_mean"] = sum(r["reward_mean"] * m for r, m in zip(records, sizes, strict=True)) / n
    out["estimators"] = {}
    for name in records[0]["estimators"]:
        steps = [r["estimators"][name] for r in records]
        total = {
            field: sum(s[field] for s in steps)
            for field in (
                "nonzero_advantage_responses",
                "zero_signal_groups",
                "signal_where_grpo_has_none",
                "all_fail_groups_with_signal",
            )
        }
        mean = sum(s["advantage_mean"] * m for s, m in zip(steps, sizes, strict=True)) / n
        spread = sum(
            (m - 1) * s["advantage_std"] ** 2 + m * (s["advantage_mean"] - mean) ** 2
            for s, m in zip(steps, sizes, strict=True)
        )
        out["estimators"][name] = {
            "nonzero_advantage_responses": total["nonzero_advantage_responses"],
            "nonzero_advantage_frac": total["nonzero_advantage_responses"] / n,
            "zero_signal_groups": total["zero_signal_groups"],
            "zero_signal_group_frac": total["zero_signal_groups"] / groups,
            "signal_where_grpo_has_none": total["signal_where_grpo_has_none"],
            "all_fail_groups_with_signal": total["all_fail_groups_with_signal"],
            "all_fail_advantage_mean": _weighted_mean(
                records, steps, "all_fail_advantage_mean", "all_fail_responses"
            ),
            "all_pass_advantage_mean": _weighted_mean(
                records, steps, "all_pass_advantage_mean", "all_pass_responses"
            ),
            "shrinkage_mean": sum(s["shrinkage_mean"] for s in steps) / len(steps),
            "advantage_mean": mean,
            "advantage_std": math.sqrt(spread / max(n - 1, 1)),
            "diff_to_grpo_rms": math.sqrt(
                sum(s["diff_to_grpo_rms"] ** 2 * m for s, m in zip(steps, sizes, strict=True)) / n
            ),
            "diff_to_grpo_max_abs": max(s["diff_to_grpo_max_abs"] for s in steps),
        }
    return out


def _weighted_mean(
    records: Sequence[dict[str, Any]], steps: Sequence[dict[str, Any]], field: str, weight: str
) -> float | None:
    """The mean of ``field`` over the responses it concerns (``weight`` of each step)."""
    count = sum(r[weight] for r in records)
    if not count:
        return None
    return (
        sum(s[field] * r[weight] for s, r in zip(steps, records, strict=True) if r[weight]) / count
    )


def replay_steps(
    steps: Iterable[StepBatch], replay: Replay, *, total: int | None = None
) -> list[dict[str, Any]]:
    """Feed ``steps`` to ``replay`` in order; the step records. A tqdm bar on a terminal
    (``total``: the number of steps, when known)."""
    records: list[dict[str, Any]] = []
    # Small tensors (a step's rewards): extra torch threads only add overhead.
    with (
        torch_threads(1),
        tqdm(total=total, desc="replay", unit="step", disable=None, leave=False) as bar,
    ):
        for batch in steps:
            records.append(replay.step(batch))
            bar.update(1)
    if not records:
        raise ValueError("the inputs hold no steps")
    return records
