"""What a job adds to TRL's training loop: one progress bar, the metrics file, periodic held-out
Pass@1, and stop-on-signal.

TRL prints every log record (a dict of ~40 metrics) to the console; a job replaces its printer
with one progress bar showing the step, the training reward and the last held-out Pass@1. Every
record still goes to ``metrics.jsonl`` and to TensorBoard.

Ctrl-C or SIGTERM sets a flag; at the end of the current step the job saves a checkpoint and
stops (``--resume`` continues). A second Ctrl-C stops at once. A step whose loss, gradient norm
or weights are NaN or infinite stops training without a checkpoint (``.diverged`` says what).

With several processes (``accelerate launch``) every process runs the callback; they decide
together at the end of every step whether to stop (a signal may reach one process only: all stop
at the end of the same step and save one checkpoint together), and only the main process writes
the metrics file and shows the progress bar.
"""

from __future__ import annotations

import contextlib
import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from ebpo.lab.runs.directory import append_metrics
from ebpo.lab.runs.processes import Processes

__all__ = [
    "StopFlag",
    "finite_weights",
    "graceful_interrupts",
    "make_job_callback",
    "quiet_transformers",
    "quiet_trl_console",
]


#: the metrics of a log record that must stay finite (else the training has diverged)
_WATCHED = ("loss", "grad_norm")


class StopFlag:
    """Set by SIGINT / SIGTERM; the job callback turns it into 'save a checkpoint and stop'."""

    def __init__(self) -> None:
        self.signal: int | None = None

    def __bool__(self) -> bool:
        return self.signal is not None


