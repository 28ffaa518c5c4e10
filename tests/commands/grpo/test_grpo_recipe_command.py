"""The shipped TRL recipes from the command line: ``ebpo grpo recipe`` lists and prints them,
``ebpo grpo --config NAME`` takes a shipped recipe's name where no file of that name exists (and
says which file it used), ``ebpo grpo prepare-data`` refuses what would break the recipes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ebpo.cli import main
from ebpo.commands.grpo.recipes import resolve_config_name
from ebpo.integrations.trl.recipes import RECIPES_DIR, readme_text, recipe_names, recipe_path

pytestmark = [pytest.mark.trl]


def test_the_names_are_the_shipped_files_below_the_recipes_folder() -> None:
    files = sorted(RECIPES_DIR.glob("*/*.yaml"))
    assert len(files) == 14
    assert recipe_names() == sorted(
        p.relative_to(RECIPES_DIR).with_suffix("").as_posix() for p in files
    )
    assert (
        recipe_path("qwen3-1.7b/grpo")
        == recipe_path("qwen3-1.7b/grpo.yaml")
        == RECIPES_DIR / "qwen3-1.7b/grpo.yaml"
    )
    assert recipe_path("grpo") is None and recipe_path("qwen3-1.7b/nope") is None


def test_list_prints_every_recipe_once(capsys) -> None:
    assert main(["grpo", "recipe", "--list"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert names == recipe_names()


def test_a_recipe_prints_as_its_file(capsys) -> None:
    assert main(["grpo", "recipe", "qwen3-8b-lora/dapo"]) == 0
    assert capsys.readouterr().out == (RECIPES_DIR / "qwen3-8b-lora" / "dapo.yaml").read_text()
    assert main(["grpo", "recipe", "--readme"]) == 0
    assert capsys.readouterr().out == readme_text()


def test_an_unknown_recipe_is_one_line_and_exit_2(capsys) -> None:
    assert main(["grpo", "recipe", "qwen3-1.7b/nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no shipped recipe 'qwen3-1.7b/nope'" in err
    assert "ebpo grpo recipe --list" in err


@pytest.mark.parametrize("spelling", ["separate", "equals"])
def test_config_name_resolves_to_the_shipped_file_and_says_so(
    spelling, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    argv = (
        ["--config", "qwen3-1.7b/grpo"] if spelling == "separate" else ["--config=qwen3-1.7b/grpo"]
    )
    resolved = resolve_config_name([*argv, "--max_steps", "3"])
    shipped = str(RECIPES_DIR / "qwen3-1.7b" / "grpo.yaml")
    expected = ["--config", shipped] if spelling == "separate" else [f"--config={shipped}"]
    assert resolved == [*expected, "--max_steps", "3"]
    assert (
        capsys.readouterr().err
        == f"ebpo grpo: --config qwen3-1.7b/grpo: the shipped recipe {shipped}\n"
    )


def test_a_file_of_that_name_wins_over_the_shipped_recipe(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "qwen3-1.7b").mkdir()
    (tmp_path / "qwen3-1.7b" / "grpo").write_text("max_steps: 1\n")
    assert resolve_config_name(["--config", "qwen3-1.7b/grpo"]) == ["--config", "qwen3-1.7b/grpo"]
    assert resolve_config_name(["--config", "no/such"]) == ["--config", "no/such"]
    assert capsys.readouterr().err == ""


def test_a_yaml_file_here_wins_over_the_shipped_recipe_and_says_so(tmp_path, monkeypatch, capsys):
    """``--config qwen3-1.7b/grpo`` beside a ``qwen3-1.7b/grpo.yaml`` of the user's (a copy of the
    recipe they edited) runs their file, and a line says so (issue 53)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "qwen3-1.7b").mkdir()
    (tmp_path / "qwen3-1.7b" / "grpo.yaml").write_text("max_steps: 1\n")
    assert resolve_config_name(["--config=qwen3-1.7b/grpo"]) == ["--config=qwen3-1.7b/grpo.yaml"]
    assert capsys.readouterr().err == (
        "ebpo grpo: --config qwen3-1.7b/grpo: your file qwen3-1.7b/grpo.yaml (a file here wins "
        "over the shipped recipe of that name)\n"
    )


@pytest.mark.slow
def test_a_shipped_recipe_dry_runs_by_name_outside_the_repository(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "ebpo", "grpo", "--config", "qwen3-1.7b/ebpo_batch", "--dry-run"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"the shipped recipe {RECIPES_DIR / 'qwen3-1.7b' / 'ebpo_batch.yaml'}" in done.stderr
    assert "paper preset: ebpo_batch" in done.stdout
    assert list(tmp_path.iterdir()) == []  # a dry run leaves nothing where it ran


def test_prepare_data_keeps_the_validation_set(capsys) -> None:
    assert main(["grpo", "prepare-data", "--eval", "math-500"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--eval must keep aime-2024" in err
