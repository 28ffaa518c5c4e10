"""A file's value checked against the annotation of the dataclass field it is meant for."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Literal

import pytest

from ebpo.utils.field_values import check_field_value, describe_type


class Color(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Entry:
    path: str
    split: str = "train"


@pytest.mark.parametrize(
    "value, annotation, expected",
    [
        (3, int, 3),
        (3, float, 3.0),
        (None, int | None, None),
        (True, bool, True),
        ([1, 2], tuple[int, ...], (1, 2)),
        ([1, 2], list[float] | None, [1.0, 2.0]),
        ({"a": 1}, dict, {"a": 1}),
        ({"a": True}, dict[str, bool] | None, {"a": True}),
        ("x", dict | str | None, "x"),
        ("red", Color | str, "red"),
        ("a", Literal["a", "b"], "a"),
        ([{"path": "p"}], list[Entry], [{"path": "p"}]),
        (object, Any, object),
    ],
)
def test_values_of_the_field_type_pass(value, annotation, expected):
    result = check_field_value("f", value, annotation)
    assert result == expected and type(result) is type(expected)


@pytest.mark.parametrize(
    "value, annotation, message",
    [
        ("2", int, "f must be an integer, got '2'"),
        (True, int, "f must be an integer, got True"),
        (2.7, int, "f must be an integer, got 2.7"),
        ([2], int | None, "f must be an integer or null, got [2]"),
        ("yes", bool, "f must be true or false, got 'yes'"),
        ("math_reward", list[str] | None, "f must be a list of strings or null, got 'math_reward'"),
        ([5], list[str] | None, "f must be a list of strings or null, got [5]"),
        ({1: 2}, dict, "f must be a mapping with string keys, got {1: 2}"),
        ("c", Literal["a", "b"], "f must be one of ['a', 'b'], got 'c'"),
        (1, Literal[True], "f must be one of [True], got 1"),
        ("hello", list[Entry], "f must be a list of values that are each a mapping of Entry"),
        ([{"pth": "p"}], list[Entry], "f must be a list of values that are each a mapping of"),
    ],
)
def test_other_values_are_one_line_naming_the_field(value, annotation, message):
    with pytest.raises(ValueError) as raised:
        check_field_value("f", value, annotation)
    assert str(raised.value).startswith(message)


def test_strings_convert_leaves_strings_to_the_parser_but_not_in_place_of_other_lists():
    # what argparse does with a TRL YAML's values: a string default goes through the flag's type
    assert check_field_value("f", "8", int, strings_convert=True) == "8"
    assert check_field_value("f", "true", bool | None, strings_convert=True) == "true"
    assert (
        check_field_value("f", "all-linear", list[str] | None, strings_convert=True) == "all-linear"
    )
    with pytest.raises(ValueError, match="must be a list of numbers or null"):
        check_field_value("f", "0.5", list[float] | None, strings_convert=True)
    with pytest.raises(ValueError, match="must be a mapping with string keys or null"):
        check_field_value("f", "x", dict | None, strings_convert=True)
    with pytest.raises(ValueError, match="must be a string or null"):
        check_field_value("f", 5, str | None, strings_convert=True)


def test_describe_type():
    assert describe_type(str | None) == "a string or null"
    assert describe_type(Color) == "one of ['red']"
