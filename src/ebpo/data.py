"""Datasets of the EBPO paper, normalised to one schema.

Every row, whatever its source, becomes::

    {"id": str, "prompt": str, "answer": str, "source": str, "topic": str, "difficulty": str}

``prompt`` is the bare problem statement (no template: apply one with :mod:`ebpo.templates`),
``answer`` the ground truth :func:`ebpo.rewards.score_math` compares against, ``source`` the
registry name, ``topic``/``difficulty`` free-form strings, empty when the dataset has none (MATH-500
gives subject and level 1-5, OlympiadBench subfield and "Competition"; :mod:`ebpo.curriculum`
fills them for the rest).

    from ebpo.data import load_dataset
    rows = load_dataset("math-500")                                   # from the Hugging Face Hub
    rows = load_dataset("math-500", data_files="math500_test.jsonl")  # a local copy, hub schema
    rows = load_dataset("my_problems.parquet")                        # unified or any hub schema
    ds = load_dataset("aime-2024", as_dataset=True)                   # a datasets.Dataset

Registry (:data:`DATASETS`): training set ``dapo-math-17k``; evaluation sets ``math-500``,
``aime-2024``, ``aime-2025``, ``amc-2023``, ``olympiadbench``. The hub ids are the copies most RLVR
evaluation code uses; each spec records its columns, which the test fixtures reproduce.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ebpo.templates import apply_template, build_messages, strip_dapo_template

__all__ = [
    "DATASETS",
    "SCHEMA",
    "DatasetSpec",
    "DatasetUnavailableError",
    "detect_schema",
    "find_local_copy",
    "load_dataset",
    "normalise_rows",
    "read_rows",
    "to_dataset",
    "to_prompt_dataset",
    "to_verl_rows",
    "write_rows",
]

SCHEMA = ("id", "prompt", "answer", "source", "topic", "difficulty")
_LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet")


class DatasetUnavailableError(ConnectionError):
    """The hub could not be reached (or the dataset is not on it) and no local file was given."""


@dataclass(frozen=True)
class DatasetSpec:
    """One registered dataset: where it lives on the hub and how its rows map to :data:`SCHEMA`.

    ``columns`` are the hub columns the normaliser reads (used to recognise local files in this
    schema); ``normalise(row, index)`` returns a unified row."""

    name: str
    hub_id: str
    split: str
    columns: tuple[str, ...]
    normalise: Callable[[Mapping[str, Any], int], dict[str, str]]
    config: str | None = None
    dedupe: bool = False  # drop rows whose prompt repeats (DAPO-Math-17K ships every problem ~100x)
    description: str = ""


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # e.g. AMC answers stored as 27.0
    return str(value).strip()


def _strip_dollars(answer: str) -> str:
    answer = answer.strip()
    while len(answer) >= 2 and answer.startswith("$") and answer.endswith("$"):
        answer = answer[1:-1].strip()
    return answer


def _row(source: str, id_: Any, prompt: Any, answer: Any, topic: Any = "", difficulty: Any = "") -> dict[str, str]:
    return {
        "id": _text(id_),
        "prompt": _text(prompt),
        "answer": _strip_dollars(_text(answer)),
        "source": source,
        "topic": _text(topic),
        "difficulty": _text(difficulty),
    }


# ----------------------------------------------------------------------------------- normalisers
def _dapo(row: Mapping[str, Any], i: int) -> dict[str, str]:
    # prompt: [{"content": <DAPO template around the problem>, "role": "user"}]
    messages = row["prompt"]
    if isinstance(messages, str):
        content = messages
    else:
        users = [m for m in messages if m.get("role") == "user"] or list(messages)
        content = users[-1]["content"]
    extra = row.get("extra_info") or {}
    return _row(
        "dapo-math-17k",
        extra.get("id") or extra.get("index") or f"dapo-math-17k-{i}",
        strip_dapo_template(content),
        row["reward_model"]["ground_truth"],
    )


def _math500(row: Mapping[str, Any], i: int) -> dict[str, str]:
    return _row("math-500", row.get("unique_id") or f"math-500-{i}", row["problem"], row["answer"],
                row.get("subject"), row.get("level"))


def _aime(name: str) -> Callable[[Mapping[str, Any], int], dict[str, str]]:
    def normalise(row: Mapping[str, Any], i: int) -> dict[str, str]:
        id_ = row.get("id")
        return _row(name, f"{name}-{id_ if id_ not in (None, '') else i}", row["problem"], row["answer"])

    return normalise


def _amc23(row: Mapping[str, Any], i: int) -> dict[str, str]:
    id_ = row.get("id")
    return _row("amc-2023", f"amc-2023-{id_ if id_ not in (None, '') else i}", row["question"], row["answer"])


def _olympiadbench(row: Mapping[str, Any], i: int) -> dict[str, str]:
    # final_answer is a list of "$...$" strings (several for is_multiple_answer problems);
    # math-verify compares the comma-joined list as a set/tuple.
    answers = row["final_answer"]
    if isinstance(answers, str):
        answers = [answers]
    answer = ", ".join(_strip_dollars(_text(a)) for a in answers)
    context = _text(row.get("context"))
    problem = f"{context}\n\n{_text(row['question'])}" if context else row["question"]
    return _row("olympiadbench", f"olympiadbench-{row.get('id', i)}", problem, answer,
                row.get("subfield"), row.get("difficulty"))


def _unified(row: Mapping[str, Any], i: int) -> dict[str, str]:
    source = _text(row.get("source")) or "local"
    return _row(source, row.get("id") or f"{source}-{i}", row["prompt"], row["answer"],
                row.get("topic"), row.get("difficulty"))


DATASETS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in (
        DatasetSpec(
            "dapo-math-17k", "BytedTsinghua-SIA/DAPO-Math-17k", "train",
            ("data_source", "prompt", "ability", "reward_model", "extra_info"), _dapo, dedupe=True,
            description="DAPO training set: 17,398 unique integer-answer problems (1.79M rows with repeats).",
        ),
        DatasetSpec(
            "math-500", "HuggingFaceH4/MATH-500", "test",
            ("problem", "solution", "answer", "subject", "level", "unique_id"), _math500,
            description="500 MATH test problems (Lightman et al. 2023); subject -> topic, level -> difficulty.",
        ),
        DatasetSpec(
            "aime-2024", "HuggingFaceH4/aime_2024", "train",
            ("id", "problem", "solution", "answer", "url", "year"), _aime("aime-2024"),
            description="AIME 2024 I and II, 30 problems, integer answers 0-999.",
        ),
        DatasetSpec(
            "aime-2025", "math-ai/aime25", "test", ("problem", "answer", "id"), _aime("aime-2025"),
            description="AIME 2025 I and II, 30 problems, integer answers 0-999.",
        ),
        DatasetSpec(
            "amc-2023", "math-ai/amc23", "test", ("id", "question", "answer", "url"), _amc23,
            description="AMC 12 2023, 40 problems with numeric answers.",
        ),
        DatasetSpec(
            "olympiadbench", "Hothan/OlympiadBench", "train",
            ("id", "question", "solution", "final_answer", "context", "is_multiple_answer", "unit",
             "answer_type", "subfield", "difficulty"),
            _olympiadbench, config="OE_TO_maths_en_COMP",
            description="OlympiadBench open-ended, text-only, English competition maths (675 problems).",
        ),
    )
}
_UNIFIED_COLUMNS = ("prompt", "answer")


# --------------------------------------------------------------------------------------- reading
def read_rows(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Raw rows of a local ``.jsonl``/``.json``/``.parquet`` file, read with ``datasets`` (so
    nested columns such as message lists and structs come back as lists and dicts)."""
    path = Path(path)
    if path.suffix not in _LOCAL_SUFFIXES:
        raise ValueError(f"data file must end in one of {_LOCAL_SUFFIXES}, got {str(path)!r}")
    if not path.is_file():
        raise ValueError(f"data file {str(path)!r} does not exist")
    import datasets

    builder = "parquet" if path.suffix == ".parquet" else "json"
    with _quiet_datasets():
        ds = datasets.load_dataset(builder, data_files=str(path), split="train")
    return ds.to_list()


