"""The command lines left the integrations, replay and the paired statistics left the lab: each
old module path raises an ImportError that names the new one (for one release), and the new path
imports."""

from __future__ import annotations

import importlib

import pytest

MOVED = {
    "ebpo.integrations.trl.grpo_script": "ebpo.commands.grpo.grpo_script",
    "ebpo.integrations.trl.launcher": "ebpo.commands.grpo.launcher",
    "ebpo.integrations.trl.dry_run": "ebpo.commands.grpo.dry_run",
    "ebpo.integrations.trl.recipe_file": "ebpo.commands.grpo.recipe_file",
    "ebpo.integrations.trl.output_dir": "ebpo.commands.grpo.output_dir",
    "ebpo.integrations.verl.launcher": "ebpo.commands.verl.launcher",
    "ebpo.integrations.verl.doctor": "ebpo.commands.verl.doctor",
    "ebpo.integrations.verl.nodes": "ebpo.commands.verl.nodes",
    "ebpo.lab.replay": "ebpo.analysis.replay",
    "ebpo.lab.bench.stats": "ebpo.analysis.paired",
}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_the_old_path_names_the_new_one(old):
    with pytest.raises(ImportError, match=MOVED[old].replace(".", r"\.")):
        importlib.import_module(old)


@pytest.mark.parametrize("new", sorted(MOVED.values()))
def test_the_new_path_imports(new):
    if ".commands." in new:
        pytest.importorskip("trl" if ".grpo." in new else "verl")
    assert importlib.import_module(new).__name__ == new
