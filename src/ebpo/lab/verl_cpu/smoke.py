"""``ebpo verl smoke``: verl's training loop on CPU with ebpo inside, twice per estimator — once
straight through, once resumed from the first run's step-2 checkpoint — and the checks that the
two agree (:mod:`~ebpo.lab.verl_cpu.checks`).

``trainer="v1"`` (the default) runs verl's default path exactly as a user starts it: ``python -m
verl.trainer.main_ppo`` with verl's ``ppo_trainer.yaml`` and overrides
(:mod:`~ebpo.lab.verl_cpu.v1.launch`) — Hydra, ``validate_config``, Ray, the ``TaskRunnerV1`` actor,
TransferQueue, ``PPOTrainerSync``'s own ``init``/``fit``/checkpointing, verl's agent loop, reward
loop and load balancer — with the CPU pieces entering through verl's registries
(:mod:`~ebpo.lab.verl_cpu.v1.plugin`), the actor on 2 data-parallel ranks. Each run is its own
``main_ppo`` process (and Ray instance): a resumed run starts as fresh as a user's restart.

``trainer="legacy"`` runs the deprecated ``RayPPOTrainer.fit()`` (``CPURayPPOTrainer``) in a
``TaskRunner`` actor of one local Ray session (:mod:`~ebpo.lab.verl_cpu.legacy.run`).

Per estimator (:data:`~ebpo.lab.verl_cpu.settings.ESTIMATORS`):

* run A: validation before training, ``steps`` training steps, a checkpoint every ``save_step``
  steps (verl's ``_save_checkpoint`` + ebpo's ``EBPOCheckpointCallback``);
* run B: a fresh trainer and fresh workers resumed from run A's ``global_step_<save_step>``. By
  default with verl's defaults (``resume_mode`` ``auto``): B's run folder holds what A had saved
  by that step, its tracker file included (:func:`new_run_dir`), and B is started there with
  ``trainer.resume_mode`` unset (verl's ``auto``) and the relative
  ``trainer.default_local_dir=checkpoints`` (v1; the legacy runs share one Ray session started
  elsewhere, so theirs stays absolute); with ``resume_mode`` ``resume_path``,
  ``trainer.resume_from_path`` names A's folder. verl restores the actor and the dataloader,
  ebpo's callback the estimator state (from the folder verl resumed from: checked); B trains
  the remaining steps, which must equal A's bit for bit. That holds
  because every random draw is seeded per step (legacy: per batch,
  :func:`~ebpo.lab.verl_cpu.shared.sampling.generation_seed`; v1: per sample, from the request id,
  :func:`~ebpo.lab.verl_cpu.shared.sampling.request_seed`), the rows of a step reach the actor in
  dataset order (v1: :mod:`~ebpo.lab.verl_cpu.v1.replay`), the actor's model and AdamW state are
  restored bit for bit, the workers run single-threaded, and the estimator state round-trips
  through JSON losslessly (Python floats).

Both runs dump their rollouts with verl's own writer (``trainer.rollout_data_dir=<run
dir>/rollouts``: ``{step}.jsonl``, steps 1..``steps`` for A, the steps after the checkpoint for B):
what ``ebpo replay`` reads to show what each estimator would have done with the run's rewards.

With ``agent_loop="two_output"`` (v1) the runs use the two-output agent loop
(:mod:`~ebpo.lab.verl_cpu.v1.two_output`: each session answers twice, the second answer scores)
with an empty and a failing session injected in step 1 and in the first step after the checkpoint
(:func:`~ebpo.lab.verl_cpu.session_checks.fault_plan`), and the checks of
:mod:`~ebpo.lab.verl_cpu.session_checks` are added.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ebpo.integrations.verl.resume import TRACKER_FILENAME
from ebpo.lab.cpu_task.policy import cache_dir
from ebpo.lab.verl_cpu import checks, session_checks
from ebpo.lab.verl_cpu.settings import (
    WORK_DIR_MARKER,
    Check,
    EstimatorRun,
    SmokeSettings,
    check_work_dir,
)
from ebpo.lab.verl_cpu.shared import assets
from ebpo.lab.verl_cpu.shared.results import ROLLOUT_DIR, TRACE_DIR, RunResult, console_to
from ebpo.lab.verl_cpu.shared.run_spec import RunSpec
from ebpo.lab.verl_cpu.shared.sessions import FAULTS_ENV, TWO_OUTPUT_LOOP, format_faults
from ebpo.lab.verl_cpu.sub_step_checks import sub_step_checks
from ebpo.lab.verl_cpu.v1.fit import fit_v1

__all__ = [
    "SmokeReport",
    "SmokeRunFailed",
    "new_run_dir",
    "rollout_dump_overrides",
    "run_smoke",
    "run_spec",
]

LEARNING_RATE = 1e-3
MAX_PROMPT_LENGTH = 24
#: ``trainer.default_local_dir`` of the v1 runs with verl's default resume: relative, like verl's own
#: default (``checkpoints/<project>/<experiment>``)
CHECKPOINT_DIR = "checkpoints"


class SmokeRunFailed(RuntimeError):
    """A run of the smoke did not complete (verl or Ray failing on this machine)."""


# ---------------------------------------------------------------------- runs
def rollout_dump_overrides(run_dir: Path) -> tuple[str, ...]:
    """The overrides that depend on the run directory alone, for either trainer: verl dumps every
    step's rollouts (``{step}.jsonl``, verl's own writer) into the run's :data:`ROLLOUT_DIR`, for
    ``ebpo replay``."""
    return (f"trainer.rollout_data_dir={run_dir / ROLLOUT_DIR}",)


def run_spec(
    settings: SmokeSettings,
    run: EstimatorRun,
    files: dict[str, str],
    model_path: str,
    run_dir: Path,
    resume_from: str | None = None,
    extra: Sequence[str] = (),
) -> RunSpec:
    """The smoke's run of ``run`` in ``run_dir``: the settings' sizes, the training file of the
    run's order, its rollout dump, the agent loop (``two_output``: the two-output loop), then the
    estimator's overrides and ``extra`` (last, winning).

    With ``resume_from`` (a ``global_step_<N>`` folder) it resumes from there
    (``resume_mode=resume_path``). Otherwise, with ``settings.resume_mode`` ``auto``, it runs with
    verl's defaults: ``resume_mode`` left at ``auto`` and, on the v1 path, the relative
    ``default_local_dir=checkpoints`` (the run is started in ``run_dir``); the legacy trainer's
    runs share one Ray session started elsewhere, so there the directory stays absolute. With
    ``resume_path`` a run without ``resume_from`` is fresh (``resume_mode=disable``)."""
    fresh_mode = "auto" if settings.resume_mode == "auto" else "disable"
    resume_mode = "resume_path" if resume_from is not None else fresh_mode
    relative = resume_mode == "auto" and settings.trainer == "v1"
    return RunSpec(
        model_path=model_path,
        train_file=assets.train_file(files, run.order),
        val_file=assets.val_file(files),
        run_dir=str(run_dir),
        steps=settings.steps,
        save_freq=settings.save_step,
        batch_size=settings.batch_size,
        group_size=settings.group_size,
        lr=LEARNING_RATE,
        max_prompt_length=MAX_PROMPT_LENGTH,
        max_response_length=settings.max_response_length,
        seed=settings.seed,
        resume_mode=resume_mode,
        resume_from=resume_from,
        checkpoint_dir=CHECKPOINT_DIR if relative else None,
        parameter_sync_step=settings.parameter_sync_step,
        extra=(*rollout_dump_overrides(run_dir), *_agent_loop(settings), *run.overrides, *extra),
    )


def _agent_loop(settings: SmokeSettings) -> tuple[str, ...]:
    """The override that selects the two-output agent loop (``single_turn``: none, the CPU
    loop's default)."""
    if settings.agent_loop != "two_output":
        return ()
    return (f"actor_rollout_ref.rollout.agent.default_agent_loop={TWO_OUTPUT_LOOP}",)


def _failed(run: EstimatorRun, what: str, result: RunResult) -> SmokeRunFailed:
    """One line: the run, its exit code and the last error line of its console."""
    lines = Path(result.console).read_text(errors="replace").splitlines() if result.console else []
    errors = [line for line in lines if "Error" in line and not line.lstrip().startswith("File ")]
    code = result.launch.returncode if result.launch is not None else "?"
    reason = errors[-1].strip() if errors else "no error line in its output"
    return SmokeRunFailed(
        f"{run.name} ({what}): main_ppo exited with code {code}: {reason[:600]} "
        f"(console: {result.console})"
    )


# ---------------------------------------------------------------------- the smoke
@dataclass
class SmokeReport:
    """The checks, and the runs they were made on: ``{estimator: (uninterrupted, resumed)}``."""

    checks: list[Check]
    runs: dict[str, tuple[RunResult, RunResult]]
    files: dict[str, str]  # the parquet files (``ebpo verl prepare-data``)
    model_path: str
    trainer: str = "v1"
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)


