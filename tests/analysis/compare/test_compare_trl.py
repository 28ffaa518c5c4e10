"""``ebpo compare`` on real tiny TRL runs: two seeds of ``ebpo grpo`` with ``ebpo`` and with
``grpo``, except that seed 1's baseline is a plain ``trl grpo`` run. compare.json's paired
differences equal a hand computation from the runs' own ``trainer_state.json``; the estimator and
the seed were read from the runs' files (``training_args.bin`` without unpickling)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

from ebpo.analysis.compare.runs import read_run  # noqa: E402
from ebpo.cli import main  # noqa: E402
from ebpo.utils.launch import cpu_launch_env  # noqa: E402
from tests.commands.grpo.grpo_files import PARITY_REWARDS, write_model_and_prompts  # noqa: E402

pytestmark = [pytest.mark.trl, pytest.mark.slow]

STEPS = 4
#: the user's one recipe: every run differs from it only by --seed and --advantage_estimator
RECIPE = """\
model_name_or_path: {model}
datasets:
  - path: json
    data_files: {data}
reward_funcs:
  - side_rewards.parity_reward
num_generations: 2
per_device_train_batch_size: 4
max_completion_length: 8
max_steps: {steps}
save_steps: {steps}
learning_rate: 5.0e-2
beta: 0.0
logging_steps: 1
report_to: none
use_cpu: true
bf16: false
"""
T_975_DF1 = 12.706204736174707  # scipy.stats.t.ppf(0.975, 1)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = write_model_and_prompts(
        tmp_path_factory.mktemp("compare_trl"), 8, num_layers=1, hidden_size=32, seed=0
    )
    recipe = root / "recipe.yaml"
    recipe.write_text(RECIPE.format(model=root / "model", data=root / "data.jsonl", steps=STEPS))
    (root / "lib").mkdir()
    (root / "lib" / "side_rewards.py").write_text(PARITY_REWARDS)
    paths = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(root / "lib"))
        for estimator, seed in (("ebpo", 0), ("ebpo", 1), ("grpo", 0)):
            out = root / f"{estimator}_{seed}"
            argv = ["grpo", "--config", str(recipe), "--output_dir", str(out), "--seed", str(seed),
                    "--advantage_estimator", estimator]  # fmt: skip
            assert main(argv) == 0
            paths[(estimator, seed)] = out
    out = root / "trl_1"  # a plain TRL user's baseline: trl grpo, as typed in a shell
    env = cpu_launch_env({"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(root / "lib")})
    env.pop("ACCELERATE_USE_CPU")
    trl = Path(sys.executable).parent / "trl"
    done = subprocess.run(
        [str(trl), "grpo", "--config", str(recipe), "--output_dir", str(out), "--seed", "1"],
        env=env, cwd=root, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    paths[("grpo", 1)] = out
    return root, paths


def logged(run: Path, key: str) -> dict[int, float]:
    state = json.loads((run / f"checkpoint-{STEPS}" / "trainer_state.json").read_text())
    return {h["step"]: h[key] for h in state["log_history"] if key in h}


def test_each_run_says_its_estimator_and_seed(runs):
    _, paths = runs
    rewards = [r for path in paths.values() for r in logged(path, "reward").values()]
    assert sum(rewards) > 0 and min(rewards) < 1  # the reward has signal: the runs can differ
    for (estimator, seed), path in paths.items():
        run = read_run(str(path))
        assert (run.estimator, run.seed, run.kind) == (estimator, str(seed), "trl")
        assert sorted(run.metrics["reward"]) == list(range(1, STEPS + 1))
    assert not (paths[("grpo", 1)] / f"checkpoint-{STEPS}" / "ebpo_estimator_state.json").exists()


def test_paired_differences_equal_a_hand_computation(runs, capsys):
    root, paths = runs
    out = root / "report"
    argv = ["compare", *map(str, paths.values()), "--output-dir", str(out),
            "--metric", "reward", "--metric", "loss"]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    report = json.loads((out / "compare.json").read_text())
    assert report["format"] == "ebpo-compare" and report["version"] == 1
    assert report["baseline"] == "grpo" and report["metrics"] == ["reward", "loss"]
    intervals = 0
    for comparison in report["comparisons"]:
        metric = comparison["metric"]
        assert comparison["estimator"] == "ebpo" and comparison["seeds"] == ["0", "1"]
        ebpo = [logged(paths[("ebpo", s)], metric) for s in (0, 1)]
        grpo = [logged(paths[("grpo", s)], metric) for s in (0, 1)]
        assert [row["step"] for row in comparison["steps"]] == list(range(1, STEPS + 1))
        for row in comparison["steps"]:
            d = [ebpo[s][row["step"]] - grpo[s][row["step"]] for s in (0, 1)]
            mean = (d[0] + d[1]) / 2
            half = T_975_DF1 * abs(d[0] - d[1]) / math.sqrt(2) / math.sqrt(2)  # sd = |d0-d1|/√2
            assert row["pairs"] == 2
            assert row["mean_diff"] == pytest.approx(mean, abs=1e-12)
            assert row["ci_low"] == pytest.approx(mean - half, abs=1e-9)
            assert row["ci_high"] == pytest.approx(mean + half, abs=1e-9)
            intervals += 1
        # the estimators' advantages differ, so do their losses and, once the policies part,
        # the rewards: the hand computation is checked on differences that are not all 0
        assert any(row["mean_diff"] != 0 for row in comparison["steps"]), metric
        last = comparison["summaries"]["last_step"]
        assert last == {**comparison["steps"][-1], "holm": last["holm"]}
        intervals += 2  # auc and steps to the baseline's final value
    assert report["multiplicity"]["intervals"] == intervals
    assert {(r["estimator"], r["seed"]) for r in report["runs"]} == {(e, str(s)) for e, s in paths}
    names = {p.name for p in out.iterdir()}
    assert {"compare.json", "compare.csv", "difference_reward.png", "curves_loss.png"} <= names
    verdicts = capsys.readouterr().out
    assert f"verdict: ebpo − grpo on reward at step {STEPS}" in verdicts


def test_runs_of_another_learning_rate_are_not_paired_silently(runs, capsys):
    root, paths = runs
    out = root / "lr"
    other = root / "ebpo_lr"
    argv = ["grpo", "--config", str(root / "recipe.yaml"), "--output_dir", str(other),
            "--seed", "1", "--advantage_estimator", "ebpo", "--learning_rate", "5e-4",
            "--max_steps", "1", "--save_steps", "1"]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    runs_ = [str(paths[("ebpo", 0)]), str(other), str(paths[("grpo", 0)]), str(paths[("grpo", 1)])]
    assert main(["compare", *runs_, "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "learning_rate (0.05 vs 0.0005)" in err, err
    assert "max_steps" in err and not out.exists()
    # accepted on purpose: one step in common
    ignore = ["--ignore", "learning_rate", "--ignore", "max_steps", "--ignore", "save_steps"]
    assert main(["compare", *runs_, "--output-dir", str(out), *ignore, "--no-plots"]) == 0
    report = json.loads((out / "compare.json").read_text())
    assert report["accepted_differences"] == ["learning_rate", "max_steps", "save_steps"]
    assert [row["step"] for row in report["comparisons"][0]["steps"]] == [1]
