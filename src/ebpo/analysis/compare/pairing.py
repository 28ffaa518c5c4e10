"""Which runs are compared with which: pairs by seed, checked to differ in nothing but estimator and
seed, and the metrics and steps they share.

Every estimator other than the baseline is paired with the baseline seed by seed. Refused, each
in one line (ValueError): no runs, runs of different kinds (a verl run against a TRL run), one
estimator only, two runs of one estimator with the same seed, an estimator whose seeds the
baseline lacks, settings that differ between runs in a key other than the estimator's and the
seed's (the differing keys named; ``--ignore KEY`` accepts a difference on purpose), no metric
logged by every run, no step common to a compared metric, a compared metric that is not a finite
number at a common step or that a run logged twice at a step with two values.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ebpo.analysis.compare.runs import Run

__all__ = [
    "ALWAYS_IGNORED",
    "EVAL_PATTERNS",
    "METRIC_SOURCES",
    "REWARD_METRICS",
    "Pairs",
    "check_settings",
    "choose_metrics",
    "common_steps",
    "pair_runs",
]

#: settings that differ between the runs of a fair comparison by design (fnmatch patterns): the
#: estimator and what belongs to it (TRL's ``scale_rewards``: EBPOConfig leaves it unset for the
#: estimator to decide, GRPOConfig says "group"), the seeds, where each run writes, how it is named
ALWAYS_IGNORED = (
    "advantage_estimator", "estimator", "estimator_options", "estimator_options.*",
    "scale_rewards", "*seed",
    "output_dir", "logging_dir", "run_name", "hub_model_id", "resume_from_checkpoint",
    "distributed_state", "algorithm.adv_estimator", "trainer.default_local_dir",
    "trainer.experiment_name", "trainer.project_name", "trainer.rollout_data_dir",
    "trainer.validation_data_dir", "ray_kwargs.*", "hydra.*",
)  # fmt: skip
#: metrics read as evaluations, by kind: TRL's evaluation rewards, verl's ``val-core/*``
#: (accuracy per data source), the lab's held-out Pass@1
EVAL_PATTERNS = ("eval_reward", "eval_rewards/*/mean", "val-core/*", "heldout/pass@1")
#: how the metrics were chosen: named with --metric, ``--metric all``, the evaluation metrics every
#: run logged, or — none — the training reward (not a held-out result)
METRIC_SOURCES = ("asked", "all", "evaluation", "training reward")
#: the training reward, by kind
REWARD_METRICS = ("reward", "critic/score/mean", "critic/rewards/mean")
#: a seed sorted as a number: ASCII digits, few enough for int() (a label may say more)
_NUMBER = re.compile(r"-?[0-9]{1,100}")
#: the most setting keys a refusal names before "and N more"
_SHOWN = 6


@dataclass(frozen=True)
class Pairs:
    """``runs[estimator][seed]``, the baseline's name, and the seeds of each estimator's pairs."""

    runs: dict[str, dict[str, Run]]
    baseline: str

    @property
    def estimators(self) -> list[str]:
        return [e for e in self.runs if e != self.baseline]

    def seeds(self, estimator: str) -> list[str]:
        return _sorted_seeds(set(self.runs[estimator]) & set(self.runs[self.baseline]))


def pair_runs(runs: Sequence[Run], baseline: str) -> Pairs:
    """The runs grouped by estimator and seed, each estimator's seeds all present in the baseline."""
    if not runs:
        raise ValueError("RUN: expected finished runs to compare, got none")
    kinds = sorted({run.kind for run in runs})
    if len(kinds) > 1:
        raise ValueError(f"RUN: the runs are of different kinds ({', '.join(kinds)}): compare "
                         "runs of one trainer")  # fmt: skip
    grouped: dict[str, dict[str, Run]] = {}
    for run in runs:
        assert run.estimator is not None and run.seed is not None  # read_run saw to it
        seeds = grouped.setdefault(run.estimator, {})
        if run.seed in seeds:
            raise ValueError(
                f"RUN: {str(seeds[run.seed].path)!r} and {str(run.path)!r} are both "
                f"{run.estimator} with seed {run.seed}: each estimator needs one run per seed; "
                "where they are two methods that record one estimator (the recipes dapo and "
                "entropy_mech train with grpo's advantages), label each: METHOD@SEED=PATH"
            )
        seeds[run.seed] = run
    if baseline not in grouped:
        raise ValueError(f"--baseline {baseline!r}: no run of it among the runs (estimators: "
                         f"{', '.join(sorted(grouped))})")  # fmt: skip
    if len(grouped) < 2:
        raise ValueError(f"RUN: every run is {baseline}: expected runs of another estimator "
                         "to compare with it")  # fmt: skip
    for estimator, seeds in grouped.items():
        missing = _sorted_seeds(set(seeds) - set(grouped[baseline]))
        if missing and estimator != baseline:
            raise ValueError(
                f"RUN: {estimator} has seed(s) {', '.join(missing)} that the baseline "
                f"{baseline} lacks: every seed needs its baseline run"
            )
    ordered = {baseline: grouped[baseline]} | {k: v for k, v in grouped.items() if k != baseline}
    return Pairs(ordered, baseline)