#: what the smoke says before it trains the tiny model's warm start (first run with a cache)
WARM_START_NOTE = (
    "first run with this cache: training the tiny model's warm start ({steps} supervised steps; "
    "about 4 min on a 2-core machine), cached in {cache} for the next runs"
)


def prepare(
    settings: SmokeSettings, work: Path, report: Callable[[str], None] = print
) -> tuple[dict[str, str], str]:
    """The parquet files (v1: with short groups) and the tiny model, under ``work``. When the
    model's warm start is not in the cache yet, ``report`` says so first and a progress bar shows
    its training (on stderr)."""
    cache = Path(settings.cache) if settings.cache else cache_dir()
    cached = assets.model_is_cached(cache, warm_steps=settings.warm_steps, seed=settings.seed)
    if not cached:
        report(WARM_START_NOTE.format(steps=settings.warm_steps, cache=cache))
    with console_to(None if settings.verbose else str(work / "prepare.log")):
        files = assets.prepare_data(
            work / "data",
            train_size=settings.train_size,
            val_size=settings.val_size,
            seed=settings.seed,
        )
        model_path = assets.build_model(
            work / "model",
            cache=cache,
            warm_steps=settings.warm_steps,
            seed=settings.seed,
            progress=not cached,
        )
    if settings.trainer == "v1" and settings.short_groups:
        files = assets.with_short_groups(
            files, group_size=settings.group_size, every=settings.short_groups
        )
    return files, model_path


