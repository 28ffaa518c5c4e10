"""The datasets :class:`~ebpo.integrations.trl.EBPOTrainer` trains and evaluates on: the columns
its options need (``cluster_column``, the curriculum's ``topic`` / ``difficulty``) and the
curriculum order of ``data_order`` (:func:`ebpo.curriculum.order_indices`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ebpo.curriculum import order_indices

__all__ = ["check_columns", "eval_splits", "reorder"]


def _column_names(dataset: Any) -> list[str] | None:
    names = getattr(dataset, "column_names", None)
    return list(names) if isinstance(names, Sequence) else None


def check_columns(argument: str, dataset: Any, columns: list[str], option: str) -> None:
    """``dataset`` (named ``argument`` in the error) must have ``columns`` (needed by the trainer
    option ``option``). A dataset that does not list its columns (an iterable one) passes."""
    if dataset is None:
        return
    names = _column_names(dataset)
    if names is None:
        return  # iterable datasets may not know their columns; TRL will fail on the first batch
    missing = [c for c in columns if c not in names]
    if missing:
        raise ValueError(
            f"{argument} has no column {missing} (needed by {option}); its columns are {names}"
        )


def eval_splits(eval_dataset: Any) -> list[tuple[str, Any]]:
    """``[(name for error messages, split)]`` of TRL's ``eval_dataset`` (one dataset or a dict)."""
    if eval_dataset is None:
        return []
    if isinstance(eval_dataset, dict):
        return [(f"eval_dataset[{key!r}]", value) for key, value in eval_dataset.items()]
    return [("eval_dataset", eval_dataset)]


def reorder(train_dataset: Any, order: str, seed: int) -> Any:
    """``train_dataset`` in the order given by ``ebpo.curriculum.order_indices``."""
    if train_dataset is None or not hasattr(train_dataset, "select"):
        raise ValueError(
            f"data_order={order!r} needs a map-style train_dataset (a datasets.Dataset)"
        )
    needed = {
        "topic": ["topic"],
        "difficulty": ["difficulty"],
        "topic_then_difficulty": ["topic", "difficulty"],
    }[order]
    check_columns("train_dataset", train_dataset, needed, f"data_order={order!r}")
    columns = {name: train_dataset[name] for name in needed}
    indices = order_indices(len(train_dataset), order, seed=seed, **columns)
    return train_dataset.select(list(indices))
