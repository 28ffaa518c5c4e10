"""ebpo.integrations.verl.reward: verl's compute_score, also through verl's own loader."""

from __future__ import annotations

import inspect
import math
from concurrent.futures import ThreadPoolExecutor

import pytest

from ebpo.integrations.verl import recipes
from ebpo.integrations.verl.reward import compute_score

NEW_PATH = "pkg://ebpo.integrations.verl.reward"


def test_verl_compute_score():
    expected = {"score": 1.0, "acc": 1.0, "timed_out": 0.0, "unscorable": 0.0}
    assert compute_score("math_dapo", "...\nAnswer: 34", "34") == expected
    assert compute_score("math_dapo", "Answer: 33", "34", extra_info={"index": 0})["score"] == 0.0
    params = list(inspect.signature(compute_score).parameters)
    assert params[:4] == ["data_source", "solution_str", "ground_truth", "extra_info"]
    # verl passes reward_kwargs from the config and may add its own keywords
    assert (
        compute_score("m", "Answer: 9^{9^{9}}", "3", timeout=0.3, reward_router_address=None)[
            "timed_out"
        ]
        == 1.0
    )


def test_compute_score_in_a_worker_thread():
    # verl's reward loop calls compute_score through run_in_executor: the helper-process path
    with ThreadPoolExecutor(1) as pool:
        assert (
            pool.submit(compute_score, "math", "Answer: 0.5", "\\frac{1}{2}").result()["score"]
            == 1.0
        )


class _StrRaises:
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


@pytest.mark.parametrize(
    ("response", "ground_truth", "unscorable"),
    [
        ("Answer: nan", math.nan, 1.0),
        ("Answer: 1", _StrRaises(), 1.0),
        (b"Answer: 1", "1", 1.0),
        ("Answer: 1", 10**5000, 0.0),  # too long, not unscorable
    ],
    ids=["nan-gold", "str-raises-gold", "bytes-response", "huge-int-gold"],
)
def test_odd_inputs_score_zero(response, ground_truth, unscorable):
    expected = {"score": 0.0, "acc": 0.0, "timed_out": 0.0, "unscorable": unscorable}
    assert compute_score("m", response, ground_truth) == expected


@pytest.mark.parametrize("timeout", [math.nan, math.inf, 1e10, 0, "5", None, True], ids=repr)
def test_bad_timeout_is_a_value_error(timeout):
    with pytest.raises(ValueError, match=r"^timeout must be a number of seconds in \(0, 3600\]"):
        compute_score("m", "Answer: 1", "1", timeout=timeout)


@pytest.mark.parametrize("recipe", sorted(recipes.RECIPES))
def test_recipes_name_the_new_path(recipe):
    overrides = recipes.recipe_overrides(recipe)
    assert f"reward.custom_reward_function.path={NEW_PATH}" in overrides
    assert "reward.custom_reward_function.name=compute_score" in overrides
    assert not [o for o in overrides if "pkg://ebpo.rewards" in o]


@pytest.mark.verl
@pytest.mark.slow  # imports verl
def test_verl_loads_compute_score_by_package_path():
    from verl.utils.import_utils import load_extern_object

    fn = load_extern_object(module_path=NEW_PATH, object_name="compute_score")
    assert fn is compute_score
    assert (
        fn(data_source="math_dapo", solution_str="Answer: 2", ground_truth="2", extra_info=None)[
            "score"
        ]
        == 1.0
    )