def run_smoke(settings: SmokeSettings, *, report: Callable[[str], None] = print) -> SmokeReport:
    """Run the smoke (see module docstring); ``report`` gets progress lines.

    Raises:
        SmokeRunFailed: a v1 run exited with an error (one line naming it and its console file).
    """
    settings.check()
    from tqdm.auto import tqdm  # heavy optional import

    work = Path(settings.work_dir).resolve()
    check_work_dir(work)
    work.mkdir(parents=True, exist_ok=True)
    (work / WORK_DIR_MARKER).touch()
    start = time.perf_counter()
    report(
        f"preparing data (ebpo verl prepare-data on the arithmetic task) and the tiny model in {work}"
    )
    files, model_path = prepare(settings, work, report)
    runs = settings.runs()
    bar = tqdm(total=2 * len(runs), desc=f"verl fit() on CPU ({settings.trainer})", unit="run")
    if settings.trainer == "v1":
        found, results = _v1_runs(settings, runs, files, model_path, work, bar)
    else:
        found, results = _legacy_runs(settings, runs, files, model_path, work, bar)
    bar.close()
    seconds = {"total": time.perf_counter() - start}
    report(f"done in {seconds['total']:.0f} s; runs under {work}")
    return SmokeReport(found, results, files, model_path, settings.trainer, seconds)


def _pair_checks(
    settings: SmokeSettings, run: EstimatorRun, files: dict[str, str], a: RunResult, b: RunResult
) -> list[Check]:
    found = checks.run_a_checks(settings, run, a) + checks.resume_checks(settings, run, a, b)
    found += [
        checks.rollout_dump_check(run, a, "uninterrupted"),
        checks.rollout_dump_check(run, b, "resumed"),
    ]
    if run.topic_order:
        found += checks.curriculum_checks(settings, run, files, a, b)
    if run.kl_loss:
        found += checks.reference_policy_checks(settings, run, a, b)
    return found


#: one run of the smoke: the spec and its estimator configuration in, the result out
Fit = Callable[[RunSpec, EstimatorRun], RunResult]


def new_run_dir(run_dir: Path, interrupted_at: Path | None = None) -> None:
    """Empty ``run_dir`` (one of the smoke's own run folders). With ``interrupted_at`` (a
    ``global_step_<N>`` folder of another run), leave it as that run's checkpoint directory would
    be had it stopped right after saving step N: the folder copied into ``run_dir/checkpoints``
    and verl's tracker file naming N — what ``trainer.resume_mode=auto`` resumes from."""
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    if interrupted_at is None:
        return
    checkpoints = run_dir / CHECKPOINT_DIR
    shutil.copytree(interrupted_at, checkpoints / interrupted_at.name)
    step = int(interrupted_at.name.removeprefix("global_step_"))
    (checkpoints / TRACKER_FILENAME).write_text(str(step))


