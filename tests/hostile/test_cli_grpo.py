"""Hostile inputs for ``ebpo grpo`` and its ``--dry-run`` (issue #29 items 2-7): each row of
:data:`CASES` ends in one line on stderr and exit code 2, with nothing created, lost or changed
(a user's folder given as ``output_dir`` included) — the real run and the dry run alike, before a
model loads. :data:`ACCEPTED` holds the inputs a dry run must take as the real run does (exit 0).
The real-process checks of a user's folder are in test_data_loss.py."""

from __future__ import annotations

import json
import re
import sys

import pytest

pytest.importorskip("trl")

from tests.hostile.harness import CliCase, check_cli_error, ids, run_cli, snapshot  # noqa: E402
from tests.hostile.test_cli_data import files  # noqa: E402

G = r"^ebpo grpo: error: "
#: a recipe that parses (nothing of it is loaded before the checks these rows try)
RECIPE = """\
model_name_or_path: someone/model
dataset_name: someone/data
reward_funcs: [math_reward]
num_generations: 2
per_device_train_batch_size: 4
max_completion_length: 8
max_steps: 2
use_cpu: true
bf16: false
report_to: none
advantage_estimator: ebpo
"""
DEEP_JSON = '{"a": ' * 5000 + "1" + "}" * 5000
BOMB = "".join(
    [f"  l0: &l0 [{', '.join(['x'] * 10)}]\n"]
    + [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 7)]
)


def recipe(extra: str = "", **more: str | bytes | None):
    """Setup: ``r.yaml`` (the recipe with ``extra`` lines appended) and the files ``more``."""
    return files({"r.yaml": RECIPE + extra, **more})


def both(argv: list[str]) -> list[list[str]]:
    return [argv, [*argv, "--dry-run"]]


def rows(id: str, argv: list[str], match: str, setup) -> list[CliCase]:
    """The same refusal by the real run and by its dry run."""
    return [
        CliCase(f"{id}{'-dry-run' if dry else ''}", args, match, setup=setup)
        for dry, args in zip((False, True), both(argv), strict=True)
    ]


R = ["grpo", "--config", "r.yaml"]
MINE = {"mine/config.json": '{"mine": 1}', "mine/README.md": "my notes"}