class _quiet_datasets:
    """Silence ``datasets``' progress bars while reading small local files."""

    def __enter__(self) -> None:
        import datasets

        self._was_enabled = datasets.utils.logging.is_progress_bar_enabled()
        datasets.utils.logging.disable_progress_bar()

    def __exit__(self, *exc: object) -> None:
        import datasets

        if self._was_enabled:
            datasets.utils.logging.enable_progress_bar()


def detect_schema(columns: Iterable[str]) -> str:
    """The registry name whose hub columns are all present, or ``"unified"`` for files already in
    :data:`SCHEMA` (at least ``prompt`` and ``answer`` as plain columns)."""
    columns = set(columns)
    # Most specific match first: AIME 2025's columns are a subset of AIME 2024's.
    matches = [spec for spec in DATASETS.values() if set(spec.columns) <= columns]
    if matches:
        return max(matches, key=lambda spec: len(spec.columns)).name
    if set(_UNIFIED_COLUMNS) <= columns:
        return "unified"
    raise ValueError(
        f"cannot recognise the columns {sorted(columns)}: expected the unified schema {SCHEMA} "
        f"or the hub schema of one of {sorted(DATASETS)}"
    )


def normalise_rows(
    rows: Iterable[Mapping[str, Any]], schema: str, *, dedupe: bool | None = None, limit: int | None = None
) -> list[dict[str, str]]:
    """Rows mapped to :data:`SCHEMA` with ``schema``'s normaliser (a registry name or
    ``"unified"``); duplicates of an earlier prompt dropped when ``dedupe`` (default: the spec's
    setting); at most ``limit`` rows."""
    if schema != "unified" and schema not in DATASETS:
        raise ValueError(f"schema must be 'unified' or one of {sorted(DATASETS)}, got {schema!r}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit!r}")
    normalise = _unified if schema == "unified" else DATASETS[schema].normalise
    if dedupe is None:
        dedupe = schema != "unified" and DATASETS[schema].dedupe
    out: list[dict[str, str]] = []
    seen: set[str] = set()
    for i, raw in enumerate(rows):
        if limit is not None and len(out) >= limit:
            break
        try:
            row = normalise(raw, i)
        except (KeyError, TypeError, AttributeError, IndexError) as error:
            raise ValueError(f"row {i} does not match the {schema!r} schema: missing or malformed {error}") from error
        if dedupe:
            if row["prompt"] in seen:
                continue
            seen.add(row["prompt"])
        out.append(row)
    return out


