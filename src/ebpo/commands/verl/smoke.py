"""``ebpo verl smoke``: verl's default training path (``python -m verl.trainer.main_ppo``, the v1
trainer; ``--trainer legacy``: ``RayPPOTrainer.fit()``) on this CPU with ebpo inside, a checkpoint
and a resumed run that must repeat the last steps exactly; the summary prints the ``ebpo replay``
command for the runs' rollout dumps. Its command line: every argument is checked before anything
is written or anything slow is imported; the runs and their checks are
:func:`ebpo.lab.verl_cpu.smoke.run_smoke`'s.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from ebpo.commands import Parser, one_line
from ebpo.commands.verl import launcher
from ebpo.integrations.verl.recipes import RECIPES
from ebpo.lab.verl_cpu.settings import (
    AGENT_LOOPS,
    ESTIMATORS,
    MIN_STEPS,
    RESUME_MODES,
    TRAINERS,
    SmokeSettings,
    check_work_dir,
)
from ebpo.lab.verl_cpu.shared.results import ROLLOUT_DIR
from ebpo.utils.files import check_output_path
from ebpo.utils.plotting import plots_available

if TYPE_CHECKING:
    from ebpo.lab.verl_cpu.smoke import SmokeReport

__all__ = ["replay_hints", "run_smoke_command", "smoke_parser"]


def _add_shape_arguments(p: argparse.ArgumentParser) -> None:
    """The options that change the shape of the smoke's v1 steps: verl's sub-steps and the agent
    loop."""
    p.add_argument(
        "--parameter-sync-step",
        type=int,
        default=1,
        help="v1: verl's sub-steps (+trainer.v1.sync.parameter_sync_step=N, the mechanism of its "
        "async modes): N estimator calls and actor updates a step, each on 1/N of the batch; "
        "ebpo's counts are still those of the step (default: %(default)s)",
    )
    p.add_argument(
        "--agent-loop",
        choices=list(AGENT_LOOPS),
        default="single_turn",
        help="verl's agent loop of the v1 runs: single_turn (one answer a session) or two_output "
        "(each session answers twice, the second answer scores; an empty and a failing session "
        "are injected before and after the checkpoint, and checks show that the estimator saw "
        "one row per session and counted the missing ones in <estimator>/missing_sessions)",
    )


def smoke_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="ebpo verl smoke",
        description=(
            "Run verl's default training path (python -m verl.trainer.main_ppo) on this CPU with "
            "ebpo inside: a tiny model on the arithmetic task, 4 steps, a checkpoint at step 2 and "
            "a resumed run that must repeat steps 3-4 exactly. Exit 0 when every check passes. "
            "Checks an install before GPUs. Every run dumps its rollouts with verl's writer "
            "(trainer.rollout_data_dir: RUN/rollouts/{step}.jsonl); the summary prints the "
            "`ebpo replay` command that replays them."
        ),
    )
    p.add_argument(
        "--estimator",
        action="append",
        choices=list(ESTIMATORS),
        help="estimator configuration to run (repeatable; default: ebpo)",
    )
    p.add_argument(
        "--recipe",
        action="append",
        choices=list(RECIPES),
        help="a recipe of `ebpo verl recipe --list` run through the same CPU loop (repeatable): "
        "its algorithm and actor keys kept (reference policy and KL loss included), only the "
        "model, sizes, rollout engine and strategy replaced; alone, it runs instead of the "
        "default estimator",
    )
    p.add_argument(
        "--all", action="store_true", help=f"run all of {', '.join(ESTIMATORS)} (3 × the time)"
    )
    p.add_argument(
        "--trainer",
        choices=list(TRAINERS),
        default="v1",
        help="v1: verl's default path, python -m verl.trainer.main_ppo (TaskRunnerV1, "
        "TransferQueue, PPOTrainerSync; ~1.5 min a run); legacy: the deprecated RayPPOTrainer.fit()",
    )
    p.add_argument(
        "--resume-mode",
        choices=list(RESUME_MODES),
        default="auto",
        help="how the second run resumes from the first one's checkpoint: auto (verl's default: "
        "trainer.resume_mode=auto, the relative trainer.default_local_dir, the run started again "
        "where the first one had saved it; legacy: the directory stays absolute) or resume_path "
        "(trainer.resume_from_path names the checkpoint folder)",
    )
    _add_shape_arguments(p)
    p.add_argument(
        "--steps",
        type=int,
        default=4,
        help=f"training steps of the uninterrupted run (default: %(default)s, at least {MIN_STEPS}); "
        "the checkpoint is 2 steps before the end and the resumed run repeats the last 2. A longer "
        "run makes a longer rollout dump for `ebpo replay` (a v1 step took about a second on 2 "
        "CPU cores; --steps 47 took 3 min 36 s)",
    )
    p.add_argument(
        "--work-dir",
        default=None,
        help="where the runs go (default: a temporary directory, removed when the smoke passes, "
        "rollout dumps included)",
    )
    p.add_argument("--keep", action="store_true", help="keep the temporary work directory")
    p.add_argument(
        "--verbose", action="store_true", help="show verl's console output (default: into files)"
    )
    return p


def _check_sub_steps(settings: SmokeSettings) -> None:
    """With ``--parameter-sync-step`` > 1, refuse (before any run starts) a configuration the
    plug-in's guards refuse under sub-steps (a per-call decay: ``jspo_plus_plus``'s smoothing),
    in the guard's own words."""
    if settings.parameter_sync_step <= 1:
        return
    sub_steps = f"+trainer.v1.sync.parameter_sync_step={settings.parameter_sync_step}"
    for run in settings.runs():
        try:
            launcher.check_overrides([*run.overrides, sub_steps])
        except ValueError as error:
            raise ValueError(
                f"--parameter-sync-step {settings.parameter_sync_step} with {run.name}: {error}"
            ) from error


