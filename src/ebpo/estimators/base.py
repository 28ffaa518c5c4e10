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

import inspect
import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch

from ebpo.functional import factorize, group_moments, masked, plain_labels, segment_sum

__all__ = [
    "AdvantageEstimator",
    "AdvantageResult",
    "Batch",
    "available_estimators",
    "make_estimator",
    "register_estimator",
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


_REGISTRY: dict[str, type[AdvantageEstimator]] = {}


def register_estimator(name: str) -> Callable[[type[AdvantageEstimator]], type[AdvantageEstimator]]:
    """Class decorator: make an estimator available to :func:`make_estimator` under ``name``."""

    def decorate(cls: type[AdvantageEstimator]) -> type[AdvantageEstimator]:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"an estimator named {name!r} is already registered ({_REGISTRY[name].__name__})")
        _REGISTRY[name] = cls
        cls.name = name
        return cls

    return decorate


def available_estimators() -> list[str]:
    """Names accepted by :func:`make_estimator`, sorted."""
    return sorted(_REGISTRY)


def estimator_options(name: str) -> dict[str, Any]:
    """The options of estimator ``name`` with their defaults."""
    cls = _lookup(name)
    return {
        p.name: p.default
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }


def make_estimator(name: str, **options: Any) -> AdvantageEstimator:
    """Build the estimator registered as ``name`` with the given options.

    Raises:
        ValueError: unknown name, unknown option, or an option with an invalid value.
    """
    cls = _lookup(name)
    allowed = estimator_options(name)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(
            f"unknown option(s) {unknown} for estimator {name!r}; expected some of {sorted(allowed)}"
        )
    return cls(**options)


def _lookup(name: str) -> type[AdvantageEstimator]:
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(f"unknown estimator {name!r}; expected one of {available_estimators()}")
    return _REGISTRY[name]


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
        if not isinstance(state, dict) or state.get("estimator") != self.name:
            owner = state.get("estimator") if isinstance(state, dict) else type(state).__name__
            raise ValueError(f"state belongs to estimator {owner!r}, cannot load it into {self.name!r}")

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
        metrics = common_metrics(batch, advantage)
        metrics.update(extra_metrics)

        def out(t: torch.Tensor) -> torch.Tensor:
            return t.to(dtype=batch.out_dtype, device=batch.out_device)

        return AdvantageResult(out(advantage), out(baseline), out(shrinkage), metrics)


# ---------------------------------------------------------------------- helpers
def _as_reward_tensor(rewards: Any) -> tuple[torch.Tensor, torch.dtype, torch.device]:
    if isinstance(rewards, torch.Tensor):
        out_dtype = rewards.dtype if rewards.dtype.is_floating_point else torch.float32
        out_device = rewards.device
        tensor = rewards.detach().to(device="cpu", dtype=torch.float64)
    else:
        try:
            array = np.asarray(rewards, dtype=np.float64)
        except (TypeError, ValueError) as error:
            raise ValueError(f"rewards must be numbers (a 1-D tensor, array or list); {error}") from error
        tensor = torch.from_numpy(array.copy())
        out_dtype, out_device = torch.float32, torch.device("cpu")
    if tensor.dim() != 1:
        raise ValueError(f"rewards must be 1-D (one reward per response), got shape {tuple(tensor.shape)}")
    return tensor, out_dtype, out_device


def _length(values: Any) -> int | None:
    shape = getattr(values, "shape", None)
    if shape is not None:
        return int(shape[0]) if len(shape) == 1 else None
    try:
        return len(values)
    except TypeError:
        return None


def _check_length(argument: str, values: Any, n: int) -> None:
    shape = getattr(values, "shape", None)
    if shape is not None and len(shape) != 1:
        raise ValueError(f"{argument} must be 1-D (one entry per response), got shape {tuple(shape)}")
    length = _length(values)
    if length is None:
        raise ValueError(f"{argument} must be a 1-D sequence with one entry per response, got {type(values).__name__}")
    if length != n:
        raise ValueError(f"{argument} has {length} entries but rewards has {n}: expected one per response")


def _as_mask(mask: Any, n: int) -> torch.Tensor:
    _check_length("mask", mask, n)
    tensor = mask.detach().cpu() if isinstance(mask, torch.Tensor) else torch.from_numpy(np.asarray(mask))
    if tensor.dtype != torch.bool:
        if tensor.dtype.is_floating_point or not torch.isin(tensor, torch.tensor([0, 1], dtype=tensor.dtype)).all():
            raise ValueError(f"mask must be boolean (True = use the response), got dtype {tensor.dtype}")
        tensor = tensor.to(torch.bool)
    return tensor


def _group_clusters(
    clusters: Any, group_index: torch.Tensor, valid: torch.Tensor, num_groups: int
) -> tuple[torch.Tensor, list[Hashable]]:
    """Cluster of each group; every valid row of a group must carry the same label."""
    row_cluster, uniques = factorize(clusters)
    labels = plain_labels(uniques)
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
