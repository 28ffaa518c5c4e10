"""ebpo.evaluation.job: the eval job end to end, its tables, and every option checked before
anything is loaded."""

from __future__ import annotations

import contextlib
import csv
import json

import pytest
import torch

from ebpo.evaluation import SamplingConfig, check_eval_options, run_eval
from ebpo.rewards import score_math_detailed
from tests.evaluation.scripted import FIXTURES, ScriptedGenerator


def test_run_eval_table_with_scripted_generator(tmp_path, tiny):
    _, tokenizer = tiny
    files = {
        "math-500": str(FIXTURES / "math-500.jsonl"),
        "aime-2024": str(FIXTURES / "aime-2024.parquet"),
    }
    answers = ["\\left( 3, \\frac{\\pi}{2} \\right)", "\\frac{3}{4}", "2, 3", "204", "025"]
    scripted = ScriptedGenerator(answers, [2, 2, 0, 1, 2])
    summary = run_eval(
        "scripted",
        ["math-500", "aime-2024"],
        n=2,
        out_dir=tmp_path,
        data_files=files,
        tokenizer=tokenizer,
        generator=scripted,
        progress=False,
    )
    rows = {row[0]: row[1:] for row in summary["table"]["rows"]}
    assert rows["pass@1"] == pytest.approx(
        [100 * (1 + 1 + 0) / 3, 100 * (0.5 + 1) / 2, (200 / 3 + 75) / 2]
    )
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
    code = main(
        [
            "eval",
            "--model",
            str(tmp_path / "model"),
            "--benchmarks",
            "aime-2025,amc-2023",
            "--data-file",
            f"aime-2025={FIXTURES / 'aime-2025.jsonl'}",
            "--data-dir",
            str(FIXTURES),  # amc-2023.jsonl found there
            "--n",
            "3",
            "--k",
            "1,2",
            "--max-new-tokens",
            "8",
            "--template",
            "raw",
            "--batch-size",
            "6",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
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
    assert result["config"]["sampling"] == {
        "temperature": 1.0,
        "top_p": 1.0,
        "max_new_tokens": 8,
        "seed": 0,
    }
    markdown = (out / "results.md").read_text()
    assert "| metric | aime-2025 | amc-2023 | avg |" in markdown
    assert (out / "results.csv").read_text().startswith("model,metric,aime-2025,amc-2023,avg")


def bar_settings() -> tuple[bool, bool, bool]:
    """Whether transformers', huggingface_hub's and datasets' progress bars are on."""
    import datasets
    from huggingface_hub import utils as hub
    from transformers.utils import logging

    return (
        logging.is_progress_bar_enabled(),
        not hub.are_progress_bars_disabled(),
        datasets.is_progress_bar_enabled(),
    )


def test_no_progress_silences_every_bar_the_libraries_included(tmp_path, tiny, capfd, monkeypatch):
    """Issue 46 item 10: transformers' "Loading weights" bar showed through --no-progress; the
    libraries' settings are theirs again afterwards."""
    from ebpo.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, tokenizer = tiny
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    capfd.readouterr()  # save_pretrained's own bar
    argv = ["eval", "--model", str(tmp_path / "model"), "--benchmarks", "aime-2025"]
    argv += ["--data-file", f"aime-2025={FIXTURES / 'aime-2025.jsonl'}", "--limit", "2"]
    argv += ["--n", "2", "--max-new-tokens", "4", "--template", "raw", "--out", str(tmp_path / "o")]
    before = bar_settings()

    def restore() -> None:  # in order: transformers' switch also turns huggingface_hub's
        for (on, off), was_on in zip(_switches(), before, strict=True):
            (on if was_on else off)()

    with contextlib.ExitStack() as undo:
        # every bar on, as a user has them (HF_HUB_DISABLE_PROGRESS_BARS=1 would hide the bug);
        # the process's own settings come back afterwards
        undo.callback(restore)
        for on, _ in _switches():
            on()
        assert bar_settings() == (True, True, True)
        assert main([*argv, "--no-progress"]) == 0
        err = capfd.readouterr().err
        assert "it/s]" not in err and "%|" not in err, err
        assert bar_settings() == (True, True, True)
        assert main([*argv, "--out", str(tmp_path / "p")]) == 0  # the bars are there without it
        assert "Loading weights" in capfd.readouterr().err


def _switches():
    import datasets
    from huggingface_hub import utils as hub
    from transformers.utils import logging

    return [
        (logging.enable_progress_bar, logging.disable_progress_bar),
        (hub.enable_progress_bars, hub.disable_progress_bars),
        (datasets.enable_progress_bars, datasets.disable_progress_bars),
    ]


def test_eval_command_reports_bad_input(capsys):
    from ebpo.cli import main

    assert main(["eval", "--model", "x", "--benchmarks", "gsm8k"]) == 2
    assert "unknown ['gsm8k']" in capsys.readouterr().err
    assert main(["eval", "--model", "x", "--benchmarks", "math-500", "--data-file", "oops"]) == 2
    assert main(["eval", "--model", "x", "--benchmarks", "math-500", "--n", "2", "--k", "1,4"]) == 2


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
        (
            {"data_files": {"aime-2025": "missing.jsonl"}},
            r"data file for 'aime-2025' \('missing.jsonl'\) does not exist",
        ),
        (
            {"data_files": {"math-500": str(FIXTURES / "math-500.jsonl")}},
            r"names 'math-500', which is not among the benchmarks",
        ),
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
    check_eval_options(
        "org/model",
        ["aime-2025", "amc-2023"],
        n=4,
        ks=[1, 4],
        out_dir=tmp_path / "new",
        limit=3,
        timeout=2.5,
        score_workers=2,
        data_files={"aime-2025": str(FIXTURES / "aime-2025.jsonl")},
    )
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "notes.txt").write_text("not ours")  # other files in --out are left alone
    check_eval_options("org/model", ["aime-2025"], out_dir=tmp_path / "new")
    with pytest.raises(ValueError, match="run_eval arguments: .*'frobnicate'"):
        check_eval_options("org/model", ["aime-2025"], frobnicate=1)


def test_existing_results_are_refused_before_generation_unless_overwrite(
    tmp_path, tiny, monkeypatch
):
    _, tokenizer = tiny
    files = {"aime-2025": str(FIXTURES / "aime-2025.jsonl")}
    answers = ["70", "16"]

    def evaluate(generator, **kwargs):
        return run_eval(
            "scripted",
            ["aime-2025"],
            n=2,
            out_dir=tmp_path / "out",
            data_files=files,
            tokenizer=tokenizer,
            generator=generator,
            progress=False,
            **kwargs,
        )

    evaluate(ScriptedGenerator(answers, [2, 0]))
    before = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    assert sorted(before) == ["results.csv", "results.json", "results.md", "samples.jsonl"]
    second = ScriptedGenerator(answers, [0, 2])
    with pytest.raises(
        ValueError,
        match=r"already holds results \(samples.jsonl, results.md, results.csv, results.json\); pass --overwrite",
    ):
        evaluate(second)
    assert second.prompts is None  # refused before generating anything
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before
    evaluate(second, overwrite=True)
    first, after = (
        json.loads(before["results.json"]),
        json.loads((tmp_path / "out" / "results.json").read_text()),
    )
    assert first["metrics"]["aime-2025"]["pass@2"] == 0.5  # problem 0 solved twice, problem 1 never
    assert after["metrics"]["aime-2025"]["pass@2"] == 0.5 and after["samples"] == 4
    assert (tmp_path / "out" / "samples.jsonl").read_bytes() != before[
        "samples.jsonl"
    ]  # the second run's samples
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        before
    )  # no temporaries left
    # a file or a path below a file where the directory should be: refused before generating
    (tmp_path / "file").write_text("x")
    for out in (tmp_path / "file", tmp_path / "file" / "sub"):
        third = ScriptedGenerator(answers, [1, 1])
        with pytest.raises(ValueError, match=r"out_dir \(--out\)"):
            run_eval(
                "scripted",
                ["aime-2025"],
                n=2,
                out_dir=out,
                data_files=files,
                tokenizer=tokenizer,
                generator=third,
                progress=False,
            )
        assert third.prompts is None


def test_the_runs_header_and_results_say_where_the_model_is(tmp_path, tiny, capsys):
    model, tokenizer = tiny
    summary = run_eval(
        "tiny",
        ["aime-2025"],
        n=2,
        out_dir=tmp_path,
        data_files={"aime-2025": str(FIXTURES / "aime-2025.jsonl")},
        template="raw",
        sampling=SamplingConfig(max_new_tokens=4),
        model=model.to(torch.bfloat16),
        tokenizer=tokenizer,
        progress=True,
    )
    header = capsys.readouterr().err.splitlines()[0]
    assert header == "ebpo eval: tiny on cpu (bfloat16) (transformers); 2 problems x 2"
    assert summary["config"]["device"] == "cpu (bfloat16)"
    assert json.loads((tmp_path / "results.json").read_text())["config"]["device"] == (
        "cpu (bfloat16)"
    )
