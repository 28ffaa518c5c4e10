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
into place — an error (a full disk included) leaves no output and the previous file (if any) as it
was. Writing over the input file needs ``--in-place``.

Rows come out as they went in, value for value (:mod:`ebpo.data.datatable`): the rows are reordered
and the label columns added without converting the user's columns — JSON lines stay the objects
``json`` parsed (an integer of any size stays exact, ``1`` stays ``1`` next to a ``null``), Parquet
keeps its Arrow types. JSON has no NaN or infinity: a row holding one is refused for a ``.jsonl``
output (name the row, or write ``.parquet``), never turned into ``null``.

A replaced file keeps its permission bits; a symbolic link stays a link and its target gets the
new content; a file with other hard links gets a new inode under this name only — the other names
keep the old content, and the command says so (:func:`ebpo.utils.files.atomic_path`).
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
from pathlib import Path
from typing import Any

from ebpo import curriculum
from ebpo.commands.data_labels import (
    ANSWER_COLUMNS,
    LEVEL_COLUMNS,
    PROMPT_COLUMNS,
    TOPIC_COLUMNS,
    difficulty_labels,
    topic_labels,
)
from ebpo.curriculum import (
    ORDERS,
    TOPIC_METHODS,
    column_names,
    curriculum_order,
    dataset_column,
)
from ebpo.data import load_dataset
from ebpo.data.datatable import DataTable
from ebpo.data.tables import READ_SUFFIXES, WRITE_SUFFIXES, check_write_suffix
from ebpo.evaluation import models
from ebpo.utils.checks import check_int, is_missing
from ebpo.utils.files import check_output_path, hard_links, same_path, storage_error


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "data",
        help="label data with topics / difficulty and sort it into curriculum orders",
        description="Write curriculum labels (topic, difficulty) into data files and sort files into "
        'curriculum orders (EBPO spec, "Curriculum / clustered sampling").',
    )
    actions = parser.add_subparsers(dest="data_command", metavar="ACTION")
    _add_label_parser(actions)
    _add_order_parser(actions)
    parser.set_defaults(func=run, data_command=None)
    return parser


def _add_label_parser(actions: Any) -> None:
    label = actions.add_parser(
        "label",
        help="add topic / difficulty columns to a JSONL or Parquet file",
        description="Add topic and difficulty labels as columns (EBPO-topic, EBPO-diff).",
    )
    label.add_argument(
        "input", help="a .jsonl/.json/.parquet file, or a dataset name known to ebpo.data"
    )
    _add_output_arguments(label)
    label.add_argument("--split", default=None, help="split, for a dataset name")
    label.add_argument("--limit", type=int, default=None, help="only the first N rows (N >= 1)")
    label.add_argument(
        "--prompt-column", default=None, help=f"problem text (default: first of {PROMPT_COLUMNS})"
    )
    label.add_argument(
        "--seed", type=int, default=0, help="clustering / sampling seed (>= 0, default 0)"
    )
    _add_topic_arguments(label.add_argument_group("topic"))
    _add_difficulty_arguments(label.add_argument_group("difficulty (higher = harder)"))
    label.set_defaults(func=run, data_command="label")


def _add_topic_arguments(topic: Any) -> None:
    """``data label``'s topic options: the method, the metadata column, clustering, the LLM endpoint."""
    topic.add_argument(
        "--topic",
        choices=(*TOPIC_METHODS, "none"),
        default="auto",
        help="auto: the metadata column if there is one, else tfidf (default); embed: sentence "
        "embeddings + UMAP + KMeans; llm: an OpenAI-compatible endpoint with the paper's nine domains",
    )
    topic.add_argument(
        "--topic-column", default=None, help=f"metadata column (default: first of {TOPIC_COLUMNS})"
    )
    topic.add_argument(
        "--topic-fn",
        default=None,
        metavar="MODULE:FUNCTION",
        help="label with your function of a row (replaces --topic)",
    )
    topic.add_argument(
        "--num-topics", type=int, default=10, help="K for clustering (>= 1, default 10)"
    )
    topic.add_argument(
        "--embedding-model",
        default="all-MiniLM-L6-v2",
        help="sentence-transformers model or directory",
    )
    topic.add_argument(
        "--llm-base-url", default=None, help="e.g. http://localhost:8000/v1 (for --topic llm)"
    )
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


def _add_difficulty_arguments(diff: Any) -> None:
    """``data label``'s difficulty options: a level column, or a model's pass rate, and tiers."""
    diff.add_argument(
        "--difficulty",
        choices=("auto", "none", "level", "pass-rate"),
        default="auto",
        help="auto: the level column if there is one (default); pass-rate: 1 - a model's pass rate",
    )
    diff.add_argument(
        "--level-column", default=None, help=f"level column (default: first of {LEVEL_COLUMNS})"
    )
    diff.add_argument("--model", default=None, help="model for --difficulty pass-rate")
    diff.add_argument("--samples", type=int, default=16, help="samples per problem (paper: 16)")
    diff.add_argument(
        "--temperature", type=float, default=1.0, help="sampling temperature (paper: 1.0)"
    )
    diff.add_argument(
        "--max-new-tokens", type=int, default=512, help="generation budget per sample"
    )
    diff.add_argument(
        "--answer-column",
        default=None,
        help=f"reference answer (default: first of {ANSWER_COLUMNS})",
    )
    diff.add_argument("--batch-size", type=int, default=16, help="sequences per generate call")
    diff.add_argument(
        "--tiers",
        type=int,
        default=None,
        help="also write difficulty_tier: N >= 2 quantile tiers (0 = easiest)",
    )


