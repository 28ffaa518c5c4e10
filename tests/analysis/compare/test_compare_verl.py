"""``ebpo compare`` on verl runs (the file logger's JSON lines and Hydra's config, as verl 0.9.1
writes them; :mod:`tests.analysis.compare.verl_runs`): differences against a hand computation,
the summaries, the verdict on identical runs and on a clear gain, and the settings check."""

from __future__ import annotations

import json
import math

import pytest

from ebpo.analysis.compare import compare_runs, read_runs
from ebpo.analysis.compare.report import verdict
from ebpo.analysis.compare.runs import read_run
from ebpo.cli import main
from tests.analysis.compare.verl_runs import write_verl_run

T_975_DF2 = 4.302652729911275  # scipy.stats.t.ppf(0.975, 2)
ACC = "val-core/math/acc/mean@1"
#: seed -> (grpo rewards, ebpo rewards) over steps 1..5, and accuracies at steps 0, 3, 5
REWARDS = {
    0: ([0.10, 0.20, 0.25, 0.30, 0.40], [0.12, 0.22, 0.30, 0.36, 0.45]),
    1: ([0.05, 0.15, 0.20, 0.35, 0.42], [0.05, 0.19, 0.26, 0.38, 0.48]),
    2: ([0.20, 0.22, 0.30, 0.32, 0.50], [0.21, 0.27, 0.33, 0.40, 0.55]),
}
ACCURACY = {
    0: ({0: 0.1, 3: 0.2, 5: 0.3}, {0: 0.1, 3: 0.25, 5: 0.33}),
    1: ({0: 0.1, 3: 0.22, 5: 0.31}, {0: 0.1, 3: 0.2, 5: 0.36}),
    2: ({0: 0.1, 3: 0.18, 5: 0.3}, {0: 0.1, 3: 0.21, 5: 0.31}),
}


@pytest.fixture
def verl_runs(tmp_path):
    paths = {}
    for seed, (grpo, ebpo) in REWARDS.items():
        for estimator, rewards, accuracy in (
            ("grpo", grpo, ACCURACY[seed][0]),
            ("ebpo", ebpo, ACCURACY[seed][1]),
        ):
            folder = tmp_path / f"{estimator}{seed}"
            write_verl_run(folder, estimator, seed, rewards, accuracy)
            paths[(estimator, seed)] = folder
    return paths


def by_hand(d):
    n = len(d)
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    return mean, T_975_DF2 * sd / math.sqrt(n)


def test_a_verl_run_says_its_estimator_seed_and_metrics(verl_runs):
    run = read_run(str(verl_runs[("ebpo", 2)]))
    assert (run.kind, run.estimator, run.seed) == ("verl", "ebpo", "2")
    assert run.metrics[ACC] == {0: 0.1, 3: 0.21, 5: 0.31}
    assert sorted(run.metrics["critic/score/mean"]) == [1, 2, 3, 4, 5]
    assert "timing_s/step" not in run.metrics  # clocks are not compared
    assert run.settings["actor_rollout_ref.actor.optim.lr"] == "1e-05"


def test_per_step_differences_and_summaries_by_hand(verl_runs):
    runs = read_runs([str(p) for p in verl_runs.values()])
    content = compare_runs(runs, metrics=["critic/score/mean"])
    (comparison,) = content["comparisons"]
    assert comparison["seeds"] == ["0", "1", "2"]
    for row in comparison["steps"]:
        i = row["step"] - 1
        mean, half = by_hand([REWARDS[s][1][i] - REWARDS[s][0][i] for s in REWARDS])
        assert row["mean_diff"] == pytest.approx(mean, abs=1e-12)
        assert row["ci_high"] - row["ci_low"] == pytest.approx(
            2 * half, rel=1e-9
        )  # 9-digit t table

    # area: the trapezoid mean level over steps 1..5
    def area(values):
        return sum((values[i] + values[i + 1]) / 2 for i in range(4)) / 4

    mean, _ = by_hand([area(REWARDS[s][1]) - area(REWARDS[s][0]) for s in REWARDS])
    assert comparison["summaries"]["auc"]["mean_diff"] == pytest.approx(mean, abs=1e-12)
    # steps to the baseline's final value: seed 0 ebpo reaches 0.40 between 0.36 (4) and 0.45
    # (5) at 4 + 0.04 / 0.09; the baseline at 5; seed 1: 0.42 between 0.38 and 0.48; seed 2:
    # 0.50 between 0.40 and 0.55
    reach = [4 + 0.04 / 0.09 - 5, 4 + 0.04 / 0.10 - 5, 4 + 0.10 / 0.15 - 5]
    steps = comparison["summaries"]["steps_to_baseline_final"]
    assert steps["mean_diff"] == pytest.approx(sum(reach) / 3, abs=1e-12) and steps["reached"] == 3
    assert content["verdict"][0].startswith("ebpo − grpo on critic/score/mean at step 5: +0.05333")
    assert "ebpo above grpo" in content["verdict"][0]
    assert content["multiplicity"]["intervals"] == 5 + 2


