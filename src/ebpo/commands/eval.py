"""``ebpo eval``: Pass@1 / pass@k / maj@k of a model on math benchmarks (the paper's protocol).

    ebpo eval --model Qwen/Qwen3-8B --benchmarks math-500,aime-2024,aime-2025,amc-2023,olympiadbench --n 32
    ebpo eval --model ./ckpt --benchmarks math-500 --data-file math-500=math500.parquet --n 4 \\
              --max-new-tokens 1024 --out eval_results/ckpt

Every option and the output directory are checked before any data or model is loaded
(:func:`ebpo.evaluation.check_eval_options`). An ``--out`` directory that already holds results is
refused unless ``--overwrite`` is given; the files are then replaced atomically.
"""

from __future__ import annotations

import argparse
from typing import Any

from ebpo.data import DATASETS, DatasetUnavailableError
from ebpo.evaluation import PAPER_BENCHMARKS, PAPER_MAX_NEW_TOKENS, SamplingConfig, run_eval
from ebpo.evaluation.models import DTYPES


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "eval",
        help="Pass@k evaluation on math benchmarks",
        description="Sample n responses per problem, score them with the math reward, and write a "
        "table (benchmarks x metrics + average) as Markdown, CSV and JSON plus every sample as JSONL.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    _add_sampling_arguments(parser)
    _add_generation_arguments(parser)
    _add_output_arguments(parser)
    parser.set_defaults(func=run)
    return parser


def _add_sampling_arguments(parser: argparse.ArgumentParser) -> None:
    """The model, the benchmarks and the paper's sampling protocol (n, k, temperature, prompt)."""
    parser.add_argument(
        "--model", required=True, help="hub id, local directory, .gguf file or 'smollm2-135m'"
    )
    parser.add_argument(
        "--benchmarks",
        default=",".join(PAPER_BENCHMARKS),
        help="comma-separated registry names (ebpo.data.DATASETS)",
    )
    parser.add_argument("--n", type=int, default=32, help="samples per problem (>= 1)")
    parser.add_argument(
        "--k",
        default=None,
        help="comma-separated k for pass@k and maj@k, each in [1, n] (default: 1,n)",
    )
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--max-new-tokens", type=int, default=PAPER_MAX_NEW_TOKENS)
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (>= 0)")
    parser.add_argument(
        "--template", choices=("dapo", "boxed", "raw"), default="dapo", help="prompt template"
    )
    chat = parser.add_mutually_exclusive_group()
    chat.add_argument(
        "--chat",
        dest="chat",
        action="store_true",
        default=None,
        help="force the tokenizer's chat template",
    )
    chat.add_argument(
        "--no-chat", dest="chat", action="store_false", help="plain templated text (base models)"
    )


def _add_generation_arguments(parser: argparse.ArgumentParser) -> None:
    """How the samples are generated and where the benchmark data comes from."""
    parser.add_argument("--backend", choices=("auto", "vllm", "transformers"), default="auto")
    parser.add_argument(
        "--device",
        default="auto",
        help="where the transformers backend puts the model: auto (the GPU when there is one), "
        "cpu, cuda or cuda:N",
    )
    parser.add_argument(
        "--dtype",
        choices=tuple(DTYPES),
        default="auto",
        help="the model's dtype (transformers backend); auto: bfloat16 on a GPU that supports it, "
        "else float32",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=16,
        help="sequences per generate call (transformers; >= 1)",
    )
    parser.add_argument(
        "--limit", type=int, default=None, help="at most this many problems per benchmark (>= 1)"
    )
    parser.add_argument(
        "--data-file",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="local .jsonl/.parquet for a benchmark (hub or unified schema); repeatable",
    )
    parser.add_argument(
        "--data-dir",
        default=None,
        help="directory with <benchmark>.parquet/.jsonl local copies (default: $EBPO_DATA_DIR)",
    )


def _add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """Scoring, the output directory and progress."""
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds per math-verify call (> 0; default: the scorer's)",
    )
    parser.add_argument(
        "--score-workers", type=int, default=1, help="helper processes for scoring (>= 1)"
    )
    parser.add_argument(
        "--out",
        default="eval_results",
        help="output directory (refused if it already holds results, unless --overwrite)",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace the results already in --out"
    )
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="hide every progress bar (sampling, scoring, and the libraries' own: model loading, "
        "downloads, datasets)",
    )


def _parse_data_files(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        name, sep, path = (part.strip() for part in item.partition("="))
        if not sep or not name or not path:
            raise ValueError(f"--data-file must be NAME=PATH, got {item!r}")
        if name in out:
            raise ValueError(f"--data-file names {name!r} twice ({out[name]!r} and {path!r})")
        out[name] = path
    return out


def _parse_ks(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(k) for k in text.split(",")]
    except ValueError:
        raise ValueError(
            f"--k must be comma-separated integers such as 1,4,32; got {text!r}"
        ) from None


def run(args: argparse.Namespace) -> int:
    benchmarks = [b.strip() for b in args.benchmarks.split(",") if b.strip()]
    if not benchmarks:
        raise ValueError(f"--benchmarks must name at least one of {sorted(DATASETS)}")
    ks = _parse_ks(args.k)
    data_files = _parse_data_files(args.data_file)
    sampling = SamplingConfig(args.temperature, args.top_p, args.max_new_tokens, args.seed)
    try:  # run_eval checks every option and --out before it loads anything
        summary = run_eval(
            args.model,
            benchmarks,
            n=args.n,
            ks=ks,
            out_dir=args.out,
            data_files=data_files,
            data_dir=args.data_dir,
            limit=args.limit,
            backend=args.backend,
            template=args.template,
            chat=args.chat,
            sampling=sampling,
            batch_size=args.batch_size,
            timeout=args.timeout,
            score_workers=args.score_workers,
            progress=not args.no_progress,
            overwrite=args.overwrite,
            device=args.device,
            dtype=args.dtype,
        )
    except DatasetUnavailableError as error:
        raise ValueError(str(error)) from error  # one line, exit 2 (ebpo.cli)
    print(summary["markdown"])
    print(
        f"wrote {args.out}/results.md, results.csv, results.json and samples.jsonl "
        f"({summary['samples']} samples, {summary['seconds']} s)"
    )
    return 0
