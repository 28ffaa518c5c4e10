"""``ebpo compare``: does EBPO train better than GRPO on my task, by how much, beyond seed noise?

Reads finished runs (TRL's ``trainer_state.json``, verl's file logger, ``ebpo train``'s run
folders; :mod:`ebpo.analysis.compare`), pairs each estimator with the baseline seed by seed and
writes ``compare.json``, ``compare.csv`` and two PNGs per metric to ``--output-dir``; prints a
table and one verdict line per estimator and metric. Everything is read and checked before
anything is written: a bad argument or run ends in one line (exit 2) and the output folder is left
as it was. The output folder (:mod:`ebpo.utils.output_folder`) is held while the report replaces
the previous one all or nothing; it may hold nothing but a previous report: the files its
``compare.json`` lists (:func:`previous_report`; a PNG merely named like a report's is the
user's). docs/compare.md explains the numbers.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
from pathlib import Path
from typing import Any

from ebpo.analysis.compare import compare_runs, read_runs
from ebpo.analysis.compare.plots import plot_names, plot_writers
from ebpo.analysis.compare.report import FORMAT, compare_csv, console_table
from ebpo.utils.checks import check_positive_int
from ebpo.utils.file_sets import Writer, check_leftovers
from ebpo.utils.files import read_json, write_json
from ebpo.utils.output_folder import (
    check_apart,
    check_folder,
    check_names_fit,
    entries_of,
    holding,
    remove_stale_reports,
    write_report,
)

DESCRIPTION = (
    "Compare estimators on your own finished runs: each estimator against the baseline (GRPO by "
    "default), paired by seed. RUN is a TRL output folder (trainer_state.json, also in its last "
    "checkpoint; ebpo grpo / EBPOTrainer or plain trl grpo, which is GRPO), a verl file-logger "
    "JSONL (or its folder) or an ebpo train run folder; the estimator and the seed come from the "
    "run's files, or from a label where they cannot be read: ESTIMATOR@SEED=PATH. Per step: the "
    "paired mean difference with its 95% Student-t interval; at the end: the difference at the "
    "last common step, in the area under the curve and in the steps to reach the baseline's "
    "final value; how many intervals were computed and how many exclude 0 after Holm's "
    "correction. Writes compare.json, compare.csv and PNGs to --output-dir. See `ebpo docs compare`."
)
OPTION = "--output-dir"
#: the names a report's files may have (fnmatch patterns); which of them are a report's: the
#: list in its compare.json
REPORT_FILES = ("compare.json", "compare.csv", "difference_*.png", "curves_*.png")
#: names the hidden staging folders of the report (ebpo.utils.file_sets)
REPORT_TAG = "compare"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "compare",
        help="compare estimators on your finished runs: paired seeds, differences with intervals",
        description=DESCRIPTION,
    )
    parser.add_argument(
        "runs",
        nargs="*",
        metavar="RUN",
        help="a finished run: PATH, or ESTIMATOR@SEED=PATH / ESTIMATOR=PATH / @SEED=PATH where "
        "its files do not say its estimator or seed",
    )
    parser.add_argument(
        "--output-dir", required=True, help="where compare.json, compare.csv and the PNGs go"
    )
    parser.add_argument(
        "--baseline",
        default="grpo",
        help="the estimator the others are compared with (default: grpo)",
    )
    parser.add_argument(
        "--metric",
        action="append",
        default=None,
        metavar="NAME",
        help="a logged metric to compare (repeatable; 'all': every metric every run logged); "
        "default: the evaluation metrics if every run has them, else the training reward",
    )
    parser.add_argument(
        "--smooth",
        type=int,
        default=1,
        metavar="N",
        help="compare a trailing moving mean over N logged values (default 1: the raw values)",
    )
    parser.add_argument(
        "--ignore",
        action="append",
        default=[],
        metavar="KEY",
        help="accept runs that differ in this setting (repeatable; fnmatch patterns: 'trainer.*')",
    )
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    smooth = check_positive_int("--smooth", args.smooth)
    metrics = [m.strip() for m in args.metric or []]
    if any(not m for m in metrics) or ("all" in metrics and len(metrics) > 1):
        raise ValueError(f"--metric must name metrics, or be 'all' alone, got {args.metric}")
    plots = not args.no_plots
    if plots:
        import matplotlib  # noqa: F401  (the plot extra: a missing one fails before any reading)
    check_folder(args.output_dir, OPTION)  # before any run is read
    runs = read_runs(args.runs)
    folders = [_run_folder(r.path) for r in runs]
    out_dir = check_output_folder(args.output_dir, folders)
    content = compare_runs(
        runs, baseline=args.baseline, metrics=metrics, smooth=smooth, ignore=args.ignore
    )
    writers: dict[str, Writer] = {
        "compare.json": lambda path: write_json(path, {**content, "files": sorted(writers)}),
        "compare.csv": lambda path: path.write_text(compare_csv(content), encoding="utf-8"),
    }
    if plots:
        writers.update(plot_writers(content))
    check_names_fit(out_dir, writers, tag=REPORT_TAG, option=OPTION,
                    hint="shorten the metric's name or compare with --no-plots")  # fmt: skip
    text = "\n".join(  # all that is printed made before anything is written
        [console_table(content), "", content["metric_note"]]
        + ["verdict: " + line for line in content["verdict"]]
    )
    with holding(
        out_dir,
        lambda: check_output_folder(args.output_dir, folders),
        option=OPTION,
        tidy=lambda: remove_stale_reports(out_dir, REPORT_TAG, (), "ebpo compare"),
    ):
        old = previous_report(out_dir)
        write_report(out_dir, writers, tag=REPORT_TAG, replaces=old, option=OPTION)
    print(text)
    print(f"wrote {out_dir}/compare.json, compare.csv" + (" and the PNGs" if plots else ""))
    return 0


def check_output_folder(out_dir: str | os.PathLike[str], run_folders: list[Path]) -> Path:
    """``--output-dir``, links resolved (a link stays: the report goes into its target), once
    writing there loses nothing: apart from the runs, holding nothing but a previous report."""
    folder = check_folder(out_dir, OPTION)
    try:
        target = folder.resolve()
    except (RuntimeError, OSError) as error:  # a loop that stat did not meet
        raise ValueError(f"{OPTION} {os.fspath(out_dir)!r} cannot be resolved ({error})") from None
    check_apart(folder, run_folders, option=OPTION, noun="input run")
    ours = previous_report(target)
    foreign = [n for n in entries_of(target, REPORT_TAG) if n not in ours]
    if foreign:
        raise ValueError(
            f"{OPTION} {os.fspath(out_dir)!r} holds files that are not an ebpo compare report "
            f"({', '.join(foreign[:4])}{' ...' if len(foreign) > 4 else ''}): the report "
            "replaces every report file there; give an empty or new folder"
        )
    if target.is_dir():
        check_leftovers(target, REPORT_TAG)
    return target


def previous_report(folder: Path) -> list[str]:
    """The files of the previous report, all replaced (no PNG of an old metric remains): those
    its ``compare.json`` lists (``files``; one written before that list, 0.1.0's: ``compare.csv``
    and the PNGs of its ``metrics``), each a regular file named as a report's file
    (:data:`REPORT_FILES`). None without a ``compare.json`` of ours: a file merely named like
    a report's is the user's."""
    try:
        manifest = read_json(folder / "compare.json") if _is_file(folder / "compare.json") else None
    except (OSError, ValueError):
        manifest = None
    if not (isinstance(manifest, dict) and manifest.get("format") == FORMAT):
        return []
    listed = manifest.get("files")
    if listed is None and isinstance(manifest.get("metrics"), list):  # a report of ebpo 0.1.0
        metrics = [m for m in manifest["metrics"] if isinstance(m, str)]
        listed = ["compare.csv", *(n for pair in plot_names(metrics).values() for n in pair)]
    names = {"compare.json", *(n for n in listed or () if isinstance(n, str))}
    return sorted(n for n in names if _is_report_name(n) and _is_file(folder / n))


def _is_report_name(name: str) -> bool:
    return "/" not in name and any(fnmatch.fnmatchcase(name, p) for p in REPORT_FILES)


def _is_file(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def _run_folder(path: Path) -> Path:
    """The folder a run lives in (a verl log file: its folder)."""
    return path.parent if path.is_file() else path
