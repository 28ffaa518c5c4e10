"""Hostile inputs for ``ebpo train`` and ``ebpo bench`` (issue #11, items 3 and 9; issue #21, items
1, 11 and 12): each row ends in one line on stderr and exit code 2 before a model is loaded, with
nothing created, lost or changed (an earlier run in the output directory included, and a user's
directory that merely holds a ``run.json``). Concurrent runs, kills and full disks are in
test_run_dirs.py (real processes)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

from ebpo.lab.runs.directory import write_manifest  # noqa: E402
from ebpo.lab.train.job import TrainJobConfig  # noqa: E402
from tests.hostile.harness import CliCase, check_cli_error, cli_table, ids, table_rows  # noqa: E402
from tests.hostile.test_cli_data import files  # noqa: E402

T = r"^ebpo train: error: "
B = r"^ebpo bench: error: "
OLD_RUN = files(
    {
        "run/run.json": '{"ebpo_run": 1, "status": "completed", "global_step": 5, "config": {}}',
        "run/results.json": "{}",
    }
)

#: options of a run of seconds: a row that wrongly got past its check must not train for minutes
TINY = [
    *("--steps", "2", "--group-size", "2", "--prompts-per-step", "2", "--topics", "add"),
    *("--tiers", "1", "--eval-problems", "1", "--eval-samples", "8", "--eval-every", "0"),
    *("--warm-start-steps", "1"),
]
#: the identity of ``ebpo train *TINY``: a run that ``--resume`` with TINY accepts
TINY_IDENTITY = TrainJobConfig(
    steps=2,
    group_size=2,
    prompts_per_step=2,
    topics=("add",),
    tiers=(1,),
    eval_problems=1,
    eval_samples=8,
    eval_every=0,
    warm_start_steps=1,
).identity()
EVAL = {
    "overall": 0.5,
    "all_fail_frac": 0.0,
    "all_pass_frac": 0.0,
    "topics": {},
    "tiers": {},
    "cells": {},
}


def our_run(status: str = "interrupted", step: int = 3, **contents: str | None):
    """Setup: ``run/`` holding a run of the TINY options that ebpo wrote, plus ``contents``
    (``{file name: text}``, ``None`` for a directory; a name's dots as written)."""

    def setup(tmp: Path) -> None:
        (tmp / "run").mkdir()
        write_manifest(tmp / "run", TINY_IDENTITY, status, step)
        files({f"run/{name}": text for name, text in contents.items()})(tmp)

    return setup


def user_dir(run_json: str | bytes):
    """Setup: the user's directory ``a/`` with a ``run.json`` that ebpo did not write and the
    user's own files, one of them with a name a run uses."""
    return files({"a/run.json": run_json, "a/precious.txt": "x", "a/results.json": '{"mine": 1}'})


#: issue #21 item 1: a run.json that ebpo did not write makes no run (never deleted). ``ebpo train
#: *TINY --output-dir a ARGUMENTS`` with the user's ``a/run.json`` holding the JSON given
NOT_OURS_TABLE = r"""
    train-not-ours-status-only |  | {"status":"failed"}
    | 'a/run\.json' is not a run manifest written by ebpo
    train-not-ours-status-only-overwrite | --overwrite | {"status":"failed"}
    | 'a/run\.json' is not a run manifest written by ebpo
    train-not-ours-empty-object-overwrite | --overwrite | {}
    | 'a/run\.json' is not a run manifest written by ebpo
    train-not-ours-list-overwrite | --overwrite | [] | 'a/run\.json' is not a run manifest written by ebpo
    train-not-ours-resume | --resume | {} | 'a/run\.json' is not a run manifest written by ebpo
    train-not-ours-corrupt-overwrite | --overwrite | {"status": "failed" "global_step": 0}
    | 'a/run\.json' is not a readable run manifest \(Expecting ',' delimiter
    train-not-ours-newer-version | --overwrite
    | {"format": "ebpo-run", "version": 9, "status": "failed", "global_step": 0}
    | 'a/run\.json' is an ebpo run manifest of version 9; this ebpo reads versions \[1, 2\]
    train-not-ours-legacy-true | --overwrite
    | {"ebpo_run": true, "status": "failed", "global_step": 0, "config": {}}
    | 'a/run\.json' is not a run manifest written by ebpo
"""

#: ``ebpo train ARGUMENTS``, ``ebpo train *TINY ARGUMENTS`` and ``ebpo bench ARGUMENTS``: one
#: stderr line matching T (B) + the message
TRAIN_TABLE = r"""
    train-lr-inf | --learning-rate inf | learning_rate must be a finite positive number, got inf
    train-lr-nan | --learning-rate nan | learning_rate must be a finite positive number
    train-lr-negative | --learning-rate=-1e-4 | learning_rate must be a finite positive number, got -0\.0001
    train-seed-negative | --seed -1 | seed must be an integer >= 0, got -1
    train-tiers-zero | --tiers 0 | tiers must be distinct digit counts in 1\.\.15, got \[0\]
    train-tiers-huge | --tiers 1,99 | tiers must be distinct digit counts
    train-tiers-text | --tiers one | argument --tiers: expected comma-separated integers, got 'one'
    train-topics-unknown | --topics add,div | topics must be distinct values of \['add', 'sub', 'mul'\]
    train-estimator-unknown | --estimator ppo | estimator must be a preset or estimator name
    train-order-unknown | --order random | order must be one of
    train-eval-samples-few | --eval-samples 2 | eval_samples must be an integer >= 8
    train-resume-without-dir | --resume | resume needs output_dir
    train-output-dev-null | --output-dir /dev/null/run | output_dir '/dev/null/run' lies below '/dev/null'
    train-dataset-missing | --dataset nope.jsonl | data file 'nope\.jsonl' does not exist
"""
TINY_TABLE = r"""
    train-seed-2-pow-70 | --seed 1180591620717411303424
    | seed must be an integer in \[0, 2147483647\], got 1180591620717411303424
    train-output-empty | --output-dir ''
    | output_dir must be a non-empty path, or None for a new directory under runs/, got ''
    train-prompts-per-step-huge | --prompts-per-step 1000000
    | prompts_per_step × group_size must be at most 65,536 completions a step, got 1000000 × 2 = 2,000,000
    train-group-size-huge | --group-size 100000 --prompts-per-step 1
    | prompts_per_step × group_size must be at most 65,536
    train-steps-huge | --steps 1000000
    | steps × prompts_per_step must be at most 1,000,000 prompts on a built-in dataset, got 1000000 × 2
    train-lr-huge | --learning-rate 1e308 | learning_rate must be a finite positive number <= 1\.0, got 1e\+308
    train-lr-above-max | --learning-rate 1.5 | learning_rate must be a finite positive number <= 1\.0, got 1\.5
    train-seed-2-pow-31 | --seed 2147483648 | seed must be an integer in \[0, 2147483647\], got 2147483648
    train-output-blank | --output-dir '  ' | output_dir must be a non-empty path, or None .*, got ' '
"""
#: ``ebpo train ARGUMENTS`` over a run ebpo wrote (OLD_RUN)
OLD_RUN_TABLE = r"""
    train-output-holds-a-run | --output-dir run | output_dir 'run' already holds a run \(completed, step 5\)
    train-resume-other-run | --output-dir run --resume | output_dir 'run' holds a different run
    train-overwrite-missing-model | --output-dir run --overwrite --model ./no-such-model
    | model path './no-such-model' does not exist
"""
BENCH_TABLE = r"""
    bench-report-only-nonexistent | --report-only --output-dir nonexistent
    | --report-only: 'nonexistent' holds no bench cells
    bench-checkpoint-past-end | --steps 50 --checkpoints 50
    | checkpoints must be multiples of eval_every \(25\) below steps \(50\)
    bench-output-dev-null | --output-dir /dev/null/b | --output-dir '/dev/null/b' lies below '/dev/null'
    bench-seeds-zero | --seeds 0 | --seeds must be at least 1
    bench-lrs-zero | --lrs 0,1e-4 | learning_rates must be a non-empty list of positive numbers
    bench-lrs-text | --lrs fast | --lrs must be a comma-separated list
    bench-group-size-one | --group-sizes 1,2 | group_sizes must be non-empty integers >= 2
    bench-checkpoint-off-grid | --checkpoints 30 | checkpoints must be multiples of eval_every \(25\)
    bench-shard-zero | --shard 0/2 | --shard must be K/N with 1 <= K <= N, got '0/2'
    bench-estimator-unknown | --estimators grpo,ppo | methods must be a non-empty subset
    bench-eval-samples-few | --eval-samples 4 | eval_samples must be non-empty integers >= 8
"""

CASES = [
    CliCase(
        "train-steps-zero", ["train", "--steps", "0"], T + r"steps must be an integer >= 1, got 0"
    ),
    *cli_table(
        ["train"],
        T,
        r"""
        train-output-is-file | --output-dir out | output_dir 'out' is a file, expected a directory
        train-output-below-file | --output-dir out/run
        | output_dir 'out/run' lies below 'out', which is not a directory
        """,
        files({"out": "precious"}),
    ),
    CliCase(
        "train-output-holds-other-files",
        ["train", "--output-dir", "mine"],
        T + r"output_dir 'mine' is not empty and holds no ebpo run",
        setup=files({"mine/notes.txt": "precious"}),
    ),
    CliCase(
        "train-manifest-files-escape",
        ["train", *TINY, "--output-dir", "a", "--overwrite"],
        T
        + r"'a/run\.json' is not a valid ebpo run manifest \(files must list run\.json and only names of",
        setup=user_dir(
            json.dumps(
                {
                    "format": "ebpo-run",
                    "version": 2,
                    "status": "failed",
                    "global_step": 0,
                    "config": {},
                    "files": ["run.json", "../.."],
                }
            )
        ),
    ),
    CliCase(
        "train-overwrite-user-entry-with-a-run-name",
        ["train", *TINY, "--output-dir", "a", "--overwrite"],
        T + r"output_dir 'a' holds 'plots', which its run did not create; move it away",
        setup=files(
            {
                "a/run.json": json.dumps(
                    {
                        "format": "ebpo-run",
                        "version": 2,
                        "status": "completed",
                        "global_step": 5,
                        "config": {},
                        "files": ["run.json"],
                    }
                ),
                "a/plots/mine.png": "mine",
            }
        ),
    ),
    CliCase(
        "train-lock-file-is-a-symlink",
        ["train", *TINY, "--output-dir", "a"],
        T + r"output_dir 'a': cannot create its lock file \(Too many levels of symbolic links\)",
        setup=lambda tmp: (
            files({"precious.txt": "x", "a": None})(tmp),
            (tmp / "a/.ebpo-run.lock").symlink_to(tmp / "precious.txt"),
        ),
    ),
    # ---- issue #21 item 11: the run directory's own files, checked before the model loads
    CliCase(
        "train-output-dangling-symlink",
        ["train", *TINY, "--output-dir", "link", "--overwrite"],
        T + r"output_dir 'link' is a symbolic link to '.*nowhere', which does not exist",
        setup=lambda tmp: (tmp / "link").symlink_to(tmp / "nowhere"),
    ),
    CliCase(
        "train-completed-results-missing",
        ["train", *TINY, "--output-dir", "run", "--resume"],
        T
        + r"output_dir 'run' holds a completed run whose results\.json is missing; pass --overwrite",
        setup=our_run("completed", 200),
    ),
    CliCase(
        "train-completed-results-list",
        ["train", *TINY, "--output-dir", "run", "--resume"],
        T + r"'run/results\.json' should hold a JSON object, got a list",
        setup=our_run("completed", 200, **{"results.json": "[]"}),
    ),
    CliCase(
        "train-completed-results-corrupt",
        ["train", *TINY, "--output-dir", "run", "--resume"],
        T + r"'run/results\.json' is not readable JSON \(Expecting ',' delimiter: line 1 column 16",
        setup=our_run("completed", 200, **{"results.json": '{"status": "a" "b"}'}),
    ),
    CliCase(
        "train-eval-before-list",
        ["train", *TINY, "--output-dir", "run", "--resume"],
        T
        + r"'run/eval_before\.json' should hold a JSON object, got a list; remove it, and --resume evaluates again",
        setup=our_run(**{"eval_before.json": "[]"}),
    ),
    CliCase(
        "train-eval-before-corrupt",
        ["train", *TINY, "--output-dir", "run", "--resume"],
        T
        + r"'run/eval_before\.json' is not readable JSON \(Expecting ':' delimiter: line 1 column 26",
        setup=our_run(**{"eval_before.json": '{"overall": 0.5, "cells" {}}'}),
    ),
    CliCase(
        "train-eval-before-nan",
        ["train", *TINY, "--output-dir", "run", "--resume"],
        T + r"'run/eval_before\.json': 'overall' should be a finite number, got nan",
        setup=our_run(**{"eval_before.json": json.dumps({**EVAL, "overall": float("nan")})}),
    ),
    CliCase(
        "train-eval-before-no-topics",
        ["train", *TINY, "--output-dir", "run", "--resume"],
        T + r"'run/eval_before\.json': 'topics' should be a JSON object, got None",
        setup=our_run(
            **{"eval_before.json": json.dumps({k: v for k, v in EVAL.items() if k != "topics"})}
        ),
    ),
    CliCase(
        "train-eval-before-is-a-directory",
        ["train", *TINY, "--output-dir", "run", "--resume"],
        T + r"'run/eval_before\.json' should be the run's file but is not; move it away to resume",
        setup=our_run(**{"eval_before.json": None}),
    ),
    CliCase(
        "train-checkpoints-is-a-file",
        ["train", *TINY, "--output-dir", "run", "--resume"],
        T + r"'run/checkpoints' should be the run's directory but is not; move it away to resume",
        setup=our_run(checkpoints="not a directory"),
    ),
    CliCase(
        "train-metrics-corrupt",
        ["train", *TINY, "--output-dir", "run", "--resume"],
        T + r"'run/metrics\.jsonl' line 2 is not JSON \(Expecting",
        setup=our_run(**{"metrics.jsonl": '{"step": 1}\n{"step": 2,, }\n{"step": 3}\n'}),
    ),
    CliCase(
        "train-manifest-corrupt",
        ["train", *TINY, "--output-dir", "run", "--resume"],
        T + r"'run/run\.json' is not a readable run manifest \(Expecting ',' delimiter",
        setup=files({"run/run.json": '{"format": "ebpo-run" "version": 2}'}),
    ),
    *cli_table(
        ["train", *TINY],
        T,
        r"""
        train-cache-dir-is-a-file | --cache-dir cache | cache_dir 'cache' is a file, expected a directory
        train-cache-dir-below-a-file | --cache-dir cache/sub
        | cache_dir 'cache/sub' lies below 'cache', which is not a directory
        """,
        files({"cache": "precious"}),
    ),
    CliCase(
        "train-ebpo-cache-env-is-a-file",
        ["train", *TINY],
        T + r"\$EBPO_CACHE 'cache' is a file, expected a directory",
        setup=files({"cache": "precious"}),
        env={"EBPO_CACHE": "cache"},
    ),
    # ---- issue #21 item 12: checked before any work starts
    CliCase(
        "bench-output-is-file",
        ["bench", "--output-dir", "out"],
        B + r"--output-dir 'out' is a file, expected a directory",
        setup=files({"out": "x"}),
    ),
]
CASES += cli_table(["train"], T, TRAIN_TABLE) + cli_table(["train", *TINY], T, TINY_TABLE)
CASES += cli_table(["bench"], B, BENCH_TABLE) + cli_table(["train"], T, OLD_RUN_TABLE, OLD_RUN)
CASES += [
    CliCase(
        id,
        ["train", *TINY, "--output-dir", "a", *extra.split()],
        T + match,
        setup=user_dir(run_json),
    )
    for id, extra, run_json, match in table_rows(NOT_OURS_TABLE, 4)
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_cli_user_error(case, tmp_path, monkeypatch):
    check_cli_error(case, tmp_path, monkeypatch)


#: rows refused by checks that need no trainer framework (issue 46 item 10: ``ebpo train`` with a
#: bad --eval-samples spent ~8 s of CPU importing TRL and transformers before its one line)
FRAMEWORK_FREE = (
    "train-eval-samples-few",
    "train-steps-zero",
    "train-order-unknown",
    "train-tiers-text",
)
#: ``ebpo ARGS`` in a fresh interpreter, then its exit code and the framework modules it imported
IMPORTS_OF = (
    "import json, sys\n"
    "from ebpo.cli import main\n"
    "try:\n"
    "    code = main(sys.argv[1:])\n"
    "except SystemExit as stop:\n"
    "    code = stop.code\n"
    "frameworks = ('trl', 'transformers', 'accelerate', 'peft', 'datasets')\n"
    "print(json.dumps([code, sorted(m for m in sys.modules if m.split('.')[0] in frameworks)]))\n"
)


@pytest.mark.parametrize(
    "case",
    [case for case in CASES if case.id in FRAMEWORK_FREE],
    ids=[case_id for case_id in ids(CASES) if case_id in FRAMEWORK_FREE],
)
def test_cheap_arguments_are_refused_before_the_frameworks_load(case, tmp_path):
    env = {**os.environ, "EBPO_CACHE": str(tmp_path / ".ebpo-cache")}
    env.pop("EBPO_DEBUG", None)
    done = subprocess.run(
        [sys.executable, "-c", IMPORTS_OF, *case.argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    code, imported = json.loads(done.stdout.splitlines()[-1])
    assert code == 2, done.stderr
    assert re.search(case.match, done.stderr.strip()), done.stderr
    assert imported == [], f"{case.id}: imported {imported[:5]} before refusing"
    assert not any(tmp_path.iterdir())
