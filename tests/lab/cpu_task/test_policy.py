"""ebpo.lab.cpu_task.policy and the warm-start examples of ebpo.lab.train.data: clean answers first, then
one-digit corruptions at the asked rate; the warm start is cached once per recipe, also when two
processes (bench shards) ask for it at the same time."""

from __future__ import annotations

import threading
from itertools import islice

import pytest

pytest.importorskip("transformers")

from ebpo.lab.cpu_task import policy  # noqa: E402
from ebpo.lab.train.data import load_job_data  # noqa: E402
from ebpo.lab.train.job import TrainJobConfig  # noqa: E402


def _true_answer(row: dict) -> str:
    symbol = next(s for s in "+-*" if s in row["prompt"])
    left, right = row["prompt"].rstrip("=").split(symbol)
    a, b = int(left[::-1]), int(right[::-1])
    return str({"+": a + b, "-": a - b, "*": a * b}[symbol])[::-1]


def test_warm_start_rows_are_clean_first_then_corrupted_at_the_asked_rate():
    config = TrainJobConfig(
        warm_start_steps=100, warm_start_batch_size=10, warm_start_clean=0.3, warm_start_corrupt=0.5
    )
    rows = list(islice(load_job_data(config).warm_rows(), 1000))
    clean, later = rows[:300], rows[300:]
    assert all(r["answer"] == _true_answer(r) for r in clean)
    wrong = [r for r in later if r["answer"] != _true_answer(r)]
    assert 0.42 < len(wrong) / len(later) < 0.58
    for r in wrong:
        truth = _true_answer(r)
        assert (
            len(r["answer"]) == len(truth)
            and sum(a != b for a, b in zip(r["answer"], truth, strict=True)) == 1
        )


def test_warm_start_is_cached_by_recipe(tmp_path, monkeypatch):
    trained = []
    real = policy._supervised
    monkeypatch.setattr(policy, "_supervised", lambda *a, **k: (trained.append(1), real(*a, **k)))
    examples = iter(lambda: ("12+3=", "42"), None)

    def start(recipe):
        model, tokenizer = policy.load_policy(
            "tiny", tiny_layers=1, tiny_hidden_size=16, tiny_heads=2, seed=0
        )
        return policy.warm_start(
            model,
            tokenizer,
            examples,
            steps=2,
            batch_size=2,
            lr=1e-3,
            seed=0,
            cache=tmp_path,
            recipe=recipe,
            progress=False,
        )

    first, cached = start({"seed": 0})
    assert cached is False and len(trained) == 1
    again, cached = start({"seed": 0})
    assert cached is True and len(trained) == 1
    assert all(
        (p == q).all()
        for p, q in zip(first.state_dict().values(), again.state_dict().values(), strict=True)
    )
    assert start({"seed": 1})[1] is False and len(trained) == 2  # another recipe, another model
    assert policy.warm_start_key({"seed": 0}) != policy.warm_start_key({"seed": 1})


def test_concurrent_warm_starts_of_one_recipe_train_once(tmp_path, monkeypatch):
    trained = []
    real = policy._supervised

    def slow(*args, **kwargs):
        trained.append(1)
        real(*args, **kwargs)

    monkeypatch.setattr(policy, "_supervised", slow)
    results = []

    def start():
        model, tokenizer = policy.load_policy(
            "tiny", tiny_layers=1, tiny_hidden_size=16, tiny_heads=2, seed=0
        )
        examples = iter(lambda: ("1+2=", "3"), None)
        results.append(
            policy.warm_start(
                model,
                tokenizer,
                examples,
                steps=20,
                batch_size=4,
                lr=1e-3,
                seed=0,
                cache=tmp_path,
                recipe={"r": 1},
                progress=False,
            )[1]
        )

    threads = [threading.Thread(target=start) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(trained) == 1 and sorted(results) == [False, True]
    # no half-written copy left
    assert not [p for p in (tmp_path / "warm-start").iterdir() if ".tmp" in p.name]


def test_a_loading_process_waits_for_the_lock_and_never_trains(tmp_path, monkeypatch):
    """The protocol of a launch's processes: the trainer calls ``on_locked`` once it holds the
    cache lock (so a loader started then queues behind it); ``train=False`` loads what the trainer
    cached, and refuses, naming the entry, when nothing was cached."""
    trained = []
    real = policy._supervised
    monkeypatch.setattr(policy, "_supervised", lambda *a, **k: (trained.append(1), real(*a, **k)))
    options = {
        "steps": 20,
        "batch_size": 4,
        "lr": 1e-3,
        "seed": 0,
        "cache": tmp_path,
        "recipe": {"r": 2},
        "progress": False,
    }

    def fresh():
        return policy.load_policy("tiny", tiny_layers=1, tiny_hidden_size=16, tiny_heads=2, seed=0)

    model, tokenizer = fresh()
    with pytest.raises(ValueError, match=r"the warm start '.*' is not in the cache"):
        policy.warm_start(model, tokenizer, iter(()), train=False, **options)
    assert not trained

    loaded = []

    def load_behind():
        other, other_tokenizer = fresh()
        loaded.append(policy.warm_start(other, other_tokenizer, iter(()), train=False, **options))

    loader = threading.Thread(target=load_behind)
    examples = iter(lambda: ("1+2=", "3"), None)
    trainer_model, cached = policy.warm_start(
        model, tokenizer, examples, on_locked=loader.start, **options
    )
    loader.join()
    assert cached is False and len(trained) == 1
    [(loaded_model, loaded_cached)] = loaded
    assert loaded_cached is True
    assert all(
        (p == q).all()
        for p, q in zip(
            trainer_model.state_dict().values(), loaded_model.state_dict().values(), strict=True
        )
    )
