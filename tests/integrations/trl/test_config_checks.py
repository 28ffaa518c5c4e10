"""The GRPOConfig values checked when EBPOConfig is built (TRL refuses them only once training
runs), against TRL's own source, and ``ebpo train``'s ``extra``."""

from __future__ import annotations

import inspect
import re

import pytest

pytest.importorskip("trl")

from trl import GRPOTrainer  # noqa: E402

from ebpo.integrations.trl import EBPOConfig, make_config  # noqa: E402
from ebpo.integrations.trl.config_checks import LOSS_TYPES, check_extra  # noqa: E402


def loss_branches() -> list[set[str]]:
    """The loss types of each ``if self.loss_type ...`` chain of TRL's ``_compute_loss`` that
    ends in ``Unknown loss type``."""
    source = inspect.getsource(GRPOTrainer._compute_loss)
    chains = source.split('raise ValueError(f"Unknown loss type')[:-1]
    names = []
    for chain in chains:
        start = [m.start() for m in re.finditer(r"(?<!el)if self\.loss_type", chain)][-1]
        tail = chain[start:]
        names.append(
            set(
                re.findall(
                    r'"([a-z_]+)"',
                    " ".join(re.findall(r"self\.loss_type (?:==|in) ([^:]+):", tail)),
                )
            )
        )
    return names


def test_the_loss_types_are_those_trl_computes():
    chains = loss_branches()
    assert len(chains) == 2  # the per-token loss, then its normalisation
    assert all(chain == set(LOSS_TYPES) for chain in chains), chains


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("loss_type", "sideways", "loss_type must be one of"),
        ("temperature", 0.0, r"temperature must be a finite number > 0, got 0\.0"),
        ("temperature", float("nan"), "temperature must be a finite number > 0"),
        ("learning_rate", float("inf"), "learning_rate must be a finite number >= 0, got inf"),
        ("learning_rate", -1e-6, "learning_rate must be a finite number >= 0"),
        ("beta", -1.0, r"beta must be a finite number >= 0, got -1\.0"),
        ("max_steps", 2.7, r"max_steps must be an integer, got 2\.7"),
        ("ddp_timeout", 10**30, "ddp_timeout must be a positive number of seconds up to"),
    ],
)
def test_values_trl_refuses_late_are_refused_when_the_config_is_built(field, value, message):
    with pytest.raises(ValueError, match=message):
        make_config("grpo", use_cpu=True, bf16=False, **{field: value})


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_every_trl_loss_type_is_accepted(loss_type):
    importance = "sequence" if loss_type == "luspo" else "token"
    config = make_config(
        "grpo", use_cpu=True, bf16=False, loss_type=loss_type, importance_sampling_level=importance
    )
    assert config.loss_type == loss_type


def test_extra_names_and_types():
    check_extra({"epsilon_high": 0.28, "num_iterations": 2, "report_to": "none"}, EBPOConfig)
    with pytest.raises(
        ValueError, match=r"unknown key 'epsilon_hihg'.*did you mean 'epsilon_high'"
    ):
        check_extra({"epsilon_hihg": 0.28}, EBPOConfig)
    with pytest.raises(
        ValueError, match=r"^extra\['num_iterations'\] must be an integer, got 2\.5$"
    ):
        check_extra({"num_iterations": 2.5}, EBPOConfig)
