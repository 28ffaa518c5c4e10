"""``ebpo verl prepare-data``: the command line of :func:`ebpo.integrations.verl.data_prep.prepare`
(DAPO-Math-17K and the evaluation sets as verl parquet files, with curriculum orders)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from ebpo.integrations.verl.data_prep import EVAL_STEMS, prepare


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out-dir", default="data/ebpo", help="where to write the parquet files")
    parser.add_argument(
        "--train-file", default=None, help="local copy of DAPO-Math-17K (default: the hub)"
    )
    parser.add_argument(
        "--eval",
        nargs="*",
        default=list(EVAL_STEMS),
        metavar="NAME",
        help=f"evaluation sets (default: all of {list(EVAL_STEMS)})",
    )
    parser.add_argument(
        "--eval-file",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="local copy of an evaluation set",
    )
    parser.add_argument(
        "--labels",
        default=None,
        help="JSONL with id and topic / pass_rate / difficulty per training problem",
    )
    parser.add_argument(
        "--topic-method",
        default="auto",
        choices=("auto", "metadata", "tfidf", "embed", "none"),
        help="how to label topics when --labels has none (auto: metadata column, else TF-IDF clusters)",
    )
    parser.add_argument(
        "--num-topics", type=int, default=10, help="clusters for tfidf/embed topics (paper: 10)"
    )
    parser.add_argument(
        "--limit", type=int, default=None, help="only the first N training problems (smoke tests)"
    )
    parser.add_argument("--template", default="dapo", help="prompt template (ebpo.data.templates)")
    parser.add_argument("--seed", type=int, default=0)


def run_prepare(args: argparse.Namespace, links: Mapping[str, str] | None = None) -> int:
    """:func:`ebpo.integrations.verl.data_prep.prepare` of the parsed ``args``, with ``links`` made
    in ``--out-dir`` too (path relative to it -> target); prints what it wrote."""
    eval_files: dict[str, str] = {}
    for item in args.eval_file:
        name, sep, path = item.partition("=")
        if not sep or name not in EVAL_STEMS or not path:
            raise ValueError(
                f"--eval-file must be NAME=PATH with NAME in {list(EVAL_STEMS)}, got {item!r}"
            )
        eval_files[name] = path
    written, notes = prepare(
        args.out_dir,
        train_file=args.train_file,
        eval_sets=args.eval,
        eval_files=eval_files,
        labels_file=args.labels,
        topic_method=args.topic_method,
        num_topics=args.num_topics,
        limit=args.limit,
        template=args.template,
        seed=args.seed,
        links=links,
    )
    for note in notes:
        print(note)
    for what, path in written.items():
        print(f"wrote {what}: {path}")
    return 0
