"""Loading the registered datasets and local data files in the unified schema
(:func:`load_dataset`), from the Hugging Face Hub or a local copy, and ``datasets.Dataset`` views
of the rows (:func:`to_dataset`, :func:`to_prompt_dataset`).

    from ebpo.data import load_dataset
    rows = load_dataset("math-500")                                   # from the Hugging Face Hub
    rows = load_dataset("math-500", data_files="math500_test.jsonl")  # a local copy, hub schema
    rows = load_dataset("my_problems.parquet")                        # unified or any hub schema
    ds = load_dataset("aime-2024", as_dataset=True)                   # a datasets.Dataset

The hub is often unreachable on clusters: a registered name is looked for in ``EBPO_DATA_DIR``
first, and an unreachable hub fails fast with :class:`DatasetUnavailableError`, which says how to
pass a local copy.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ebpo.data.datasets import (
    DATASETS,
    SCHEMA,
    DatasetSpec,
    check_limit,
    detect_schema,
    normalise_rows,
)
from ebpo.data.tables import READ_SUFFIXES, read_file_rows
from ebpo.data.templates import apply_template, build_messages

__all__ = [
    "DatasetUnavailableError",
    "find_local_copy",
    "load_dataset",
    "to_dataset",
    "to_prompt_dataset",
]


class DatasetUnavailableError(ConnectionError):
    """The hub could not be reached (or the dataset is not on it) and no local file was given."""


# -------------------------------------------------------------------------------------- the hub
def _hub_reachable(timeout: float = 3.0) -> bool:
    """A TCP connect to the hub endpoint: without it ``datasets`` retries for a long time before
    failing."""
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
    return any(
        os.environ.get(v, "").upper() in ("1", "ON", "YES", "TRUE")
        for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


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
    import datasets  # optional heavy dependency (ebpo[data])

    if not _offline_mode() and not _hub_reachable():
        raise _unavailable(spec, "the hub endpoint is unreachable")
    try:
        return datasets.load_dataset(spec.hub_id, spec.config, split=split)
    except (ConnectionError, OSError, FileNotFoundError) as error:
        raise _unavailable(spec, f"{type(error).__name__}: {error}") from error


# ------------------------------------------------------------------------------------- load API
def _is_local_path(name_or_path: str) -> bool:
    return name_or_path.lower().endswith(READ_SUFFIXES) or os.path.exists(name_or_path)


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
    Returns ``list[dict]``, or a ``datasets.Dataset`` with ``as_dataset=True``. Raises
    :class:`DatasetUnavailableError` quickly when the hub cannot be reached, with instructions
    for passing a local file."""
    if not isinstance(name_or_path, str) or not name_or_path:
        raise ValueError(
            f"name_or_path must be a dataset name or a file path, got {name_or_path!r}"
        )
    check_limit(limit)
    if name_or_path in DATASETS:
        spec = DATASETS[name_or_path]
        if data_files is None:
            data_files = find_local_copy(name_or_path, data_dir)
        if data_files is not None:
            local = read_file_rows(data_files)
            raw: Iterable[Mapping[str, Any]] = local.rows
            where: Callable[[int], str] | None = local.where
            if schema is None:
                try:
                    schema = detect_schema(_columns(local.rows))
                except ValueError:
                    # e.g. a copy without an optional column: this dataset's normaliser decides
                    schema = spec.name
        else:
            raw, where = _load_hub(spec, split or spec.split), None
            schema = schema or spec.name
        if schema == "unified":
            rows = normalise_rows(
                raw,
                "unified",
                dedupe=spec.dedupe if dedupe is None else dedupe,
                limit=limit,
                where=where,
            )
            for row in rows:
                row["source"] = spec.name if row["source"] == "local" else row["source"]
        else:
            rows = normalise_rows(raw, schema, dedupe=dedupe, limit=limit, where=where)
    elif _is_local_path(name_or_path):
        if data_files is not None:
            raise ValueError(
                "data_files is for registered dataset names; pass the path as name_or_path"
            )
        local = read_file_rows(name_or_path)
        if schema is None:
            try:
                schema = detect_schema(_columns(local.rows))
            except ValueError as error:
                raise ValueError(f"data file {name_or_path!r}: {error}") from None
        rows = normalise_rows(local.rows, schema, dedupe=dedupe, limit=limit, where=local.where)
    else:
        raise ValueError(
            f"name_or_path must be one of {sorted(DATASETS)} or an existing "
            f"{'/'.join(READ_SUFFIXES)} file, got {name_or_path!r}"
        )
    return to_dataset(rows) if as_dataset else rows


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
    import datasets  # optional heavy dependency (ebpo[data])

    features = datasets.Features({key: datasets.Value("string") for key in SCHEMA})
    # Column-wise: from_list cannot build an empty dataset with features.
    columns = {key: [row.get(key, "") for row in rows] for key in SCHEMA}
    return datasets.Dataset.from_dict(columns, features=features)


def to_prompt_dataset(
    rows: list[dict[str, str]],
    *,
    template: str = "dapo",
    conversational: bool = True,
    system: str | None = None,
) -> Any:
    """A ``datasets.Dataset`` in the prompt format of TRL's ``GRPOTrainer`` (and Hugging Face chat
    datasets): ``prompt`` is the templated problem (a chat message list when ``conversational``,
    else a string), ``problem`` the bare problem, and the other unified columns kept (``answer``
    is what :func:`ebpo.integrations.trl.reward.math_reward` reads)."""
    import datasets  # optional heavy dependency (ebpo[data])

    def prompt(problem: str) -> Any:
        return (
            build_messages(problem, template, system)
            if conversational
            else apply_template(problem, template)
        )

    return datasets.Dataset.from_list(
        [
            {
                **{k: row.get(k, "") for k in SCHEMA},
                "problem": row["prompt"],
                "prompt": prompt(row["prompt"]),
            }
            for row in rows
        ]
    )
