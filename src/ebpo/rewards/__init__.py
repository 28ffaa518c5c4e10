"""Verifiable math reward: 1.0 if a response's final answer equals the ground truth, else 0.0.

    from ebpo.rewards import score_math
    score_math("... so the total is 12.\\nAnswer: 12", "12")          # 1.0
    score_math("... hence $\\boxed{\\frac{1}{2}}$.", "0.5")           # 1.0

Pipeline (each step is cheap and bounded; only the last one is expensive):

1. **Extraction** (:func:`extract_answer`, linear time): the final answer is whichever comes LAST
   in the response of (a) a DAPO answer line ``Answer: ...`` (the DAPO-Math prompt asks for "The
   last line of your response should be of the form Answer: $Answer", Yu et al. 2025) and
   (b) the last ``\\boxed{...}`` / ``\\fbox{...}`` (brace-balanced). ``Answer: \\boxed{5}`` thus
   yields ``5``. Surrounding ``$``, ``\\(...\\)`` and a trailing period are stripped.
2. **Input caps**: an answer longer than ``max_answer_chars`` or with braces nested deeper than
   ``max_brace_depth`` scores 0 without parsing. Why: math-verify's regexes and the LaTeX parser
   are super-linear on pathological input (measured: 2,000 nested braces take 17 s to parse, a
   100 kB ``$1+1+...$`` 12 s) and Python's regex engine cannot be interrupted by a signal, so a
   time limit alone is not enough; real answers are short (the longest MATH-500 answer has 159
   characters).
3. **Fast paths**: equal after whitespace/LaTeX-spacing normalisation → 1.0; two plain integers
   (every DAPO-Math-17K and AIME answer) → integer comparison. No sympy involved.
4. **math-verify** (Kydlíček et al., HuggingFace): both sides are parsed as LaTeX/expressions and
   compared mathematically (numbers within 1e-6 relative rounding, fractions, symbolic
   simplification, intervals, sets, tuples, equations ``x = 5`` vs ``5``).

Time limit: step 4 runs under a wall-clock budget (``timeout`` seconds for parse + verify).
math-verify's own timeouts use ``signal.alarm`` and raise in any thread but the main one, and
verl's reward loop calls ``compute_score`` from a thread pool (``loop.run_in_executor``). So:

- in the main thread with no other ``SIGALRM`` timer armed, an interval timer (``setitimer``)
  interrupts the call in-process;
- anywhere else (worker threads, or when another library's alarm is pending) the call goes to a
  persistent helper process (a small pool, one process per concurrent caller), which applies the
  same in-process timer and is killed and restarted by the caller if it ever overruns by more than
  a grace period (e.g. a computation stuck in C code).

A call that runs out of time scores 0 and is counted: see :func:`reward_stats`. Nothing here
raises on any response or ground truth: a missing ground truth (None, NaN, pandas.NA, empty) or an
input that is neither text nor a number scores 0 and is counted too (statuses
``missing_ground_truth`` and ``bad_input``). Only bad options raise (ValueError): ``timeout`` must
be finite, in (0, ``MAX_TIMEOUT`` = 3600] seconds.

Fork safety: the helper pool belongs to the process that started it; a ``fork``ed child (a
multiprocessing or DataLoader worker) starts its own helpers and never talks to the parent's.
"""

from __future__ import annotations

import atexit
import contextlib
import decimal
import functools
import json
import logging
import math
import numbers
import os
import re
import selectors
import signal
import subprocess
import sys
import threading
import unicodedata
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_TIMEOUT",
    "MAX_TIMEOUT",
    "STATUSES",
    "ScoreResult",
    "compute_score",
    "extract_answer",
    "make_trl_reward",
    "math_reward",
    "normalize_answer",
    "overlong_penalty",
    "reset_reward_stats",
    "reward_stats",
    "score_math",
    "score_math_batch",
    "score_math_detailed",
    "shutdown_workers",
]

