"""``ebpo replay``: would EBPO have helped this run? A finished run's rewards through every estimator.

Reads verl's rollout dumps (``trainer.rollout_data_dir``: ``{step}.jsonl`` files) or a table of
prompt id, reward and step from another trainer, replays the steps in order through GRPO and the
estimators asked for (:mod:`ebpo.analysis.replay`), and writes ``replay.json``, ``replay.csv``
and the PNGs to ``--output-dir``, all or nothing, holding that folder for the whole run
(:mod:`ebpo.utils.output_folder`); prints a table and a one-line verdict. Every
argument and every input file is checked before anything is written: a bad row ends in one line
naming the file and the line (exit 2), and the output directory is left as it was. The output
directory may not be an input, hold one or lie inside one (links resolved): refused before any
file is read.
docs/replay.md explains the numbers.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ebpo.analysis.replay.engine import DEFAULT_ESTIMATORS, Replay, replay_steps, summarize
from ebpo.analysis.replay.plots import PLOTS, plot_writers
from ebpo.analysis.replay.readers import Columns
from ebpo.analysis.replay.report import console_table, report, report_writers
from ebpo.analysis.replay.sources import INPUT_FORMATS, Source
from ebpo.commands.estimator_module import (
    add_estimator_module_argument,
    import_estimator_module_of,
)
from ebpo.utils.files import check_output_path
from ebpo.utils.output_folder import (
    check_apart,
    check_folder,
    check_names_fit,
    holding,
    remove_stale_reports,
    write_report,
)

DESCRIPTION = (
    "Read the rewards a finished run wrote — verl's rollout dumps (trainer.rollout_data_dir: "
    "{step}.jsonl files) or a table of prompt id, reward and step from another trainer — and "
    "replay its steps in order through GRPO and the estimators asked for, the stateful ones "
    "keeping their state as in training. Prints a table and a one-line verdict (how many "
    "responses GRPO gave no signal, and how many of those EBPO would have); writes replay.json, "
    "replay.csv and the PNGs to --output-dir, all or nothing. A bad row ends in one line "
    "naming the file and the line (exit 2) before anything is written. See `ebpo docs replay`."
)
OUTPUTS = ("replay.json", "replay.csv")
#: names the temporary folders of the report in --output-dir (ebpo.utils.file_sets)
REPORT_TAG = "replay"
#: option -> the column it names in a table, and its default
COLUMN_OPTIONS = {"--prompt-column": "prompt", "--reward-column": "reward", "--step-column": "step"}


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "replay",
        help="replay a finished run's rewards through every estimator: would EBPO have helped?",
        description=DESCRIPTION,
    )
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="verl rollout dumps: a directory of {step}.jsonl files (trainer.rollout_data_dir) or "
        "such files; with --format table: .jsonl / .csv / .parquet tables or directories of them",
    )
    parser.add_argument(
        "--output-dir", required=True, help="where replay.json, replay.csv and the PNGs go"
    )
    parser.add_argument(
        "--estimators",
        default=",".join(DEFAULT_ESTIMATORS),
        help="comma-separated estimator names (default: %(default)s); grpo, the "
        "reference, is always replayed",
    )
    add_estimator_module_argument(parser)
    parser.add_argument(
        "--format",
        choices=INPUT_FORMATS,
        default=None,
        help="verl (rollout dumps; the default) or table (implied by any column option)",
    )
    for option, default in COLUMN_OPTIONS.items():
        what = option.removeprefix("--").removesuffix("-column")
        parser.add_argument(
            option,
            default=None,
            help=f"a table's {what} column (default: {default!r})"
            + ("; rows with the same id in a step form a group" if what == "prompt" else ""),
        )
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.set_defaults(func=run)
    return parser


def check_args(args: argparse.Namespace) -> tuple[str, Columns | None, list[str], Path]:
    """``(format, table columns or None, estimator names, output directory)``, checked before
    any file is read; ValueError naming the option otherwise."""
    given = {o: getattr(args, o[2:].replace("-", "_")) for o in COLUMN_OPTIONS}
    named = [option for option, value in given.items() if value is not None]
    fmt = args.format or ("table" if named else "verl")
    columns = None
    if fmt == "verl" and named:
        raise ValueError(
            f"{', '.join(named)} name a table's columns: they go with --format table (verl's "
            "dumps have uid / input, score and step)"
        )
    if fmt == "table":
        values = [v if v is not None else COLUMN_OPTIONS[o] for o, v in given.items()]
        for option, value in zip(COLUMN_OPTIONS, values, strict=True):
            if not value.strip():
                raise ValueError(f"{option} must be a column name, got {value!r}")
        if len(set(values)) < len(values):
            raise ValueError(
                f"--prompt-column, --reward-column and --step-column must be three different "
                f"columns, got {values}"
            )
        columns = Columns(*values)
    names = [n.strip() for n in str(args.estimators).split(",") if n.strip()]
    if not names:
        raise ValueError(f"--estimators must name at least one estimator, got {args.estimators!r}")
    out_dir = check_folder(args.output_dir, "--output-dir")
    check_apart(out_dir, [Path(p).expanduser() for p in args.paths], option="--output-dir")
    return fmt, columns, names, out_dir


def check_outputs(out_dir: Path, source: Source, plots: bool) -> None:
    """No input file may lie in ``out_dir`` (a file of the input directories may link there) and
    no output may be an input (a link in ``out_dir`` to one); every name fits its file system."""
    check_apart(out_dir, (file.path for file in source.files), option="--output-dir")
    inputs = {(info.st_dev, info.st_ino) for info in (f.path.stat() for f in source.files)}
    for name in OUTPUTS + (PLOTS if plots else ()):
        path = check_output_path(out_dir / name, "--output-dir", kind="file")
        if path.exists() and (path.stat().st_dev, path.stat().st_ino) in inputs:
            raise ValueError(
                f"--output-dir {str(out_dir)!r}: {name} would overwrite an input of this replay"
            )
    check_names_fit(out_dir, OUTPUTS + (PLOTS if plots else ()), tag=REPORT_TAG,
                    option="--output-dir", hint="write it to another file system")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    import_estimator_module_of(args)  # before the names are read
    fmt, columns, names, out_dir = check_args(args)
    plots = not args.no_plots
    import pyarrow  # noqa: F401  (the data extra: a missing one fails here, before any reading)

    if plots:
        import matplotlib  # noqa: F401  (the plot extra, likewise)
    replay = Replay(names)
    source = Source(args.paths, fmt, columns)
    # the folder is ours for the whole run: a second replay into it waits for nothing, it is
    # refused, before any reading
    with holding(
        out_dir,
        lambda: check_outputs(out_dir, source, plots),
        option="--output-dir",
        tidy=lambda: remove_stale_reports(out_dir, REPORT_TAG, OUTPUTS + PLOTS, "replay"),
    ):
        total = len(source.files) if source.one_step_per_file else None
        records = replay_steps(source.steps(), replay, total=total)
        summary = summarize(records)
        content = report(_inputs(args, fmt, source), replay.estimators, summary, records)
        writers = report_writers(content)
        if plots:
            writers.update(plot_writers(records))
        written = write_report(out_dir, writers, tag=REPORT_TAG, replaces=OUTPUTS + PLOTS,
                               option="--output-dir")  # fmt: skip
    print(console_table(summary))
    print()
    print("verdict: " + content["verdict"])
    print(f"wrote {', '.join(str(p) for p in written)}")
    return 0


def _inputs(args: argparse.Namespace, fmt: str, source: Source) -> dict[str, Any]:
    """The ``inputs`` record of ``replay.json``."""
    return {
        "paths": [str(p) for p in args.paths],
        "format": fmt,
        "files": len(source.files),
        "key_columns": sorted({c.key for c in source.columns}),
        "reward_column": source.columns[0].reward,
        "step_column": source.columns[0].step,
    }
