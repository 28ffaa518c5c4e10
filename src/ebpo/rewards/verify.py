"""math-verify under a wall-clock time limit: the options, the choice between the in-process
interval timer (:mod:`ebpo.rewards.timer`) and the pool of persistent helper processes used where
signals are not usable, the pool and its fork handling.

math-verify's own timeouts use ``signal.alarm`` and raise in any thread but the main one, and
verl's reward loop calls ``compute_score`` from a thread pool (``loop.run_in_executor``). So:

- in the main thread with no other ``SIGALRM`` timer armed, an interval timer (``setitimer``)
  interrupts the call in-process;
- anywhere else (worker threads, or when another library's alarm is pending) the call goes to a
  persistent helper process (a small pool, one process per concurrent caller) running
  :func:`worker_main`, which applies the same in-process timer and is killed and restarted by the
  caller if it ever overruns by more than a grace period (e.g. a computation stuck in C code).

Fork safety: the helper pool belongs to the process that started it; a ``fork``ed child (a
multiprocessing or DataLoader worker) starts its own helpers and never talks to the parent's.

The time limit measures verification only, so that a slow import or a busy machine is not
charged to the answer being checked: math-verify is loaded before any timer is armed and imports
are never interrupted (:mod:`ebpo.rewards.timer`); a helper loads it before it says ``ready``, and
waiting for a helper to start or to be free is not counted. Helpers
skip the ``ebpo`` package's ``__init__`` (which imports torch), so they start in a fraction of a
second on an idle machine.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import numbers
import os
import selectors
import subprocess
import sys
import threading
import weakref
from typing import IO, Any

from ebpo.rewards.stats import STATUSES, count
from ebpo.rewards.timer import load_math_verify, signals_usable, verify_with_alarm
from ebpo.utils.checks import short_repr

__all__ = [
    "DEFAULT_TIMEOUT",
    "MAX_TIMEOUT",
    "check_timeout",
    "shutdown_workers",
    "verify_with_time_limit",
    "worker_main",
]

DEFAULT_TIMEOUT = (
    5.0  # seconds per math-verify call (parse both sides + verify): math-verify's default
)
# Largest accepted ``timeout``: one hour per response. A larger value is a unit mistake (ms for s)
# or a way to say "no limit", which this module does not offer: the limit is what keeps a
# pathological expression from stalling a training step. (setitimer overflows above ~3e8 s.)
MAX_TIMEOUT = 3600.0
# Extra seconds a helper process gets beyond twice ``timeout`` before the caller kills it: its own
# timer should have fired by then (after ``timeout``, or, when the limit expired during an import,
# ``timeout`` after the import); the margin covers pipe latency on a loaded machine.
_KILL_GRACE = 2.0
_WORKER_START_TIMEOUT = 120.0  # importing sympy + math-verify on a busy machine can be slow
# The directory holding the ``ebpo`` package, put on a helper process's PYTHONPATH.
_SRC_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# What a helper process runs: a plain function, so the caller's __main__ is never re-imported;
# ``ebpo`` and ``ebpo.rewards`` are registered as bare packages first, so that their __init__
# files are skipped: ``ebpo`` imports torch (2 s of every helper's start-up, and its memory), and
# the helper needs only this module and ebpo.rewards.stats.
_PACKAGES = (("ebpo", ("ebpo",)), ("ebpo.rewards", ("ebpo", "rewards")))
_WORKER_COMMAND = (
    "import sys, types\n"
    f"for name, path in {tuple((n, os.path.join(_SRC_DIR, *p)) for n, p in _PACKAGES)!r}:\n"
    "    package = types.ModuleType(name)\n"
    "    package.__path__ = [path]\n"
    "    sys.modules[name] = package\n"
    "from ebpo.rewards.verify import worker_main\n"
    "worker_main()\n"
)


# ------------------------------------------------------------------------------------- options


def check_timeout(timeout: Any) -> float:
    """``timeout`` as a float if it is a real number of seconds in (0, :data:`MAX_TIMEOUT`];
    anything else (NaN, inf, 1e10, a string, a bool) is a ValueError."""
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise ValueError(
            f"timeout must be a number of seconds in (0, {MAX_TIMEOUT:g}], got {short_repr(timeout)}"
        )
    try:
        value = float(timeout)
    except (OverflowError, ValueError):
        value = math.inf
    if not 0.0 < value <= MAX_TIMEOUT:  # also False for NaN
        raise ValueError(
            f"timeout must be a number of seconds in (0, {MAX_TIMEOUT:g}] (finite; larger limits "
            f"are not supported), got {short_repr(timeout)}"
        )
    return value


# ------------------------------------------------------------------------------ helper processes
def worker_main() -> None:
    """Entry point of a helper process: one JSON request ``{"p": prediction, "g": gold,
    "t": timeout}`` per stdin line, one status per stdout line (after a first ``ready`` line).
    Runs math-verify in its own main thread, so the in-process timer works; loads it (imports and
    warm-up, which take seconds on a loaded machine) before saying ``ready``, outside any limit."""
    load_math_verify()

    out = sys.stdout
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        try:
            request = json.loads(line)
            status = verify_with_alarm(request["p"], request["g"], float(request["t"]))
        except Exception:
            status = "error"
        out.write(status + "\n")
        out.flush()


class _Worker:
    """A helper process running :func:`worker_main`, talked to over pipes."""

    def __init__(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_SRC_DIR, env.get("PYTHONPATH", "")) if p)
        # A plain subprocess, not multiprocessing: no re-import of the caller's __main__ module,
        # and safe to start from a process that already initialised CUDA or threads.
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER_COMMAND],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            text=True,
            bufsize=1,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None  # both are PIPEs
        self.stdin: IO[str] = self.proc.stdin
        self.stdout: IO[str] = self.proc.stdout
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.stdout, selectors.EVENT_READ)
        if self._read_line(_WORKER_START_TIMEOUT) != "ready":
            self.kill()
            raise RuntimeError("ebpo.rewards helper process failed to start")

    def _read_line(self, timeout: float) -> str | None:
        if not self.selector.select(timeout):
            return None
        line = self.stdout.readline()
        return line.strip() if line else None

    def call(self, prediction: str, gold: str, timeout: float) -> str | None:
        """The worker's status, or None if it did not answer within 2 * timeout + grace (its own
        timer answers after ``timeout``, or ``timeout`` after an import that overran it)."""
        request = json.dumps({"p": prediction, "g": gold, "t": timeout})
        try:
            self.stdin.write(request + "\n")
            self.stdin.flush()
        except (BrokenPipeError, OSError):
            return None
        return self._read_line(2 * timeout + _KILL_GRACE)

    def detach(self) -> None:
        """In a forked child: let go of the parent's helper without talking to it or killing it.
        The inherited pipe descriptors are pointed at /dev/null rather than closed, so that the
        file objects stay valid (a buffered flush at garbage collection goes nowhere) and their
        numbers are never reused by an unrelated file; the object is kept alive in
        ``_INHERITED`` so that Popen's finaliser never runs on a process that is not ours."""
        with contextlib.suppress(Exception):
            self.selector.close()  # closes this process's epoll descriptor only
        devnull = os.open(os.devnull, os.O_RDWR)
        try:
            for stream in (self.stdin, self.stdout):
                with contextlib.suppress(Exception):
                    os.dup2(devnull, stream.fileno())
        finally:
            os.close(devnull)
        _INHERITED.append(self)

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            self.selector.close()
        with contextlib.suppress(Exception):
            self.proc.kill()
            self.proc.wait(timeout=5)


