"""The ``ebpo`` command line: the command table, lazy command modules, missing extras, the demo."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys

import pytest

from ebpo import cli
from ebpo.cli import main


def test_help_lists_subcommands(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert "demo" in capsys.readouterr().out


def test_no_command_prints_help_and_fails(capsys):
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


def test_demo_shows_ebpo_signal_where_grpo_has_none(capsys):
    assert main(["demo", "--prompts", "32", "--steps", "3", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "all-fail groups that still get a signal: GRPO 0.0%" in out
    assert "EBPO 0.0%" not in out.split("all-fail groups")[1]


def test_value_error_is_one_line_exit_2_and_ebpo_debug_reraises(capsys, monkeypatch):
    def broken(args: argparse.Namespace) -> int:
        raise ValueError("--thing must be positive,\n got -1")

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda command=None: parser)
    parser.set_defaults(func=broken, command="demo")
    monkeypatch.delenv("EBPO_DEBUG", raising=False)
    assert cli.main([]) == 2
    assert capsys.readouterr().err == "ebpo demo: error: --thing must be positive, got -1\n"
    monkeypatch.setenv("EBPO_DEBUG", "1")
    with pytest.raises(ValueError, match="must be positive"):
        cli.main([])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seed", "-1"], "--seed must be an integer >= 0, got -1"),
        (["--prompts", "0"], "--prompts must be an integer between 1 and 100000, got 0"),
        (["--group-size", "0"], "--group-size must be an integer between 1 and 64, got 0"),
        (["--steps", "-2"], "--steps must be an integer between 1 and 10000, got -2"),
    ],
)
def test_demo_rejects_bad_numbers_in_one_line(capsys, argv, message):
    assert main(["demo", *argv]) == 2
    assert capsys.readouterr().err == f"ebpo demo: error: {message}\n"


def test_help_lists_every_command_with_its_summary(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps long summaries
    for name, summary in cli.COMMANDS.items():
        assert f"{name} {summary}" in out


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_the_table_summary_is_the_help_of_the_command_parser(name):
    parser = cli.build_parser(name)
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {action.dest: action.help for action in subparsers._choices_actions}
    assert helps[name] == cli.COMMANDS[name]
    assert (
        subparsers.choices[name].get_default("func") is not None
    )  # the real parser, not a placeholder


def test_help_imports_no_command_module_and_no_framework():
    code = (
        "import json, sys\n"
        "from ebpo.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('trl', 'verl', 'transformers', 'datasets', 'matplotlib') or m.startswith('ebpo.commands.'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(done.stdout.splitlines()[-1]) == []


def test_a_command_module_is_imported_only_when_that_command_runs(monkeypatch, capsys):
    imported = []
    real = importlib.import_module

    def spy(name, *args):
        imported.append(name)
        return real(name, *args)

    monkeypatch.setattr(cli.importlib, "import_module", spy)
    assert main(["demo", "--prompts", "8", "--steps", "1"]) == 0
    assert imported == ["ebpo.commands.demo"]


@pytest.mark.parametrize(
    ("command", "missing", "extra"),
    [
        ("train", "trl", "trl"),
        ("verl", "omegaconf", "verl"),
        ("eval", "transformers", "trl"),
        ("data", "sklearn", "cluster"),
    ],
)
def test_a_missing_extra_at_import_is_one_line_exit_2(monkeypatch, capsys, command, missing, extra):
    real = importlib.import_module

    def without_extra(name, *args):
        if name == f"ebpo.commands.{command}":
            raise ModuleNotFoundError(f"No module named {missing!r}", name=missing)
        return real(name, *args)

    monkeypatch.setattr(cli.importlib, "import_module", without_extra)
    monkeypatch.delenv("EBPO_DEBUG", raising=False)
    assert main([command, "--help"]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"ebpo {command} needs the {extra} extra: pip install 'ebpo[{extra}]'\n"
    assert captured.out == ""
    assert main(["demo", "--prompts", "8", "--steps", "1"]) == 0  # the other commands still work


def test_a_missing_extra_while_running_is_one_line_exit_2(monkeypatch, capsys):
    def needs_verl(args: argparse.Namespace) -> int:
        raise ModuleNotFoundError("No module named 'verl'", name="verl.trainer")

    parser = cli.build_parser()
    parser.set_defaults(func=needs_verl, command="verl")
    monkeypatch.setattr(cli, "build_parser", lambda command=None: parser)
    monkeypatch.delenv("EBPO_DEBUG", raising=False)
    assert main([]) == 2
    assert capsys.readouterr().err == "ebpo verl needs the verl extra: pip install 'ebpo[verl]'\n"
    monkeypatch.setenv("EBPO_DEBUG", "1")
    with pytest.raises(ModuleNotFoundError):
        main([])


def test_a_missing_module_that_is_no_extra_is_a_bug_and_raises(monkeypatch):
    real = importlib.import_module

    def broken(name, *args):
        if name == "ebpo.commands.train":
            raise ModuleNotFoundError("No module named 'ebpo.lab.gone'", name="ebpo.lab.gone")
        return real(name, *args)

    monkeypatch.setattr(cli.importlib, "import_module", broken)
    with pytest.raises(ModuleNotFoundError, match="ebpo.lab.gone"):
        main(["train"])
