"""`ebpo verl prepare-data` writes verl parquet files in the order each recipe reads."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

pytestmark = pytest.mark.verl

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "datasets"
EVAL = {
    "math-500": "math-500.jsonl",
    "aime-2024": "aime-2024.parquet",
    "aime-2025": "aime-2025.jsonl",
    "amc-2023": "amc-2023.jsonl",
    "olympiadbench": "olympiadbench.parquet",
}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    pd = pytest.importorskip("pandas")
    from ebpo.cli import main
    from ebpo.data import load_dataset

    out = tmp_path_factory.mktemp("verl_data")
    rows = load_dataset("dapo-math-17k", data_files=FIXTURES / "dapo-math-17k.parquet")
    # External labels as the paper's LLM labeller / 16-sample pass-rate run would give them.
    labels = [
        {
            "id": row["id"],
            "topic": ["Geometry", "Algebra"][i % 2],
            "pass_rate": [0.9, 0.1, 0.5, 0.3][i % 4],
        }
        for i, row in enumerate(rows)
    ]
    labels_file = out / "labels.jsonl"
    labels_file.write_text("\n".join(json.dumps(r) for r in labels))
    argv = [
        "verl",
        "prepare-data",
        f"--out-dir={out}",
        f"--train-file={FIXTURES / 'dapo-math-17k.parquet'}",
        f"--labels={labels_file}",
    ]
    for name, file in EVAL.items():
        argv.append(f"--eval-file={name}={FIXTURES / file}")
    assert main(argv) == 0
    return out, {r["id"]: r for r in labels}, pd


def test_training_orders(prepared):
    out, labels, pd = prepared
    orders = ("file", "shuffle", "topic", "difficulty")
    frames = {o: pd.read_parquet(out / f"dapo_math_17k.{o}.parquet") for o in orders}
    ids = {o: [e["id"] for e in f["extra_info"]] for o, f in frames.items()}
    assert all(sorted(ids[o]) == sorted(labels) for o in orders)
    assert ids["file"] == list(labels)  # the dataset's own order (naive EBPO), untouched
    assert ids["shuffle"] != ids["file"]
    topic = list(frames["topic"]["topic"])
    assert topic == sorted(topic)  # contiguous blocks in label order
    assert topic == [labels[i]["topic"] for i in ids["topic"]]
    difficulty = list(frames["difficulty"]["difficulty"])
    assert difficulty == sorted(difficulty)  # easy -> hard
    assert difficulty == pytest.approx([1 - labels[i]["pass_rate"] for i in ids["difficulty"]])
    row = frames["topic"].iloc[0]
    assert row["reward_model"]["ground_truth"] and row["prompt"][0]["role"] == "user"
    assert "Answer:" in row["prompt"][0]["content"]  # DAPO template
    assert row["extra_info"]["topic"] == row["topic"]


def test_eval_sets_and_recipe_finds_them(prepared):
    from ebpo.commands.verl.launcher import dry_run, with_defaults
    from ebpo.integrations.verl.recipes import recipe_overrides

    out, _, pd = prepared
    math500 = pd.read_parquet(out / "math500.parquet")
    assert len(math500) > 0 and not any(math.isnan(x) for x in math500["difficulty"])  # MATH levels
    for recipe in ("ebpo", "ebpo_topic", "ebpo_diff", "grpo"):
        _, notes = dry_run(with_defaults(recipe_overrides(recipe, data_dir=str(out))))
        assert not any("not found" in note for note in notes), notes


def test_missing_labels_skip_the_curriculum_file_and_say_so(tmp_path, capsys):
    from ebpo.cli import main

    argv = [
        "verl",
        "prepare-data",
        f"--out-dir={tmp_path}",
        f"--train-file={FIXTURES / 'dapo-math-17k.parquet'}",
        "--topic-method=none",
        "--eval",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert (
        "skipped dapo_math_17k.topic.parquet" in out
        and "skipped dapo_math_17k.difficulty.parquet" in out
    )
    assert (tmp_path / "dapo_math_17k.shuffle.parquet").exists()
    assert not (tmp_path / "dapo_math_17k.topic.parquet").exists()
    assert main(["verl", "prepare-data", f"--out-dir={tmp_path}", "--eval-file=gsm8k=x.jsonl"]) == 2


def _argv(out, *extra):
    return [
        "verl",
        "prepare-data",
        f"--out-dir={out}",
        f"--train-file={FIXTURES / 'dapo-math-17k.parquet'}",
        "--topic-method=none",
        *extra,
    ]


def _tree(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_a_failure_after_loading_the_training_set_writes_nothing(tmp_path, monkeypatch):
    """The training set loads, an evaluation set does not (no hub): neither --out-dir nor a
    staging directory nor a partial file is left, and an existing --out-dir keeps its files."""
    from ebpo.cli import main

    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there: offline
    monkeypatch.setenv("EBPO_DATA_DIR", "")
    fresh = tmp_path / "fresh" / "data"
    assert main(_argv(fresh, "--eval", "aime-2024")) == 2
    assert _tree(tmp_path) == []

    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "dapo_math_17k.file.parquet").write_bytes(b"previous run")
    assert main(_argv(kept, "--eval", "aime-2024")) == 2
    assert _tree(tmp_path) == ["kept", "kept/dapo_math_17k.file.parquet"]
    assert (kept / "dapo_math_17k.file.parquet").read_bytes() == b"previous run"


def test_an_error_while_writing_leaves_no_partial_file(tmp_path, monkeypatch):
    from ebpo.cli import main
    from ebpo.integrations.verl import data_prep

    real_write = data_prep.write_rows
    written = []

    def write_then_fail(rows, path):
        if written:
            raise OSError("disk full")
        written.append(path)
        return real_write(rows, path)

    monkeypatch.setattr(data_prep, "write_rows", write_then_fail)
    out = tmp_path / "out"
    with pytest.raises(OSError, match="disk full"):
        main(_argv(out, "--eval"))
    assert len(written) == 1 and _tree(tmp_path) == []  # the first file was written, then removed


def test_verl_rows_are_in_the_dapo_hub_layout(tmp_path):
    from ebpo.data import load_dataset, write_rows
    from ebpo.data.templates import dapo_prompt
    from ebpo.integrations.verl.data_prep import to_verl_rows

    rows = load_dataset("math-500", data_files=FIXTURES / "math-500.jsonl")
    verl = to_verl_rows(rows, split="test")
    assert verl[0]["reward_model"] == {"ground_truth": rows[0]["answer"], "style": "rule"}
    assert verl[0]["prompt"] == [{"role": "user", "content": dapo_prompt(rows[0]["prompt"])}]
    assert verl[1]["data_source"] == "math-500" and verl[1]["ability"] == "MATH"
    assert verl[1]["extra_info"] == {
        "index": 1,
        "split": "test",
        "id": rows[1]["id"],
        "topic": rows[1]["topic"],
        "difficulty": rows[1]["difficulty"],
    }
    assert (
        to_verl_rows(rows, data_source="mine", template="raw")[0]["prompt"][0]["content"]
        == rows[0]["prompt"]
    )
    # verl rows are in the DAPO hub layout, so they load back through the DAPO normaliser
    path = write_rows(verl, tmp_path / "verl.parquet")
    back = load_dataset(str(path), schema="dapo-math-17k")
    assert [(r["prompt"], r["answer"]) for r in back] == [(r["prompt"], r["answer"]) for r in rows]


@pytest.mark.parametrize(
    ("labels", "limited", "match"),
    [
        ({"a": {}, "b": {}, "c": {}}, False, None),
        ({"a": {}, "b": {}, "c": {}, "z": {}}, True, None),  # --limit: the file covers more rows
        ({"x": {}, "y": {}}, False, r"none of its 2 id\(s\) matches one of the 3 training rows"),
        ({"x": {}}, True, r"none of its 1 id\(s\) matches"),
        ({}, False, r"none of its 0 id\(s\) matches one of the 3 training rows' ids; the ids"),
        ({"a": {}, "c": {}}, False, r"1 of the 3 training rows have no record \(first: 'b'\)"),
        ({"a": {}, "b": {}, "c": {}, "z": {}}, False, r"1 of its 4 id\(s\) match no training row"),
    ],
)
def test_label_ids_must_label_exactly_the_rows(labels, limited, match):
    from ebpo.integrations.verl.data_prep import check_label_ids

    if match is None:
        check_label_ids(labels, ["a", "b", "c"], source="f.jsonl", limited=limited)
    else:
        with pytest.raises(ValueError, match=r"^--labels f\.jsonl: " + match):
            check_label_ids(labels, ["a", "b", "c"], source="f.jsonl", limited=limited)


def test_labels_without_difficulty_say_how_many_records_have_it(tmp_path, capsys):
    """A labels file that labels every row with a topic but only some with a pass rate: the
    difficulty file is skipped, and the note counts what the file gave (not "pass --labels")."""
    from ebpo.cli import main
    from ebpo.data import load_dataset

    rows = load_dataset("dapo-math-17k", data_files=FIXTURES / "dapo-math-17k.parquet")
    labels = [{"id": row["id"], "topic": f"t{i % 2}"} for i, row in enumerate(rows)]
    labels[0]["pass_rate"] = 0.5
    labels_file = tmp_path / "labels.jsonl"
    labels_file.write_text("\n".join(json.dumps(r) for r in labels))
    out = tmp_path / "out"
    assert main([*_argv(out, f"--labels={labels_file}"), "--eval"]) == 0
    printed = capsys.readouterr().out
    assert (
        f"skipped dapo_math_17k.difficulty.parquet: no difficulty (--labels {labels_file} has "
        f"pass_rate or difficulty on 1 of {len(rows)} records; give every record one)"
    ) in printed
    assert (out / "dapo_math_17k.topic.parquet").exists()
