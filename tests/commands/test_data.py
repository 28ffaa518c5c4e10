"""``ebpo data label`` / ``ebpo data order``: labels round-trip through JSONL and Parquet."""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pandas as pd
import pytest

from ebpo.cli import main
from ebpo.curriculum import is_contiguous
from ebpo.data.tables import read_table
from tests.curriculum.test_llm import serve_chat_completions
from tests.curriculum.test_topics import synthetic_problems


def run(argv: list[str]) -> int:
    # Through ebpo.cli.main: it turns a ValueError into one line on stderr and exit code 2.
    return main(["data", *argv])


def first_letter_topic(row: dict) -> str:
    return row["problem"][0]


@pytest.fixture
def math_jsonl(tmp_path):
    texts, topics = synthetic_problems(per_topic=8)
    rng = np.random.default_rng(0)
    records = [
        {
            "id": f"p{i}",
            "problem": text,
            "answer": str(i),
            "subject": topic.title(),
            "level": f"Level {int(rng.integers(1, 6))}",
            "meta": {"source": "synthetic", "n": i, "tags": ["x", "y"]},
        }
        for i, (text, topic) in enumerate(zip(texts, topics, strict=True))
    ]
    records[3]["level"] = "Level ?"
    path = tmp_path / "math.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path, records


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_label_writes_columns_that_round_trip(math_jsonl, tmp_path, suffix):
    source, records = math_jsonl
    out = tmp_path / f"labelled{suffix}"
    assert run(["label", str(source), "--output", str(out)]) == 0
    frame = read_table(str(out))
    # metadata topics, level difficulty (NaN for "Level ?"), every original column kept
    assert frame["topic"].tolist() == [r["subject"] for r in records]
    expected = [float(r["level"].split()[1]) if r["level"][-1].isdigit() else None for r in records]
    got = [None if pd.isna(d) else d for d in frame["difficulty"]]
    assert got == expected
    assert frame["id"].tolist() == [r["id"] for r in records]
    meta = frame["meta"].tolist()
    assert (
        meta[5]["source"] == "synthetic"
        and meta[5]["n"] == 5
        and list(meta[5]["tags"]) == ["x", "y"]
    )
    if suffix == ".jsonl":  # missing difficulty is written as null, which is valid JSON
        assert json.loads(out.read_text().splitlines()[3])["difficulty"] is None


def test_label_clusters_when_there_is_no_topic_column(math_jsonl, tmp_path, capsys):
    pytest.importorskip("sklearn")
    source, records = math_jsonl
    out = tmp_path / "clustered.parquet"
    argv = ["label", str(source), "-o", str(out), "--topic-column", "nope", "--topic", "auto"]
    assert run(argv) == 2  # an explicitly named column that is missing is an error, not a guess
    assert "'nope'" in capsys.readouterr().err

    stripped = tmp_path / "plain.jsonl"
    stripped.write_text("".join(json.dumps({"problem": r["problem"]}) + "\n" for r in records))
    assert run(["label", str(stripped), "-o", str(out), "--num-topics", "3", "--seed", "1"]) == 0
    assert "TF-IDF + KMeans" in capsys.readouterr().out
    topics = pd.read_parquet(out)["topic"].tolist()
    truth = [r["subject"] for r in records]
    assert len(set(zip(truth, topics, strict=True))) == 3
    assert (
        "difficulty" not in pd.read_parquet(out).columns
    )  # no level column, no pass rates asked for


