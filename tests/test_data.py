"""ebpo.data and ebpo.data.templates on fixture files that reproduce each dataset's hub schema."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from ebpo import data
from ebpo.data import (
    DATASETS,
    SCHEMA,
    DatasetUnavailableError,
    detect_schema,
    load_dataset,
    normalise_rows,
    read_rows,
    write_rows,
)
from ebpo.data.templates import (
    apply_template,
    build_messages,
    dapo_prompt,
    render_prompt,
    strip_dapo_template,
)

FIXTURES = Path(__file__).parent / "fixtures" / "datasets"


def fixture(name: str) -> Path:
    (path,) = [p for p in FIXTURES.iterdir() if p.stem == name]
    return path


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # huggingface_hub and datasets read the variable once, at import; another test may have
    # imported them before it was set, so set their constants too.
    import datasets
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)


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
        unique_raw.setdefault(json.dumps(r.get("prompt", r.get("problem", r.get("question"))), sort_keys=True), r)
    assert [row["answer"] for row in rows] == [expected(r) for r in unique_raw.values()]


def test_loading_by_path_detects_the_schema():
    for name in DATASETS:
        assert load_dataset(str(fixture(name))) == load_dataset(name, data_files=fixture(name))


def test_dapo_prompt_is_the_bare_problem_and_template_round_trips():
    raw = read_rows(fixture("dapo-math-17k"))
    rows = load_dataset("dapo-math-17k", data_files=fixture("dapo-math-17k"))
    assert len(raw) == 4 and len(rows) == 3  # one repeated row dropped
    assert len(load_dataset("dapo-math-17k", data_files=fixture("dapo-math-17k"), dedupe=False)) == 4
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


def test_limit_and_as_dataset():
    rows = load_dataset("math-500", data_files=fixture("math-500"), limit=2)
    assert len(rows) == 2
    ds = load_dataset("math-500", data_files=fixture("math-500"), limit=2, as_dataset=True)
    assert ds.column_names == list(SCHEMA) and ds.to_list() == rows
    assert load_dataset("math-500", data_files=fixture("math-500"), limit=0) == []


def test_unified_files_and_write_round_trip(tmp_path):
    rows = load_dataset(str(fixture("unified")))
    assert rows[0] == {"id": "u1", "prompt": "What is $2+3$?", "answer": "5", "source": "toy",
                       "topic": "Algebra & Number Theory", "difficulty": "0.9"}
    for suffix in (".jsonl", ".parquet"):
        path = write_rows(rows, tmp_path / f"copy{suffix}")
        assert load_dataset(str(path)) == rows
    # a unified copy of a registered benchmark keeps the benchmark as its source
    partial = tmp_path / "mine.jsonl"
    partial.write_text(json.dumps({"prompt": "1+1?", "answer": "2"}) + "\n")
    assert load_dataset("aime-2025", data_files=partial)[0]["source"] == "aime-2025"
    assert load_dataset(str(partial))[0] == {"id": "local-0", "prompt": "1+1?", "answer": "2",
                                            "source": "local", "topic": "", "difficulty": ""}


def test_data_dir_and_env_variable_supply_local_copies(tmp_path, monkeypatch):
    rows = load_dataset("aime-2025", data_dir=FIXTURES)
    assert rows == load_dataset("aime-2025", data_files=fixture("aime-2025"))
    monkeypatch.setenv("EBPO_DATA_DIR", str(FIXTURES))
    assert load_dataset("olympiadbench") == load_dataset("olympiadbench", data_files=fixture("olympiadbench"))
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
    start = time.perf_counter()
    with pytest.raises(DatasetUnavailableError) as info:
        load_dataset("math-500")
    message = str(info.value)
    assert "math-500" in message and "HuggingFaceH4/MATH-500" in message and "data_files=" in message
    # without offline mode the loader probes the endpoint instead of letting datasets retry ~25 s
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(data, "_hub_reachable", lambda timeout=3.0: False)
    with pytest.raises(DatasetUnavailableError, match="olympiadbench.*OE_TO_maths_en_COMP"):
        load_dataset("olympiadbench")
    assert time.perf_counter() - start < 10.0


def test_bad_inputs(tmp_path):
    with pytest.raises(ValueError, match="name_or_path"):
        load_dataset("math-5000")
    with pytest.raises(ValueError, match="does not exist"):
        load_dataset("math-500", data_files=tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question_text": "?", "label": 1}) + "\n")
    with pytest.raises(ValueError, match="cannot recognise the columns"):
        load_dataset(str(bad))
    with pytest.raises(ValueError, match="'math-500' schema"):
        normalise_rows([{"problem": "x"}], "math-500")
    with pytest.raises(ValueError, match="schema must be"):
        normalise_rows([], "gsm8k")
    with pytest.raises(ValueError, match="must end in"):
        read_rows(tmp_path / "x.csv")


def test_trl_and_verl_layouts(tmp_path):
    from ebpo.data import to_prompt_dataset, to_verl_rows
    from ebpo.rewards import math_reward

    rows = load_dataset("math-500", data_files=fixture("math-500"))
    ds = to_prompt_dataset(rows)
    assert ds[0]["prompt"] == [{"role": "user", "content": dapo_prompt(rows[0]["prompt"])}]
    assert ds[0]["problem"] == rows[0]["prompt"] and ds["answer"] == [r["answer"] for r in rows]
    assert to_prompt_dataset(rows, conversational=False)[1]["prompt"] == dapo_prompt(rows[1]["prompt"])
    # the TRL reward reads the answer column of this dataset
    assert math_reward(prompts=ds["prompt"], completions=[f"Answer: {a}" for a in ds["answer"]],
                       answer=ds["answer"]) == [1.0] * len(rows)
    verl = to_verl_rows(rows)
    assert verl[0]["reward_model"] == {"ground_truth": rows[0]["answer"], "style": "rule"}
    # verl rows are in the DAPO hub layout, so they load back through the DAPO normaliser
    path = write_rows(verl, tmp_path / "verl.parquet")
    back = load_dataset(str(path), schema="dapo-math-17k")
    assert [(r["prompt"], r["answer"]) for r in back] == [(r["prompt"], r["answer"]) for r in rows]


# --------------------------------------------------------------------------------- templates
def test_templates():
    problem = "What is $1+1$?"
    assert strip_dapo_template(dapo_prompt(problem)) == problem
    assert strip_dapo_template(problem) == problem
    assert apply_template(problem, "raw") == problem
    assert apply_template(problem, "boxed").endswith("\\boxed{}.")
    assert build_messages(problem, system="sys") == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": dapo_prompt(problem)},
    ]
    with pytest.raises(ValueError, match="template must be"):
        apply_template(problem, "cot")


def test_render_prompt_uses_the_chat_template_of_instruct_tokenizers():
    from ebpo.evaluation.models import build_char_tokenizer

    tok = build_char_tokenizer()
    problem = "What is $1+1$?"
    expected = tok.apply_chat_template(
        [{"role": "user", "content": dapo_prompt(problem)}], tokenize=False, add_generation_prompt=True
    )
    assert render_prompt(problem, tok) == expected
    assert render_prompt(problem, tok, chat=False) == dapo_prompt(problem)
    assert render_prompt(problem) == dapo_prompt(problem)
    tok.chat_template = None
    assert render_prompt(problem, tok) == dapo_prompt(problem)  # base model: plain text
    with pytest.raises(ValueError, match="chat_template"):
        render_prompt(problem, tok, chat=True)


# --------------------------------------------------------------- malformed files (issue #11, item 9)
GOOD = json.dumps({"prompt": "1+1?", "answer": "2"})


@pytest.mark.parametrize(
    ("name", "content", "match"),
    [
        ("empty.jsonl", "", r"'[^']*empty\.jsonl' is empty: it holds no rows"),
        ("blank.jsonl", "\n  \n", r"is empty: it holds no rows"),
        ("bad.jsonl", f"{GOOD}\n\n{{oops\n", r"bad\.jsonl: line 3: not valid JSON \(Expecting property name"),
        ("truncated.jsonl", f"{GOOD}\n{GOOD[:-5]}\n", r"truncated\.jsonl: line 2: not valid JSON"),
        ("list.jsonl", f"{GOOD}\n[1, 2]\n", r"list\.jsonl: line 2 is a JSON array, expected an object"),
        ("string.jsonl", '"just text"\n', r"string\.jsonl: line 1 is a JSON string, expected an object"),
        ("number.jsonl", "3\n", r"line 1 is a JSON number, expected an object"),
        ("array.json", f"[{GOOD}, null]", r"array\.json: item 1 of the array is a JSON null, expected an object"),
        ("badarray.json", f"[{GOOD},\n", r"badarray\.json: line 2: not valid JSON"),
        ("columns.jsonl", json.dumps({"question_text": "?", "label": 1}) + "\n",
         r"data file '[^']*columns\.jsonl': cannot recognise the columns \['label', 'question_text'\]: expected at least 'prompt' and 'answer'"),
        ("noanswer.jsonl", f"{GOOD}\n" + json.dumps({"prompt": "x", "topic": "t"}) + "\n",
         r"noanswer\.jsonl: line 2 does not match the 'unified' schema: no column 'answer'"),
        ("emptyanswer.jsonl", f"{GOOD}\n" + json.dumps({"prompt": "x", "answer": "  "}) + "\n",
         r"emptyanswer\.jsonl: line 2 has no 'answer'"),
        ("nullprompt.jsonl", json.dumps({"prompt": None, "answer": None}) + "\n",
         r"line 1 has no 'prompt' and no 'answer'"),
        ("nananswer.jsonl", '{"prompt": "x", "answer": NaN}\n', r"nananswer\.jsonl: line 1 has no 'answer'"),
        ("latin1.jsonl", b'{"prompt": "caf\xe9", "answer": "1"}\n', r"latin1\.jsonl' is not UTF-8 text"),
        ("text.parquet", "not parquet\n", r"text\.parquet' is not a readable Parquet file"),
    ],
)
def test_malformed_files_raise_one_value_error_naming_file_and_line(tmp_path, name, content, match):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ValueError, match=match) as info:
        load_dataset(str(path))
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError) as again:  # through a registered name's local copy: the file is named too
        load_dataset("aime-2025", data_files=path)
    assert name in str(again.value) and "\n" not in str(again.value)


def test_empty_parquet_directory_and_limits(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"prompt": pa.array([], pa.string()), "answer": pa.array([], pa.string())}), tmp_path / "e.parquet")
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
    rows = [{"prompt": "1+1?", "answer": "2"}, {"prompt": "2+2?", "answer": 4, "topic": "arith", "id": "q2"}]
    path = tmp_path / "mixed.jsonl"
    path.write_text("\ufeff" + json.dumps(rows[0]) + "\n\n" + json.dumps(rows[1]) + "\n", encoding="utf-8")
    loaded = load_dataset(str(path))
    assert [(r["prompt"], r["answer"], r["topic"], r["id"]) for r in loaded] == [
        ("1+1?", "2", "", "local-0"), ("2+2?", "4", "arith", "q2")
    ]
    array = tmp_path / "rows.json"
    array.write_text(json.dumps(rows))
    assert load_dataset(str(array)) == loaded
    # a hub-schema copy whose first row lacks an optional column is still recognised
    amc = tmp_path / "amc.jsonl"
    amc.write_text(json.dumps({"question": "1+1?", "answer": 2.0}) + "\n" + json.dumps({"id": 7, "question": "3?", "answer": 3, "url": "u"}) + "\n")
    assert [r["id"] for r in load_dataset(str(amc))] == ["amc-2023-0", "amc-2023-7"]


def test_write_rows_is_atomic(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text("precious\n")
    with pytest.raises(TypeError):
        write_rows([{"prompt": "a", "answer": "1"}, {"prompt": object(), "answer": "2"}], path)
    assert path.read_text() == "precious\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]
