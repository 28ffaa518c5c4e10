"""``ebpo grpo``'s launcher keys (``ebpo.commands.grpo.launcher``): split from the script's
arguments as ``trl grpo`` splits them, checked by accelerate's own parser, and the launch they make
(accelerate's ``launch_command`` recorded, nothing started: fast). The real launches, side by side
with ``trl grpo``, are in tests/commands/grpo/test_grpo_as_trl.py."""

from __future__ import annotations

import os
import subprocess
from importlib import resources
from pathlib import Path

import pytest

pytest.importorskip("trl")

from ebpo.cli import main as cli_main  # noqa: E402
from ebpo.commands.grpo import launcher  # noqa: E402
from ebpo.commands.grpo.grpo_script import main as grpo_main  # noqa: E402
from ebpo.commands.grpo.grpo_script import parse_run  # noqa: E402
from ebpo.commands.grpo.launcher import (  # noqa: E402
    LAUNCHED_ENV,
    Launch,
    launcher_arguments,
    plan,
    script_arguments,
    trl_profiles,
)

pytestmark = pytest.mark.trl

BASE = """\
model_name_or_path: /nonexistent/model
dataset_name: unused
reward_funcs: [math_reward]
use_cpu: true
bf16: false
output_dir: {out}
"""


def profile(name: str) -> str:
    return str(resources.files("trl.accelerate_configs").joinpath(f"{name}.yaml"))


@pytest.fixture
def yaml_file(tmp_path):
    def write(extra: str = "") -> str:
        path = tmp_path / "recipe.yaml"
        path.write_text(BASE.format(out=tmp_path / "out") + extra)
        return str(path)

    return write


def test_trls_profiles_are_found_by_name():
    assert {"multi_gpu", "zero2", "zero3", "fsdp2"} <= set(trl_profiles())


@pytest.mark.parametrize(
    ("config_rest", "expected"),
    [
        (["--num_processes", "4"], ["--num_processes", "4"]),
        (["--multi_gpu", "True", "--num_processes", "2"], ["--multi_gpu", "--num_processes", "2"]),
        (["--multi_gpu", "False"], []),  # a YAML false leaves the flag out
        (["--accelerate_config", "zero2"], ["--config_file", profile("zero2")]),
        (
            ["--accelerate_config", "fsdp2", "--num_processes", "2"],
            ["--config_file", profile("fsdp2"), "--num_processes", "2"],
        ),
    ],
)
def test_yaml_launcher_keys_become_accelerate_arguments(config_rest, expected):
    assert launcher_arguments(config_rest, [], "recipe.yaml") == expected


def test_an_accelerate_config_file_is_taken_as_it_is(tmp_path):
    mine = tmp_path / "cpu.yaml"
    mine.write_text("distributed_type: MULTI_GPU\nnum_processes: 2\n")
    assert launcher_arguments(["--accelerate_config", str(mine)], [], "r.yaml") == [
        "--config_file",
        str(mine),
    ]


@pytest.mark.parametrize(
    ("cli_rest", "expected"),
    [
        (["--multi_gpu", "--num_processes", "2"], ["--multi_gpu", "--num_processes", "2"]),
        (["--num_processes=2"], ["--num_processes=2"]),
        (["--accelerate_config=zero3"], ["--config_file", profile("zero3")]),
        (["--main_process_port", "29511"], ["--main_process_port", "29511"]),
    ],
)
def test_command_line_launcher_flags_become_accelerate_arguments(cli_rest, expected):
    assert launcher_arguments([], cli_rest, "recipe.yaml") == expected


