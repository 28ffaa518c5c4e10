"""SPO (Xu & Ding, "Single-stream Policy Optimization", arXiv 2509.13232): a persistent
per-prompt value tracker as the baseline, in the form the EBPO authors compare against
(``compute_spo_outcome_advantage`` of their verl fork), with GRPO-BN's batch normalisation.

Their tracker is keyed by verl's per-sample ``uid``, drawn afresh for every sample: it never sees
a prompt twice, so its baseline stays 0.5 and their SPO is batch-normalised ``r − 0.5``. Ours is
keyed by a stable prompt key (``prompt_keys``), so the tracker does what the paper describes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ebpo.estimators.base import AdvantageEstimator, Batch
from ebpo.estimators.ebpo import NORMALIZE_MODES
from ebpo.estimators.functional import masked, normalize_advantages
from ebpo.estimators.registry import register_estimator
from ebpo.estimators.state import check_state_keys
from ebpo.estimators.validation import check_outputs
from ebpo.utils.checks import check_choice, check_positive_int, is_integer, is_real

__all__ = ["SPO", "PromptTable"]

TABLE_KEYS = ("keys", "alpha", "beta", "last_seen")
_INT64 = torch.iinfo(torch.int64)


class PromptTable:
    """Per-prompt Beta parameters ``(α, β)`` in four aligned tensors sorted by key: the prompt
    key's 64-bit hash (int64), ``α``, ``β`` (float64) and the step that last saw the prompt
    (int64). 32 bytes a prompt; a lookup is a binary search (``torch.searchsorted``)."""

    def __init__(
        self,
        keys: torch.Tensor | None = None,
        alpha: torch.Tensor | None = None,
        beta: torch.Tensor | None = None,
        last_seen: torch.Tensor | None = None,
    ) -> None:
        self.keys = torch.zeros(0, dtype=torch.int64) if keys is None else keys
        self.alpha = torch.zeros(0, dtype=torch.float64) if alpha is None else alpha
        self.beta = torch.zeros(0, dtype=torch.float64) if beta is None else beta
        self.last_seen = torch.zeros(0, dtype=torch.int64) if last_seen is None else last_seen

    def __len__(self) -> int:
        return self.keys.numel()

    def lookup(
        self, keys: torch.Tensor, initial: float
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(α, β, found)`` of sorted unique ``keys``; ``initial`` for both where not tracked."""
        position = torch.searchsorted(self.keys, keys).clamp(max=max(len(self) - 1, 0))
        found = (
            (self.keys[position] == keys) if len(self) else torch.zeros_like(keys, dtype=torch.bool)
        )
        fill = torch.full(keys.shape, initial, dtype=torch.float64)
        if not len(self):
            return fill, fill.clone(), found
        return (
            torch.where(found, self.alpha[position], fill),
            torch.where(found, self.beta[position], fill),
            found,
        )

    def merged(
        self, keys: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor, step: int, capacity: int
    ) -> PromptTable:
        """A new table with sorted unique ``keys`` set to ``(alpha, beta)`` and seen at ``step``;
        above ``capacity`` prompts, the least recently seen go (ties: the larger keys)."""
        old = ~torch.isin(self.keys, keys)
        all_keys = torch.cat([self.keys[old], keys])
        seen = torch.cat([self.last_seen[old], torch.full_like(keys, step)])
        order = torch.argsort(all_keys)
        table = PromptTable(
            all_keys[order],
            torch.cat([self.alpha[old], alpha])[order],
            torch.cat([self.beta[old], beta])[order],
            seen[order],
        )
        if len(table) <= capacity:
            return table
        # stable sort: among prompts last seen at the same step, the smaller keys stay
        keep = torch.sort(
            torch.argsort(table.last_seen, descending=True, stable=True)[:capacity]
        ).values
        return PromptTable(
            table.keys[keep], table.alpha[keep], table.beta[keep], table.last_seen[keep]
        )

    def state_dict(self) -> dict[str, list[Any]]:
        return {
            "keys": self.keys.tolist(),
            "alpha": self.alpha.tolist(),
            "beta": self.beta.tolist(),
            "last_seen": self.last_seen.tolist(),
        }

    @classmethod
    def from_state_dict(cls, state: Any, steps: int) -> PromptTable:
        """The table of :meth:`state_dict`; ValueError for one no run writes (keys not strictly
        increasing int64, ``α``/``β`` not finite and > 0, a step outside ``[0, steps)``)."""
        check_state_keys("prompts", state, TABLE_KEYS)
        columns = {name: state.get(name) for name in TABLE_KEYS}
        for name, values in columns.items():
            if not isinstance(values, Sequence) or isinstance(values, (str, bytes)):
                raise ValueError(f"prompts.{name} must be a list, got {type(values).__name__}")
        if len({len(values) for values in columns.values()}) != 1:
            raise ValueError(
                "prompts.keys, alpha, beta and last_seen must have the same length, got "
                f"{[len(v) for v in columns.values()]}"
            )
        keys = _integers("prompts.keys", columns["keys"], _INT64.min, _INT64.max)
        last_seen = _integers("prompts.last_seen", columns["last_seen"], 0, steps - 1)
        if len(keys) > 1 and not bool((keys[1:] > keys[:-1]).all()):
            raise ValueError("prompts.keys must be strictly increasing (sorted, no duplicates)")
        alpha, beta = (_positive_reals(f"prompts.{n}", columns[n]) for n in ("alpha", "beta"))
        return cls(keys, alpha, beta, last_seen)


