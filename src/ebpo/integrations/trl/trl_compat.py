"""What differs between the TRL releases ebpo supports (``SUPPORTED["trl"]``, 1.10.0–1.16.0),
bridged in one place: each name here is TRL's own where the installed release has it.

* ``is_async_callable`` (``trl.trainer.utils``, since 1.14): whether calling a reward function
  returns a coroutine, for plain and ``functools.partial`` functions and callable instances whose
  ``__call__`` is async; before 1.14 the same few lines, here.
* :func:`async_for_every_trl`: TRL 1.10–1.13 tell an async reward function by
  ``inspect.iscoroutinefunction(func)`` alone, False for an instance whose ``__call__`` is async;
  such a wrapper would be called without being awaited.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["async_for_every_trl", "is_async_callable"]

CallableClass = TypeVar("CallableClass", bound=type)

try:
    from trl.trainer.utils import is_async_callable
except ImportError:  # trl 1.10–1.13

    def is_async_callable(func: Callable[..., Any]) -> bool:
        """Whether calling ``func`` returns a coroutine (TRL 1.14's helper)."""
        while isinstance(func, functools.partial):
            func = func.func
        call = type(func).__call__ if not inspect.isroutine(func) else None
        return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(call)


def async_for_every_trl(cls: CallableClass) -> CallableClass:
    """Class decorator: the instances of ``cls`` (whose ``__call__`` is ``async def``) read as
    coroutine functions to ``inspect.iscoroutinefunction``, as TRL 1.10–1.13 ask, as well as to
    ``is_async_callable``. ``inspect`` takes an object that carries a function's attributes
    (``__code__`` with the coroutine flag, ``__defaults__``, ``__kwdefaults__``) for a function;
    they are class attributes, so an instance still pickles as before."""
    cls.__code__ = cls.__call__.__code__  # type: ignore[attr-defined]
    cls.__defaults__ = None  # type: ignore[attr-defined]
    cls.__kwdefaults__ = None  # type: ignore[attr-defined]
    return cls
