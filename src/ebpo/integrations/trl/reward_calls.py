"""A user's reward function, called by TRL, answering for itself: what it raises names the
function and the line of the user's code it came from, and what it returns is checked.

TRL calls each reward function inside ``GRPOTrainer._calculate_rewards``. An exception the
function raises comes out of the training loop without saying which reward raised it, and a
function that returns one number or ``None`` instead of a list fails inside TRL with ``TypeError:
'float' object is not iterable``. :func:`checked_rewards` wraps each callable reward (reward
models are left alone) so that both end in one ``ValueError`` naming the function:

    reward function 'my_reward' raised KeyError: 'answer' at /home/me/rewards.py:12 (in my_reward)
    reward function 'my_reward' returned 0.5; expected a list of 8 numbers or None, one per completion

The wrappers keep what TRL reads of a reward function: its name (``__name__``), whether it is
async (an async function gets an async wrapper), and they pickle if the function does.
"""

from __future__ import annotations

import functools
import inspect
import numbers
import os
import sysconfig
import traceback
from collections.abc import Callable
from typing import Any

import torch
from trl.trainer.utils import get_callable_name

from ebpo.integrations.trl.trl_compat import async_for_every_trl, is_async_callable

__all__ = ["CheckedReward", "checked_rewards"]


def checked_rewards(reward_funcs: list[Any]) -> list[Any]:
    """``reward_funcs`` with each callable that is not a model wrapped (see the module)."""
    out = []
    for func in reward_funcs:
        if (
            isinstance(func, torch.nn.Module)
            or not callable(func)
            or isinstance(func, CheckedReward)
        ):
            out.append(func)
        elif is_async_callable(func):
            out.append(AsyncCheckedReward(func))
        else:
            out.append(CheckedReward(func))
    return out


class CheckedReward:
    """A synchronous reward function whose errors and return values are checked."""

    def __init__(self, func: Callable[..., Any]) -> None:
        self.func = func
        self.__name__ = get_callable_name(func)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            output = self.func(*args, **kwargs)
        except Exception as error:
            raise _raised(self.__name__, self.func, error) from error
        return _checked(self.__name__, output, kwargs)


@async_for_every_trl
class AsyncCheckedReward(CheckedReward):
    """An async reward function whose errors and return values are checked."""

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            output = await self.func(*args, **kwargs)
        except Exception as error:
            raise _raised(self.__name__, self.func, error) from error
        return _checked(self.__name__, output, kwargs)


def _checked(name: str, output: Any, kwargs: dict[str, Any]) -> Any:
    """``output`` if it is a list of one number (or None) per completion; ValueError otherwise."""
    completions = kwargs.get("completions")
    expected = len(completions) if isinstance(completions, list) else None
    count = "" if expected is None else f"{expected} "
    shape = f"a list of {count}numbers or None, one per completion"
    if isinstance(output, (str, bytes, dict)) or not hasattr(output, "__len__"):
        raise ValueError(f"reward function {name!r} returned {output!r:.60}; expected {shape}")
    if expected is not None and len(output) != expected:
        raise ValueError(
            f"reward function {name!r} returned {len(output)} rewards for {expected} completions; "
            f"expected {shape}"
        )
    for index, value in enumerate(output):
        if not (value is None or _is_number(value)):
            raise ValueError(
                f"reward function {name!r} returned {value!r:.40} for completion {index}; "
                f"expected {shape}"
            )
    return output


def _is_number(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return value.numel() == 1 and not value.dtype.is_complex
    return isinstance(value, numbers.Real)


def _raised(name: str, func: Any, error: Exception) -> ValueError:
    """The one-line error for ``error`` raised by the reward function ``func`` named ``name``:
    where in the user's code (the innermost frame that is not the standard library or an
    installed package; the function's definition when the call itself failed)."""
    frames = traceback.extract_tb(error.__traceback__)[1:]  # [0] is the wrapper's own call
    if frames:
        frame = next((f for f in reversed(frames) if _users(f.filename)), frames[-1])
        where = f" at {frame.filename}:{frame.lineno} (in {frame.name})"
    else:  # the call failed before the function ran (its arguments)
        code = getattr(inspect.unwrap(_unpartial(func)), "__code__", None)
        where = f" (defined at {code.co_filename}:{code.co_firstlineno})" if code else ""
    message = " ".join(str(error).split())
    what = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return ValueError(f"reward function {name!r} raised {what}{where}")


def _unpartial(func: Any) -> Any:
    while isinstance(func, functools.partial):
        func = func.func
    return func


#: the directories of the interpreter's own modules and installed packages (not the user's code)
_LIBRARIES = tuple(
    {
        os.path.realpath(p) + os.sep
        for k in ("stdlib", "platstdlib", "purelib", "platlib")
        if (p := sysconfig.get_paths().get(k))
    }
)


def _users(filename: str) -> bool:
    """Whether ``filename`` is the user's code: not the standard library or an installed package."""
    path = os.path.realpath(filename)
    return not filename.startswith("<") and not path.startswith(_LIBRARIES)
