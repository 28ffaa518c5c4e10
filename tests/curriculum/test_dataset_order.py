"""Curriculum orders over a dataset's own columns, and picking its topic / level / prompt column."""

from __future__ import annotations

import pandas as pd
import pytest

from ebpo.curriculum import (
    column_has_any,
    column_is_complete,
    column_names,
    column_values,
    curriculum_order,
    dataset_column,
    is_blank_or_missing,
    is_contiguous,
    pick_column,
    present_columns,
)


def rows(n: int = 6) -> list[dict]:
    return [
        {
            "id": i,
            "topic": ["b", "a", "c"][i % 3],
            "difficulty": float((7 * i) % 5),
            "extra_info": {"topic": i % 2},
        }
        for i in range(n)
    ]


def test_dataset_column_reads_frames_and_dotted_keys():
    frame = pd.DataFrame(rows(6))
    assert dataset_column(frame, "topic") == ["b", "a", "c", "b", "a", "c"]
    assert dataset_column(frame, "extra_info.topic") == [0, 1, 0, 1, 0, 1]
    assert dataset_column(frame, "missing") is None
    assert dataset_column(frame, "extra_info.missing") is None
    assert dataset_column(rows(3), "extra_info.topic") == [0, 1, 0]  # a list of dicts too
    assert dataset_column([{"a": 1}, {"b": 2}], "a") is None  # not on every row: no column


def test_curriculum_order_finds_top_level_then_extra_info_columns():
    data = rows(12)
    by_topic = curriculum_order(data, "topic", seed=0)
    assert is_contiguous([data[i]["topic"] for i in by_topic])
    by_extra = curriculum_order(data, "topic", seed=0, topic_key="extra_info.topic")
    assert is_contiguous([data[i]["extra_info"]["topic"] for i in by_extra])
    by_difficulty = curriculum_order(pd.DataFrame(data), "difficulty", seed=0)
    assert [data[i]["difficulty"] for i in by_difficulty] == sorted(r["difficulty"] for r in data)
    with pytest.raises(
        ValueError,
        match=r"order='difficulty' needs a difficulty column; the dataset has none of 'level'",
    ):
        curriculum_order(data, "difficulty", difficulty_key="level")
    with pytest.raises(ValueError, match="order must be one of"):
        curriculum_order(data, "hardest-first")


def test_column_picking():
    frame = pd.DataFrame({"problem": ["a", "b"], "subject": ["x", " "], "level": [None, "Level 2"]})
    assert present_columns(frame, None, ("prompt", "problem", "question")) == ["problem"]
    assert present_columns(frame, "question", ("prompt", "problem")) == []  # a named column only
    assert pick_column(frame, None, ("prompt", "problem"), "prompt") == "problem"
    with pytest.raises(
        ValueError,
        match=r"^the dataset has no answer column \(answer or solution\); "
        r"its columns are \['problem', 'subject', 'level'\]$",
    ):
        pick_column(frame, None, ("answer", "solution"), "answer")
    assert column_values(frame, "problem") == ["a", "b"]
    with pytest.raises(
        ValueError,
        match=r"the dataset has no column 'topic'; its columns are \['problem', 'subject', 'level'\]",
    ):
        column_values(frame, "topic")
    # blank text counts as missing: "subject" is not complete, "level" has a value
    assert column_is_complete(frame, "problem") and not column_is_complete(frame, "subject")
    assert column_has_any(frame, "level") and not column_has_any(frame, "nope")
    assert not column_has_any(pd.DataFrame({"t": ["", float("nan")]}), "t")


def test_blank_or_missing_and_column_names():
    assert all(is_blank_or_missing(v) for v in ("", "  ", None, float("nan"), pd.NA))
    assert not any(is_blank_or_missing(v) for v in ("x", 0, 0.0, False))
    assert column_names([{"a": 1}, {"b": 2, "a": 3}]) == ["a", "b"]
    assert column_names(pd.DataFrame({"x": [1], "y": [2]})) == ["x", "y"]
