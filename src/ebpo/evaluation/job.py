"""The ``ebpo eval`` job: load the benchmarks and the model, sample and score, write the tables.

:func:`run_eval` writes ``samples.jsonl`` and the paper's table (one row per metric, benchmarks as
columns plus their average, in percent) as ``results.md`` / ``results.csv`` / ``results.json``.
:func:`check_eval_options` runs every check of :func:`run_eval` without loading anything.
"""

from __future__ import annotations

import contextlib
import csv
import inspect
import io
import json
import math
import os
import platform
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ebpo import data
from ebpo.data.templates import TEMPLATES
from ebpo.evaluation import models
from ebpo.evaluation.generation import (
    Generator,
    SamplingConfig,
    VLLMGenerator,
    sample_and_score,
    vllm_available,
)
from ebpo.evaluation.metrics import summarize
from ebpo.utils.checks import check_int, is_real
from ebpo.utils.files import atomic_write, check_output_path

__all__ = [
    "PAPER_BENCHMARKS",
    "RESULT_FILES",
    "check_eval_options",
    "format_table",
    "results_table",
    "run_eval",
]

#: The five benchmarks of the paper's evaluation, in the paper's order.
PAPER_BENCHMARKS = ("math-500", "aime-2024", "aime-2025", "amc-2023", "olympiadbench")

#: The files :func:`run_eval` writes into its output directory.
RESULT_FILES = ("samples.jsonl", "results.md", "results.csv", "results.json")


# ----------------------------------------------------------------------------------------- tables
def _metric_names(results: Mapping[str, Mapping[str, float]], ks: Sequence[int]) -> list[str]:
    names = ["pass@1"]
    for k in sorted(set(ks)):
        if k > 1:
            names += [f"pass@{k}", f"maj@{k}"]
    return [m for m in names if any(m in r for r in results.values())]


def results_table(
    results: Mapping[str, Mapping[str, float]], benchmarks: Sequence[str], ks: Sequence[int]
) -> tuple[list[str], list[list[str | float | None]]]:
    """The paper's layout: one row per metric, benchmarks as columns plus ``avg`` (unweighted mean
    over the benchmarks that have the metric), values in percent."""
    header = ["metric", *benchmarks, "avg"]
    rows: list[list[str | float | None]] = []
    for metric in _metric_names(results, ks):
        values = [
            100.0 * results[b][metric] if metric in results.get(b, {}) else None for b in benchmarks
        ]
        present = [v for v in values if v is not None]
        rows.append([metric, *values, sum(present) / len(present) if present else None])
    return header, rows


