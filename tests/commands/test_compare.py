"""``ebpo compare`` as a command: ``ebpo train`` run folders, the report replaced all or nothing
(a new report leaves nothing of the old one; a failed write leaves the old one whole; what a killed
run left is cleared), the folder held while the command runs, the PNGs."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from ebpo.analysis.compare.runs import read_run
from ebpo.cli import main
from ebpo.commands.compare import previous_report
from ebpo.utils.file_sets import MARK
from ebpo.utils.run_lock import lock_run_dir
from tests.analysis.compare.verl_runs import write_trl_state
from tests.hostile.harness import snapshot

CONFIG = {"estimator": "grpo", "seed": 0, "group_size": 4, "steps": 4, "learning_rate": 3e-4,
          "model": "tiny", "dataset": "arithmetic", "extra": {}}  # fmt: skip


def write_train_run(folder: Path, estimator: str, seed: int, pass1: list[float]) -> Path:
    """An ``ebpo train`` run folder: run.json, metrics.jsonl (a reward a step, the held-out
    Pass@1 at step 2), eval_before.json / eval_after.json (steps 0 and 4)."""
    folder.mkdir(parents=True)
    config = {**CONFIG, "estimator": estimator, "seed": seed}
    manifest = {"format": "ebpo-run", "version": 2, "status": "completed", "global_step": 4,
                "config": config, "files": ["run.json"]}  # fmt: skip
    (folder / "run.json").write_text(json.dumps(manifest))
    records = [{"step": s, "time": 1.0 * s, "reward": 0.1 * s + seed / 100} for s in range(1, 5)]
    records.insert(2, {"step": 2, "heldout/pass@1": pass1[1], "heldout/pass@1/add": 0.5})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (folder / "eval_before.json").write_text(json.dumps({"overall": pass1[0], "problems": []}))
    (folder / "eval_after.json").write_text(json.dumps({"overall": pass1[2], "problems": []}))
    return folder


@pytest.fixture
def train_runs(tmp_path):
    return [
        str(write_train_run(tmp_path / "g0", "grpo", 0, [0.1, 0.2, 0.3])),
        str(write_train_run(tmp_path / "g1", "grpo", 1, [0.1, 0.25, 0.3])),
        str(write_train_run(tmp_path / "e0", "ebpo", 0, [0.1, 0.3, 0.4])),
        str(write_train_run(tmp_path / "e1", "ebpo", 1, [0.1, 0.3, 0.5])),
    ]


def test_ebpo_train_runs_compare_on_held_out_pass1(train_runs, tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["compare", *train_runs, "--output-dir", str(out)]) == 0
    content = json.loads((out / "compare.json").read_text())
    assert content["metrics"] == ["heldout/pass@1"]  # the evaluation, not the reward
    (comparison,) = content["comparisons"]
    rows = {row["step"]: row for row in comparison["steps"]}
    assert sorted(rows) == [0, 2, 4]
    assert rows[0]["mean_diff"] == 0 and rows[0]["p_value"] == 1.0
    assert rows[2]["mean_diff"] == pytest.approx((0.1 + 0.05) / 2)
    assert rows[4]["mean_diff"] == pytest.approx((0.1 + 0.2) / 2)
    names = sorted(p.name for p in out.iterdir())
    assert names == ["compare.csv", "compare.json", "curves_heldout_pass_1.png",
                     "difference_heldout_pass_1.png"]  # fmt: skip
    csv_lines = (out / "compare.csv").read_text().splitlines()
    assert len(csv_lines) == 1 + 3 + 3  # header, three steps, three summaries
    assert "verdict: ebpo − grpo on heldout/pass@1 at step 4" in capsys.readouterr().out


def test_a_new_report_replaces_the_old_one_whole(train_runs, tmp_path):
    out = tmp_path / "report"
    assert main(["compare", *train_runs, "--output-dir", str(out)]) == 0
    assert main(["compare", *train_runs, "--output-dir", str(out), "--metric", "reward"]) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "compare.csv", "compare.json", "curves_reward.png", "difference_reward.png",
    ]  # fmt: skip
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left


def test_a_report_is_what_its_compare_json_lists(train_runs, tmp_path):
    """Only the files a report's compare.json lists are the report's (a PNG named like one is the
    user's, issue 53); a list naming a file no report writes does not make it ours; a report of
    0.1.0, without the list, is compare.json, compare.csv and the PNGs of its metrics."""
    out = tmp_path / "report"
    assert main(["compare", *train_runs, "--output-dir", str(out), "--metric", "reward"]) == 0
    content = json.loads((out / "compare.json").read_text())
    assert content["files"] == sorted(p.name for p in out.iterdir())
    old = {**content, "files": [*content["files"], "notes.txt", "../x.png"]}
    (out / "compare.json").write_text(json.dumps(old))
    (out / "notes.txt").write_text("mine")
    assert previous_report(out) == ["compare.csv", "compare.json", "curves_reward.png",
                                    "difference_reward.png"]  # fmt: skip
    (out / "notes.txt").unlink()
    del content["files"]  # as 0.1.0 wrote it
    (out / "compare.json").write_text(json.dumps(content))
    assert main(["compare", *train_runs, "--output-dir", str(out), "--no-plots"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["compare.csv", "compare.json"]


def test_leftovers_of_a_killed_run_are_cleared_before_the_new_report(train_runs, tmp_path, capsys):
    """A run killed in the middle of the swap left its staging and backup folders, the old files
    moved aside: the next run takes the folder (they are no user files), puts the old files back,
    replaces the whole old report, PNGs included, and leaves nothing hidden."""
    out = tmp_path / "report"
    assert main(["compare", *train_runs, "--output-dir", str(out), "--metric", "reward"]) == 0
    backup = out / ".compare.0123456789abcdef.old"
    (out / ".compare.0123456789abcdef.new").mkdir()  # empty: a kill before its mark
    backup.mkdir()
    (backup / MARK).write_text("{}")  # what makes the folder ours
    for name in ("compare.csv", "difference_reward.png"):
        (out / name).rename(backup / name)
    (backup / ".manifest.json").write_text(json.dumps(["compare.csv", "difference_reward.png"]))
    capsys.readouterr()
    assert main(["compare", *train_runs, "--output-dir", str(out), "--no-plots"]) == 0
    assert (
        "removed 2 temporary file(s) left by an interrupted ebpo compare" in capsys.readouterr().out
    )
    assert sorted(p.name for p in out.iterdir()) == ["compare.csv", "compare.json"]


def test_a_failed_write_leaves_the_previous_report(train_runs, tmp_path, monkeypatch, capsys):
    out = tmp_path / "report"
    assert main(["compare", *train_runs, "--output-dir", str(out), "--no-plots"]) == 0
    before = snapshot(out)

    def full_disk(path):
        path.write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(
        "ebpo.commands.compare.plot_writers", lambda content: {"difference_x.png": full_disk}
    )
    capsys.readouterr()
    assert main(["compare", *train_runs, "--output-dir", str(out), "--metric", "reward"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "No space left" in err
    assert "difference_x.png" in err and str(out) in err  # the file in the folder, not ours
    assert snapshot(out) == before  # nothing hidden left either
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_the_output_folder_is_held_while_the_command_runs(train_runs, tmp_path, capsys):
    out = tmp_path / "held"
    with lock_run_dir(out):
        assert main(["compare", *train_runs, "--output-dir", str(out), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "in use by another ebpo process" in err
    assert not out.exists()


def test_a_trl_run_read_from_its_last_checkpoint_with_labels(tmp_path):
    write_trl_state(tmp_path / "a", [0.1, 0.2, 0.3])
    write_trl_state(tmp_path / "b", [0.2, 0.3, 0.5])
    (tmp_path / "a" / "checkpoint-1").mkdir()  # an older, emptier checkpoint is not the last
    out = tmp_path / "out"
    argv = ["compare", f"grpo@0={tmp_path / 'a'}", f"ebpo@0={tmp_path / 'b'}", "--no-plots"]
    assert main([*argv, "--output-dir", str(out)]) == 0
    content = json.loads((out / "compare.json").read_text())
    assert content["metrics"] == ["reward"]
    rows = content["comparisons"][0]["steps"]
    assert [r["mean_diff"] for r in rows] == pytest.approx([0.1, 0.1, 0.2])
    assert all(r["ci_low"] is None and r["pairs"] == 1 for r in rows)  # one pair: no interval
    assert content["multiplicity"]["intervals"] == 0
    assert "not separated (one pair gives no interval" in content["verdict"][0]


def test_a_link_to_the_output_folder_stays_a_link(train_runs, tmp_path, monkeypatch):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    monkeypatch.chdir(tmp_path)
    assert main(["compare", *train_runs, "--output-dir", "link", "--no-plots"]) == 0
    assert (tmp_path / "link").is_symlink() and (tmp_path / "real" / "compare.json").is_file()
    assert main(["compare", *train_runs, "--output-dir", ".", "--no-plots"]) == 2  # holds the runs


def test_help_says_what_a_run_is_and_where_the_docs_are(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["compare", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert stop.value.code == 0
    assert "ESTIMATOR@SEED=PATH" in out and "95% Student-t interval" in out
    assert "ebpo docs compare" in out and "--ignore KEY" in out


def _trl_pair(tmp_path, rewards):
    """TRL runs ``{estimator}{seed}`` (checkpoint states, labelled on the command line)."""
    argv = []
    for (estimator, seed), values in rewards.items():
        write_trl_state(tmp_path / f"{estimator}{seed}", values)
        argv.append(f"{estimator}@{seed}={tmp_path / f'{estimator}{seed}'}")
    return argv


@pytest.mark.parametrize(
    ("rewards", "verdict", "flags"),
    [
        ({("grpo", 0): [0.5, 0.5, 0.5], ("ebpo", 0): [0.5, 0.5, 0.5],
          ("grpo", 1): [0.5, 0.5, 0.5], ("ebpo", 1): [0.5, 0.5, 0.5]},
         "at step 3: +0: no verdict (reward never moved: 0.5 at every step of every run) "
         "[the training reward, not a held-out result]",
         {"identical_pairs": ["0", "1"], "never_moved": True}),
        ({("grpo", 0): [0.1, 0.2, 0.3], ("ebpo", 0): [0.1, 0.2, 0.3],
          ("grpo", 1): [0.1, 0.2, 0.3], ("ebpo", 1): [0.2, 0.3, 0.5]},
         "over 2 seed pairs: not separated (the interval covers 0) [the runs of seed(s) 0 are "
         "identical at all 3 common steps: the same run given twice?] [the training reward, not "
         "a held-out result]",
         {"identical_pairs": ["0"], "never_moved": False}),
    ],
    ids=["a metric that never moved", "one identical pair"],
)  # fmt: skip
def test_degenerate_data_and_the_training_reward_are_said(tmp_path, capsys, rewards, verdict,
                                                           flags):  # fmt: skip
    """The verdict (printed and in compare.json) says when the metric is the training reward
    (no evaluation metric), when pairs are identical and when the metric never moved."""
    out = tmp_path / "report"
    assert main(["compare", *_trl_pair(tmp_path, rewards), "--output-dir", str(out),
                 "--no-plots"]) == 0  # fmt: skip
    content = json.loads((out / "compare.json").read_text())
    assert content["metric_source"] == "training reward"
    assert content["metric_note"].startswith("compared reward, the training reward: no evaluation")
    assert content["comparisons"][0]["flags"] == flags
    (line,) = content["verdict"]
    assert line.endswith(verdict), line
    printed = capsys.readouterr().out
    assert f"verdict: {line}" in printed and content["metric_note"] in printed


def test_a_long_metric_name_gets_a_file_name_that_fits(tmp_path):
    """A 300-character metric (a file name of 313 bytes, over the 255 a file system takes):
    its PNGs' names are cut, with a hash that keeps two such metrics apart."""
    long = "eval_rewards/" + "x" * 300
    rewards = {("grpo", 0): [0.1, 0.2, 0.3], ("ebpo", 0): [0.2, 0.3, 0.5]}
    argv = _trl_pair(tmp_path, rewards)
    for folder in (tmp_path / "grpo0", tmp_path / "ebpo0"):
        (state,) = folder.glob("checkpoint-*/trainer_state.json")
        content = json.loads(state.read_text())
        for entry in content["log_history"]:
            if "reward" in entry:
                entry[long] = entry[long + "y"] = entry["reward"]
        state.write_text(json.dumps(content))
    out = tmp_path / "report"
    assert main(["compare", *argv, "--output-dir", str(out), "--metric", long,
                 "--metric", long + "y"]) == 0  # fmt: skip
    names = sorted(p.name for p in out.iterdir() if p.suffix == ".png")
    assert len(names) == 4 and all(len(n) <= 120 for n in names)
    assert json.loads((out / "compare.json").read_text())["metrics"] == [long, long + "y"]


def test_a_finished_run_is_read_from_the_top_level_trainer_state(tmp_path):
    """``ebpo grpo`` leaves trainer_state.json in output_dir at the end of training (TRL's own
    format): that whole history is read, not the last checkpoint's shorter one."""
    write_trl_state(tmp_path / "a", [0.1, 0.2, 0.3])  # checkpoint-3: steps 1..3
    full = [{"step": s, "reward": 0.1 * s} for s in range(1, 6)]
    (tmp_path / "a" / "trainer_state.json").write_text(
        json.dumps({"global_step": 5, "log_history": full})
    )
    run = read_run(f"grpo@0={tmp_path / 'a'}")
    assert run.files[0] == tmp_path / "a" / "trainer_state.json"
    assert run.metrics["reward"] == {s: pytest.approx(0.1 * s) for s in range(1, 6)}


def test_names_longer_than_the_file_system_takes_are_refused_before_writing(
    train_runs, tmp_path, monkeypatch, capsys
):
    """A file system that takes shorter names than the report's (eCryptfs: 143 bytes; here 40):
    one line naming the file and the limit, before anything is written."""
    limits = {"PC_NAME_MAX": 40, "PC_PATH_MAX": 4096}
    monkeypatch.setattr("ebpo.utils.output_folder.os.pathconf", lambda _, key: limits[key])
    out = tmp_path / "report"
    assert main(["compare", *train_runs, "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and not out.exists()
    assert "the report's file 'difference_heldout_pass_1.png' needs file names of 43" in err
    assert "longer than its file system takes (40)" in err
