"""``ebpo data``: write curriculum labels into data files and sort files into curriculum orders
(EBPO spec, "Curriculum / clustered sampling").

    ebpo data label train.parquet --output labelled.parquet              # topic + difficulty columns
    ebpo data label math.jsonl --output out.jsonl --topic tfidf --num-topics 10 --tiers 4
    ebpo data order labelled.parquet --order topic --output sorted.parquet   # verl: data.shuffle=False

``label`` adds ``topic`` (and, when it can, ``difficulty`` — higher is harder — plus
``difficulty_tier`` and ``pass_rate``) and keeps every other column as it was, so the same file feeds
TRL (``ebpo train --order topic``), verl (``data.train_files``), and per-cluster priors
(``EBPO(per_cluster=True)`` with the ``topic`` column as ``clusters``).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

PROMPT_COLUMNS = ("prompt", "problem", "question")
TOPIC_COLUMNS = ("topic", "subject")
LEVEL_COLUMNS = ("difficulty", "level")
ANSWER_COLUMNS = ("answer", "reward_model.ground_truth", "solution")
TABLE_SUFFIXES = (".jsonl", ".json", ".parquet")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "data",
        help="label data with topics / difficulty and sort it into curriculum orders",
        description="Write curriculum labels (topic, difficulty) into data files and sort files into "
        "curriculum orders (EBPO spec, \"Curriculum / clustered sampling\").",
    )
    actions = parser.add_subparsers(dest="data_command", metavar="ACTION")
    _add_label_parser(actions)
    _add_order_parser(actions)
    parser.set_defaults(func=run, data_command=None)
    return parser


def _add_label_parser(actions: Any) -> None:
    from ebpo.curriculum import TOPIC_METHODS

    label = actions.add_parser(
        "label",
        help="add topic / difficulty columns to a JSONL or Parquet file",
        description="Add topic and difficulty labels as columns (EBPO-topic, EBPO-diff).",
    )
    label.add_argument("input", help="a .jsonl/.json/.parquet file, or a dataset name known to ebpo.data")
    label.add_argument("--output", "-o", required=True, help="output file (.jsonl or .parquet)")
    label.add_argument("--split", default=None, help="split, for a dataset name")
    label.add_argument("--limit", type=int, default=None, help="only the first N rows")
    label.add_argument("--prompt-column", default=None, help=f"problem text (default: first of {PROMPT_COLUMNS})")
    label.add_argument("--seed", type=int, default=0, help="clustering seed (default 0)")
    topic = label.add_argument_group("topic")
    topic.add_argument(
        "--topic",
        choices=(*TOPIC_METHODS, "none"),
        default="auto",
        help="auto: the metadata column if there is one, else tfidf (default); embed: sentence "
        "embeddings + UMAP + KMeans; llm: an OpenAI-compatible endpoint with the paper's nine domains",
    )
    topic.add_argument("--topic-column", default=None, help=f"metadata column (default: first of {TOPIC_COLUMNS})")
    topic.add_argument("--topic-fn", default=None, metavar="MODULE:FUNCTION", help="label with your function of a row")
    topic.add_argument("--num-topics", type=int, default=10, help="K for clustering (default 10)")
    topic.add_argument("--embedding-model", default="all-MiniLM-L6-v2", help="sentence-transformers model or directory")
    topic.add_argument("--llm-base-url", default=None, help="e.g. http://localhost:8000/v1 (for --topic llm)")
    topic.add_argument("--llm-model", default=None, help="served model name (for --topic llm)")
    topic.add_argument(
        "--llm-api-key-env",
        default=None,
        metavar="VAR",
        help="name of the environment variable holding the endpoint's API key (default: no key, except "
        "OPENAI_API_KEY for https://api.openai.com); the key goes over plain http only to localhost",
    )
    topic.add_argument(
        "--llm-allow-insecure-http",
        action="store_true",
        help="allow sending the key over plain http to a non-local host (a private network you trust)",
    )
    topic.add_argument("--topic-output", default="topic", help="column to write (default topic)")
    diff = label.add_argument_group("difficulty (higher = harder)")
    diff.add_argument(
        "--difficulty",
        choices=("auto", "none", "level", "pass-rate"),
        default="auto",
        help="auto: the level column if there is one (default); pass-rate: 1 - a model's pass rate",
    )
    diff.add_argument("--level-column", default=None, help=f"level column (default: first of {LEVEL_COLUMNS})")
    diff.add_argument("--model", default=None, help="model for --difficulty pass-rate")
    diff.add_argument("--samples", type=int, default=16, help="samples per problem (paper: 16)")
    diff.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (paper: 1.0)")
    diff.add_argument("--max-new-tokens", type=int, default=512, help="generation budget per sample")
    diff.add_argument("--answer-column", default=None, help=f"reference answer (default: first of {ANSWER_COLUMNS})")
    diff.add_argument("--batch-size", type=int, default=16, help="sequences per generate call")
    diff.add_argument("--tiers", type=int, default=None, help="also write difficulty_tier: N quantile tiers")
    label.set_defaults(func=run, data_command="label")


def _add_order_parser(actions: Any) -> None:
    from ebpo.curriculum import ORDERS

    order = actions.add_parser(
        "order",
        help="write the rows in a curriculum order (for verl with data.shuffle=False)",
        description="Sort a labelled file into a curriculum order; train on it without shuffling.",
    )
    order.add_argument("input", help="a labelled .jsonl/.json/.parquet file")
    order.add_argument("--order", required=True, choices=ORDERS)
    order.add_argument("--output", "-o", required=True, help="output file (.jsonl or .parquet)")
    order.add_argument("--seed", type=int, default=0, help="seed for the order inside blocks / ties")
    order.add_argument("--topic-column", default=None, help="default: topic, then extra_info.topic")
    order.add_argument("--difficulty-column", default=None, help="default: difficulty, then extra_info.difficulty")
    order.set_defaults(func=run, data_command="order")


def run(args: argparse.Namespace) -> int:
    if args.data_command is None:
        print("usage: ebpo data {label,order} ... (see ebpo data --help)", file=sys.stderr)
        return 2
    try:
        if args.data_command == "label":
            return run_label(args)
        return run_order(args)
    except (FileNotFoundError, ConnectionError) as error:  # ConnectionError: hub unreachable
        raise ValueError(str(error)) from error  # one line, exit 2 (ebpo.cli)


# --------------------------------------------------------------------------------------------------
# ebpo data label
# --------------------------------------------------------------------------------------------------


def run_label(args: argparse.Namespace) -> int:
    from ebpo import curriculum

    _check_output(args.output)
    frame = read_table(args.input, split=args.split, limit=args.limit)
    if len(frame) == 0:
        raise ValueError(f"input {args.input!r} has no rows")
    summary: list[str] = []

    if args.topic_fn or args.topic != "none":
        labels, how = _topic_labels(frame, args)
        frame[args.topic_output] = labels
        summary.append(f"{args.topic_output}: {how}, {len(set(labels))} topics")

    difficulty, how = _difficulty_labels(frame, args)
    if difficulty is not None:
        frame["difficulty"] = difficulty
        missing = int(frame["difficulty"].isna().sum())
        summary.append(f"difficulty: {how}" + (f" ({missing} rows without a level)" if missing else ""))
        if args.tiers:
            if missing:
                raise ValueError(f"--tiers needs a difficulty on every row; {missing} rows have none")
            frame["difficulty_tier"] = curriculum.difficulty_tiers(frame["difficulty"].tolist(), args.tiers)
            summary.append(f"difficulty_tier: {args.tiers} quantile tiers")
    elif args.tiers:
        raise ValueError("--tiers needs a difficulty: pass --difficulty level or pass-rate")

    write_table(frame, args.output)
    print(f"wrote {len(frame)} rows to {args.output}: " + "; ".join(summary or ["no labels"]))
    return 0


def _topic_labels(frame: Any, args: argparse.Namespace) -> tuple[list, str]:
    from ebpo import curriculum

    if args.topic_fn:
        fn = load_callable(args.topic_fn)
        return curriculum.topics_from_function(frame.to_dict(orient="records"), fn), f"--topic-fn {args.topic_fn}"
    complete_columns = [c for c in _candidate_names(frame, args.topic_column, TOPIC_COLUMNS) if _complete(frame, c)]
    method, column = curriculum.choose_topic_method(
        args.topic, complete_columns, topic_column=args.topic_column, candidates=TOPIC_COLUMNS
    )
    if method == "metadata":
        return curriculum.topics_from_metadata(_column(frame, column), column=column), f"metadata column {column!r}"
    texts = [curriculum.prompt_text(p) for p in _column(frame, _pick(frame, args.prompt_column, PROMPT_COLUMNS, "prompt"))]
    if method == "tfidf":
        labels = curriculum.tfidf_kmeans_topics(texts, args.num_topics, seed=args.seed)
        return labels, f"TF-IDF + KMeans (K={args.num_topics}, seed {args.seed})"
    if method == "embed":
        labels = curriculum.embedding_umap_kmeans_topics(
            texts, args.num_topics, seed=args.seed, model=args.embedding_model
        )
        return labels, f"{args.embedding_model} + UMAP + KMeans (K={args.num_topics}, seed {args.seed})"
    # llm: off unless asked for, and then both the endpoint and the model must be named.
    if not args.llm_base_url or not args.llm_model:
        raise ValueError("--topic llm needs --llm-base-url (an OpenAI-compatible endpoint) and --llm-model")
    complete = curriculum.openai_compatible_completer(
        args.llm_base_url,
        args.llm_model,
        api_key=curriculum.llm_api_key(args.llm_base_url, args.llm_api_key_env),
        allow_insecure_http=args.llm_allow_insecure_http,
    )
    labels = curriculum.llm_topics(texts, complete)
    unclassified = sum(label == curriculum.UNCLASSIFIED for label in labels)
    return labels, f"LLM {args.llm_model} over nine domains ({unclassified} unclassified)"


def _difficulty_labels(frame: Any, args: argparse.Namespace) -> tuple[list[float] | None, str]:
    from ebpo import curriculum

    if args.difficulty == "none":
        return None, ""
    if args.difficulty == "pass-rate":
        rates = _pass_rates(frame, args)
        frame["pass_rate"] = rates
        return curriculum.difficulty_from_pass_rates(rates), f"1 - pass rate of {args.model} over {args.samples} samples"
    names = [c for c in _candidate_names(frame, args.level_column, LEVEL_COLUMNS) if _has_any(frame, c)]
    if not names:
        if args.difficulty == "level" or args.level_column:
            wanted = args.level_column or " or ".join(LEVEL_COLUMNS)
            raise ValueError(f"--difficulty level needs a level column ({wanted}); the dataset has {list(frame.columns)}")
        return None, ""
    levels = curriculum.difficulty_from_levels(_column(frame, names[0]))
    if all(math.isnan(v) for v in levels):  # e.g. OlympiadBench's "Competition": no number to use
        if args.difficulty == "level":
            raise ValueError(f"level column {names[0]!r} holds no numbers (e.g. 'Level 3' or 4)")
        return None, ""
    return levels, f"level column {names[0]!r}"


def _pass_rates(frame: Any, args: argparse.Namespace) -> list[float]:
    """Pass rate per problem: ``--samples`` responses at ``--temperature`` from ``--model``, scored
    by the verifiable reward through ebpo.evaluation (spec: 16 samples at temperature 1.0)."""
    from ebpo import curriculum, evaluation
    from ebpo.models import load_model_and_tokenizer

    if not args.model:
        raise ValueError("--difficulty pass-rate needs --model (a model name, directory or .gguf file)")
    if args.samples < 1:
        raise ValueError(f"--samples must be at least 1, got {args.samples}")
    prompts = _column(frame, _pick(frame, args.prompt_column, PROMPT_COLUMNS, "prompt"))
    answers = _column(frame, _pick(frame, args.answer_column, ANSWER_COLUMNS, "answer"))
    problems = [
        {"id": str(i), "prompt": curriculum.prompt_text(p), "answer": str(a)}
        for i, (p, a) in enumerate(zip(prompts, answers, strict=True))
    ]
    model, tokenizer = load_model_and_tokenizer(args.model)
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


# --------------------------------------------------------------------------------------------------
# ebpo data order
# --------------------------------------------------------------------------------------------------


def run_order(args: argparse.Namespace) -> int:
    from ebpo.curriculum_sampler import curriculum_order

    _check_output(args.output)
    frame = read_table(args.input)
    order = curriculum_order(
        frame, args.order, seed=args.seed, topic_key=args.topic_column, difficulty_key=args.difficulty_column
    )
    write_table(frame.iloc[order].reset_index(drop=True), args.output)
    print(
        f"wrote {len(frame)} rows in {args.order!r} order to {args.output}; "
        "train on it without shuffling (verl: data.shuffle=False)"
    )
    return 0


# --------------------------------------------------------------------------------------------------
# files
# --------------------------------------------------------------------------------------------------


def read_table(source: str, *, split: str | None = None, limit: int | None = None) -> Any:
    """A pandas DataFrame of a local .jsonl/.json/.parquet file (every column kept as stored), or of
    a dataset name through ``ebpo.data.load_dataset`` (the unified schema)."""
    import pandas as pd

    if limit is not None and limit < 1:
        raise ValueError(f"limit must be a positive number of rows, got {limit}")
    path = Path(source).expanduser()
    if path.suffix.lower() in TABLE_SUFFIXES:
        if not path.is_file():
            raise FileNotFoundError(f"input file {str(path)!r} does not exist")
        if path.suffix.lower() == ".parquet":
            frame = pd.read_parquet(path)
        else:
            frame = pd.DataFrame(_read_json_records(path))
        return frame.head(limit).reset_index(drop=True) if limit else frame
    try:
        from ebpo.data import load_dataset
    except ImportError:
        raise ValueError(
            f"input must be a .jsonl, .json or .parquet file; got {source!r} (dataset names need ebpo.data)"
        ) from None
    return pd.DataFrame(list(load_dataset(source, split=split, limit=limit)))


def write_table(frame: Any, destination: str) -> None:
    """Write a DataFrame as JSONL (one object per line; NaN -> null) or Parquet, by suffix."""
    import json

    path = Path(destination).expanduser()
    suffix = _check_output(destination)
    path.parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".parquet":
        try:
            frame.to_parquet(path, index=False)
        except (TypeError, ValueError) as error:  # pyarrow's ArrowTypeError / ArrowInvalid
            raise ValueError(f"cannot store these rows as Parquet ({error}); write .jsonl instead") from None
        return
    with path.open("w", encoding="utf-8") as handle:
        for record in frame.to_dict(orient="records"):
            handle.write(json.dumps(_clean(record), ensure_ascii=False, default=_json_default, allow_nan=False) + "\n")


def load_callable(spec: str) -> Any:
    """``module:function`` (or ``module.function``) -> the function."""
    import importlib

    module_name, sep, attribute = spec.partition(":")
    if not sep:
        module_name, _, attribute = spec.rpartition(".")
    if not module_name or not attribute:
        raise ValueError(f"--topic-fn must look like MODULE:FUNCTION; got {spec!r}")
    try:
        fn = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"--topic-fn {spec!r} cannot be loaded: {error}") from None
    if not callable(fn):
        raise ValueError(f"--topic-fn {spec!r} is not callable")
    return fn


def _read_json_records(path: Path) -> list[dict]:
    import json

    text = path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    if stripped.startswith("["):  # a JSON array of objects
        records = json.loads(text)
    else:
        records = []
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as error:
                    raise ValueError(f"{path}:{number} is not a JSON object: {error}") from None
    if not all(isinstance(r, dict) for r in records):
        raise ValueError(f"{path} must hold one JSON object per row")
    return records


def _json_default(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.ndarray):
        return _clean(value.tolist())
    if isinstance(value, np.generic):
        return _clean(value.item())
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


def _clean(value: Any) -> Any:
    import math

    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    return value


def _check_output(destination: str) -> str:
    suffix = Path(destination).suffix.lower()
    if suffix not in (".jsonl", ".parquet"):
        raise ValueError(f"--output must end in .jsonl or .parquet; got {destination!r}")
    return suffix


def _candidate_names(frame: Any, explicit: str | None, defaults: tuple[str, ...]) -> list[str]:
    names = [explicit] if explicit else list(defaults)
    return [n for n in names if _column(frame, n, required=False) is not None]


def _pick(frame: Any, explicit: str | None, defaults: tuple[str, ...], what: str) -> str:
    names = _candidate_names(frame, explicit, defaults)
    if not names:
        wanted = explicit or " or ".join(defaults)
        raise ValueError(f"the dataset has no {what} column ({wanted}); its columns are {list(frame.columns)}")
    return names[0]


def _column(frame: Any, name: str, *, required: bool = True) -> list | None:
    from ebpo.curriculum_sampler import dataset_column

    column = dataset_column(frame, name)
    if column is None and required:
        raise ValueError(f"the dataset has no column {name!r}; its columns are {list(frame.columns)}")
    return column


def _is_missing(value: Any) -> bool:
    # ebpo.data's unified schema writes "" for "no topic / no difficulty".
    if isinstance(value, str):
        return not value.strip()
    return value is None or (isinstance(value, float) and value != value) or type(value).__name__ == "NAType"


def _complete(frame: Any, name: str) -> bool:
    column = _column(frame, name, required=False)
    return column is not None and all(not _is_missing(v) for v in column)


def _has_any(frame: Any, name: str) -> bool:
    column = _column(frame, name, required=False)
    return column is not None and any(not _is_missing(v) for v in column)
