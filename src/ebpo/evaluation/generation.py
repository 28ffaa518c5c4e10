"""Sampling responses from a causal LM and scoring them with the math reward.

Generation: vLLM when installed and asked for (:class:`VLLMGenerator`, GPU), otherwise
transformers ``generate`` (:class:`TransformersGenerator`: batched, left padding, KV cache). Any
object with the :class:`Generator` method can stand in (tests use scripted ones).
:func:`sample_and_score` renders the prompts, samples and scores every response through
:func:`ebpo.rewards.score_math_batch`, the same path as the training reward.

    from ebpo.evaluation import sample_and_score, summarize
    records = sample_and_score(model, tokenizer, problems, n=4, max_new_tokens=256)
    summarize(records, ks=(1, 4))
"""

from __future__ import annotations

import importlib.util
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import torch
from tqdm.auto import tqdm

from ebpo.data.templates import render_prompt
from ebpo.rewards import DEFAULT_TIMEOUT, score_math_batch
from ebpo.utils.checks import check_int, is_real

__all__ = [
    "PAPER_MAX_NEW_TOKENS",
    "Generation",
    "Generator",
    "SamplingConfig",
    "TransformersGenerator",
    "VLLMGenerator",
    "sample_and_score",
    "vllm_available",
]

#: The paper's generation budget (new tokens per response).
PAPER_MAX_NEW_TOKENS = 20_480


@dataclass(frozen=True)
class SamplingConfig:
    """Sampling options; defaults are the paper's (temperature 1.0, top-p 1.0, up to 20,480 new
    tokens). ``temperature=0`` means greedy decoding."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = PAPER_MAX_NEW_TOKENS
    seed: int = 0

    def __post_init__(self) -> None:
        if not (
            is_real(self.temperature) and math.isfinite(self.temperature) and self.temperature >= 0
        ):
            raise ValueError(
                f"temperature must be a finite number >= 0 (0 = greedy), got {self.temperature!r}"
            )
        if not (is_real(self.top_p) and 0 < self.top_p <= 1):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        check_int("max_new_tokens", self.max_new_tokens, low=1)
        check_int("seed", self.seed, low=0)


@dataclass(frozen=True)
class Generation:
    """One sampled response: its text, its length in tokens, and whether it ended with EOS (False:
    cut at max_new_tokens)."""

    text: str
    num_tokens: int
    finished: bool


class Generator(Protocol):
    """What :func:`sample_and_score` samples with: ``n`` generations for each prompt, in order;
    ``progress`` (a tqdm bar or None) is advanced by the number of finished samples."""

    def generate(
        self, prompts: Sequence[str], n: int, progress: Any = None
    ) -> list[list[Generation]]: ...


class TransformersGenerator:
    """Sampling with ``model.generate``: prompts repeated n times, ``batch_size`` sequences per
    call, left padding so every row continues right after its prompt, KV cache on."""

    def __init__(
        self, model: Any, tokenizer: Any, sampling: SamplingConfig, *, batch_size: int = 16
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
        if tokenizer.pad_token_id is None and tokenizer.eos_token_id is None:
            raise ValueError("tokenizer needs a pad or eos token for batched generation")
        self.model, self.tokenizer, self.sampling = model, tokenizer, sampling
        self.batch_size = batch_size

    def generate(
        self, prompts: Sequence[str], n: int, progress: Any = None
    ) -> list[list[Generation]]:
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
                attention = torch.tensor(
                    [[0] * (width - len(ids)) + [1] * len(ids) for ids in encoded]
                )
                # top_k=0: transformers' generation config defaults to top_k=50, which the paper's
                # "temperature 1.0, top-p 1.0" (pure ancestral sampling, vLLM's default) excludes.
                sample_kwargs: dict[str, Any] = (
                    {"do_sample": True, "temperature": s.temperature, "top_p": s.top_p, "top_k": 0}
                    if s.temperature > 0
                    else {"do_sample": False}
                )
                if progress is not None:
                    sample_kwargs["stopping_criteria"] = [
                        _StepProgress(progress, width, s.max_new_tokens)
                    ]
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
        return cast("list[list[Generation]]", out)  # every job filled its slot


class _StepProgress:
    """A never-stopping ``StoppingCriteria`` that shows the decoding step of the current batch in
    the progress bar's postfix (a batch of long generations can take minutes on CPU)."""

    def __init__(
        self, bar: Any, prompt_width: int, max_new_tokens: int, every: float = 2.0
    ) -> None:
        self.bar, self.width, self.max = bar, prompt_width, max_new_tokens
        self.every, self.last = every, 0.0

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            self.bar.set_postfix_str(
                f"token {input_ids.shape[1] - self.width}/{self.max}", refresh=True
            )
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
    """Whether the ``vllm`` package is installed (it is not imported)."""
    return importlib.util.find_spec("vllm") is not None


class VLLMGenerator:
    """Sampling with vLLM (GPU): one ``LLM.generate`` call with ``SamplingParams(n=...)``."""

    def __init__(self, model_path: str, sampling: SamplingConfig, **llm_kwargs: Any) -> None:
        if not vllm_available():
            raise ValueError("backend 'vllm' needs the vllm package (pip install vllm; GPU only)")
        from vllm import LLM  # optional heavy dependency (GPU only)

        self.sampling = sampling
        self.llm = LLM(model=model_path, seed=sampling.seed, **llm_kwargs)

    def generate(
        self, prompts: Sequence[str], n: int, progress: Any = None
    ) -> list[list[Generation]]:
        from vllm import SamplingParams  # optional heavy dependency (GPU only)

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
    :func:`ebpo.data.templates.render_prompt` (``template``; the tokenizer's chat template when it
    has one, unless ``chat=False``). ``sampling`` or keyword arguments (``temperature``,
    ``top_p``, ``max_new_tokens``, ``seed``) set the sampling; ``generator`` replaces the
    transformers backend (e.g. a :class:`VLLMGenerator`). Returns one record per sample:
    ``benchmark``, ``problem_id``, ``sample_index``, ``prompt``, ``response``, ``prediction``,
    ``answer``, ``score``, ``status``, ``num_tokens``, ``finished``."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n!r}")
    if sampling is None:
        sampling = SamplingConfig(**sampling_kwargs)
    elif sampling_kwargs:
        raise ValueError(
            "pass sampling options either as sampling= or as keywords, not both: "
            f"{sorted(sampling_kwargs)}"
        )
    for i, problem in enumerate(problems):
        if "prompt" not in problem or "answer" not in problem:
            raise ValueError(
                f"problems[{i}] must have 'prompt' and 'answer' (the ebpo.data schema), "
                f"got {sorted(problem)}"
            )
    prompts = [
        render_prompt(p["prompt"], tokenizer, template=template, chat=chat) for p in problems
    ]
    generator = generator or TransformersGenerator(
        model, tokenizer, sampling, batch_size=batch_size
    )
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
