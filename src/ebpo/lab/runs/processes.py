"""The processes of one job started by a launcher (``accelerate launch --num_processes N -m ebpo
train``, ``torchrun``): which one this is, and the few exchanges the job makes besides TRL's own.

TRL trains on every process; what surrounds the training (the run directory and its lock, the
warm start, the held-out evaluation, the plots) is the main process's work, and the others wait
for it. A collective blocks until every process has entered it, so a process that fails while the
others wait in one would leave them waiting. Hence:

* what every process can check alone (the options) is checked by every process before the first
  exchange, and fails on each the same way;
* every exchange here carries failures: :meth:`Processes.on_main`, :meth:`Processes.agree` and
  :meth:`Processes.main_first` end, on every process, with the error of the lowest-ranked process
  that failed (a ValueError as the same ValueError, an OSError with its errno and file, anything
  else as a RuntimeError naming it), so a user error is the same one line everywhere and no
  process is left inside a collective;
* a process that dies is noticed anyway: the launcher stops the others when one exits, and every
  collective gives up after the process group's timeout (:data:`DEFAULT_TIMEOUT`, or the
  ``ddp_timeout`` the job is given).

With one process (no launcher) every method runs the action and returns: no process group, no
exchange.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from accelerate import PartialState
from accelerate.utils import get_cpu_distributed_information

__all__ = ["DEFAULT_TIMEOUT", "Processes"]

T = TypeVar("T")

#: how long a collective waits for the other processes before it fails (torch's default for
#: gloo, and transformers' ``ddp_timeout``)
DEFAULT_TIMEOUT = _dt.timedelta(minutes=30)

#: (kind, rank, details) of a failure, small and picklable for the exchanges
_Failure = tuple[str, int, tuple[Any, ...]]


@dataclass(frozen=True)
class Processes:
    """This process's ``rank`` among ``count`` processes; rank 0 is the main process."""

    rank: int = 0
    count: int = 1

    @classmethod
    def from_environment(cls) -> Processes:
        """The processes the launcher started (torchrun's ``RANK`` / ``WORLD_SIZE``, or MPI's),
        read from the environment without any communication; one process without a launcher."""
        info = get_cpu_distributed_information()
        return cls(rank=info.rank, count=info.world_size)

    @property
    def main(self) -> bool:
        return self.rank == 0

    def start(self, timeout: _dt.timedelta = DEFAULT_TIMEOUT) -> None:
        """Join the process group (gloo on the CPU, through accelerate), whose collectives give up
        after ``timeout``; nothing with one process or when the group already exists. The job
        trains on the CPU (``use_cpu``), so the group is a CPU one whatever the machine."""
        if self.count > 1 and not dist.is_initialized():
            PartialState(cpu=True, timeout=timeout)

    def stop(self) -> None:
        """Leave the process group :meth:`start` joined; nothing with one process. Call it when the
        job ends, failed or not: a gloo group left to the interpreter's exit can abort the process
        (exit code -6, "terminate called without an active exception") after the work is done."""
        if self.count > 1 and dist.is_initialized():
            dist.destroy_process_group()

    # ------------------------------------------------------------------ exchanges
    def on_main(self, action: Callable[[], T]) -> T:
        """Run ``action`` on the main process only; every process returns its value (which must
        be picklable) or raises its error (see the module)."""
        if self.count == 1:
            return action()
        if self.main:
            try:
                value = action()
            except Exception as error:
                self._broadcast(("failed", _describe(error, self.rank)))
                raise
            self._broadcast(("done", value))
            return value
        outcome, payload = self._broadcast(None)
        if outcome == "failed":
            raise _rebuild(payload) from None
        return payload

    def agree(self, action: Callable[[], T]) -> T:
        """Run ``action`` on every process; if any failed, every process raises the error of the
        lowest-ranked one that did. Returns this process's value."""
        value: Any = None
        failure: Exception | None = None
        try:
            value = action()
        except Exception as error:
            failure = error
        return self._settle(value, failure)

    def main_first(self, first: Callable[[Callable[[], None]], T], then: Callable[[], T]) -> T:
        """The main process runs ``first(release)``; the others wait until it calls
        ``release()`` (or returns, or fails), then run ``then()``; errors are then settled as in
        :meth:`agree`. For work the main process does once and the others reuse: it takes a lock
        and releases the others, who queue on that lock and find the work done."""
        if self.count == 1:
            return first(lambda: None)
        value: Any = None
        failure: Exception | None = None
        if self.main:
            released = False

            def release() -> None:
                nonlocal released
                if not released:
                    released = True
                    self._broadcast(None)

            try:
                value = first(release)
            except Exception as error:
                failure = error
            if not released:
                released = True
                self._broadcast(None if failure is None else _describe(failure, self.rank))
        else:
            described = self._broadcast(None)
            if described is not None:  # the main process failed before it released the others
                failure = _rebuild(described)
            else:
                try:
                    value = then()
                except Exception as error:
                    failure = error
        return self._settle(value, failure)

    def any(self, *flags: bool) -> tuple[bool, ...]:
        """Each flag, true when it is true on any process (one all-reduce of a few integers)."""
        if self.count == 1:
            return tuple(bool(flag) for flag in flags)
        values = torch.tensor([int(bool(flag)) for flag in flags], dtype=torch.int64)
        dist.all_reduce(values, op=dist.ReduceOp.MAX)
        return tuple(bool(value) for value in values.tolist())

    def gather(self, value: T) -> list[T]:
        """Every process's ``value`` (picklable), in rank order."""
        if self.count == 1:
            return [value]
        values: list[Any] = [None] * self.count
        dist.all_gather_object(values, value)
        return values

    # ------------------------------------------------------------------ internals
    def _broadcast(self, value: Any) -> Any:
        """The main process's ``value``, on every process."""
        box = [value if self.main else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def _settle(self, value: T, failure: Exception | None) -> T:
        failures = self.gather(None if failure is None else _describe(failure, self.rank))
        first = next((f for f in failures if f is not None), None)
        if first is None:
            return value
        if failure is not None and first[1] == self.rank:
            raise failure
        raise _rebuild(first) from failure


def _describe(error: BaseException, rank: int) -> _Failure:
    """``error`` of process ``rank`` as a picklable tuple (see :func:`_rebuild`)."""
    if isinstance(error, OSError) and error.errno is not None:
        return ("OSError", rank, (error.errno, error.strerror, error.filename))
    if isinstance(error, ValueError):
        return ("ValueError", rank, (str(error),))
    return (type(error).__name__, rank, (str(error),))


def _rebuild(failure: _Failure) -> Exception:
    """The error another process described: the same ValueError / OSError, else a RuntimeError
    naming the process and the error."""
    kind, rank, details = failure
    if kind == "OSError" and len(details) == 3:
        return OSError(*details)
    if kind == "ValueError":
        return ValueError(*details)
    return RuntimeError(f"process {rank} of the launch failed: {kind}: {details[0]}")
