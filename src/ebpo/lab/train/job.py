"""The ``ebpo train`` job: warm start, held-out Pass@1 before, RL with an ebpo estimator on TRL,
held-out Pass@1 after, with logs, plots, checkpoints and resume.

    from ebpo.lab.train.job import TrainJobConfig, run_train_job
    result = run_train_job(TrainJobConfig(estimator="grpo", group_size=2, seed=1))
    result["before"]["overall"], result["after"]["overall"], result["run_dir"]

The options are :class:`~ebpo.lab.train.config.TrainJobConfig` (:mod:`ebpo.lab.train.config`, also
importable from here). Their defaults are the built-in run (``ebpo train`` with no arguments):
the two-layer character-level model (nothing downloaded), warm-started by supervised learning on
arithmetic, first on clean answers, then on answers corrupted in one digit half of the time
(:mod:`ebpo.lab.cpu_task.policy`; cached on disk), then 200 RL steps of EBPO (G = 4, 32 fresh prompts per
step, :mod:`ebpo.lab.cpu_task.task`) through :class:`ebpo.integrations.trl.EBPOTrainer`. The figures it
reaches are in docs/results.md.

A run directory holds::

    run.json             manifest: the run's options, status and step (ebpo.lab.runs.directory)
    eval_before.json     held-out Pass@1 per problem and per topic / tier, before RL
    eval_after.json      the same after RL (and eval_validation.json when asked for)
    results.json         what run_train_job returns
    metrics.jsonl        one JSON object per step (TRL's metrics, ebpo/ estimator metrics,
                         heldout/ Pass@1 when evaluated)
    tensorboard/         TensorBoard event files
    plots/*.png          reward (raw and smoothed), held-out Pass@1, entropy, gradient norm, shrinkage
    checkpoints/         TRL checkpoints (estimator state included) for --resume
    final_model/         the trained model and tokenizer (save_pretrained)
    estimator_state.json the estimator's running statistics at the end

Everything that can fail cheaply (options, dataset, model) is checked and loaded before a run
directory is created or an old run replaced (:mod:`ebpo.lab.runs.directory`: only the entries the old run
created go; a user's own files in the directory stay). The job holds the directory's lock for its
life (:mod:`ebpo.utils.run_lock`): a second job on it is refused. Ctrl-C or SIGTERM during RL saves a
checkpoint at the end of the current step; ``resume=True`` continues from it. Training that
diverges (NaN or infinite loss or weights) stops with a ValueError; so does a resume of a run
whose files are not what the run wrote (each message names the file).

**Several processes** (``accelerate launch --num_processes N -m ebpo train ...``, gloo on the
CPU; :mod:`ebpo.lab.runs.processes`). A step samples the same ``prompts_per_step × group_size``
completions whatever N, each process an N-th of them (the product must divide by N). TRL trains
on every process; the run directory is the main process's alone: it holds the lock, writes every
file (the other processes write only their own RNG state into each checkpoint, as transformers
does) and shows the progress bar. The warm start is trained once, by the main process, which the
others wait for on the cache's lock before they load it. Held-out evaluations run on the main
process (the same numbers as with one process) while the others wait. Every process checks the
options before the first exchange; after it, an error of one process (the run directory, a
missing file) is raised by all, so none waits for a process that is gone. A signal reaching any
process stops all of them at the end of the same step, with one checkpoint. The number of
processes is part of the run: a resume takes the same N.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import importlib.util
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any, NoReturn

from ebpo.integrations.trl.checkpoint import read_state
from ebpo.integrations.trl.config_checks import MAX_DDP_TIMEOUT
from ebpo.lab.cpu_task.policy import BUILTIN_MODEL
from ebpo.lab.runs import directory as rundir
from ebpo.lab.runs.processes import DEFAULT_TIMEOUT, Processes
from ebpo.lab.train import data as job_data
from ebpo.lab.train.callbacks import (
    finite_weights,
    graceful_interrupts,
    quiet_transformers,
)
from ebpo.lab.train.config import TrainJobConfig
from ebpo.lab.train.evaluate import evaluate_pass1, format_pass_table
from ebpo.lab.train.plots import plot_run
from ebpo.lab.train.trainer import build_trainer, completion_length, trainer_args_of
from ebpo.lab.train.warm_start import (
    initial_policy,
    warm_start,
    warm_start_pending,
    warm_start_recipe,
)
from ebpo.utils import run_lock as runlock
from ebpo.utils.checkpoints import newest_complete
from ebpo.utils.checks import is_real
from ebpo.utils.files import write_json
from ebpo.utils.runtime import torch_threads

__all__ = [
    "BUILTIN_MODEL",
    "TrainJobConfig",
    "run_train_job",
    "warm_start_pending",
    "warm_start_recipe",
]

#: free bytes under which a failed write of a checkpoint or model counts as a full disk
_FULL_BYTES = 1 << 20


# ====================================================================== the job
def run_train_job(config: TrainJobConfig | None = None) -> dict[str, Any]:
    """Run (or resume) one training job; see the module docstring for what it writes.

    Returns ``{"status", "run_dir", "metrics_path", "before", "after", "validation",
    "global_step", "wall_time_s", "warm_start_cached", "plots", "no_signal"}``; ``before`` /
    ``after`` hold held-out Pass@1 ``overall`` and per ``cells`` / ``topics`` / ``tiers`` (``after``
    is None when the run was interrupted; ``validation`` is None unless ``eval_validation``);
    ``no_signal`` is None, or the trainer's one-line notice that training went several steps in a
    row without any learning signal (``EBPOTrainer.no_signal_notice``), also printed at the end. Raises ValueError
    for bad options before anything is loaded or written. Under a launcher every process calls
    it and gets the main process's result (see "Several processes" above).
    """
    config = config or TrainJobConfig()
    started = time.time()
    config.validate()
    processes = Processes.from_environment()
    timeout = _check_processes(config, processes.count)
    processes.start(timeout)  # the first exchange: every process has checked the options
    try:
        # One intra-op thread for the built-in model: its matrices are too small to gain from
        # more, and on a shared CPU extra threads spin against other processes.
        with torch_threads(1 if config.model == BUILTIN_MODEL else None), quiet_transformers():
            return _run(config, processes, started)
    finally:
        processes.stop()


def _run(config: TrainJobConfig, processes: Processes, started: float) -> dict[str, Any]:
    identity = config.identity()
    if processes.count > 1:  # another number of processes samples other completions
        identity["num_processes"] = processes.count
    options = {"resume": config.resume, "overwrite": config.overwrite}
    with contextlib.ExitStack() as held:

        def claim() -> rundir.RunDir:
            path = _output_dir(config)
            runlock.check_not_in_use(path)  # refused before anything is touched
            rundir.check_run_dir(path, identity, **options)
            held.enter_context(runlock.lock_run_dir(path))
            # decided again under the lock: another job may have changed the directory meanwhile
            return rundir.check_run_dir(path, identity, **options)

        # the main process alone decides, holds the lock and writes; the others learn its decision
        run = processes.on_main(claim)
        try:
            return _run_locked(config, processes, run, identity, started)
        except Exception as error:
            full = _disk_full(error, run.path)
            if full is not None:
                raise full from error
            raise


def _run_locked(
    config: TrainJobConfig,
    processes: Processes,
    run: rundir.RunDir,
    identity: dict[str, Any],
    started: float,
) -> dict[str, Any]:
    say = print if config.progress and processes.main else _silent
    on_main = processes.on_main
    if run.manifest is not None and run.manifest["status"] == "completed":
        say(f"{run.path} already holds a completed run; nothing to resume")
        return on_main(lambda: rundir.completed_results(run.path))
    resumed_before = None
    if run.manifest is not None:  # a resume: the run's files are checked before anything loads
        resumed_before = on_main(lambda: _resumed_files(run.path))

    # Everything that can fail is loaded (by every process) before the run directory is touched.
    data, trainer_args, model, tokenizer = processes.agree(
        lambda: _load(config, processes.count, run.path)
    )
    model, cached = warm_start(config, processes, data, model, tokenizer)
    evaluate = _evaluator(config, data, tokenizer)

    def start_run() -> dict[str, Any]:
        if run.replace:
            rundir.clear_run(run)  # only what the old run created; the user's own files stay
        run.path.mkdir(parents=True, exist_ok=True)
        if run.manifest is None:  # a resumed run's manifest changes once its training has resumed
            rundir.write_manifest(run.path, identity, "starting", 0)
        if resumed_before is not None:
            return resumed_before
        evaluation = evaluate(model, "held-out eval (before)")
        _write(run.path / "eval_before.json", evaluation)
        return evaluation

    before = on_main(start_run)
    say(format_pass_table(before))

    def training_started(step: int) -> None:
        """Once TRL has loaded the checkpoint it resumes from (if any) and starts to train: the
        first change a resume makes to the run's files, so that a resume that fails before it
        (a checkpoint that cannot be restored) leaves them as they were."""
        if config.resume:
            rundir.truncate_metrics(run.path / "metrics.jsonl", step)
        rundir.write_manifest(run.path, identity, "running", step)

    trainer, callback = build_trainer(
        config, processes, run.path, data, model, tokenizer, trainer_args, evaluate, identity,
        lambda step: processes.on_main(lambda: training_started(step)),
    )  # fmt: skip

    def resume_point() -> Path | None:
        if not config.resume:
            return None
        checkpoint = rundir.last_checkpoint(run.path / "checkpoints")
        say(
            f"resuming from {checkpoint}"
            if checkpoint
            else "no checkpoint yet: starting RL from step 0"
        )
        return checkpoint

    checkpoint = on_main(resume_point)
    try:
        with graceful_interrupts(callback.flag):
            trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    except RuntimeError as error:  # sampling from NaN probabilities: torch.multinomial refuses
        if finite_weights(trainer.model):
            raise
        _diverged(config, processes, run.path, identity, trainer.state.global_step, error)
    step = trainer.state.global_step
    if callback.diverged or not finite_weights(trainer.model):
        _diverged(config, processes, run.path, identity, step, callback.diverged)
    result: dict[str, Any] = {
        "run_dir": str(run.path),
        "metrics_path": str(run.path / "metrics.jsonl"),
        "before": _strip(before),
        "global_step": step,
        "warm_start_cached": cached,
    }
    if callback.interrupted:
        on_main(lambda: rundir.write_manifest(run.path, identity, "interrupted", step))
        say(
            f"interrupted at step {step}; checkpoint saved. Continue with: ebpo train --resume --output-dir {run.path}"
        )
        return {
            **result,
            "status": "interrupted",
            "after": None,
            "validation": None,
            "wall_time_s": time.time() - started,
            "plots": [],
            "no_signal": trainer.no_signal_notice,
        }

    def finish() -> dict[str, Any]:
        after = evaluate(trainer.model, "held-out eval (after)")
        _write(run.path / "eval_after.json", after)
        validation = None
        if config.eval_validation:
            validation = evaluate(trainer.model, "validation eval", rows=data.validation)
            _write(run.path / "eval_validation.json", validation)
        trainer.save_model(str(run.path / "final_model"))
        tokenizer.save_pretrained(str(run.path / "final_model"))
        _write(run.path / "estimator_state.json", trainer.estimator.state_dict())
        plots = plot_run(run.path, before, after, step) if _has_matplotlib() else []
        result.update(
            status="completed",
            after=_strip(after),
            validation=_strip(validation) if validation else None,
            wall_time_s=time.time() - started,
            plots=[str(p) for p in plots],
            no_signal=trainer.no_signal_notice,
        )
        _write(run.path / "results.json", result)
        rundir.write_manifest(run.path, identity, "completed", step)
        say(format_pass_table(before, after))
        if trainer.no_signal_notice:
            say(f"note: {trainer.no_signal_notice}")
        say(f"run directory: {run.path}  ({result['wall_time_s']:.0f} s)")
        return result

    return on_main(finish)


def _check_processes(config: TrainJobConfig, count: int) -> _dt.timedelta:
    """The checks of a launch with ``count`` processes, made by each before any exchange; returns
    the process group's timeout (``extra["ddp_timeout"]`` in seconds, as transformers takes it)."""
    completions = config.prompts_per_step * config.group_size
    if completions % count:
        raise ValueError(
            f"prompts_per_step × group_size ({config.prompts_per_step} × {config.group_size} = "
            f"{completions} completions a step) must be divisible by the number of processes "
            f"({count}): each process samples an equal share of every step's batch"
        )
    timeout = config.extra.get("ddp_timeout", DEFAULT_TIMEOUT.total_seconds())
    if not (is_real(timeout) and math.isfinite(timeout) and 0 < timeout <= MAX_DDP_TIMEOUT):
        raise ValueError(
            f"extra['ddp_timeout'] must be a positive number of seconds up to {MAX_DDP_TIMEOUT}, "
            f"got {timeout!r}"
        )
    return _dt.timedelta(seconds=timeout)


