"""Hostile inputs for ``ebpo compare``: each row ends in one line on stderr naming the problem
(the run, the metric, the option), exit code 2, and nothing created or changed in the scratch
directory — the output folder included."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.analysis.compare.verl_runs import write_trl_state, write_verl_run
from tests.hostile.harness import CliCase, check_cli_error, ids

R = r"^ebpo compare: error: "
OUT = ["--output-dir", "out"]
ACCURACY = {0: 0.1, 2: 0.2, 4: 0.3}


def verl(*runs: tuple[str, int], rewards=(0.1, 0.2, 0.3, 0.4), **settings):
    """Setup: verl runs ``{estimator}{seed}/`` with the same curves."""

    def setup(tmp: Path) -> None:
        for estimator, seed in runs:
            write_verl_run(tmp / f"{estimator}{seed}", estimator, seed, rewards, ACCURACY,
                           settings=settings if (estimator, seed) == runs[-1] else None)  # fmt: skip

    return setup


def then(*setups):
    def setup(tmp: Path) -> None:
        for step in setups:
            step(tmp)

    return setup


def trl(name: str, rewards=(0.1, 0.2, 0.3), first_step: int = 1):
    return lambda tmp: write_trl_state(tmp / name, rewards, first_step=first_step)


def cut_state(name: str):
    """The trainer_state.json of run ``name`` cut in half (a disk that filled up)."""

    def setup(tmp: Path) -> None:
        (state,) = (tmp / name).glob("checkpoint-*/trainer_state.json")
        state.write_text(state.read_text()[: len(state.read_text()) // 2])

    return setup


def replace_in_log(name: str, old: str, new: str):
    def setup(tmp: Path) -> None:
        log = tmp / name / "verl_metrics.jsonl"
        text = log.read_text()
        assert old in text
        log.write_text(text.replace(old, new, 1))

    return setup


PAIR = [("grpo", 0), ("ebpo", 0), ("grpo", 1), ("ebpo", 1)]
RUNS = ["grpo0", "ebpo0", "grpo1", "ebpo1"]
CASES = [
    CliCase("no runs", ["compare", *OUT], R + r"RUN: expected finished runs to compare, got none"),
    CliCase("missing run", ["compare", "nowhere", *OUT], R + r"run 'nowhere': no such file"),
    CliCase("one estimator only", ["compare", "grpo0", "grpo1", *OUT],
            R + r"RUN: .*every run is grpo: expected runs of another estimator",
            setup=verl(("grpo", 0), ("grpo", 1))),
    CliCase("baseline absent", ["compare", *RUNS, "--baseline", "rloo", *OUT],
            R + r"--baseline 'rloo': no run of it .*estimators: ebpo, grpo", setup=verl(*PAIR)),
    CliCase("no common steps", ["compare", "grpo@0=a", "ebpo@0=b", *OUT],
            R + r"RUN: .*no step at which every run logged 'reward' \(steps: ebpo seed 0 10\.\.12; "
            r"grpo seed 0 1\.\.3\)",
            setup=then(trl("a"), trl("b", first_step=10))),
    CliCase("baseline missing for a seed", ["compare", "grpo0", "ebpo0", "ebpo1", *OUT],
            R + r"RUN: .*ebpo has seed\(s\) 1 that the baseline grpo lacks",
            setup=verl(("grpo", 0), ("ebpo", 0), ("ebpo", 1))),
    CliCase("duplicated seeds", ["compare", *RUNS, "ebpo@1=ebpo0", *OUT],
            R + r"RUN: 'ebpo1/verl_metrics.jsonl' and 'ebpo0/verl_metrics.jsonl' are both ebpo "
            r"with seed 1", setup=verl(*PAIR)),
    CliCase("truncated trainer_state.json", ["compare", "grpo@0=a", "ebpo@0=b", *OUT],
            R + r"run 'b': 'b/checkpoint-3/trainer_state.json'.*(Expecting|Unterminated)",
            setup=then(trl("a"), trl("b"), cut_state("b"))),
    CliCase("NaN metric value", ["compare", *RUNS, *OUT],
            R + r"RUN: .*'ebpo1/verl_metrics.jsonl' logged 'val-core/math/acc/mean@1' as NaN or nothing "
            r"at step\(s\) 2",
            setup=then(verl(*PAIR), replace_in_log("ebpo1", '"val-core/math/acc/mean@1": 0.2',
                                                   '"val-core/math/acc/mean@1": NaN'))),
    CliCase("null metric value", ["compare", *RUNS, "--metric", "critic/score/mean", *OUT],
            R + r"RUN: .*'grpo0/verl_metrics.jsonl' logged 'critic/score/mean' as NaN or nothing at "
            r"step\(s\) 1",
            setup=then(verl(*PAIR), replace_in_log("grpo0", '"critic/score/mean": 0.1',
                                                   '"critic/score/mean": null'))),
    CliCase("metric not logged", ["compare", *RUNS, "--metric", "eval_reward", *OUT],
            R + r"--metric 'eval_reward': not logged by grpo0/verl_metrics.jsonl",
            setup=verl(*PAIR)),
    CliCase("output inside an input run", ["compare", *RUNS, "--output-dir", "ebpo1/report"],
            R + r"--output-dir '.*ebpo1/report' lies inside the input run", setup=verl(*PAIR)),
    CliCase("output holding the input runs", ["compare", "runs/grpo0", "runs/ebpo0",
                                               "--output-dir", "runs"],
            R + r"--output-dir 'runs' holds the input run",
            setup=lambda tmp: verl(("grpo", 0), ("ebpo", 0))(tmp / "runs")),
    CliCase("output folder of the user's files", ["compare", *RUNS, *OUT],
            R + r"--output-dir 'out' holds files that are not an ebpo compare report \(notes.txt\)",
            setup=then(verl(*PAIR), lambda tmp: (tmp / "out").mkdir(),
                       lambda tmp: (tmp / "out" / "notes.txt").write_text("mine"))),
    CliCase("seed unreadable", ["compare", "a", "ebpo@0=b", *OUT],
            R + r"run 'a': its files do not say its estimator; label it .* ESTIMATOR@SEED=a",
            setup=then(trl("a"), trl("b"))),
    CliCase("runs of two trainers", ["compare", "grpo0", "ebpo@0=b", *OUT],
            R + r"RUN: .*the runs are of different kinds \(trl, verl\)",
            setup=then(verl(("grpo", 0)), trl("b"))),
    CliCase("settings differ", ["compare", *RUNS, *OUT],
            R + r"RUN: .*differ in more than estimator and seed: actor_rollout_ref.actor.optim.lr "
            r"\(1e-05 vs 0.0001\); pass --ignore KEY",
            setup=verl(*PAIR, **{"actor_rollout_ref.actor.optim.lr": 1e-4})),
    CliCase("not a run", ["compare", "folder", "ebpo0", *OUT],
            R + r"run 'folder': not a finished TRL, verl or ebpo train run",
            setup=then(verl(("ebpo", 0)), lambda tmp: (tmp / "folder").mkdir())),
    CliCase("smooth 0", ["compare", *RUNS, "--smooth", "0", *OUT],
            R + r"--smooth must be a positive integer", setup=verl(*PAIR)),
    CliCase("metric all with others", ["compare", *RUNS, "--metric", "all", "--metric", "x", *OUT],
            R + r"--metric must name metrics, or be 'all' alone", setup=verl(*PAIR)),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_hostile_compare_input(case, tmp_path, monkeypatch):
    check_cli_error(case, tmp_path, monkeypatch)


def test_the_runs_are_good_without_the_damage(tmp_path, monkeypatch):
    """The runs the table damages compare fine as they are: each refusal is the damage's."""
    monkeypatch.chdir(tmp_path)
    verl(*PAIR)(tmp_path)
    then(trl("a"), trl("b"))(tmp_path)
    from ebpo.cli import main

    assert main(["compare", *RUNS, *OUT, "--no-plots"]) == 0
    assert main(["compare", "grpo@0=a", "ebpo@0=b", "--output-dir", "trl", "--no-plots"]) == 0
    assert (tmp_path / "out" / "compare.json").is_file()
    assert (tmp_path / "trl" / "compare.csv").is_file()
