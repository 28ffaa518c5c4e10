"""Hostile launcher values and first-contact recipes for ``ebpo grpo`` (issue #38 items 5, 6, 8, 13;
issue #39 items 1, 2). Each row of :data:`CASES` ends in one line on stderr and exit code 2 with
nothing created, lost or changed, the real run and the dry run alike; a count out of bounds is
refused before anything is built for it, shown by counting the work (launches, trainers, tiny
models), not by a clock. A recipe this machine cannot run as it is: the dry run ends with the line
the real run stops with."""

from __future__ import annotations

import os
import re
import sys

import pytest

pytest.importorskip("trl")

from ebpo.commands.grpo import dry_run as dry_run_module  # noqa: E402
from ebpo.commands.grpo import grpo_script, launcher  # noqa: E402
from ebpo.commands.grpo.launch_values import MAX_PROCESSES, capacity  # noqa: E402
from tests.hostile.harness import (  # noqa: E402
    assert_user_error,
    check_cli_error,
    ids,
    run_cli,
    snapshot,
)
from tests.hostile.test_cli_data import files  # noqa: E402
from tests.hostile.test_cli_grpo import RECIPE, G, R, recipe, rows  # noqa: E402

#: this machine's CPUs, as the launcher counts them (the tests run on machines without a GPU too)
CPUS = capacity(on_cpus=True)[0]
#: a recipe for a GPU node (TRL's docs' shape): bf16, nothing saying use_cpu
GPU_RECIPE = RECIPE.replace("use_cpu: true\nbf16: false\n", "bf16: true\n")
no_gpu = pytest.mark.skipif(launcher.accelerator_count() > 0, reason="a machine without GPU")


def fifo(tmp):
    os.mkfifo(tmp / "pipe.yaml")


