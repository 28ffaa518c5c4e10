"""``ebpo data``: write curriculum labels into data files and sort files into curriculum orders
(EBPO spec, "Curriculum / clustered sampling").

    ebpo data label train.parquet --output labelled.parquet              # topic + difficulty columns
    ebpo data label math.jsonl --output out.jsonl --topic tfidf --num-topics 10 --tiers 4
    ebpo data order labelled.parquet --order topic --output sorted.parquet   # verl: data.shuffle=False
    ebpo data order labelled.parquet --order topic --in-place                # replace the input file

``label`` adds ``topic`` (and, when it can, ``difficulty`` — higher is harder — plus
``difficulty_tier`` and ``pass_rate``) and keeps every other column as it was, so the same file feeds
TRL (``ebpo train --order topic``), verl (``data.train_files``), and per-cluster priors
(``EBPO(per_cluster=True)`` with the ``topic`` column as ``clusters``).

Files are sacred: every option is checked before the input is read, every row is converted before
anything is written, and the output goes to a temporary file in the same directory that is renamed
into place — an error leaves no output and the previous file (if any) as it was. Writing over the
input file needs ``--in-place``.
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
    _add_output_arguments(label)
    label.add_argument("--split", default=None, help="split, for a dataset name")
    label.add_argument("--limit", type=int, default=None, help="only the first N rows (N >= 1)")
    label.add_argument("--prompt-column", default=None, help=f"problem text (default: first of {PROMPT_COLUMNS})")
    label.add_argument("--seed", type=int, default=0, help="clustering / sampling seed (>= 0, default 0)")
    topic = label.add_argument_group("topic")
    topic.add_argument(
        "--topic",
        choices=(*TOPIC_METHODS, "none"),
        default="auto",
        help="auto: the metadata column if there is one, else tfidf (default); embed: sentence "
        "embeddings + UMAP + KMeans; llm: an OpenAI-compatible endpoint with the paper's nine domains",
    )
    topic.add_argument("--topic-column", default=None, help=f"metadata column (default: first of {TOPIC_COLUMNS})")
    topic.add_argument(
        "--topic-fn", default=None, metavar="MODULE:FUNCTION", help="label with your function of a row (replaces --topic)"
    )
    topic.add_argument("--num-topics", type=int, default=10, help="K for clustering (>= 1, default 10)")
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
    diff.add_argument(
        "--tiers", type=int, default=None, help="also write difficulty_tier: N >= 2 quantile tiers (0 = easiest)"
    )
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
    _add_output_arguments(order)
    order.add_argument("--seed", type=int, default=0, help="seed for the order inside blocks / ties (>= 0)")
    order.add_argument("--topic-column", default=None, help="default: topic, then extra_info.topic")
    order.add_argument("--difficulty-column", default=None, help="default: difficulty, then extra_info.difficulty")
    order.set_defaults(func=run, data_command="order")


def _add_output_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output", "-o", default=None, help="output file (.jsonl or .parquet; an existing file is replaced atomically)"
    )
    parser.add_argument(
        "--in-place",
        action="store_true",
        help="write the result over the input file (atomically; without this flag --output may not be the input)",
    )


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

    output, topic_fn = check_label_args(args)
    frame = read_table(args.input, split=args.split, limit=args.limit)
    summary: list[str] = []

    if topic_fn is not None or args.topic != "none":
        labels, how = _topic_labels(frame, args, topic_fn)
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

    write_table(frame, output)
    print(f"wrote {len(frame)} rows to {output}: " + "; ".join(summary or ["no labels"]))
    return 0


def check_label_args(args: argparse.Namespace) -> tuple[Path, Any]:
    """Check every option of ``ebpo data label`` before anything is read: (output path, the
    ``--topic-fn`` function or None). Raises ValueError naming the option."""
    output = _output_path(args)
    if args.split is not None and Path(args.input).suffix.lower() in TABLE_SUFFIXES:
        raise ValueError(f"--split is for dataset names; {args.input!r} is a file (drop --split)")
    _check_int(args.limit, "--limit", 1, allow_none=True)
    _check_int(args.seed, "--seed", 0)
    _check_int(args.num_topics, "--num-topics", 1)
    _check_int(args.samples, "--samples", 1)
    _check_int(args.max_new_tokens, "--max-new-tokens", 1)
    _check_int(args.batch_size, "--batch-size", 1)
    # One tier would put every row in tier 0: no curriculum information, almost surely a mistake.
    _check_int(args.tiers, "--tiers", 2, allow_none=True)
    if not (math.isfinite(args.temperature) and args.temperature >= 0):
        raise ValueError(f"--temperature must be a finite number >= 0 (0 = greedy), got {args.temperature}")
    if args.tiers is not None and args.difficulty == "none":
        raise ValueError("--tiers needs a difficulty: drop --difficulty none (or --tiers)")
    if args.model and args.difficulty != "pass-rate":
        raise ValueError(f"--model is only used by --difficulty pass-rate (got --difficulty {args.difficulty})")
    if args.difficulty == "pass-rate":
        if not args.model:
            raise ValueError("--difficulty pass-rate needs --model (a model name, directory or .gguf file)")
        from ebpo.evaluation.models import resolve_model_path

        resolve_model_path(args.model)  # a missing local path fails now, not after reading the data
    if not args.topic_output or not args.topic_output.strip():
        raise ValueError(f"--topic-output must name a column, got {args.topic_output!r}")
    topic_fn = None
    if args.topic_fn:
        if args.topic != "auto":
            raise ValueError(f"--topic-fn replaces --topic; drop --topic {args.topic}")
        topic_fn = load_callable(args.topic_fn)
    return output, topic_fn


def _topic_labels(frame: Any, args: argparse.Namespace, topic_fn: Any = None) -> tuple[list, str]:
    from ebpo import curriculum

    if topic_fn is not None:
        rows = frame.to_dict(orient="records")
        return curriculum.topics_from_function(rows, topic_fn), f"--topic-fn {args.topic_fn}"
    if args.topic_column and args.topic in ("auto", "metadata"):
        if _column(frame, args.topic_column, required=False) is None:
            raise ValueError(f"--topic-column {args.topic_column!r}: the dataset has no such column; its columns are {list(frame.columns)}")
        if not _complete(frame, args.topic_column):
            raise ValueError(f"--topic-column {args.topic_column!r} has rows without a topic; fill them or cluster instead (--topic tfidf)")
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
    from ebpo.evaluation.models import load_model_and_tokenizer

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
    from ebpo.integrations.verl.curriculum_sampler import curriculum_order

    output = _output_path(args)
    _check_int(args.seed, "--seed", 0)
    frame = read_table(args.input)
    for option, name in (("--topic-column", args.topic_column), ("--difficulty-column", args.difficulty_column)):
        if name and _column(frame, name, required=False) is None:  # a column named explicitly must exist
            raise ValueError(f"{option} {name!r}: the file has no such column; its columns are {list(frame.columns)}")
    order = curriculum_order(
        frame, args.order, seed=args.seed, topic_key=args.topic_column, difficulty_key=args.difficulty_column
    )
    write_table(frame.iloc[order], output)  # the index keeps each row's input position, for errors
    print(
        f"wrote {len(frame)} rows in {args.order!r} order to {output}; "
        "train on it without shuffling (verl: data.shuffle=False)"
    )
    return 0


# --------------------------------------------------------------------------------------------------
# files
# --------------------------------------------------------------------------------------------------


def read_table(source: str, *, split: str | None = None, limit: int | None = None) -> Any:
    """A pandas DataFrame of a local .jsonl/.json/.parquet file (every column kept as stored), or of
    a dataset name through ``ebpo.data.load_dataset`` (the unified schema). An empty input, a line
    that is not a JSON object or a file that is not Parquet raise ValueError naming the file."""
    import pandas as pd

    from ebpo.data import load_dataset, read_rows

    if limit is not None and limit < 1:
        raise ValueError(f"limit must be a positive number of rows, got {limit}")
    path = Path(source).expanduser()
    if path.suffix.lower() in TABLE_SUFFIXES:
        if not path.exists():
            raise FileNotFoundError(f"input file {str(path)!r} does not exist")
        if path.suffix.lower() == ".parquet":
            frame = _read_parquet(path)
        else:  # ebpo.data's reader: errors name the file and the line
            frame = pd.DataFrame(read_rows(path))
        if len(frame) == 0:
            raise ValueError(f"input file {str(path)!r} has no rows")
        return frame.head(limit).reset_index(drop=True) if limit else frame
    return pd.DataFrame(list(load_dataset(source, split=split, limit=limit)))


def _read_parquet(path: Path) -> Any:
    import pandas as pd
    import pyarrow as pa

    if not path.is_file():
        raise ValueError(f"input file {str(path)!r} is not a regular file")
    try:
        return pd.read_parquet(path)
    except (pa.ArrowException, OSError) as error:
        raise ValueError(f"input file {str(path)!r} is not a readable Parquet file: {error}") from None


def write_table(frame: Any, destination: str | Path) -> None:
    """Write a DataFrame as JSONL (one object per line; NaN -> null) or Parquet, by suffix.

    Every row is converted first, then the file is written through a temporary file in the same
    directory and renamed (:mod:`ebpo.utils.files`): a row that cannot be stored raises ValueError naming
    it, and leaves ``destination`` as it was."""
    from ebpo.utils.files import atomic_path, atomic_write

    path = Path(destination).expanduser()
    suffix = _check_suffix(str(destination))
    if suffix == ".parquet":
        try:
            with atomic_path(path) as tmp:
                frame.to_parquet(tmp, index=False)
        except (TypeError, ValueError) as error:  # pyarrow's ArrowTypeError / ArrowInvalid
            raise ValueError(f"cannot store these rows as Parquet ({error}); write .jsonl instead") from None
        return
    # The frame's index is the row's position in the input (``order`` keeps it): errors name that.
    lines = [_json_line(record, row) for row, record in zip(frame.index, frame.to_dict(orient="records"), strict=True)]
    with atomic_write(path) as handle:
        handle.writelines(lines)


def _json_line(record: dict, row: Any) -> str:
    import json

    try:
        return json.dumps(_clean(record), ensure_ascii=False, default=_json_default, allow_nan=False) + "\n"
    except (TypeError, ValueError):
        for column, value in record.items():
            try:
                json.dumps(_clean(value), default=_json_default, allow_nan=False)
            except (TypeError, ValueError) as error:
                raise ValueError(
                    f"input row {row} (counting from 0), column {column!r}: {value!r} cannot be stored in "
                    f"JSON ({error}); fix that row or write .parquet"
                ) from None
        raise


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
    except Exception as error:  # noqa: BLE001 (user code: ImportError, AttributeError, or whatever its import raises)
        raise ValueError(f"--topic-fn {spec!r} cannot be loaded: {type(error).__name__}: {error}") from None
    if not callable(fn):
        raise ValueError(f"--topic-fn {spec!r} is not callable")
    return fn


def _json_default(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.ndarray):
        return _clean(value.tolist())
    if isinstance(value, np.generic):
        return _clean(value.item())
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


def _clean(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    return value


def _check_suffix(destination: str) -> str:
    suffix = Path(destination).suffix.lower()
    if suffix not in (".jsonl", ".parquet"):
        raise ValueError(f"--output must end in .jsonl or .parquet; got {destination!r}")
    return suffix


def _output_path(args: argparse.Namespace) -> Path:
    """The checked output path of ``label`` / ``order``: ``--output``, or the input itself with
    ``--in-place``. Refuses the input as ``--output`` without ``--in-place``."""
    from ebpo.utils.files import check_output_path, same_path

    if args.in_place:
        source = Path(args.input).expanduser()
        if not source.is_file() or source.suffix.lower() not in (".jsonl", ".parquet"):
            raise ValueError(f"--in-place needs the input to be an existing .jsonl or .parquet file; got {args.input!r}")
        if args.output and not same_path(args.output, source):
            raise ValueError(f"--in-place writes to the input file {args.input!r}; drop --output {args.output!r} or --in-place")
        return check_output_path(source, "--in-place", kind="file")
    if not args.output:
        raise ValueError("--output is required (or --in-place to replace the input file)")
    _check_suffix(args.output)
    if same_path(args.output, args.input):
        raise ValueError(
            f"--output {args.output!r} is the input file; pass --in-place to replace it (written atomically) "
            "or choose another path"
        )
    return check_output_path(args.output, "--output", kind="file")


def _check_int(value: Any, option: str, low: int, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{option} must be an integer >= {low}, got {value!r}")


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
    from ebpo.integrations.verl.curriculum_sampler import dataset_column

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
