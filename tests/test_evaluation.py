"""ebpo.evaluation: pass@k / maj@k against brute force, generation batching, the eval job end to end."""

from __future__ import annotations

import csv
import itertools
import json
from collections import Counter
from pathlib import Path

import pytest

from ebpo.evaluation import (
    Generation,
    SamplingConfig,
    TransformersGenerator,
    check_eval_options,
    maj_at_k,
    pass_at_k,
    run_eval,
    sample_and_score,
    summarize,
)
from ebpo.rewards import normalize_answer, score_math_detailed

FIXTURES = Path(__file__).parent / "fixtures" / "datasets"


# ----------------------------------------------------------------------------------- pass@k
def _pass_at_k_brute(n: int, c: int, k: int) -> float:
    """Fraction of k-subsets of n samples (c correct) that contain a correct one."""
    samples = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


def test_pass_at_k_matches_enumeration_over_subsets():
    for n in range(1, 11):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(_pass_at_k_brute(n, c, k), abs=1e-12), (n, c, k)


def test_pass_at_1_is_the_mean_and_large_n_is_stable():
    assert pass_at_k(32, 8, 1) == pytest.approx(8 / 32)
    value = pass_at_k(1024, 3, 512)
    assert 0.0 < value <= 1.0
    from math import comb

    assert value == pytest.approx(1 - comb(1021, 512) / comb(1024, 512))


@pytest.mark.parametrize(("n", "c", "k"), [(0, 0, 1), (4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5), (4.0, 2, 1), (4, True, 1)])
def test_pass_at_k_rejects_bad_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


# ------------------------------------------------------------------------------------ maj@k
def _maj_brute(predictions, scores, k):
    keys = [None if p is None else normalize_answer(p) for p in predictions[:k]]
    counts = Counter(key for key in keys if key is not None)
    if not counts:
        return 0.0
    best = max(counts.values())
    winner = next(key for key in keys if key is not None and counts[key] == best)  # first seen
    return float(scores[keys.index(winner)] == 1.0)


def test_maj_at_k_votes_on_normalised_answers():
    predictions = ["4", "5", "\\frac{1}{2}", "\\dfrac{1}{2}", None, None, "5", "5"]
    scores = [0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    expected = {1: 0.0, 2: 0.0, 3: 0.0, 4: 1.0, 5: 1.0, 6: 1.0, 7: 0.0, 8: 0.0}
    for k, value in expected.items():
        assert maj_at_k(predictions, scores, k) == value == _maj_brute(predictions, scores, k)
    assert maj_at_k([None, None], [0.0, 0.0], 2) == 0.0
    with pytest.raises(ValueError, match="k must be"):
        maj_at_k(["1"], [1.0], 2)


def test_maj_at_k_matches_brute_force_on_random_votes():
    import random

    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 8)
        predictions = [rng.choice(["1", "2", " 2 ", "3", None]) for _ in range(n)]
        scores = [float(p is not None and p.strip() == "2") for p in predictions]
        for k in range(1, n + 1):
            assert maj_at_k(predictions, scores, k) == _maj_brute(predictions, scores, k)


def test_summarize_averages_over_problems():
    records = []
    correct = {"p1": [1, 0, 0, 1], "p2": [0, 0, 0, 0], "p3": [1, 1, 1, 1]}
    for pid, flags in correct.items():
        for j, flag in enumerate(flags):
            records.append({"benchmark": "b", "problem_id": pid, "sample_index": j,
                            "prediction": "7" if flag else "8", "score": float(flag), "status": "exact"})
    metrics = summarize(records, ks=(1, 2, 4))["b"]
    assert metrics["pass@1"] == pytest.approx((2 / 4 + 0 + 1) / 3)
    assert metrics["pass@2"] == pytest.approx((_pass_at_k_brute(4, 2, 2) + 0 + 1) / 3)
    assert metrics["pass@4"] == pytest.approx(2 / 3)
    assert metrics["maj@4"] == pytest.approx((1 + 0 + 1) / 3)  # p1: tie 7 vs 8 -> first seen (7)
    assert metrics["n"] == 4 and metrics["problems"] == 3


# -------------------------------------------------------------------------------- generation
@pytest.fixture(scope="module")
def tiny():
    from ebpo.evaluation.models import build_char_tokenizer, build_tiny_llama

    tokenizer = build_char_tokenizer()
    return build_tiny_llama(tokenizer, max_position_embeddings=2048, seed=0), tokenizer


