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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from ebpo.integrations.trl.checkpoint_files import read_state
from ebpo.integrations.trl.config_checks import MAX_DDP_TIMEOUT
from ebpo.lab.cpu_task.policy import BUILTIN_MODEL
from ebpo.lab.runs import directory as rundir
from ebpo.lab.runs.lifecycle import RunLifecycle, logged_loss_sum
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
from ebpo.lab.train.result import TrainResult
from ebpo.lab.train.trainer import build_trainer, completion_length, trainer_args_of
from ebpo.lab.train.warm_start import (
    initial_policy,
    warm_start,
    warm_start_pending,
    warm_start_recipe,
)
from ebpo.utils.checkpoints import newest_complete
from ebpo.utils.checks import is_real
from ebpo.utils.files import write_json
from ebpo.utils.output_folder import holding
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
    with contextlib.ExitStack() as held:
        # the main process alone decides, holds the lock and writes; the others learn its decision
        run = processes.on_main(lambda: _claim(config, identity, held))
        try:
            return _Job(config, processes, run, started).run()
        except Exception as error:
            full = _disk_full(error, run.path)
            if full is not None:
                raise full from error
            raise


def _claim(
    config: TrainJobConfig, identity: dict[str, Any], held: contextlib.ExitStack
) -> RunLifecycle:
    """The run directory, locked for as long as ``held`` lasts, and what to do with it."""
    path = _output_dir(config)
    options = {"resume": config.resume, "overwrite": config.overwrite}
    # refused before anything is touched; decided again under the lock
    decided = held.enter_context(
        holding(path, lambda: rundir.check_run_dir(path, identity, **options))
    )
    return RunLifecycle(decided, identity)