DEFAULT_TIMEOUT = 5.0  # seconds per math-verify call (parse both sides + verify): math-verify's default
# Largest accepted ``timeout``: one hour per response. A larger value is a unit mistake (ms for s)
# or a way to say "no limit", which this module does not offer: the limit is what keeps a
# pathological expression from stalling a training step. (setitimer overflows above ~3e8 s.)
MAX_TIMEOUT = 3600.0
MAX_ANSWER_CHARS = 512
MAX_BRACE_DEPTH = 32
# Extra seconds a helper process gets beyond ``timeout`` before the caller kills it: its own timer
# should have fired by then; the margin covers pipe latency on a loaded machine.
_KILL_GRACE = 2.0
_WORKER_START_TIMEOUT = 120.0  # importing sympy + math-verify on a busy 2-core box can be slow

# Statuses of a scored response (ScoreResult.status); each is also a counter in reward_stats().
STATUSES = (
    "exact",  # normalised strings equal
    "integer",  # both plain integers, compared as ints
    "verified",  # math-verify said equal
    "rejected",  # compared and found different
    "no_answer",  # nothing extractable
    "too_long",  # answer exceeds max_answer_chars / max_brace_depth: not parsed
    "timeout",  # math-verify exceeded the time limit
    "error",  # any exception inside math-verify
    "missing_ground_truth",  # ground truth None, NaN, pandas.NA, empty, or "nan" / "<NA>" text
    "bad_input",  # response or ground truth neither text nor a number (bytes, list, object...)
)

# math-verify logs a warning when its own (signal) timeouts are disabled, which we do on purpose,
# and one per parse timeout, which we count instead; keep them out of training logs.
for _name in ("math_verify.parser", "math_verify.grader", "math_verify.utils"):
    logging.getLogger(_name).setLevel(logging.ERROR)
_LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScoreResult:
    """Outcome of scoring one response: ``score`` in {0.0, 1.0}, ``status`` (one of
    :data:`STATUSES`) and the extracted ``prediction`` (None if nothing was found)."""

    score: float
    status: str
    prediction: str | None


# ----------------------------------------------------------------------------------- statistics
_STATS: Counter[str] = Counter()
_STATS_LOCK = threading.Lock()


def _count(*keys: str) -> None:
    with _STATS_LOCK:
        for key in keys:
            _STATS[key] += 1


def reward_stats() -> dict[str, int]:
    """Counters since the last reset: ``calls``, ``correct``, one per status in :data:`STATUSES`
    (``timeout`` is the number of responses that scored 0 because of the time limit;
    ``missing_ground_truth`` and ``bad_input`` the pairs that could not be compared at all) and
    ``worker_restarts`` (helper processes killed after overrunning). Counted per process: a
    forked worker counts its own calls."""
    with _STATS_LOCK:
        out = {key: 0 for key in ("calls", "correct", *STATUSES, "worker_restarts")}
        out.update(_STATS)
        return out


def reset_reward_stats() -> None:
    """Zero every counter of :func:`reward_stats`."""
    with _STATS_LOCK:
        _STATS.clear()


# ----------------------------------------------------------------------------------- extraction
# "Answer: 42", also with Markdown bold ("**Answer:** 42", "**Answer**: 42") as chat models write
# it, and with the answer on the next line ("Answer:\n42"), which DAPO's own regex accepts too.
_ANSWER_LINE = re.compile(r"answer[ \t*]{0,8}:[ \t*]*(?:\n[ \t*]*)?([^\n]*)", re.IGNORECASE)
_BOX_MARKERS = ("\\boxed", "\\fbox")


def _last_answer_line(text: str) -> tuple[int, str] | None:
    last = None
    for match in _ANSWER_LINE.finditer(text):
        if match.group(1).strip(" \t*$."):
            last = match
    if last is None:
        return None
    return last.start(), last.group(1)


_TOO_LONG = object()  # marks a box that does not close within the length cap


