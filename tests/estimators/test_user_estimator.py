"""A user's own estimator, defined outside the package (tests/fixtures/user_estimator): a class
and a plain function registered with ``ebpo.register_estimator``, imported by module or file path,
then named like ours in ``make_estimator``, ``ebpo replay``, ``ebpo simulate`` and ``ebpo bench``.
TRL (EBPOTrainer, resume) and verl (``compute_advantage``) are in tests/integrations/."""

from __future__ import annotations

import copy as copy_module
import json
import pickle
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import ebpo
from ebpo.cli import main
from ebpo.estimators import registry
from ebpo.lab.bench.config import BenchConfig
from ebpo.lab.bench.methods import method
from tests.conftest import USER_ESTIMATOR_MODULE

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "user_estimator" / "my_estimator.py"
REPLAY = Path(__file__).resolve().parents[1] / "fixtures" / "replay" / "legacy"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "estimators.md"


def uneven_batch(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rewards, group ids (uneven groups, singletons) and a mask with padding rows."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 6, size=7)
    groups = torch.from_numpy(np.repeat(np.arange(len(sizes)), sizes))
    rewards = torch.from_numpy(rng.uniform(size=len(groups)))
    mask = torch.from_numpy(rng.uniform(size=len(groups)) > 0.2)
    return rewards, groups, mask


def group_centered_reference(rewards, groups, mask) -> torch.Tensor:
    """r − the mean of the valid rows of its group, a Python loop per row; 0 on masked rows."""
    out = torch.zeros_like(rewards)
    for i in range(len(rewards)):
        if mask[i]:
            same = [j for j in range(len(rewards)) if mask[j] and groups[j] == groups[i]]
            out[i] = rewards[i] - sum(float(rewards[j]) for j in same) / len(same)
    return out


def test_a_users_module_adds_its_names_to_every_list(user_estimators):
    assert {"running_mean", "group_centered"} <= set(ebpo.available_estimators())
    assert isinstance(ebpo.make_estimator("running_mean"), user_estimators.RunningMean)
    assert isinstance(ebpo.make_estimator("group_centered"), ebpo.estimators.FunctionEstimator)
    assert ebpo.estimator_spec("group_centered") == ("group_centered", {})
    # the decorator hands back what it decorates: the user's function still works as written
    assert user_estimators.group_centered(
        torch.tensor([1.0, 0.0]), torch.tensor([0, 0])
    ).tolist() == [
        0.5,
        -0.5,
    ]


@pytest.mark.parametrize("seed", range(5))
def test_a_plain_function_is_a_stateless_estimator_on_the_valid_rows(user_estimators, seed):
    rewards, groups, mask = uneven_batch(seed)
    result = ebpo.make_estimator("group_centered")(rewards, groups, mask=mask)
    expected = group_centered_reference(rewards, groups, mask)
    torch.testing.assert_close(result.advantages, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(result.baselines, torch.where(mask, rewards - expected, 0.0))
    assert ebpo.make_estimator("group_centered").state_dict() == {"estimator": "group_centered"}
    nothing = ebpo.make_estimator("group_centered")(rewards, groups, mask=torch.zeros_like(mask))
    assert nothing.advantages.abs().sum() == 0


def test_a_function_estimator_pickles_and_copies(user_estimators):
    est = ebpo.make_estimator("group_centered", nan_policy="mask")
    for copy in (pickle.loads(pickle.dumps(est)), copy_module.deepcopy(est)):
        assert type(copy) is type(est) and copy.nan_policy == "mask"
        assert torch.equal(copy([1.0, 0.0], [0, 0]).advantages, est([1.0, 0.0], [0, 0]).advantages)


def test_a_function_that_returns_the_wrong_number_of_advantages_is_refused(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    ebpo.register_estimator("too_few")(lambda rewards, groups: rewards[:-1])
    with pytest.raises(ValueError, match="'too_few' returned 2 advantages for 3 rewards"):
        ebpo.make_estimator("too_few")([1.0, 0.0, 1.0], [0, 0, 1])


def test_a_class_keeps_its_state_and_a_copy_of_it_continues_exactly(user_estimators):
    first, second = uneven_batch(0), uneven_batch(1)
    est = ebpo.make_estimator("running_mean")
    est(first[0], first[1], mask=first[2])
    state = json.loads(json.dumps(est.state_dict()))
    assert state["estimator"] == "running_mean" and state["count"] == int(first[2].sum())
    restored = ebpo.make_estimator("running_mean")
    restored.load_state_dict(state)
    a = est(second[0], second[1], mask=second[2]).advantages
    b = restored(second[0], second[1], mask=second[2]).advantages
    assert torch.equal(a, b)


@pytest.mark.parametrize("bad", [42, "not_a_class_or_function"])
def test_register_estimator_takes_a_class_or_a_function(bad):
    with pytest.raises(
        ValueError, match="takes a subclass of ebpo.AdvantageEstimator or a function"
    ):
        ebpo.register_estimator("bad")(bad)
    with pytest.raises(ValueError, match="must be an identifier"):
        ebpo.register_estimator("two words")


def test_a_module_is_imported_by_file_path_too(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.delitem(sys.modules, "ebpo_user_estimator_my_estimator", raising=False)
    ebpo.import_estimator_module(str(FIXTURE))
    ebpo.import_estimator_module(str(FIXTURE))  # twice: once
    assert "running_mean" in ebpo.available_estimators()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_pkg.my_est", "could not be imported: ModuleNotFoundError"),
        ("missing_file.py", "no such file"),
        ("", "must be a module name or a .py file"),
    ],
)
def test_a_module_that_cannot_be_imported_is_one_line(spec, message):
    with pytest.raises(ValueError, match=message) as info:
        ebpo.import_estimator_module(spec)
    assert "\n" not in str(info.value)


def test_a_module_that_raises_is_one_line_naming_it(tmp_path):
    broken = tmp_path / "broken_est.py"
    broken.write_text("import ebpo\nraise RuntimeError('my bug')\n")
    with pytest.raises(
        ValueError, match=r"'.*broken_est.py' could not be imported: RuntimeError: my bug"
    ):
        ebpo.import_estimator_module(str(broken))


def test_the_docs_example_registers_an_estimator_that_runs(monkeypatch):
    """The worked example of docs/estimators.md, "Your own estimator", as a user copies it."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    section = DOCS.read_text().split("## Your own estimator", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    exec(compile(code, "docs/estimators.md", "exec"), {})
    result = ebpo.make_estimator("running_mean")([1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1])
    torch.testing.assert_close(result.advantages, torch.tensor([0.25, -0.75, 0.25, 0.25]))


# ---------------------------------------------------------------------- the commands
def test_ebpo_replay_runs_a_users_estimator(user_estimators, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["--output-dir", str(out), "--no-plots", "--estimators", "running_mean,group_centered"]
    argv += ["--estimator-module", USER_ESTIMATOR_MODULE]
    assert main(["replay", str(REPLAY), *argv]) == 0
    content = json.loads((out / "replay.json").read_text())
    assert list(content["estimators"]) == ["grpo", "running_mean", "group_centered"]
    assert content["estimators"]["running_mean"]["final_state"]["count"] > 0


@pytest.mark.parametrize("command", ["replay", "simulate", "bench"])
def test_an_estimator_module_that_cannot_be_imported_ends_in_one_line(command, tmp_path, capsys):
    argv = [
        command,
        "--estimator-module",
        "no_such_pkg.my_est",
        "--output-dir",
        str(tmp_path / "o"),
    ]
    argv += [str(REPLAY)] if command == "replay" else []
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--estimator-module" in err and "no_such_pkg" in err
    assert not (tmp_path / "o").exists()


def test_ebpo_simulate_adds_a_users_estimators(user_estimators, tmp_path):
    argv = ["simulate", "--quick", "--experiments", "baseline", "--no-plots"]
    argv += ["--output-dir", str(tmp_path), "--estimators", "group_centered,running_mean"]
    argv += ["--estimator-module", str(FIXTURE)]
    assert main(argv) == 0
    results = (tmp_path / "results.md").read_text()
    assert "group_centered" in results and "running_mean" in results
    assert "--estimators group_centered,running_mean" in results


def test_ebpo_simulate_refuses_an_unknown_estimator_before_running(tmp_path, capsys):
    argv = ["simulate", "--quick", "--estimators", "nope", "--output-dir", str(tmp_path / "o")]
    assert main(argv) == 2
    assert "--estimators 'nope': unknown estimator 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_ebpo_bench_takes_any_estimator_name_as_a_method(user_estimators):
    BenchConfig(methods=("grpo", "running_mean")).validate()
    row = method("running_mean")
    assert row.train_options()["estimator"] == "running_mean"
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        method("nope")
    with pytest.raises(ValueError, match="a method or an estimator name"):
        BenchConfig(methods=("grpo", "nope")).validate()