def _add_order_parser(actions: Any) -> None:
    order = actions.add_parser(
        "order",
        help="write the rows in a curriculum order (for verl with data.shuffle=False)",
        description="Sort a labelled file into a curriculum order; train on it without shuffling.",
    )
    order.add_argument("input", help="a labelled .jsonl/.json/.parquet file")
    order.add_argument("--order", required=True, choices=ORDERS)
    _add_output_arguments(order)
    order.add_argument(
        "--seed", type=int, default=0, help="seed for the order inside blocks / ties (>= 0)"
    )
    order.add_argument("--topic-column", default=None, help="default: topic, then extra_info.topic")
    order.add_argument(
        "--difficulty-column", default=None, help="default: difficulty, then extra_info.difficulty"
    )
    order.set_defaults(func=run, data_command="order")


def _add_output_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output",
        "-o",
        default=None,
        help="output file (.jsonl or .parquet; an existing file is replaced atomically)",
    )
    parser.add_argument(
        "--in-place",
        action="store_true",
        help="write the result over the input file (atomically: a new file renamed over it, keeping its mode; "
        "through a symbolic link to its target; other hard links to it keep the old content). Without "
        "this flag --output may not be the input",
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
    except OSError as error:  # a full disk: one line, exit 2; the previous file is unchanged
        failure = storage_error(error)
        if failure is None:
            raise
        raise failure from error


# --------------------------------------------------------------------------------------------------
# ebpo data label
# --------------------------------------------------------------------------------------------------


def run_label(args: argparse.Namespace) -> int:
    output, topic_fn = check_label_args(args)
    table = read_input(args.input, split=args.split, limit=args.limit)
    check_named_columns(
        table,
        {
            "--prompt-column": args.prompt_column,
            "--topic-column": args.topic_column,
            "--level-column": args.level_column,
            "--answer-column": args.answer_column,
        },
    )
    summary: list[str] = []

    if topic_fn is not None or args.topic != "none":
        labels, how = topic_labels(table, args, topic_fn)
        table.set_column(args.topic_output, labels)
        summary.append(f"{args.topic_output}: {how}, {len(set(labels))} topics")

    difficulty, how = difficulty_labels(table, args)
    if difficulty is not None:
        table.set_column("difficulty", difficulty)
        missing = sum(is_missing(d) for d in difficulty)
        summary.append(
            f"difficulty: {how}" + (f" ({missing} rows without a level)" if missing else "")
        )
        if args.tiers:
            if missing:
                raise ValueError(
                    f"--tiers needs a difficulty on every row; {missing} rows have none"
                )
            table.set_column("difficulty_tier", curriculum.difficulty_tiers(difficulty, args.tiers))
            summary.append(f"difficulty_tier: {args.tiers} quantile tiers")
    elif args.tiers:
        raise ValueError("--tiers needs a difficulty: pass --difficulty level or pass-rate")

    write_output(table, output)
    print(f"wrote {len(table)} rows to {output}: " + "; ".join(summary or ["no labels"]))
    return 0


def check_label_args(args: argparse.Namespace) -> tuple[Path, Any]:
    """Check every option of ``ebpo data label`` before anything is read: (output path, the
    ``--topic-fn`` function or None). Raises ValueError naming the option."""
    output = _output_path(args)
    if args.split is not None and Path(args.input).suffix.lower() in READ_SUFFIXES:
        raise ValueError(f"--split is for dataset names; {args.input!r} is a file (drop --split)")
    if args.limit is not None:
        check_int("--limit", args.limit, low=1)
    check_int("--seed", args.seed, low=0)
    check_int("--num-topics", args.num_topics, low=1)
    check_int("--samples", args.samples, low=1)
    check_int("--max-new-tokens", args.max_new_tokens, low=1)
    check_int("--batch-size", args.batch_size, low=1)
    if args.tiers is not None:
        # One tier would put every row in tier 0: no curriculum information, almost surely a mistake.
        check_int("--tiers", args.tiers, low=2)
    if not (math.isfinite(args.temperature) and args.temperature >= 0):
        raise ValueError(
            f"--temperature must be a finite number >= 0 (0 = greedy), got {args.temperature}"
        )
    if args.tiers is not None and args.difficulty == "none":
        raise ValueError("--tiers needs a difficulty: drop --difficulty none (or --tiers)")
    if args.model and args.difficulty != "pass-rate":
        raise ValueError(
            f"--model is only used by --difficulty pass-rate (got --difficulty {args.difficulty})"
        )
    if args.difficulty == "pass-rate":
        if not args.model:
            raise ValueError(
                "--difficulty pass-rate needs --model (a model name, directory or .gguf file)"
            )
        models.resolve_model_path(args.model)  # a missing local path fails now, not after reading
    if not args.topic_output or not args.topic_output.strip():
        raise ValueError(f"--topic-output must name a column, got {args.topic_output!r}")
    topic_fn = None
    if args.topic_fn:
        if args.topic != "auto":
            raise ValueError(f"--topic-fn replaces --topic; drop --topic {args.topic}")
        topic_fn = load_callable(args.topic_fn)
    return output, topic_fn


# --------------------------------------------------------------------------------------------------
# ebpo data order
# --------------------------------------------------------------------------------------------------


def run_order(args: argparse.Namespace) -> int:
    output = _output_path(args)
    check_int("--seed", args.seed, low=0)
    table = read_input(args.input)
    check_named_columns(
        table, {"--topic-column": args.topic_column, "--difficulty-column": args.difficulty_column}
    )
    order = curriculum_order(
        table,
        args.order,
        seed=args.seed,
        topic_key=args.topic_column,
        difficulty_key=args.difficulty_column,
    )
    write_output(table.take(order), output)  # each row keeps its input position, for errors
    print(
        f"wrote {len(table)} rows in {args.order!r} order to {output}; "
        "train on it without shuffling (verl: data.shuffle=False)"
    )
    return 0


# --------------------------------------------------------------------------------------------------
# files
# --------------------------------------------------------------------------------------------------


def read_input(source: str, *, split: str | None = None, limit: int | None = None) -> DataTable:
    """The input of ``ebpo data label`` / ``order``: a local .jsonl/.json/.parquet file with every
    value kept as stored (:class:`ebpo.data.datatable.DataTable`), or a dataset name through
    :func:`ebpo.data.load_dataset` (the unified schema)."""
    if Path(source).suffix.lower() in READ_SUFFIXES:
        return DataTable.read(source, limit=limit)
    return DataTable.from_rows(load_dataset(source, split=split, limit=limit))


def check_named_columns(table: DataTable, named: dict[str, str | None]) -> None:
    """Every column an option names (``{"--prompt-column": "problem"}``; None: not given) must
    exist, even where this run would not read it: a misspelt name is refused, not ignored."""
    for option, name in named.items():
        if name and dataset_column(table, name) is None:
            raise ValueError(
                f"{option} {name!r}: the input has no such column; its columns are "
                f"{column_names(table)}"
            )


def write_output(table: DataTable, output: Path) -> None:
    """Write ``table`` to ``output`` atomically; if the file it replaces has other hard links, say
    on stderr that they keep the old content (the new file is renamed over this name only)."""
    links = hard_links(output)
    table.write(output)
    if links:
        print(
            f"note: {str(output)!r} had {links} other hard link(s); they keep the previous content "
            "(the new file replaced this name only)",
            file=sys.stderr,
        )


def load_callable(spec: str) -> Any:
    """``module:function`` (or ``module.function``) -> the function."""
    module_name, sep, attribute = spec.partition(":")
    if not sep:
        module_name, _, attribute = spec.rpartition(".")
    if not module_name or not attribute:
        raise ValueError(f"--topic-fn must look like MODULE:FUNCTION; got {spec!r}")
    try:
        fn = getattr(importlib.import_module(module_name), attribute)
    except Exception as error:  # noqa: BLE001 (user code: ImportError, AttributeError, or whatever its import raises)
        raise ValueError(
            f"--topic-fn {spec!r} cannot be loaded: {type(error).__name__}: {error}"
        ) from None
    if not callable(fn):
        raise ValueError(f"--topic-fn {spec!r} is not callable")
    return fn


def _output_path(args: argparse.Namespace) -> Path:
    """The checked output path of ``label`` / ``order``: ``--output``, or the input itself with
    ``--in-place``. Refuses the input as ``--output`` without ``--in-place``."""
    if args.in_place:
        source = Path(args.input).expanduser()
        if not source.is_file() or source.suffix.lower() not in WRITE_SUFFIXES:
            raise ValueError(
                f"--in-place needs the input to be an existing .jsonl or .parquet file; got {args.input!r}"
            )
        if args.output and not same_path(args.output, source):
            raise ValueError(
                f"--in-place writes to the input file {args.input!r}; drop --output {args.output!r} or --in-place"
            )
        return check_output_path(source, "--in-place", kind="file")
    if not args.output:
        raise ValueError("--output is required (or --in-place to replace the input file)")
    check_write_suffix(args.output, "--output")
    if same_path(args.output, args.input):
        raise ValueError(
            f"--output {args.output!r} is the input file; pass --in-place to replace it (written atomically) "
            "or choose another path"
        )
    return check_output_path(args.output, "--output", kind="file")