def _last_boxed(text: str, limit: int) -> tuple[int, Any] | None:
    """Start of the last ``\\boxed``/``\\fbox`` and its brace-balanced content: None as content if
    the braces never close (truncated response), ``_TOO_LONG`` if they do not close within
    ``limit`` characters (the scan stops there, so the cost is bounded)."""
    start, marker = max((text.rfind(m), m) for m in _BOX_MARKERS)
    if start < 0:
        return None
    i = text.find("{", start)
    if i < 0 or text[start + len(marker) : i].strip():
        return None
    depth = 0
    end = min(len(text), i + limit + 2)
    for j in range(i, end):
        ch = text[j]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return start, text[i + 1 : j]
    return start, (_TOO_LONG if end < len(text) else None)


def _strip_math_delimiters(answer: str) -> str:
    answer = answer.strip().rstrip(".").rstrip("*").strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if answer.startswith(left) and answer.endswith(right) and len(answer) >= len(left) + len(right):
            answer = answer[len(left) : len(answer) - len(right)].strip()
            break
    return answer.rstrip(".").strip()


def _extract(response: str, max_chars: int) -> Any:
    """The final answer (str), None, or ``_TOO_LONG``."""
    if not isinstance(response, str) or not response:
        return None
    line = _last_answer_line(response)
    box = _last_boxed(response, max_chars)
    if box is not None and (line is None or box[0] >= line[0]):
        return box[1] if box[1] is None or box[1] is _TOO_LONG else _strip_math_delimiters(box[1])
    if line is None:
        return None
    answer = _strip_math_delimiters(line[1])
    inner = _last_boxed(answer, max_chars)  # "Answer: $\\boxed{5}$" -> "5"
    if inner is not None and isinstance(inner[1], str):
        answer = _strip_math_delimiters(inner[1])
    return answer or None


def extract_answer(response: str, *, max_answer_chars: int = MAX_ANSWER_CHARS) -> str | None:
    """The final answer of ``response``: the later of its last ``Answer: ...`` line (DAPO format)
    and its last ``\\boxed{...}``, without ``$`` delimiters or a trailing period; None if there is
    neither, or if the last box does not close (within ``max_answer_chars``). Linear time on any
    string."""
    answer = _extract(response, max_answer_chars)
    return answer if isinstance(answer, str) else None


# ------------------------------------------------------------------------------------ fast path
_SPACING = re.compile(r"\\[,;:! ]|\\(?:left|right|displaystyle)\b|\s+")
_INTEGER = re.compile(r"[+-]?\d+")


def _canonical(text: str) -> str:
    """Whitespace, LaTeX spacing commands, ``\\left``/``\\right`` and ``\\dfrac``/``\\tfrac`` never
    change a value; removing them lets identical answers skip the parser."""
    text = _SPACING.sub("", text)
    return text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").rstrip(".")


def normalize_answer(answer: str) -> str:
    """A comparison key for extracted answers (used by maj@k voting): whitespace, LaTeX spacing
    and ``\\left``/``\\right`` removed, ``\\dfrac``/``\\tfrac`` -> ``\\frac``, no ``$`` or trailing period."""
    return _canonical(_strip_math_delimiters(answer))


def _max_brace_depth(text: str) -> int:
    depth = best = 0
    for ch in text:
        if ch == "{":
            depth += 1
            best = max(best, depth)
        elif ch == "}":
            depth -= 1
    return best


def _integer_key(text: str) -> tuple[bool, str]:
    """``(negative, digits without leading zeros)`` of a string matching ``_INTEGER``: equal keys
    <=> equal integers. Digit by digit, so no int() and no limit on the number of digits (Python
    refuses to convert more than 4,300); Unicode decimal digits count as their value, as in int()."""
    negative = text.startswith("-")
    digits = "".join(str(unicodedata.decimal(ch)) for ch in text.lstrip("+-")).lstrip("0")
    return (negative and bool(digits), digits)


# Text a missing value turns into when a caller (or pandas' astype(str)) stringified it; no math
# answer is "nan", and scoring "Answer: nan" as correct would reward the policy for writing it.
_MISSING_TEXTS = frozenset({"nan", "<na>"})