@register_estimator("spo")
class SPO(AdvantageEstimator):
    """SPO: a per-prompt Beta tracker as the baseline, then batch normalisation.

    For prompt ``p`` the tracker holds ``(α_p, β_p)``, both ``n0 / 2`` for an unseen prompt with
    ``n0 = 1 / (1 − rho_min)``. A call:

    1. baseline ``V_p = α_p / (α_p + β_p)`` (0.5 unseen), read BEFORE this batch's update;
       ``a = r − V_p``;
    2. ``A = (a − mean(a)) / (std(a) + eps)`` over the batch (``normalize``, as GRPO-BN);
    3. with ``update=True``, each prompt of the batch: ``α_p ← ρ α_p + r̄_p``,
       ``β_p ← ρ β_p + (1 − r̄_p)``, ``r̄_p`` the mean valid reward of its rows clamped to [0, 1]
       (rows of several groups sharing a key count as one observation).

    ``prompt_keys`` are required (one stable key per row, e.g. the prompt text); the tracker
    stores each key as a 64-bit hash (:func:`~ebpo.estimators.validation.stable_key_hash`; two of a
    million prompts collide with probability about 3e-8) with ``α``, ``β`` and the step it was
    last seen: 32 bytes a prompt. Beyond ``max_prompts`` prompts the least recently seen are
    forgotten (they restart at 0.5), so memory stays bounded however many prompts a run has.
    ``ρ`` is fixed: the paper's KL-adaptive ``ρ`` needs the KL between the current policy and the
    one that last saw each prompt, which no trainer gives an advantage estimator.

    Args:
        rho: the tracker's discount ``ρ`` per observation of a prompt (0.9, the authors').
        rho_min: sets the initial pseudo-count ``n0 = 1 / (1 − rho_min)`` (0.875: ``n0 = 8``).
        max_prompts: the most prompts tracked (1e6: 32 MB).
        normalize: ``"batch"``, ``"center"`` or ``"none"``, as GRPO-BN's and EBPO's.

    Metrics: ``spo_tracked_prompts`` (after the call), ``spo_known_fraction`` (of the batch's
    prompts, those the tracker had seen).
    """

    checks_own_outputs = True
    state_keys = ("steps", "prompts")

    def __init__(
        self,
        *,
        rho: float = 0.9,
        rho_min: float = 0.875,
        max_prompts: int = 1_000_000,
        normalize: str = "batch",
        eps: float = 1e-6,
        nan_policy: str = "raise",
    ) -> None:
        super().__init__(eps=eps, nan_policy=nan_policy)
        self.rho = _unit_interval("rho", rho, low_open=True)
        self.rho_min = _unit_interval("rho_min", rho_min, low_open=False)
        self.max_prompts = check_positive_int("max_prompts", max_prompts)
        self.normalize = check_choice("normalize", normalize, NORMALIZE_MODES)
        self.reset()

    @property
    def uses_prompt_keys(self) -> bool:
        return True

    @property
    def initial_count(self) -> float:
        """``n0 = 1 / (1 − rho_min)``: the tracker's pseudo-count for an unseen prompt."""
        return 1.0 / (1.0 - self.rho_min)

    def reset(self) -> None:
        with self._state_lock:
            self.table = PromptTable()
            self.steps = 0

    def _compute(self, batch: Batch, *, update: bool):
        assert batch.prompt_keys is not None  # prepare() requires them (uses_prompt_keys)
        nonempty = batch.nonempty
        keys, key_of_group = torch.unique(batch.prompt_keys[nonempty], return_inverse=True)
        count = torch.zeros(keys.numel(), dtype=torch.float64)
        count.index_add_(0, key_of_group, batch.group_count[nonempty])
        total = torch.zeros_like(count).index_add_(
            0, key_of_group, batch.group_mean[nonempty] * batch.group_count[nonempty]
        )
        alpha, beta, found = self.table.lookup(keys, self.initial_count / 2.0)
        group_baseline = torch.full((batch.num_groups,), 0.5, dtype=torch.float64)
        group_baseline[nonempty] = (alpha / (alpha + beta))[key_of_group]
        baseline = batch.per_row(group_baseline)
        advantage = normalize_advantages(
            batch.rewards - baseline, batch.weight, self.normalize, self.eps
        )
        shrinkage = torch.zeros_like(advantage)
        check_outputs(
            batch,
            advantages=advantage,
            baselines=masked(baseline, batch.weight),
            shrinkage=shrinkage,
        )
        table = self.table
        if update and keys.numel():
            observed = (total / count).clamp(0.0, 1.0)
            table = table.merged(
                keys,
                self.rho * alpha + observed,
                self.rho * beta + (1.0 - observed),
                self.steps,
                self.max_prompts,
            )
            self.table, self.steps = table, self.steps + 1
        metrics = {
            "spo_tracked_prompts": float(len(table)),
            "spo_known_fraction": float(found.double().mean()) if keys.numel() else 0.0,
        }
        return baseline, advantage, shrinkage, metrics

    # ------------------------------------------------------------------ state
    def _saved_state(self) -> dict[str, Any]:
        """``prompts``: ``{"keys", "alpha", "beta", "last_seen"}``, plain Python numbers (a JSON
        round trip is exact)."""
        return {"steps": self.steps, "prompts": self.table.state_dict()}

    def _restored_state(self, state: Mapping[str, Any], steps: int) -> dict[str, Any]:
        table = PromptTable.from_state_dict(state.get("prompts"), steps)
        if len(table) > self.max_prompts:
            raise ValueError(
                f"it tracks {len(table)} prompts, more than this estimator's "
                f"max_prompts={self.max_prompts}; build it with a larger max_prompts"
            )
        return {"table": table, "steps": steps}

    def _state_options(self) -> tuple[str, ...]:
        return ("rho", "rho_min")


def _unit_interval(argument: str, value: Any, *, low_open: bool) -> float:
    low_ok = is_real(value) and (value > 0 if low_open else value >= 0)
    if not (low_ok and value < 1):
        interval = "(0, 1)" if low_open else "[0, 1)"
        raise ValueError(f"{argument} must be a number in {interval}, got {value!r}")
    return float(value)


def _integers(name: str, values: Sequence[Any], low: int, high: int) -> torch.Tensor:
    for value in values:
        if not is_integer(value) or not low <= value <= high:
            raise ValueError(f"{name} must hold integers in [{low}, {high}], got {value!r}")
    return torch.tensor([int(v) for v in values], dtype=torch.int64)


def _positive_reals(name: str, values: Sequence[Any]) -> torch.Tensor:
    for value in values:
        if not is_real(value) or not 0 < value < float("inf"):
            raise ValueError(f"{name} must hold finite numbers > 0, got {value!r}")
    return torch.tensor([float(v) for v in values], dtype=torch.float64)