def test_missing_topic_column_and_clustering_dependency_names_the_missing_piece(
    math_jsonl, tmp_path, capsys, monkeypatch
):
    source, records = math_jsonl
    stripped = tmp_path / "plain.jsonl"
    stripped.write_text("".join(json.dumps({"problem": r["problem"]}) + "\n" for r in records))
    monkeypatch.setitem(sys.modules, "sklearn", None)
    assert run(["label", str(stripped), "-o", str(tmp_path / "out.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "no 'topic' column and scikit-learn is not installed" in err
    assert "ebpo[cluster]" in err and "--topic-column" in err
    assert not (tmp_path / "out.jsonl").exists()


def test_label_tiers_and_user_function(math_jsonl, tmp_path):
    source, records = math_jsonl
    out = tmp_path / "tiers.jsonl"
    argv = ["label", str(source), "-o", str(out), "--topic-fn", f"{__name__}:first_letter_topic"]
    assert run([*argv, "--tiers", "3"]) == 2  # "Level ?" has no difficulty to tier
    clean = tmp_path / "clean.jsonl"
    clean.write_text("".join(json.dumps(r) + "\n" for r in records if r["level"] != "Level ?"))
    assert (
        run(
            [
                "label",
                str(clean),
                "-o",
                str(out),
                "--topic-fn",
                f"{__name__}:first_letter_topic",
                "--tiers",
                "3",
            ]
        )
        == 0
    )
    frame = read_table(str(out))
    assert set(frame["topic"]) == {"A", "S"}
    pairs = sorted(zip(frame["difficulty"], frame["difficulty_tier"], strict=True))
    assert all(a[1] <= b[1] for a, b in zip(pairs, pairs[1:], strict=False))
    assert set(frame["difficulty_tier"]) <= {0, 1, 2} and frame["difficulty_tier"].min() == 0


def test_llm_topics_are_off_unless_an_endpoint_is_named(math_jsonl, tmp_path, capsys):
    source, _ = math_jsonl
    assert run(["label", str(source), "-o", str(tmp_path / "x.jsonl"), "--topic", "llm"]) == 2
    assert "--llm-base-url" in capsys.readouterr().err
    assert (
        run(["label", str(source), "-o", str(tmp_path / "x.jsonl"), "--difficulty", "pass-rate"])
        == 2
    )
    assert "--model" in capsys.readouterr().err


def test_label_with_an_llm_endpoint(math_jsonl, tmp_path, monkeypatch):
    source, records = math_jsonl
    with serve_chat_completions() as (url, requests):
        _label_with_llm(source, records, tmp_path, monkeypatch, url, requests)


def _label_with_llm(source, records, tmp_path, monkeypatch, url, requests):
    monkeypatch.setenv("EBPO_TEST_KEY", "secret")
    out = tmp_path / "llm.jsonl"
    argv = ["label", str(source), "-o", str(out), "--topic", "llm", "--llm-base-url", url]
    assert run([*argv, "--llm-model", "judge", "--llm-api-key-env", "EBPO_TEST_KEY"]) == 0
    topics = read_table(str(out))["topic"].tolist()
    expected = {"Geometry": "Geometry & Trigonometry"}
    assert topics == [expected.get(r["subject"], "Probability & Statistics") for r in records]
    assert len(requests) == len(records) and requests[0][1] == "Bearer secret"


@pytest.mark.parametrize("order", ["topic", "difficulty", "topic_then_difficulty", "shuffle"])
def test_order_writes_a_sorted_permutation(math_jsonl, tmp_path, order):
    source, records = math_jsonl
    labelled = tmp_path / "labelled.jsonl"
    clean = tmp_path / "clean.jsonl"
    clean.write_text("".join(json.dumps(r) + "\n" for r in records if r["level"] != "Level ?"))
    assert run(["label", str(clean), "-o", str(labelled)]) == 0
    out = tmp_path / "sorted.parquet"
    assert run(["order", str(labelled), "--order", order, "-o", str(out), "--seed", "2"]) == 0
    frame = pd.read_parquet(out)
    original = read_table(str(labelled))
    assert sorted(frame["id"]) == sorted(original["id"])
    if "topic" in order:
        assert is_contiguous(frame["topic"].tolist())
    if order == "difficulty":
        assert frame["difficulty"].is_monotonic_increasing
    again = tmp_path / "again.parquet"
    run(["order", str(labelled), "--order", order, "-o", str(again), "--seed", "2"])
    assert pd.read_parquet(again)["id"].tolist() == frame["id"].tolist()


def test_bad_files_are_reported(tmp_path, capsys):
    assert (
        run(
            [
                "order",
                str(tmp_path / "none.jsonl"),
                "--order",
                "topic",
                "-o",
                str(tmp_path / "o.jsonl"),
            ]
        )
        == 2
    )
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "a.jsonl").write_text('{"prompt": "x"}\n')
    assert run(["label", str(tmp_path / "a.jsonl"), "-o", str(tmp_path / "o.csv")]) == 2
    assert ".jsonl or .parquet" in capsys.readouterr().err
    assert (
        run(
            [
                "order",
                str(tmp_path / "a.jsonl"),
                "--order",
                "topic",
                "-o",
                str(tmp_path / "o.jsonl"),
            ]
        )
        == 2
    )
    assert "needs a topic column" in capsys.readouterr().err


def test_pass_rate_difficulty_goes_through_ebpo_evaluation(math_jsonl, tmp_path, monkeypatch):
    """Wiring: every problem gets --samples samples from ebpo.evaluation; its pass rate and
    difficulty = 1 - pass rate land on its own row."""
    from ebpo import evaluation
    from ebpo.evaluation import models

    source, records = math_jsonl
    calls = {}

    def fake_sample_and_score(model, tokenizer, problems, n, **kwargs):
        calls.update(model=model, n=n, **kwargs)
        # problem i is solved by (i mod 5) of its n samples
        return [
            {"problem_id": p["id"], "score": float(j < int(p["id"]) % 5), "answer": p["answer"]}
            for p in problems
            for j in range(n)
        ]

    monkeypatch.setattr(models, "load_model_and_tokenizer", lambda name: (f"model:{name}", None))
    monkeypatch.setattr(evaluation, "sample_and_score", fake_sample_and_score)
    out = tmp_path / "rates.jsonl"
    argv = [
        "label",
        str(source),
        "-o",
        str(out),
        "--difficulty",
        "pass-rate",
        "--model",
        "m",
        "--samples",
        "4",
    ]
    assert run([*argv, "--temperature", "0.7", "--tiers", "2"]) == 0
    frame = read_table(str(out))
    expected = [min(i % 5, 4) / 4 for i in range(len(records))]
    assert frame["pass_rate"].tolist() == expected
    assert frame["difficulty"].tolist() == [1 - r for r in expected]
    assert calls["model"] == "model:m" and calls["n"] == 4 and calls["temperature"] == 0.7


# ---------------------------------------------------------------------- files are sacred (issue #11)
def _rows_with_a_non_finite_difficulty() -> str:
    rows = [
        {"prompt": "a", "answer": "1", "topic": "x", "difficulty": 1.0},
        {
            "prompt": "b",
            "answer": "2",
            "topic": "y",
            "difficulty": -math.inf,
        },  # json writes -Infinity
        {"prompt": "c", "answer": "3", "topic": "x", "difficulty": 2.0},
    ]
    return "".join(json.dumps(r) + "\n" for r in rows)


@pytest.mark.parametrize("command", [["order", "--order", "topic"], ["label"]])
def test_a_row_that_cannot_be_written_leaves_an_existing_output_as_it_was(
    tmp_path, capsys, command
):
    """The old writer opened the output with "w" and wrote row by row: a bad third row left the
    file truncated to the rows before it."""
    source = tmp_path / "in.jsonl"
    source.write_text(_rows_with_a_non_finite_difficulty())
    out = tmp_path / "out.jsonl"
    out.write_text("precious\n")
    assert run([command[0], str(source), *command[1:], "-o", str(out)]) == 2
    assert out.read_text() == "precious\n"
    err = capsys.readouterr().err
    assert (
        "input row 1 (counting from 0), column 'difficulty'" in err
        and "cannot be stored in JSON" in err
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "in.jsonl",
        "out.jsonl",
    ]  # no temporary left


def test_the_input_is_never_the_output_unless_in_place(tmp_path, capsys):
    source = tmp_path / "in.jsonl"
    text = _rows_with_a_non_finite_difficulty()
    source.write_text(text)
    for spelling in (str(source), str(tmp_path / "." / "in.jsonl")):
        assert run(["order", str(source), "--order", "topic", "-o", spelling]) == 2
        assert "pass --in-place" in capsys.readouterr().err
    # --in-place with a row JSON cannot hold: refused, the input keeps every byte
    assert run(["order", str(source), "--order", "topic", "--in-place"]) == 2
    assert "input row 1 (counting from 0), column 'difficulty'" in capsys.readouterr().err
    assert source.read_text() == text
    # --in-place on a good file replaces it with the sorted rows, through a rename
    good = "".join(
        json.dumps({"prompt": p, "answer": "1", "topic": t}) + "\n"
        for p, t in [("a", "y"), ("b", "x"), ("c", "y")]
    )
    source.write_text(good)
    inode = source.stat().st_ino
    assert run(["order", str(source), "--order", "topic", "--in-place"]) == 0
    assert [json.loads(line)["topic"] for line in source.read_text().splitlines()] == [
        "x",
        "y",
        "y",
    ]
    assert (
        source.stat().st_ino != inode
    )  # a new file renamed over the old one, not rewritten in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


def test_label_in_place_and_parquet_in_place(math_jsonl, tmp_path):
    source, records = math_jsonl
    table = tmp_path / "math.parquet"
    assert (
        run(["label", str(source), "-o", str(table), "--topic", "none", "--difficulty", "none"])
        == 0
    )
    assert (
        run(["label", str(table), "--in-place", "--topic-fn", f"{__name__}:first_letter_topic"])
        == 0
    )
    frame = pd.read_parquet(table)
    assert frame["topic"].tolist() == [r["problem"][0] for r in records]
    assert run(["order", str(table), "--in-place", "--order", "topic"]) == 0
    assert is_contiguous(pd.read_parquet(table)["topic"].tolist())


def raising_topic(row: dict) -> str:
    if row["id"] == "p2":
        raise KeyError("subfield")
    return "t"


def test_a_topic_function_that_raises_names_itself_and_the_row(math_jsonl, tmp_path, capsys):
    source, _ = math_jsonl
    out = tmp_path / "out.jsonl"
    assert (
        run(["label", str(source), "-o", str(out), "--topic-fn", f"{__name__}:raising_topic"]) == 2
    )
    err = capsys.readouterr().err.strip()
    assert err == (
        f"ebpo data label: error: the labelling function {__name__}:raising_topic raised KeyError on row 2: 'subfield'"
    )
    assert not out.exists()