def _is_missing(value: Any) -> bool:
    """None, a NaN number (float, numpy, Decimal) or pandas' NA / NaT."""
    if value is None or type(value).__name__ in ("NAType", "NaTType"):
        return True
    try:
        return isinstance(value, numbers.Number) and bool(value != value)
    except Exception:  # a number type whose comparison misbehaves: not a NaN we can recognise
        return False


def _input_text(value: Any, max_chars: int) -> tuple[str, str | None]:
    """A response or ground truth as text: ``(text, None)``, or ``("", problem)`` with problem
    ``"missing"`` (None, NaN, pandas.NA/NaT), ``"too_long"`` (an integer with more digits than
    ``max_chars``, which Python may even refuse to write out) or ``"bad_input"`` (bytes,
    containers, arbitrary objects: their str() is a repr, not an answer, and may raise).

    Numbers are accepted because datasets store answers as numbers: a float equal to an integer
    (27.0) is written as the integer, so it compares as one."""
    if isinstance(value, str):
        return str.__str__(value), None  # a plain str even for subclasses (numpy.str_, ...)
    if _is_missing(value):
        return "", "missing"
    if isinstance(value, bool) or not isinstance(value, numbers.Real | decimal.Decimal):
        return "", "bad_input"  # (complex numbers too: no math answer here is complex-typed)
    try:
        if isinstance(value, numbers.Integral):
            value = int(value)
            # Over 4 bits per digit: such an int has more than max_chars digits; say so before
            # str() refuses it (> 4,300 digits) or, with that limit lifted, takes quadratic time.
            if value.bit_length() > 4 * (max_chars + 2):
                return "", "too_long"
            return str(value), None
        if not isinstance(value, numbers.Rational):  # float, numpy floats, Decimal
            number = float(value)
            if number.is_integer():
                return str(int(number)), None
        return str(value), None
    except ValueError:  # int -> str digit limit (e.g. a Fraction with a huge numerator)
        return "", "too_long"
    except Exception:  # a number type whose conversion raises
        return "", "bad_input"


def _short_repr(value: Any, limit: int = 60) -> str:
    """repr() for an error message: bounded, and never raising itself."""
    try:
        text = repr(value)
    except Exception:
        return f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_timeout(timeout: Any) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise ValueError(f"timeout must be a number of seconds in (0, {MAX_TIMEOUT:g}], got {_short_repr(timeout)}")
    try:
        value = float(timeout)
    except (OverflowError, ValueError):
        value = math.inf
    if not 0.0 < value <= MAX_TIMEOUT:  # also False for NaN
        raise ValueError(
            f"timeout must be a number of seconds in (0, {MAX_TIMEOUT:g}] (finite; larger limits "
            f"are not supported), got {_short_repr(timeout)}"
        )
    return value


def _check_positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {_short_repr(value)}")
    return int(value)


_UNSCORABLE = ("missing_ground_truth", "bad_input")  # statuses of pairs that could not be compared
_WARNED: set[str] = set()
_UNSCORABLE_WARNINGS = {
    "missing_ground_truth": "a ground truth is missing (None, NaN, pandas.NA or empty)",
    "bad_input": "a response or ground truth is neither text nor a number",
}


def _warn_once(status: str) -> None:
    """Say once per process, in the log, that some responses cannot be scored at all; the
    counters in reward_stats() say how many."""
    if status not in _UNSCORABLE_WARNINGS or status in _WARNED:
        return
    _WARNED.add(status)
    _LOG.warning(
        "%s: such responses score 0; reward_stats()[%r] counts them", _UNSCORABLE_WARNINGS[status], status
    )


# --------------------------------------------------------------------------------- math-verify
@functools.lru_cache(maxsize=4096)
def _parse_cached(latex: str) -> tuple:
    # Ground truths repeat G times per prompt: cache their parse. Results are immutable sympy trees.
    from math_verify import parse

    return tuple(parse(latex, parsing_timeout=None))