@pytest.mark.parametrize(
    ("config_rest", "cli_rest", "message"),
    [
        (["--lerning_rate", "0.1", "--num_proceses", "2"], [], "key(s) ['lerning_rate', 'num_proceses'] in recipe"),
        ([], ["--lerning_rate", "0.1", "--seeed"], "unknown flag(s) ['--lerning_rate', '--seeed']"),
        ([], ["stray"], "unexpected argument 'stray'"),
        (["--multi_gpu", "yes"], [], "unquoted (multi_gpu: true or multi_gpu: false), got the string 'yes'"),
        (["--module", "True"], [], "ebpo grpo launches `-m ebpo grpo` itself"),
        ([], ["--no_python"], "ebpo grpo launches `-m ebpo grpo` itself"),
        (["--num_processes", "two"], [], "num_processes must be an integer between 1 and 4096, got 'two'"),
        (["--accelerate_config", "zero9"], [], "TRL's profiles: ['fsdp1', 'fsdp2', 'multi_gpu'"),
    ],
)  # fmt: skip
def test_what_is_neither_an_argument_nor_a_launcher_option_is_refused(
    config_rest, cli_rest, message
):
    with pytest.raises(ValueError) as info:
        launcher_arguments(config_rest, cli_rest, "recipe.yaml")
    assert message in str(info.value)


def test_a_trl_docs_yaml_with_launcher_keys_parses(yaml_file):
    config = yaml_file("num_processes: 2\naccelerate_config: multi_gpu\n")
    argv = ["--config", config, "--multi_gpu", "--max_steps", "3", "--main_process_port", "29511"]
    (script, training, model, _), launch_args, script_argv = parse_run(argv)
    assert training.max_steps == 3 and script.reward_funcs == ["ebpo.integrations.trl.math_reward"]
    assert launch_args == [
        "--config_file", profile("multi_gpu"), "--num_processes", "2",
        "--multi_gpu", "--main_process_port", "29511",
    ]  # fmt: skip
    # what each launched process parses: the user's arguments without the launcher's flags
    assert script_argv == ["--config", config, "--max_steps", "3"]


