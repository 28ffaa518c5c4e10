"""Pass@k evaluation of a causal LM on math benchmarks (the EBPO paper's protocol).

Metrics, per benchmark, from n samples per problem of which c are correct:

- **Pass@1** = mean over problems of c/n (the paper's headline metric: "Pass@1 averaged over 32
  samples", temperature 1.0, top-p 1.0).
- **pass@k** (k <= n): the unbiased estimator of Chen et al. (2021, "Evaluating Large Language
  Models Trained on Code", eq. 1), averaged over problems:
      pass@k = 1 - C(n - c, k) / C(n, k)
  computed as 1 - prod_{i=n-c+1}^{n} (1 - k/i) to stay exact in floating point for large n.
- **maj@k** (k <= n): majority vote over the extracted answers of the first k samples (answers
  grouped by their normalised string, responses without an answer do not vote, ties go to the
  answer seen first); 1 if the winning answer is correct.

Generation: vLLM when installed and asked for (``backend="vllm"``, GPU), otherwise transformers
``generate`` (batched, left padding, KV cache). Scoring goes through
:func:`ebpo.rewards.score_math_detailed`, the same path as the training reward.

    from ebpo.evaluation import sample_and_score, summarize
    records = sample_and_score(model, tokenizer, problems, n=4, max_new_tokens=256)
    summarize(records, ks=(1, 4))
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import platform
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from ebpo.utils.files import atomic_write

__all__ = [
    "PAPER_BENCHMARKS",
    "Generation",
    "SamplingConfig",
    "TransformersGenerator",
    "VLLMGenerator",
    "check_eval_options",
    "format_table",
    "maj_at_k",
    "pass_at_k",
    "run_eval",
    "sample_and_score",
    "summarize",
    "vllm_available",
]

PAPER_BENCHMARKS = ("math-500", "aime-2024", "aime-2025", "amc-2023", "olympiadbench")
PAPER_MAX_NEW_TOKENS = 20_480


# ---------------------------------------------------------------------------------------- metrics
def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of Chen et al. (2021): the probability that at least one of k samples drawn
    without replacement from n samples, c of them correct, is correct: 1 - C(n-c, k)/C(n, k)."""
    for name, value in (("n", n), ("c", c), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} must be an int, got {value!r}")
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"need n >= 1 and 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, n={n}], got {k}")
    if n - c < k:  # every k-subset contains a correct sample
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def maj_at_k(predictions: Sequence[str | None], scores: Sequence[float], k: int) -> float:
    """Majority vote over the first ``k`` samples: 1.0 if the most frequent extracted answer
    (normalised string; None = no answer, does not vote; ties -> first seen) was scored correct."""
    from ebpo.rewards import normalize_answer

    if len(predictions) != len(scores):
        raise ValueError(f"predictions and scores differ in length: {len(predictions)} vs {len(scores)}")
    if not 1 <= k <= len(predictions):
        raise ValueError(f"k must be in [1, {len(predictions)}], got {k}")
    votes: Counter[str] = Counter()
    first: dict[str, int] = {}
    for i in range(k):
        if predictions[i] is None:
            continue
        key = normalize_answer(predictions[i])
        votes[key] += 1
        first.setdefault(key, i)
    if not votes:
        return 0.0
    winner = max(votes, key=lambda key: (votes[key], -first[key]))
    return float(scores[first[winner]] == 1.0)


