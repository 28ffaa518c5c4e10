"""The ``ebpo`` command line: discovery of subcommands and the demo."""

from __future__ import annotations

import pytest

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
    import argparse

    from ebpo import cli

    def broken(args: argparse.Namespace) -> int:
        raise ValueError("--thing must be positive,\n got -1")

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
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
