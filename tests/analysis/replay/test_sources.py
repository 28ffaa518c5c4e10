"""``ebpo.analysis.replay.sources`` and ``readers``: which files, in which order, the groups of each step,
in every input format, and reading in chunks. The verl inputs are tests/fixtures/replay, written by
verl's own writers (test_verl_dumps.py checks that they still are)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ebpo.analysis.replay import readers
from ebpo.analysis.replay.readers import Columns, input_file, python_json_chunks
from ebpo.analysis.replay.sources import Source, verl_groups

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "replay"
TABLE = Columns("prompt", "reward", "step")


def groups_of(batch) -> list[tuple[str, list[float]]]:
    """``(prompt id, sorted rewards)`` of each group of a step, sorted."""
    labels = batch.group_labels.to_pylist()
    out: dict[str, list[float]] = {}
    for g, reward in zip(batch.group_index.tolist(), batch.rewards.tolist(), strict=True):
        out.setdefault(str(labels[g]), []).append(reward)
    return sorted((k, sorted(v)) for k, v in out.items())


def dump_rows(layout: str) -> list[dict]:
    rows = []
    for path in sorted((FIXTURES / layout).glob("*.jsonl")):
        rows += [json.loads(line) for line in path.read_text().splitlines()]
    return rows


def test_v1_dumps_group_by_prompt_uid_drop_padding_and_count_sessions_once():
    batches = list(Source([str(FIXTURES / "v1")], "verl").steps())
    assert [b.step for b in batches] == [1, 2, 10]  # numeric order, not the names' (10 < 2)
    for batch in batches:
        assert batch.rows == 27 and batch.padding_rows == 2 and batch.merged_outputs == 1
        groups = groups_of(batch)
        assert len(groups) == 6 and all(len(r) == 4 for _, r in groups)
        assert all(not key.startswith("pad") and "_" not in key for key, _ in groups)
        # the two-output session counts with its last output's reward, never its first's (0.5)
        assert 0.5 not in [r for _, rewards in groups for r in rewards]


def test_legacy_dumps_group_by_prompt_text_as_v1_groups_by_uid():
    v1 = list(Source([str(FIXTURES / "v1")], "verl").steps())
    legacy = list(Source([str(FIXTURES / "legacy")], "verl").steps())
    texts = {row["uid"].rsplit("_", 2)[0]: row["input"] for row in dump_rows("v1")}
    for a, b in zip(v1, legacy, strict=True):
        assert [(texts[k], r) for k, r in groups_of(a)] == sorted(groups_of(b))
        assert b.padding_rows == b.merged_outputs == 0 and b.rows == 24


def test_files_replay_in_step_order_whatever_order_they_are_given_in():
    files = [str(FIXTURES / "v1" / f"{s}.jsonl") for s in (10, 1, 2)]
    assert [b.step for b in Source(files, "verl").steps()] == [1, 2, 10]


def write_table(path: Path, rows: list[dict]) -> Path:
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif path.suffix == ".csv":
        with open(path, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    else:
        pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=7)
    return path


def table_rows() -> list[dict]:
    """The v1 fixture as a plain table: one row per session's final output, prompt = its uid."""
    batches = Source([str(FIXTURES / "v1")], "verl").steps()
    rows = []
    for batch in batches:
        labels = batch.group_labels.to_pylist()
        for g, reward in zip(batch.group_index.tolist(), batch.rewards.tolist(), strict=True):
            rows.append({"step": batch.step, "prompt": labels[g], "reward": reward, "extra": "x"})
    return rows


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_a_table_in_any_format_gives_the_steps_of_the_dump(tmp_path, suffix, monkeypatch):
    monkeypatch.setattr(readers, "CHUNK_ROWS", 5)  # steps span chunks and Parquet row groups
    monkeypatch.setattr(readers, "JSON_BLOCK_BYTES", 256)
    path = write_table(tmp_path / f"run{suffix}", table_rows())
    expected = [groups_of(b) for b in Source([str(FIXTURES / "v1")], "verl").steps()]
    batches = list(Source([str(path)], "table", TABLE).steps())
    assert [b.step for b in batches] == [1, 2, 10]
    assert [groups_of(b) for b in batches] == expected


