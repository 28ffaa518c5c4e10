"""Pass@k evaluation of a causal LM on math benchmarks (the EBPO paper's protocol).

- :mod:`~ebpo.evaluation.metrics`: pass@k (Chen et al., 2021), maj@k and per-benchmark summaries;
- :mod:`~ebpo.evaluation.generation`: sampling (transformers or vLLM) and scoring with the
  training reward (:func:`sample_and_score`);
- :mod:`~ebpo.evaluation.job`: the ``ebpo eval`` job (:func:`run_eval`) and its tables;
- :mod:`~ebpo.evaluation.models`: loading models and tokenizers, tiny local models.

    from ebpo.evaluation import sample_and_score, summarize
    records = sample_and_score(model, tokenizer, problems, n=4, max_new_tokens=256)
    summarize(records, ks=(1, 4))
"""

from ebpo.evaluation.generation import (
    PAPER_MAX_NEW_TOKENS,
    Generation,
    Generator,
    SamplingConfig,
    TransformersGenerator,
    VLLMGenerator,
    sample_and_score,
    vllm_available,
)
from ebpo.evaluation.job import (
    PAPER_BENCHMARKS,
    RESULT_FILES,
    check_eval_options,
    format_table,
    results_table,
    run_eval,
)
from ebpo.evaluation.metrics import maj_at_k, pass_at_k, summarize

__all__ = [
    "PAPER_BENCHMARKS",
    "PAPER_MAX_NEW_TOKENS",
    "RESULT_FILES",
    "Generation",
    "Generator",
    "SamplingConfig",
    "TransformersGenerator",
    "VLLMGenerator",
    "check_eval_options",
    "format_table",
    "maj_at_k",
    "pass_at_k",
    "results_table",
    "run_eval",
    "sample_and_score",
    "summarize",
    "vllm_available",
]
