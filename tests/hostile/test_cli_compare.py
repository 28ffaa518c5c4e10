"""Hostile inputs for ``ebpo compare``: each row ends in one line on stderr naming the problem
(the run, the metric, the option), exit code 2, and nothing created or changed in the scratch
directory — the output folder included."""

from __future__ import annotations

import io
import json
import os
import pickle
import struct
import zipfile
from pathlib import Path

import pytest
import yaml

from ebpo.utils.file_sets import MARK
from tests.analysis.compare.verl_runs import write_trl_state, write_verl_run
from tests.hostile.harness import CliCase, check_cli_error, ids

R = r"^ebpo compare: error: "
OUT = ["--output-dir", "out"]
ACCURACY = {0: 0.1, 2: 0.2, 4: 0.3}


def verl(*runs: tuple[str, int], rewards=(0.1, 0.2, 0.3, 0.4), **settings):
    """Setup: verl runs ``{estimator}{seed}/`` with the same curves."""

    def setup(tmp: Path) -> None:
        for estimator, seed in runs:
            write_verl_run(tmp / f"{estimator}{seed}", estimator, seed, rewards, ACCURACY,
                           settings=settings if (estimator, seed) == runs[-1] else None)  # fmt: skip

    return setup


def then(*setups):
    def setup(tmp: Path) -> None:
        for step in setups:
            step(tmp)

    return setup


def trl(name: str, rewards=(0.1, 0.2, 0.3), first_step: int = 1):
    return lambda tmp: write_trl_state(tmp / name, rewards, first_step=first_step)


