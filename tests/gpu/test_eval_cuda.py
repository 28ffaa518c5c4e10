"""Models that ebpo loads itself go on the GPU: ``ebpo eval --backend transformers`` evaluates a
local model on CUDA in bfloat16 by default (CUDA memory is allocated, the header and results.json
say where the model was), and ``--device cpu`` keeps it on the CPU as before."""

from __future__ import annotations

import json

import torch

from ebpo.cli import main
from ebpo.evaluation import models
from ebpo.evaluation.models import save_tiny_llama
from tests.evaluation.scripted import FIXTURES
from tests.gpu.cuda import GPU, needs_bf16

pytestmark = [*GPU, needs_bf16]


def evaluate(tmp_path, *extra: str) -> tuple[dict, str]:
    save_tiny_llama(tmp_path / "model", num_layers=2, hidden_size=64, num_heads=4, seed=0)
    out = tmp_path / "out"
    argv = [
        "eval", "--model", str(tmp_path / "model"), "--benchmarks", "aime-2025",
        "--data-file", f"aime-2025={FIXTURES / 'aime-2025.jsonl'}", "--n", "4",
        "--max-new-tokens", "8", "--template", "raw", "--backend", "transformers",
        "--out", str(out), *extra,
    ]  # fmt: skip
    assert main(argv) == 0
    return json.loads((out / "results.json").read_text()), str(out)


def test_an_evaluation_runs_its_model_on_the_gpu_in_bf16(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    result, _ = evaluate(tmp_path)
    assert torch.cuda.max_memory_allocated() > 0, "the evaluation allocated no CUDA memory"
    assert result["config"]["device"] == "cuda:0 (bfloat16)"
    assert "on cuda:0 (bfloat16)" in capsys.readouterr().err  # the run's header
    assert result["samples"] == 2 * 4


def test_device_cpu_keeps_the_model_on_the_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result, _ = evaluate(tmp_path, "--device", "cpu")
    assert result["config"]["device"] == "cpu (float32)"


def test_load_model_and_tokenizer_places_the_model(tmp_path):
    save_tiny_llama(tmp_path / "model", num_layers=1, hidden_size=32, num_heads=2)
    model, _ = models.load_model_and_tokenizer(str(tmp_path / "model"))
    assert models.placement(model) == "cuda:0 (bfloat16)"
    model, _ = models.load_model_and_tokenizer(str(tmp_path / "model"), dtype="float32")
    assert models.placement(model) == "cuda:0 (float32)"