def _resumed_files(path: Path) -> dict[str, Any] | None:
    """The evaluation a resumed run made before RL (None if none yet), once its files are checked:
    the metrics file, and ebpo's files in the checkpoint the resume will load (the trainer checks
    them again, with the estimator, before it loads the checkpoint)."""
    before = rundir.read_evaluation(path / "eval_before.json")
    rundir.check_metrics(path / "metrics.jsonl")
    checkpoint, _ = newest_complete(path / "checkpoints")
    if checkpoint is not None:
        read_state(str(checkpoint))
    return before


def _load(config: TrainJobConfig, num_processes: int, run_dir: Path) -> tuple[Any, Any, Any, Any]:
    """(data, trainer arguments, policy before its warm start, tokenizer)."""
    data = job_data.load_job_data(config)
    if len(data.rl_rows) < config.prompts_per_step:
        raise ValueError(
            f"prompts_per_step ({config.prompts_per_step}) exceeds the {len(data.rl_rows)} "
            f"training prompts of dataset {config.dataset!r}"
        )
    trainer_args = trainer_args_of(
        config, run_dir, data, num_processes
    )  # checks the preset's options
    model, tokenizer = initial_policy(config)
    return data, trainer_args, model, tokenizer


def _diverged(
    config: TrainJobConfig, processes: Processes, path: Path, identity: Any, step: int, cause: Any
) -> NoReturn:
    """Stop a run whose training produced NaN or infinite numbers: mark it failed, one line."""
    processes.on_main(lambda: rundir.write_manifest(path, identity, "failed", step))
    detail = f" ({cause})" if isinstance(cause, str) else ""
    raise ValueError(
        f"training diverged at step {step}{detail}: the policy's weights or loss are no longer "
        f"finite; lower learning_rate (now {config.learning_rate}) and start again with --overwrite"
    )


