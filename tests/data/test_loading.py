"""ebpo.data.loading: load_dataset from local copies (the hub is offline in tests), its errors,
and the datasets.Dataset views."""

from __future__ import annotations

import json

import pytest

from ebpo.data import (
    DATASETS,
    SCHEMA,
    DatasetUnavailableError,
    load_dataset,
    loading,
    to_dataset,
    to_prompt_dataset,
    write_rows,
)
from ebpo.data.templates import dapo_prompt
from ebpo.integrations.trl.reward import math_reward
from tests.data.conftest import FIXTURES, fixture


def test_loading_by_path_detects_the_schema():
    for name in DATASETS:
        assert load_dataset(str(fixture(name))) == load_dataset(name, data_files=fixture(name))


def test_limit_and_as_dataset():
    rows = load_dataset("math-500", data_files=fixture("math-500"), limit=2)
    assert len(rows) == 2
    ds = load_dataset("math-500", data_files=fixture("math-500"), limit=2, as_dataset=True)
    assert ds.column_names == list(SCHEMA) and ds.to_list() == rows
    assert load_dataset("math-500", data_files=fixture("math-500"), limit=0) == []


def test_unified_files_and_write_round_trip(tmp_path):
    rows = load_dataset(str(fixture("unified")))
    assert rows[0] == {
        "id": "u1",
        "prompt": "What is $2+3$?",
        "answer": "5",
        "source": "toy",
        "topic": "Algebra & Number Theory",
        "difficulty": "0.9",
    }
    for suffix in (".jsonl", ".parquet"):
        path = write_rows(rows, tmp_path / f"copy{suffix}")
        assert load_dataset(str(path)) == rows
    # a unified copy of a registered benchmark keeps the benchmark as its source
    partial = tmp_path / "mine.jsonl"
    partial.write_text(json.dumps({"prompt": "1+1?", "answer": "2"}) + "\n")
    assert load_dataset("aime-2025", data_files=partial)[0]["source"] == "aime-2025"
    assert load_dataset(str(partial))[0] == {
        "id": "local-0",
        "prompt": "1+1?",
        "answer": "2",
        "source": "local",
        "topic": "",
        "difficulty": "",
    }


def test_data_dir_and_env_variable_supply_local_copies(tmp_path, monkeypatch):
    rows = load_dataset("aime-2025", data_dir=FIXTURES)
    assert rows == load_dataset("aime-2025", data_files=fixture("aime-2025"))
    monkeypatch.setenv("EBPO_DATA_DIR", str(FIXTURES))
    assert load_dataset("olympiadbench") == load_dataset(
        "olympiadbench", data_files=fixture("olympiadbench")
    )
    monkeypatch.setenv("EBPO_DATA_DIR", str(tmp_path))  # empty directory: falls through to the hub
    with pytest.raises(DatasetUnavailableError, match="EBPO_DATA_DIR"):
        load_dataset("olympiadbench")


def test_named_copy_without_optional_columns_uses_that_datasets_normaliser(tmp_path):
    path = tmp_path / "amc.jsonl"
    path.write_text(json.dumps({"question": "1+1?", "answer": 2.0}) + "\n")  # no id / url columns
    assert load_dataset("amc-2023", data_files=path)[0]["answer"] == "2"
    path.write_text(json.dumps({"query": "1+1?"}) + "\n")
    with pytest.raises(ValueError, match="'amc-2023' schema"):
        load_dataset("amc-2023", data_files=path)


def test_hub_unreachable_fails_fast_with_instructions(monkeypatch):
    # fast: one attempt of datasets' loader in offline mode, none when the probe finds no hub
    import datasets  # optional heavy dependency (ebpo[data])

    attempts = []
    real = datasets.load_dataset
    monkeypatch.setattr(
        datasets, "load_dataset", lambda *a, **k: (attempts.append(a), real(*a, **k))[1]
    )
    with pytest.raises(DatasetUnavailableError) as info:
        load_dataset("math-500")
    message = str(info.value)
    assert (
        "math-500" in message and "HuggingFaceH4/MATH-500" in message and "data_files=" in message
    )
    # without offline mode the loader probes the endpoint instead of letting datasets retry ~25 s
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(loading, "_hub_reachable", lambda timeout=3.0: False)
    assert len(attempts) == 1
    with pytest.raises(DatasetUnavailableError, match="olympiadbench.*OE_TO_maths_en_COMP"):
        load_dataset("olympiadbench")
    assert len(attempts) == 1  # refused on the probe's answer, before datasets tries