class _WorkerPool:
    """Helper processes created on demand, one per concurrent caller thread, at most
    ``max_workers`` (env ``EBPO_REWARD_WORKERS``, default: the CPU count); further callers wait.
    Why a cap: verl's reward loop runs ``compute_score`` on a default thread pool of up to 32
    threads, and each helper holds its own copy of sympy.

    Fork safety: a pool belongs to the process that created it (``owner_pid``). A ``fork``ed child
    (e.g. a multiprocessing or DataLoader worker) inherits the parent's pipes to the parent's
    helpers; if it used them, parent and child would read each other's answers. So in a child the
    pool starts afresh (:meth:`_forget_inherited`, run by ``os.register_at_fork`` and, as a
    fallback, when a call sees a new pid): new locks (another thread may have held one at the
    fork), new helpers, and the inherited pipe descriptors pointed at /dev/null so the child can
    neither write to the parent's helpers nor kill them. The parent's pool is untouched."""

    def __init__(self, max_workers: int | None = None) -> None:
        if max_workers is None:
            max_workers = int(os.environ.get("EBPO_REWARD_WORKERS", 0)) or (os.cpu_count() or 1)
        self.max_workers = max(1, max_workers)
        self._reset()
        _POOLS.add(self)

    def _reset(self) -> None:
        self.owner_pid = os.getpid()
        self._slots = threading.BoundedSemaphore(self.max_workers)
        self._idle: list[_Worker] = []
        self._all: list[_Worker] = []
        self._lock = threading.Lock()

    def _forget_inherited(self) -> None:
        """In a forked child: drop the parent's helpers without touching them; start afresh."""
        if self.owner_pid == os.getpid():
            return
        inherited = self._all
        self._reset()
        for worker in inherited:
            worker.detach()

    def _acquire(self) -> _Worker:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        worker = _Worker()
        with self._lock:
            self._all.append(worker)
        return worker

    def _release(self, worker: _Worker, healthy: bool) -> None:
        with self._lock:
            if healthy:
                self._idle.append(worker)
                return
            if worker in self._all:
                self._all.remove(worker)
        worker.kill()

    def verify(self, prediction: str, gold: str, timeout: float) -> str:
        if self.owner_pid != os.getpid():  # forked without the at-fork hook (e.g. a raw fork(2))
            self._forget_inherited()
        with self._slots:
            try:
                worker = self._acquire()
            except Exception:
                return "error"
            status = worker.call(prediction, gold, timeout)
            healthy = status in STATUSES
            self._release(worker, healthy)
        if status is None:
            count("worker_restarts")
            return "timeout"
        return status if healthy else "error"

    def shutdown(self) -> None:
        if self.owner_pid != os.getpid():  # never kill another process's helpers
            self._forget_inherited()
            return
        with self._lock:
            workers, self._all, self._idle = self._all, [], []
        for worker in workers:
            worker.kill()

    @property
    def size(self) -> int:
        with self._lock:
            return len(self._all)