def _run_pair(
    settings: SmokeSettings,
    run: EstimatorRun,
    files: dict[str, str],
    model_path: str,
    work: Path,
    bar: Any,
    fit: Fit,
) -> tuple[RunResult, RunResult]:
    """``run`` uninterrupted (run A), then resumed from A's step-``save_step`` checkpoint (run B):
    with ``resume_mode`` ``auto``, B is started again in a run folder that holds what A had saved
    up to that step (:func:`new_run_dir`), as a user restarts a stopped run; with
    ``resume_path`` B names A's folder.

    Raises:
        SmokeRunFailed: a run did not complete.
    """
    bar.set_postfix_str(f"{run.name}: uninterrupted", refresh=True)
    full = work / run.name / "full"
    new_run_dir(full)
    a = fit(run_spec(settings, run, files, model_path, full), run)
    if not a.ok:
        raise _failed(run, "uninterrupted run", a)
    bar.update(1)
    bar.set_postfix_str(f"{run.name}: resumed from step {settings.save_step}", refresh=True)
    # both layouts keep the checkpoints in <run dir>/checkpoints (see run_spec)
    checkpoint = full / CHECKPOINT_DIR / f"global_step_{settings.save_step}"
    resumed = work / run.name / "resumed"
    if settings.resume_mode == "auto":
        new_run_dir(resumed, interrupted_at=checkpoint)
        spec = run_spec(settings, run, files, model_path, resumed)
    else:
        new_run_dir(resumed)
        spec = run_spec(settings, run, files, model_path, resumed, str(checkpoint))
    b = fit(spec, run)
    if not b.ok:
        raise _failed(run, f"resumed from step {settings.save_step}", b)
    bar.update(1)
    return a, b


def _v1_runs(
    settings: SmokeSettings,
    runs: list[EstimatorRun],
    files: dict[str, str],
    model_path: str,
    work: Path,
    bar: Any,
) -> tuple[list[Check], dict[str, tuple[RunResult, RunResult]]]:
    found: list[Check] = []
    results: dict[str, tuple[RunResult, RunResult]] = {}
    launches = []
    two_output = settings.agent_loop == "two_output"
    plans = {
        run.name: session_checks.fault_plan(settings, run, files) for run in runs if two_output
    }

    def fit(spec: RunSpec, run: EstimatorRun) -> RunResult:
        faults = [fault for _, fault in plans.get(run.name, [])]
        env = {FAULTS_ENV: format_faults(faults)} if faults else None
        result = fit_v1(spec, timeout=settings.timeout, verbose=settings.verbose, env=env)
        launches.append(result.launch)
        return result

    for run in runs:
        a, b = _run_pair(settings, run, files, model_path, work, bar, fit)
        results[run.name] = (a, b)
        found += checks.v1_path_checks(run, a, str(Path(a.run_dir) / TRACE_DIR))
        found += _pair_checks(settings, run, files, a, b)
        found.append(checks.resume_source_check(settings, run, a, b))
        found += checks.data_parallel_checks(settings, run, a)
        found += sub_step_checks(settings, run, a)
        if two_output:
            found += session_checks.two_output_checks(settings, run, plans[run.name], a, b)
        found.append(checks.weight_sync_check(run, a, range(1, settings.steps + 1)))
    found += checks.process_checks(f"{len(launches)} main_ppo runs", launches)
    return found, results


def _legacy_runs(
    settings: SmokeSettings,
    runs: list[EstimatorRun],
    files: dict[str, str],
    model_path: str,
    work: Path,
    bar: Any,
) -> tuple[list[Check], dict[str, tuple[RunResult, RunResult]]]:
    import ray  # heavy optional import (verl extra)

    # imports verl: only when the legacy trainer runs
    from ebpo.lab.verl_cpu.legacy.fit import fit_legacy
    from ebpo.lab.verl_cpu.legacy.run import ray_session, start_task_runner

    results: dict[str, tuple[RunResult, RunResult]] = {}
    with ray_session(num_cpus=2):
        runner = start_task_runner()
        names = sorted({run.registry_name for run in runs})
        # in the TaskRunner actor, registered by `import verl` alone (the entry point)
        registered = ray.get(runner.registered.remote(names))
        found = [
            Check(
                "verl's registry in the TaskRunner actor holds ebpo's estimators (entry point)",
                all(module == checks.ADVANTAGE_MODULE for module in registered.values()),
                ", ".join(f"{name} -> {module}" for name, module in registered.items()),
            )
        ]

        def fit(spec: RunSpec, run: EstimatorRun) -> RunResult:
            return fit_legacy(
                runner, spec, curriculum_sampler=run.curriculum_sampler, verbose=settings.verbose
            )

        for run in runs:
            a, b = _run_pair(settings, run, files, model_path, work, bar, fit)
            results[run.name] = (a, b)
            found += _pair_checks(settings, run, files, a, b)
    return found, results
