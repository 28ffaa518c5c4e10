"""How ``ebpo data label`` computes its columns from its options: the topic labels (a metadata
column, ``--topic-fn``, TF-IDF or embedding clusters, or the LLM labeller), the difficulty (a level
column, or 1 - the pass rate of ``--model`` sampled through :mod:`ebpo.evaluation`) and the columns
each reads (the first present of :data:`PROMPT_COLUMNS`, :data:`TOPIC_COLUMNS`, ...).
"""

from __future__ import annotations

import argparse
import numbers
from typing import Any

import numpy as np

from ebpo import curriculum, evaluation
from ebpo.curriculum import (
    column_has_any,
    column_is_complete,
    column_names,
    column_values,
    pick_column,
    present_columns,
)
from ebpo.evaluation import models
from ebpo.utils.checks import is_missing

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
    ``--topic`` (see :func:`ebpo.curriculum.choose_topic_method`). ``frame`` is a
    :class:`ebpo.data.datatable.DataTable` (or any dataset :func:`ebpo.curriculum.dataset_column`
    reads).

    Topics read from the column they are written to (``--topic-output``, ``topic`` by default)
    keep the user's numbers (and booleans) as they are; text loses only surrounding blanks."""
    if topic_fn is not None:
        rows = frame.records()  # copies: the function cannot change the rows written back
        return curriculum.topics_from_function(rows, topic_fn), f"--topic-fn {args.topic_fn}"
    # (a named column is present: ebpo.commands.data.check_named_columns)
    named = args.topic_column and args.topic in ("auto", "metadata")
    if named and not column_is_complete(frame, args.topic_column):
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
        assert column is not None  # choose_topic_method names the column it chose
        values = column_values(frame, column)
        topics: list = curriculum.topics_from_metadata(values, column=column)
        if column == args.topic_output:  # written over itself: a number stays the number
            topics = [v if _is_scalar_number(v) else t for v, t in zip(values, topics, strict=True)]
        return topics, f"metadata column {column!r}"
    texts = [curriculum.prompt_text(p) for p in _prompts(frame, args)]
    if method == "tfidf":
        labels: list[int] | list[str] = curriculum.tfidf_kmeans_topics(
            texts, args.num_topics, seed=args.seed
        )
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


def difficulty_labels(frame: Any, args: argparse.Namespace) -> tuple[list | None, str]:
    """``(difficulty per row, higher = harder; how)`` by ``--difficulty``, or ``(None, "")`` when
    ``auto`` finds no level column with numbers. ``pass-rate`` also writes ``pass_rate``.

    From a level column: a number stays the number it is (an int stays an int, of any size), a
    string such as ``"Level 3"`` becomes 3.0, a row without a level gets None (null). When the
    level column is ``difficulty`` itself, its numbers and missing values (null, NaN) are left
    exactly as they were: only text is converted."""
    if args.difficulty == "none":
        return None, ""
    if args.difficulty == "pass-rate":
        rates = pass_rates(frame, args)
        frame.set_column("pass_rate", rates)
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
                f"the dataset has {column_names(frame)}"
            )
        return None, ""
    stored = column_values(frame, names[0])
    levels = curriculum.difficulty_from_levels(stored, names[0])
    if all(is_missing(v) for v in levels):  # e.g. OlympiadBench's "Competition": no number to use
        if args.difficulty == "level":
            raise ValueError(f"level column {names[0]!r} holds no numbers (e.g. 'Level 3' or 4)")
        return None, ""
    same = names[0] == "difficulty"
    values = [_difficulty(v, level, same) for v, level in zip(stored, levels, strict=True)]
    return values, f"level column {names[0]!r}"


def _difficulty(stored: Any, level: float, same_column: bool) -> Any:
    """The difficulty written for a row whose level column holds ``stored`` (parsed: ``level``)."""
    number = isinstance(stored, numbers.Real) and not isinstance(stored, bool | np.bool_)
    if same_column and (number or is_missing(stored)):
        return stored  # the user's own difficulty, untouched (NaN included)
    if is_missing(level):
        return None
    if number:
        return stored.item() if isinstance(stored, np.generic) else stored  # exact: 1 stays 1
    return level


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


def _is_scalar_number(value: Any) -> bool:
    return isinstance(value, bool | int | float | np.bool_ | np.integer | np.floating)