CASES = [
    # ---- item 2: the user's files, before anything loads (the real run wrote over them)
    *rows(
        "output-dir-users-folder",
        [*R, "--output_dir", "mine"],
        G + r"output_dir 'mine' is not empty and holds no training run \(no checkpoint-N",
        recipe(**MINE),
    ),
    *rows(
        "output-dir-is-a-file",
        [*R, "--output_dir", "precious.txt"],
        G + r"output_dir 'precious\.txt' is a file, expected a directory",
        recipe(**{"precious.txt": "mine"}),
    ),
    *rows(
        "output-dir-below-a-file",
        [*R, "--output_dir", "precious.txt/run"],
        G + r"output_dir 'precious\.txt/run' lies below 'precious\.txt', which is not a directory",
        recipe(**{"precious.txt": "mine"}),
    ),
    *rows(
        "resume-without-a-checkpoint",
        [*R, "--output_dir", "out", "--resume_from_checkpoint", "out/checkpoint-3"],
        G + r"resume_from_checkpoint 'out/checkpoint-3' is not a complete checkpoint: no such",
        recipe(**{"out/training_args.bin": "x"}),
    ),
    # ---- item 4: what the real run refuses (or trains wrongly with) once training runs
    *rows(
        "loss-type-unknown",
        [*R, "--loss_type", "sideways"],
        G + r"loss_type must be one of \['grpo', .*\], got 'sideways'$",
        recipe(),
    ),
    *rows(
        "temperature-zero",
        [*R, "--temperature", "0"],
        G + r"temperature must be a finite number > 0, got 0\.0$",
        recipe(),
    ),
    *rows(
        "learning-rate-inf-in-yaml",
        R,
        G + r"learning_rate must be a finite number >= 0, got inf$",
        recipe("learning_rate: .inf\n"),
    ),
    *rows(
        "beta-negative",
        [*R, "--beta", "-1.0"],
        G + r"beta must be a finite number >= 0, got -1\.0$",
        recipe(),
    ),
    *rows(
        "max-steps-fraction-in-yaml",
        R,
        G + r"--config 'r\.yaml': max_steps must be an integer, got 2\.7$",
        files({"r.yaml": RECIPE.replace("max_steps: 2", "max_steps: 2.7")}),
    ),
    # ---- item 5: a traceback where one line is due
    *rows(
        "yaml-nested-5000-deep",
        R,
        G + r"--config 'r\.yaml': nested too deeply \(more than 100 levels",
        recipe("model_init_kwargs: " + "[" * 5000 + "]" * 5000 + "\n"),
    ),
    *rows(
        "estimator-options-nested-5000-deep",
        [*R, "--estimator_options", DEEP_JSON],
        G + r"estimator_options must be a dict or a JSON object string; nested too deeply",
        recipe(),
    ),
    *rows(
        "yaml-num-generations-list",
        R,
        G + r"--config 'r\.yaml': num_generations must be an integer or null, got \[2\]$",
        files({"r.yaml": RECIPE.replace("num_generations: 2", "num_generations: [2]")}),
    ),
    *rows(
        "yaml-reward-funcs-number",
        R,
        G + r"--config 'r\.yaml': reward_funcs must be a list of strings or null, got \[5\]$",
        files({"r.yaml": RECIPE.replace("[math_reward]", "[5]")}),
    ),
    *rows(
        "yaml-key-not-a-string",
        R,
        G + r"--config 'r\.yaml': key 5 must be a string \(an option name\)$",
        recipe("5: x\n"),
    ),
    *rows(
        "yaml-datasets-a-string",
        R,
        G + r"--config 'r\.yaml': datasets must be a list of mappings of DatasetConfig fields",
        recipe("datasets: hello\n"),
    ),
    *rows(
        "yaml-datasets-entry-unknown-key",
        R,
        G + r"--config 'r\.yaml': datasets\[0\]: unknown key 'pth'; expected one of \['path'",
        recipe("datasets:\n  - pth: json\n"),
    ),
    *rows(
        "yaml-datasets-entry-without-path",
        R,
        G + r"--config 'r\.yaml': datasets\[0\] lacks path$",
        recipe("datasets:\n  - data_files: a.jsonl\n"),
    ),
    *rows(
        "yaml-env-a-list",
        R,
        G + r"--config 'r\.yaml': env must be a mapping with string keys, got \[1\]$",
        recipe("env: [1]\n"),
    ),
    # ---- item 6: unbounded work
    *rows(
        "yaml-alias-bomb",
        R,
        G
        + r"--config 'r\.yaml': it holds more than 1,000,000 values once its aliases are expanded",
        recipe("model_init_kwargs:\n" + BOMB),
    ),
    # ---- item 7: silent surprises
    *rows(
        "yaml-repeated-key",
        R,
        G + r"--config 'r\.yaml': not valid YAML \(key 'max_steps' appears twice at line 12",
        recipe("max_steps: 9\n"),
    ),
    *rows(
        "config-twice",
        [*R, "--config", "r.yaml"],
        G + r"--config takes one YAML file, given once$",
        recipe(),
    ),
    # the dry run calls the reward functions on its sample rows, as TRL's trainer does
    CliCase(
        "reward-returns-one-number-dry-run",
        [*R, "--reward_funcs", "rewards_one.reward", "--dry-run"],
        G + r"reward function 'reward' returned 0\.5; expected a list of 4 numbers or None, one "
        r"per completion$",
        setup=recipe(**{"rewards_one.py": "def reward(completions, **kw):\n    return 0.5\n"}),
    ),
    # ---- issue 53, item 8: what a message says
    CliCase(
        "recipe-without-a-name",
        ["grpo", "recipe"],
        G + r"NAME: expected a recipe's name such as qwen3-1\.7b/dapo \(ebpo grpo recipe "
        r"--list names all 14\), or --list or --readme$",
    ),
    *(
        CliCase(
            f"config-empty{label}",
            ["grpo", *argv, "--dry-run"],
            G + r"--config '': the value is empty; expected a YAML file or a shipped recipe's "
            r"name \(ebpo grpo recipe --list\)$",
        )
        for label, argv in (("", ["--config", ""]), ("-equals", ["--config="]))
    ),
    *(
        CliCase(
            f"config-last{'-dry-run' if dry else ''}",
            ["grpo", *dry, "--config"],
            G + r"--config is the last word on the line: expected a YAML file or a shipped "
            r"recipe's name \(ebpo grpo recipe --list\) after it$",
        )
        for dry in ([], ["--dry-run"])
    ),
    *rows(
        "yaml-old-option-name",
        R,
        G + r"unknown key\(s\) \['prior_mean'\] in r\.yaml \('prior_mean' is an estimator's "
        r"option, renamed 'prior_mean_from' since ebpo 0\.1\.0: it goes in estimator_options, "
        r"e\.g\. estimator_options: \{prior_mean_from: \.\.\.\}\)",
        recipe("prior_mean: group_means\n"),
    ),
    *rows(
        "estimator-options-old-name",
        R,
        G + r"unknown option\(s\) \['prior_mean'\] for estimator 'ebpo' \('prior_mean' was "
        r"renamed 'prior_mean_from': write prior_mean_from=\.\.\.\)",
        recipe("estimator_options: {prior_mean: group_means}\n"),
    ),
    CliCase(
        "reward-returns-none-dry-run",
        [*R, "--reward_funcs", "rewards_none.reward", "--dry-run"],
        G + r"reward function 'reward' returned None; expected a list of 4 numbers",
        setup=recipe(**{"rewards_none.py": "def reward(completions, **kw):\n    return None\n"}),
    ),
    CliCase(
        "reward-raises-names-the-users-line-dry-run",
        [*R, "--reward_funcs", "rewards_raise.reward", "--dry-run"],
        G + r"reward function 'reward' raised KeyError: 'answer' at .*/rewards_raise\.py:3 "
        r"\(in reward\)$",
        setup=recipe(
            **{
                "rewards_raise.py": "def reward(completions, **kw):\n"
                "    row = {}\n"
                "    return [float(row['answer'])] * len(completions)\n"
            }
        ),
    ),
]


