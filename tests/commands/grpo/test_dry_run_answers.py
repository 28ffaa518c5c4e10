"""The dry run's reward check finds the ground truth where TRL's datasets keep it: ``answer``,
TRL's ``solution`` (what ``trl.rewards.accuracy_reward`` reads) or verl's
``reward_model.ground_truth``; the completion ``Answer: <truth>`` reaches the reward function
through TRL's own columns."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

from datasets import Dataset  # noqa: E402

from ebpo.commands.grpo.dry_run import score_correct_answers  # noqa: E402
from ebpo.evaluation.models import build_char_tokenizer  # noqa: E402
from tests.integrations.trl.test_trainer import build, tiny_args  # noqa: E402

pytestmark = pytest.mark.trl


def solution_reward(completions, solution, **kwargs):
    """Reads the ``solution`` column as TRL's accuracy_reward does: 1 for the right answer."""
    return [float(c == f"Answer: {s}") for c, s in zip(completions, solution, strict=True)]


ROWS = [{"prompt": "1+1=", "solution": "2"}, {"prompt": "2+2=", "solution": "4"}]


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    data = Dataset.from_list(ROWS * 4)
    args = tiny_args(tmp_path_factory.mktemp("answers"), max_steps=1)
    return build(build_char_tokenizer(), args, solution_reward, train_dataset=data)


def test_the_solution_column_is_the_answer(trainer):
    assert score_correct_answers(trainer, ROWS) == {"solution_reward": 1.0}


@pytest.mark.parametrize(
    ("row", "score"),
    [
        # `answer` first: "Answer: 2" against the solution 3 scores 0
        ({"prompt": "1+1=", "answer": "2", "solution": "3"}, 0.0),
        # `solution` before verl's reward_model.ground_truth
        ({"prompt": "1+1=", "reward_model": {"ground_truth": "5"}, "solution": "2"}, 1.0),
    ],
)
def test_which_column_wins(trainer, row, score):
    assert score_correct_answers(trainer, [row]) == {"solution_reward": score}


def test_rows_without_any_answer_column_are_not_checked(trainer):
    assert score_correct_answers(trainer, [{"prompt": "1+1=", "topic": "algebra"}]) is None
