"""How :class:`~ebpo.integrations.trl.EBPOTrainer` saves and resumes: a checkpoint is complete or
it is not resumed from.

A save, on every process, in this order:

1. the main process removes the completeness marker of an older checkpoint of the same step
   (:func:`ebpo.utils.checkpoints.unmark`); a barrier;
2. ebpo's files (:mod:`.checkpoint_files`): the estimator state and the generation-cycle record (main
   process), each process's buffered generation batch when the checkpoint falls inside one;
3. TRL's and transformers' own save (model, tokenizer, optimizer, scheduler, RNG states, trainer
   state, TRL's extras), with their deletion of old checkpoints (``save_total_limit``) held back;
4. a barrier (every process's files are written), then the main process flushes the files to the
   storage and writes the marker last (:func:`ebpo.utils.checkpoints.mark_complete`: every file
   with its size);
5. only then are old checkpoints deleted (:func:`rotate`), so the newest complete checkpoint
   exists at every moment, and incomplete leftovers of an interrupted save do not take the place
   of complete ones.

On resume, every process checks that all processes restored the same estimator state (see
:mod:`.consistency`); the main process prints where the state came from and what it holds
(:func:`.notices.restored_line`), and transformers' notice of a missing ``lm_head.weight`` is
left out when that tensor is tied to a loaded one (:func:`.notices.tied_missing_keys`). The
optimizer state of a multi-process run on CPUs is loaded onto the CPU
(:meth:`CheckpointingMixin._load_optimizer_and_scheduler`).

At the end of ``train()``, whatever ``save_strategy`` is, the main process writes the run's
``trainer_state.json`` (transformers' ``TrainerState``, the log history included) into
``output_dir``, atomically (a temporary file renamed): TRL writes it only inside checkpoints, so a
run that saved none (``save_strategy: "no"``) would leave no record of its metrics.

A kill, a full disk or any error at any point leaves the new checkpoint unmarked. On resume,
``train(resume_from_checkpoint=path)`` refuses a checkpoint that is not complete (ValueError naming
what is missing); ``resume_from_checkpoint=True`` takes the newest complete checkpoint of
``output_dir`` and logs a warning naming the newer incomplete ones it skipped.
"""

from __future__ import annotations

import copy
import logging
import os
import shutil
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from accelerate.utils import gather_object
from transformers.trainer import (
    OPTIMIZER_NAME,
    SCHEDULER_NAME,
    TRAINER_STATE_NAME,
    TRAINING_ARGS_NAME,
)
from transformers.trainer_pt_utils import reissue_pt_warnings
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, sort_checkpoints
from transformers.utils.import_utils import check_torch_load_is_safe

from ebpo.integrations.trl import checkpoint_files as ckpt
from ebpo.integrations.trl.checkpoint_files import REQUIRED_FILES, GenerationCycle
from ebpo.integrations.trl.notices import restored_line, tied_missing_keys
from ebpo.integrations.trl.resumed_sampler import ResumedSampler, resumable
from ebpo.integrations.trl.signal import NoSignalWatch
from ebpo.utils.checkpoints import (
    checkpoint_dirs,
    incomplete_reason,
    mark_complete,
    newest_complete,
    unmark,
)
from ebpo.utils.files import atomic_path

if TYPE_CHECKING:
    from trl import GRPOTrainer as _Trainer  # what the mixin is mixed into, for the type checker
else:
    _Trainer = object

__all__ = ["CheckpointingMixin", "resolve_checkpoint", "rotate"]

logger = logging.getLogger(__name__)


def resolve_checkpoint(resume_from_checkpoint: Any, output_dir: str) -> Any:
    """What ``train(resume_from_checkpoint=...)`` should resume from: a complete checkpoint's path,
    or the argument unchanged when it asks for no resume (None, False) or when ``output_dir`` has
    no checkpoint at all (``True``: transformers then says so). Raises ValueError for an incomplete
    checkpoint, or when ``True`` finds only incomplete ones."""
    if resume_from_checkpoint is None or resume_from_checkpoint is False:
        return resume_from_checkpoint
    if resume_from_checkpoint is True:
        found, skipped = newest_complete(output_dir, PREFIX_CHECKPOINT_DIR, required=REQUIRED_FILES)
        if found is None and not skipped:
            return True
        if found is None:
            raise ValueError(
                f"resume_from_checkpoint=True: no complete checkpoint in {output_dir!r}: "
                + "; ".join(f"{path.name}: {reason}" for path, reason in skipped)
            )
        for path, reason in skipped:
            logger.warning(
                "%s is incomplete (%s): resuming from %s instead", path, reason, found.name
            )
        return str(found)
    if not isinstance(resume_from_checkpoint, (str, os.PathLike)):
        raise ValueError(
            "resume_from_checkpoint must be a checkpoint directory, True or None, "
            f"got {resume_from_checkpoint!r}"
        )
    path = Path(resume_from_checkpoint)
    problem = incomplete_reason(path, required=REQUIRED_FILES)
    if problem is not None:
        newest, _ = newest_complete(path.parent, PREFIX_CHECKPOINT_DIR, required=REQUIRED_FILES)
        hint = f"; the newest complete one beside it is {str(newest)!r}" if newest else ""
        raise ValueError(
            f"resume_from_checkpoint {os.fspath(resume_from_checkpoint)!r} is not a complete "
            f"checkpoint: {problem}{hint}"
        )
    return os.fspath(resume_from_checkpoint)