def test_batched_greedy_generation_equals_one_at_a_time(tiny):
    model, tokenizer = tiny
    prompts = ["1+1=", "What is 12*12?", "x"]
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=6)
    batched = TransformersGenerator(model, tokenizer, sampling, batch_size=8).generate(prompts, 2)
    single = [TransformersGenerator(model, tokenizer, sampling, batch_size=1).generate([p], 1)[0][0] for p in prompts]
    for gens, one in zip(batched, single, strict=True):
        assert gens[0] == gens[1] == one  # left padding does not change what a row generates
        assert one.num_tokens <= 6
    import io

    from tqdm.auto import tqdm

    with tqdm(total=6, file=io.StringIO(), mininterval=0) as bar:  # the per-token progress hook changes nothing
        with_bar = TransformersGenerator(model, tokenizer, sampling, batch_size=8).generate(prompts, 2, progress=bar)
    assert with_bar == batched and bar.n == 6


def test_sampling_is_seeded(tiny):
    model, tokenizer = tiny
    run = lambda seed: TransformersGenerator(model, tokenizer, SamplingConfig(max_new_tokens=5, seed=seed), batch_size=4).generate(["ab"], 3)  # noqa: E731
    assert run(1) == run(1)
    assert run(1) != run(2)


class ScriptedGenerator:
    """Test double for an LLM: answers problem i correctly on the first `correct[i]` samples."""

    def __init__(self, answers, correct):
        self.answers, self.correct, self.prompts = answers, correct, None

    def generate(self, prompts, n, progress=None):
        self.prompts = list(prompts)
        out = []
        for i, _ in enumerate(prompts):
            texts = [f"work...\nAnswer: {self.answers[i]}" if j < self.correct[i] else "work...\nAnswer: -1"
                     for j in range(n)]
            out.append([Generation(t, len(t), True) for t in texts])
            if progress is not None:
                progress.update(n)
        return out


def test_sample_and_score_records_use_the_training_reward(tiny):
    from ebpo.data import load_dataset
    from ebpo.data.templates import render_prompt

    _, tokenizer = tiny
    problems = load_dataset("math-500", data_files=FIXTURES / "math-500.jsonl")
    generator = ScriptedGenerator([p["answer"] for p in problems], [3, 0, 1])
    records = sample_and_score(None, tokenizer, problems, 4, generator=generator, progress=False)
    assert len(records) == 12
    assert generator.prompts == [render_prompt(p["prompt"], tokenizer, template="dapo") for p in problems]
    for r in records:
        assert r["score"] == score_math_detailed(r["response"], r["answer"]).score
    assert [sum(r["score"] for r in records if r["problem_id"] == p["id"]) for p in problems] == [3, 0, 1]
    metrics = summarize(records, ks=(1, 4))["math-500"]
    assert metrics["pass@1"] == pytest.approx((3 + 0 + 1) / 12)
    assert metrics["pass@4"] == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="'prompt' and 'answer'"):
        sample_and_score(None, tokenizer, [{"question": "?"}], 1, generator=generator)


def test_run_eval_table_with_scripted_generator(tmp_path, tiny):
    _, tokenizer = tiny
    files = {"math-500": str(FIXTURES / "math-500.jsonl"), "aime-2024": str(FIXTURES / "aime-2024.parquet")}
    answers = ["\\left( 3, \\frac{\\pi}{2} \\right)", "\\frac{3}{4}", "2, 3", "204", "025"]
    scripted = ScriptedGenerator(answers, [2, 2, 0, 1, 2])
    summary = run_eval("scripted", ["math-500", "aime-2024"], n=2, out_dir=tmp_path, data_files=files,
                       tokenizer=tokenizer, generator=scripted, progress=False)
    rows = {row[0]: row[1:] for row in summary["table"]["rows"]}
    assert rows["pass@1"] == pytest.approx([100 * (1 + 1 + 0) / 3, 100 * (0.5 + 1) / 2, (200 / 3 + 75) / 2])
    assert rows["pass@2"] == pytest.approx([100 * 2 / 3, 100.0, (200 / 3 + 100) / 2])
    with open(tmp_path / "results.csv") as handle:
        table = list(csv.reader(handle))
    assert table[0] == ["model", "metric", "math-500", "aime-2024", "avg"]
    assert float(table[1][2]) == pytest.approx(rows["pass@1"][0], abs=1e-3)