def summarize(records: Iterable[Mapping[str, Any]], ks: Sequence[int] = (1,)) -> dict[str, dict[str, float]]:
    """Per-benchmark metrics (fractions in [0, 1]) from per-sample records (keys ``benchmark``,
    ``problem_id``, ``sample_index``, ``prediction``, ``score``): ``pass@1`` plus ``pass@k`` and
    ``maj@k`` for every k in ``ks`` with k <= n (n = samples per problem, the minimum over
    problems), and ``n``, ``problems``, ``no_answer``, ``timeouts`` (fractions/counts)."""
    by_problem: dict[str, dict[str, list[Mapping[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for record in records:
        by_problem[record["benchmark"]][record["problem_id"]].append(record)
    out: dict[str, dict[str, float]] = {}
    for benchmark, problems in by_problem.items():
        samples = [sorted(s, key=lambda r: r["sample_index"]) for s in problems.values()]
        n = min(len(s) for s in samples)
        metrics: dict[str, float] = {"problems": float(len(samples)), "n": float(n)}
        for k in sorted({1, *ks}):
            if k > n:
                continue
            metrics[f"pass@{k}"] = _mean(pass_at_k(len(s), sum(r["score"] == 1.0 for r in s), k) for s in samples)
            if k > 1:
                metrics[f"maj@{k}"] = _mean(
                    maj_at_k([r["prediction"] for r in s], [r["score"] for r in s], k) for s in samples
                )
        flat = [r for s in samples for r in s]
        metrics["no_answer"] = _mean(r.get("status") == "no_answer" for r in flat)
        metrics["timeouts"] = float(sum(r.get("status") == "timeout" for r in flat))
        out[benchmark] = metrics
    return out


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return sum(values) / len(values) if values else float("nan")


# ------------------------------------------------------------------------------------ generation
@dataclass(frozen=True)
class SamplingConfig:
    """Sampling options; defaults are the paper's (temperature 1.0, top-p 1.0, up to 20,480 new
    tokens). ``temperature=0`` means greedy decoding."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = PAPER_MAX_NEW_TOKENS
    seed: int = 0

    def __post_init__(self) -> None:
        if not (_is_number(self.temperature) and math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {self.temperature!r}")
        if not (_is_number(self.top_p) and 0 < self.top_p <= 1):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        _check_int("max_new_tokens", self.max_new_tokens, 1)
        _check_int("seed", self.seed, 0)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_int(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


@dataclass(frozen=True)
class Generation:
    """One sampled response: its text, its length in tokens, and whether it ended with EOS (False:
    cut at max_new_tokens)."""

    text: str
    num_tokens: int
    finished: bool


class Generator(Protocol):
    def generate(self, prompts: Sequence[str], n: int, progress: Any = None) -> list[list[Generation]]: ...


class TransformersGenerator:
    """Sampling with ``model.generate``: prompts repeated n times, ``batch_size`` sequences per
    call, left padding so every row continues right after its prompt, KV cache on."""

    def __init__(self, model: Any, tokenizer: Any, sampling: SamplingConfig, *, batch_size: int = 16) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
        if tokenizer.pad_token_id is None and tokenizer.eos_token_id is None:
            raise ValueError("tokenizer needs a pad or eos token for batched generation")
        self.model, self.tokenizer, self.sampling, self.batch_size = model, tokenizer, sampling, batch_size

    def generate(self, prompts: Sequence[str], n: int, progress: Any = None) -> list[list[Generation]]:
        import torch

        tok, s = self.tokenizer, self.sampling
        pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        eos_ids = _eos_ids(self.model, tok)
        jobs = [(p, j) for p in range(len(prompts)) for j in range(n)]
        out: list[list[Generation | None]] = [[None] * n for _ in prompts]
        generator_state = torch.random.fork_rng()
        with generator_state, torch.inference_mode():
            torch.manual_seed(s.seed)
            self.model.eval()
            for start in range(0, len(jobs), self.batch_size):
                chunk = jobs[start : start + self.batch_size]
                encoded = [_encode(tok, prompts[p]) for p, _ in chunk]
                width = max(len(ids) for ids in encoded)
                input_ids = torch.tensor([[pad_id] * (width - len(ids)) + ids for ids in encoded])
                attention = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in encoded])
                # top_k=0: transformers' generation config defaults to top_k=50, which the paper's
                # "temperature 1.0, top-p 1.0" (pure ancestral sampling, vLLM's default) excludes.
                sample_kwargs = (
                    {"do_sample": True, "temperature": s.temperature, "top_p": s.top_p, "top_k": 0}
                    if s.temperature > 0
                    else {"do_sample": False}
                )
                if progress is not None:
                    sample_kwargs["stopping_criteria"] = [_StepProgress(progress, width, s.max_new_tokens)]
                generated = self.model.generate(
                    input_ids=input_ids.to(self.model.device),
                    attention_mask=attention.to(self.model.device),
                    max_new_tokens=s.max_new_tokens,
                    pad_token_id=pad_id,
                    eos_token_id=eos_ids or None,
                    use_cache=True,
                    **sample_kwargs,
                )[:, width:].tolist()
                for (p, j), ids in zip(chunk, generated, strict=True):
                    out[p][j] = _to_generation(tok, ids, eos_ids, pad_id)
                if progress is not None:
                    progress.update(len(chunk))
        return out  # type: ignore[return-value]


class _StepProgress:
    """A never-stopping ``StoppingCriteria`` that shows the decoding step of the current batch in
    the progress bar's postfix (a batch of long generations can take minutes on CPU)."""

    def __init__(self, bar: Any, prompt_width: int, max_new_tokens: int, every: float = 2.0) -> None:
        self.bar, self.width, self.max, self.every, self.last = bar, prompt_width, max_new_tokens, every, 0.0

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            self.bar.set_postfix_str(f"token {input_ids.shape[1] - self.width}/{self.max}", refresh=True)
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


def _encode(tokenizer: Any, prompt: str) -> list[int]:
    # A rendered chat template already holds the BOS text (e.g. Llama 3's <|begin_of_text|>);
    # plain prompts for base models get the tokenizer's special tokens.
    bos = tokenizer.bos_token
    add_special = not (bos and prompt.startswith(bos))
    return tokenizer(prompt, add_special_tokens=add_special)["input_ids"]


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    ids = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = list(ids) if isinstance(ids, (list, tuple)) else ([ids] if ids is not None else [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return ids


def _to_generation(tokenizer: Any, ids: list[int], eos_ids: list[int], pad_id: int) -> Generation:
    # Generated rows are right-padded after EOS; cut at the first EOS.
    finished = False
    for i, token in enumerate(ids):
        if token in eos_ids:
            ids, finished = ids[:i], True
            break
    else:
        while ids and ids[-1] == pad_id and pad_id not in eos_ids:
            ids = ids[:-1]
    # clean_up_tokenization_spaces=False: the cleanup strips spaces before punctuation, which
    # corrupts BPE output (transformers warns about it).
    text = tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
    return Generation(text, len(ids) + int(finished), finished)


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


class VLLMGenerator:
    """Sampling with vLLM (GPU): one ``LLM.generate`` call with ``SamplingParams(n=...)``."""

    def __init__(self, model_path: str, sampling: SamplingConfig, **llm_kwargs: Any) -> None:
        if not vllm_available():
            raise ValueError("backend 'vllm' needs the vllm package (pip install vllm; GPU only)")
        from vllm import LLM

        self.sampling = sampling
        self.llm = LLM(model=model_path, seed=sampling.seed, **llm_kwargs)

    def generate(self, prompts: Sequence[str], n: int, progress: Any = None) -> list[list[Generation]]:
        from vllm import SamplingParams

        s = self.sampling
        params = SamplingParams(
            n=n, temperature=s.temperature, top_p=s.top_p, max_tokens=s.max_new_tokens, seed=s.seed
        )
        outputs = self.llm.generate(list(prompts), params, use_tqdm=False)
        if progress is not None:
            progress.update(len(prompts) * n)
        return [
            [Generation(o.text, len(o.token_ids), o.finish_reason == "stop") for o in out.outputs]
            for out in outputs
        ]


# ---------------------------------------------------------------------------------- sample+score
def sample_and_score(
    model: Any,
    tokenizer: Any,
    problems: Sequence[Mapping[str, Any]],
    n: int,
    *,
    template: str = "dapo",
    chat: bool | None = None,
    sampling: SamplingConfig | None = None,
    batch_size: int = 16,
    generator: Generator | None = None,
    timeout: float | None = None,
    score_workers: int = 1,
    progress: bool = True,
    **sampling_kwargs: Any,
) -> list[dict[str, Any]]:
    """Sample ``n`` responses per problem and score each with :func:`ebpo.rewards.score_math`.

    ``problems``: rows of the unified schema (:mod:`ebpo.data`). Prompts are rendered with
    :func:`ebpo.data.templates.render_prompt` (``template``; the tokenizer's chat template when it has
    one, unless ``chat=False``). ``sampling`` or keyword arguments (``temperature``, ``top_p``,
    ``max_new_tokens``, ``seed``) set the sampling; ``generator`` replaces the transformers
    backend (e.g. a :class:`VLLMGenerator`). Returns one record per sample: ``benchmark``,
    ``problem_id``, ``sample_index``, ``prompt``, ``response``, ``prediction``, ``answer``,
    ``score``, ``status``, ``num_tokens``, ``finished``."""
    from tqdm.auto import tqdm

    from ebpo.rewards import DEFAULT_TIMEOUT, score_math_batch
    from ebpo.data.templates import render_prompt

    if n < 1:
        raise ValueError(f"n must be >= 1, got {n!r}")
    if sampling is None:
        sampling = SamplingConfig(**sampling_kwargs)
    elif sampling_kwargs:
        raise ValueError(f"pass sampling options either as sampling= or as keywords, not both: {sorted(sampling_kwargs)}")
    for i, problem in enumerate(problems):
        if "prompt" not in problem or "answer" not in problem:
            raise ValueError(f"problems[{i}] must have 'prompt' and 'answer' (the ebpo.data schema), got {sorted(problem)}")
    prompts = [render_prompt(p["prompt"], tokenizer, template=template, chat=chat) for p in problems]
    generator = generator or TransformersGenerator(model, tokenizer, sampling, batch_size=batch_size)
    with tqdm(total=len(prompts) * n, desc="sampling", unit="sample", disable=not progress) as bar:
        generations = generator.generate(prompts, n, progress=bar)
    flat = [(i, j, g) for i, gens in enumerate(generations) for j, g in enumerate(gens)]
    results = score_math_batch(
        [g.text for _, _, g in flat],
        [problems[i]["answer"] for i, _, _ in flat],
        timeout=timeout or DEFAULT_TIMEOUT,
        num_workers=score_workers,
        progress=progress,
    )
    records = []
    for (i, j, g), result in zip(flat, results, strict=True):
        problem = problems[i]
        records.append(
            {
                "benchmark": problem.get("source", ""),
                "problem_id": problem.get("id", str(i)),
                "sample_index": j,
                "prompt": prompts[i],
                "response": g.text,
                "prediction": result.prediction,
                "answer": problem["answer"],
                "score": result.score,
                "status": result.status,
                "num_tokens": g.num_tokens,
                "finished": g.finished,
            }
        )
    return records


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
        values = [100.0 * results[b][metric] if metric in results.get(b, {}) else None for b in benchmarks]
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
) -> dict[str, Any]:
    """Evaluate ``model_name`` on ``benchmarks`` and write to ``out_dir``:

    - ``samples.jsonl``: every sample with its prompt, response, extracted answer, score, status;
    - ``results.md`` / ``results.csv`` / ``results.json``: the table (metrics x benchmarks + avg,
      in percent) and, in JSON, the raw metrics and the configuration.

    ``backend``: ``"vllm"``, ``"transformers"`` or ``"auto"`` (vLLM if installed and the model is
    not passed in already loaded). ``data_files`` maps benchmark names to local files (hub schema
    or unified); ``data_dir`` (default env ``EBPO_DATA_DIR``) holds ``<benchmark>.parquet``/
    ``.jsonl`` files for the others; ``limit`` caps problems per benchmark. ``ks`` defaults to (1, n). An already
    loaded ``model``/``tokenizer`` or a custom ``generator`` (with ``tokenizer``) skip loading.

    Every option and the output directory are checked first (:func:`check_eval_options`), before
    any data or model is loaded. An ``out_dir`` that already holds results of an evaluation is
    refused unless ``overwrite``; each file is then replaced atomically (:mod:`ebpo.utils.files`)."""
    _check_eval_arguments(locals())  # first: every argument, before anything is loaded
    from ebpo.data import load_dataset

    ks = tuple(sorted(set(ks or (1, n))))
    sampling = sampling or SamplingConfig()
    data_files = dict(data_files or {})

    problems: list[dict[str, str]] = []
    for name in benchmarks:
        rows = load_dataset(name, data_files=data_files.get(name), data_dir=data_dir, limit=limit)
        for row in rows:
            row["source"] = name  # the column a record is tabulated under
        problems += rows

    use_vllm = generator is None and (
        backend == "vllm" or (backend == "auto" and model is None and vllm_available())
    )
    if use_vllm:
        from ebpo.evaluation.models import resolve_model_path

        generator = VLLMGenerator(resolve_model_path(model_name), sampling)
        if tokenizer is None:
            tokenizer = generator.llm.get_tokenizer()
    elif generator is None and (model is None or tokenizer is None):
        from ebpo.evaluation.models import load_model_and_tokenizer

        model, tokenizer = load_model_and_tokenizer(model_name)

    started = time.time()
    records = sample_and_score(
        model, tokenizer, problems, n, template=template, chat=chat, sampling=sampling,
        batch_size=batch_size, generator=generator, timeout=timeout, score_workers=score_workers,
        progress=progress,
    )
    elapsed = time.time() - started
    metrics = summarize(records, ks)
    header, rows = results_table(metrics, benchmarks, ks)

    title = f"{model_name}: {', '.join(_metric_names(metrics, ks))} (%), n={n}, T={sampling.temperature}, top-p={sampling.top_p}"
    markdown = format_table(header, rows, title)
    table = io.StringIO()
    writer = csv.writer(table)
    writer.writerow(["model", *header])
    for row in rows:
        writer.writerow([model_name, *("" if v is None else (round(v, 4) if isinstance(v, float) else v) for v in row)])
    summary = {
        "model": model_name,
        "benchmarks": list(benchmarks),
        "table": {"columns": header, "rows": rows},
        "metrics": metrics,
        "config": {
            "n": n, "ks": list(ks), "template": template, "chat": chat, "limit": limit,
            "backend": "vllm" if use_vllm else "transformers", "batch_size": batch_size,
            "sampling": asdict(sampling), "data_files": data_files,
            "data_dir": None if data_dir is None else str(data_dir),
        },
        "samples": len(records),
        "seconds": round(elapsed, 2),
        "python": platform.python_version(),
    }
    # Everything is rendered before the first file is written; samples first (the costly part).
    texts = {
        "samples.jsonl": "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records),
        "results.md": markdown,
        "results.csv": table.getvalue(),
        "results.json": json.dumps(summary, indent=2),
    }
    out = Path(out_dir).expanduser()
    for name, text in texts.items():
        with atomic_write(out / name, newline="") as handle:
            handle.write(text)
    summary["markdown"] = markdown
    return summary


#: The files :func:`run_eval` writes into its output directory.
RESULT_FILES = ("samples.jsonl", "results.md", "results.csv", "results.json")


def check_eval_options(*args: Any, **kwargs: Any) -> None:
    """Check the arguments of :func:`run_eval` (same signature) without loading anything; raise
    ValueError naming the first bad one. :func:`run_eval` runs the same checks before it loads any
    data or model, so a typo never costs a generation run and an earlier result is never lost."""
    import inspect

    try:
        bound = inspect.signature(run_eval).bind(*args, **kwargs)
    except TypeError as error:
        raise ValueError(f"run_eval arguments: {error}") from None
    bound.apply_defaults()
    _check_eval_arguments(bound.arguments)


def _check_eval_arguments(arguments: Mapping[str, Any]) -> None:
    """The checks behind :func:`check_eval_options`, on ``run_eval``'s arguments by name."""
    from ebpo.data import DATASETS
    from ebpo.utils.files import check_output_path
    from ebpo.data.templates import TEMPLATES

    model_name, benchmarks, n, ks = (arguments[k] for k in ("model_name", "benchmarks", "n", "ks"))
    out_dir, data_files, data_dir, limit = (arguments[k] for k in ("out_dir", "data_files", "data_dir", "limit"))
    backend, template, chat, sampling = (arguments[k] for k in ("backend", "template", "chat", "sampling"))
    batch_size, timeout, score_workers = (arguments[k] for k in ("batch_size", "timeout", "score_workers"))
    model, tokenizer, generator, overwrite = (arguments[k] for k in ("model", "tokenizer", "generator", "overwrite"))

    if not isinstance(model_name, str) or not model_name.strip():
        raise ValueError(f"model_name (--model) must be a model name or path, got {model_name!r}")
    if isinstance(benchmarks, str) or not benchmarks:
        raise ValueError(f"benchmarks must be a non-empty list of names from {sorted(DATASETS)}, got {benchmarks!r}")
    unknown = [b for b in benchmarks if b not in DATASETS]
    if unknown:
        raise ValueError(f"benchmarks: unknown {unknown}; choose from {sorted(DATASETS)}")
    repeated = sorted({b for b in benchmarks if list(benchmarks).count(b) > 1})
    if repeated:
        raise ValueError(f"benchmarks: {repeated} named more than once")
    _check_int("n", n, 1)
    if ks is not None:
        if isinstance(ks, str) or not ks or any(isinstance(k, bool) or not isinstance(k, int) for k in ks):
            raise ValueError(f"ks (--k) must be a non-empty list of integers, got {ks!r}")
        if any(not 1 <= k <= n for k in ks):
            raise ValueError(f"every k in ks (--k) must be in [1, n={n}], got {sorted(set(ks))}")
    for name, path in (data_files or {}).items():
        if name not in benchmarks:
            raise ValueError(f"data_files (--data-file) names {name!r}, which is not among the benchmarks {list(benchmarks)}")
        file = Path(path).expanduser()
        if not file.is_file():
            raise ValueError(f"data file for {name!r} ({str(path)!r}) {'is a directory' if file.is_dir() else 'does not exist'}")
    if data_dir is not None and not Path(data_dir).expanduser().is_dir():
        raise ValueError(f"data_dir (--data-dir) {str(data_dir)!r} is not a directory")
    if limit is not None:
        _check_int("limit", limit, 1)
    if backend not in ("auto", "vllm", "transformers"):
        raise ValueError(f"backend must be 'auto', 'vllm' or 'transformers', got {backend!r}")
    if template not in TEMPLATES:
        raise ValueError(f"template must be one of {sorted(TEMPLATES)}, got {template!r}")
    if chat not in (None, True, False):
        raise ValueError(f"chat must be None, True or False, got {chat!r}")
    if sampling is not None and not isinstance(sampling, SamplingConfig):
        raise ValueError(f"sampling must be a SamplingConfig, got {type(sampling).__name__}")
    _check_int("batch_size", batch_size, 1)
    if timeout is not None and not (_is_number(timeout) and math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"timeout must be a finite number of seconds > 0 (or None for the default), got {timeout!r}")
    _check_int("score_workers", score_workers, 1)
    if generator is not None and tokenizer is None:
        raise ValueError("a custom generator needs the tokenizer that renders its prompts")
    if generator is None and model is None:
        if backend == "vllm" and not vllm_available():
            raise ValueError("backend 'vllm' needs the vllm package (pip install vllm; GPU only)")
        from ebpo.evaluation.models import resolve_model_path

        resolve_model_path(model_name)  # a local path that does not exist fails now
    out = check_output_path(out_dir, "out_dir (--out)", kind="dir")
    existing = [name for name in RESULT_FILES if (out / name).exists()]
    if existing and not overwrite:
        raise ValueError(
            f"out_dir (--out) {str(out_dir)!r} already holds results ({', '.join(existing)}); pass --overwrite "
            "(overwrite=True) to replace them or choose another directory"
        )
