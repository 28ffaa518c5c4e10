"""``ebpo verl prepare-data``: the paper's data as verl RL parquet files, in the order each recipe reads.

Writes into ``--out-dir``:

* ``dapo_math_17k.file.parquet`` — the dataset's own order (the paper's "naive" EBPO, read with
  ``data.shuffle=False`` as the authors did);
* ``dapo_math_17k.shuffle.parquet`` — seeded random order (grpo, dr_grpo, dapo, entropy_mech;
  those recipes also let verl reshuffle every epoch);
* ``dapo_math_17k.topic.parquet`` — contiguous topic blocks (EBPO-topic; read with ``data.shuffle=False``);
* ``dapo_math_17k.difficulty.parquet`` — easy → hard (EBPO-diff; one epoch, no shuffling);
* ``math500.parquet``, ``aime24.parquet``, ``aime25.parquet``, ``amc23.parquet``,
  ``olympiadbench.parquet`` — the evaluation sets.

Every row has verl's layout (``data_source``, ``prompt`` as chat messages with the DAPO template,
``ability``, ``reward_model.ground_truth``, ``extra_info``) plus top-level ``topic`` (string) and
``difficulty`` (float, higher = harder; NaN when unknown) columns.

Labels: topics come from the dataset's own metadata, an external labels file (``--labels``: JSONL
with ``id`` and ``topic`` and/or ``pass_rate``/``difficulty``, e.g. the paper's LLM labeller or a
16-sample pass-rate run), or unsupervised clustering (``--topic-method tfidf|embed``). Difficulty
comes from ``pass_rate`` (difficulty = 1 − pass rate, the paper's EBPO-diff), a numeric
``difficulty`` label or the dataset's level. A curriculum file whose labels are missing is skipped
with a message, never written in a wrong order. Orders come from :func:`ebpo.curriculum.order_indices`.

The Hugging Face Hub is often unreachable on clusters' login nodes: pass local copies with
``--train-file`` and ``--eval-file NAME=PATH`` (hub schema or the unified schema).

A user's files are sacred: every argument and every output path (:mod:`.data_folder`: a file of
the user's at one is refused, never replaced) is checked and every dataset is loaded before
anything is written; the files are written into a hidden staging folder and swapped into
``--out-dir`` as one set only when all of them are complete, so a failure (no network, a bad
file, an interrupt) leaves neither ``--out-dir`` nor a partial file behind.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ebpo import curriculum
from ebpo.data import load_dataset, write_rows
from ebpo.data.templates import TEMPLATES, build_messages
from ebpo.integrations.verl.data_folder import check_outputs, write_outputs
from ebpo.integrations.verl.recipes import TRAIN_STEM
from ebpo.utils.checks import check_positive_int
from ebpo.utils.file_sets import Writer
from ebpo.utils.output_folder import check_folder
from ebpo.utils.runtime import quiet_logger
from ebpo.utils.structured_input import parse_json

__all__ = ["EVAL_STEMS", "check_label_ids", "label_rows", "prepare", "to_verl_rows"]

TRAIN_NAME = "dapo-math-17k"
#: registry name → file stem used by the recipes (see ebpo.integrations.verl.recipes.EVAL_SETS)
EVAL_STEMS = {
    "math-500": "math500",
    "aime-2024": "aime24",
    "aime-2025": "aime25",
    "amc-2023": "amc23",
    "olympiadbench": "olympiadbench",
}
ORDER_FILES = ("file", "shuffle", "topic", "difficulty")


def _read_labels(path: str) -> dict[str, dict[str, Any]]:
    """The records of a labels file by id. An id given twice with the same record is kept once;
    with different records it is refused (which one is right cannot be guessed)."""
    labels: dict[str, dict[str, Any]] = {}
    first_line: dict[str, int] = {}
    conflicts: list[tuple[str, int, int]] = []  # (id, first line, conflicting line)
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = parse_json(line)  # depth and repeated keys bounded
            except ValueError as error:
                raise ValueError(f"--labels {path}: line {number} is not JSON ({error})") from error
            if not isinstance(record, dict) or "id" not in record:
                raise ValueError(
                    f"--labels {path}: line {number} is not a JSON object with an 'id'"
                )
            key = str(record["id"])
            if key in labels:
                if labels[key] != record:
                    conflicts.append((key, first_line[key], number))
                continue
            labels[key] = record
            first_line[key] = number
    if conflicts:
        ids = len({key for key, _, _ in conflicts})
        key, first, again = conflicts[0]
        raise ValueError(
            f"--labels {path}: {ids} id(s) appear more than once with different labels (first: "
            f"{key!r} on lines {first} and {again}); keep one record per id"
        )
    return labels


def check_label_ids(
    labels: Mapping[str, Any], row_ids: Sequence[str], *, source: str, limited: bool = False
) -> None:
    """Refuse a labels file that does not label exactly the training rows, with counts.

    Every training row needs a record (a curriculum from labels on some rows only would be
    ordered by a fallback without saying so); every record needs a row, except when the rows
    were cut with ``--limit`` (``limited``), where a file for the whole set has more ids.

    Raises:
        ValueError: no id matches, some rows have no record, or (unless ``limited``) some
            records match no row.
    """
    present = set(row_ids)
    unlabelled = [key for key in row_ids if key not in labels]
    unknown = [key for key in labels if key not in present]
    if len(unlabelled) == len(row_ids):
        example = (
            f" (e.g. {next(iter(labels))!r} in the file, {row_ids[0]!r} in the data)"
            if labels
            else ""
        )
        raise ValueError(
            f"--labels {source}: none of its {len(labels)} id(s) matches one of the {len(row_ids)} "
            f"training rows' ids{example}; the ids must be the training set's 'id' column"
        )
    if unlabelled:
        raise ValueError(
            f"--labels {source}: {len(unlabelled)} of the {len(row_ids)} training rows have no "
            f"record (first: {unlabelled[0]!r}); give every training row a record"
        )
    if unknown and not limited:
        raise ValueError(
            f"--labels {source}: {len(unknown)} of its {len(labels)} id(s) match no training row "
            f"(first: {unknown[0]!r}); remove them, or check that the file belongs to this "
            "training set"
        )


def _check_input_file(path: str | None, option: str) -> None:
    if path is not None and not os.path.isfile(path):
        raise ValueError(f"{option} {path!r} is not a file")


def _load(
    name: str, local_file: str | None, option: str, limit: int | None = None
) -> list[dict[str, Any]]:
    """Rows of dataset ``name`` (from ``local_file`` if given); a load failure is a one-line ValueError."""
    # datasets configures its logger on import: import it before quietening that logger.
    import datasets  # noqa: F401  (optional heavy dependency, ebpo[data])

    try:
        with quiet_logger("datasets"):  # it logs the error we report below: one line, not two
            return load_dataset(name, data_files=local_file, limit=limit)
    except ValueError as error:  # pyarrow's ArrowInvalid is one too: name the file it came from
        if local_file is None:
            raise
        raise ValueError(f"cannot read {option} {local_file!r}: {error}") from error
    except ConnectionError as error:  # ebpo.data.DatasetUnavailableError: no hub, no local copy
        raise ValueError(
            f"cannot load {name!r}: the Hugging Face Hub is not reachable from here; pass a local copy "
            f"with {option} (hub schema or ebpo's unified schema)"
        ) from error
    except Exception as error:  # a local file that datasets/pyarrow cannot read
        where = f"{option} {local_file!r}" if local_file else repr(name)
        raise ValueError(f"cannot read {where}: {type(error).__name__}: {error}") from error


def _float_or_nan(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out


def label_rows(
    rows: list[dict[str, Any]],
    *,
    labels: Mapping[str, Mapping[str, Any]] | None = None,
    topic_method: str = "auto",
    num_topics: int = 10,
    seed: int = 0,
) -> tuple[list[str] | None, list[float] | None, list[str]]:
    """``(topics, difficulty, notes)`` for the rows; a list is None when it cannot be had for every row."""
    notes: list[str] = []
    labels = labels or {}
    matched = [labels.get(str(row["id"]), {}) for row in rows]

    # Topics: external labels > metadata > clustering.
    topics: list[str] | None = None
    if matched and all(m.get("topic") not in (None, "") for m in matched):
        topics = [str(m["topic"]) for m in matched]
        notes.append("topics: from --labels")
    elif topic_method != "none":
        columns = ["topic"] if rows and all(str(r.get("topic", "")).strip() for r in rows) else []
        try:
            method, column = curriculum.choose_topic_method(topic_method, columns)
        except ValueError as error:
            notes.append(f"topics: unavailable ({error})")
            method, column = "none", None
        texts = [r["prompt"] for r in rows]
        if method == "metadata" and column is not None:
            topics = curriculum.topics_from_metadata([r[column] for r in rows], column=column)
        elif method == "tfidf":
            topics = [
                f"cluster-{c}" for c in curriculum.tfidf_kmeans_topics(texts, num_topics, seed=seed)
            ]
        elif method == "embed":
            topics = [
                f"cluster-{c}"
                for c in curriculum.embedding_umap_kmeans_topics(texts, num_topics, seed=seed)
            ]
        if topics is not None:
            notes.append(f"topics: {method}" + (f" ({column})" if column else f" (K={num_topics})"))

    # Difficulty: pass rate > numeric label > dataset level.
    difficulty: list[float] | None = None
    if matched and all(m.get("pass_rate") is not None for m in matched):
        difficulty = curriculum.difficulty_from_pass_rates([m["pass_rate"] for m in matched])
        notes.append("difficulty: 1 - pass rate (--labels)")
    elif matched and all(m.get("difficulty") is not None for m in matched):
        difficulty = [_float_or_nan(m["difficulty"]) for m in matched]
        notes.append("difficulty: --labels")
    else:
        levels = curriculum.difficulty_from_levels([r.get("difficulty") or None for r in rows])
        if levels and not any(math.isnan(x) for x in levels):
            difficulty = levels
            notes.append("difficulty: dataset levels")
    if difficulty is not None and any(math.isnan(x) for x in difficulty):
        notes.append("difficulty: unavailable (some values are not numbers)")
        difficulty = None
    return topics, difficulty, notes


def to_verl_rows(
    rows: list[dict[str, str]],
    *,
    template: str = "dapo",
    data_source: str | None = None,
    split: str = "train",
) -> list[dict[str, Any]]:
    """Rows in verl's RL parquet layout (the DAPO-Math-17K layout): ``data_source``, ``prompt``
    (chat messages), ``ability``, ``reward_model`` = ``{"ground_truth", "style": "rule"}``,
    ``extra_info`` (index, split, id, topic, difficulty: what curricula and logging need)."""
    return [
        {
            "data_source": data_source or row["source"],
            "prompt": build_messages(row["prompt"], template),
            "ability": "MATH",
            "reward_model": {"ground_truth": row["answer"], "style": "rule"},
            "extra_info": {
                "index": i,
                "split": split,
                "id": row["id"],
                "topic": row.get("topic", ""),
                "difficulty": row.get("difficulty", ""),
            },
        }
        for i, row in enumerate(rows)
    ]


def _verl_rows(
    rows: list[dict[str, Any]],
    template: str,
    split: str,
    topics: list[str] | None,
    difficulty: list[float] | None,
) -> list[dict[str, Any]]:
    """:func:`to_verl_rows` plus top-level ``topic`` / ``difficulty`` columns (also in ``extra_info``)."""
    out = to_verl_rows(rows, template=template, split=split)
    for i, row in enumerate(out):
        row["topic"] = topics[i] if topics is not None else str(rows[i].get("topic", ""))
        row["difficulty"] = (
            difficulty[i] if difficulty is not None else _float_or_nan(rows[i].get("difficulty"))
        )
        # Same labels inside extra_info, which verl hands to reward functions and rollout dumps.
        row["extra_info"] = {
            **row["extra_info"],
            "topic": row["topic"],
            "difficulty": row["difficulty"],
        }
    return out


def _check_arguments(
    out_dir: str,
    *,
    train_file: str | None,
    eval_sets: Sequence[str],
    eval_files: Mapping[str, str],
    labels_file: str | None,
    num_topics: int,
    limit: int | None,
    template: str,
) -> Path:
    """Every argument checked, the output directory first; returns the output directory."""
    out = check_folder(out_dir, "--out-dir")
    unknown = sorted(set(eval_sets) - set(EVAL_STEMS))
    if unknown:
        raise ValueError(
            f"unknown evaluation set(s) {unknown}; expected some of {list(EVAL_STEMS)}"
        )
    if template not in TEMPLATES:
        raise ValueError(f"--template must be one of {sorted(TEMPLATES)}, got {template!r}")
    check_positive_int("--num-topics", num_topics)
    if limit is not None:
        check_positive_int("--limit", limit)
    _check_input_file(train_file, "--train-file")
    _check_input_file(labels_file, "--labels")
    for name, path in eval_files.items():
        _check_input_file(path, f"--eval-file {name}=")
    return out


def _training_files(
    verl_rows: list[dict[str, Any]],
    topics: list[str] | None,
    difficulty: list[float] | None,
    *,
    seed: int,
    missing: Mapping[str, str],
    notes: list[str],
) -> dict[str, tuple[str, list[dict[str, Any]]]]:
    """``{"train.<order>": (file name, rows in that order)}``; an order whose labels are missing
    is skipped with a note in ``notes`` (``missing``: what to pass, per order)."""
    outputs: dict[str, tuple[str, list[dict[str, Any]]]] = {}
    for order in ORDER_FILES:
        if order == "topic" and topics is None:
            notes.append(
                f"skipped {TRAIN_STEM}.topic.parquet: no topic labels ({missing['topic']})"
            )
            continue
        if order == "difficulty" and difficulty is None:
            notes.append(
                f"skipped {TRAIN_STEM}.difficulty.parquet: no difficulty ({missing['difficulty']})"
            )
            continue
        perm = (
            range(len(verl_rows))
            if order == "file"
            else curriculum.order_indices(
                len(verl_rows), order, topic=topics, difficulty=difficulty, seed=seed
            )
        )
        outputs[f"train.{order}"] = (f"{TRAIN_STEM}.{order}.parquet", [verl_rows[i] for i in perm])
    return outputs


def _missing_labels(
    labels: Mapping[str, Mapping[str, Any]] | None, source: str | None
) -> dict[str, str]:
    """What to pass for a skipped curriculum file, per order; with a labels file, how many of
    its records carry the label (all of them must)."""
    if labels is None:
        return {
            "topic": "pass --labels or --topic-method",
            "difficulty": "pass --labels with pass_rate",
        }
    topic = sum(1 for m in labels.values() if m.get("topic") not in (None, ""))
    level = sum(
        1
        for m in labels.values()
        if m.get("pass_rate") is not None or m.get("difficulty") is not None
    )
    return {
        "topic": f"--labels {source} has a topic on {topic} of {len(labels)} records; give every "
        "record one, or pass --topic-method",
        "difficulty": f"--labels {source} has pass_rate or difficulty on {level} of {len(labels)} "
        "records; give every record one",
    }


def _eval_files(
    eval_rows: Mapping[str, list[dict[str, Any]]], template: str
) -> dict[str, tuple[str, list[dict[str, Any]]]]:
    """``{set name: (file name, verl rows)}``, difficulty from the set's own levels."""
    outputs: dict[str, tuple[str, list[dict[str, Any]]]] = {}
    for name, rows_of_set in eval_rows.items():
        levels = curriculum.difficulty_from_levels(
            [r.get("difficulty") or None for r in rows_of_set]
        )
        outputs[name] = (
            f"{EVAL_STEMS[name]}.parquet",
            _verl_rows(rows_of_set, template, "test", None, levels),
        )
    return outputs