def _disk_full(error: BaseException, directory: Path) -> OSError | None:
    """A full disk behind another error type (torch.save's RuntimeError, safetensors' error), as
    the OSError (ENOSPC) naming ``directory`` that ``ebpo train`` turns into one line; None for any
    other error."""
    if isinstance(error, (OSError, ValueError)) or not isinstance(error, Exception):
        return None  # already a storage error, or a user error
    text = str(error)
    full = "No space left on device" in text or "os error 28" in text
    if not full and (isinstance(error, RuntimeError) or type(error).__name__ == "SafetensorError"):
        with contextlib.suppress(OSError):
            full = shutil.disk_usage(directory).free < _FULL_BYTES
    if not full:
        return None
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(directory))


def _output_dir(config: TrainJobConfig) -> Path:
    if config.output_dir:
        return Path(config.output_dir).expanduser()
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    dataset = config.dataset if config.builtin_dataset else Path(config.dataset).stem
    return (
        Path("runs") / f"{config.estimator}-{dataset}-g{config.group_size}-s{config.seed}-{stamp}"
    )


def _evaluator(config: TrainJobConfig, data: Any, tokenizer: Any):
    """``evaluate(model, desc, rows=held-out) -> Pass@1 summary``, with the same sampling seed at
    every call, so that evaluations of one run (and of every method of a seed) are paired."""
    rendered: dict[int, list[str]] = {}

    def evaluate(model: Any, desc: str, rows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        rows = data.heldout if rows is None else rows
        prompts = rendered.setdefault(
            id(rows), job_data.render_prompts(rows, tokenizer, data.style)
        )
        return evaluate_pass1(
            model,
            tokenizer,
            rows,
            prompts,
            data.score,
            samples=config.eval_samples,
            temperature=config.temperature,
            max_new_tokens=completion_length(config, data),
            seed=config.seed + 12345,
            batch_size=512 if config.model == BUILTIN_MODEL else 16,
            desc=desc,
            progress=config.progress,
        )

    return evaluate


def _silent(*args: Any, **kwargs: Any) -> None:
    """``print`` on the processes that print nothing (all but the main one, or ``--quiet``)."""


def _write(path: Path, value: Any) -> None:
    write_json(path, value)


def _strip(evaluation: dict[str, Any]) -> dict[str, Any]:
    """An evaluation without its per-problem list (that stays in eval_*.json)."""
    return {k: v for k, v in evaluation.items() if k != "problems"}


def _has_matplotlib() -> bool:
    return importlib.util.find_spec("matplotlib") is not None
