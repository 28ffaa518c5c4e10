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
