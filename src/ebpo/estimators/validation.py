"""Input conversion and checks of the estimator contract.

What goes in — rewards, group ids, mask, clusters as tensors, arrays or lists — is converted and
validated here; what comes out is checked here too (finite, and fitting the caller's dtype). Every
function raises a ``ValueError`` that names the argument, what was expected and what it got, so
that a bad batch fails before any estimator state can see it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np
import torch

from ebpo.estimators.batch import Batch
from ebpo.estimators.functional import (
    Labels,
    check_positional,
    check_tensor_data,
    factorize,
    plain_labels,
)

__all__ = [
    "as_mask",
    "as_real_array",
    "as_reward_tensor",
    "as_token_counts",
    "check_finite_statistics",
    "check_json_label",
    "check_length",
    "check_outputs",
    "group_clusters",
]


# ---------------------------------------------------------------------- rewards
def as_reward_tensor(rewards: Any) -> tuple[torch.Tensor, torch.dtype, torch.device]:
    """``(float64 CPU copy, output dtype, output device)`` of a 1-D reward tensor, array or list.

    The outputs follow a floating-point tensor's dtype and device; anything else gives float32
    on the CPU.
    """
    if isinstance(rewards, torch.Tensor):
        check_tensor_data("rewards", rewards)
        if rewards.dtype.is_complex:
            raise ValueError(f"rewards must be real numbers, got a {rewards.dtype} tensor")
        out_dtype = rewards.dtype if rewards.dtype.is_floating_point else torch.float32
        out_device = rewards.device
        tensor = rewards.detach().to(device="cpu", dtype=torch.float64)
    else:
        if isinstance(rewards, (str, bytes, set, frozenset, Mapping)):
            raise ValueError(
                "rewards must be a 1-D tensor, array or list of numbers, got a "
                f"{type(rewards).__name__}"
            )
        array = as_real_array(rewards)
        tensor = torch.from_numpy(array.copy())
        out_dtype, out_device = torch.float32, torch.device("cpu")
    if tensor.dim() != 1:
        raise ValueError(
            f"rewards must be 1-D (one reward per response), got shape {tuple(tensor.shape)}"
        )
    return tensor, out_dtype, out_device


def as_real_array(rewards: Any, argument: str = "rewards") -> np.ndarray:
    """float64 numpy copy of ``rewards``; refuses what numpy would convert silently or lossily
    (complex numbers lose their imaginary part, strings such as "1" become numbers).
    ``argument`` names the input in error messages."""
    try:
        raw = np.asarray(rewards)
    except (TypeError, ValueError, OverflowError) as error:
        raise ValueError(
            f"{argument} must be numbers (a 1-D tensor, array or list); {error}"
        ) from error
    kind = raw.dtype.kind
    if kind == "c":
        raise ValueError(f"{argument} must be real numbers, got complex values ({raw.dtype})")
    if kind in "USV":
        raise ValueError(
            f"{argument} must be numbers, got {raw.dtype} values such as {raw.reshape(-1)[:1].tolist()}"
        )
    if kind == "O":  # mixed Python objects: numpy would turn None into NaN and "1" into 1.0
        for row, value in enumerate(raw.reshape(-1).tolist()):
            if isinstance(value, complex) or not isinstance(value, numbers.Real):
                raise ValueError(
                    f"{argument} must be real numbers, got {type(value).__name__} {value!r} at row {row}"
                )
    elif kind not in "biuf":
        raise ValueError(f"{argument} must be numbers, got {raw.dtype} values")
    try:
        return np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as error:
        raise ValueError(
            f"{argument} must be finite real numbers (a 1-D tensor, array or list); {error}"
        ) from error


# ---------------------------------------------------------------------- one entry per response
def _length(values: Any) -> int | None:
    shape = getattr(values, "shape", None)
    if shape is not None:
        return int(shape[0]) if len(shape) == 1 else None
    try:
        return len(values)
    except TypeError:
        return None


def check_length(argument: str, values: Any, n: int) -> None:
    """``values`` must be a 1-D sequence with one entry per response (``n`` of them)."""
    check_positional(argument, values)
    shape = getattr(values, "shape", None)
    if shape is not None and len(shape) != 1:
        raise ValueError(
            f"{argument} must be 1-D (one entry per response), got shape {tuple(shape)}"
        )
    length = _length(values)
    if length is None:
        raise ValueError(
            f"{argument} must be a 1-D sequence with one entry per response, got "
            f"{type(values).__name__}"
        )
    if length != n:
        raise ValueError(
            f"{argument} has {length} entries but rewards has {n}: expected one per response"
        )


def as_mask(mask: Any, n: int) -> torch.Tensor:
    """Boolean validity per row from a bool / 0-1 integer tensor, array or list."""
    check_length("mask", mask, n)
    if isinstance(mask, torch.Tensor):
        tensor = mask.detach().cpu().reshape(-1)
        if tensor.dtype == torch.bool:
            return tensor
        if tensor.dtype.is_floating_point or tensor.dtype.is_complex:
            raise ValueError(
                "mask must be boolean (True = use the response) or 0/1 integers, got dtype "
                f"{tensor.dtype}"
            )
        # == works for every integer dtype (torch.isin does not for uint16/32/64)
        if not bool(((tensor == 0) | (tensor == 1)).all()):
            raise ValueError(
                "mask must be boolean (True = use the response) or 0/1 integers, got values "
                f"{_outside_01(tensor.tolist())}"
            )
        return tensor != 0
    try:
        array = np.asarray(mask)
    except (TypeError, ValueError, OverflowError) as error:
        raise ValueError(
            f"mask must be a 1-D list, array or tensor of booleans; {error}"
        ) from error
    if array.dtype.kind == "b":
        return torch.from_numpy(array.copy()).reshape(-1)
    if array.dtype.kind not in "iu":
        raise ValueError(
            "mask must be boolean (True = use the response) or 0/1 integers, got dtype "
            f"{array.dtype}"
        )
    if not bool(((array == 0) | (array == 1)).all()):
        raise ValueError(
            "mask must be boolean (True = use the response) or 0/1 integers, got values "
            f"{_outside_01(array.tolist())}"
        )
    return torch.from_numpy(array != 0).reshape(-1)


def _outside_01(values: list[Any]) -> list[Any]:
    return [v for v in values if v not in (0, 1)][:3]


def as_token_counts(token_counts: Any, n: int, valid: torch.Tensor) -> torch.Tensor:
    """``[n]`` float64 number of tokens of each response, 0 on the rows that are not ``valid``.

    Counts are real numbers ≥ 0 (a fractional count is a token weight: verl's mask may be
    float); a valid row may have 0 tokens (it then weighs nothing in a token-weighted statistic).
    Rows that are not valid may hold anything (padding).
    """
    check_length("token_counts", token_counts, n)
    if isinstance(token_counts, torch.Tensor):
        if token_counts.dtype == torch.bool or token_counts.dtype.is_complex:
            raise ValueError(
                f"token_counts must be numbers of tokens, got a {token_counts.dtype} tensor"
            )
        counts = token_counts.detach().to(device="cpu", dtype=torch.float64).reshape(-1)
    else:
        array = as_real_array(token_counts, "token_counts")
        if np.asarray(token_counts).dtype.kind == "b":
            raise ValueError("token_counts must be numbers of tokens, got booleans")
        counts = torch.from_numpy(array.copy()).reshape(-1)
    bad = valid & ~(torch.isfinite(counts) & (counts >= 0))
    if bad.any():
        row = int(bad.nonzero()[0, 0])
        raise ValueError(
            "token_counts must be finite numbers >= 0 (tokens of each response), got "
            f"{float(counts[row])!r} at row {row}"
        )
    return torch.where(valid, counts, torch.zeros_like(counts))


# ---------------------------------------------------------------------- clusters
def check_json_label(argument: str, label: Any) -> None:
    """A cluster label must survive a JSON round trip: str, int, bool, None, finite float, or a
    tuple/list of those (tuples come back as tuples, see ``EBPO.load_state_dict``)."""
    if label is None or isinstance(label, (str, int)):
        return
    if isinstance(label, float) and math.isfinite(label):
        return
    if isinstance(label, (tuple, list)):
        for item in label:
            check_json_label(argument, item)
        return
    raise ValueError(
        f"{argument} labels must be strings, integers, finite floats, None or tuples of them (they "
        f"are saved in state_dict() as JSON); got {type(label).__name__} {label!r}"
    )


def group_clusters(
    clusters: Any, group_index: torch.Tensor, valid: torch.Tensor, num_groups: int
) -> tuple[torch.Tensor, list[Hashable]]:
    """``([K] cluster index of each group, cluster labels)``; every valid row of a group must
    carry the same label, and every label must be JSON-safe (:func:`check_json_label`)."""
    row_cluster, uniques = factorize(clusters, "clusters")
    labels = plain_labels(uniques)
    for label in labels:  # one check per distinct label, not per row
        check_json_label("clusters", label)
    big = torch.iinfo(torch.int64).max
    low = torch.full((num_groups,), big, dtype=torch.int64).scatter_reduce(
        0, group_index[valid], row_cluster[valid], reduce="amin"
    )
    high = torch.full((num_groups,), -1, dtype=torch.int64).scatter_reduce(
        0, group_index[valid], row_cluster[valid], reduce="amax"
    )
    has_rows = high >= 0
    if (low[has_rows] != high[has_rows]).any():
        mixed = (low[has_rows] != high[has_rows]).nonzero()[0]
        bad = int(has_rows.nonzero().flatten()[mixed].item())
        raise ValueError(
            f"clusters must be constant within a group; group #{bad} has rows labelled "
            f"{labels[int(low[bad])]!r} and {labels[int(high[bad])]!r}"
        )
    return torch.where(has_rows, high, torch.zeros_like(high)), labels


# ---------------------------------------------------------------------- statistics and outputs
def check_finite_statistics(
    rewards: torch.Tensor,
    labels: Labels,
    mean: torch.Tensor,
    variance: torch.Tensor,
) -> None:
    """Refuse a batch whose per-group mean or variance overflows float64 (rewards near 1e154 or
    more), before any estimator state can see it. ``labels`` are the group ids of
    :func:`~ebpo.estimators.functional.factorize`, to name the group."""
    for name, values in (("mean", mean), ("variance", variance)):
        bad = ~torch.isfinite(values)
        if bad.any():
            group = int(bad.nonzero()[0, 0])
            label = plain_labels(labels[group : group + 1])[0]
            raise ValueError(
                f"rewards are too large: the reward {name} of group {label!r} overflows float64 "
                f"(largest |reward| {float(rewards.abs().max()):.3g}); rescale the rewards"
            )


def check_outputs(batch: Batch, **outputs: torch.Tensor) -> None:
    """Every output (float64, masked) must be finite and fit the caller's dtype (e.g. fp16 holds
    at most 65504): no silent inf or NaN. Raises ValueError naming the output."""
    limit = torch.finfo(batch.out_dtype).max
    for name, values in outputs.items():
        if values.numel() == 0:
            continue
        low, high = torch.aminmax(values)  # one pass, no copy; NaN propagates
        has_nan = bool(torch.isnan(low) or torch.isnan(high))
        largest = math.nan if has_nan else max(-float(low), float(high))
        if not largest <= limit:  # also catches NaN
            if not math.isfinite(largest):
                raise ValueError(
                    f"the {name} of this batch overflow float64 (rewards up to "
                    f"{float(batch.rewards.abs().max()):.3g}); rescale the rewards"
                )
            raise ValueError(
                f"the {name} of this batch (up to {largest:.6g} in magnitude) do not fit the "
                f"output dtype {str(batch.out_dtype).removeprefix('torch.')} (max {limit:.6g}); "
                "pass the rewards as a float32 or float64 tensor, or rescale them"
            )