def rotate(run_dir: str, save_total_limit: int | None, protected: list[str | None]) -> None:
    """Keep at most ``save_total_limit`` complete checkpoints in ``run_dir`` (transformers' order:
    by modification time, the ``protected`` ones kept), and delete incomplete ones: resume never
    takes them, and counted among the kept ones they would push out complete ones. Nothing is
    deleted without a limit, as in transformers."""
    if save_total_limit is None or save_total_limit <= 0:
        return
    keep = {str(Path(p)) for p in protected if p is not None}
    ordered = sort_checkpoints(run_dir, PREFIX_CHECKPOINT_DIR, use_mtime=True)
    complete = [p for p in ordered if incomplete_reason(p) is None]
    remaining = len(complete)
    for path in complete:
        if remaining <= max(save_total_limit, len(keep)):
            break
        if str(Path(path)) not in keep:
            shutil.rmtree(path, ignore_errors=True)
            remaining -= 1
    for path in checkpoint_dirs(run_dir, PREFIX_CHECKPOINT_DIR):
        if str(path) not in keep and incomplete_reason(path) is not None:
            shutil.rmtree(path, ignore_errors=True)


class CheckpointingMixin(_Trainer):
    """The save and resume half of EBPOTrainer (mixed in before ``trl.GRPOTrainer``). Uses the
    trainer's ``estimator``, its no-signal watch, their states before the current batch and TRL's
    ``_step`` / ``_buffered_inputs``."""

    estimator: Any
    _ebpo_state_before_batch: dict[str, Any]
    _ebpo_signal: NoSignalWatch
    _ebpo_signal_before_batch: dict[str, Any]
    #: whether the main process prints the estimator line at the start of ``train()`` and the
    #: restored state on resume (:mod:`.notices`); a caller that owns the console turns it off
    announce: bool = True
    _ebpo_check_state: Any  # EBPOTrainer._ebpo_check_state

    def train(self, resume_from_checkpoint: Any = None, *args: Any, **kwargs: Any) -> Any:
        """``GRPOTrainer.train``, resuming only from a complete checkpoint whose ebpo files this
        trainer can restore (see the module), checked before anything loads."""
        checkpoint = resolve_checkpoint(resume_from_checkpoint, self.args.output_dir)
        if isinstance(checkpoint, str):
            self.check_checkpoint(checkpoint)
        output = super().train(checkpoint, *args, **kwargs)
        self.save_log_history()
        return output

    def save_log_history(self) -> None:
        """Write ``<output_dir>/trainer_state.json`` (transformers' format, the log history
        included) and ``training_args.bin`` (the config, as ``save_model`` writes it: the estimator
        and seed ``ebpo compare`` reads), main process only, atomically (see the module). A run
        that saves no checkpoint and no model is then still a run ``ebpo compare`` can read."""
        if not self.is_world_process_zero():
            return
        with atomic_path(os.path.join(self.args.output_dir, TRAINER_STATE_NAME)) as tmp:
            self.state.save_to_json(os.fspath(tmp))
        with atomic_path(os.path.join(self.args.output_dir, TRAINING_ARGS_NAME)) as tmp:
            torch.save(self.args, tmp)

    def check_checkpoint(self, checkpoint: str) -> None:
        """Raise ValueError naming the file when ``checkpoint``'s ebpo files cannot be restored
        into this trainer: each is read and checked (:func:`.checkpoint.read_state`), and the
        estimator states are loaded into copies of the estimator. Nothing of the trainer changes."""
        saved = ckpt.read_state(checkpoint)
        if saved.estimator is None or saved.cycle is None:
            raise ValueError(
                f"checkpoint {checkpoint!r} lacks {ckpt.ESTIMATOR_STATE_FILE} or "
                f"{ckpt.GENERATION_STATE_FILE}: it is not a complete EBPOTrainer checkpoint"
            )
        checks = (
            ("", self.estimator, saved.estimator),
            ("estimator_state_before_batch of ", self.estimator, saved.estimator_before_batch),
            ("signal_watch of ", self._ebpo_signal, saved.signal),
            ("signal_watch_before_batch of ", self._ebpo_signal, saved.signal_before_batch),
        )
        for name, holder, state in checks:
            if state is not None:
                try:
                    copy.deepcopy(holder).load_state_dict(state)
                except ValueError as error:
                    raise ValueError(f"checkpoint {checkpoint!r}: {name}{error}") from error

    def _get_train_sampler(self, *args: Any, **kwargs: Any) -> Any:
        """TRL's sampler, positioned at the epoch of the checkpoint a run resumes from
        (:mod:`.resumed_sampler`): the prompts come in the uninterrupted run's order."""
        sampler = super()._get_train_sampler(*args, **kwargs)
        return ResumedSampler(sampler, lambda: self.state.epoch) if resumable(sampler) else sampler

    def _run_epoch(self, *args: Any, **kwargs: Any) -> Any:
        """transformers' epoch, unless the run already trained ``max_steps``: resumed from its last
        checkpoint, transformers would otherwise train one more step whenever that checkpoint
        falls inside an epoch."""
        state = self.state
        if 0 < state.max_steps <= state.global_step:
            self.control.should_training_stop = True
            return None
        return super()._run_epoch(*args, **kwargs)

    def _generation_cycle(self) -> GenerationCycle:
        return GenerationCycle(
            micro_step=self._step,
            generate_every=self.args.steps_per_generation * self.num_iterations,
            steps_per_generation=self.args.steps_per_generation,
            num_processes=self.accelerator.num_processes,
        )

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        """TRL's checkpoint plus ebpo's files, marked complete last (see the module)."""
        args, accelerator = self.args, self.accelerator
        run_dir = self._get_output_dir(trial=trial)
        checkpoint_dir = os.path.join(run_dir, f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        if args.should_save:
            unmark(checkpoint_dir)
        accelerator.wait_for_everyone()  # no process rewrites a file of a still-marked checkpoint

        cycle = self._generation_cycle()
        if args.should_save:
            saved = ckpt.SavedState(
                self.estimator.state_dict(),
                cycle,
                self._ebpo_state_before_batch,
                self._ebpo_signal.state_dict(),
                self._ebpo_signal_before_batch,
            )
            ckpt.write_state(checkpoint_dir, saved)
        buffered = self._buffered_inputs
        if cycle.inside_batch and buffered is not None:
            ckpt.write_buffer(checkpoint_dir, accelerator.process_index, buffered)

        limit = args.save_total_limit
        args.save_total_limit = None  # old checkpoints go only once this one is complete
        try:
            super()._save_checkpoint(model, trial)
        finally:
            args.save_total_limit = limit

        accelerator.wait_for_everyone()  # every process's files are written
        if args.should_save:
            mark_complete(
                checkpoint_dir, required=REQUIRED_FILES, global_step=self.state.global_step
            )
            rotate(run_dir, limit, [checkpoint_dir, self.state.best_model_checkpoint])

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        if checkpoint is not None and self._loads_onto_indexed_cpu(checkpoint):
            self._load_optimizer_and_scheduler_on_cpu(checkpoint)
        else:
            super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None:
            self._restore_generation_state(checkpoint)
            self._ebpo_check_state("resume", checkpoint=os.fspath(checkpoint))

    def _loads_onto_indexed_cpu(self, checkpoint: str) -> bool:
        """Whether transformers would load this checkpoint's optimizer state with
        ``map_location=args.device`` and that device is an indexed CPU device.

        transformers (5.10) loads the optimizer state of a multi-process run onto ``args.device``,
        which on CPUs is ``cpu:0`` on every process — and ``torch.load`` cannot restore onto an
        indexed CPU device ("don't know how to restore data location ... (tagged with cpu:0)"), so
        a multi-process CPU run could not resume. DeepSpeed and FSDP load their own way."""
        args = self.args
        device = torch.device(args.device)
        return (
            args.world_size > 1
            and device.type == "cpu"
            and device.index is not None
            and not self.is_deepspeed_enabled
            and not self.is_fsdp_enabled
            and os.path.isfile(os.path.join(checkpoint, OPTIMIZER_NAME))
            and os.path.isfile(os.path.join(checkpoint, SCHEDULER_NAME))
        )

    def _load_optimizer_and_scheduler_on_cpu(self, checkpoint: str) -> None:
        """transformers' loading of the optimizer and scheduler states (its plain path), with the
        optimizer state mapped to "cpu", where the parameters are."""
        check_torch_load_is_safe()
        optimizer_state = torch.load(
            os.path.join(checkpoint, OPTIMIZER_NAME), map_location="cpu", weights_only=True
        )
        self.optimizer.load_state_dict(optimizer_state)
        with warnings.catch_warnings(record=True) as caught_warnings:
            check_torch_load_is_safe()
            scheduler_state = torch.load(
                os.path.join(checkpoint, SCHEDULER_NAME), map_location="cpu", weights_only=True
            )
            self.lr_scheduler.load_state_dict(scheduler_state)
        reissue_pt_warnings(caught_warnings)

    def _restore_generation_state(self, checkpoint: str) -> None:
        """Restore what :meth:`_save_checkpoint` wrote, so the run continues as if never interrupted."""
        self.check_checkpoint(checkpoint)  # train() checked it too: changed since?
        states = ckpt.read_state(checkpoint)
        saved, estimator_state = states.cycle, states.estimator
        assert estimator_state is not None and saved is not None  # checked above
        current = self._generation_cycle()
        if not saved.inside_batch:
            # On a generation boundary: the next micro-step generates anyway.
            self._restore_states(estimator_state, states.signal)
            if saved.same_layout(current):
                self._step = saved.micro_step
            self._say_restored(checkpoint, estimator_state)
            return
        if states.estimator_before_batch is None:
            raise ValueError(
                f"{checkpoint}: {ckpt.GENERATION_STATE_FILE} lacks the estimator state before the current batch"
            )
        accelerator = self.accelerator
        process = accelerator.process_index
        same_layout = saved.same_layout(current)
        have_buffer = os.path.exists(os.path.join(checkpoint, ckpt.generation_buffer_file(process)))
        # Collective: every process takes the same branch, or some would generate while others not.
        replay = same_layout and all(gather_object([have_buffer]))
        if replay:
            self._buffered_inputs = ckpt.read_buffer(checkpoint, process, accelerator.device)
            self._step = saved.micro_step
            self._restore_states(estimator_state, states.signal)
            # for checkpoints later in this batch
            self._ebpo_state_before_batch = states.estimator_before_batch
            if states.signal_before_batch is not None:
                self._ebpo_signal_before_batch = states.signal_before_batch
            self._say_restored(checkpoint, estimator_state, ", its generation batch replayed")
            return
        self._restore_states(states.estimator_before_batch, states.signal_before_batch)
        self._say_restored(
            checkpoint, states.estimator_before_batch, ", as it was before its last batch"
        )
        if same_layout:
            self._step = saved.micro_step
        reason = (
            f"the buffered completions of a process are missing (this one: {ckpt.generation_buffer_file(process)}"
            f"{' present' if have_buffer else ' missing'})"
            if same_layout
            else f"the generation layout changed (saved {saved}, now {current})"
        )
        logger.warning(
            "checkpoint %s was saved inside a generation batch (micro-step %d of a %d-step cycle) and "
            "%s: TRL generates that batch again with the restored policy, so this run is no longer "
            "identical to an uninterrupted one. The estimator resumes from its state before that "
            "batch, so the batch is still counted once.",
            checkpoint,
            saved.micro_step % saved.generate_every,
            saved.generate_every,
            reason,
        )

    def _restore_states(self, estimator: dict[str, Any], signal: dict[str, Any] | None) -> None:
        """The estimator's state and the no-signal watch's (absent from older checkpoints: the
        watch then counts from the resume on)."""
        self.estimator.load_state_dict(estimator)
        if signal is not None:
            self._ebpo_signal.load_state_dict(signal)

    def _say_restored(self, checkpoint: str, state: dict[str, Any], note: str = "") -> None:
        if self.announce and self.accelerator.is_main_process:
            print(restored_line(os.fspath(checkpoint), state, note), flush=True)

    def _issue_warnings_after_load(self, load_result: Any) -> None:
        """transformers' notice of missing and unexpected keys, without the tied keys whose tensor
        was loaded under its other name (see the module)."""
        tied = tied_missing_keys(self.model, load_result.missing_keys)
        if tied:
            missing = [key for key in load_result.missing_keys if key not in tied]
            load_result = load_result._replace(missing_keys=missing)
        super()._issue_warnings_after_load(load_result)