def run_smoke_command(args: argparse.Namespace) -> int:
    if args.all and args.estimator:
        raise ValueError("pass either --all or --estimator, not both")
    recipes = tuple(dict.fromkeys(args.recipe or []))
    default = [] if recipes else ["ebpo"]
    names = tuple(ESTIMATORS) if args.all else tuple(dict.fromkeys(args.estimator or default))
    if args.work_dir is not None:
        check_output_path(args.work_dir, "--work-dir", kind="dir")
        check_work_dir(args.work_dir)
    # every argument is checked before anything is written or anything slow is imported
    sizes = {
        "estimators": names,
        "recipes": recipes,
        "trainer": args.trainer,
        "resume_mode": args.resume_mode,
        "parameter_sync_step": args.parameter_sync_step,
        "agent_loop": args.agent_loop,
    }
    checked = SmokeSettings.of_length(args.steps, work_dir=args.work_dir or ".", **sizes)
    checked.check()
    _check_sub_steps(checked)
    temporary = args.work_dir is None
    work = args.work_dir or tempfile.mkdtemp(prefix="ebpo-verl-smoke-")
    settings = SmokeSettings.of_length(args.steps, work_dir=work, verbose=args.verbose, **sizes)

    from ebpo.lab.verl_cpu.smoke import run_smoke  # imports verl, ray, transformers

    path = (
        "verl's default path (python -m verl.trainer.main_ppo: TaskRunnerV1, TransferQueue, "
        "PPOTrainerSync.fit)"
        if args.trainer == "v1"
        else "verl's legacy RayPPOTrainer.fit()"
    )
    print(
        f"ebpo verl smoke: {path} on CPU with {', '.join([*names, *(f'recipe {r}' for r in recipes)])} "
        "(each run starts Ray and verl's workers: most of its time)...",
        flush=True,
    )
    try:
        result = run_smoke(settings, report=lambda line: print(line, flush=True))
    except Exception as error:  # verl / Ray failing on this machine: exit 1, not a user error
        message = one_line(error)
        print(
            f"verl CPU smoke FAILED: {type(error).__name__}: {message[:2000]} (runs kept in {work})",
            file=sys.stderr,
        )
        return 1
    for check in result.checks:
        print(f"[{'ok  ' if check.ok else 'FAIL'}] {check.name}: {check.detail}")
    failed = [check for check in result.checks if not check.ok]
    if failed:
        print(
            f"verl CPU smoke FAILED: {len(failed)} of {len(result.checks)} checks; runs kept in {work}"
        )
        return 1
    removed = temporary and not args.keep
    if removed:
        shutil.rmtree(work, ignore_errors=True)
        where = "(temporary runs removed)"
    else:
        where = f"(runs in {work})"
    print(f"verl CPU smoke OK: {len(result.checks)} checks passed {where}")
    for line in replay_hints(result, removed=removed):
        print(line)
    return 0


def replay_hints(result: SmokeReport, *, removed: bool) -> list[str]:
    """Where each estimator's rollout dumps are (verl's ``trainer.rollout_data_dir``) and the
    ``ebpo replay`` command for the uninterrupted run's (with ``--no-plots`` where the plot extra
    is not installed: the command runs where it is printed); if the temporary runs were removed,
    how to keep them."""
    no_plots = "" if plots_available() else " --no-plots"
    if removed:
        name = next(iter(result.runs))
        return [
            "verl's rollout dumps (trainer.rollout_data_dir) were removed with the temporary runs; "
            f"to replay them, run the smoke with --work-dir DIR (or --keep), then: ebpo replay "
            f"DIR/{name}/full/{ROLLOUT_DIR} --output-dir DIR/{name}/replay{no_plots}"
        ]
    lines = []
    for name, (full, resumed) in result.runs.items():
        dumps = ", ".join(
            f"{run.rollout_dir} (steps {run.trace[0].step}-{run.trace[-1].step})"
            for run in (full, resumed)
            if run.trace
        )
        out = Path(full.run_dir).parent / "replay"
        lines += [
            f"{name}: verl's rollout dumps (trainer.rollout_data_dir): {dumps}",
            f"{name}: replay the run through every estimator: ebpo replay "
            f"{shlex.quote(str(full.rollout_dir))} --output-dir {shlex.quote(str(out))}{no_plots}",
        ]
    return lines