def test_a_directory_of_tables_is_read_in_step_order(tmp_path):
    rows = table_rows()
    for step, name in ((1, "b.parquet"), (2, "c.csv"), (10, "a.jsonl")):
        write_table(tmp_path / name, [r for r in rows if r["step"] == step])
    (tmp_path / "notes.txt").write_text("not a table")
    assert [b.step for b in Source([str(tmp_path)], "table", TABLE).steps()] == [1, 2, 10]


def test_chat_prompts_group_by_their_content(tmp_path):
    """TRL logs conversational prompts as lists of messages: equal lists are one group."""
    chat = [{"role": "user", "content": "2+2?"}]
    other = [{"role": "user", "content": "3+3?"}]
    rows = [
        {"step": 1, "prompt": p, "reward": r} for p, r in ((chat, 1.0), (other, 0.0), (chat, 0.0))
    ]
    for suffix in (".jsonl", ".parquet"):
        (batch,) = Source([str(write_table(tmp_path / f"t{suffix}", rows))], "table", TABLE).steps()
        assert sorted(len(r) for _, r in groups_of(batch)) == [1, 2]


def test_integer_prompt_ids(tmp_path):
    rows = [{"step": 3, "prompt": p, "reward": float(p % 2)} for p in (7, 8, 7, 8, 9)]
    (batch,) = Source([str(write_table(tmp_path / "t.jsonl", rows))], "table", TABLE).steps()
    assert groups_of(batch) == [("7", [1.0, 1.0]), ("8", [0.0, 0.0]), ("9", [1.0])]


def test_pyarrow_and_python_read_json_lines_alike(tmp_path):
    rng = np.random.default_rng(0)
    rows = [
        {
            "step": int(s),
            "prompt": f"p{int(rng.integers(50))}",
            "reward": float(rng.normal()),
            "x": [1],
        }
        for s in np.sort(rng.integers(0, 9, 500))
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    fast = list(input_file(path).chunks(TABLE))
    slow = list(python_json_chunks(path, TABLE))
    assert pa.concat_arrays([c.keys for c in fast]).equals(pa.concat_arrays([c.keys for c in slow]))
    for field in ("rewards", "steps"):
        assert np.array_equal(
            *(np.concatenate([getattr(c, field) for c in x]) for x in (fast, slow))
        )


def test_verl_groups_reduces_v1_keys_only():
    keys = pa.array(
        [
            "a-1_0_0",
            "a-1_1_0",
            "a-1_1_1",  # session 1's last output
            "pad0123456789abcdef0123456789abcdef_0_0",  # verl's padding
            "pad-not-padding_0_0",  # a prompt uid that merely starts with pad
            "plain-uid",  # not a v1 key: a prompt of its own
            "plain-uid",
        ]
    )
    rewards = np.array([1.0, 0.5, 0.0, 0.0, 1.0, 1.0, 0.0])
    prompts, kept, padding, merged = verl_groups(keys, rewards)
    assert prompts.to_pylist() == ["a-1", "a-1", "pad-not-padding", "plain-uid", "plain-uid"]
    assert kept.tolist() == [1.0, 0.0, 1.0, 1.0, 0.0]
    assert (padding, merged) == (1, 1)


@pytest.mark.parametrize(
    ("long_line", "by_python"), [(0, False), (12, True)], ids=["first-line", "later-line"]
)
def test_lines_longer_than_a_block_are_read(tmp_path, monkeypatch, long_line, by_python):
    """pyarrow refuses a line longer than its block: bigger blocks are tried while nothing has
    been read, else Python reads the rest of the file."""
    monkeypatch.setattr(readers, "JSON_BLOCK_BYTES", 128)
    monkeypatch.setattr(readers, "MAX_JSON_BLOCK_BYTES", 8192)
    calls = []
    python = readers.python_json_chunks
    monkeypatch.setattr(readers, "python_json_chunks", lambda *a: calls.append(a) or python(*a))
    rows = [{"step": 1 + i // 10, "prompt": f"p{i % 3}", "reward": i % 2} for i in range(30)]
    rows[long_line]["text"] = "x" * 2000
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    fast = list(input_file(path).chunks(TABLE))
    assert sum(len(c.steps) for c in fast) == 30
    assert [c.start for c in fast] == sorted({c.start for c in fast})
    assert np.array_equal(np.concatenate([c.rewards for c in fast]), [r["reward"] for r in rows])
    assert pa.concat_arrays([c.keys for c in fast]).to_pylist() == [r["prompt"] for r in rows]
    assert bool(calls) == by_python