@pytest.fixture(autouse=True)
def _no_bytecode(monkeypatch):
    """The rows' reward modules are imported from the scratch directory: no __pycache__ there."""
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_cli_user_error(case, tmp_path, monkeypatch):
    check_cli_error(case, tmp_path, monkeypatch)


ROWS = "".join(json.dumps({"prompt": f"{a}+{a}=", "answer": str(2 * a)}) + "\n" for a in range(8))
#: (id, argv, setup, a line the dry run's summary must hold): inputs the real run takes, which
#: the dry run once refused (item 3) or read otherwise (item 7)
ACCEPTED = [
    (
        "datasets-list-with-a-local-file",
        R,
        recipe("datasets:\n  - path: json\n    data_files: data.jsonl\n", **{"data.jsonl": ROWS}),
        r"here: datasets: data\.jsonl: train 8 rows",
    ),
    (
        "a-folder-with-a-train-split-only-evaluation-off",
        [*R, "--dataset_name", "folder"],
        recipe(**{"folder/train.jsonl": ROWS}),
        r"here: folder: train 8 rows",
    ),
    (
        "reward-funcs-one-name-as-a-string",
        R,
        files({"r.yaml": RECIPE.replace("[math_reward]", "math_reward")}),
        r"rewards +math_reward \(weights \[1\.0\]\)",
    ),
]


@pytest.mark.parametrize(
    "argv, setup, line", [a[1:] for a in ACCEPTED], ids=[a[0] for a in ACCEPTED]
)
def test_the_dry_run_takes_what_the_real_run_takes(argv, setup, line, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    setup(tmp_path)
    before = snapshot(tmp_path)
    result = run_cli([*argv, "--dry-run"])
    assert result.code == 0, result.err
    assert re.search(line, result.out, re.MULTILINE), result.out
    assert snapshot(tmp_path) == before
