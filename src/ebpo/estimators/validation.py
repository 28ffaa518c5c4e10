"""Input conversion and checks of the estimator contract.

What goes in — rewards, group ids, mask, clusters as tensors, arrays or lists — is converted and
validated here (group ids and cluster labels become dense integer indices: :func:`factorize`);
what comes out is checked here too (finite, and fitting the caller's dtype). Every function
raises a ``ValueError`` that names the argument, what was expected and what it got, so that a bad
batch fails before any estimator state can see it.
"""

from __future__ import annotations

import hashlib
import math
import numbers
from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ebpo.utils.checks import short_repr

if TYPE_CHECKING:  # the batch is only read here; base imports this module
    from ebpo.estimators.base import Batch

#: the distinct ids :func:`factorize` found, in index order
Labels = torch.Tensor | np.ndarray

__all__ = [
    "Labels",
    "as_mask",
    "as_real_array",
    "as_reward_tensor",
    "as_token_counts",
    "check_finite_statistics",
    "check_json_label",
    "check_length",
    "check_outputs",
    "check_positional",
    "check_tensor_data",
    "factorize",
    "group_clusters",
    "group_prompt_keys",
    "plain_labels",
    "stable_key_hash",
]


# ---------------------------------------------------------------------- ids
def factorize(ids: Any, argument: str = "group_ids") -> tuple[torch.Tensor, Labels]:
    """Map arbitrary group ids to dense integers.

    Returns ``(index, uniques)``: ``index[i]`` in ``[0, len(uniques))`` and ``uniques[index[i]]``
    equals ``ids[i]``. ``uniques`` is a tensor (integer ids) or a numpy array (strings, wide
    unsigned integers, Python objects); :func:`plain_labels` turns it into plain Python values.
    ``argument`` names the input in error messages (``"group_ids"``, ``"clusters"``).

    * Integers spanning a range not much wider than N: a presence table (``bincount``) and a
      cumulative sum, O(N); other integers: ``torch.unique``. Unsigned 64-bit ids of 2**63 or more
      keep their value (``np.unique``), and Python ints that numpy would turn into float64 (a list
      mixing ids ≥ 2**63 with others) are hashed exactly.
    * Fixed-width numpy strings: ``np.unique``.
    * Python objects (verl passes a numpy object array of uuid strings; lists of strings or
      tuples): each id is hashed once into a first-seen dictionary. There is no vectorised
      primitive for Python objects; hashing is O(N), where ``np.unique`` would sort them with
      Python comparisons (benchmarks/bench_advantages.py times verl's uuid workload).

    Raises:
        ValueError: floating-point or complex ids, unhashable ids, or a container without an
            order (set, dict, string) instead of one id per response.
    """
    check_positional(argument, ids)
    if isinstance(ids, torch.Tensor):
        if ids.dtype.is_floating_point or ids.dtype.is_complex:
            raise ValueError(
                f"{argument} must hold integers or hashable ids, got a {ids.dtype} tensor"
            )
        if ids.dtype in _WIDE_UNSIGNED:  # torch cannot cast them to int64 without wrapping around
            return factorize(ids.detach().cpu().numpy(), argument)
        return _factorize_integers(ids.detach().reshape(-1).cpu().to(torch.int64))
    array = ids if isinstance(ids, np.ndarray) else _as_array(ids)
    if array.dtype.kind in "iub":
        if array.dtype.kind == "u" and array.size and array.max() > np.iinfo(np.int64).max:
            uniques, inverse = np.unique(array, return_inverse=True)
            return torch.from_numpy(inverse.astype(np.int64, copy=False).reshape(-1)), uniques
        return _factorize_integers(torch.from_numpy(np.ascontiguousarray(array, dtype=np.int64)))
    if array.dtype.kind in "fc":
        raise ValueError(
            f"{argument} must hold integers or hashable ids, got floats ({array.dtype})"
        )
    if array.dtype.kind in "US":
        uniques, inverse = np.unique(array, return_inverse=True)
        return torch.from_numpy(inverse.astype(np.int64, copy=False).reshape(-1)), uniques
    first_seen: dict[Hashable, int] = {}
    try:
        inverse = np.fromiter(
            (first_seen.setdefault(x, len(first_seen)) for x in array.tolist()),
            dtype=np.int64,
            count=len(array),
        )
    except TypeError as error:
        raise ValueError(
            f"{argument} must be hashable (ints, strings, tuples, ...): {error}"
        ) from error
    uniques = np.empty(len(first_seen), dtype=object)
    uniques[:] = list(first_seen)
    return torch.from_numpy(inverse), uniques


