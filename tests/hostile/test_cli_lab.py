"""Hostile inputs for ``ebpo train`` and ``ebpo bench`` (issue #11, items 3 and 9): each row ends in
one line on stderr and exit code 2 before a model is loaded, with nothing created, lost or changed
(an earlier run in the output directory included)."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

from tests.hostile.harness import CliCase, check_cli_error, ids  # noqa: E402
from tests.hostile.test_cli_data import files  # noqa: E402

T = r"^ebpo train: error: "
B = r"^ebpo bench: error: "
OLD_RUN = files(
    {
        "run/run.json": '{"ebpo_run": 1, "status": "completed", "global_step": 5, "config": {}}',
        "run/results.json": "{}",
    }
)

CASES = [
    CliCase(
        "train-lr-inf",
        ["train", "--learning-rate", "inf"],
        T + r"learning_rate must be a finite positive number, got inf",
    ),
    CliCase(
        "train-lr-nan",
        ["train", "--learning-rate", "nan"],
        T + r"learning_rate must be a finite positive number",
    ),
    CliCase(
        "train-lr-negative",
        ["train", "--learning-rate=-1e-4"],
        T + r"learning_rate must be a finite positive number, got -0\.0001",
    ),
    CliCase(
        "train-seed-negative",
        ["train", "--seed", "-1"],
        T + r"seed must be an integer >= 0, got -1",
    ),
    CliCase(
        "train-steps-zero", ["train", "--steps", "0"], T + r"steps must be an integer >= 1, got 0"
    ),
    CliCase(
        "train-tiers-zero",
        ["train", "--tiers", "0"],
        T + r"tiers must be distinct digit counts in 1\.\.15, got \[0\]",
    ),
    CliCase(
        "train-tiers-huge", ["train", "--tiers", "1,99"], T + r"tiers must be distinct digit counts"
    ),
    CliCase(
        "train-tiers-text",
        ["train", "--tiers", "one"],
        T + r"argument --tiers: expected comma-separated digit counts",
    ),
    CliCase(
        "train-topics-unknown",
        ["train", "--topics", "add,div"],
        T + r"topics must be distinct values of \['add', 'sub', 'mul'\]",
    ),
    CliCase(
        "train-estimator-unknown",
        ["train", "--estimator", "ppo"],
        T + r"estimator must be a preset or estimator name",
    ),
    CliCase("train-order-unknown", ["train", "--order", "random"], T + r"order must be one of"),
    CliCase(
        "train-eval-samples-few",
        ["train", "--eval-samples", "2"],
        T + r"eval_samples must be an integer >= 8",
    ),
    CliCase("train-resume-without-dir", ["train", "--resume"], T + r"resume needs output_dir"),
    CliCase(
        "train-output-is-file",
        ["train", "--output-dir", "out"],
        T + r"output_dir 'out' is a file, expected a directory",
        setup=files({"out": "precious"}),
    ),
    CliCase(
        "train-output-below-file",
        ["train", "--output-dir", "out/run"],
        T + r"output_dir 'out/run' lies below 'out', which is not a directory",
        setup=files({"out": "precious"}),
    ),
    CliCase(
        "train-output-dev-null",
        ["train", "--output-dir", "/dev/null/run"],
        T + r"output_dir '/dev/null/run' lies below '/dev/null'",
    ),
    CliCase(
        "train-output-holds-other-files",
        ["train", "--output-dir", "mine"],
        T + r"output_dir 'mine' is not empty and holds no ebpo run",
        setup=files({"mine/notes.txt": "precious"}),
    ),
    CliCase(
        "train-output-holds-a-run",
        ["train", "--output-dir", "run"],
        T + r"output_dir 'run' already holds a run \(completed, step 5\)",
        setup=OLD_RUN,
    ),
    CliCase(
        "train-resume-other-run",
        ["train", "--output-dir", "run", "--resume"],
        T + r"output_dir 'run' holds a different run",
        setup=OLD_RUN,
    ),
    CliCase(
        "train-overwrite-missing-model",
        ["train", "--output-dir", "run", "--overwrite", "--model", "./no-such-model"],
        T + r"model path './no-such-model' does not exist",
        setup=OLD_RUN,
    ),
    CliCase(
        "train-dataset-missing",
        ["train", "--dataset", "nope.jsonl"],
        T + r"data file 'nope\.jsonl' does not exist",
    ),
    CliCase(
        "bench-report-only-nonexistent",
        ["bench", "--report-only", "--output-dir", "nonexistent"],
        B + r"--report-only: 'nonexistent' holds no bench cells",
    ),
    CliCase(
        "bench-output-is-file",
        ["bench", "--output-dir", "out"],
        B + r"--output-dir 'out' is a file, expected a directory",
        setup=files({"out": "x"}),
    ),
    CliCase(
        "bench-output-dev-null",
        ["bench", "--output-dir", "/dev/null/b"],
        B + r"--output-dir '/dev/null/b' lies below '/dev/null'",
    ),
    CliCase("bench-seeds-zero", ["bench", "--seeds", "0"], B + r"--seeds must be at least 1"),
    CliCase(
        "bench-lrs-zero",
        ["bench", "--lrs", "0,1e-4"],
        B + r"learning_rates must be a non-empty list of positive numbers",
    ),
    CliCase(
        "bench-lrs-text", ["bench", "--lrs", "fast"], B + r"--lrs must be a comma-separated list"
    ),
    CliCase(
        "bench-group-size-one",
        ["bench", "--group-sizes", "1,2"],
        B + r"group_sizes must be non-empty integers >= 2",
    ),
    CliCase(
        "bench-checkpoint-off-grid",
        ["bench", "--checkpoints", "30"],
        B + r"checkpoints must be multiples of eval_every \(25\)",
    ),
    CliCase(
        "bench-checkpoint-past-end",
        ["bench", "--steps", "50", "--checkpoints", "50"],
        B + r"checkpoints must be multiples of eval_every \(25\) below steps \(50\)",
    ),
    CliCase(
        "bench-shard-zero",
        ["bench", "--shard", "0/2"],
        B + r"--shard must be K/N with 1 <= K <= N, got '0/2'",
    ),
    CliCase(
        "bench-estimator-unknown",
        ["bench", "--estimators", "grpo,ppo"],
        B + r"methods must be a non-empty subset",
    ),
    CliCase(
        "bench-eval-samples-few",
        ["bench", "--eval-samples", "4"],
        B + r"eval_samples must be non-empty integers >= 8",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_cli_user_error(case, tmp_path, monkeypatch):
    check_cli_error(case, tmp_path, monkeypatch)
