"""ebpo.data.datasets: the registry's normalisers on fixture files that reproduce each dataset's hub
schema, and the unified schema."""

from __future__ import annotations

import json

import pytest

from ebpo.data import (
    DATASETS,
    SCHEMA,
    detect_schema,
    load_dataset,
    normalise_rows,
    read_rows,
)
from ebpo.data.templates import dapo_prompt
from tests.data.conftest import fixture


def test_every_registered_dataset_has_a_fixture_in_its_hub_schema():
    for name, spec in DATASETS.items():
        raw = read_rows(fixture(name))
        assert set(spec.columns) <= set(raw[0]), name
        assert detect_schema(raw[0]) == name


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_normalised_rows_follow_the_schema_and_the_source(name):
    raw = read_rows(fixture(name))
    rows = load_dataset(name, data_files=fixture(name))
    assert rows and all(list(row) == list(SCHEMA) for row in rows)
    assert all(isinstance(v, str) for row in rows for v in row.values())
    assert all(row["source"] == name and row["prompt"] and row["answer"] for row in rows)
    assert len({row["id"] for row in rows}) == len(rows)
    # Every normalised answer is the hub answer, read independently here.
    expected = {
        "dapo-math-17k": lambda r: r["reward_model"]["ground_truth"],
        "math-500": lambda r: r["answer"],
        "aime-2024": lambda r: r["answer"],
        "aime-2025": lambda r: r["answer"],
        "amc-2023": lambda r: str(int(r["answer"])),
        "olympiadbench": lambda r: ", ".join(a.strip("$") for a in r["final_answer"]),
    }[name]
    unique_raw = {}
    for r in raw:  # dapo ships repeats; keep the first of each problem
        unique_raw.setdefault(
            json.dumps(r.get("prompt", r.get("problem", r.get("question"))), sort_keys=True), r
        )
    assert [row["answer"] for row in rows] == [expected(r) for r in unique_raw.values()]


def test_dapo_prompt_is_the_bare_problem_and_template_round_trips():
    raw = read_rows(fixture("dapo-math-17k"))
    rows = load_dataset("dapo-math-17k", data_files=fixture("dapo-math-17k"))
    assert len(raw) == 4 and len(rows) == 3  # one repeated row dropped
    assert (
        len(load_dataset("dapo-math-17k", data_files=fixture("dapo-math-17k"), dedupe=False)) == 4
    )
    for row, r in zip(rows, raw, strict=False):
        assert "Answer:" not in row["prompt"]
        assert dapo_prompt(row["prompt"]) == r["prompt"][0]["content"]
        assert row["id"] == r["extra_info"]["index"]


def test_math500_and_olympiadbench_topics_and_difficulties():
    m500 = load_dataset("math-500", data_files=fixture("math-500"))
    raw = read_rows(fixture("math-500"))
    assert [(r["topic"], r["difficulty"], r["id"]) for r in m500] == [
        (r["subject"], str(r["level"]), r["unique_id"]) for r in raw
    ]
    ob = load_dataset("olympiadbench", data_files=fixture("olympiadbench"))
    assert {r["topic"] for r in ob} <= {"Algebra", "Combinatorics", "Geometry", "Number Theory"}
    assert all(r["difficulty"] == "Competition" for r in ob)
    with_context = [r for r in read_rows(fixture("olympiadbench")) if r["context"]]
    assert with_context and any(r["prompt"].startswith(with_context[0]["context"]) for r in ob)


def test_aime_and_amc_rows_are_plain_text_free_of_empty_topics():
    for name in ("aime-2024", "aime-2025", "amc-2023"):
        rows = load_dataset(name, data_files=fixture(name))
        assert all(r["topic"] == "" and r["difficulty"] == "" for r in rows)
        assert all(r["id"].startswith(name) for r in rows)


def test_bad_schemas():
    with pytest.raises(ValueError, match="'math-500' schema"):
        normalise_rows([{"problem": "x"}], "math-500")
    with pytest.raises(ValueError, match="schema must be"):
        normalise_rows([], "gsm8k")
    with pytest.raises(ValueError, match="cannot recognise the columns"):
        detect_schema(["question_text", "label"])
    with pytest.raises(ValueError, match="limit must be a non-negative integer"):
        normalise_rows([], "unified", limit=-1)


def test_normalise_rows_dedupes_limits_and_names_the_row():
    rows = [
        {"prompt": "a", "answer": "1"},
        {"prompt": "a", "answer": "1"},
        {"prompt": "b", "answer": "$2$"},
    ]
    assert [r["prompt"] for r in normalise_rows(rows, "unified")] == [
        "a",
        "a",
        "b",
    ]  # unified: no dedupe
    assert [r["prompt"] for r in normalise_rows(rows, "unified", dedupe=True)] == ["a", "b"]
    assert [r["answer"] for r in normalise_rows(rows, "unified", limit=2)] == ["1", "1"]
    assert normalise_rows(rows, "unified")[2]["answer"] == "2"  # $...$ stripped
    with pytest.raises(ValueError, match=r"^file\.jsonl: line 7 has no 'answer'"):
        normalise_rows(
            [{"prompt": "x", "answer": ""}], "unified", where=lambda i: "file.jsonl: line 7"
        )


def test_detect_schema_prefers_the_most_specific_registry_entry():
    assert detect_schema(DATASETS["aime-2024"].columns) == "aime-2024"  # aime-2025's are a subset
    assert detect_schema(DATASETS["aime-2025"].columns) == "aime-2025"
    assert detect_schema(["prompt", "answer", "extra"]) == "unified"