def test_eval_command_end_to_end_with_a_saved_tiny_model(tmp_path, tiny, monkeypatch):
    """`ebpo eval` on a tiny random model saved to disk: the plumbing, the files, the audit."""
    from ebpo.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, tokenizer = tiny
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    out = tmp_path / "out"
    code = main([
        "eval", "--model", str(tmp_path / "model"), "--benchmarks", "aime-2025,amc-2023",
        "--data-file", f"aime-2025={FIXTURES / 'aime-2025.jsonl'}",
        "--data-dir", str(FIXTURES),  # amc-2023.jsonl found there
        "--n", "3", "--k", "1,2", "--max-new-tokens", "8", "--template", "raw", "--batch-size", "6",
        "--out", str(out), "--no-progress",
    ])
    assert code == 0
    records = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(records) == (2 + 2) * 3
    assert {r["benchmark"] for r in records} == {"aime-2025", "amc-2023"}
    for r in records:
        assert r["score"] == score_math_detailed(r["response"], r["answer"]).score
        assert 0 < r["num_tokens"] <= 8
    result = json.loads((out / "results.json").read_text())
    assert result["table"]["columns"] == ["metric", "aime-2025", "amc-2023", "avg"]
    assert [row[0] for row in result["table"]["rows"]] == ["pass@1", "pass@2", "maj@2"]
    assert result["config"]["sampling"] == {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 8, "seed": 0}
    markdown = (out / "results.md").read_text()
    assert "| metric | aime-2025 | amc-2023 | avg |" in markdown
    assert (out / "results.csv").read_text().startswith("model,metric,aime-2025,amc-2023,avg")


def test_eval_command_reports_bad_input(capsys):
    from ebpo.cli import main

    assert main(["eval", "--model", "x", "--benchmarks", "gsm8k"]) == 2
    assert "unknown ['gsm8k']" in capsys.readouterr().err
    assert main(["eval", "--model", "x", "--benchmarks", "math-500", "--data-file", "oops"]) == 2
    assert main(["eval", "--model", "x", "--benchmarks", "math-500", "--n", "2", "--k", "1,4"]) == 2


def test_sampling_config_validation():
    assert SamplingConfig() == SamplingConfig(1.0, 1.0, 20_480, 0)  # the paper's defaults
    bad = (
        {"temperature": -1}, {"temperature": float("nan")}, {"temperature": float("inf")}, {"top_p": 0},
        {"top_p": 1.5}, {"top_p": float("nan")}, {"max_new_tokens": 0}, {"max_new_tokens": 2.5}, {"seed": -1},
    )
    for kwargs in bad:
        with pytest.raises(ValueError, match=next(iter(kwargs))):
            SamplingConfig(**kwargs)


