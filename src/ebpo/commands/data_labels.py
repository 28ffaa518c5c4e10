"""How ``ebpo data label`` computes its columns from its options: the topic labels (a metadata
column, ``--topic-fn``, TF-IDF or embedding clusters, or the LLM labeller), the difficulty (a level
column, or 1 - the pass rate of ``--model`` sampled through :mod:`ebpo.evaluation`) and the columns
each reads (the first present of :data:`PROMPT_COLUMNS`, :data:`TOPIC_COLUMNS`, ...).
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from ebpo import curriculum, evaluation
from ebpo.curriculum import (
    column_has_any,
    column_is_complete,
    column_values,
    dataset_column,
    pick_column,
    present_columns,
)
from ebpo.evaluation import models

__all__ = [
    "ANSWER_COLUMNS",
    "LEVEL_COLUMNS",
    "PROMPT_COLUMNS",
    "TOPIC_COLUMNS",
    "difficulty_labels",
    "pass_rates",
    "topic_labels",
]

PROMPT_COLUMNS = ("prompt", "problem", "question")
TOPIC_COLUMNS = ("topic", "subject")
LEVEL_COLUMNS = ("difficulty", "level")
ANSWER_COLUMNS = ("answer", "reward_model.ground_truth", "solution")


def topic_labels(frame: Any, args: argparse.Namespace, topic_fn: Any = None) -> tuple[list, str]:
    """``(one topic per row, how they were made)`` by ``--topic-fn`` (``topic_fn``, loaded) or
    ``--topic`` (see :func:`ebpo.curriculum.choose_topic_method`)."""
    if topic_fn is not None:
        rows = frame.to_dict(orient="records")
        return curriculum.topics_from_function(rows, topic_fn), f"--topic-fn {args.topic_fn}"
    if args.topic_column and args.topic in ("auto", "metadata"):
        if dataset_column(frame, args.topic_column) is None:
            raise ValueError(
                f"--topic-column {args.topic_column!r}: the dataset has no such column; "
                f"its columns are {list(frame.columns)}"
            )
        if not column_is_complete(frame, args.topic_column):
            raise ValueError(
                f"--topic-column {args.topic_column!r} has rows without a topic; fill them or "
                "cluster instead (--topic tfidf)"
            )
    complete_columns = [
        c
        for c in present_columns(frame, args.topic_column, TOPIC_COLUMNS)
        if column_is_complete(frame, c)
    ]
    method, column = curriculum.choose_topic_method(
        args.topic, complete_columns, topic_column=args.topic_column, candidates=TOPIC_COLUMNS
    )
    if method == "metadata":
        topics = curriculum.topics_from_metadata(column_values(frame, column), column=column)
        return topics, f"metadata column {column!r}"
    texts = [curriculum.prompt_text(p) for p in _prompts(frame, args)]
    if method == "tfidf":
        labels = curriculum.tfidf_kmeans_topics(texts, args.num_topics, seed=args.seed)
        return labels, f"TF-IDF + KMeans (K={args.num_topics}, seed {args.seed})"
    if method == "embed":
        labels = curriculum.embedding_umap_kmeans_topics(
            texts, args.num_topics, seed=args.seed, model=args.embedding_model
        )
        how = f"{args.embedding_model} + UMAP + KMeans (K={args.num_topics}, seed {args.seed})"
        return labels, how
    # llm: off unless asked for, and then both the endpoint and the model must be named.
    if not args.llm_base_url or not args.llm_model:
        raise ValueError(
            "--topic llm needs --llm-base-url (an OpenAI-compatible endpoint) and --llm-model"
        )
    complete = curriculum.openai_compatible_completer(
        args.llm_base_url,
        args.llm_model,
        api_key=curriculum.llm_api_key(args.llm_base_url, args.llm_api_key_env),
        allow_insecure_http=args.llm_allow_insecure_http,
    )
    labels = curriculum.llm_topics(texts, complete)
    unclassified = sum(label == curriculum.UNCLASSIFIED for label in labels)
    return labels, f"LLM {args.llm_model} over nine domains ({unclassified} unclassified)"


def difficulty_labels(frame: Any, args: argparse.Namespace) -> tuple[list[float] | None, str]:
    """``(difficulty per row, higher = harder; how)`` by ``--difficulty``, or ``(None, "")`` when
    ``auto`` finds no level column with numbers. ``pass-rate`` also writes ``pass_rate``."""
    if args.difficulty == "none":
        return None, ""
    if args.difficulty == "pass-rate":
        rates = pass_rates(frame, args)
        frame["pass_rate"] = rates
        how = f"1 - pass rate of {args.model} over {args.samples} samples"
        return curriculum.difficulty_from_pass_rates(rates), how
    names = [
        c
        for c in present_columns(frame, args.level_column, LEVEL_COLUMNS)
        if column_has_any(frame, c)
    ]
    if not names:
        if args.difficulty == "level" or args.level_column:
            wanted = args.level_column or " or ".join(LEVEL_COLUMNS)
            raise ValueError(
                f"--difficulty level needs a level column ({wanted}); "
                f"the dataset has {list(frame.columns)}"
            )
        return None, ""
    levels = curriculum.difficulty_from_levels(column_values(frame, names[0]))
    if all(math.isnan(v) for v in levels):  # e.g. OlympiadBench's "Competition": no number to use
        if args.difficulty == "level":
            raise ValueError(f"level column {names[0]!r} holds no numbers (e.g. 'Level 3' or 4)")
        return None, ""
    return levels, f"level column {names[0]!r}"


def pass_rates(frame: Any, args: argparse.Namespace) -> list[float]:
    """Pass rate per problem: ``--samples`` responses at ``--temperature`` from ``--model``, scored
    by the verifiable reward through ebpo.evaluation (spec: 16 samples at temperature 1.0)."""
    prompts = _prompts(frame, args)
    answers = column_values(frame, pick_column(frame, args.answer_column, ANSWER_COLUMNS, "answer"))
    problems = [
        {"id": str(i), "prompt": curriculum.prompt_text(p), "answer": str(a)}
        for i, (p, a) in enumerate(zip(prompts, answers, strict=True))
    ]
    model, tokenizer = models.load_model_and_tokenizer(args.model)
    records = evaluation.sample_and_score(
        model,
        tokenizer,
        problems,
        args.samples,
        temperature=args.temperature,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
        batch_size=args.batch_size,
    )
    return curriculum.pass_rates_from_records(records, [p["id"] for p in problems])


def _prompts(frame: Any, args: argparse.Namespace) -> list:
    """The problem column: ``--prompt-column``, else the first of :data:`PROMPT_COLUMNS`."""
    return column_values(frame, pick_column(frame, args.prompt_column, PROMPT_COLUMNS, "prompt"))
