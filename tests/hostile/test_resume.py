"""The resume check (issue #21, items 5 and 6): after a kill at any point of a checkpoint write, or a
checkpoint broken afterwards, ``ebpo train --resume`` either continues exactly — the final model,
the estimator state and the per-step records equal the uninterrupted run's — or refuses in one
line with exit code 2.

Real processes: ``resume_worker.py`` runs the tiny job in forked children and ends one with
``os._exit`` (what ``kill -9`` leaves: no handler, no ``finally``) just before each file operation
of a save — every file opened for writing, renamed or removed inside ``checkpoints/``, and the
writers outside Python's ``open`` (``torch.save``, safetensors, tokenizers) — in each of the three
saves of the run (the first: nothing complete yet; the second; the third: the last step, with the
deletion of the oldest checkpoint); "torn" variants also cut the file written just before in half
(a kill in the middle of that write). Then ``--resume`` runs in a new process. Kill points that
leave the same bytes in ``checkpoints/`` share one resume (the job is deterministic).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

pytestmark = [pytest.mark.trl, pytest.mark.slow]

WORKER = Path(__file__).with_name("resume_worker.py")
ROOT = Path(__file__).resolve().parents[2]
#: the tiny job (+ resume_worker.TINY: 1 layer of width 32, a checkpoint every step)
ARGV = [
    "--steps", "3", "--group-size", "2", "--prompts-per-step", "2", "--topics", "add",
    "--tiers", "1", "--eval-problems", "1", "--eval-samples", "8", "--eval-every", "0",
    "--warm-start-steps", "0", "--quiet",
]  # fmt: skip
MARK = "ebpo_checkpoint_complete.json"


def skipped(reason: str, step: int = 2, then: str = "resuming from checkpoint-1 instead") -> str:
    """The note of a resume that passes over an incomplete checkpoint (a regex)."""
    return rf"checkpoint-{step} is incomplete \({reason}.*\): {then}"


#: checkpoint-2 complete, then broken: (id, action, file, expected exit code, stderr regex)
DAMAGES = [
    ("no-trainer-state", "delete", "trainer_state.json", 0, skipped("trainer_state.json is missing")),
    ("truncated-model", "truncate", "model.safetensors", 0, skipped(r"model\.safetensors has \d+ bytes")),
    ("truncated-optimizer", "truncate", "optimizer.pt", 0, skipped(r"optimizer\.pt has \d+ bytes")),
    ("grown-scheduler", "append", "scheduler.pt", 0, skipped(r"scheduler\.pt has \d+ bytes")),
    ("no-rng-state", "delete", "rng_state.pth", 0, skipped(r"rng_state\.pth is missing")),
    ("no-estimator-state", "delete", "ebpo_estimator_state.json", 0, skipped("ebpo_estimator_state")),
    ("no-generation-state", "delete", "ebpo_generation_state.json", 0, skipped("ebpo_generation_st")),
    ("no-tokenizer", "delete", "tokenizer.json", 0, skipped(r"tokenizer\.json is missing")),
    ("no-marker", "delete", None, 0, skipped(f"no {MARK}")),
    ("garbage-marker", "write", f"{MARK}={{", 0, skipped(f"{MARK} is unreadable")),
    ("list-marker", "write", f"{MARK}=[]", 0, skipped(f"{MARK} is not an ebpo checkpoint record")),
    ("future-marker", "write", f'{MARK}={{"format": "ebpo-checkpoint", "version": 99, "files": {{}}}}',
     0, skipped(f"{MARK} has version 99")),
    ("empty-newer-checkpoint", "empty-newer", None, 0,
     skipped(f"no {MARK}", 3, "resuming from checkpoint-2 instead")),
    ("every-checkpoint-incomplete", "unmark-all", None, 0,
     skipped(f"no {MARK}", 2, "RL starts again from step 0")),
    ("checkpoints-a-file", "checkpoints-file", None, 2,
     r"^ebpo train: error: '.*/checkpoints' (is not a directory|should be the run's directory)"),
]  # fmt: skip


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    plan = {
        "root": str(root),
        "argv": ARGV,
        "saves": [1, 2, 3],
        "torn": True,
        "damages": [
            {"id": name, "save": 2, "action": action, "file": file}
            for name, action, file, _, _ in DAMAGES
        ],
    }
    (root / "plan.json").write_text(json.dumps(plan))
    env = {
        **os.environ,
        "EBPO_CACHE": str(root / "cache"),
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("EBPO_DEBUG", None)
    command = [sys.executable, str(WORKER), str(root / "plan.json"), str(root / "results.json")]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"worker failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    out = json.loads((root / "results.json").read_text())
    assert "error" not in out, out["error"]
    return out


# The tiny job's model solves nothing in a short resumed run: the trainer says so at the end (the
# no-signal notice), which is not about the checkpoint; every other line is.
NO_SIGNAL = "EBPOTrainer: no learning signal in "


def lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip() and NO_SIGNAL not in line]


def test_every_file_of_a_checkpoint_is_seen_by_the_injector(results):
    assert results["uncovered"] == []
    for save in ("1", "2", "3"):
        kinds = [kind for kind, _ in results["events"][save]]
        # TRL's files, ours, the marker last, then (third save) the oldest checkpoint goes
        assert kinds.count("torch.save") == 4 and "safetensors" in kinds, kinds
        assert results["events"][save][-1][0] == "end of save"
    assert ["shutil.rmtree", "checkpoint-1"] in results["events"]["3"]


def test_a_kill_at_any_point_of_a_checkpoint_write_resumes_exactly_or_refuses(results):
    cases = [c for c in results["cases"] if "-k" in c["id"]]
    assert len(cases) >= 3 * 36  # every event of three saves, and torn variants
    for case in cases:
        assert case["killed"] == 137, case  # the process died at that point, not before
        assert "Traceback" not in case["stderr"], case
        if case["code"] == 2:  # a refusal: one line
            assert len(lines(case["stderr"])) == 1, case
            continue
        assert case["code"] == 0 and case["diffs"] == [], case  # an exact continuation
        for line in lines(case["stderr"]):  # only the notes about skipped checkpoints
            assert re.search(r"checkpoint-\d is incomplete \(.+\): ", line), case


def test_an_interrupted_save_falls_back_to_the_previous_checkpoint_and_says_so(results):
    cases = {c["id"]: c for c in results["cases"]}

    def killed_at(save: int, kind: str, path: str = "") -> dict:
        k = results["events"][str(save)].index([kind, path]) + 1
        return cases[f"s{save}-k{k}"]

    # killed before trainer_state.json was written (the issue's disk-full case)
    case = killed_at(2, "write", "checkpoint-2/trainer_state.json")
    assert "checkpoint-2 is incomplete" in case["stderr"]
    assert "resuming from checkpoint-1 instead" in case["stderr"]
    # killed during the very first save: no complete checkpoint; RL starts again, exactly
    case = killed_at(1, "write", "checkpoint-1/trainer_state.json")
    assert "RL starts again from step 0" in case["stderr"] and case["diffs"] == []
    # killed once the marker is in place: the checkpoint is complete and resumed without a word
    for save in (1, 2, 3):
        assert killed_at(save, "rename", f"checkpoint-{save}/{MARK}")["stderr"]  # not renamed yet
        assert lines(killed_at(save, "end of save")["stderr"]) == []


@pytest.mark.parametrize(
    ("name", "code", "match"), [(d[0], d[3], d[4]) for d in DAMAGES], ids=[d[0] for d in DAMAGES]
)
def test_a_broken_checkpoint_is_skipped_or_refused(results, name, code, match):
    case = next(c for c in results["cases"] if c["id"] == name)
    assert "Traceback" not in case["stderr"], case
    assert case["code"] == code, case
    assert re.search(match, case["stderr"], re.MULTILINE), case
    if code == 2:
        assert len(lines(case["stderr"])) == 1, case
    else:
        assert case["diffs"] == [], case