CASES = [
    # ---- item 5: an accelerate config that cannot be read (was a 25-73-line traceback, exit 1)
    *rows(
        "accelerate-config-broken-yaml",
        R,
        G + r"accelerate_config 'acc\.yaml': not valid YAML \(",
        recipe("accelerate_config: acc.yaml\n", **{"acc.yaml": "distributed_type: [MULTI_GPU\n"}),
    ),
    *rows(
        "accelerate-config-a-list",
        R,
        G + r"accelerate_config 'acc\.yaml' should hold a mapping of accelerate config keys .* "
        r"got a list$",
        recipe("accelerate_config: acc.yaml\n", **{"acc.yaml": "- MULTI_GPU\n- 2\n"}),
    ),
    *rows(
        "accelerate-config-a-scalar",
        [*R, "--accelerate_config", "acc.yaml"],
        G + r"accelerate_config 'acc\.yaml' should hold a mapping .* got a int$",
        recipe(**{"acc.yaml": "5\n"}),
    ),
    *rows(
        "accelerate-config-unknown-distributed-type",
        R,
        G + r"config_file 'acc\.yaml': accelerate cannot load it: 'SIDEWAYS' is not a valid "
        r"DistributedType$",
        recipe("config_file: acc.yaml\n", **{"acc.yaml": "distributed_type: SIDEWAYS\n"}),
    ),
    *rows(
        "accelerate-config-dynamo-config-a-number",
        R,
        G + r"accelerate_config 'acc\.yaml': dynamo_config must be a mapping",
        recipe(
            "accelerate_config: acc.yaml\n",
            **{"acc.yaml": "distributed_type: MULTI_GPU\ndynamo_config: 5\n"},
        ),
    ),
    *rows(
        "accelerate-config-num-processes-a-word",
        R,
        G + r"num_processes must be an integer between 1 and 4096, got 'two'$",
        recipe(
            "accelerate_config: acc.yaml\n",
            **{"acc.yaml": "distributed_type: MULTI_GPU\nnum_processes: two\n"},
        ),
    ),
    # ---- item 6: num_processes bounded (0 and -1 trained one process, 1e9 built 1e9 records)
    *[
        row
        for value in ("0", "-1", "1e9", "1000000000", "2.5", "٣")
        for row in rows(
            f"num-processes-{value}-in-yaml",
            R,
            G + rf"num_processes must be an integer between 1 and 4096, got '{re.escape(value)}'$",
            recipe(f"num_processes: '{value}'\n" if value == "٣" else f"num_processes: {value}\n"),
        )
    ],
    *rows(
        "num-machines-zero-on-the-command-line",
        [*R, "--num_processes", "1", "--num_machines", "0"],
        G + r"num_machines must be an integer between 1 and 4096, got '0'$",
        recipe(),
    ),
    # ---- item 13: messages that say what the user can do
    *rows(
        "config-equals-form-is-read",
        ["grpo", "--config=r.yaml", "--temperature", "0"],
        G + r"temperature must be a finite number > 0, got 0\.0$",
        recipe(),
    ),
    *rows(
        "config-a-directory",
        ["grpo", "--config", "recipes"],
        G + r"--config 'recipes': is a directory, expected a YAML file",
        files({"recipes/r.yaml": RECIPE}),
    ),
    *rows(
        "config-a-fifo",
        ["grpo", "--config", "pipe.yaml"],
        G + r"--config 'pipe\.yaml': is a named pipe \(FIFO\), not read",
        fifo,
    ),
    *rows(
        "config-dev-null",
        ["grpo", "--config", "/dev/null"],
        G + r"--config '/dev/null': is a character device \(such as /dev/null\), expected a YAML",
        None,
    ),
    *rows(
        "config-missing",
        ["grpo", "--config", "nowhere.yaml"],
        G + r"--config 'nowhere\.yaml': no such file, expected a YAML file",
        None,
    ),
    *rows(
        "multi-gpu-quoted-true",
        R,
        G + r"multi_gpu in r\.yaml is a flag of accelerate launch: write it as a YAML boolean, "
        r"unquoted \(multi_gpu: true or multi_gpu: false\), got the string 'true' \(quoted",
        recipe("multi_gpu: 'true'\n"),
    ),
    # ---- item 8: `resume_from_checkpoint: true` is taken (was "must be a string or null")
    *rows(
        "resume-true-in-yaml-with-nothing-to-resume",
        [*R, "--output_dir", "out"],
        G + r"resume_from_checkpoint: output_dir 'out' holds no checkpoint-N to resume$",
        recipe("resume_from_checkpoint: true\n", **{"out/runs/x": "events"}),
    ),
    *rows(
        "resume-true-on-the-command-line",
        [*R, "--output_dir", "out", "--resume_from_checkpoint", "true"],
        G + r"resume_from_checkpoint: output_dir 'out' holds no checkpoint-N to resume$",
        recipe(**{"out/runs/x": "events"}),
    ),
]


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_cli_user_error(case, tmp_path, monkeypatch):
    check_cli_error(case, tmp_path, monkeypatch)


@pytest.fixture
def work(monkeypatch):
    """Counters of the work a run or a dry run does: launches, TRL script runs, tiny models."""
    counts = {"launch": 0, "trl_main": 0, "tiny_model": 0}

    def counting(name, original):
        def call(*args, **kwargs):
            counts[name] += 1
            return original(*args, **kwargs)

        return call

    monkeypatch.setattr(launcher, "launch_command", counting("launch", launcher.launch_command))
    monkeypatch.setattr(
        grpo_script.trl_grpo, "main", counting("trl_main", grpo_script.trl_grpo.main)
    )
    monkeypatch.setattr(
        dry_run_module, "save_tiny_llama", counting("tiny_model", dry_run_module.save_tiny_llama)
    )
    return counts