def _write_counted(rows: list[dict[str, Any]], bar: Any, path: Path) -> None:
    write_rows(rows, path)
    bar.update()


def prepare(
    out_dir: str,
    *,
    train_file: str | None = None,
    eval_sets: Sequence[str] = tuple(EVAL_STEMS),
    eval_files: Mapping[str, str] | None = None,
    labels_file: str | None = None,
    topic_method: str = "auto",
    num_topics: int = 10,
    limit: int | None = None,
    template: str = "dapo",
    seed: int = 0,
    links: Mapping[str, str] | None = None,
) -> tuple[dict[str, str], list[str]]:
    """Write the files (see module docstring); returns ``({what: path}, notes)``. ``links``:
    symbolic links to make in ``out_dir`` with the files (path relative to it -> target).

    Order of work: check every argument (output directory first) and every path a file or link
    may go to (:func:`.data_folder.check_outputs`), load every dataset, check that the labels
    file labels exactly the training rows, label and order, write the files as one set
    (:func:`.data_folder.write_outputs`), then the links.

    Raises:
        ValueError: a bad argument, an output path that holds something of the user's, a
            dataset that cannot be loaded or a labels file whose ids do not match the training
            rows — always before anything is written.
    """
    eval_files, links = dict(eval_files or {}), dict(links or {})
    out = _check_arguments(
        out_dir,
        train_file=train_file,
        eval_sets=eval_sets,
        eval_files=eval_files,
        labels_file=labels_file,
        num_topics=num_topics,
        limit=limit,
        template=template,
    )
    candidates = [f"{TRAIN_STEM}.{order}.parquet" for order in ORDER_FILES]
    check_outputs(out, candidates + [f"{EVAL_STEMS[name]}.parquet" for name in eval_sets], links)
    # Everything that can fail on the network or on a bad file, before any output exists.
    labels = _read_labels(labels_file) if labels_file else None
    rows = _load(TRAIN_NAME, train_file, "--train-file", limit)
    if not rows:
        raise ValueError(f"the training set is empty ({train_file or TRAIN_NAME})")
    if labels is not None:
        row_ids = [str(row["id"]) for row in rows]
        check_label_ids(labels, row_ids, source=str(labels_file), limited=limit is not None)
    eval_rows = {
        name: _load(name, eval_files.get(name), f"--eval-file {name}=PATH") for name in eval_sets
    }

    topics, difficulty, notes = label_rows(
        rows, labels=labels, topic_method=topic_method, num_topics=num_topics, seed=seed
    )
    outputs = _training_files(
        _verl_rows(rows, template, "train", topics, difficulty),
        topics,
        difficulty,
        seed=seed,
        missing=_missing_labels(labels, labels_file),
        notes=notes,
    )
    outputs.update(_eval_files(eval_rows, template))
    with tqdm(total=len(outputs), desc="writing parquet files", unit="file") as bar:
        writers: dict[str, Writer] = {
            file_name: functools.partial(_write_counted, file_rows, bar)
            for file_name, file_rows in outputs.values()
        }
        write_outputs(out, writers, links)
    return {what: str(out / file_name) for what, (file_name, _) in outputs.items()}, notes
