"""The estimator contract, input validation and the registry of estimators by name.

Every estimator follows one contract (scikit-learn style: options in the constructor, state
explicit)::

    est = ebpo.make_estimator("ebpo", prior="history")
    res = est(rewards, group_ids, mask=None, clusters=None, update=True)
    res.advantages, res.baselines, res.shrinkage, res.metrics
    est.state_dict(); est.load_state_dict(state); est.reset()

Subclasses implement :meth:`AdvantageEstimator._compute` on an already validated :class:`Batch`
and, if they keep state, ``state_dict`` / ``load_state_dict`` / ``reset``. A call either
completes or raises before any state changes.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch

from ebpo.estimators.functional import (
    check_positional,
    factorize,
    group_moments,
    masked,
    plain_labels,
    segment_sum,
)
from ebpo.estimators.registry import estimator_options

__all__ = [
    "AdvantageEstimator",
    "AdvantageResult",
    "Batch",
]

NAN_POLICIES = ("raise", "mask")
#: an advantage counts as a learning signal when |A| exceeds this (rounding residue does not)
SIGNAL_THRESHOLD = 1e-8


@dataclass(frozen=True)
class AdvantageResult:
    """What an estimator returns for a batch of N responses.

    Attributes:
        advantages: ``[N]`` one advantage per response; 0 for masked rows.
        baselines: ``[N]`` the baseline subtracted from each reward, before any normalisation.
        shrinkage: ``[N]`` weight on the prior for the response's group (0 when the estimator has
            no prior).
        metrics: scalars for logging (see each estimator's docstring).
    """

    advantages: torch.Tensor
    baselines: torch.Tensor
    shrinkage: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Batch:
    """A validated batch, in float64, with its group structure.

    Masked rows keep their group index but have ``valid`` False and reward 0; every statistic
    weights rows by ``valid``.
    """

    rewards: torch.Tensor  # [N] float64, 0 where not valid
    valid: torch.Tensor  # [N] bool
    weight: torch.Tensor | None  # [N] float64 1.0 where valid else 0.0; None when all rows are valid
    group_index: torch.Tensor  # [N] int64 in [0, num_groups)
    num_groups: int
    group_count: torch.Tensor  # [K] float64, valid rows per group
    group_mean: torch.Tensor  # [K] float64
    group_variance: torch.Tensor  # [K] float64, unbiased; 0 for fewer than 2 valid rows
    cluster_index: torch.Tensor | None  # [K] int64 cluster of each group, or None
    cluster_labels: list[Hashable] | None
    out_dtype: torch.dtype
    out_device: torch.device

    @property
    def nonempty(self) -> torch.Tensor:
        """``[K]`` groups with at least one valid row."""
        return self.group_count > 0

    @property
    def num_valid(self) -> int:
        return int(self.group_count.sum())

    def per_row(self, per_group: torch.Tensor) -> torch.Tensor:
        return per_group[self.group_index]


def _check_choice(argument: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{argument} must be one of {list(choices)}, got {value!r}")


def _check_positive_int(argument: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{argument} must be a positive integer, got {value!r}")


def _check_positive(argument: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{argument} must be a positive finite number, got {value!r}")


class AdvantageEstimator:
    """Base class: validates input, builds the :class:`Batch`, assembles the result.

    Args:
        eps: added to standard deviations before dividing (verl's default 1e-6).
        nan_policy: ``"raise"`` (default) rejects NaN rewards on unmasked rows; ``"mask"`` treats
            them as masked rows (TRL marks a response that no reward function scored with NaN).
    """

    name: ClassVar[str] = ""
    #: whether ``clusters`` is used (others accept and ignore it)
    uses_clusters: ClassVar[bool] = False
    #: True when ``_compute`` itself validates its outputs with :func:`check_outputs` (a stateful
    #: estimator must, before it commits its state); ``_result`` then does not check them again
    checks_own_outputs: ClassVar[bool] = False

    def __init__(self, *, eps: float = 1e-6, nan_policy: str = "raise") -> None:
        _check_positive("eps", eps)
        _check_choice("nan_policy", nan_policy, NAN_POLICIES)
        self.eps = float(eps)
        self.nan_policy = nan_policy

    # ------------------------------------------------------------------ contract
    def __call__(
        self,
        rewards: Any,
        group_ids: Any,
        *,
        mask: Any = None,
        clusters: Any = None,
        update: bool = True,
    ) -> AdvantageResult:
        """Advantages for one batch. ``update=False`` leaves every running statistic untouched."""
        batch = self.prepare(rewards, group_ids, mask=mask, clusters=clusters)
        baseline, advantage, shrinkage, metrics = self._compute(batch, update=update)
        return self._result(batch, baseline, advantage, shrinkage, metrics)

    def _compute(
        self, batch: Batch, *, update: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, float]]:
        """Return per-row ``(baseline, advantage, shrinkage, extra_metrics)`` in float64."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state (plain Python numbers). Stateless estimators return their name."""
        return {"estimator": self.name}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._check_state_owner(state)

    def reset(self) -> None:
        """Forget all running statistics."""

    def _check_state_owner(self, state: dict[str, Any]) -> None:
        if not isinstance(state, Mapping):
            raise ValueError(f"state must be a dict from state_dict(), got {type(state).__name__}")
        if state.get("estimator") != self.name:
            raise ValueError(f"state belongs to estimator {state.get('estimator')!r}, cannot load it into {self.name!r}")

    def _check_state_options(self, state: Mapping[str, Any], names: tuple[str, ...]) -> None:
        """Refuse a state saved under different values of the options ``names`` (those that define
        what the saved statistics mean)."""
        saved = state.get("options")
        if not isinstance(saved, Mapping):
            raise ValueError(
                f"state has no 'options' dict (expected the one state_dict() writes, with {list(names)}); "
                f"got {saved!r}"
            )
        for name in names:
            ours = getattr(self, name)
            if name not in saved:
                raise ValueError(f"state does not record option {name!r}; this estimator has {name}={ours!r}")
            if saved[name] != ours:
                raise ValueError(
                    f"state was saved with {name}={saved[name]!r} but this estimator has {name}={ours!r}; "
                    f"build the estimator with {name}={saved[name]!r} to load it"
                )

    def __repr__(self) -> str:
        options = ", ".join(f"{k}={getattr(self, k)!r}" for k in estimator_options(self.name) if hasattr(self, k))
        return f"{type(self).__name__}({options})"

    # ------------------------------------------------------------------ input
    def prepare(self, rewards: Any, group_ids: Any, *, mask: Any = None, clusters: Any = None) -> Batch:
        """Validate the inputs and compute the group structure. Raises ValueError on bad input."""
        reward_tensor, out_dtype, out_device = _as_reward_tensor(rewards)
        n = reward_tensor.numel()
        if n == 0:
            raise ValueError("rewards is empty: expected at least one response")
        _check_length("group_ids", group_ids, n)
        valid = torch.ones(n, dtype=torch.bool) if mask is None else _as_mask(mask, n)
        finite = torch.isfinite(reward_tensor)
        if not bool(finite.all()):
            nan_rows = torch.isnan(reward_tensor) & valid
            if nan_rows.any():
                if self.nan_policy == "mask":
                    valid = valid & ~nan_rows
                else:
                    rows = nan_rows.nonzero().flatten()[:5].tolist()
                    raise ValueError(
                        f"rewards contains NaN on unmasked rows (first: {rows}); mask them, or build "
                        "the estimator with nan_policy='mask' to ignore them"
                    )
            inf_rows = torch.isinf(reward_tensor) & valid
            if inf_rows.any():
                rows = inf_rows.nonzero().flatten()[:5].tolist()
                raise ValueError(f"rewards must be finite; got inf on unmasked rows (first: {rows})")
        if mask is not None or not bool(finite.all()):
            # Padding rows may hold anything: zero them so that weighted sums stay finite.
            reward_tensor = torch.where(valid, reward_tensor, torch.zeros_like(reward_tensor))
        weight = None if mask is None and bool(finite.all()) else valid.to(torch.float64)
        self._check_rewards(reward_tensor, valid)

        group_index, uniques = factorize(group_ids)
        num_groups = len(uniques)
        count, mean, variance = group_moments(reward_tensor, group_index, weight, num_groups)
        _check_finite_statistics(reward_tensor, uniques, mean, variance)

        cluster_index = cluster_labels = None
        if clusters is not None:
            _check_length("clusters", clusters, n)
            cluster_index, cluster_labels = _group_clusters(clusters, group_index, valid, num_groups)
        elif self.uses_clusters and getattr(self, "per_cluster", False):
            raise ValueError("clusters is required when the estimator keeps per-cluster priors (per_cluster=True)")

        return Batch(
            rewards=reward_tensor,
            valid=valid,
            weight=weight,
            group_index=group_index,
            num_groups=num_groups,
            group_count=count,
            group_mean=mean,
            group_variance=variance,
            cluster_index=cluster_index,
            cluster_labels=cluster_labels,
            out_dtype=out_dtype,
            out_device=out_device,
        )

    def _check_rewards(self, rewards: torch.Tensor, valid: torch.Tensor) -> None:
        """Hook for estimators with a restricted reward range (``rewards`` is 0 on invalid rows)."""

    # ------------------------------------------------------------------ output
    def _result(
        self,
        batch: Batch,
        baseline: torch.Tensor,
        advantage: torch.Tensor,
        shrinkage: torch.Tensor,
        extra_metrics: dict[str, float],
    ) -> AdvantageResult:
        # Every input is finite on invalid rows (rewards were zeroed), so a product masks them.
        advantage, baseline, shrinkage = (masked(t, batch.weight) for t in (advantage, baseline, shrinkage))
        if not self.checks_own_outputs:
            check_outputs(batch, advantages=advantage, baselines=baseline, shrinkage=shrinkage)
        metrics = common_metrics(batch, advantage)
        metrics.update(extra_metrics)
        overflowed = sorted(k for k, v in metrics.items() if not math.isfinite(v))
        if overflowed:
            raise ValueError(f"the statistics {overflowed} of this batch overflow float64; rescale the rewards")

        def out(t: torch.Tensor) -> torch.Tensor:
            return t.to(dtype=batch.out_dtype, device=batch.out_device)

        return AdvantageResult(out(advantage), out(baseline), out(shrinkage), metrics)


# ---------------------------------------------------------------------- helpers
def _as_reward_tensor(rewards: Any) -> tuple[torch.Tensor, torch.dtype, torch.device]:
    if isinstance(rewards, torch.Tensor):
        if rewards.dtype.is_complex:
            raise ValueError(f"rewards must be real numbers, got a {rewards.dtype} tensor")
        out_dtype = rewards.dtype if rewards.dtype.is_floating_point else torch.float32
        out_device = rewards.device
        tensor = rewards.detach().to(device="cpu", dtype=torch.float64)
    else:
        if isinstance(rewards, (str, bytes, set, frozenset, Mapping)):
            raise ValueError(f"rewards must be a 1-D tensor, array or list of numbers, got a {type(rewards).__name__}")
        array = _as_real_array(rewards)
        tensor = torch.from_numpy(array.copy())
        out_dtype, out_device = torch.float32, torch.device("cpu")
    if tensor.dim() != 1:
        raise ValueError(f"rewards must be 1-D (one reward per response), got shape {tuple(tensor.shape)}")
    return tensor, out_dtype, out_device


def _as_real_array(rewards: Any) -> np.ndarray:
    """float64 numpy copy of ``rewards``; refuses what numpy would convert silently or lossily
    (complex numbers lose their imaginary part, strings such as "1" become numbers)."""
    try:
        raw = np.asarray(rewards)
    except (TypeError, ValueError, OverflowError) as error:
        raise ValueError(f"rewards must be numbers (a 1-D tensor, array or list); {error}") from error
    kind = raw.dtype.kind
    if kind == "c":
        raise ValueError(f"rewards must be real numbers, got complex values ({raw.dtype})")
    if kind in "USV":
        raise ValueError(f"rewards must be numbers, got {raw.dtype} values such as {raw.reshape(-1)[:1].tolist()}")
    if kind == "O":  # mixed Python objects: numpy would turn None into NaN and "1" into 1.0
        for row, value in enumerate(raw.reshape(-1).tolist()):
            if isinstance(value, complex) or not isinstance(value, numbers.Real):
                raise ValueError(f"rewards must be real numbers, got {type(value).__name__} {value!r} at row {row}")
    elif kind not in "biuf":
        raise ValueError(f"rewards must be numbers, got {raw.dtype} values")
    try:
        return np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as error:
        raise ValueError(f"rewards must be finite real numbers (a 1-D tensor, array or list); {error}") from error


def _length(values: Any) -> int | None:
    shape = getattr(values, "shape", None)
    if shape is not None:
        return int(shape[0]) if len(shape) == 1 else None
    try:
        return len(values)
    except TypeError:
        return None


def _check_length(argument: str, values: Any, n: int) -> None:
    check_positional(argument, values)
    shape = getattr(values, "shape", None)
    if shape is not None and len(shape) != 1:
        raise ValueError(f"{argument} must be 1-D (one entry per response), got shape {tuple(shape)}")
    length = _length(values)
    if length is None:
        raise ValueError(f"{argument} must be a 1-D sequence with one entry per response, got {type(values).__name__}")
    if length != n:
        raise ValueError(f"{argument} has {length} entries but rewards has {n}: expected one per response")


def _as_mask(mask: Any, n: int) -> torch.Tensor:
    """Boolean validity per row from a bool / 0-1 integer tensor, array or list."""
    _check_length("mask", mask, n)
    if isinstance(mask, torch.Tensor):
        tensor = mask.detach().cpu().reshape(-1)
        if tensor.dtype == torch.bool:
            return tensor
        if tensor.dtype.is_floating_point or tensor.dtype.is_complex:
            raise ValueError(f"mask must be boolean (True = use the response) or 0/1 integers, got dtype {tensor.dtype}")
        # == works for every integer dtype (torch.isin does not for uint16/32/64)
        if not bool(((tensor == 0) | (tensor == 1)).all()):
            raise ValueError(f"mask must be boolean (True = use the response) or 0/1 integers, got values {_outside_01(tensor.tolist())}")
        return tensor != 0
    try:
        array = np.asarray(mask)
    except (TypeError, ValueError, OverflowError) as error:
        raise ValueError(f"mask must be a 1-D list, array or tensor of booleans; {error}") from error
    if array.dtype.kind == "b":
        return torch.from_numpy(array.copy()).reshape(-1)
    if array.dtype.kind not in "iu":
        raise ValueError(f"mask must be boolean (True = use the response) or 0/1 integers, got dtype {array.dtype}")
    if not bool(((array == 0) | (array == 1)).all()):
        raise ValueError(f"mask must be boolean (True = use the response) or 0/1 integers, got values {_outside_01(array.tolist())}")
    return torch.from_numpy(array != 0).reshape(-1)


def _outside_01(values: list[Any]) -> list[Any]:
    return [v for v in values if v not in (0, 1)][:3]


def _check_finite_statistics(
    rewards: torch.Tensor, labels: Any, mean: torch.Tensor, variance: torch.Tensor
) -> None:
    """Refuse a batch whose per-group mean or variance overflows float64 (rewards near 1e154 or
    more), before any estimator state can see it."""
    for name, values in (("mean", mean), ("variance", variance)):
        bad = ~torch.isfinite(values)
        if bad.any():
            group = int(bad.nonzero()[0, 0])
            raise ValueError(
                f"rewards are too large: the reward {name} of group {plain_labels(labels[group : group + 1])[0]!r} "
                f"overflows float64 (largest |reward| {float(rewards.abs().max()):.3g}); rescale the rewards"
            )


def check_outputs(batch: Batch, **outputs: torch.Tensor) -> None:
    """Every output (float64, masked) must be finite and fit the caller's dtype (e.g. fp16 holds
    at most 65504): no silent inf or NaN. Raises ValueError naming the output."""
    limit = torch.finfo(batch.out_dtype).max
    for name, values in outputs.items():
        if values.numel() == 0:
            continue
        low, high = torch.aminmax(values)  # one pass, no copy; NaN propagates
        largest = max(-float(low), float(high)) if not (torch.isnan(low) or torch.isnan(high)) else math.nan
        if not largest <= limit:  # also catches NaN
            if not math.isfinite(largest):
                raise ValueError(f"the {name} of this batch overflow float64 (rewards up to "
                                 f"{float(batch.rewards.abs().max()):.3g}); rescale the rewards")
            raise ValueError(
                f"the {name} of this batch (up to {largest:.6g} in magnitude) do not fit the output dtype "
                f"{str(batch.out_dtype).removeprefix('torch.')} (max {limit:.6g}); pass the rewards as a "
                "float32 or float64 tensor, or rescale them"
            )


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
        f"{argument} labels must be strings, integers, finite floats, None or tuples of them (they are "
        f"saved in state_dict() as JSON); got {type(label).__name__} {label!r}"
    )


def _group_clusters(
    clusters: Any, group_index: torch.Tensor, valid: torch.Tensor, num_groups: int
) -> tuple[torch.Tensor, list[Hashable]]:
    """Cluster of each group; every valid row of a group must carry the same label."""
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
        bad = int(has_rows.nonzero().flatten()[(low[has_rows] != high[has_rows]).nonzero()[0]].item())
        raise ValueError(
            f"clusters must be constant within a group; group #{bad} has rows labelled "
            f"{labels[int(low[bad])]!r} and {labels[int(high[bad])]!r}"
        )
    return torch.where(has_rows, high, torch.zeros_like(high)), labels


def common_metrics(batch: Batch, advantage: torch.Tensor) -> dict[str, float]:
    """Metrics every estimator reports.

    ``zero_variance_group_frac``: groups (of ≥ 2 responses) whose rewards are all equal — GRPO gives
    them no signal. ``zero_signal_group_frac``: groups where this estimator gives every response a
    zero advantage (``|A| ≤ SIGNAL_THRESHOLD``). ``saturated_failure_group_frac``: groups whose rewards are all ≤ 0;
    ``saturated_failure_signal_frac``: of those, the fraction that still get a non-zero advantage
    (Theorem 3.2: 0 under GRPO, > 0 under EBPO once the prior mean is positive).
    """
    nonempty = batch.nonempty
    num_groups = int(nonempty.sum())
    num_valid = batch.num_valid
    multi = batch.group_count > 1
    zero_variance = multi & (batch.group_variance <= 0)
    # advantage and rewards are 0 on invalid rows, so plain segment sums count valid rows only.
    advantage_sq = advantage**2
    group_signal = segment_sum(advantage_sq, batch.group_index, batch.num_groups) > SIGNAL_THRESHOLD**2
    failed = nonempty & (segment_sum(batch.rewards.clamp(min=0), batch.group_index, batch.num_groups) == 0)
    n = max(num_valid, 1)
    adv_mean = float(advantage.sum()) / n
    adv_var = (float(advantage_sq.sum()) - num_valid * adv_mean**2) / max(num_valid - 1, 1)
    return {
        "num_responses": float(num_valid),
        "num_groups": float(num_groups),
        "reward_mean": float((batch.group_count * batch.group_mean).sum()) / n,
        "zero_variance_group_frac": float(zero_variance.sum()) / max(int(multi.sum()), 1),
        "zero_signal_group_frac": float((nonempty & ~group_signal).sum()) / max(num_groups, 1),
        "saturated_failure_group_frac": float(failed.sum()) / max(num_groups, 1),
        "saturated_failure_signal_frac": float((failed & group_signal).sum()) / max(int(failed.sum()), 1),
        "advantage_mean": adv_mean,
        "advantage_std": math.sqrt(max(adv_var, 0.0)) if num_valid > 1 else 0.0,
        "advantage_abs_max": float(advantage.abs().max()),
    }