def check_settings(runs: Sequence[Run], ignore: Sequence[str] = ()) -> list[str]:
    """The keys whose values differ between runs, among the keys every run has, less the
    :data:`ALWAYS_IGNORED` ones; ValueError naming them unless ``ignore`` (fnmatch patterns)
    accepts them. Returns the accepted differences."""
    patterns = (*ALWAYS_IGNORED, *ignore)
    shared = set.intersection(*(set(run.settings) for run in runs)) if runs else set()
    differing = sorted(
        key for key in shared
        if len({run.settings[key] for run in runs}) > 1
        and not any(fnmatch.fnmatchcase(key, pattern) for pattern in ALWAYS_IGNORED)
    )  # fmt: skip
    refused = [k for k in differing if not any(fnmatch.fnmatchcase(k, p) for p in patterns)]
    if refused:
        shown = ", ".join(f"{k} ({_values(runs, k)})" for k in refused[:_SHOWN])
        more = f" and {len(refused) - _SHOWN} more" if len(refused) > _SHOWN else ""
        raise ValueError(
            f"RUN: the runs differ in more than estimator and seed: {shown}{more}; pass "
            f"--ignore KEY for each difference that is on purpose"
        )
    return differing


def choose_metrics(pairs: Pairs, asked: Sequence[str]) -> tuple[list[str], str]:
    """The metrics to compare and where they come from (:data:`METRIC_SOURCES`): ``asked``
    (``all``: every metric every run logged as a number at steps they all share), else the
    evaluation metrics every run logged, else the training reward. ValueError when an asked
    metric is missing from a run."""
    runs = [run for seeds in pairs.runs.values() for run in seeds.values()]
    shared = set.intersection(*(set(run.metrics) for run in runs))
    if list(asked) == ["all"]:  # those every run logged as numbers at some step they share
        comparable = sorted(m for m in shared if _comparable(runs, m))
        if not comparable:
            raise ValueError(
                "--metric all: no metric that every run logged as a finite number at a step they "
                f"all share (logged by every run: {', '.join(sorted(shared)[:8]) or 'none'})"
            )
        return comparable, "all"
    for name in asked:
        lacking = [str(run.path) for run in runs if name not in run.metrics]
        if lacking:
            raise ValueError(f"--metric {name!r}: not logged by {', '.join(lacking[:3])}"
                             + (f" and {len(lacking) - 3} more" if len(lacking) > 3 else ""))  # fmt: skip
    if asked:
        return list(dict.fromkeys(asked)), "asked"
    evals = sorted(m for m in shared if any(fnmatch.fnmatchcase(m, p) for p in EVAL_PATTERNS))
    if evals:
        return evals, "evaluation"
    reward = [m for m in REWARD_METRICS if m in shared]
    if reward:
        return reward[:1], "training reward"
    raise ValueError(
        "RUN: the runs share no evaluation metric and no training reward "
        f"({', '.join(REWARD_METRICS)}); name one with --metric (shared: "
        f"{', '.join(sorted(shared)[:8]) or 'none'})"
    )


def common_steps(runs: Sequence[Run], metric: str) -> list[int]:
    """The steps at which every run logged ``metric``; ValueError when there are none, when a
    run logged it twice at a step with two values, or when a run's value at a common step is not
    a finite number."""
    steps = sorted(set.intersection(*(set(run.metrics[metric]) for run in runs)))
    if not steps:
        raise ValueError(
            f"RUN: no step at which every run logged {metric!r} "
            f"(steps: {'; '.join(_span(run, metric) for run in runs[:4])})"
        )
    for run in runs:
        conflicts = run.conflicts.get(metric, {})
        if conflicts:
            step, (first, then) = min(conflicts.items())
            raise ValueError(
                f"RUN: {str(run.path)!r} ({run.name}) logged {metric!r} twice at step {step} "
                f"with different values ({first!r}, then {then!r}){_more(conflicts)}: which one "
                "is the run's? Keep one log per run"
            )
        bad = [s for s in steps if not math.isfinite(run.metrics[metric][s])]
        if bad:
            raise ValueError(
                f"RUN: {str(run.path)!r} logged {metric!r} as NaN or nothing at step(s) "
                f"{', '.join(map(str, bad[:5]))} (null, NaN, infinity or text): a compared value "
                "must be a finite number"
            )
    return steps


def _more(conflicts: dict[int, tuple[float, float]]) -> str:
    return f" (and at {len(conflicts) - 1} more step(s))" if len(conflicts) > 1 else ""


def _comparable(runs: Sequence[Run], metric: str) -> bool:
    steps = set.intersection(*(set(run.metrics[metric]) for run in runs))
    return (
        bool(steps)
        and not any(run.conflicts.get(metric) for run in runs)
        and all(math.isfinite(run.metrics[metric][s]) for run in runs for s in steps)
    )


def _span(run: Run, metric: str) -> str:
    steps = sorted(run.metrics[metric])
    return f"{run.name} {steps[0]}..{steps[-1]}"


def _values(runs: Sequence[Run], key: str) -> str:
    values = list(dict.fromkeys(run.settings[key] for run in runs))
    shown = " vs ".join(v if len(v) <= 40 else v[:37] + "..." for v in values[:3])
    return shown + (" ..." if len(values) > 3 else "")


def _sorted_seeds(seeds: set[str]) -> list[str]:
    """Seeds in numeric order where they are whole numbers of ASCII digits (2 before 10), the
    others after them in text order."""
    return sorted(seeds, key=lambda s: (0, int(s), s) if _NUMBER.fullmatch(s) else (1, 0, s))
