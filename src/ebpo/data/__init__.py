"""The toolkit's data layer: the paper's datasets in one schema, data files, prompt templates.

* :mod:`ebpo.data.datasets` — the registry (:data:`DATASETS`), the unified :data:`SCHEMA` and the
  per-dataset normalisers;
* :mod:`ebpo.data.loading` — :func:`load_dataset` from the hub or a local copy, and
  ``datasets.Dataset`` views of the rows;
* :mod:`ebpo.data.tables` — JSON lines / JSON / Parquet files as rows or pandas frames, written
  atomically;
* :mod:`ebpo.data.templates` — the DAPO, boxed and raw prompt templates.

verl's parquet layout lives with the verl integration (``ebpo.integrations.verl.data_prep``).
"""

from ebpo.data.datasets import DATASETS, SCHEMA, DatasetSpec, detect_schema, normalise_rows
from ebpo.data.loading import (
    DatasetUnavailableError,
    find_local_copy,
    load_dataset,
    to_dataset,
    to_prompt_dataset,
)
from ebpo.data.tables import read_rows, read_table, write_rows, write_table

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
    "read_table",
    "to_dataset",
    "to_prompt_dataset",
    "write_rows",
    "write_table",
]
