"""``ebpo replay``: the command on rollout dumps written by verl (tests/fixtures/replay) and on a
table of another trainer: its files, their schema, the verdict, the estimator option. Bad inputs
are in tests/hostile/test_cli_replay.py; the equality of the replayed advantages with the
estimators run step by step is in tests/analysis/replay/test_verl_dumps.py."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ebpo.analysis.replay.engine import DEFAULT_ESTIMATORS, ESTIMATOR_FIELDS, INPUT_FIELDS
from ebpo.analysis.replay.plots import PLOTS
from ebpo.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "replay"
#: the fixture: 3 steps of 6 groups of 4, 2 all-fail and 1 all-pass groups a step
STEPS, GROUPS, FAIL, PASS = 3, 6, 2, 1


def replay(*argv: str) -> int:
    return main(["replay", *argv])


def test_replay_of_a_verl_dump_writes_every_number_and_a_verdict(tmp_path, capsys):
    out = tmp_path / "out"
    assert replay(str(FIXTURES / "v1"), "--output-dir", str(out)) == 0
    printed = capsys.readouterr().out
    silent = STEPS * (FAIL + PASS) * 4
    assert (
        f"verdict: GRPO gave no signal to {silent} of {STEPS * GROUPS * 4} responses (50.0%; "
        f"{STEPS * FAIL} all-fail and {STEPS * PASS} all-pass groups of {STEPS * GROUPS}); ebpo "
        f"would have given {silent} of them a signal (100.0%)." in printed
    )
    content = json.loads((out / "replay.json").read_text())
    assert (content["format"], content["format_version"]) == ("ebpo-replay", 1)
    assert list(content["estimators"]) == list(DEFAULT_ESTIMATORS)
    assert content["estimators"]["ebpo_within"]["options"] == {
        "within_variance": "within",
        "tau2_mode": "corrected",
    }
    assert content["estimators"]["ebpo"]["final_state"]["estimator"] == "ebpo"
    assert content["inputs"]["format"] == "verl" and content["inputs"]["key_columns"] == ["uid"]
    steps = content["steps"]
    assert [s["step"] for s in steps] == [1, 2, 10]
    for record in steps:
        assert set(INPUT_FIELDS) <= set(record)
        assert (record["groups"], record["all_fail_groups"], record["all_pass_groups"]) == (
            GROUPS,
            FAIL,
            PASS,
        )
        assert (record["padding_rows"], record["merged_outputs"]) == (2, 1)
        for values in record["estimators"].values():
            assert set(values) == set(ESTIMATOR_FIELDS)
    summary = content["summary"]
    assert summary["responses"] == sum(s["responses"] for s in steps) == STEPS * GROUPS * 4
    assert summary["estimators"]["grpo"]["zero_signal_groups"] == STEPS * (FAIL + PASS)
    assert summary["estimators"]["ebpo"]["signal_where_grpo_has_none"] == silent
    # all-fail groups are pushed down, all-pass groups up, by every estimator with shrinkage
    for name in ("ebpo", "ebpo_within", "jspo_plus_plus"):
        values = summary["estimators"][name]
        assert values["all_fail_advantage_mean"] < 0 < values["all_pass_advantage_mean"]
        assert values["shrinkage_mean"] > 0
    assert content["verdict"] in printed
    with open(out / "replay.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == STEPS * len(DEFAULT_ESTIMATORS)
    assert {(r["step"], r["estimator"]) for r in rows} == {
        (str(s), e) for s in (1, 2, 10) for e in DEFAULT_ESTIMATORS
    }
    first = next(r for r in rows if r["estimator"] == "ebpo" and r["step"] == "1")
    assert float(first["shrinkage_mean"]) == steps[0]["estimators"]["ebpo"]["shrinkage_mean"]
    for name in PLOTS:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_replay_is_reproducible_and_a_rerun_replaces_the_report(tmp_path):
    out = tmp_path / "out"
    assert replay(str(FIXTURES / "v1"), "--output-dir", str(out), "--no-plots") == 0
    first = (out / "replay.json").read_text()
    (out / "replay.json").chmod(0o600)
    assert replay(str(FIXTURES / "v1"), "--output-dir", str(out), "--no-plots") == 0
    assert (out / "replay.json").read_text() == first
    assert (out / "replay.json").stat().st_mode & 0o777 == 0o600  # kept by the atomic write
    assert not any((out / name).exists() for name in PLOTS)


def test_a_table_of_another_trainer_gives_the_numbers_of_the_dump(tmp_path):
    """The v1 fixture's rows as a TRL-like Parquet table (one row per response; the prompt as a
    chat message list; the reward function's column) replay to the same summary."""
    rows = []
    for path in sorted((FIXTURES / "legacy").glob("*.jsonl"), key=lambda p: int(p.stem)):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            rows.append(
                {
                    "step": row["step"],
                    "prompt": [{"role": "user", "content": row["input"]}],
                    "completion": row["output"],
                    "accuracy_reward": row["score"],
                }
            )
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "completions_00001.parquet")
    argv = ["--output-dir", str(tmp_path / "t"), "--no-plots", "--reward-column", "accuracy_reward"]
    assert replay(str(tmp_path / "completions_00001.parquet"), *argv) == 0
    assert replay(str(FIXTURES / "v1"), "--output-dir", str(tmp_path / "v"), "--no-plots") == 0
    table, dump = (json.loads((tmp_path / d / "replay.json").read_text()) for d in ("t", "v"))
    assert table["inputs"]["format"] == "table"
    for key in ("responses", "groups", "all_fail_groups", "all_pass_groups", "reward_mean"):
        assert table["summary"][key] == dump["summary"][key]
    for name in DEFAULT_ESTIMATORS:
        for key in ("nonzero_advantage_responses", "signal_where_grpo_has_none"):
            assert (
                table["summary"]["estimators"][name][key]
                == dump["summary"]["estimators"][name][key]
            )


def test_the_estimators_option_takes_variants_and_always_adds_grpo(tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["--output-dir", str(out), "--no-plots", "--estimators", "rloo,ebpo_batch"]
    assert replay(str(FIXTURES / "legacy"), *argv) == 0
    content = json.loads((out / "replay.json").read_text())
    assert list(content["estimators"]) == ["grpo", "rloo", "ebpo_batch"]
    assert content["estimators"]["ebpo_batch"]["options"]["prior"] == "batch"
    assert "ebpo_batch would have given" in capsys.readouterr().out  # the EBPO-family estimator
    assert (
        replay(
            str(FIXTURES / "legacy"), "--output-dir", str(out), "--estimators", "grpo", "--no-plots"
        )
        == 0
    )
    verdict = json.loads((out / "replay.json").read_text())["verdict"]
    assert verdict.endswith("groups of 18).") and "would have" not in verdict
