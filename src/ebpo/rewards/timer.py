"""math-verify in this process under a wall-clock interval timer (``SIGALRM``, so in the main
thread only): the parse + verify call, the timer, and the loading of math-verify, which is never
timed (a slow import must not be charged to the answer being checked).

The time limit measures verification only. Loading math-verify (importing sympy takes from 0.3 s
on an idle machine to seconds on a loaded one) and one small comparison
(:func:`load_math_verify`) run once per process *before* any timer is armed: in a helper process
before it says ``ready``, in-process before the first timed call. And the timer never interrupts
an import: sympy imports some modules lazily, on first use, and an exception in the middle of an
import leaves sympy half-initialised, after which every parse fails and every later answer of the
process is "rejected" (what a fork pool did after scoring in threads: each forked child imported
math-verify for the first time under a 1 s limit). When the time limit expires while a module is
being imported (in the timed call, not further out), the import finishes and the call gets a
fresh ``timeout`` after it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import logging
import signal
import threading
from types import FrameType

__all__ = ["load_math_verify", "signals_usable", "verify_with_alarm"]

# While a module is being imported when the time limit expires, the timer looks again every
# _IMPORT_POLL seconds, for at most _MAX_IMPORT_WAIT seconds per call (an import that never ends
# is then interrupted after all).
_IMPORT_POLL = 0.01
_MAX_IMPORT_WAIT = 120.0

# math-verify logs a warning when its own (signal) timeouts are disabled, which we do on purpose,
# and one per parse timeout, which we count instead; keep them out of training logs.
for _name in ("math_verify.parser", "math_verify.grader", "math_verify.utils"):
    logging.getLogger(_name).setLevel(logging.ERROR)


# --------------------------------------------------------------------------------- math-verify
@functools.lru_cache(maxsize=4096)
def _parse_cached(latex: str) -> tuple:
    # Ground truths repeat G times per prompt: cache their parse. Results are immutable sympy trees.
    from math_verify import parse  # optional heavy dependency (the rewards extra)

    return tuple(parse(latex, parsing_timeout=None))


# Loaded once per process before any timer is armed: what math-verify and sympy import on first
# use (polynomials, trigonometric simplification, tuples, sets, integrals), and one comparison
# (it builds the ANTLR parser). Importing the modules costs ~0.15 s; running comparisons that
# need them would cost several times that, in every helper process.
_WARM_UP_MODULES = (
    "sympy.combinatorics",
    "sympy.physics.units",
    "sympy.assumptions.wrapper",
    "sympy.sets.handlers.issubset",
    "sympy.integrals.manualintegrate",
    "sympy.integrals.risch",
    "sympy.integrals.heurisch",
)
_LOADED = False


def load_math_verify() -> None:
    """Import math-verify (and the sympy modules it imports on first use) and run one small
    comparison, once per process (a ``fork``ed child inherits the result), outside any time
    limit: the limit measures verification, not imports. Raises ImportError when the rewards
    extra is not installed."""
    global _LOADED
    if _LOADED:
        return
    from math_verify import parse, verify  # optional heavy dependency (the rewards extra)

    for name in _WARM_UP_MODULES:
        with contextlib.suppress(ImportError):  # another sympy version may not have it
            importlib.import_module(name)
    with contextlib.suppress(Exception):  # a warm-up only: its result does not matter
        verify(
            parse("$\\frac{1}{2}$", parsing_timeout=None),
            parse("$0.5$", parsing_timeout=None),
            timeout_seconds=None,
        )
    _LOADED = True


def _verify_unguarded(prediction: str, gold: str) -> bool:
    from math_verify import parse, verify  # optional heavy dependency (the rewards extra)

    gold_parsed = list(_parse_cached(f"${gold}$"))
    pred_parsed = parse(f"${prediction}$", parsing_timeout=None)
    if not gold_parsed or not pred_parsed:
        return False
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None))


class _Deadline(BaseException):
    """Raised by our SIGALRM handler. A BaseException so math-verify's ``except Exception`` blocks
    (which swallow parse errors) do not swallow it."""


class _Alarm:
    """The armed in-process timer (main thread only, one at a time): the frame that armed it, its
    ``timeout``, and the time waited for imports."""

    frame: FrameType | None = None
    timeout = 0.0
    import_wait = 0.0
    restart = False  # an import overran the limit: a fresh ``timeout`` once it has finished


# The modules of the import system (frozen or not), as their frames' globals name them.
_IMPORT_MACHINERY = frozenset(
    {
        "_frozen_importlib",
        "_frozen_importlib_external",
        "importlib._bootstrap",
        "importlib._bootstrap_external",
    }
)


def _importing(frame: FrameType | None) -> bool:
    """Whether a module is being imported in the call running under the timer: an importlib frame
    between the interrupted ``frame`` and the frame that armed the timer (an import further out,
    e.g. a caller scoring at import time, does not count)."""
    while frame is not None and frame is not _Alarm.frame:
        if frame.f_globals.get("__name__") in _IMPORT_MACHINERY:
            return True
        frame = frame.f_back
    return False


def _alarm_handler(signum: int, frame: FrameType | None) -> None:
    if _importing(frame) and _Alarm.import_wait < _MAX_IMPORT_WAIT:
        # Never interrupt an import (it would leave sympy half-initialised): look again shortly.
        _Alarm.import_wait += _IMPORT_POLL
        _Alarm.restart = True
        signal.setitimer(signal.ITIMER_REAL, _IMPORT_POLL)
        return
    if _Alarm.restart:  # the import that overran the limit is done: verification gets its time
        _Alarm.restart = False
        signal.setitimer(signal.ITIMER_REAL, _Alarm.timeout)
        return
    raise _Deadline


def signals_usable() -> bool:
    """Whether this thread can use the in-process timer: the main thread, and no other
    ``SIGALRM`` timer pending."""
    if (
        not hasattr(signal, "setitimer")
        or threading.current_thread() is not threading.main_thread()
    ):
        return False
    # Another SIGALRM timer pending (e.g. pytest-timeout, a caller's own alarm): do not steal it.
    return signal.getitimer(signal.ITIMER_REAL)[0] == 0.0


def verify_with_alarm(prediction: str, gold: str, timeout: float) -> str:
    """Run math-verify under an interval timer in this (main) thread. Returns a status. Loading
    math-verify is not timed (:func:`load_math_verify`), nor are imports during the call."""
    try:
        load_math_verify()
    except Exception:  # not installed, or broken: as any other failure of math-verify
        return "error"
    previous = signal.signal(signal.SIGALRM, _alarm_handler)
    _Alarm.frame, _Alarm.timeout, _Alarm.import_wait, _Alarm.restart = (
        inspect.currentframe(),
        timeout,
        0.0,
        False,
    )
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
        _Alarm.frame = None  # no reference cycle through the frame
        signal.signal(signal.SIGALRM, previous)