def test_bad_inputs(tmp_path):
    with pytest.raises(ValueError, match="name_or_path"):
        load_dataset("math-5000")
    with pytest.raises(ValueError, match="does not exist"):
        load_dataset("math-500", data_files=tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question_text": "?", "label": 1}) + "\n")
    with pytest.raises(ValueError, match="cannot recognise the columns"):
        load_dataset(str(bad))


def test_prompt_dataset_is_what_the_trl_reward_reads():
    rows = load_dataset("math-500", data_files=fixture("math-500"))
    ds = to_prompt_dataset(rows)
    assert ds[0]["prompt"] == [{"role": "user", "content": dapo_prompt(rows[0]["prompt"])}]
    assert ds[0]["problem"] == rows[0]["prompt"] and ds["answer"] == [r["answer"] for r in rows]
    assert to_prompt_dataset(rows, conversational=False)[1]["prompt"] == dapo_prompt(
        rows[1]["prompt"]
    )
    # the TRL reward reads the answer column of this dataset
    assert math_reward(
        prompts=ds["prompt"],
        completions=[f"Answer: {a}" for a in ds["answer"]],
        answer=ds["answer"],
    ) == [1.0] * len(rows)


def test_to_dataset_keeps_the_unified_columns_even_when_empty():
    rows = load_dataset("aime-2025", data_files=fixture("aime-2025"))
    ds = to_dataset(rows)
    assert ds.column_names == list(SCHEMA) and ds.to_list() == rows
    empty = to_dataset([])
    assert empty.column_names == list(SCHEMA) and len(empty) == 0


# --------------------------------------------------------------- malformed files (issue #11, item 9)
GOOD = json.dumps({"prompt": "1+1?", "answer": "2"})


@pytest.mark.parametrize(
    ("name", "content", "match"),
    [
        ("empty.jsonl", "", r"'[^']*empty\.jsonl' is empty: it holds no rows"),
        ("blank.jsonl", "\n  \n", r"is empty: it holds no rows"),
        (
            "bad.jsonl",
            f"{GOOD}\n\n{{oops\n",
            r"bad\.jsonl: line 3: not valid JSON \(Expecting property name",
        ),
        ("truncated.jsonl", f"{GOOD}\n{GOOD[:-5]}\n", r"truncated\.jsonl: line 2: not valid JSON"),
        (
            "list.jsonl",
            f"{GOOD}\n[1, 2]\n",
            r"list\.jsonl: line 2 is a JSON array, expected an object",
        ),
        (
            "string.jsonl",
            '"just text"\n',
            r"string\.jsonl: line 1 is a JSON string, expected an object",
        ),
        ("number.jsonl", "3\n", r"line 1 is a JSON number, expected an object"),
        (
            "array.json",
            f"[{GOOD}, null]",
            r"array\.json: item 1 of the array is a JSON null, expected an object",
        ),
        ("badarray.json", f"[{GOOD},\n", r"badarray\.json: line 2: not valid JSON"),
        (
            "columns.jsonl",
            json.dumps({"question_text": "?", "label": 1}) + "\n",
            r"data file '[^']*columns\.jsonl': cannot recognise the columns "
            r"\['label', 'question_text'\]: expected at least 'prompt' and 'answer'",
        ),
        (
            "noanswer.jsonl",
            f"{GOOD}\n" + json.dumps({"prompt": "x", "topic": "t"}) + "\n",
            r"noanswer\.jsonl: line 2 does not match the 'unified' schema: no column 'answer'",
        ),
        (
            "emptyanswer.jsonl",
            f"{GOOD}\n" + json.dumps({"prompt": "x", "answer": "  "}) + "\n",
            r"emptyanswer\.jsonl: line 2 has no 'answer'",
        ),
        (
            "nullprompt.jsonl",
            json.dumps({"prompt": None, "answer": None}) + "\n",
            r"line 1 has no 'prompt' and no 'answer'",
        ),
        (
            "nananswer.jsonl",
            '{"prompt": "x", "answer": NaN}\n',
            r"nananswer\.jsonl: line 1 has no 'answer'",
        ),
        (
            "latin1.jsonl",
            b'{"prompt": "caf\xe9", "answer": "1"}\n',
            r"latin1\.jsonl' is not UTF-8 text",
        ),
        ("text.parquet", "not parquet\n", r"text\.parquet' is not a readable Parquet file"),
    ],
)
def test_malformed_files_raise_one_value_error_naming_file_and_line(tmp_path, name, content, match):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ValueError, match=match) as info:
        load_dataset(str(path))
    assert "\n" not in str(info.value)
    with pytest.raises(
        ValueError
    ) as again:  # through a registered name's local copy: the file is named too
        load_dataset("aime-2025", data_files=path)
    assert name in str(again.value) and "\n" not in str(again.value)


def test_empty_parquet_directory_and_limits(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.table({"prompt": pa.array([], pa.string()), "answer": pa.array([], pa.string())}),
        tmp_path / "e.parquet",
    )
    with pytest.raises(ValueError, match=r"e\.parquet' is empty"):
        load_dataset(str(tmp_path / "e.parquet"))
    (tmp_path / "d.jsonl").mkdir()
    with pytest.raises(ValueError, match=r"d\.jsonl' is a directory"):
        load_dataset(str(tmp_path / "d.jsonl"))
    with pytest.raises(ValueError, match="limit must be a non-negative integer"):
        load_dataset(str(fixture("unified")), limit=-1)
    with pytest.raises(ValueError, match=r"data_dir '[^']*nowhere' is not a directory"):
        load_dataset("aime-2025", data_dir=tmp_path / "nowhere")


def test_lenient_where_it_is_safe(tmp_path):
    """A byte-order mark, blank lines, a JSON array in .json, and an optional column left out of
    the first rows all load; the columns are those of every row, not the first one's."""
    rows = [
        {"prompt": "1+1?", "answer": "2"},
        {"prompt": "2+2?", "answer": 4, "topic": "arith", "id": "q2"},
    ]
    path = tmp_path / "mixed.jsonl"
    path.write_text(
        "\ufeff" + json.dumps(rows[0]) + "\n\n" + json.dumps(rows[1]) + "\n", encoding="utf-8"
    )
    loaded = load_dataset(str(path))
    assert [(r["prompt"], r["answer"], r["topic"], r["id"]) for r in loaded] == [
        ("1+1?", "2", "", "local-0"),
        ("2+2?", "4", "arith", "q2"),
    ]
    array = tmp_path / "rows.json"
    array.write_text(json.dumps(rows))
    assert load_dataset(str(array)) == loaded
    # a hub-schema copy whose first row lacks an optional column is still recognised
    amc = tmp_path / "amc.jsonl"
    amc.write_text(
        json.dumps({"question": "1+1?", "answer": 2.0})
        + "\n"
        + json.dumps({"id": 7, "question": "3?", "answer": 3, "url": "u"})
        + "\n"
    )
    assert [r["id"] for r in load_dataset(str(amc))] == ["amc-2023-0", "amc-2023-7"]
