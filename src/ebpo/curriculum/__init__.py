"""Topic and difficulty labels, and the training orders built from them (EBPO spec, "Curriculum /
clustered sampling"; Prop 3.8).

Why order matters for EBPO: the prior is a running mean of group means. Under a random order its
error is Var(theta) = E_k[Var(theta | k)] + Var_k(mu_k); when consecutive batches come from one topic
k the prior tracks mu_k and the between-topic term Var_k(mu_k) disappears (Prop 3.8). Two ways to
get that benefit:

* order the data: ``order_indices(n, "topic", topic=labels)`` (EBPO-topic) or ``"difficulty"``
  (EBPO-diff: easy -> hard, one epoch), then train without shuffling; or
* keep the data shuffled and give the estimator the topic column: ``EBPO(per_cluster=True)`` with
  ``clusters=`` per response keeps one prior per topic.

"Tracks" needs a prior that forgets: with the default cumulative ``prior="history"`` the prior
averages every block seen so far, so topic order helps in the first block only; ``prior="ema"`` (or
``"batch"``) follows each block. Per-cluster priors remove the between-topic term with any prior
(tests/curriculum/test_order.py measures both).

Modules:

* :mod:`~ebpo.curriculum.order` — :data:`ORDERS`, :func:`order_indices`, :func:`difficulty_tiers`;
* :mod:`~ebpo.curriculum.dataset_order` — the same orders over a dataset's own columns, and
  picking a dataset's topic / level / prompt column;
* :mod:`~ebpo.curriculum.topics` — topic labels: metadata, a user function, TF-IDF + KMeans,
  sentence embeddings + UMAP + KMeans;
* :mod:`~ebpo.curriculum.llm` — the paper's nine-domain LLM labeller over an OpenAI-compatible
  endpoint (off by default);
* :mod:`~ebpo.curriculum.difficulty` — difficulty (higher = harder) from levels or ``1 - pass
  rate`` (paper: 16 samples at temperature 1.0).

Importing the package imports numpy and tqdm only; scikit-learn, umap-learn and
sentence-transformers are imported by the functions that need them. The torch/verl samplers live
in ``ebpo.integrations.verl.curriculum_sampler``.
"""

from ebpo.curriculum.dataset_order import (
    DIFFICULTY_KEYS,
    TOPIC_KEYS,
    column_has_any,
    column_is_complete,
    column_names,
    column_values,
    curriculum_order,
    dataset_column,
    is_blank_or_missing,
    pick_column,
    present_columns,
)
from ebpo.curriculum.difficulty import (
    difficulty_from_levels,
    difficulty_from_pass_rates,
    estimate_pass_rates,
    pass_rates_from_records,
)
from ebpo.curriculum.llm import (
    LLM_TOPIC_PROMPT,
    MATH_DOMAINS,
    OPENAI_HOST,
    UNCLASSIFIED,
    llm_api_key,
    llm_topic_prompt,
    llm_topics,
    openai_compatible_completer,
    parse_llm_topic,
)
from ebpo.curriculum.order import ORDERS, difficulty_tiers, is_contiguous, order_indices
from ebpo.curriculum.topics import (
    EMBEDDING_MODEL,
    TOPIC_METHODS,
    MissingDependencyError,
    choose_topic_method,
    clustering_available,
    embedding_available,
    embedding_umap_kmeans_topics,
    load_embedding_model,
    prompt_text,
    resolve_embedding_model,
    tfidf_kmeans_topics,
    topics_from_function,
    topics_from_metadata,
)

__all__ = [
    "DIFFICULTY_KEYS",
    "EMBEDDING_MODEL",
    "LLM_TOPIC_PROMPT",
    "MATH_DOMAINS",
    "OPENAI_HOST",
    "ORDERS",
    "TOPIC_KEYS",
    "TOPIC_METHODS",
    "UNCLASSIFIED",
    "MissingDependencyError",
    "choose_topic_method",
    "clustering_available",
    "column_has_any",
    "column_is_complete",
    "column_names",
    "column_values",
    "curriculum_order",
    "dataset_column",
    "difficulty_from_levels",
    "difficulty_from_pass_rates",
    "difficulty_tiers",
    "embedding_available",
    "embedding_umap_kmeans_topics",
    "estimate_pass_rates",
    "is_blank_or_missing",
    "is_contiguous",
    "llm_api_key",
    "llm_topic_prompt",
    "llm_topics",
    "load_embedding_model",
    "openai_compatible_completer",
    "order_indices",
    "parse_llm_topic",
    "pass_rates_from_records",
    "pick_column",
    "present_columns",
    "prompt_text",
    "resolve_embedding_model",
    "tfidf_kmeans_topics",
    "topics_from_function",
    "topics_from_metadata",
]
