"""ebpo.evaluation.generation: batched and seeded generation, sampling options, sampling and
scoring with the training reward."""

from __future__ import annotations

import pytest

from ebpo.evaluation import SamplingConfig, TransformersGenerator, sample_and_score, summarize
from ebpo.rewards import score_math_detailed
from tests.evaluation.scripted import FIXTURES, ScriptedGenerator


def test_batched_greedy_generation_equals_one_at_a_time(tiny):
    model, tokenizer = tiny
    prompts = ["1+1=", "What is 12*12?", "x"]
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=6)
    batched = TransformersGenerator(model, tokenizer, sampling, batch_size=8).generate(prompts, 2)
    single = [
        TransformersGenerator(model, tokenizer, sampling, batch_size=1).generate([p], 1)[0][0]
        for p in prompts
    ]
    for gens, one in zip(batched, single, strict=True):
        assert gens[0] == gens[1] == one  # left padding does not change what a row generates
        assert one.num_tokens <= 6
    import io

    from tqdm.auto import tqdm

    with tqdm(
        total=6, file=io.StringIO(), mininterval=0
    ) as bar:  # the per-token progress hook changes nothing
        with_bar = TransformersGenerator(model, tokenizer, sampling, batch_size=8).generate(
            prompts, 2, progress=bar
        )
    assert with_bar == batched and bar.n == 6


def test_sampling_is_seeded(tiny):
    model, tokenizer = tiny

    def run(seed):
        sampling = SamplingConfig(max_new_tokens=5, seed=seed)
        return TransformersGenerator(model, tokenizer, sampling, batch_size=4).generate(["ab"], 3)

    assert run(1) == run(1)
    assert run(1) != run(2)


def test_sample_and_score_records_use_the_training_reward(tiny):
    from ebpo.data import load_dataset
    from ebpo.data.templates import render_prompt

    _, tokenizer = tiny
    problems = load_dataset("math-500", data_files=FIXTURES / "math-500.jsonl")
    generator = ScriptedGenerator([p["answer"] for p in problems], [3, 0, 1])
    records = sample_and_score(None, tokenizer, problems, 4, generator=generator, progress=False)
    assert len(records) == 12
    assert generator.prompts == [
        render_prompt(p["prompt"], tokenizer, template="dapo") for p in problems
    ]
    for r in records:
        assert r["score"] == score_math_detailed(r["response"], r["answer"]).score
    assert [sum(r["score"] for r in records if r["problem_id"] == p["id"]) for p in problems] == [
        3,
        0,
        1,
    ]
    metrics = summarize(records, ks=(1, 4))["math-500"]
    assert metrics["pass@1"] == pytest.approx((3 + 0 + 1) / 12)
    assert metrics["pass@4"] == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="'prompt' and 'answer'"):
        sample_and_score(None, tokenizer, [{"question": "?"}], 1, generator=generator)


def test_sampling_config_validation():
    assert SamplingConfig() == SamplingConfig(1.0, 1.0, 20_480, 0)  # the paper's defaults
    bad = (
        {"temperature": -1},
        {"temperature": float("nan")},
        {"temperature": float("inf")},
        {"top_p": 0},
        {"top_p": 1.5},
        {"top_p": float("nan")},
        {"max_new_tokens": 0},
        {"max_new_tokens": 2.5},
        {"seed": -1},
    )
    for kwargs in bad:
        with pytest.raises(ValueError, match=next(iter(kwargs))):
            SamplingConfig(**kwargs)
