"""A value read from a file (YAML, JSON) checked against the type annotation of the dataclass
field it is meant for, before the dataclass is built: a dataclass takes whatever it is given, and
a list where an integer belongs fails much later as a ``TypeError`` deep inside the code that uses
it.

    check_field_value("--config 'job.yaml': group_size", value, int)  # ValueError, one line:
    # "--config 'job.yaml': group_size must be an integer, got '2'"

Understood annotations: ``bool``, ``int`` (not a bool), ``float`` (an int is converted), ``str``,
``None``, unions (``X | None``), ``Literal[...]``, enums (a member or its value), ``list[X]`` and
``tuple[X, ...]`` (a YAML list; a tuple field gets a tuple), ``dict`` / ``dict[str, X]`` (string
keys), and dataclasses (a mapping of their field names). Anything else (a class the file cannot
spell) is passed on unchecked: the dataclass's own checks apply.

``strings_convert=True`` is for parsers that take a string themselves (argparse does, for the
values a TRL YAML file gives it): a string is then accepted at the top level for a scalar field
(``bool`` / ``int`` / ``float`` / an enum / a ``Literal``: argparse converts it with the flag's
type, or refuses it) and for a list of strings (argparse passes it on as it is: PEFT takes
``lora_target_modules: all-linear``), never where a mapping or a list of other items belongs.
"""

from __future__ import annotations

import dataclasses
import enum
import reprlib
import types
import typing
from typing import Any

from ebpo.utils.checks import is_integer, is_real

__all__ = ["check_field_value", "describe_type"]


class _Mismatch(Exception):
    pass


def check_field_value(
    where: str, value: Any, annotation: Any, *, strings_convert: bool = False
) -> Any:
    """``value`` if it has the type ``annotation`` (converted: lists to tuples for tuple fields,
    integers to floats for float fields); ValueError ``"{where} must be {expected}, got {value}"``
    otherwise."""
    try:
        return _convert(value, annotation, strings_convert)
    except _Mismatch:
        raise ValueError(
            f"{where} must be {describe_type(annotation)}, got {reprlib.repr(value)}"
        ) from None


def describe_type(annotation: Any) -> str:
    """What a value of type ``annotation`` is, in words ("an integer or null")."""
    members = _union_members(annotation)
    if members is not None:
        words = [describe_type(m) for m in members if m is not type(None)]
        if type(None) in members:
            words.append("null")
        return " or ".join(dict.fromkeys(words))
    if annotation is type(None):
        return "null"
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return f"one of {list(typing.get_args(annotation))}"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return f"one of {[m.value for m in annotation]}"
    if origin in (list, tuple) or annotation in (list, tuple):
        args = typing.get_args(annotation)
        return f"a list of {_plural(args[0])}" if args else "a list"
    if origin is dict or annotation is dict:
        return "a mapping with string keys"
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        return f"a mapping of {annotation.__name__} fields"
    return _SCALARS.get(annotation, f"a {getattr(annotation, '__name__', annotation)}")


_SCALARS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
_PLURALS = {bool: "true or false values", int: "integers", float: "numbers", str: "strings"}


def _plural(annotation: Any) -> str:
    return _PLURALS.get(annotation) or f"values that are each {describe_type(annotation)}"


def _union_members(annotation: Any) -> tuple[Any, ...] | None:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return typing.get_args(annotation)
    return None


def _convert(value: Any, annotation: Any, lenient: bool) -> Any:
    if annotation is Any or annotation is object:
        return value
    members = _union_members(annotation)
    if members is not None:
        for member in members:
            try:
                return _convert(value, member, lenient)
            except _Mismatch:
                continue
        raise _Mismatch
    if annotation is type(None):
        if value is None:
            return None
        raise _Mismatch
    scalar = _scalar(value, annotation)
    if scalar is not _NOT_SCALAR:
        if scalar is _MISMATCH and not (lenient and isinstance(value, str)):
            raise _Mismatch
        return value if scalar is _MISMATCH else scalar
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (list, tuple) or annotation in (list, tuple):
        if lenient and isinstance(value, str) and args and args[0] is str:
            return value
        if not isinstance(value, (list, tuple)):
            raise _Mismatch
        items = [_convert(item, args[0], False) for item in value] if args else list(value)
        return tuple(items) if (origin or annotation) is tuple else items
    if origin is dict or annotation is dict:
        if not (isinstance(value, dict) and all(isinstance(k, str) for k in value)):
            raise _Mismatch
        if len(args) == 2:
            return {k: _convert(v, args[1], False) for k, v in value.items()}
        return value
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        if not isinstance(value, dict):
            raise _Mismatch
        hints = typing.get_type_hints(annotation)
        names = {f.name for f in dataclasses.fields(annotation)}
        if not all(isinstance(k, str) and k in names for k in value):
            raise _Mismatch
        return {k: _convert(v, hints[k], False) for k, v in value.items()}
    return value  # a type a file cannot spell: the dataclass checks it


_NOT_SCALAR = object()
_MISMATCH = object()


def _scalar(value: Any, annotation: Any) -> Any:
    """``value`` converted to the scalar type ``annotation``, :data:`_MISMATCH` when it is not
    one, :data:`_NOT_SCALAR` when ``annotation`` is no scalar type."""
    if annotation is bool:
        return value if isinstance(value, bool) else _MISMATCH
    if annotation is int:
        return int(value) if is_integer(value) else _MISMATCH
    if annotation is float:
        return float(value) if is_real(value) else _MISMATCH
    if annotation is str:
        return value if isinstance(value, str) else _MISMATCH
    if typing.get_origin(annotation) is typing.Literal:
        allowed = typing.get_args(annotation)
        same = any(value == a and type(value) is type(a) for a in allowed)
        return value if same else _MISMATCH
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        if isinstance(value, annotation):
            return value
        return value if value in {m.value for m in annotation} else _MISMATCH
    return _NOT_SCALAR