def _verify_unguarded(prediction: str, gold: str) -> bool:
    from math_verify import parse, verify

    gold_parsed = list(_parse_cached(f"${gold}$"))
    pred_parsed = parse(f"${prediction}$", parsing_timeout=None)
    if not gold_parsed or not pred_parsed:
        return False
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None))


class _Deadline(BaseException):
    """Raised by our SIGALRM handler. A BaseException so math-verify's ``except Exception`` blocks
    (which swallow parse errors) do not swallow it."""


def _alarm_handler(signum: int, frame: Any) -> None:
    raise _Deadline


def _signals_usable() -> bool:
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        return False
    # Another SIGALRM timer pending (e.g. pytest-timeout, a caller's own alarm): do not steal it.
    return signal.getitimer(signal.ITIMER_REAL)[0] == 0.0


def _verify_with_alarm(prediction: str, gold: str, timeout: float) -> str:
    """Run math-verify under an interval timer in this (main) thread. Returns a status."""
    previous = signal.signal(signal.SIGALRM, _alarm_handler)
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, timeout)
            try:
                equal = _verify_unguarded(prediction, gold)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except _Deadline:
            return "timeout"
        except Exception:  # includes RecursionError from deeply nested expressions
            return "error"
        return "verified" if equal else "rejected"
    finally:
        signal.signal(signal.SIGALRM, previous)


# ------------------------------------------------------------------------------ helper processes
def _worker_main() -> None:
    """Entry point of a helper process: one JSON request per stdin line, one status per stdout
    line. Runs math-verify in its own main thread, so the in-process timer works."""
    import math_verify  # noqa: F401  (import before signalling readiness)

    out = sys.stdout
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        try:
            request = json.loads(line)
            status = _verify_with_alarm(request["p"], request["g"], float(request["t"]))
        except Exception:
            status = "error"
        out.write(status + "\n")
        out.flush()