@contextlib.contextmanager
def graceful_interrupts(flag: StopFlag) -> Iterator[None]:
    """First Ctrl-C / SIGTERM sets ``flag``; a second Ctrl-C raises KeyboardInterrupt at once.
    Handlers can only be installed from the main thread; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        if flag and signum == signal.SIGINT:
            raise KeyboardInterrupt
        flag.signal = signum
        print(
            f"\n{signal.Signals(signum).name}: saving a checkpoint at the end of this step (Ctrl-C again to abort)",
            file=sys.stderr,
        )

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """No transformers progress bars ("Writing model shards") and only its errors during a job;
    the previous settings come back afterwards."""
    from transformers.utils import logging  # optional heavy dependency (trl extra)

    bars, verbosity = logging.is_progress_bar_enabled(), logging.get_verbosity()
    logging.disable_progress_bar()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(verbosity)
        if bars:
            logging.enable_progress_bar()


def quiet_trl_console(trainer: Any) -> None:
    """Remove the callbacks with which transformers prints log dicts and its own progress bar."""
    # optional heavy dependency (trl extra)
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    for callback in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(callback)


def finite_weights(model: Any) -> bool:
    """Whether every weight of ``model`` is a finite number."""
    return all(bool(torch.isfinite(p).all()) for p in model.parameters())


def make_job_callback(
    metrics_path: Path | None,
    *,
    total_steps: int,
    eval_every: int,
    evaluate: Callable[[Any, int], dict[str, Any]],
    on_checkpoint: Callable[[int], None],
    progress: bool,
    on_start: Callable[[int], Any] | None = None,
    processes: Processes | None = None,
):
    """A ``TrainerCallback`` that writes every log record to ``metrics_path`` (None: none),
    calls ``evaluate(model, step)`` every ``eval_every`` steps (before the last) and logs its
    ``overall`` / ``topics`` as ``heldout/pass@1[/topic]``, shows the progress bar, calls
    ``on_checkpoint(step)`` after each save, ``on_start(step)`` when training starts (a resumed
    trainer has loaded its checkpoint then; every process calls it; it may return the sum of
    the losses logged before ``step``, which the end-of-training ``train_loss`` then includes,
    so that a resumed run's is the mean over all its steps), and stops on its
    :class:`StopFlag` (``.flag``; ``.interrupted`` tells that it did), or, without saving, on a
    non-finite loss, gradient norm or weight (``.diverged``: what it saw, else None; the weights
    are checked after every step, a pass over them). ``processes``: the processes of a launch,
    which decide to stop together (one all-reduce a step); every one of them calls ``evaluate``
    at the same steps.

    Install it first among the trainer's callbacks so that the held-out numbers it adds to a
    record reach TensorBoard as well."""
    from transformers import TrainerCallback  # optional heavy dependency (trl extra)

    class JobCallback(_JobSteps, TrainerCallback):
        pass

    return JobCallback(
        metrics_path,
        total_steps=total_steps,
        eval_every=eval_every,
        evaluate=evaluate,
        on_checkpoint=on_checkpoint,
        progress=progress,
        on_start=on_start,
        processes=processes or Processes(),
    )


class _JobSteps:
    """The events of :func:`make_job_callback`'s callback (transformers' ``TrainerCallback``
    supplies the others), each a few named steps."""

    def __init__(
        self,
        metrics_path: Path | None,
        *,
        total_steps: int,
        eval_every: int,
        evaluate: Callable[[Any, int], dict[str, Any]],
        on_checkpoint: Callable[[int], None],
        progress: bool,
        on_start: Callable[[int], Any] | None,
        processes: Processes,
    ) -> None:
        self.metrics_path, self.total_steps, self.eval_every = metrics_path, total_steps, eval_every
        self.evaluate, self.on_checkpoint, self.on_start = evaluate, on_checkpoint, on_start
        self.progress, self.processes = progress, processes
        self.flag = StopFlag()
        self.interrupted = False
        self.pending: dict[str, float] = {}
        self.last_pass1: float | None = None
        self.bar: Any = None
        self.diverged: str | None = None
        #: the sum of the per-step losses logged before this training (a resume) started
        self.earlier_losses = 0.0

    # ------------------------------------------------------------------ events
    def on_train_begin(self, args, state, control, **kwargs):
        if self.on_start is not None:
            self.earlier_losses = float(self.on_start(state.global_step) or 0.0)
        self.bar = tqdm(
            total=self.total_steps,
            initial=state.global_step,
            desc="RL",
            unit="step",
            disable=not self.progress,
            dynamic_ncols=True,
        )

    def on_step_end(self, args, state, control, model=None, **kwargs):
        step = state.global_step
        broken = self.diverged is None and model is not None and not finite_weights(model)
        # the same decisions on every process, at the end of the same step (a collective:
        # before anything that returns early)
        signalled, broken = self.processes.any(bool(self.flag), broken)
        if broken and self.diverged is None:
            self.diverged = "weights not finite"
        if self.diverged is not None:
            control.should_training_stop = True
            return control
        if self.eval_every and step % self.eval_every == 0 and step < self.total_steps:
            self.evaluate_heldout(model, step)
            control.should_log = True
        if signalled:
            self.interrupted = True
            control.should_save = True
            control.should_training_stop = True
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is None:
            return
        logs.update(self.pending)  # the same dict goes on to TensorBoard
        self.pending = {}
        if "train_loss" in logs and self.earlier_losses and state.global_step:
            # transformers divides the losses of this train() call by every step of the run: a
            # resumed run adds those of the steps before it, for the mean over all its steps
            logs["train_loss"] += self.earlier_losses / state.global_step
        self.write_record(state.global_step, logs)
        self.watch_divergence(logs)
        if self.diverged is not None:  # called before TRL saves this step's checkpoint
            control.should_training_stop = True
            control.should_save = False  # a checkpoint of NaN weights resumes nothing
        if "reward" in logs:
            self.show_progress(state.global_step, logs["reward"])

    def on_save(self, args, state, control, **kwargs):
        self.on_checkpoint(state.global_step)

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.n = state.global_step
            self.bar.close()

    # ------------------------------------------------------------------ steps
    def evaluate_heldout(self, model: Any, step: int) -> None:
        """Held-out Pass@1 now; its numbers join the next log record."""
        result = self.evaluate(model, step)
        self.last_pass1 = result["overall"]
        self.pending = {
            "heldout/pass@1": result["overall"],
            **{f"heldout/pass@1/{k}": v for k, v in result["topics"].items()},
        }

    def write_record(self, step: int, logs: dict[str, Any]) -> None:
        """One line of the metrics file: the step, the time and the record's plain values."""
        record = {
            "step": step,
            "time": time.time(),
            **{k: v for k, v in logs.items() if isinstance(v, (int, float, str))},
        }
        if self.metrics_path is not None:
            append_metrics(self.metrics_path, record)

    def watch_divergence(self, logs: dict[str, Any]) -> None:
        """Note a loss or gradient norm that is no longer finite (``.diverged``)."""
        bad = [
            f"{key} {logs[key]}"
            for key in _WATCHED
            if isinstance(logs.get(key), float) and not math.isfinite(logs[key])
        ]
        if bad and self.diverged is None:
            self.diverged = ", ".join(bad)

    def show_progress(self, step: int, reward: float) -> None:
        if self.bar is None:
            return
        self.bar.n = step
        postfix = {"reward": f"{reward:.3f}"}
        if self.last_pass1 is not None:
            postfix["held-out Pass@1"] = f"{100 * self.last_pass1:.1f}%"
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.refresh()