# ------------------------------------------------------------- options checked before loading (#11)
def _refuse_loading(monkeypatch):
    from ebpo import data
    from ebpo.evaluation import models

    def fail(*args, **kwargs):
        raise AssertionError("loaded data or a model before every option was checked")

    monkeypatch.setattr(data, "load_dataset", fail)
    monkeypatch.setattr(models, "load_model_and_tokenizer", fail)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"timeout": -1}, r"timeout must be a finite number of seconds > 0"),
        ({"timeout": 0}, r"timeout must be a finite number"),
        ({"timeout": float("nan")}, r"timeout must be a finite number"),
        ({"timeout": float("inf")}, r"timeout must be a finite number"),
        ({"score_workers": 0}, r"score_workers must be an integer >= 1, got 0"),
        ({"batch_size": 0}, r"batch_size must be an integer >= 1, got 0"),
        ({"n": 0}, r"n must be an integer >= 1"),
        ({"ks": [0]}, r"every k in ks \(--k\) must be in \[1, n=2\]"),
        ({"ks": [1, 3]}, r"every k in ks \(--k\) must be in \[1, n=2\], got \[1, 3\]"),
        ({"ks": [1.5]}, r"ks \(--k\) must be a non-empty list of integers"),
        ({"limit": 0}, r"limit must be an integer >= 1, got 0"),
        ({"limit": -3}, r"limit must be an integer >= 1, got -3"),
        ({"data_files": {"aime-2025": "missing.jsonl"}}, r"data file for 'aime-2025' \('missing.jsonl'\) does not exist"),
        ({"data_files": {"math-500": str(FIXTURES / "math-500.jsonl")}}, r"names 'math-500', which is not among the benchmarks"),
        ({"data_dir": "no/such/dir"}, r"data_dir \(--data-dir\) 'no/such/dir' is not a directory"),
        ({"benchmarks": ["aime-2025", "gsm8k"]}, r"benchmarks: unknown \['gsm8k'\]"),
        ({"benchmarks": ["aime-2025", "aime-2025"]}, r"\['aime-2025'\] named more than once"),
        ({"template": "chatml"}, r"template must be one of"),
        ({"backend": "tgi"}, r"backend must be"),
    ],
)
def test_run_eval_checks_every_option_before_loading_anything(tmp_path, monkeypatch, kwargs, match):
    """Before: a bad --timeout / --score-workers / --batch-size failed only after the model was
    loaded and every sample generated (item 5 of issue #11)."""
    _refuse_loading(monkeypatch)
    monkeypatch.chdir(tmp_path)
    options = {"benchmarks": ["aime-2025"], "n": 2, "out_dir": tmp_path / "out", **kwargs}
    benchmarks = options.pop("benchmarks")
    with pytest.raises(ValueError, match=match):
        check_eval_options("org/model", benchmarks, **options)  # the dry run says the same
    with pytest.raises(ValueError, match=match):
        run_eval("org/model", benchmarks, progress=False, **options)
    assert list(tmp_path.iterdir()) == []


def test_check_eval_options_accepts_what_run_eval_accepts(tmp_path):
    check_eval_options("org/model", ["aime-2025", "amc-2023"], n=4, ks=[1, 4], out_dir=tmp_path / "new", limit=3,
                       timeout=2.5, score_workers=2, data_files={"aime-2025": str(FIXTURES / "aime-2025.jsonl")})
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "notes.txt").write_text("not ours")  # other files in --out are left alone
    check_eval_options("org/model", ["aime-2025"], out_dir=tmp_path / "new")
    with pytest.raises(ValueError, match="run_eval arguments: .*'frobnicate'"):
        check_eval_options("org/model", ["aime-2025"], frobnicate=1)


def test_existing_results_are_refused_before_generation_unless_overwrite(tmp_path, tiny, monkeypatch):
    _, tokenizer = tiny
    files = {"aime-2025": str(FIXTURES / "aime-2025.jsonl")}
    answers = ["70", "16"]

    def evaluate(generator, **kwargs):
        return run_eval("scripted", ["aime-2025"], n=2, out_dir=tmp_path / "out", data_files=files,
                        tokenizer=tokenizer, generator=generator, progress=False, **kwargs)

    evaluate(ScriptedGenerator(answers, [2, 0]))
    before = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    assert sorted(before) == ["results.csv", "results.json", "results.md", "samples.jsonl"]
    second = ScriptedGenerator(answers, [0, 2])
    with pytest.raises(ValueError, match=r"already holds results \(samples.jsonl, results.md, results.csv, results.json\); pass --overwrite"):
        evaluate(second)
    assert second.prompts is None  # refused before generating anything
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before
    evaluate(second, overwrite=True)
    first, after = json.loads(before["results.json"]), json.loads((tmp_path / "out" / "results.json").read_text())
    assert first["metrics"]["aime-2025"]["pass@2"] == 0.5  # problem 0 solved twice, problem 1 never
    assert after["metrics"]["aime-2025"]["pass@2"] == 0.5 and after["samples"] == 4
    assert (tmp_path / "out" / "samples.jsonl").read_bytes() != before["samples.jsonl"]  # the second run's samples
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(before)  # no temporaries left
    # a file or a path below a file where the directory should be: refused before generating
    (tmp_path / "file").write_text("x")
    for out in (tmp_path / "file", tmp_path / "file" / "sub"):
        third = ScriptedGenerator(answers, [1, 1])
        with pytest.raises(ValueError, match=r"out_dir \(--out\)"):
            run_eval("scripted", ["aime-2025"], n=2, out_dir=out, data_files=files, tokenizer=tokenizer,
                     generator=third, progress=False)
        assert third.prompts is None