_POOLS: weakref.WeakSet[_WorkerPool] = weakref.WeakSet()
_INHERITED: list[_Worker] = []  # the parent's helpers as seen by a forked child: kept, never used


def _after_fork_in_child() -> None:
    for pool in list(_POOLS):
        pool._forget_inherited()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

_POOL = _WorkerPool()
atexit.register(_POOL.shutdown)


def shutdown_workers() -> None:
    """Stop the helper processes (they are also stopped at interpreter exit)."""
    _POOL.shutdown()


def verify_with_time_limit(prediction: str, gold: str, timeout: float, isolation: str) -> str:
    """Compare ``prediction`` with ``gold`` through math-verify within ``timeout`` seconds; the
    status is ``"verified"``, ``"rejected"``, ``"timeout"`` or ``"error"``. ``isolation``:
    ``"auto"`` (the in-process timer where signals are usable, a helper process elsewhere),
    ``"signal"`` (ValueError where signals are not usable) or ``"process"``."""
    if isolation == "auto":
        isolation = "signal" if signals_usable() else "process"
    if isolation == "signal":
        if not signals_usable():
            raise ValueError(
                "isolation='signal' needs the main thread and no pending SIGALRM timer"
            )
        return verify_with_alarm(prediction, gold, timeout)
    return _POOL.verify(prediction, gold, timeout)