def format_table(header: Sequence[str], rows: Sequence[Sequence[Any]], title: str = "") -> str:
    """A Markdown table (values with two decimals, ``-`` for missing)."""

    def cell(value: Any) -> str:
        if value is None:
            return "-"
        return f"{value:.2f}" if isinstance(value, float) else str(value)

    lines = [f"### {title}", ""] if title else []
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------- the job
def run_eval(
    model_name: str,
    benchmarks: Sequence[str],
    *,
    n: int = 32,
    ks: Sequence[int] | None = None,
    out_dir: str | os.PathLike[str] = "eval_results",
    data_files: Mapping[str, str] | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    limit: int | None = None,
    backend: str = "auto",
    template: str = "dapo",
    chat: bool | None = None,
    sampling: SamplingConfig | None = None,
    batch_size: int = 16,
    timeout: float | None = None,
    score_workers: int = 1,
    model: Any = None,
    tokenizer: Any = None,
    generator: Generator | None = None,
    progress: bool = True,
    overwrite: bool = False,
    device: str = "auto",
    dtype: str = "auto",
) -> dict[str, Any]:
    """Evaluate ``model_name`` on ``benchmarks`` and write to ``out_dir``:

    - ``samples.jsonl``: every sample with its prompt, response, extracted answer, score, status;
    - ``results.md`` / ``results.csv`` / ``results.json``: the table (metrics x benchmarks + avg,
      in percent) and, in JSON, the raw metrics and the configuration.

    ``backend``: ``"vllm"``, ``"transformers"`` or ``"auto"`` (vLLM if installed and the model is
    not passed in already loaded). ``data_files`` maps benchmark names to local files (hub schema
    or unified); ``data_dir`` (default env ``EBPO_DATA_DIR``) holds ``<benchmark>.parquet``/
    ``.jsonl`` files for the others; ``limit`` caps problems per benchmark. ``ks`` defaults to
    (1, n). An already loaded ``model``/``tokenizer`` or a custom ``generator`` (with
    ``tokenizer``) skip loading. ``device`` / ``dtype``: where the transformers backend puts the
    model it loads (:func:`ebpo.evaluation.models.resolve_placement`: by default the GPU in
    bfloat16 when there is one, else the CPU in float32); ``progress`` also prints a header line
    saying where the model is, and ``progress=False`` silences every progress bar, the libraries'
    too (transformers' weight loading, huggingface_hub, datasets: :func:`models.no_progress_bars`).

    Every option and the output directory are checked first (:func:`check_eval_options`), before
    any data or model is loaded. An ``out_dir`` that already holds results of an evaluation is
    refused unless ``overwrite``; each file is then replaced atomically (:mod:`ebpo.utils.files`)."""
    _check_eval_arguments(locals())  # first: every argument, before anything is loaded
    ks = tuple(sorted(set(ks or (1, n))))
    sampling = sampling or SamplingConfig()
    data_files = dict(data_files or {})
    with contextlib.nullcontext() if progress else models.no_progress_bars():
        problems = _load_problems(benchmarks, data_files, data_dir, limit)
        model, tokenizer, generator, backend, placed = _load_model(
            model_name, backend, sampling, model, tokenizer, generator, (device, dtype)
        )
        header = f"ebpo eval: {model_name} on {placed} ({backend}); {len(problems)} problems x {n}"
        if progress:  # the run's header says where the model is
            print(header, file=sys.stderr)
        started = time.time()
        records = sample_and_score(
            model,
            tokenizer,
            problems,
            n,
            template=template,
            chat=chat,
            sampling=sampling,
            batch_size=batch_size,
            generator=generator,
            timeout=timeout,
            score_workers=score_workers,
            progress=progress,
        )
        elapsed = time.time() - started
    metrics = summarize(records, ks)
    config = _run_config(locals())  # after ks, sampling, data_files and backend are set
    summary, texts = _results(model_name, benchmarks, records, metrics, config, elapsed)
    _write_results(Path(out_dir).expanduser(), texts)
    return summary


def _write_results(out: Path, texts: Mapping[str, str]) -> None:
    """Each of ``texts`` (file name -> content, all rendered before the first is written) replaced
    atomically in ``out``; samples first (the costly part)."""
    for name, text in texts.items():
        with atomic_write(out / name, newline="") as handle:
            handle.write(text)


