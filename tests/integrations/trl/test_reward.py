"""ebpo.integrations.trl.reward: the math reward as a TRL reward function."""

from __future__ import annotations

import inspect
import math

import pandas as pd
import pytest

pytest.importorskip("trl")

import ebpo.integrations.trl as trl_integration  # noqa: E402
from ebpo.integrations.trl.reward import make_trl_reward, math_reward  # noqa: E402

pytestmark = pytest.mark.trl


def test_trl_reward_signature_and_columns():
    reward = make_trl_reward()
    params = list(inspect.signature(reward).parameters.values())
    assert [p.name for p in params[:2]] == ["prompts", "completions"]
    assert params[-1].kind is inspect.Parameter.VAR_KEYWORD
    logged = {}
    out = reward(
        prompts=["p1", "p2", "p3"],
        completions=[
            "Answer: 4",
            [{"role": "assistant", "content": "\\boxed{\\frac12}"}],
            "no idea",
        ],
        answer=["4", "0.5", "1"],
        completion_ids=[[1, 2], [3], [4]],
        trainer_state=None,
        log_metric=lambda name, value: logged.__setitem__(name, value),
        log_extra=lambda *a: None,
    )
    assert out == [1.0, 1.0, 0.0]
    assert logged == {
        "math_reward/timeouts": 0.0,
        "math_reward/no_answer": 1.0,
        "math_reward/unscorable": 0.0,
    }
    assert reward.__name__ == "math_reward"


def test_trl_reward_overlong_and_reward_model_column():
    reward = make_trl_reward(overlong=(10, 4))
    out = reward(
        prompts=["p", "p"],
        completions=["Answer: 3", "Answer: 3"],
        reward_model=[{"ground_truth": "3", "style": "rule"}] * 2,
        completion_ids=[list(range(5)), list(range(8))],
    )
    assert out == pytest.approx([1.0, 1.0 + (6 - 8) / 4])
    with pytest.raises(ValueError, match="'answer'"):
        make_trl_reward()(prompts=["p"], completions=["Answer: 1"], solution=["1"])


class _StrRaises:
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


def test_trl_reward_treats_odd_ground_truths_like_score_math():
    logged = {}
    reward = make_trl_reward()
    answers = [math.nan, None, _StrRaises(), 10**5000, pd.NA, "4"]
    out = reward(
        prompts=["p"] * 6,
        completions=[
            "Answer: nan",
            "Answer: 1",
            "Answer: 1",
            "Answer: 1",
            [{"role": "assistant", "content": b"x"}],
            "Answer: 4",
        ],
        answer=answers,
        log_metric=lambda name, value: logged.__setitem__(name, value),
    )
    assert out == [0.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    assert (
        logged["math_reward/unscorable"] == 4.0
    )  # nan, None, the object, pd.NA (the huge int is too_long)
    # multimodal message parts that are not text are skipped, not joined (used to raise TypeError)
    parts = [
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Answer: 4"}, {"type": "text", "text": None}],
        }
    ]
    assert reward(prompts=["p"], completions=[parts], answer=["4"]) == [1.0]


@pytest.mark.parametrize("timeout", [math.nan, math.inf, 1e10, 0, "5", None, True], ids=repr)
def test_bad_options_are_refused_when_the_reward_is_made(timeout):
    with pytest.raises(ValueError, match=r"^timeout must be a number of seconds in \(0, 3600\]"):
        make_trl_reward(timeout=timeout)
    with pytest.raises(ValueError, match="^num_workers must be a positive integer"):
        make_trl_reward(num_workers=0)


def test_default_reward_is_exported_by_the_trl_integration():
    assert trl_integration.math_reward is math_reward
    assert trl_integration.make_trl_reward is make_trl_reward
    assert math_reward(prompts=["p"], completions=["Answer: 0.5"], answer=["\\frac{1}{2}"]) == [1.0]