_WIDE_UNSIGNED = tuple(
    getattr(torch, name) for name in ("uint32", "uint64") if hasattr(torch, name)
)


def check_positional(argument: str, values: Any) -> None:
    """Refuse containers that have a length but no order: one entry per response is positional.
    A tensor must also hold its values (:func:`check_tensor_data`)."""
    if isinstance(values, (str, bytes, set, frozenset, Mapping)):
        raise ValueError(
            f"{argument} must be a 1-D sequence with one entry per response (list, tuple, array or "
            f"tensor), got a {type(values).__name__}"
        )
    check_tensor_data(argument, values)


def check_tensor_data(argument: str, values: Any) -> None:
    """Refuse tensors whose values cannot be read as a plain array (torch would raise
    NotImplementedError or RuntimeError deep inside): a meta tensor (shape, no data), a sparse one
    (COO, CSR, CSC, BSR, BSC), a nested one, a quantized one. Anything else passes."""
    if not isinstance(values, torch.Tensor):
        return
    if values.is_meta:
        raise ValueError(
            f"{argument} must be a tensor holding values, got a meta tensor (a shape without data)"
        )
    if values.is_nested:
        raise ValueError(f"{argument} must be a 1-D tensor, got a nested tensor")
    if values.layout != torch.strided:
        raise ValueError(
            f"{argument} must be a dense tensor, got a sparse tensor (layout "
            f"{str(values.layout).removeprefix('torch.')}); pass {argument}.to_dense()"
        )
    if values.is_quantized:
        raise ValueError(
            f"{argument} must be a plain tensor, got a quantized {values.dtype} tensor; pass "
            f"{argument}.dequantize()"
        )


def plain_labels(uniques: Labels | Sequence[Hashable]) -> list[Hashable]:
    """The unique ids of :func:`factorize` as plain Python values (JSON-friendly where possible)."""
    values = uniques.tolist() if isinstance(uniques, (torch.Tensor, np.ndarray)) else list(uniques)
    return [x.item() if isinstance(x, np.generic) else x for x in values]


def _as_array(ids: Sequence[Hashable]) -> np.ndarray:
    try:
        array = np.asarray(ids)
    except (ValueError, TypeError, OverflowError):
        array = None
    # Keep numpy's conversion only for plain numbers: it would turn [1, "1"] into two equal strings,
    # and [2**63, -1] into float64 (losing ids that differ in the last digits).
    if array is not None and array.dtype.kind == "f" and array.ndim == 1 and _all_python_ints(ids):
        array = None
    if array is None or array.ndim != 1 or array.dtype.kind not in "iubf":
        array = np.empty(len(ids), dtype=object)  # strings, tuples and mixed types stay whole
        array[:] = list(ids)
    return array


def _all_python_ints(values: Sequence[Any]) -> bool:
    return all(isinstance(x, (int, np.integer)) for x in values)