def _run_config(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The configuration ``results.json`` records, from :func:`run_eval`'s settled arguments."""
    return {
        "n": arguments["n"],
        "ks": list(arguments["ks"]),
        "template": arguments["template"],
        "chat": arguments["chat"],
        "limit": arguments["limit"],
        "backend": arguments["backend"],
        "device": arguments["placed"],
        "batch_size": arguments["batch_size"],
        "sampling": asdict(arguments["sampling"]),
        "data_files": arguments["data_files"],
        "data_dir": None if arguments["data_dir"] is None else str(arguments["data_dir"]),
    }


def _load_model(
    model_name: str,
    backend: str,
    sampling: SamplingConfig,
    model: Any,
    tokenizer: Any,
    generator: Generator | None,
    placement: tuple[str, str] = ("auto", "auto"),
) -> tuple[Any, Any, Generator | None, str, str]:
    """``(model, tokenizer, generator, backend, where the model is)`` to sample with: vLLM when asked for (or, for
    ``auto``, when it is installed and no model was passed in), else transformers, loading only
    what was not passed in."""
    use_vllm = generator is None and (
        backend == "vllm" or (backend == "auto" and model is None and vllm_available())
    )
    if use_vllm:
        generator = VLLMGenerator(models.resolve_model_path(model_name), sampling)
        if tokenizer is None:
            tokenizer = generator.llm.get_tokenizer()
    elif generator is None and (model is None or tokenizer is None):
        device, dtype = placement
        model, tokenizer = models.load_model_and_tokenizer(model_name, device=device, dtype=dtype)
    # vLLM (or a custom generator) places its own model
    own = "vLLM's device" if use_vllm else "the generator's device"
    placed = own if model is None else models.placement(model)
    return model, tokenizer, generator, "vllm" if use_vllm else "transformers", placed


def _load_problems(
    benchmarks: Sequence[str],
    data_files: Mapping[str, str],
    data_dir: str | os.PathLike[str] | None,
    limit: int | None,
) -> list[dict[str, str]]:
    """Every problem of ``benchmarks``, each with its benchmark's name as ``source`` (the column
    a record is tabulated under)."""
    problems: list[dict[str, str]] = []
    for name in benchmarks:
        rows = data.load_dataset(
            name, data_files=data_files.get(name), data_dir=data_dir, limit=limit
        )
        for row in rows:
            row["source"] = name
        problems += rows
    return problems


def _results(
    model_name: str,
    benchmarks: Sequence[str],
    records: Sequence[Mapping[str, Any]],
    metrics: Mapping[str, Mapping[str, float]],
    config: Mapping[str, Any],
    elapsed: float,
) -> tuple[dict[str, Any], dict[str, str]]:
    """(the summary :func:`run_eval` returns, the text of each of :data:`RESULT_FILES`)."""
    ks, sampling = config["ks"], config["sampling"]
    header, rows = results_table(metrics, benchmarks, ks)
    title = (
        f"{model_name}: {', '.join(_metric_names(metrics, ks))} (%), n={config['n']}, "
        f"T={sampling['temperature']}, top-p={sampling['top_p']}"
    )
    markdown = format_table(header, rows, title)
    table = io.StringIO()
    writer = csv.writer(table)
    writer.writerow(["model", *header])
    for row in rows:
        writer.writerow([model_name, *(_csv_cell(v) for v in row)])
    summary = {
        "model": model_name,
        "benchmarks": list(benchmarks),
        "table": {"columns": header, "rows": rows},
        "metrics": metrics,
        "config": dict(config),
        "samples": len(records),
        "seconds": round(elapsed, 2),
        "python": platform.python_version(),
    }
    texts = {
        "samples.jsonl": "".join(
            json.dumps(record, ensure_ascii=False) + "\n" for record in records
        ),
        "results.md": markdown,
        "results.csv": table.getvalue(),
        "results.json": json.dumps(summary, indent=2),
    }
    return {**summary, "markdown": markdown}, texts


def _csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    return round(value, 4) if isinstance(value, float) else value


# ------------------------------------------------------------------------------------- the checks
def check_eval_options(*args: Any, **kwargs: Any) -> None:
    """Check the arguments of :func:`run_eval` (same signature) without loading anything; raise
    ValueError naming the first bad one. :func:`run_eval` runs the same checks before it loads any
    data or model, so a typo never costs a generation run and an earlier result is never lost."""
    try:
        bound = inspect.signature(run_eval).bind(*args, **kwargs)
    except TypeError as error:
        raise ValueError(f"run_eval arguments: {error}") from None
    bound.apply_defaults()
    _check_eval_arguments(bound.arguments)


def _check_eval_arguments(arguments: Mapping[str, Any]) -> None:
    """The checks behind :func:`check_eval_options`, on ``run_eval``'s arguments by name."""
    if not isinstance(arguments["model_name"], str) or not arguments["model_name"].strip():
        raise ValueError(
            f"model_name (--model) must be a model name or path, got {arguments['model_name']!r}"
        )
    _check_benchmarks(arguments["benchmarks"])
    _check_counts(arguments)
    _check_data(arguments["benchmarks"], arguments["data_files"], arguments["data_dir"])
    _check_generation(arguments)
    _check_out_dir(arguments["out_dir"], arguments["overwrite"])


def _check_benchmarks(benchmarks: Any) -> None:
    known = sorted(data.DATASETS)
    if isinstance(benchmarks, str) or not benchmarks:
        raise ValueError(
            f"benchmarks must be a non-empty list of names from {known}, got {benchmarks!r}"
        )
    unknown = [b for b in benchmarks if b not in data.DATASETS]
    if unknown:
        raise ValueError(f"benchmarks: unknown {unknown}; choose from {known}")
    repeated = sorted({b for b in benchmarks if list(benchmarks).count(b) > 1})
    if repeated:
        raise ValueError(f"benchmarks: {repeated} named more than once")


def _check_counts(arguments: Mapping[str, Any]) -> None:
    """``n``, ``ks``, ``limit``, ``batch_size``, ``score_workers`` and ``timeout``."""
    n, ks, limit = arguments["n"], arguments["ks"], arguments["limit"]
    check_int("n", n, low=1)
    if ks is not None:
        if (
            isinstance(ks, str)
            or not ks
            or any(isinstance(k, bool) or not isinstance(k, int) for k in ks)
        ):
            raise ValueError(f"ks (--k) must be a non-empty list of integers, got {ks!r}")
        if any(not 1 <= k <= n for k in ks):
            raise ValueError(f"every k in ks (--k) must be in [1, n={n}], got {sorted(set(ks))}")
    if limit is not None:
        check_int("limit", limit, low=1)
    check_int("batch_size", arguments["batch_size"], low=1)
    timeout = arguments["timeout"]
    if timeout is not None and not (is_real(timeout) and math.isfinite(timeout) and timeout > 0):
        raise ValueError(
            "timeout must be a finite number of seconds > 0 (or None for the default), "
            f"got {timeout!r}"
        )
    check_int("score_workers", arguments["score_workers"], low=1)


def _check_data(benchmarks: Sequence[str], data_files: Any, data_dir: Any) -> None:
    for name, path in (data_files or {}).items():
        if name not in benchmarks:
            raise ValueError(
                f"data_files (--data-file) names {name!r}, which is not among the benchmarks "
                f"{list(benchmarks)}"
            )
        file = Path(path).expanduser()
        if not file.is_file():
            problem = "is a directory" if file.is_dir() else "does not exist"
            raise ValueError(f"data file for {name!r} ({str(path)!r}) {problem}")
    if data_dir is not None and not Path(data_dir).expanduser().is_dir():
        raise ValueError(f"data_dir (--data-dir) {str(data_dir)!r} is not a directory")


def _check_generation(arguments: Mapping[str, Any]) -> None:
    """The backend, the prompt template, the sampling and what to generate with."""
    backend, template, chat, sampling = (
        arguments[k] for k in ("backend", "template", "chat", "sampling")
    )
    model, tokenizer, generator = (arguments[k] for k in ("model", "tokenizer", "generator"))
    if backend not in ("auto", "vllm", "transformers"):
        raise ValueError(f"backend must be 'auto', 'vllm' or 'transformers', got {backend!r}")
    if template not in TEMPLATES:
        raise ValueError(f"template must be one of {sorted(TEMPLATES)}, got {template!r}")
    if chat not in (None, True, False):
        raise ValueError(f"chat must be None, True or False, got {chat!r}")
    if sampling is not None and not isinstance(sampling, SamplingConfig):
        raise ValueError(f"sampling must be a SamplingConfig, got {type(sampling).__name__}")
    if generator is not None and tokenizer is None:
        raise ValueError("a custom generator needs the tokenizer that renders its prompts")
    models.resolve_placement(arguments["device"], arguments["dtype"])  # a GPU that is not there
    if generator is None and model is None:
        if backend == "vllm" and not vllm_available():
            raise ValueError("backend 'vllm' needs the vllm package (pip install vllm; GPU only)")
        models.resolve_model_path(arguments["model_name"])  # a missing local path fails now


def _check_out_dir(out_dir: Any, overwrite: bool) -> None:
    out = check_output_path(out_dir, "out_dir (--out)", kind="dir")
    existing = [name for name in RESULT_FILES if (out / name).exists()]
    if existing and not overwrite:
        raise ValueError(
            f"out_dir (--out) {str(out_dir)!r} already holds results ({', '.join(existing)}); "
            "pass --overwrite (overwrite=True) to replace them or choose another directory"
        )
