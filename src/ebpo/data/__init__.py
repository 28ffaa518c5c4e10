"""Datasets of the EBPO paper, normalised to one schema.

Every row, whatever its source, becomes::

    {"id": str, "prompt": str, "answer": str, "source": str, "topic": str, "difficulty": str}

``prompt`` is the bare problem statement (no template: apply one with :mod:`ebpo.data.templates`),
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

from ebpo.data.templates import apply_template, build_messages, strip_dapo_template

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
    if value is None or (isinstance(value, float) and value != value):  # None, NaN: missing
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
    """Raw rows of a local ``.jsonl``/``.json``/``.parquet`` file (nested columns such as message
    lists and structs come back as lists and dicts).

    ``.jsonl``: one JSON object per line (blank lines skipped); ``.json``: a JSON array of objects,
    or JSON lines. Raises ValueError naming the file and the line (or row) for a missing file, an
    empty file, a line that is not JSON, a row that is not an object, or a file that is not Parquet.
    """
    return _read_local(path).rows


@dataclass(frozen=True)
class _LocalRows:
    """Rows of a local file and where each came from, for error messages."""

    path: Path
    rows: list[dict[str, Any]]
    lines: list[int] | None = None  # 1-based line of each row of a JSON-lines file

    def where(self, index: int) -> str:
        if self.lines is not None:
            return f"{self.path}: line {self.lines[index]}"
        return f"{self.path}: row {index}"


def _read_local(path: str | os.PathLike[str]) -> _LocalRows:
    path = Path(path).expanduser()
    suffix = path.suffix.lower()
    if suffix not in _LOCAL_SUFFIXES:
        raise ValueError(f"data file must end in one of {_LOCAL_SUFFIXES}, got {str(path)!r}")
    if path.is_dir():
        raise ValueError(f"data file {str(path)!r} is a directory, expected a {suffix} file")
    if not path.exists():
        raise ValueError(f"data file {str(path)!r} does not exist")
    if not path.is_file():
        raise ValueError(f"data file {str(path)!r} is not a regular file (a device or a pipe?)")
    found = _read_parquet(path) if suffix == ".parquet" else _read_json_rows(path)
    if not found.rows:
        raise ValueError(f"data file {str(path)!r} is empty: it holds no rows")
    return found


def _read_parquet(path: Path) -> _LocalRows:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as error:
        raise ValueError(f"data file {str(path)!r} is not a readable Parquet file: {error}") from None
    return _LocalRows(path, table.to_pylist())


def _read_json_rows(path: Path) -> _LocalRows:
    try:
        text = path.read_text(encoding="utf-8-sig")  # -sig: tolerate a byte-order mark
    except UnicodeDecodeError as error:
        raise ValueError(f"data file {str(path)!r} is not UTF-8 text ({error.reason} at byte {error.start})") from None
    if path.suffix.lower() == ".json" and text.lstrip().startswith("["):  # a JSON array of objects
        try:
            items = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: line {error.lineno}: not valid JSON ({error.msg})") from None
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise ValueError(f"{path}: item {i} of the array is a JSON {_json_kind(item)}, expected an object (one per row)")
        return _LocalRows(path, items)
    rows: list[dict[str, Any]] = []
    lines: list[int] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: line {number}: not valid JSON ({error.msg} at column {error.colno})") from None
        if not isinstance(value, dict):
            raise ValueError(f"{path}: line {number} is a JSON {_json_kind(value)}, expected an object (one per line)")
        rows.append(value)
        lines.append(number)
    return _LocalRows(path, rows, lines)


def _json_kind(value: Any) -> str:
    names = {list: "array", str: "string", bool: "boolean", int: "number", float: "number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


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
        f"cannot recognise the columns {sorted(columns)}: expected at least 'prompt' and 'answer' "
        f"(the unified schema {SCHEMA}) or the hub schema of one of {sorted(DATASETS)}"
    )


def normalise_rows(
    rows: Iterable[Mapping[str, Any]],
    schema: str,
    *,
    dedupe: bool | None = None,
    limit: int | None = None,
    where: Callable[[int], str] | None = None,
) -> list[dict[str, str]]:
    """Rows mapped to :data:`SCHEMA` with ``schema``'s normaliser (a registry name or
    ``"unified"``); duplicates of an earlier prompt dropped when ``dedupe`` (default: the spec's
    setting); at most ``limit`` rows.

    A row that lacks a column the normaliser reads, or whose prompt or answer is empty (a problem
    nobody can score), raises ValueError naming it: ``where(i)`` (default ``"row i"``; the loader
    passes the file and line)."""
    if schema != "unified" and schema not in DATASETS:
        raise ValueError(f"schema must be 'unified' or one of {sorted(DATASETS)}, got {schema!r}")
    _check_limit(limit)
    where = where or (lambda i: f"row {i}")
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
        except KeyError as error:
            raise ValueError(f"{where(i)} does not match the {schema!r} schema: no column {error}") from error
        except (TypeError, AttributeError, IndexError) as error:
            raise ValueError(f"{where(i)} does not match the {schema!r} schema: malformed value ({error})") from error
        empty = [key for key in ("prompt", "answer") if not row[key]]
        if empty:
            raise ValueError(
                f"{where(i)} has no {' and no '.join(map(repr, empty))} (the {schema!r} schema; every "
                "problem needs a prompt and a reference answer)"
            )
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
    return name_or_path.lower().endswith(_LOCAL_SUFFIXES) or os.path.exists(name_or_path)


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
    _check_limit(limit)
    if name_or_path in DATASETS:
        spec = DATASETS[name_or_path]
        if data_files is None:
            data_files = find_local_copy(name_or_path, data_dir)
        if data_files is not None:
            local = _read_local(data_files)
            raw: Iterable[Mapping[str, Any]] = local.rows
            where: Callable[[int], str] | None = local.where
            if schema is None:
                try:
                    schema = detect_schema(_columns(local.rows))
                except ValueError:  # e.g. a copy without an optional column: this dataset's normaliser decides
                    schema = spec.name
        else:
            raw, where = _load_hub(spec, split or spec.split), None
            schema = schema or spec.name
        if schema == "unified":
            rows = normalise_rows(
                raw, "unified", dedupe=spec.dedupe if dedupe is None else dedupe, limit=limit, where=where
            )
            for row in rows:
                row["source"] = spec.name if row["source"] == "local" else row["source"]
        else:
            rows = normalise_rows(raw, schema, dedupe=dedupe, limit=limit, where=where)
    elif _is_local_path(name_or_path):
        if data_files is not None:
            raise ValueError("data_files is for registered dataset names; pass the path as name_or_path")
        local = _read_local(name_or_path)
        if schema is None:
            try:
                schema = detect_schema(_columns(local.rows))
            except ValueError as error:
                raise ValueError(f"data file {name_or_path!r}: {error}") from None
        rows = normalise_rows(local.rows, schema, dedupe=dedupe, limit=limit, where=local.where)
    else:
        raise ValueError(
            f"name_or_path must be one of {sorted(DATASETS)} or an existing "
            f"{'/'.join(_LOCAL_SUFFIXES)} file, got {name_or_path!r}"
        )
    return to_dataset(rows) if as_dataset else rows


def _check_limit(limit: Any) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be a non-negative integer or None, got {limit!r}")


def find_local_copy(name: str, data_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """``<data_dir>/<name>.parquet`` (or ``.jsonl``/``.json``) if it exists; ``data_dir`` defaults
    to the environment variable ``EBPO_DATA_DIR``."""
    origin = "data_dir" if data_dir else "EBPO_DATA_DIR"
    data_dir = data_dir or os.environ.get("EBPO_DATA_DIR")
    if not data_dir:
        return None
    if not Path(data_dir).is_dir():
        raise ValueError(f"{origin} {str(data_dir)!r} is not a directory")
    for suffix in (".parquet", ".jsonl", ".json"):
        path = Path(data_dir) / f"{name}{suffix}"
        if path.is_file():
            return path
    return None


def _columns(raw: Any) -> list[str]:
    if hasattr(raw, "column_names"):
        return list(raw.column_names)
    # Every column any row has (a file may leave optional columns out of some rows).
    return list(dict.fromkeys(key for row in raw for key in row))


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
    """Write rows to ``.jsonl`` (one JSON object per line, UTF-8) or ``.parquet``, atomically
    (:mod:`ebpo.utils.files`): an error leaves the previous file, if any, as it was."""
    from ebpo.utils.files import atomic_path, atomic_write

    path = Path(path)
    rows = list(rows)
    if path.suffix == ".jsonl":
        text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)  # fails before writing
        with atomic_write(path) as handle:
            handle.write(text)
    elif path.suffix == ".parquet":
        import datasets

        table = datasets.Dataset.from_list(rows)
        with atomic_path(path) as tmp:
            table.to_parquet(str(tmp))
    else:
        raise ValueError(f"path must end in .jsonl or .parquet, got {str(path)!r}")
    return path