# -------------------------------------------------------------------------------------- the hub
def _hub_reachable(timeout: float = 3.0) -> bool:
    """A TCP connect to the hub endpoint: without it ``datasets`` retries for ~25 s before failing."""
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    parsed = urlparse(endpoint)
    host = parsed.hostname or "huggingface.co"
    port = parsed.port or (443 if parsed.scheme != "http" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _offline_mode() -> bool:
    return any(os.environ.get(v, "").upper() in ("1", "ON", "YES", "TRUE") for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def _unavailable(spec: DatasetSpec, reason: str) -> DatasetUnavailableError:
    return DatasetUnavailableError(
        f"cannot load dataset {spec.name!r} ({spec.hub_id}"
        f"{', config ' + spec.config if spec.config else ''}, split {spec.split!r}) from the "
        f"Hugging Face Hub: {reason}. Download it where the hub is reachable (e.g. "
        f"datasets.load_dataset({spec.hub_id!r}{', ' + repr(spec.config) if spec.config else ''}, "
        f"split={spec.split!r}).to_parquet('{spec.name}.parquet')) and pass the file: "
        f"load_dataset({spec.name!r}, data_files='{spec.name}.parquet'), "
        f"`ebpo eval --data-file {spec.name}=PATH`, or put it in a directory named by "
        f"EBPO_DATA_DIR as {spec.name}.parquet/.jsonl; a cached copy loads with HF_HUB_OFFLINE=1."
    )


def _load_hub(spec: DatasetSpec, split: str) -> Any:
    import datasets

    if not _offline_mode() and not _hub_reachable():
        raise _unavailable(spec, "the hub endpoint is unreachable")
    try:
        return datasets.load_dataset(spec.hub_id, spec.config, split=split)
    except (ConnectionError, OSError, FileNotFoundError) as error:
        raise _unavailable(spec, f"{type(error).__name__}: {error}") from error


# ------------------------------------------------------------------------------------- load API
def _is_local_path(name_or_path: str) -> bool:
    return name_or_path.endswith(_LOCAL_SUFFIXES) or os.path.exists(name_or_path)


def load_dataset(
    name_or_path: str,
    split: str | None = None,
    limit: int | None = None,
    *,
    data_files: str | os.PathLike[str] | None = None,
    schema: str | None = None,
    dedupe: bool | None = None,
    as_dataset: bool = False,
    data_dir: str | os.PathLike[str] | None = None,
) -> Any:
    """Rows of a registered dataset or a local file, in the unified :data:`SCHEMA`.

    ``name_or_path``: a registry name (:data:`DATASETS`) or a ``.jsonl``/``.json``/``.parquet``
    path. ``data_files`` loads a registered dataset from a local copy in its hub schema.
    ``schema`` forces a normaliser for a local file (otherwise detected from its columns).
    ``split`` overrides the registry's split (hub only). ``data_dir`` (default: env
    ``EBPO_DATA_DIR``) is searched for ``<name>.parquet``/``.jsonl``/``.json`` before the hub.
    Returns ``list[dict]``, or a
    ``datasets.Dataset`` with ``as_dataset=True``. Raises :class:`DatasetUnavailableError`
    quickly when the hub cannot be reached, with instructions for passing a local file."""
    if not isinstance(name_or_path, str) or not name_or_path:
        raise ValueError(f"name_or_path must be a dataset name or a file path, got {name_or_path!r}")
    if name_or_path in DATASETS:
        spec = DATASETS[name_or_path]
        if data_files is None:
            data_files = find_local_copy(name_or_path, data_dir)
        if data_files is not None:
            raw: Iterable[Mapping[str, Any]] = read_rows(data_files)
            if schema is None:
                try:
                    schema = detect_schema(_columns(raw))
                except ValueError:  # e.g. a copy without an optional column: this dataset's normaliser decides
                    schema = spec.name
        else:
            raw = _load_hub(spec, split or spec.split)
            schema = schema or spec.name
        if schema == "unified":
            rows = normalise_rows(raw, "unified", dedupe=spec.dedupe if dedupe is None else dedupe, limit=limit)
            for row in rows:
                row["source"] = spec.name if row["source"] == "local" else row["source"]
        else:
            rows = normalise_rows(raw, schema, dedupe=dedupe, limit=limit)
    elif _is_local_path(name_or_path):
        if data_files is not None:
            raise ValueError("data_files is for registered dataset names; pass the path as name_or_path")
        raw = read_rows(name_or_path)
        rows = normalise_rows(raw, schema or detect_schema(_columns(raw)), dedupe=dedupe, limit=limit)
    else:
        raise ValueError(
            f"name_or_path must be one of {sorted(DATASETS)} or an existing "
            f"{'/'.join(_LOCAL_SUFFIXES)} file, got {name_or_path!r}"
        )
    return to_dataset(rows) if as_dataset else rows


def find_local_copy(name: str, data_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """``<data_dir>/<name>.parquet`` (or ``.jsonl``/``.json``) if it exists; ``data_dir`` defaults
    to the environment variable ``EBPO_DATA_DIR``."""
    data_dir = data_dir or os.environ.get("EBPO_DATA_DIR")
    if not data_dir:
        return None
    for suffix in (".parquet", ".jsonl", ".json"):
        path = Path(data_dir) / f"{name}{suffix}"
        if path.is_file():
            return path
    return None


def _columns(raw: Any) -> list[str]:
    if hasattr(raw, "column_names"):
        return list(raw.column_names)
    raw = list(raw) if not isinstance(raw, list) else raw
    return list(raw[0]) if raw else []


def to_dataset(rows: list[dict[str, str]]) -> Any:
    """A ``datasets.Dataset`` with the unified columns, in order (empty input gives an empty
    dataset that still has them)."""
    import datasets

    features = datasets.Features({key: datasets.Value("string") for key in SCHEMA})
    return datasets.Dataset.from_list([{k: row.get(k, "") for k in SCHEMA} for row in rows], features=features)


def to_prompt_dataset(
    rows: list[dict[str, str]], *, template: str = "dapo", conversational: bool = True, system: str | None = None
) -> Any:
    """A ``datasets.Dataset`` ready for TRL's ``GRPOTrainer``: ``prompt`` is the templated problem
    (a chat message list when ``conversational``, else a string), ``problem`` the bare problem,
    and the other unified columns (``answer``, read by :func:`ebpo.rewards.math_reward`) kept."""
    import datasets

    def prompt(problem: str) -> Any:
        return build_messages(problem, template, system) if conversational else apply_template(problem, template)

    return datasets.Dataset.from_list(
        [{**{k: row.get(k, "") for k in SCHEMA}, "problem": row["prompt"], "prompt": prompt(row["prompt"])} for row in rows]
    )


def to_verl_rows(
    rows: list[dict[str, str]], *, template: str = "dapo", data_source: str | None = None, split: str = "train"
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
            "extra_info": {"index": i, "split": split, "id": row["id"], "topic": row.get("topic", ""),
                           "difficulty": row.get("difficulty", "")},
        }
        for i, row in enumerate(rows)
    ]


def write_rows(rows: Iterable[Mapping[str, Any]], path: str | os.PathLike[str]) -> Path:
    """Write rows to ``.jsonl`` (one JSON object per line, UTF-8) or ``.parquet``."""
    path = Path(path)
    rows = list(rows)
    if path.suffix == ".jsonl":
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    elif path.suffix == ".parquet":
        import datasets

        path.parent.mkdir(parents=True, exist_ok=True)
        datasets.Dataset.from_list(rows).to_parquet(str(path))
    else:
        raise ValueError(f"path must end in .jsonl or .parquet, got {str(path)!r}")
    return path
