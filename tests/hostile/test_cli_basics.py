"""Hostile inputs common to every command: bad options end in one line and exit code 2."""

from __future__ import annotations

import pytest

from tests.hostile.harness import CliCase, check_cli_error, ids

CASES = [
    CliCase(
        "unknown-command",
        ["nonsense"],
        r"^ebpo: error: argument COMMAND: invalid choice: 'nonsense'",
    ),
    CliCase(
        "bad-int",
        ["train", "--steps", "ten"],
        r"^ebpo train: error: argument --steps: invalid int value: 'ten'",
    ),
    CliCase(
        "unknown-option",
        ["demo", "--frobnicate"],
        r"^ebpo: error: unrecognized arguments: --frobnicate",
    ),
    CliCase(
        "bad-choice",
        ["train", "--reward", "exact"],
        r"^ebpo train: error: argument --reward: invalid choice",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_cli_user_error(case, tmp_path, monkeypatch):
    check_cli_error(case, tmp_path, monkeypatch)