class _Worker:
    """A helper process running :func:`_worker_main`, talked to over pipes."""

    def __init__(self) -> None:
        src_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src_dir, env.get("PYTHONPATH", "")) if p)
        # A plain subprocess, not multiprocessing: no re-import of the caller's __main__ module,
        # and safe to start from a process that already initialised CUDA or threads.
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from ebpo.rewards import _worker_main; _worker_main()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            text=True,
            bufsize=1,
        )
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.proc.stdout, selectors.EVENT_READ)
        if self._read_line(_WORKER_START_TIMEOUT) != "ready":
            self.kill()
            raise RuntimeError("ebpo.rewards helper process failed to start")

    def _read_line(self, timeout: float) -> str | None:
        if not self.selector.select(timeout):
            return None
        line = self.proc.stdout.readline()
        return line.strip() if line else None

    def call(self, prediction: str, gold: str, timeout: float) -> str | None:
        """The worker's status, or None if it did not answer within timeout + grace."""
        request = json.dumps({"p": prediction, "g": gold, "t": timeout})
        try:
            self.proc.stdin.write(request + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return None
        return self._read_line(timeout + _KILL_GRACE)

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
            for stream in (self.proc.stdin, self.proc.stdout):
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
    threads, and each helper holds its own sympy (~100 MB).

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
            _count("worker_restarts")
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
    global _STATS_LOCK
    _STATS_LOCK = threading.Lock()  # a parent thread may have held it at the fork
    for pool in list(_POOLS):
        pool._forget_inherited()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

_POOL = _WorkerPool()
atexit.register(_POOL.shutdown)


def shutdown_workers() -> None:
    """Stop the helper processes (they are also stopped at interpreter exit)."""
    _POOL.shutdown()


def _guarded_verify(prediction: str, gold: str, timeout: float, isolation: str) -> str:
    if isolation == "auto":
        isolation = "signal" if _signals_usable() else "process"
    if isolation == "signal":
        if not _signals_usable():
            raise ValueError("isolation='signal' needs the main thread and no pending SIGALRM timer")
        return _verify_with_alarm(prediction, gold, timeout)
    return _POOL.verify(prediction, gold, timeout)


# --------------------------------------------------------------------------------------- scoring
def score_math_detailed(
    response: str,
    ground_truth: str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    max_answer_chars: int = MAX_ANSWER_CHARS,
    max_brace_depth: int = MAX_BRACE_DEPTH,
    isolation: str = "auto",
) -> ScoreResult:
    """Score one response and say how: see the module docstring for the pipeline.

    ``timeout``: seconds in (0, :data:`MAX_TIMEOUT`]; anything else (NaN, inf, 1e10, a string)
    is a ValueError. ``isolation``: ``"auto"`` (in-process timer in the main thread, helper
    process elsewhere), ``"signal"`` (main thread only) or ``"process"`` (always a helper process;
    survives even computations that ignore signals, at ~1 ms extra per parsed call).

    Inputs never raise: ``response`` and ``ground_truth`` are text or numbers (a float equal to an
    integer compares as the integer). A missing ground truth (None, NaN, pandas.NA, empty, or the
    text ``"nan"`` / ``"<NA>"`` of a stringified missing value) scores 0 with status
    ``missing_ground_truth``; bytes, lists, dicts and other objects on either side score 0 with
    status ``bad_input``; an integer with more digits than ``max_answer_chars`` scores 0 with
    status ``too_long``. Each is counted in :func:`reward_stats`, and the first missing ground
    truth / bad input of a process is logged as a warning. A missing response is ``no_answer``.
    """
    timeout = _check_timeout(timeout)
    max_answer_chars = _check_positive_int(max_answer_chars, "max_answer_chars")
    max_brace_depth = _check_positive_int(max_brace_depth, "max_brace_depth")
    if not isinstance(isolation, str) or isolation not in ("auto", "signal", "process"):
        raise ValueError(f"isolation must be 'auto', 'signal' or 'process', got {_short_repr(isolation)}")
    gold, gold_problem = _input_text(ground_truth, max_answer_chars)
    text, response_problem = _input_text(response, max_answer_chars)
    gold = _strip_math_delimiters(gold)
    if gold_problem == "missing" or (gold_problem is None and (not gold or gold.lower() in _MISSING_TEXTS)):
        result = ScoreResult(0.0, "missing_ground_truth", None)
    elif gold_problem is not None:
        result = ScoreResult(0.0, gold_problem, None)
    elif response_problem in ("bad_input", "too_long"):
        result = ScoreResult(0.0, response_problem, None)
    else:  # a missing response is "" here: no answer
        result = _score(text, gold, timeout, max_answer_chars, max_brace_depth, isolation)
    _count("calls", result.status, *(("correct",) if result.score == 1.0 else ()))
    _warn_once(result.status)
    return result


def _score(response: str, gold: str, timeout: float, max_chars: int, max_depth: int, isolation: str) -> ScoreResult:
    """Score a response against a non-empty ground truth (delimiters already stripped)."""
    prediction = _extract(response, max_chars)
    if prediction is _TOO_LONG:
        return ScoreResult(0.0, "too_long", None)
    if prediction is None:
        return ScoreResult(0.0, "no_answer", prediction)
    too_big = (
        len(prediction) > max_chars
        or len(gold) > max_chars
        or _max_brace_depth(prediction) > max_depth
        or _max_brace_depth(gold) > max_depth
    )
    if too_big:
        return ScoreResult(0.0, "too_long", prediction[:max_chars])
    if _canonical(prediction) == _canonical(gold):
        return ScoreResult(1.0, "exact", prediction)
    if _INTEGER.fullmatch(prediction) and _INTEGER.fullmatch(gold):
        return ScoreResult(float(_integer_key(prediction) == _integer_key(gold)), "integer", prediction)
    status = _guarded_verify(prediction, gold, timeout, isolation)
    return ScoreResult(1.0 if status == "verified" else 0.0, status, prediction)


def score_math(response: str, ground_truth: str, *, timeout: float = DEFAULT_TIMEOUT) -> float:
    """1.0 if the final answer of ``response`` (DAPO ``Answer:`` line or last ``\\boxed{}``)
    equals ``ground_truth`` mathematically (math-verify), else 0.0. Never raises on any response or
    ground truth (see :func:`score_math_detailed` for what cannot be scored: it scores 0 and is
    counted) and never takes much longer than ``timeout`` seconds; timeouts score 0 and are
    counted in :func:`reward_stats`. A ``timeout`` outside (0, :data:`MAX_TIMEOUT`] is a
    ValueError."""
    return score_math_detailed(response, ground_truth, timeout=timeout).score


def score_math_batch(
    responses: Sequence[str],
    ground_truths: Sequence[str],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    num_workers: int = 1,
    progress: bool = False,
) -> list[ScoreResult]:
    """Score many responses. ``num_workers > 1`` spreads the math-verify calls over that many
    helper processes (threads hand them out), which pays off when thousands of responses need the
    parser. ``progress`` shows a tqdm bar."""
    if len(responses) != len(ground_truths):
        raise ValueError(
            f"responses and ground_truths must have the same length, got {len(responses)} and {len(ground_truths)}"
        )
    timeout = _check_timeout(timeout)
    num_workers = _check_positive_int(num_workers, "num_workers")
    from tqdm.auto import tqdm

    pairs = list(zip(responses, ground_truths, strict=True))
    bar = tqdm(total=len(pairs), desc="scoring", unit="response", disable=not progress)

    def one(pair: tuple[str, str]) -> ScoreResult:
        result = score_math_detailed(pair[0], pair[1], timeout=timeout)
        bar.update(1)
        return result

    with bar:
        if num_workers == 1 or len(pairs) < 2:
            return [one(pair) for pair in pairs]
        with ThreadPoolExecutor(max_workers=num_workers) as pool:
            return list(pool.map(one, pairs))


# ------------------------------------------------------------------------------- length shaping
def overlong_penalty(length: int, *, max_length: int, buffer_length: int, penalty_factor: float = 1.0) -> float:
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13), added to the task reward:

        0                                   if L <= L_max - L_cache
        ((L_max - L_cache) - L) / L_cache   if L_max - L_cache < L <= L_max
        -1                                  if L > L_max

    times ``penalty_factor`` (verl: ``overlong_buffer.penalty_factor``). ``length`` is the
    response length in tokens, ``max_length`` = L_max, ``buffer_length`` = L_cache."""
    if buffer_length <= 0 or buffer_length > max_length:
        raise ValueError(f"buffer_length must be in (0, max_length={max_length}], got {buffer_length!r}")
    if length < 0:
        raise ValueError(f"length must be >= 0, got {length!r}")
    expected = max_length - buffer_length
    if length <= expected:
        return 0.0
    if length > max_length:
        return -1.0 * penalty_factor
    return (expected - length) / buffer_length * penalty_factor


# ----------------------------------------------------------------------------------- adapters
def _completion_text(completion: Any) -> Any:
    """TRL completions are strings (standard format) or message lists (conversational format):
    the text of the last message. Anything else is passed on for score_math to judge."""
    if isinstance(completion, list) and completion:
        message = completion[-1]
        content = message.get("content", "") if isinstance(message, dict) else message
        if isinstance(content, list):  # multimodal parts: keep the text ones
            return "".join(t for p in content if isinstance(p, dict) and isinstance(t := p.get("text"), str))
        return content
    return completion


def _answers_from_columns(columns: dict[str, Any], answer_column: str, n: int) -> list[Any]:
    if answer_column in columns:
        answers = columns[answer_column]
    elif "reward_model" in columns:  # verl-style rows: {"ground_truth": ..., "style": "rule"}
        answers = [rm.get("ground_truth") if isinstance(rm, dict) else rm for rm in columns["reward_model"]]
    else:
        raise ValueError(
            f"the reward needs a column {answer_column!r} with the ground-truth answers; "
            f"got columns {sorted(k for k in columns if k not in ('trainer_state', 'log_extra', 'log_metric'))}"
        )
    if len(answers) != n:
        raise ValueError(f"column {answer_column!r} has {len(answers)} entries for {n} completions")
    return list(answers)  # as given: score_math_detailed handles missing or odd values


def make_trl_reward(
    answer_column: str = "answer",
    *,
    timeout: float = DEFAULT_TIMEOUT,
    num_workers: int = 1,
    overlong: tuple[int, int] | None = None,
    overlong_penalty_factor: float = 1.0,
) -> Callable[..., list[float]]:
    """A TRL reward function ``(prompts, completions, **columns) -> list[float]`` scoring each
    completion with :func:`score_math` against ``columns[answer_column]``.

    ``overlong=(max_length, buffer_length)`` adds :func:`overlong_penalty` on the completion's
    token count (TRL passes ``completion_ids``). If TRL provides ``log_metric`` the function logs
    ``math_reward/timeouts`` (responses that hit the time limit in this batch),
    ``math_reward/no_answer`` and ``math_reward/unscorable`` (missing ground truth or an input
    that is neither text nor a number; they score 0). Options are checked here, not at the first
    batch: a bad ``timeout`` or ``num_workers`` is a ValueError."""
    _check_timeout(timeout)
    _check_positive_int(num_workers, "num_workers")

    def math_reward(prompts: list, completions: list, **columns: Any) -> list[float]:
        answers = _answers_from_columns(columns, answer_column, len(completions))
        texts = [_completion_text(c) for c in completions]
        results = score_math_batch(texts, answers, timeout=timeout, num_workers=num_workers)
        rewards = [r.score for r in results]
        if overlong is not None:
            ids = columns.get("completion_ids")
            if ids is None:
                raise ValueError("overlong shaping needs the completion_ids column that TRL passes")
            rewards = [
                r + overlong_penalty(len(t), max_length=overlong[0], buffer_length=overlong[1],
                                     penalty_factor=overlong_penalty_factor)
                for r, t in zip(rewards, ids, strict=True)
            ]
        log_metric = columns.get("log_metric")
        if callable(log_metric):
            log_metric("math_reward/timeouts", float(sum(r.status == "timeout" for r in results)))
            log_metric("math_reward/no_answer", float(sum(r.status == "no_answer" for r in results)))
            log_metric("math_reward/unscorable", float(sum(r.status in _UNSCORABLE for r in results)))
        return rewards

    return math_reward


math_reward = make_trl_reward()
"""The default TRL reward: ``GRPOTrainer(reward_funcs=[ebpo.rewards.math_reward], ...)`` on a
dataset with an ``answer`` column (the schema of :mod:`ebpo.data`)."""


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    **verl_kwargs: Any,
) -> dict[str, float]:
    """verl ``custom_reward_function``: ``reward.custom_reward_function.path=pkg://ebpo.rewards``
    and ``reward.custom_reward_function.name=compute_score`` (a file path to this module works
    too). Options come through ``reward.custom_reward_function.reward_kwargs`` (``timeout``);
    other keyword arguments verl may add (e.g. ``reward_router_address``) are ignored.

    Returns ``{"score", "acc", "timed_out", "unscorable"}``: verl uses ``score`` as the reward
    (1.0/0.0; note verl's built-in DAPO scorer gives +1/-1) and logs the other keys per sample;
    ``unscorable`` is 1.0 when the ground truth is missing or an input is neither text nor a number
    (see :func:`score_math_detailed`). verl's reward loop calls this from a thread pool, where the
    helper-process time limit applies. A bad ``timeout`` is a ValueError."""
    result = score_math_detailed(solution_str, ground_truth, timeout=timeout)
    return {
        "score": result.score,
        "acc": result.score,
        "timed_out": float(result.status == "timeout"),
        "unscorable": float(result.status in _UNSCORABLE),
    }