def test_the_default_metric_is_the_evaluation_and_smoothing_is_a_trailing_mean(verl_runs):
    runs = read_runs([str(p) for p in verl_runs.values()])
    assert compare_runs(runs)["metrics"] == [ACC]
    smooth = compare_runs(runs, metrics=["critic/score/mean"], smooth=2)
    row = smooth["comparisons"][0]["steps"][1]  # step 2: the mean of steps 1 and 2
    d = [
        (REWARDS[s][1][0] + REWARDS[s][1][1] - REWARDS[s][0][0] - REWARDS[s][0][1]) / 2
        for s in REWARDS
    ]
    assert row["mean_diff"] == pytest.approx(sum(d) / 3, abs=1e-12)


def test_identical_runs_get_no_verdict_and_say_why(tmp_path, capsys):
    """Pairs with the same curves (the same run twice) give differences of 0 with intervals of
    width 0: not an estimator that equals the baseline but a comparison that says nothing."""
    for estimator in ("grpo", "ebpo"):
        for seed in (0, 1, 2):
            write_verl_run(tmp_path / f"{estimator}{seed}", estimator, seed,
                           REWARDS[seed][0], ACCURACY[seed][0])  # fmt: skip
    runs = [str(tmp_path / f"{e}{s}") for e in ("grpo", "ebpo") for s in (0, 1, 2)]
    out = tmp_path / "report"
    assert main(["compare", *runs, "--output-dir", str(out), "--metric", "all", "--no-plots"]) == 0
    content = json.loads((out / "compare.json").read_text())
    assert all("no verdict (every seed pair is identical" in line for line in content["verdict"])
    assert all(c["flags"] == {"identical_pairs": ["0", "1", "2"], "never_moved": False}
               for c in content["comparisons"])  # fmt: skip
    assert content["multiplicity"]["excluding_zero"] == 0
    assert content["multiplicity"]["holm_excluding_zero"] == 0
    printed = capsys.readouterr().out
    assert printed.count("verdict: ") == 3 and "the same run given twice?" in printed


def _accuracy_runs(tmp_path, grpo: dict, ebpo: dict) -> dict:
    """The comparison of ``ACC`` between a grpo and an ebpo run of seed 0 logging ``grpo`` /
    ``ebpo`` (step -> accuracy)."""
    for estimator, accuracy in (("grpo", grpo), ("ebpo", ebpo)):
        write_verl_run(tmp_path / estimator, estimator, 0, REWARDS[0][0], accuracy)
    runs = read_runs([str(tmp_path / "grpo"), str(tmp_path / "ebpo")])
    return compare_runs(runs, metrics=[ACC])["comparisons"][0]


def test_identical_pairs_need_two_common_steps(tmp_path):
    """One common step says nothing of a curve: equal values there are no "same run" (issue 53)."""
    one = _accuracy_runs(tmp_path / "one", {0: 0.1, 2: 0.3}, {0: 0.1, 4: 0.5})
    assert [row["step"] for row in one["steps"]] == [0]
    assert one["flags"] == {"identical_pairs": [], "never_moved": False}
    two = _accuracy_runs(tmp_path / "two", {0: 0.1, 2: 0.3}, {0: 0.1, 2: 0.3, 4: 0.5})
    assert two["flags"]["identical_pairs"] == ["0"]
    assert "identical at all 2 common steps: the same run given twice?" in verdict(two, "grpo")