def test_an_unknown_key_is_one_line_saying_what_to_type(yaml_file, capsys):
    code = cli_main(["grpo", "--config", yaml_file("lerning_rate: 0.1\n")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "unknown key(s) ['lerning_rate']" in err and "ebpo grpo --help" in err
    assert (
        "fail_with_unknown_args" not in err
    )  # TRL's advice, which a command-line user cannot take


def test_script_arguments_drop_exactly_the_launcher_tokens():
    argv = ["--config", "r.yaml", "--multi_gpu", "--seed", "2", "--num_processes", "2"]
    assert script_arguments(argv, ["--multi_gpu", "--num_processes", "2"]) == [
        "--config", "r.yaml", "--seed", "2",
    ]  # fmt: skip


# ---------------------------------------------------------------------- the launch it makes
@pytest.fixture
def machine(monkeypatch, tmp_path):
    """This machine as the planner sees it: no accelerate default config, ``devices`` accelerators."""

    def configure(devices: int = 0, default_config: bool = False) -> None:
        path = tmp_path / "default_config.yaml"
        if default_config:
            path.write_text("distributed_type: MULTI_GPU\nnum_processes: 2\n")
        monkeypatch.setattr(launcher, "default_config_file", str(path))
        monkeypatch.setattr(launcher, "accelerator_count", lambda: devices)

    return configure


NOT_LAUNCHED = {}


@pytest.mark.parametrize(
    ("devices", "args", "expected", "env"),
    [
        # one plain process: this process trains (what accelerate launch would start anyway)
        (0, [], None, None),
        (1, [], None, None),
        # num_processes on CPUs: accelerate would start ONE process; ebpo grpo starts N (gloo)
        (0, ["--num_processes", "2"], ["--num_processes", "2", "--multi_gpu"], {"ACCELERATE_USE_CPU": "1"}),
        (8, ["--cpu", "--num_processes", "2"], ["--num_processes", "2", "--multi_gpu"], {"ACCELERATE_USE_CPU": "1"}),
        # what accelerate does right is left to it, as trl grpo leaves it
        (0, ["--multi_gpu", "--num_processes", "2"], ["--multi_gpu", "--num_processes", "2"], {}),
        (8, ["--num_processes", "8"], ["--num_processes", "8"], {}),
        (0, ["--config_file", "c.yaml"], ["--config_file", "c.yaml"], {}),
        (0, ["--num_processes", "1"], ["--num_processes", "1"], {}),
        # several GPUs and no argument: accelerate would use them all, so launch
        (2, [], [], {}),
    ],
)  # fmt: skip
def test_the_launch_is_trl_grpos_with_cpu_processes_where_accelerate_would_start_one(
    machine, devices, args, expected, env
):
    machine(devices)
    planned = plan(args, ["--config", "r.yaml"], environ={})
    if expected is None:
        assert planned is None
    else:
        assert planned == Launch(expected, ["--config", "r.yaml"], {LAUNCHED_ENV: "1", **env})


def test_an_accelerate_default_config_file_is_used_as_trl_grpo_uses_it(machine):
    machine(0, default_config=True)
    planned = plan([], ["--config", "r.yaml"], environ={})
    assert planned is not None and planned.args == []  # accelerate reads the file itself


@pytest.mark.parametrize("mark", [LAUNCHED_ENV, "LOCAL_RANK", "ACCELERATE_DYNAMO_USE_FULLGRAPH"])
def test_inside_a_launch_the_launcher_keys_are_ignored(machine, mark):
    machine(0)
    assert plan(["--num_processes", "2"], [], environ={mark: "0"}) is None


def test_the_launch_runs_accelerates_launcher_on_ebpo_grpo(machine, monkeypatch, yaml_file):
    machine(0)
    seen = []

    def launch_command(args):
        seen.append((args, os.environ.get(LAUNCHED_ENV), os.environ.get("ACCELERATE_USE_CPU")))

    monkeypatch.setattr(launcher, "launch_command", launch_command)
    monkeypatch.delenv(LAUNCHED_ENV, raising=False)
    monkeypatch.delenv("ACCELERATE_USE_CPU", raising=False)
    config = yaml_file("num_processes: 2\n")
    assert grpo_main(["--config", config, "--seed", "3"]) == 0
    (args, marked, on_cpu), = seen  # fmt: skip
    assert args.module and args.training_script == "ebpo"
    assert args.training_script_args == ["grpo", "--config", config, "--seed", "3"]
    assert (args.num_processes, args.multi_gpu) == (2, True)
    assert (marked, on_cpu) == ("1", "1")
    assert LAUNCHED_ENV not in os.environ and "ACCELERATE_USE_CPU" not in os.environ  # restored


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (subprocess.CalledProcessError(2, ["python"]), 2),  # one process: its exit code
        (subprocess.CalledProcessError(-9, ["python"]), -9),
    ],
)
def test_the_exit_code_is_the_launched_processes(machine, monkeypatch, error, code):
    machine(0)

    def failing(args):
        raise error

    monkeypatch.setattr(launcher, "launch_command", failing)
    assert launcher.launch(Launch(["--num_processes", "1"], [])) == code


def test_the_command_line_shown_is_the_launch(machine):
    machine(0)
    planned = plan(["--num_processes", "2"], ["--config", "r.yaml"], environ={})
    assert planned is not None
    assert planned.command() == (
        "ACCELERATE_USE_CPU=1 accelerate launch --num_processes 2 --multi_gpu -m ebpo grpo "
        "--config r.yaml"
    )
    assert Path(profile("zero3")).is_file()


def test_the_dry_run_says_which_processes_a_run_would_start(machine, yaml_file, capsys):
    machine(0)
    config = yaml_file("num_processes: 2\n")
    assert cli_main(["grpo", "--config", config, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert (
        f"  launch      on this machine: ACCELERATE_USE_CPU=1 accelerate launch --num_processes 2 --multi_gpu "
        f"-m ebpo grpo --config {config} (2 processes)"
    ) in out.splitlines()
