"""ebpo.lab.train.data: the job's ``reward`` option picks the scorer, and the scorer says which TRL
adapter the job trains with (no dispatch on module names)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("trl")

from ebpo.integrations.trl.reward import math_reward  # noqa: E402
from ebpo.lab.cpu_task import task  # noqa: E402
from ebpo.lab.train.data import Scorer, load_job_data, trl_reward  # noqa: E402
from ebpo.lab.train.job import TrainJobConfig  # noqa: E402
from ebpo.rewards import score_math  # noqa: E402

pytestmark = pytest.mark.trl


def _config(tmp_path: Path, dataset: str, reward: str) -> TrainJobConfig:
    return TrainJobConfig(
        dataset=dataset,
        reward=reward,
        steps=1,
        group_size=2,
        prompts_per_step=2,
        topics=("add",),
        tiers=(1,),
        eval_problems=1,
        output_dir=str(tmp_path / "run"),
        cache_dir=str(tmp_path / "cache"),
    )


def _external_dataset(tmp_path: Path) -> str:
    path = tmp_path / "set.jsonl"
    rows = [{"prompt": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(4)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.mark.parametrize(
    ("dataset", "reward", "kind", "fn"),
    [
        ("arithmetic", "auto", "exact", task.reward),
        ("arithmetic", "integer", "exact", task.reward),
        ("arithmetic", "math", "math", score_math),
        ("arithmetic-word", "auto", "integer", task.integer_reward),
        ("arithmetic-word", "math", "math", score_math),
        ("file", "auto", "math", score_math),
        ("file", "math", "math", score_math),
        ("file", "integer", "integer", task.integer_reward),
    ],
)
def test_reward_option_picks_the_scorer(tmp_path, dataset, reward, kind, fn):
    name = _external_dataset(tmp_path) if dataset == "file" else dataset
    score = load_job_data(_config(tmp_path, name, reward)).score
    assert (score.kind, score.fn) == (kind, fn)


def test_math_scorer_trains_with_the_trl_math_reward():
    assert trl_reward(Scorer("math", score_math)) is math_reward
    # any other scorer is wrapped: completions as text or chat messages, column ``answer``
    reward = trl_reward(Scorer("integer", task.integer_reward))
    assert reward is not math_reward
    chat = [{"role": "assistant", "content": "Answer: 7"}]
    assert reward(prompts=["p", "p"], completions=["Answer: 6", chat], answer=["6", "8"]) == [
        1.0,
        0.0,
    ]
    # a plain function is not mistaken for the math reward, whatever module it comes from
    assert trl_reward(score_math) is not math_reward


def test_scorer_is_called_like_its_function():
    assert Scorer("math", score_math)("Answer: \\frac{1}{2}", "0.5") == 1.0
    assert Scorer("integer", task.integer_reward)("Answer: 3", "4") == 0.0