def test_never_moved_is_true_of_every_step_of_every_run(tmp_path):
    """A value logged at a step the runs do not share counts: the flag says "at every step of
    every run", and is raised only where that is so."""
    moved = _accuracy_runs(tmp_path / "moved", {0: 0.5, 3: 0.5}, {0: 0.5, 3: 0.5, 4: 0.9})
    assert moved["flags"]["never_moved"] is False
    assert "never moved" not in verdict(moved, "grpo")
    still = _accuracy_runs(tmp_path / "still", {0: 0.5, 3: 0.5}, {0: 0.5, 3: 0.5, 4: 0.5})
    assert still["flags"]["never_moved"] is True
    assert f"no verdict ({ACC} never moved: 0.5 at every step of every run)" in verdict(
        still, "grpo"
    )


def test_a_difference_accepted_on_purpose_is_reported(verl_runs, tmp_path):
    other = tmp_path / "ebpo_lr"
    write_verl_run(other, "ebpo", 2, REWARDS[2][1], ACCURACY[2][1],
                   settings={"actor_rollout_ref.actor.optim.lr": 3e-6})  # fmt: skip
    paths = [str(p) for key, p in verl_runs.items() if key != ("ebpo", 2)] + [str(other)]
    runs = read_runs(paths)
    with pytest.raises(ValueError, match=r"actor_rollout_ref.actor.optim.lr \(1e-05 vs 3e-06\)"):
        compare_runs(runs)
    content = compare_runs(runs, ignore=["actor_rollout_ref.actor.*"])
    assert content["accepted_differences"] == ["actor_rollout_ref.actor.optim.lr"]


def test_a_label_names_what_the_files_do_not(verl_runs):
    import shutil

    shutil.rmtree(verl_runs[("ebpo", 0)] / "hydra")  # no Hydra config: estimator and seed unknown
    with pytest.raises(ValueError, match=r"do not say its estimator; label it"):
        read_run(str(verl_runs[("ebpo", 0)]))
    run = read_run(f"ebpo@0={verl_runs[('ebpo', 0)]}")
    assert (run.estimator, run.seed) == ("ebpo", "0")


def test_metric_all_leaves_out_what_a_run_logged_as_nan(verl_runs):
    log = verl_runs[("grpo", 1)] / "verl_metrics.jsonl"
    log.write_text(log.read_text().replace('"actor/entropy": 0.25', '"actor/entropy": NaN', 1))
    runs = read_runs([str(p) for p in verl_runs.values()])
    assert compare_runs(runs, metrics=["all"])["metrics"] == ["critic/score/mean", ACC]
    with pytest.raises(
        ValueError, match=r"logged 'actor/entropy' as NaN or nothing at step\(s\) 2"
    ):
        compare_runs(runs, metrics=["actor/entropy"])


@pytest.mark.parametrize("factor", [1e300, 1e200, 1e-300])
def test_huge_and_tiny_values_give_the_statistics_of_the_scaled_runs(tmp_path, factor):
    """Rewards scaled by 1e300 (their squares overflow) or 1e-300 (theirs underflow to 0): every
    statistic is the unscaled run's times the factor, the p-values the same."""
    contents = []
    for scale, folder in ((1.0, tmp_path / "plain"), (factor, tmp_path / "scaled")):
        for seed, (grpo, ebpo) in REWARDS.items():
            for estimator, rewards in (("grpo", grpo), ("ebpo", ebpo)):
                write_verl_run(folder / f"{estimator}{seed}", estimator, seed,
                               [r * scale for r in rewards], ACCURACY[seed][0])  # fmt: skip
        runs = read_runs([str(p) for p in sorted(folder.iterdir())])
        contents.append(compare_runs(runs, metrics=["critic/score/mean"]))
    plain, scaled = (c["comparisons"][0] for c in contents)
    for quantity in ("mean_diff", "ci_low", "ci_high", "estimator_mean", "baseline_mean"):
        for a, b in zip(plain["steps"], scaled["steps"], strict=True):
            assert b[quantity] == pytest.approx(a[quantity] * factor, rel=1e-9, abs=0)
        assert scaled["summaries"]["auc"][quantity] == pytest.approx(
            plain["summaries"]["auc"][quantity] * factor, rel=1e-9, abs=0
        )
    assert [r["p_value"] for r in scaled["steps"]] == pytest.approx(
        [r["p_value"] for r in plain["steps"]], rel=1e-9, abs=0
    )
    steps_scaled, steps_plain = (c["summaries"]["steps_to_baseline_final"] for c in (scaled, plain))
    assert {k: v for k, v in steps_scaled.items() if k not in ("step", "holm")} == pytest.approx(
        {k: v for k, v in steps_plain.items() if k not in ("step", "holm")}, rel=1e-9, abs=0
    )  # in steps: not scaled