@pytest.mark.parametrize("value", ["0", "-1", "1e9", "1000000000", str(MAX_PROCESSES + 1)])
@pytest.mark.parametrize("dry", [False, True], ids=["run", "dry-run"])
def test_a_count_out_of_bounds_is_refused_before_any_work(value, dry, work, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    recipe(f"num_processes: {value}\n")(tmp_path)
    result = run_cli([*R, *(["--dry-run"] if dry else [])])
    assert_user_error(result, r"num_processes must be an integer between 1 and 4096", label=value)
    assert work == {"launch": 0, "trl_main": 0, "tiny_model": 0}


def test_more_processes_than_this_machine_holds(work, tmp_path, monkeypatch):
    """The real run stops with the numbers and what to set; the dry run builds the trainer and
    ends with that same line."""
    monkeypatch.chdir(tmp_path)
    recipe(f"num_processes: {CPUS + 1}\n")(tmp_path)
    before = snapshot(tmp_path)
    refused = run_cli(R)
    assert_user_error(
        refused,
        rf"num_processes {CPUS + 1} is more than this machine's {CPUS} CPUs x 1 machine\(s\) "
        rf"\(num_machines\) = {CPUS}\), set num_processes: {CPUS} in the recipe",
    )
    assert work == {"launch": 0, "trl_main": 0, "tiny_model": 0}
    dry = run_cli([*R, "--dry-run"])
    assert dry.code == 0, dry.err
    assert refused.err.strip() == f"ebpo grpo: error: {dry.out.splitlines()[-1]}"
    assert snapshot(tmp_path) == before


@no_gpu
@pytest.mark.parametrize(
    "extra, settings",
    [
        ("", "use_cpu: true, bf16: false"),
        ("tf32: true\nuse_vllm: true\n", "use_cpu: true, bf16: false, tf32: false, use_vllm: false"),
        ("attn_implementation: flash_attention_2\nload_in_4bit: true\n",
         "use_cpu: true, bf16: false, load_in_4bit: false, attn_implementation: sdpa"),
    ],
    ids=["bf16", "tf32-vllm", "flash-attention-4bit"],
)  # fmt: skip
def test_a_gpu_recipe_on_a_cpu_the_dry_run_and_the_run_agree(
    extra, settings, work, tmp_path, monkeypatch
):
    """Issue #39 item 1: the dry run passes and names what a CPU run needs (its last line); the
    real run stops with that line, exit 2, before anything loads."""
    monkeypatch.chdir(tmp_path)
    files({"r.yaml": GPU_RECIPE + extra})(tmp_path)
    dry = run_cli([*R, "--dry-run"])
    assert dry.code == 0, dry.err
    last = dry.out.splitlines()[-1]
    assert last.startswith("to run on this machine (no GPU here for ") and settings in last, last
    work.update(tiny_model=0, trl_main=0)  # the dry run built its trainer
    refused = run_cli(R)
    assert_user_error(refused, re.escape(last) + "$")
    assert work == {"launch": 0, "trl_main": 0, "tiny_model": 0}
    # what the line says to add is enough: the dry run then has no such line
    flags = [word for setting in settings.split(", ") for word in f"--{setting}".split(": ")]
    fixed = run_cli([*R, *flags, "--dry-run"])
    assert fixed.code == 0, fixed.err
    assert not fixed.out.splitlines()[-1].startswith("to run on this machine")


@pytest.mark.parametrize("processes", [1, 2])
def test_the_dry_runs_arithmetic_describes_its_launch(processes, tmp_path, monkeypatch):
    """Issue #39 item 2: per optimizer step and per generation batch, on the processes of the launch
    the dry run reports (TRL derives the generation batch from the number of processes)."""
    monkeypatch.chdir(tmp_path)
    launcher_key = f"num_processes: {processes}\n" if processes > 1 else ""
    recipe(launcher_key + "gradient_accumulation_steps: 2\n")(tmp_path)
    result = run_cli([*R, "--dry-run"])
    assert result.code == 0, result.err
    out = result.out
    step = 4 * 2 * processes  # per_device_train_batch_size 4 x accumulation 2 x processes
    launch = "one process, this one" if processes == 1 else f"({processes} processes)"
    assert launch in out
    assert f"generation batch {step} completions = {step // 2} prompts" in out
    plural = "es" if processes > 1 else ""
    assert (
        f"4 per device x 2 accumulation = 8 completions per process; on {processes} "
        f"process{plural} (the launch below) {step} = {step // 2} prompts, 1 optimizer steps"
    ) in out
    assert "on 8 processes" not in out or processes == 8


@no_gpu
def test_bf16_asked_for_on_a_cpu_is_not_named(tmp_path, monkeypatch):
    """``use_cpu: true`` with ``bf16: true``: transformers' CPU autocast, which it runs."""
    monkeypatch.chdir(tmp_path)
    files({"r.yaml": RECIPE.replace("bf16: false", "bf16: true")})(tmp_path)
    dry = run_cli([*R, "--dry-run"])
    assert dry.code == 0, dry.err
    assert "to run on this machine" not in dry.out
    assert dry.out.splitlines()[-1].startswith("  launch      on this machine: one process")
