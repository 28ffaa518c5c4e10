"""``ebpo compare`` on the verl smoke's own files (tests/fixtures/compare/README.md): verl's file
logger and Hydra's config as verl 0.9.1 wrote them. The resumed run is an exact resume, so
compared with the full run it differs by 0 at every common step: no verdict, the pair flagged
identical."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ebpo.analysis.compare.runs import read_run
from ebpo.cli import main

SMOKE = Path(__file__).resolve().parents[2] / "fixtures" / "compare" / "smoke"
SCORE = "critic/score/mean"


def test_the_smoke_runs_say_their_estimator_seed_and_steps():
    full, resumed = read_run(str(SMOKE / "full")), read_run(str(SMOKE / "resumed"))
    assert (full.kind, full.estimator, full.seed) == ("verl", "ebpo", "0")
    assert (resumed.estimator, resumed.seed) == ("ebpo", "0")
    assert sorted(full.metrics[SCORE]) == [1, 2, 3, 4] and sorted(resumed.metrics[SCORE]) == [3, 4]
    assert full.settings["actor_rollout_ref.rollout.seed"] == "0"


def test_an_exact_resume_is_not_separated_from_its_full_run(tmp_path, capsys):
    runs = [f"ebpo@0={SMOKE / 'full'}", f"grpo@0={SMOKE / 'resumed'}"]  # labels: two "estimators"
    out = tmp_path / "report"
    # the resumed run's resume keys differ: not paired silently
    assert main(["compare", *runs, "--output-dir", str(out), "--metric", SCORE]) == 2
    err = capsys.readouterr().err
    assert "trainer.resume_from_path" in err and "trainer.resume_mode" in err and not out.exists()
    # validation: step 0 in the full run, step 2 (after the resume) in the other: none in common
    assert main(["compare", *runs, "--output-dir", str(out), "--ignore", "trainer.resume_*"]) == 2
    assert "no step at which every run logged 'val-core/" in capsys.readouterr().err
    argv = ["compare", *runs, "--output-dir", str(out), "--ignore", "trainer.resume_*",
            "--metric", SCORE, "--metric", "actor/entropy"]  # fmt: skip
    assert main(argv) == 0
    content = json.loads((out / "compare.json").read_text())
    assert content["accepted_differences"] == ["trainer.resume_from_path", "trainer.resume_mode"]
    for comparison in content["comparisons"]:
        assert [row["step"] for row in comparison["steps"]] == [3, 4]
        for row in comparison["steps"]:
            assert row["mean_diff"] == pytest.approx(0.0, abs=1e-6) and row["pairs"] == 1
    assert all("no verdict (every seed pair is identical" in line for line in content["verdict"])
    assert all(c["flags"]["identical_pairs"] == ["0"] for c in content["comparisons"])