@dataclass(frozen=True)
class _Job:
    """One job in its claimed run directory, step by step: :meth:`run` reads top to bottom."""

    config: TrainJobConfig
    processes: Processes
    run_dir: RunLifecycle
    started: float

    def say(self, message: str) -> None:
        """A line on the console of the main process (nothing with ``--quiet``)."""
        if self.config.progress and self.processes.main:
            print(message)

    def run(self) -> dict[str, Any]:
        run, on_main = self.run_dir, self.processes.on_main
        if run.finished_before:
            self.say(f"{run.path} already holds a completed run; nothing to resume")
            return on_main(lambda: rundir.completed_results(run.path))
        # a resume: the run's files are checked before anything loads
        resumed_before = on_main(lambda: _resumed_files(run.path)) if run.resumed else None
        # Everything that can fail is loaded (by every process) before the run directory is touched.
        data, trainer_args, model, tokenizer = self.processes.agree(
            lambda: _load(self.config, self.processes.count, run.path)
        )
        model, cached = warm_start(self.config, self.processes, data, model, tokenizer)
        evaluate = _evaluator(self.config, data, tokenizer)
        before = on_main(
            lambda: self.start(resumed_before, lambda: evaluate(model, "held-out eval (before)"))
        )
        self.say(format_pass_table(before))
        trainer, callback = build_trainer(
            self.config, self.processes, run, data, model, tokenizer, trainer_args, evaluate,
            lambda step: on_main(lambda: self.training_started(step)),
        )  # fmt: skip
        step = self.train(trainer, callback)

        def result(status: str, after: Any = None, validation: Any = None, plots: Any = ()):
            return TrainResult(
                status=status,
                run_dir=run.path,
                before=before,
                global_step=step,
                warm_start_cached=cached,
                wall_time_s=time.time() - self.started,
                after=after,
                validation=validation,
                plots=plots,
                no_signal=trainer.no_signal_notice,
            ).as_dict()

        if callback.interrupted:
            on_main(lambda: run.interrupted(step))
            self.say(
                f"interrupted at step {step}; checkpoint saved. Continue with: "
                f"ebpo train --resume --output-dir {run.path}"
            )
            return result("interrupted")
        return on_main(lambda: self.finish(trainer, tokenizer, data, evaluate, before, result))

    def start(
        self, resumed_before: dict[str, Any] | None, evaluate_before: Callable[[], dict[str, Any]]
    ) -> dict[str, Any]:
        """Claim the run directory and evaluate the policy before RL (a resumed run evaluated it
        already): the job's first change to the directory."""
        self.run_dir.started()
        if resumed_before is not None:
            return resumed_before
        evaluation = evaluate_before()
        _write(self.run_dir.path / "eval_before.json", evaluation)
        return evaluation

    def training_started(self, step: int) -> float:
        """TRL has loaded the checkpoint it resumes from (if any) and starts to train at ``step``:
        the first change a resume makes to the run's files, so that a resume that fails before it
        (a checkpoint that cannot be restored) leaves them as they were. Returns the sum of the
        losses logged before ``step``, which transformers' mean loss of the run leaves out."""
        self.run_dir.running(step, resuming=self.config.resume)
        return logged_loss_sum(self.run_dir.path / "metrics.jsonl", step) if step else 0.0

    def train(self, trainer: Any, callback: Any) -> int:
        """RL from the checkpoint to resume (if any) until the last step or a signal; returns the
        step reached. Training that diverged marks the run failed and raises ValueError."""
        checkpoint = self.processes.on_main(self.resume_point)
        try:
            with graceful_interrupts(callback.flag):
                trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
        except RuntimeError as error:  # sampling from NaN probabilities: torch.multinomial refuses
            if finite_weights(trainer.model):
                raise
            self.diverged(trainer.state.global_step, error)
        step = trainer.state.global_step
        if callback.diverged or not finite_weights(trainer.model):
            self.diverged(step, callback.diverged)
        return step

    def resume_point(self) -> Path | None:
        """The checkpoint that a resume continues from (None: RL starts at step 0)."""
        if not self.config.resume:
            return None
        checkpoint = rundir.last_checkpoint(self.run_dir.path / "checkpoints")
        self.say(
            f"resuming from {checkpoint}"
            if checkpoint
            else "no checkpoint yet: starting RL from step 0"
        )
        return checkpoint

    def diverged(self, step: int, cause: Any) -> NoReturn:
        """Stop a run whose training produced NaN or infinite numbers: mark it failed, one line."""
        self.processes.on_main(lambda: self.run_dir.failed(step))
        detail = f" ({cause})" if isinstance(cause, str) else ""
        raise ValueError(
            f"training diverged at step {step}{detail}: the policy's weights or loss are no longer "
            f"finite; lower learning_rate (now {self.config.learning_rate}) and start again with "
            "--overwrite"
        )

    def finish(
        self,
        trainer: Any,
        tokenizer: Any,
        data: Any,
        evaluate: Callable[..., dict[str, Any]],
        before: dict[str, Any],
        result: Callable[..., dict[str, Any]],
    ) -> dict[str, Any]:
        """Evaluate after RL, write the run's last files (the manifest last), report."""
        path, step = self.run_dir.path, trainer.state.global_step
        after = evaluate(trainer.model, "held-out eval (after)")
        _write(path / "eval_after.json", after)
        validation = None
        if self.config.eval_validation:
            validation = evaluate(trainer.model, "validation eval", rows=data.validation)
            _write(path / "eval_validation.json", validation)
        trainer.save_model(str(path / "final_model"))
        tokenizer.save_pretrained(str(path / "final_model"))
        _write(path / "estimator_state.json", trainer.estimator.state_dict())
        plots = plot_run(path, before, after, step) if _has_matplotlib() else []
        outcome = result("completed", after, validation or None, plots)
        _write(path / "results.json", outcome)
        self.run_dir.completed(step)
        self.say(format_pass_table(before, after))
        if trainer.no_signal_notice:
            self.say(f"note: {trainer.no_signal_notice}")
        self.say(f"run directory: {path}  ({outcome['wall_time_s']:.0f} s)")
        return outcome


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


def _write(path: Path, value: Any) -> None:
    write_json(path, value)


def _has_matplotlib() -> bool:
    return importlib.util.find_spec("matplotlib") is not None
