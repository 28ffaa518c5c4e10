"""``ebpo verl smoke``: verl's own ``RayPPOTrainer.fit()`` on CPU with ebpo inside, twice per
estimator — once straight through, once resumed from the first run's step-2 checkpoint — and the
checks that the two agree.

Both runs go through one :class:`~ebpo.lab.verl_cpu.run.TaskRunner` Ray actor (whose estimator
store is cleared before each run, as in a fresh process). Per estimator (:data:`ESTIMATORS`):

* run A: validation before training, ``steps`` training steps, a checkpoint every ``save_step``
  steps (verl's ``_save_checkpoint`` + ebpo's ``EBPOCheckpointCallback``);
* run B: a fresh trainer and fresh workers, ``trainer.resume_mode=resume_path`` from run A's
  ``global_step_<save_step>``; verl restores the actor, the dataloader (and the sampler inside it)
  and ebpo's callback restores the estimator state; it trains the remaining steps.

Checked (each a :class:`Check`): the estimator verl calls in the TaskRunner is the plug-in's
(entry point); run A
trained every step with validation first; our ``compute_score`` scored it (its extra keys in
verl's validation metrics); verl's file AND console loggers carry the ``<estimator>/*`` metrics at
every step (the side channel); the checkpoint folder holds the actor, ``data.pt`` and the
estimator state; run B's steps after the checkpoint have exactly (``torch.equal``, ``==``) the
same prompts, rewards, advantages and ``<estimator>/*`` metrics as run A's, and both end with the
same estimator state. Exact equality holds because every random draw is seeded per step (sampling,
see :func:`~ebpo.lab.verl_cpu.worker.generation_seed`), the actor's model and AdamW state are
restored bit for bit, the worker runs single-threaded in both runs, and the estimator state
round-trips through JSON losslessly (Python floats). ``ebpo_topic`` also checks that the prompts
follow ebpo's ``CurriculumSampler`` topic order, in verl's ``StatefulDataLoader``, across the
mid-epoch resume.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ebpo.integrations.verl.curriculum_sampler import CurriculumSampler
from ebpo.integrations.verl.state import STATE_FILENAME
from ebpo.lab.cpu_task.policy import cache_dir
from ebpo.lab.verl_cpu import assets
from ebpo.lab.verl_cpu.run import (
    METRICS_LOG,
    RunResult,
    compose_config,
    console_to,
    ray_session,
    start_task_runner,
)
from ebpo.lab.verl_cpu.settings import ESTIMATORS, Check, EstimatorRun, SmokeSettings
from ebpo.lab.verl_cpu.worker import CHECKPOINT_FILE

__all__ = ["SmokeReport", "contiguous_blocks", "fit_once", "run_smoke"]

CONSOLE_LOG = "verl_console.log"
ADVANTAGE_MODULE = "ebpo.integrations.verl.advantage"


# ---------------------------------------------------------------------- runs
def fit_once(
    runner: Any,
    settings: SmokeSettings,
    run: EstimatorRun,
    files: dict[str, str],
    model_path: str,
    run_dir: Path,
    resume_from: str | None,
    extra: Sequence[str] = (),
) -> RunResult:
    """One ``fit()`` of ``run`` in ``run_dir`` (emptied first) by ``runner`` (a
    :class:`~ebpo.lab.verl_cpu.run.TaskRunner` actor, inside :func:`ray_session`); ``extra`` Hydra
    overrides come last."""
    import ray  # heavy optional import (verl extra)

    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    config = compose_config(
        model_path=model_path,
        train_file=assets.train_file(files, run.order),
        val_file=assets.val_file(files),
        run_dir=str(run_dir),
        total_steps=settings.steps,
        save_freq=settings.save_step,
        batch_size=settings.batch_size,
        group_size=settings.group_size,
        mini_batch_size=settings.batch_size,
        lr=1e-3,
        max_prompt_length=24,
        max_response_length=settings.max_response_length,
        resume_from=resume_from,
        seed=settings.seed,
        extra=(*run.overrides, *extra),
    )
    console = None if settings.verbose else str(run_dir / CONSOLE_LOG)
    return ray.get(runner.run.remote(config, run.curriculum_sampler, console))


# ---------------------------------------------------------------------- checks
def _prefixed(metrics: dict[str, Any], prefix: str) -> dict[str, Any]:
    return {key: value for key, value in metrics.items() if key.startswith(prefix + "/")}


def _plugin_check(runner: Any, names: Sequence[str]) -> Check:
    import ray  # heavy optional import (verl extra)

    # in the TaskRunner actor, registered by `import verl` alone (the entry point)
    found = ray.get(runner.registered.remote(list(names)))
    ok = all(module == ADVANTAGE_MODULE for module in found.values())
    detail = ", ".join(f"{name} -> {module}" for name, module in found.items())
    return Check(
        "verl's registry in the TaskRunner actor holds ebpo's estimators (entry point)", ok, detail
    )


def _run_a_checks(settings: SmokeSettings, run: EstimatorRun, a: RunResult) -> list[Check]:
    prefix = run.registry_name
    steps = list(range(1, settings.steps + 1))
    val = a.metrics.get(0, {})
    reward_keys = [k for k in val if k.startswith("val-") and k.split("/")[-2] == "unscorable"]
    logged = [s for s in steps if _prefixed(a.metrics.get(s, {}), prefix)]
    console = (Path(a.run_dir) / CONSOLE_LOG).read_text() if not settings.verbose else ""
    in_console = [s for s in steps if f"step:{s} - " in console and f" - {prefix}/" in console]
    folder = Path(a.run_dir) / "checkpoints" / f"global_step_{settings.save_step}"
    files = [folder / "actor" / CHECKPOINT_FILE, folder / "data.pt", folder / STATE_FILENAME]
    advantages = [float(t.advantages.abs().max()) for t in a.trace]
    checks = [
        Check(
            f"{run.name}: fit() trained {settings.steps} steps",
            [t.step for t in a.trace] == steps,
            f"steps {[t.step for t in a.trace]} in {a.seconds:.1f} s; max |advantage| per step "
            + ", ".join(f"{x:.3f}" for x in advantages),
        ),
        Check(
            f"{run.name}: validation before training, scored by ebpo's compute_score",
            bool(val) and bool(reward_keys),
            f"step 0: {len(val)} validation metrics, compute_score's extra keys: {reward_keys}",
        ),
        Check(
            f"{run.name}: verl's file logger has {prefix}/* at every step",
            logged == steps,
            f"steps {logged} of {steps} in {Path(a.run_dir) / METRICS_LOG} (e.g. "
            f"{sorted(_prefixed(a.metrics.get(steps[-1], {}), prefix))[:3]})",
        ),
        Check(
            f"{run.name}: the trainer's `metrics` dict reached from the estimator (console too)",
            settings.verbose or in_console == steps,
            "console output shown (--verbose)"
            if settings.verbose
            else f"steps {in_console} in {Path(a.run_dir) / CONSOLE_LOG}",
        ),
        Check(
            f"{run.name}: checkpoint at step {settings.save_step} (actor, dataloader, estimator state)",
            all(f.is_file() for f in files),
            ", ".join(f"{f.relative_to(folder)}{'' if f.is_file() else ' MISSING'}" for f in files),
        ),
        Check(
            f"{run.name}: the rewards reached the estimator",
            any(x > 0 for x in advantages),
            "some advantage is non-zero"
            if any(x > 0 for x in advantages)
            else "every advantage is 0 (no reward variance: nothing compared)",
        ),
    ]
    return checks


def _resume_checks(
    settings: SmokeSettings, run: EstimatorRun, a: RunResult, b: RunResult
) -> list[Check]:
    import torch  # heavy optional import

    prefix = run.registry_name
    after = list(range(settings.save_step + 1, settings.steps + 1))
    by_step_a = {t.step: t for t in a.trace}
    by_step_b = {t.step: t for t in b.trace}
    same = {"prompts": [], "rewards": [], "advantages": [], "metrics": []}
    for step in after:
        ta, tb = by_step_a.get(step), by_step_b.get(step)
        if ta is None or tb is None:
            continue
        if ta.prompt_ids == tb.prompt_ids:
            same["prompts"].append(step)
        if torch.equal(ta.token_level_rewards, tb.token_level_rewards):
            same["rewards"].append(step)
        if torch.equal(ta.advantages, tb.advantages):
            same["advantages"].append(step)
        ma, mb = (
            _prefixed(a.metrics.get(step, {}), prefix),
            _prefixed(b.metrics.get(step, {}), prefix),
        )
        if ma and ma == mb:
            same["metrics"].append(step)
    saved = [
        json.loads(
            (
                Path(r.run_dir) / "checkpoints" / f"global_step_{settings.steps}" / STATE_FILENAME
            ).read_text()
        )
        if (
            Path(r.run_dir) / "checkpoints" / f"global_step_{settings.steps}" / STATE_FILENAME
        ).is_file()
        else None
        for r in (a, b)
    ]
    nonzero = [s for s in after if s in by_step_a and bool(by_step_a[s].advantages.abs().max() > 0)]
    checks = [
        Check(
            f"{run.name}: resumed run trained steps {after} only",
            [t.step for t in b.trace] == after,
            f"steps {[t.step for t in b.trace]} in {b.seconds:.1f} s",
        ),
        *(
            Check(
                f"{run.name}: resumed steps {after} have the same {what} (exact)",
                steps == after,
                f"equal at steps {steps}"
                + (f"; non-zero advantages at steps {nonzero}" if what == "advantages" else ""),
            )
            for what, steps in same.items()
        ),
        Check(
            f"{run.name}: same estimator state at the end (in memory and in global_step_{settings.steps})",
            a.estimator_state == b.estimator_state
            and saved[0] is not None
            and saved[0] == saved[1],
            f"{len(a.estimator_state.get('estimators', []))} estimator(s); "
            f"saved states {'equal' if saved[0] is not None and saved[0] == saved[1] else 'DIFFER'}",
        ),
    ]
    return checks


def _curriculum_checks(
    settings: SmokeSettings, run: EstimatorRun, files: dict[str, str], a: RunResult, b: RunResult
) -> list[Check]:
    import pandas as pd  # heavy optional import

    frame = pd.read_parquet(assets.train_file(files, run.order))
    order = CurriculumSampler(data_source=frame, order="topic", seed=0).indices(0)
    ids = [str(frame["extra_info"][i]["id"]) for i in order]
    topic_of = {str(info["id"]): info["topic"] for info in frame["extra_info"]}
    # Compared step by step as sets: verl's balance_batch (on in these runs) reorders the rows of a
    # step by sequence length, so the order inside a step depends on what the model wrote.
    size = settings.batch_size
    steps_a = [set(t.prompt_ids) for t in a.trace]
    steps_b = [set(t.prompt_ids) for t in b.trace]
    # run B (resumed) starts with the sampler's batch number save_step (0-based)
    resumed_at = settings.save_step
    walked = steps_a == [set(ids[k * size : (k + 1) * size]) for k in range(len(steps_a))]
    topics = [topic_of[pid] for pid in ids[: len(steps_a) * size]]
    continued = steps_b == [
        set(ids[(resumed_at + k) * size : (resumed_at + k + 1) * size]) for k in range(len(steps_b))
    ]
    return [
        Check(
            f"{run.name}: verl's dataloader walked ebpo's CurriculumSampler (topic order)",
            walked and contiguous_blocks(topics),
            f"topics of the prompts trained on: {' '.join(dict.fromkeys(topics))} "
            f"({len(steps_a)} steps of {size} prompts, file order is shuffled)",
        ),
        Check(
            f"{run.name}: the resumed dataloader continued mid-epoch where the checkpoint left it",
            continued,
            f"resumed at prompt {resumed_at * size} of {len(ids)} (epoch of {len(ids) // size} steps)",
        ),
    ]


def contiguous_blocks(topics: list[str]) -> bool:
    """Each topic appears in one contiguous block."""
    blocks = [t for i, t in enumerate(topics) if i == 0 or topics[i - 1] != t]
    return len(blocks) == len(set(blocks))


# ---------------------------------------------------------------------- the smoke
@dataclass
class SmokeReport:
    """The checks, and the runs they were made on: ``{estimator: (uninterrupted, resumed)}``."""

    checks: list[Check]
    runs: dict[str, tuple[RunResult, RunResult]]
    files: dict[str, str]  # the parquet files (``ebpo verl prepare-data``)
    model_path: str

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)


def run_smoke(settings: SmokeSettings, *, report: Callable[[str], None] = print) -> SmokeReport:
    """Run the smoke (see module docstring); ``report`` gets progress lines."""
    settings.check()
    from tqdm.auto import tqdm  # heavy optional import

    work = Path(settings.work_dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    report(
        f"preparing data (ebpo verl prepare-data on the arithmetic task) and the tiny model in {work}"
    )
    with console_to(None if settings.verbose else str(work / "prepare.log")):
        files = assets.prepare_data(
            work / "data",
            train_size=settings.train_size,
            val_size=settings.val_size,
            seed=settings.seed,
        )
        model_path = assets.build_model(
            work / "model",
            cache=Path(settings.cache) if settings.cache else cache_dir(),
            warm_steps=settings.warm_steps,
            seed=settings.seed,
        )
    runs = [ESTIMATORS[name] for name in settings.estimators]
    results: dict[str, tuple[RunResult, RunResult]] = {}
    bar = tqdm(total=2 * len(runs), desc="verl fit() on CPU", unit="run")
    with ray_session(num_cpus=2):
        runner = start_task_runner()
        checks = [_plugin_check(runner, sorted({run.registry_name for run in runs}))]
        for run in runs:
            bar.set_postfix_str(f"{run.name}: uninterrupted", refresh=True)
            a = fit_once(runner, settings, run, files, model_path, work / run.name / "full", None)
            bar.update(1)
            bar.set_postfix_str(f"{run.name}: resumed from step {settings.save_step}", refresh=True)
            checkpoint = (
                work / run.name / "full" / "checkpoints" / f"global_step_{settings.save_step}"
            )
            b = fit_once(
                runner,
                settings,
                run,
                files,
                model_path,
                work / run.name / "resumed",
                str(checkpoint),
            )
            bar.update(1)
            results[run.name] = (a, b)
            checks += _run_a_checks(settings, run, a)
            checks += _resume_checks(settings, run, a, b)
            if run.curriculum_sampler:
                checks += _curriculum_checks(settings, run, files, a, b)
    bar.close()
    report(f"done in {time.perf_counter() - start:.0f} s; runs under {work}")
    return SmokeReport(checks, results, files, model_path)