def _factorize_integers(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    n = values.numel()
    if n == 0:
        return values, values
    low, high = int(values.min()), int(values.max())
    if high - low < 4 * n + 1024:
        offset = values - low
        present = torch.bincount(offset, minlength=high - low + 1) > 0
        dense = torch.cumsum(present, 0) - 1
        return dense[offset], present.nonzero().flatten() + low
    uniques, index = torch.unique(values, return_inverse=True)
    return index, uniques


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
    check_length("clusters", clusters, group_index.numel())
    row_cluster, uniques = factorize(clusters, "clusters")
    labels = plain_labels(uniques)
    for label in labels:  # one check per distinct label, not per row
        check_json_label("clusters", label)
    return _label_of_each_group(
        "clusters", row_cluster, labels, group_index, valid, num_groups
    ), labels


def group_prompt_keys(
    prompt_keys: Any, group_index: torch.Tensor, valid: torch.Tensor, num_groups: int
) -> torch.Tensor:
    """``[K]`` int64: the :func:`stable_key_hash` of each group's prompt key (0 for a group with no
    valid row). Every valid row of a group must carry the same key."""
    check_length("prompt_keys", prompt_keys, group_index.numel())
    row_key, uniques = factorize(prompt_keys, "prompt_keys")
    labels = plain_labels(uniques)
    hashes = torch.tensor([stable_key_hash(label) for label in labels], dtype=torch.int64)
    return hashes[
        _label_of_each_group("prompt_keys", row_key, labels, group_index, valid, num_groups)
    ]


def stable_key_hash(key: Hashable) -> int:
    """A signed 64-bit hash of a prompt key that is the same in every process (Python's ``hash``
    of a string is salted per process): BLAKE2b of a type-tagged encoding, so that ``1`` and
    ``"1"`` differ. Keys: str, bytes, int, None, or tuples of them."""
    digest = hashlib.blake2b(_key_bytes(key), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def _key_bytes(key: Any) -> bytes:
    if isinstance(key, str):
        return b"s" + key.encode("utf-8", "surrogatepass")
    if isinstance(key, bytes):
        return b"b" + key
    if isinstance(key, (bool, int)):  # bool before int: True and 1 are equal dict keys anyway
        return b"i" + str(int(key)).encode()
    if key is None:
        return b"n"
    if isinstance(key, (tuple, list)):
        parts = [_key_bytes(item) for item in key]
        return b"t" + b"".join(len(p).to_bytes(8, "little") + p for p in parts)
    raise ValueError(
        "prompt_keys must be strings, bytes, integers, None or tuples of them (one "
        f"stable key per prompt); got {type(key).__name__} {short_repr(key)}"
    )


def _label_of_each_group(
    argument: str,
    row_label: torch.Tensor,
    labels: list[Hashable],
    group_index: torch.Tensor,
    valid: torch.Tensor,
    num_groups: int,
) -> torch.Tensor:
    """``[K]`` the label index shared by the valid rows of each group (0 for a group with none);
    ValueError naming ``argument`` when a group's valid rows carry two labels."""
    big = torch.iinfo(torch.int64).max
    low = torch.full((num_groups,), big, dtype=torch.int64).scatter_reduce(
        0, group_index[valid], row_label[valid], reduce="amin"
    )
    high = torch.full((num_groups,), -1, dtype=torch.int64).scatter_reduce(
        0, group_index[valid], row_label[valid], reduce="amax"
    )
    has_rows = high >= 0
    if (low[has_rows] != high[has_rows]).any():
        mixed = (low[has_rows] != high[has_rows]).nonzero()[0]
        bad = int(has_rows.nonzero().flatten()[mixed].item())
        raise ValueError(
            f"{argument} must be constant within a group; group #{bad} has rows labelled "
            f"{labels[int(low[bad])]!r} and {labels[int(high[bad])]!r}"
        )
    return torch.where(has_rows, high, torch.zeros_like(high))


# ---------------------------------------------------------------------- statistics and outputs
def check_finite_statistics(
    rewards: torch.Tensor,
    labels: Labels,
    mean: torch.Tensor,
    variance: torch.Tensor,
) -> None:
    """Refuse a batch whose per-group mean or variance overflows float64 (rewards near 1e154 or
    more), before any estimator state can see it. ``labels`` are the group ids of
    :func:`factorize`, to name the group."""
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
