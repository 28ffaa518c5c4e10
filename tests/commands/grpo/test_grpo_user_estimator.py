"""``ebpo grpo`` with a user's own estimator (tests/fixtures/user_estimator): its module named by
``--estimator_module`` or the YAML's ``estimator_module:`` key, then ``--advantage_estimator``
takes its name; a module that cannot be imported is one line and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("trl")

from ebpo.cli import main  # noqa: E402
from tests.commands.grpo.test_grpo import (  # noqa: E402, F401  (a fixture)
    local_model_and_data,
    write_yaml,
)
from tests.conftest import USER_ESTIMATOR_MODULE  # noqa: E402

pytestmark = [pytest.mark.trl]

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "user_estimator" / "my_estimator.py"


def test_the_yaml_names_the_module_and_the_estimator(user_estimators, local_model_and_data, capsys):  # noqa: F811
    extra = f"estimator_module: {USER_ESTIMATOR_MODULE}\nadvantage_estimator: running_mean\n"
    config = write_yaml(local_model_and_data, "user_yaml", extra)
    assert main(["grpo", "--config", str(config), "--dry-run"]) == 0
    assert "estimator   running_mean" in capsys.readouterr().out


def test_the_flag_takes_a_file_path(user_estimators, local_model_and_data, capsys):  # noqa: F811
    config = write_yaml(local_model_and_data, "user_flag")
    argv = ["grpo", "--config", str(config), "--estimator_module", str(FIXTURE)]
    assert main([*argv, "--advantage_estimator", "group_centered", "--dry-run"]) == 0
    assert "estimator   group_centered" in capsys.readouterr().out


def test_a_module_that_cannot_be_imported_is_one_line(local_model_and_data, capsys):  # noqa: F811
    config = write_yaml(local_model_and_data, "user_bad")
    argv = [
        "grpo",
        "--config",
        str(config),
        "--estimator_module",
        "no_such_pkg.my_est",
        "--dry-run",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "'no_such_pkg.my_est' could not be imported" in err
