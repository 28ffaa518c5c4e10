"""Every metric the code logs has its meaning where its name is listed: the names are taken from
the code (every named variant run on a batch, the ``ebpo/`` names the trainer adds, the reward's
``log_metric`` calls), and each must have a row with a meaning in docs/trl.md's metrics table and,
for the estimators' own, in docs/estimators.md's."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")

import ebpo  # noqa: E402
from ebpo.estimators import available_estimators  # noqa: E402
from ebpo.integrations.trl import batch_advantages  # noqa: E402
from ebpo.integrations.trl import reward as trl_reward  # noqa: E402
from ebpo.integrations.trl import trainer as trl_trainer  # noqa: E402

DOCS = Path(__file__).resolve().parents[3] / "docs"


def estimator_metrics() -> set[str]:
    """The keys of ``res.metrics`` of every named variant (so of every estimator and option that
    adds one), on a batch with an all-fail group, clusters, token counts and prompt keys."""
    rewards = torch.tensor([0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    groups = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    names: set[str] = set()
    for variant in available_estimators():
        estimator = ebpo.make_estimator(variant)
        options = {}
        if estimator.uses_clusters:
            options["clusters"] = ["a", "a", "b", "b", "a", "a", "b", "b"]
        if estimator.uses_token_counts:
            options["token_counts"] = torch.arange(3, 11)
        if estimator.uses_prompt_keys:
            options["prompt_keys"] = groups
        names |= set(estimator(rewards, groups, **options).metrics)
    return names


def trainer_metrics() -> set[str]:
    """The names EBPOTrainer logs itself (``METRIC_PREFIX + "..."``, and the metrics that
    batch_advantages adds to the estimator's, which the trainer logs under the prefix) and
    math_reward's."""
    source = inspect.getsource(trl_trainer)
    own = set(re.findall(r'METRIC_PREFIX \+ "(\w+)"', source))
    own |= set(re.findall(r'metrics\["(\w+)"\] =', inspect.getsource(batch_advantages)))
    logged = set(re.findall(r'log_metric\(\s*"([\w/]+)"', inspect.getsource(trl_reward)))
    return {trl_trainer.METRIC_PREFIX + name for name in own} | logged


def documented(page: Path, section: str) -> dict[str, str]:
    """``name -> meaning`` from the table rows of ``section`` of ``page`` (a row may list several
    names in its first cell)."""
    text = page.read_text()
    start = text.index(f"\n## {section}\n")
    end = text.find("\n## ", start + 1)
    rows: dict[str, str] = {}
    for line in text[start : end if end > 0 else None].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("| `") or len(cells) < 2:
            continue
        for name in re.findall(r"`([^`]+)`", cells[0]):
            rows[name] = cells[-1]
    return rows


def test_the_names_come_from_the_code():
    # a guard for the extraction itself: the names the docs are checked against are not empty
    # and include the ones the issue found unexplained
    assert {
        "prior_count",
        "zero_signal_group_frac",
        "beta_alpha",
        "jspo_steps",
    } <= estimator_metrics()
    assert {
        "ebpo/grpo_zero_signal_group_frac",
        "ebpo/filtered_group_frac",
        "ebpo/clip_cov_frac",
        "math_reward/timeouts",
    } <= trainer_metrics()


def test_every_logged_metric_has_its_meaning_in_trl_md():
    rows = documented(DOCS / "trl.md", "Metrics")
    names = {trl_trainer.METRIC_PREFIX + n for n in estimator_metrics()} | trainer_metrics()
    missing = sorted(names - set(rows))
    assert not missing, f"docs/trl.md, Metrics: no row for {missing}"
    assert all(len(rows[n].split()) >= 4 for n in names), "a row without a meaning"
    assert "(estimators.md#metrics)" in (DOCS / "trl.md").read_text()


def test_every_estimator_metric_has_its_meaning_in_estimators_md():
    rows = documented(DOCS / "estimators.md", "Metrics")
    missing = sorted(estimator_metrics() - set(rows))
    assert not missing, f"docs/estimators.md, Metrics: no row for {missing}"
    assert all(len(rows[n].split()) >= 4 for n in estimator_metrics())
