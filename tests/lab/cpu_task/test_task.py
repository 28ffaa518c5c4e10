"""ebpo.lab.cpu_task.task: correct answers, disjoint splits whatever the seed, deterministic streams, an
unbounded problem space, and the reward."""

from __future__ import annotations

import random
from itertools import islice

import pytest

from ebpo.lab.cpu_task import task
from ebpo.lab.cpu_task.task import Problem


def _value(topic: str, a: int, b: int) -> int:
    # independent of Problem.answer: Python's own operators on the parsed digits
    return {"add": a + b, "sub": a - b, "mul": a * b}[topic]


def test_rows_render_reversed_digits_and_correct_answers():
    problems = task.fixed_problems("train", 20, seed=3)
    assert {(p.topic, p.digits) for p in problems} == {
        (t, d) for t in task.TOPICS for d in task.DEFAULT_TIERS
    }
    for p in problems:
        row = p.row("reversed")
        symbol = {"add": "+", "sub": "-", "mul": "*"}[p.topic]
        left, right = row["prompt"].rstrip("=").split(symbol)
        # operands are written least significant digit first
        a, b = int(left[::-1]), int(right[::-1])
        assert (a, b) == (p.a, p.b)
        assert int(row["answer"][::-1]) == _value(p.topic, a, b) >= 0
        assert row["answer"] == str(_value(p.topic, a, b))[::-1]
        # the tier is the digit count
        assert len(str(max(a, b) if p.topic != "mul" else a)) == p.digits
        if p.topic == "mul":
            assert 2 <= b <= 9
        assert (
            set(row) == {"id", "prompt", "answer", "source", "topic", "difficulty"}
            and row["difficulty"] == p.digits
        )
    assert (
        Problem("add", 347, 85, 3).prompt() == "743+58="
        and Problem("add", 347, 85, 3).target() == "234"
    )


def test_word_style_keeps_normal_digits_and_asks_for_an_answer_line():
    p = Problem("mul", 12, 7, 2)
    assert "12 boxes with 7 pencils" in p.prompt("word") and "Answer:" in p.prompt("word")
    assert p.target("word") == "84"
    assert "Answer: 7" in task.word_text(p.prompt("word"))
    assert task.word_messages(p.prompt("word"))[-1]["content"] == p.prompt("word")
    # the worked example never gives away a held-out answer
    assert task.problem_split("add", 3, 4) == "train"


def test_splits_never_overlap_whatever_the_seed_or_cells():
    stream_ids = {
        p.id for s in (0, 1, 2) for p in islice(task.problem_stream("train", seed=s), 3000)
    }
    validation = {p.id for s in (0, 1) for p in task.fixed_problems("validation", 40, seed=s)}
    heldout = {
        p.id for s in (0, 1) for p in task.fixed_problems("heldout", 40, seed=s, tiers=(1, 2, 3, 4))
    }
    assert stream_ids and validation and heldout
    assert not stream_ids & heldout and not stream_ids & validation and not validation & heldout
    assert all(
        task.problem_split(p.topic, p.a, p.b) == "heldout"
        for p in task.fixed_problems("heldout", 30)
    )


def test_streams_and_sets_are_deterministic_in_the_seed():
    first = list(islice(task.problem_stream("train", seed=4), 200))
    assert first == list(islice(task.problem_stream("train", seed=4), 200))
    assert first != list(islice(task.problem_stream("train", seed=5), 200))
    assert task.fixed_problems("heldout", 10, seed=0) == task.fixed_problems("heldout", 10, seed=0)
    # adding a tier leaves the other cells' fixed problems unchanged
    small = task.fixed_problems("heldout", 10, tiers=(2,))
    assert [p for p in task.fixed_problems("heldout", 10, tiers=(2, 3)) if p.digits == 2] == small


def test_the_problem_space_is_unbounded_and_the_stream_fresh():
    # 6,400 RL prompts (200 steps x 32) of the default tiers: the three-digit ones almost never repeat
    # (the one-digit cells hold 100 problems, two-digit products 720: those do)
    stream = list(islice(task.problem_stream("train", seed=0), 6400))
    three = [p for p in stream if p.digits == 3]
    assert len(set(three)) > 0.97 * len(three)
    # any digit count works: 12-digit additions, distinct and correct
    big = list(islice(task.problem_stream("train", seed=0, topics=("add",), tiers=(12,)), 500))
    assert len(set(big)) == 500 and all(len(str(p.a)) == 12 and p.answer == p.a + p.b for p in big)
    # more digits, more distinct problems: a cell can hold as many fixed problems as asked
    assert len(task.fixed_problems("heldout", 300, topics=("sub",), tiers=(4,))) == 300


def test_small_cells_give_what_they_have_without_duplicates():
    problems = task.fixed_problems("heldout", 500, topics=("add",), tiers=(1,))
    assert len(problems) == len(set(problems)) < 100  # ~1/10 of the 100 one-digit sums are held out


def test_corrupt_digit_changes_exactly_one_digit():
    rng = random.Random(0)
    for target in ("5", "21", "0981", "123456"):
        for _ in range(50):
            wrong = task.corrupt_digit(target, rng)
            assert (
                len(wrong) == len(target)
                and sum(a != b for a, b in zip(wrong, target, strict=True)) == 1
            )


@pytest.mark.parametrize(
    ("completion", "target", "style", "expected"),
    [
        ("234", "234", "reversed", 1.0),
        (" 234\n", "234", "reversed", 1.0),
        ("2340", "234", "reversed", 0.0),
        ("432", "234", "reversed", 0.0),
        ("", "0", "reversed", 0.0),
        ("So 84.\nAnswer: 84", "84", "word", 1.0),
        ("Answer: 85", "84", "word", 0.0),
    ],
)
def test_reward(completion, target, style, expected):
    assert task.reward(completion, target, style) == expected


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"topics": ("div",)}, "topics"),
        ({"topics": ()}, "topics"),
        ({"tiers": (0,)}, "tiers"),
        ({"tiers": (16,)}, "tiers"),
        ({"tiers": (2, 2)}, "tiers"),
        ({"tiers": (True,)}, "tiers"),
    ],
)
def test_bad_cells_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        task.fixed_problems("train", 1, **kwargs)
    with pytest.raises(ValueError, match=match):
        next(task.problem_stream("train", **kwargs))


def test_bad_split_and_size_raise():
    with pytest.raises(ValueError, match="split"):
        task.fixed_problems("test", 1)
    with pytest.raises(ValueError, match="per_cell"):
        task.fixed_problems("train", 0)
