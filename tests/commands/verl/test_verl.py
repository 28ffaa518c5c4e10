"""``ebpo verl smoke``'s command line around the runs (the runs themselves:
tests/integrations/verl/test_verl_fit_cpu*.py): ``--steps`` sizes the smoke, and the summary names
verl's rollout dumps and prints the ``ebpo replay`` command that replays them — a command that
works as printed. ``run_smoke`` is replaced by a stand-in whose runs hold a dump verl's writer made
(tests/fixtures/replay/v1)."""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")
pytestmark = pytest.mark.verl

from ebpo.cli import main  # noqa: E402
from ebpo.lab.verl_cpu.settings import Check  # noqa: E402
from ebpo.lab.verl_cpu.shared.results import RunResult, StepTrace  # noqa: E402

DUMP = Path(__file__).resolve().parents[2] / "fixtures" / "replay" / "v1"


def _run(run_dir: Path, steps: list[int]) -> RunResult:
    """A finished run in ``run_dir`` whose rollout dump is the fixture's (verl's writer)."""
    shutil.copytree(DUMP, run_dir / "rollouts")
    trace = [StepTrace(step, None, None, None, [], []) for step in steps]
    return RunResult(str(run_dir), trace, {}, {}, 1.0)


def _temporary(monkeypatch, path: Path) -> Path:
    """The smoke's temporary work directory will be ``path``."""
    import tempfile

    def mkdtemp(**_: object) -> str:
        path.mkdir()
        return str(path)

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    return path


@pytest.fixture
def smoke(monkeypatch):
    """``run_smoke`` stand-in: records the settings, makes the runs, passes its one check."""
    import ebpo.lab.verl_cpu.smoke as smoke

    seen = {}

    def run_smoke(settings, report):
        seen["settings"] = settings
        work = Path(settings.work_dir)
        runs = {
            name: (
                _run(work / name / "full", list(range(1, settings.steps + 1))),
                _run(
                    work / name / "resumed", list(range(settings.save_step + 1, settings.steps + 1))
                ),
            )
            for name in settings.estimators
        }
        return smoke.SmokeReport([Check("stand-in", True, "")], runs, {}, "")

    monkeypatch.setattr(smoke, "run_smoke", run_smoke)
    return seen


def test_resume_mode_resume_path_reaches_the_smoke(smoke, tmp_path):
    argv = ["verl", "smoke", "--work-dir", str(tmp_path / "runs"), "--resume-mode", "resume_path"]
    assert main(argv) == 0
    assert smoke["settings"].resume_mode == "resume_path"


@pytest.mark.parametrize("plot_extra", [True, False])
def test_the_summary_prints_a_replay_command_that_works(
    smoke, tmp_path, capsys, monkeypatch, plot_extra
):
    """The printed command runs in the environment that printed it: without the plot extra
    (matplotlib made unimportable here, as in a ``[verl]``-only install) it says ``--no-plots``."""
    if not plot_extra:
        monkeypatch.setitem(sys.modules, "matplotlib", None)
    work = tmp_path / "runs"
    assert main(["verl", "smoke", "--work-dir", str(work), "--steps", "6"]) == 0
    settings = smoke["settings"]
    assert (settings.steps, settings.save_step, settings.train_size) == (6, 4, 24)
    assert settings.resume_mode == "auto"  # verl's default resume unless asked otherwise
    lines = capsys.readouterr().out.splitlines()
    assert lines[-3] == f"verl CPU smoke OK: 1 checks passed (runs in {work})"
    assert lines[-2] == (
        f"ebpo: verl's rollout dumps (trainer.rollout_data_dir): {work}/ebpo/full/rollouts "
        f"(steps 1-6), {work}/ebpo/resumed/rollouts (steps 5-6)"
    )
    prefix = "ebpo: replay the run through every estimator: "
    assert lines[-1].startswith(prefix + "ebpo replay ")
    command = shlex.split(lines[-1].removeprefix(prefix))
    assert ("--no-plots" in command) != plot_extra
    assert main(command[1:]) == 0, capsys.readouterr().err
    report = json.loads((work / "ebpo" / "replay" / "replay.json").read_text())
    assert report["inputs"]["paths"] == [str(work / "ebpo" / "full" / "rollouts")]


def test_without_a_work_dir_the_summary_says_the_dumps_went_and_how_to_keep_them(
    smoke, tmp_path, monkeypatch, capsys
):
    temporary = _temporary(monkeypatch, tmp_path / "ebpo-verl-smoke-x")
    assert main(["verl", "smoke"]) == 0
    assert not temporary.exists()
    assert smoke["settings"].steps == 4 and smoke["settings"].save_step == 2
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == (
        "verl's rollout dumps (trainer.rollout_data_dir) were removed with the temporary runs; "
        "to replay them, run the smoke with --work-dir DIR (or --keep), then: ebpo replay "
        "DIR/ebpo/full/rollouts --output-dir DIR/ebpo/replay"
    )


def test_keep_keeps_the_temporary_runs_and_their_dumps(smoke, tmp_path, monkeypatch, capsys):
    temporary = _temporary(monkeypatch, tmp_path / "ebpo-verl-smoke-y")
    assert main(["verl", "smoke", "--keep", "--estimator", "jspo_plus_plus"]) == 0
    assert (temporary / "jspo_plus_plus" / "full" / "rollouts" / "1.jsonl").is_file()
    last = capsys.readouterr().out.splitlines()[-1]
    assert f"ebpo replay {temporary}/jspo_plus_plus/full/rollouts --output-dir" in last