def cut_state(name: str):
    """The trainer_state.json of run ``name`` cut in half (a disk that filled up)."""

    def setup(tmp: Path) -> None:
        (state,) = (tmp / name).glob("checkpoint-*/trainer_state.json")
        state.write_text(state.read_text()[: len(state.read_text()) // 2])

    return setup


def replace_in_log(name: str, old: str, new: str):
    def setup(tmp: Path) -> None:
        log = tmp / name / "verl_metrics.jsonl"
        text = log.read_text()
        assert old in text
        log.write_text(text.replace(old, new, 1))

    return setup


# ---------------------------------------------------------------- training_args.bin, damaged
class Args:
    """A stand-in for TRL's arguments: ``seed`` and a field ``deep`` whose pickle is replaced."""

    def __init__(self):
        self.seed = 0
        self.deep = "DEEP"


_PLACEHOLDER = b"X\x04\x00\x00\x00DEEP"


def _put(k: int) -> bytes:
    return b"r" + struct.pack("<I", k)  # LONG_BINPUT, far above the pickler's own memo keys


def _get(k: int) -> bytes:
    return b"j" + struct.pack("<I", k)  # LONG_BINGET


def memo_bomb(levels: int) -> bytes:
    """A list holding the previous level twice, ``levels`` times: 2^levels values, few bytes."""
    out = b"](" * levels + b"]"  # each level's list, a MARK, ..., the innermost list
    for i in range(levels):  # the level below, memoised, appended twice to its list
        out += _put(100_000 + i) + _get(100_000 + i) + b"e"
    return out


def deep_list(depth: int) -> bytes:
    return b"]" * depth + b"a" * (depth - 1)


def args_pickle(field: bytes = _PLACEHOLDER) -> bytes:
    data = pickle.dumps(Args(), protocol=2)
    assert data.count(_PLACEHOLDER) == 1
    return data.replace(_PLACEHOLDER, field)


def args_zip(data: bytes, method: int = zipfile.ZIP_STORED) -> bytes:
    """A ``torch.save`` archive holding ``data`` as its data.pkl."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=method) as archive:
        archive.writestr("training_args/data.pkl", data)
        archive.writestr("training_args/version", "3\n")
    return buffer.getvalue()


def _patch_headers(raw: bytes, local: tuple[int, bytes], central: tuple[int, bytes]) -> bytes:
    """``raw`` with bytes at offsets of the first local header and central directory entry."""
    out = bytearray(raw)
    for signature, (offset, value) in ((b"PK\x03\x04", local), (b"PK\x01\x02", central)):
        start = raw.index(signature) + offset
        out[start : start + len(value)] = value
    return bytes(out)


def bad_crc() -> bytes:
    raw = bytearray(args_zip(args_pickle()))
    raw[raw.index(b"seed")] ^= 0x20  # the member's bytes, not its recorded CRC
    return bytes(raw)


def forged_size() -> bytes:
    """A member of 8 MiB of zeros, deflated to a few kB, whose headers say 300 bytes."""
    raw = args_zip(b"\0" * 8 * 2**20, zipfile.ZIP_DEFLATED)
    size = struct.pack("<I", 300)
    return _patch_headers(raw, (22, size), (24, size))


def broken_directory() -> bytes:
    raw = args_zip(args_pickle())
    return raw.replace(b"PK\x01\x02", b"PK\x09\x09", 1)


def encrypted() -> bytes:
    return _patch_headers(args_zip(args_pickle()), (6, b"\x01"), (8, b"\x01"))


def unknown_method() -> bytes:
    return _patch_headers(args_zip(args_pickle()), (8, b"\x63"), (10, b"\x63"))


def trl_with_args(name: str, content: bytes):
    """A TRL run ``name`` whose ``training_args.bin`` is ``content``."""

    def setup(tmp: Path) -> None:
        write_trl_state(tmp / name, (0.1, 0.2, 0.3))
        (tmp / name / "training_args.bin").write_bytes(content)

    return setup


def edit_state(name: str, edit):
    """The log_history of run ``name``'s trainer_state.json changed by ``edit(history)``."""

    def setup(tmp: Path) -> None:
        (state,) = (tmp / name).glob("checkpoint-*/trainer_state.json")
        content = json.loads(state.read_text())
        edit(content["log_history"])
        state.write_text(json.dumps(content))

    return setup


def verl_rewards(rewards: dict[str, tuple[float, ...]]):
    """verl runs ``{estimator}0/`` with their own training rewards."""

    def setup(tmp: Path) -> None:
        for estimator, values in rewards.items():
            write_verl_run(tmp / f"{estimator}0", estimator, 0, values, ACCURACY)

    return setup


def leftover(folder: str, files: dict[str, str]):
    """``folder`` holding the files ``files`` (relative path -> text), folders made on the way."""

    def setup(tmp: Path) -> None:
        for name, text in files.items():
            (tmp / folder / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / folder / name).write_text(text)

    return setup


def plain_trl_run(name: str):
    """What ``trl grpo`` with ``save_strategy: "no"`` leaves: the model and its arguments."""
    return leftover(name, {"config.json": "{}", "model.safetensors": "weights",
                           "training_args.bin": "args"})  # fmt: skip


def verl_seed(name: str, value: str):
    """Run ``name``'s overrides.yaml with ``data.seed=value`` added (as the user typed it)."""

    def setup(tmp: Path) -> None:
        overrides = tmp / name / "hydra" / ".hydra" / "overrides.yaml"
        lines = yaml.safe_load(overrides.read_text()) + [f"data.seed={value}"]
        overrides.write_text(yaml.safe_dump(lines))

    return setup


LABEL_IT = r"run 'a': its files do not say its seed \(cannot read training_args.bin: "
OLD = ".compare.0123456789abcdef.old"


PAIR = [("grpo", 0), ("ebpo", 0), ("grpo", 1), ("ebpo", 1)]
RUNS = ["grpo0", "ebpo0", "grpo1", "ebpo1"]
CASES = [
    CliCase("no runs", ["compare", *OUT], R + r"RUN: expected finished runs to compare, got none"),
    CliCase("missing run", ["compare", "nowhere", *OUT], R + r"run 'nowhere': no such file"),
    CliCase("one estimator only", ["compare", "grpo0", "grpo1", *OUT],
            R + r"RUN: .*every run is grpo: expected runs of another estimator",
            setup=verl(("grpo", 0), ("grpo", 1))),
    CliCase("baseline absent", ["compare", *RUNS, "--baseline", "rloo", *OUT],
            R + r"--baseline 'rloo': no run of it .*estimators: ebpo, grpo", setup=verl(*PAIR)),
    CliCase("no common steps", ["compare", "grpo@0=a", "ebpo@0=b", *OUT],
            R + r"RUN: .*no step at which every run logged 'reward' \(steps: ebpo seed 0 10\.\.12; "
            r"grpo seed 0 1\.\.3\)",
            setup=then(trl("a"), trl("b", first_step=10))),
    CliCase("baseline missing for a seed", ["compare", "grpo0", "ebpo0", "ebpo1", *OUT],
            R + r"RUN: .*ebpo has seed\(s\) 1 that the baseline grpo lacks",
            setup=verl(("grpo", 0), ("ebpo", 0), ("ebpo", 1))),
    CliCase("duplicated seeds", ["compare", *RUNS, "ebpo@1=ebpo0", *OUT],
            R + r"RUN: 'ebpo1/verl_metrics.jsonl' and 'ebpo0/verl_metrics.jsonl' are both ebpo "
            r"with seed 1", setup=verl(*PAIR)),
    CliCase("truncated trainer_state.json", ["compare", "grpo@0=a", "ebpo@0=b", *OUT],
            R + r"run 'b': 'b/checkpoint-3/trainer_state.json'.*(Expecting|Unterminated)",
            setup=then(trl("a"), trl("b"), cut_state("b"))),
    CliCase("NaN metric value", ["compare", *RUNS, *OUT],
            R + r"RUN: .*'ebpo1/verl_metrics.jsonl' logged 'val-core/math/acc/mean@1' as NaN or nothing "
            r"at step\(s\) 2",
            setup=then(verl(*PAIR), replace_in_log("ebpo1", '"val-core/math/acc/mean@1": 0.2',
                                                   '"val-core/math/acc/mean@1": NaN'))),
    CliCase("null metric value", ["compare", *RUNS, "--metric", "critic/score/mean", *OUT],
            R + r"RUN: .*'grpo0/verl_metrics.jsonl' logged 'critic/score/mean' as NaN or nothing at "
            r"step\(s\) 1",
            setup=then(verl(*PAIR), replace_in_log("grpo0", '"critic/score/mean": 0.1',
                                                   '"critic/score/mean": null'))),
    CliCase("metric not logged", ["compare", *RUNS, "--metric", "eval_reward", *OUT],
            R + r"--metric 'eval_reward': not logged by grpo0/verl_metrics.jsonl",
            setup=verl(*PAIR)),
    CliCase("output inside an input run", ["compare", *RUNS, "--output-dir", "ebpo1/report"],
            R + r"--output-dir '.*ebpo1/report' lies inside the input run", setup=verl(*PAIR)),
    CliCase("output holding the input runs", ["compare", "runs/grpo0", "runs/ebpo0",
                                               "--output-dir", "runs"],
            R + r"--output-dir 'runs' holds the input run",
            setup=lambda tmp: verl(("grpo", 0), ("ebpo", 0))(tmp / "runs")),
    CliCase("output folder of the user's files", ["compare", *RUNS, *OUT],
            R + r"--output-dir 'out' holds files that are not an ebpo compare report \(notes.txt\)",
            setup=then(verl(*PAIR), lambda tmp: (tmp / "out").mkdir(),
                       lambda tmp: (tmp / "out" / "notes.txt").write_text("mine"))),
    CliCase("seed unreadable", ["compare", "a", "ebpo@0=b", *OUT],
            R + r"run 'a': its files do not say its estimator; label it .* ESTIMATOR@SEED=a",
            setup=then(trl("a"), trl("b"))),
    CliCase("runs of two trainers", ["compare", "grpo0", "ebpo@0=b", *OUT],
            R + r"RUN: .*the runs are of different kinds \(trl, verl\)",
            setup=then(verl(("grpo", 0)), trl("b"))),
    CliCase("settings differ", ["compare", *RUNS, *OUT],
            R + r"RUN: .*differ in more than estimator and seed: actor_rollout_ref.actor.optim.lr "
            r"\(1e-05 vs 0.0001\); pass --ignore KEY",
            setup=verl(*PAIR, **{"actor_rollout_ref.actor.optim.lr": 1e-4})),
    CliCase("not a run", ["compare", "folder", "ebpo0", *OUT],
            R + r"run 'folder': not a finished TRL, verl or ebpo train run",
            setup=then(verl(("ebpo", 0)), lambda tmp: (tmp / "folder").mkdir())),
    CliCase("smooth 0", ["compare", *RUNS, "--smooth", "0", *OUT],
            R + r"--smooth must be a positive integer", setup=verl(*PAIR)),
    CliCase("metric all with others", ["compare", *RUNS, "--metric", "all", "--metric", "x", *OUT],
            R + r"--metric must name metrics, or be 'all' alone", setup=verl(*PAIR)),
    # training_args.bin: every damage ends in the one-line "label it", quickly (issue 46, 1-2)
    CliCase("args: one list 2^40 times through the memo", ["compare", "ebpo=a", "grpo@0=b", *OUT],
            R + LABEL_IT + r".*more than 100,000 values once its shared references are expanded",
            setup=then(trl_with_args("a", args_zip(args_pickle(memo_bomb(40)))), trl("b"))),
    CliCase("args: a 5,000-deep list", ["compare", "ebpo=a", "grpo@0=b", *OUT],
            R + LABEL_IT + r".*nested deeper than 64 levels",
            setup=then(trl_with_args("a", args_zip(args_pickle(deep_list(5000)))), trl("b"))),
    CliCase("args: bad CRC", ["compare", "ebpo=a", "grpo@0=b", *OUT],
            R + LABEL_IT + r"a damaged zip archive \(BadZipFile: Bad CRC-32",
            setup=then(trl_with_args("a", bad_crc()), trl("b"))),
    CliCase("args: a forged size", ["compare", "ebpo=a", "grpo@0=b", *OUT],
            R + LABEL_IT + r"a damaged zip archive \(BadZipFile",
            setup=then(trl_with_args("a", forged_size()), trl("b"))),
    CliCase("args: a broken central directory", ["compare", "ebpo=a", "grpo@0=b", *OUT],
            R + LABEL_IT + r"a damaged zip archive \(BadZipFile",
            setup=then(trl_with_args("a", broken_directory()), trl("b"))),
    CliCase("args: the encrypted flag", ["compare", "ebpo=a", "grpo@0=b", *OUT],
            R + LABEL_IT + r"a damaged zip archive \(RuntimeError: File .* is encrypted",
            setup=then(trl_with_args("a", encrypted()), trl("b"))),
    CliCase("args: an unknown compression method", ["compare", "ebpo=a", "grpo@0=b", *OUT],
            R + LABEL_IT + r"a damaged zip archive \(NotImplementedError",
            setup=then(trl_with_args("a", unknown_method()), trl("b"))),
    # logged histories (issue 46, 3-5)
    *(CliCase(f"step {text}", ["compare", *RUNS, *OUT],
              R + r"run 'ebpo1': 'ebpo1/verl_metrics.jsonl' line 3: step " + shown
              + r" is not a whole number",
              setup=then(verl(*PAIR), replace_in_log("ebpo1", '"step": 2', f'"step": {text}')))
      for text, shown in (("Infinity", "inf"), ("NaN", "nan"), ("1.7", "1.7"), ('"2"', "'2'"))),
    CliCase("a log line that is not UTF-8", ["compare", *RUNS, *OUT],
            R + r"run 'ebpo1': 'ebpo1/verl_metrics.jsonl' line 2 is not UTF-8 text",
            setup=then(verl(*PAIR), lambda tmp: (tmp / "ebpo1" / "verl_metrics.jsonl").write_bytes(
                b'{"step": 0, "data": {}}\n\xff\xfe\n'))),
    CliCase("text in the first log entry", ["compare", "grpo@0=a", "ebpo@0=b", *OUT],
            R + r"RUN: 'b' logged 'reward' as NaN or nothing at step\(s\) 1 ",
            setup=then(trl("a"), trl("b"),
                       edit_state("b", lambda history: history[0].update(reward="n/a")))),
    CliCase("a step logged twice with two values", ["compare", *RUNS, *OUT],
            R + r"RUN: 'ebpo1/verl_metrics.jsonl' \(ebpo seed 1\) logged "
            r"'val-core/math/acc/mean@1' twice at step 2 with different values \(0.2, then 0.9\)",
            setup=then(verl(*PAIR), lambda tmp: (tmp / "ebpo1" / "verl_metrics.jsonl").open("a")
                       .write('{"step": 2, "data": {"val-core/math/acc/mean@1": 0.9}}\n'))),
    CliCase("rewards near the largest float64", ["compare", "grpo0", "ebpo0", "--metric",
                                                 "critic/score/mean", *OUT],
            R + r"RUN: ebpo − grpo on 'critic/score/mean': the difference or its interval is "
            r"beyond the largest float64",
            setup=verl_rewards({"grpo": (1.7e308, 1.7e308), "ebpo": (-1.7e308, -1.7e308)})),
    # output folders (issue 46, 6-7)
    CliCase("output a symbolic link loop", ["compare", *RUNS, "--output-dir", "loop"],
            R + r"--output-dir 'loop' is, or lies below, a symbolic link loop",
            setup=then(verl(*PAIR), lambda tmp: os.symlink("loop", tmp / "loop"))),
    *(CliCase(f"output holding PNGs named like a report's{' '.join(['', *flag])}", ["compare", *RUNS, *OUT, *flag],
              R + r"--output-dir 'out' holds files that are not an ebpo compare report "
              r"\(curves_my_thesis.png, difference_old.png\)",
              setup=then(verl(*PAIR), leftover("out", {"curves_my_thesis.png": "mine",
                                                       "difference_old.png": "mine"})))
      for flag in ([], ["--no-plots"])),
    CliCase("output holding a compare.json that is not ours", ["compare", *RUNS, *OUT],
            R + r"--output-dir 'out' holds files that are not an ebpo compare report "
            r"\(compare.csv, compare.json, curves_x.png\)",
            setup=then(verl(*PAIR), leftover("out", {"compare.json": '{"files": ["compare.csv"]}',
                                                     "compare.csv": "mine",
                                                     "curves_x.png": "mine"}))),
    CliCase("output holding a user's folder named as our staging", ["compare", *RUNS, *OUT],
            R + rf"--output-dir 'out' holds files that are not an ebpo compare report \({OLD}\)",
            setup=then(verl(*PAIR), leftover("out", {f"{OLD}/notes.txt": "mine"}))),
    CliCase("a staging manifest of ours that is not JSON", ["compare", *RUNS, *OUT],
            R + rf"'.*/out/{OLD}/.manifest.json' cannot be read \(.*\): an interrupted write left "
            r"the previous files in .*; move those you want back into",
            setup=then(verl(*PAIR), leftover("out", {f"{OLD}/{MARK}": "{}",
                                                     f"{OLD}/.manifest.json": "{",
                                                     f"{OLD}/compare.csv": "old"}))),
    # a seed that is no number, --metric all with nothing to compare (issue 53, 6-7)
    *(CliCase(f"verl data.seed={shown}", ["compare", *RUNS, *OUT],
              R + r"run 'ebpo1': its files do not say its seed \(\.hydra/overrides.yaml sets "
              rf"data.seed to {message}, not a whole number of at most 20 digits\); label it",
              setup=then(verl(*PAIR), verl_seed("ebpo1", value)))
      for shown, value, message in (("²", "²", "'²'"), ("--1", "--1", "'--1'"),
                                    ("5,000 digits", "7" * 5000,
                                     r"'7{20}'\.\.\. \(5,000 characters\)"))),
    CliCase("two methods recorded as grpo", ["compare", "grpo0", "dapo0", "ebpo0", *OUT],
            R + r"RUN: 'grpo0/verl_metrics.jsonl' and 'dapo0/verl_metrics.jsonl' are both grpo "
            r"with seed 0: each estimator needs one run per seed; where they are two methods "
            r"that record one estimator \(the recipes dapo and entropy_mech train with grpo's "
            r"advantages\), label each: METHOD@SEED=PATH",
            setup=then(verl(("grpo", 0), ("ebpo", 0)),
                       lambda tmp: write_verl_run(tmp / "dapo0", "grpo", 0, (0.1, 0.2), ACCURACY))),
    CliCase("metric all with no metric comparable", ["compare", "grpo@0=a", "ebpo@0=b",
                                                     "--metric", "all", *OUT],
            R + r"--metric all: no metric that every run logged as a finite number at a step they "
            r"all share \(logged by every run: learning_rate, loss, reward\)",
            setup=then(trl("a"), trl("b", first_step=10))),
    # a TRL run that wrote no log (issue 45, 3)
    CliCase("a trl grpo run that saved no checkpoint", ["compare", "grpo@0=a", "ebpo@0=b", *OUT],
            R + r"run 'a': a TRL run without its log: TRL writes trainer_state.json .* only into "
            r"its checkpoints.*save_strategy \"steps\" or \"epoch\" \(not \"no\"\), or with "
            r"ebpo grpo", setup=then(plain_trl_run("a"), trl("b"))),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_hostile_compare_input(case, tmp_path, monkeypatch):
    check_cli_error(case, tmp_path, monkeypatch)


def test_the_runs_are_good_without_the_damage(tmp_path, monkeypatch):
    """The runs the table damages compare fine as they are: each refusal is the damage's."""
    monkeypatch.chdir(tmp_path)
    verl(*PAIR)(tmp_path)
    then(trl("a"), trl("b"))(tmp_path)
    from ebpo.cli import main

    assert main(["compare", *RUNS, *OUT, "--no-plots"]) == 0
    assert main(["compare", "grpo@0=a", "ebpo@0=b", "--output-dir", "trl", "--no-plots"]) == 0
    assert (tmp_path / "trl" / "compare.csv").is_file()
    # the same curves in every run, the training reward of TRL runs: said, not a verdict
    verl_report = json.loads((tmp_path / "out" / "compare.json").read_text())
    assert verl_report["metric_source"] == "evaluation"
    assert "no verdict (every seed pair is identical" in verl_report["verdict"][0]
    trl_report = json.loads((tmp_path / "trl" / "compare.json").read_text())
    assert trl_report["metric_source"] == "training reward"
    assert trl_report["verdict"][0].endswith("[the training reward, not a held-out result]")
