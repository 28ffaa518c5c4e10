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

A user's files are sacred: every argument (the output directory first) is checked and every
dataset is loaded before anything is written; the files are written into a hidden staging
directory and moved into ``--out-dir`` only when all of them are complete, so a failure (no
network, a bad file, an interrupt) leaves neither ``--out-dir`` nor a partial file behind.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ebpo import curriculum
from ebpo.data import load_dataset, write_rows
from ebpo.data.templates import TEMPLATES, build_messages
from ebpo.integrations.verl.recipes import TRAIN_STEM
from ebpo.utils.checks import check_positive_int
from ebpo.utils.files import check_output_path
from ebpo.utils.runtime import quiet_logger
from ebpo.utils.structured_input import parse_json

__all__ = ["EVAL_STEMS", "label_rows", "prepare", "to_verl_rows"]

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
    labels: dict[str, dict[str, Any]] = {}
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
            labels[str(record["id"])] = record
    return labels


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


@contextlib.contextmanager
def _staging_dir(out_dir: Path) -> Iterator[Path]:
    """A hidden directory beside (or inside) ``out_dir`` on the same file system; removed at the end."""
    anchor = out_dir if out_dir.is_dir() else out_dir.parent
    while not anchor.is_dir():
        anchor = anchor.parent
    staging = Path(tempfile.mkdtemp(prefix=".ebpo-prepare-", dir=anchor))
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


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
        if method == "metadata":
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
) -> tuple[dict[str, str], list[str]]:
    """Write the files (see module docstring); returns ``({what: path}, notes)``.

    Order of work: check every argument (output directory first), load every dataset, label and
    order, write into a staging directory, move the finished files into ``out_dir``.

    Raises:
        ValueError: a bad argument or a dataset that cannot be loaded — always before anything
            is written.
    """
    out = check_output_path(out_dir, "--out-dir", kind="dir")
    unknown = sorted(set(eval_sets) - set(EVAL_STEMS))
    if unknown:
        raise ValueError(
            f"unknown evaluation set(s) {unknown}; expected some of {list(EVAL_STEMS)}"
        )
    eval_files = dict(eval_files or {})
    if template not in TEMPLATES:
        raise ValueError(f"--template must be one of {sorted(TEMPLATES)}, got {template!r}")
    check_positive_int("--num-topics", num_topics)
    if limit is not None:
        check_positive_int("--limit", limit)
    _check_input_file(train_file, "--train-file")
    _check_input_file(labels_file, "--labels")
    for name, path in eval_files.items():
        _check_input_file(path, f"--eval-file {name}=")

    # Everything that can fail on the network or on a bad file, before any output exists.
    labels = _read_labels(labels_file) if labels_file else None
    rows = _load(TRAIN_NAME, train_file, "--train-file", limit)
    if not rows:
        raise ValueError(f"the training set is empty ({train_file or TRAIN_NAME})")
    eval_rows = {
        name: _load(name, eval_files.get(name), f"--eval-file {name}=PATH") for name in eval_sets
    }

    topics, difficulty, notes = label_rows(
        rows, labels=labels, topic_method=topic_method, num_topics=num_topics, seed=seed
    )
    verl_rows = _verl_rows(rows, template, "train", topics, difficulty)
    outputs: dict[str, tuple[str, list[dict[str, Any]]]] = {}  # what -> (file name, rows)
    for order in ORDER_FILES:
        if order == "topic" and topics is None:
            notes.append(
                "skipped dapo_math_17k.topic.parquet: no topic labels (pass --labels or --topic-method)"
            )
            continue
        if order == "difficulty" and difficulty is None:
            notes.append(
                "skipped dapo_math_17k.difficulty.parquet: no difficulty (pass --labels with pass_rate)"
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
    for name, rows_of_set in eval_rows.items():
        levels = curriculum.difficulty_from_levels(
            [r.get("difficulty") or None for r in rows_of_set]
        )
        outputs[name] = (
            f"{EVAL_STEMS[name]}.parquet",
            _verl_rows(rows_of_set, template, "test", None, levels),
        )

    written: dict[str, str] = {}
    with _staging_dir(out) as staging:
        for file_name, file_rows in tqdm(
            list(outputs.values()), desc="writing parquet files", unit="file"
        ):
            write_rows(file_rows, staging / file_name)
        out.mkdir(parents=True, exist_ok=True)
        for what, (file_name, _) in outputs.items():
            shutil.move(
                str(staging / file_name), str(out / file_name)
            )  # a rename: same file system
            written[what] = str(out / file_name)
    return written, notes
