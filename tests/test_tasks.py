"""The built-in arithmetic task family: problems, splits, answers, the integer reward."""

from __future__ import annotations

import pytest

from ebpo import tasks


def test_problems_cover_every_topic_and_tier_with_correct_answers():
    rows = tasks.make_problems("train", 20, seed=3)
    cells = {(r["topic"], r["difficulty"]) for r in rows}
    assert cells == {(t, d) for t in tasks.TOPICS for d in tasks.TIERS}
    for row in rows:
        a, b = (int(x) for x in row["id"].split("-")[2:4])
        symbol = {"add": "+", "sub": "-", "mul": "*"}[row["topic"]]
        assert row["prompt"] == f"{a}{symbol}{b}="
        assert int(row["answer"]) == eval(f"{a}{symbol}{b}")  # noqa: S307 - trusted, generated digits
        assert int(row["answer"]) >= 0
        low, high = tasks.TIER_RANGES[row["difficulty"]]
        assert low <= a <= high and low <= b <= high
        if row["difficulty"] == 2:  # never a tier-1 problem again
            assert max(a, b) >= 10
        assert set(row) == {"id", "prompt", "answer", "source", "topic", "difficulty"}


def test_generation_is_deterministic_in_the_seed():
    assert tasks.make_problems("train", 10, seed=1) == tasks.make_problems("train", 10, seed=1)
    assert tasks.make_problems("train", 10, seed=1) != tasks.make_problems("train", 10, seed=2)


def test_splits_never_overlap_whatever_the_seed():
    train = {r["id"] for s in (0, 1) for r in tasks.make_problems("train", 200, seed=s)}
    validation = {r["id"] for s in (0, 1) for r in tasks.make_problems("validation", 50, seed=s)}
    heldout = {r["id"] for s in (0, 1) for r in tasks.make_problems("heldout", 50, seed=s)}
    assert train and validation and heldout
    assert not train & heldout and not train & validation and not validation & heldout
    for row in tasks.make_problems("heldout", 30):
        a, b = (int(x) for x in row["id"].split("-")[2:4])
        assert tasks.problem_split(row["topic"], a, b) == "heldout"


def test_small_cells_give_what_they_have_and_no_duplicates():
    rows = tasks.make_problems("heldout", 500, tiers=[1], topics=["add"])
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)) < 100  # only ~1/10 of the 100 one-digit sums are held out


def test_word_style_asks_for_an_answer_line_and_shows_one():
    row = tasks.make_problems("train", 1, topics=["mul"], tiers=[2], style="word")[0]
    assert "Answer:" in row["prompt"] and "boxes" in row["prompt"]
    # a worked example ending in an answer line that both rewards parse
    assert "Answer: 7" in tasks.word_text(row["prompt"]) and tasks.word_messages(row["prompt"])[-1]["content"] == row["prompt"]
    assert tasks.integer_reward("Tom has 3 + 4 = 7 apples.\nAnswer: 7", "7") == 1.0
    assert tasks.problem_split("add", 3, 4) == "train"  # the example never gives away a held-out answer


def test_tiers_have_growing_operand_ranges():
    assert [tasks.TIER_RANGES[t] for t in tasks.TIERS] == [(0, 9), (0, 20), (10, 99)]
    rows = tasks.make_problems("train", 300, topics=["add"])
    by_tier = {t: {r["id"].split("-", 2)[2] for r in rows if r["difficulty"] == t} for t in tasks.TIERS}
    assert not by_tier[1] & by_tier[2]  # the tiers never share a problem


@pytest.mark.parametrize(
    ("completion", "answer", "reward"),
    [
        ("68", "68", 1.0),
        ("68", 68, 1.0),
        ("6", "68", 0.0),
        ("681", "68", 0.0),
        ("", "68", 0.0),
        ("so 12 + 56 = 68\nAnswer: 68", "68", 1.0),
        ("Answer: 68\nthen 70", "68", 1.0),  # an Answer line wins over later numbers
        ("the total is 1,234 apples\nAnswer: 1,234", "1234", 1.0),
        ("12 then 68", "68", 1.0),
        ("68 then 12", "68", 0.0),
        ("-5", "-5", 1.0),
    ],
)
def test_integer_reward(completion, answer, reward):
    assert tasks.integer_reward(completion, answer) == reward


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"split": "test"}, "split"),
        ({"per_cell": 0}, "per_cell"),
        ({"style": "latex"}, "style"),
        ({"topics": ["div"]}, "topics"),
        ({"tiers": [4]}, "tiers"),
    ],
)
def test_bad_arguments_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        tasks.make_problems(**kwargs)
