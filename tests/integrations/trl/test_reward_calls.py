"""A user's reward function, wrapped: its exceptions name it and the user's line, its return
value is checked, and what TRL reads of it (name, async-ness, pickling) is kept."""

from __future__ import annotations

import asyncio
import functools
import inspect
import pickle

import pytest
import torch

pytest.importorskip("trl")

from trl.trainer.utils import get_callable_name  # noqa: E402

from ebpo.integrations.trl import math_reward  # noqa: E402
from ebpo.integrations.trl.reward_calls import CheckedReward, checked_rewards  # noqa: E402
from ebpo.integrations.trl.trl_compat import is_async_callable  # noqa: E402

COMPLETIONS = ["a", "b", "c"]


def good(completions, **kwargs):
    return [1.0, None, torch.tensor(0.5)]


def one_number(completions, **kwargs):
    return 0.5


def wrong_length(completions, **kwargs):
    return [1.0]


def text(completions, **kwargs):
    return ["1", "0", "1"]


def raises(completions, **kwargs):
    return [_lookup({}, c) for c in completions]


def _lookup(table, key):
    return table[key]  # the line the message names


async def async_good(completions, **kwargs):
    return [0.0] * len(completions)


def test_a_good_reward_passes_through_unchanged():
    checked, model = checked_rewards([good, torch.nn.Linear(1, 1)])
    assert isinstance(checked, CheckedReward) and isinstance(model, torch.nn.Linear)
    assert checked(prompts=COMPLETIONS, completions=COMPLETIONS)[:2] == [1.0, None]
    assert get_callable_name(checked) == "good" and not is_async_callable(checked)
    assert not inspect.iscoroutinefunction(checked)
    assert pickle.loads(pickle.dumps(checked)).func is good
    assert checked_rewards([checked])[0] is checked  # wrapped once


def test_an_async_reward_stays_async():
    (checked,) = checked_rewards([async_good])
    assert is_async_callable(checked) and get_callable_name(checked) == "async_good"
    # TRL 1.10–1.13 ask inspect alone (an async reward that read as sync would not be awaited)
    assert inspect.iscoroutinefunction(checked)
    assert pickle.loads(pickle.dumps(checked)).func is async_good
    assert asyncio.run(checked(prompts=COMPLETIONS, completions=COMPLETIONS)) == [0.0] * 3


@pytest.mark.parametrize(
    "func, message",
    [
        (one_number, r"^reward function 'one_number' returned 0\.5; expected a list of 3 numbers"),
        (wrong_length, r"^reward function 'wrong_length' returned 1 rewards for 3 completions"),
        (text, r"^reward function 'text' returned '1' for completion 0; expected a list"),
        (
            raises,
            r"^reward function 'raises' raised KeyError: 'a' at .*test_reward_calls\.py:\d+ "
            r"\(in _lookup\)$",
        ),
        (
            functools.partial(raises, extra=1),
            r"^reward function 'raises' raised KeyError",
        ),
    ],
)
def test_a_bad_reward_is_one_line_naming_it(func, message):
    (checked,) = checked_rewards([func])
    with pytest.raises(ValueError, match=message):
        checked(prompts=COMPLETIONS, completions=COMPLETIONS)


def test_the_line_named_is_the_users_not_a_librarys():
    """An error raised inside an installed package (here: torch) names the user's call of it."""

    def reward(completions, **kwargs):
        return torch.zeros(2).view(5).tolist()  # the user's line

    (checked,) = checked_rewards([reward])
    with pytest.raises(
        ValueError, match=r"raised RuntimeError: .* at .*test_reward_calls\.py:\d+ \(in reward\)$"
    ):
        checked(prompts=COMPLETIONS, completions=COMPLETIONS)


def test_the_math_reward_is_checked_too():
    (checked,) = checked_rewards([math_reward])
    assert checked(prompts=["q"], completions=["Answer: 4"], answer=["4"]) == [1.0]
