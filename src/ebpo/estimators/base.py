"""The estimator contract: :class:`AdvantageEstimator`, the :class:`Batch` it computes on and the
:class:`AdvantageResult` it returns.

Every estimator follows one contract (scikit-learn style: options in the constructor, state
explicit)::

    est = ebpo.make_estimator("ebpo", prior="history")
    res = est(rewards, group_ids, mask=None, clusters=None, token_counts=None, prompt_keys=None,
              update=True)
    res.advantages, res.baselines, res.shrinkage, res.metrics
    est.state_dict(); est.load_state_dict(state); est.reset()
    est.uses_prior, est.uses_clusters, est.uses_token_counts, est.uses_prompt_keys   # traits
    est.carries_state, est.decays_per_call, est.reward_range   # what a trainer integration needs

A call validates its input (:mod:`ebpo.estimators.validation`) into a :class:`Batch`, hands it to
the subclass's :meth:`AdvantageEstimator._compute`, then masks, checks and
assembles the outputs with the metrics every estimator reports
(:func:`~ebpo.estimators.functional.common_metrics`).
Subclasses implement ``_compute`` and, if they keep state, ``state_keys``, ``reset``,
``_saved_state`` and ``_restored_state``: the state's envelope (name, options, step count) and every check of a saved
state's form live here, once (:meth:`AdvantageEstimator.load_state_dict`). A call either completes
or raises before any state changes.

**Threads.** A call is atomic with respect to the estimator's state: each estimator holds one
re-entrant lock (``self._state_lock``, a ``threading.RLock``) from the moment ``_compute`` reads
the state until it has committed the update; ``state_dict`` and ``load_state_dict`` hold it too,
and a subclass's ``reset`` takes it (``with self._state_lock:``). Concurrent calls on one
estimator are therefore serialised, not refused: the state afterwards is the state of the same
batches applied one at a time, in the order the calls took the lock, and every call's result is
the one that order gives. Input validation runs outside the lock. Copies (``copy.deepcopy``,
pickling) get a lock of their own.
"""

from __future__ import annotations

import inspect
import math
import threading
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from ebpo.estimators.functional import common_metrics, group_moments, masked
from ebpo.estimators.state import (
    check_saved_options,
    check_state_keys,
    check_state_owner,
    check_step_count,
    current_option_names,
)
from ebpo.estimators.validation import (
    as_mask,
    as_reward_tensor,
    as_token_counts,
    check_finite_statistics,
    check_length,
    check_outputs,
    factorize,
    group_clusters,
    group_prompt_keys,
)
from ebpo.utils.checks import check_choice, check_positive

__all__ = [
    "NAN_POLICIES",
    "AdvantageEstimator",
    "AdvantageResult",
    "Batch",
]

NAN_POLICIES = ("raise", "mask")


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
    weight: torch.Tensor | None  # [N] float64 1.0 where valid else 0.0; None: all rows valid
    group_index: torch.Tensor  # [N] int64 in [0, num_groups)
    num_groups: int
    group_count: torch.Tensor  # [K] float64, valid rows per group
    group_mean: torch.Tensor  # [K] float64
    group_variance: torch.Tensor  # [K] float64, unbiased; 0 for fewer than 2 valid rows
    cluster_index: torch.Tensor | None  # [K] int64 cluster of each group, or None
    cluster_labels: list[Hashable] | None  # set exactly when cluster_index is
    out_dtype: torch.dtype
    out_device: torch.device
    token_counts: torch.Tensor | None = None  # [N] float64 tokens per response, 0 where not valid
    prompt_keys: torch.Tensor | None = None  # [K] int64 stable hash of each group's prompt key

    @property
    def nonempty(self) -> torch.Tensor:
        """``[K]`` groups with at least one valid row."""
        return self.group_count > 0

    @property
    def num_valid(self) -> int:
        return int(self.group_count.sum())

    def per_row(self, per_group: torch.Tensor) -> torch.Tensor:
        return per_group[self.group_index]


class AdvantageEstimator:
    """Base class: validates input, builds the :class:`Batch`, assembles the result.

    Args:
        eps: added to standard deviations before dividing (verl's default 1e-6).
        nan_policy: ``"raise"`` (default) rejects NaN rewards on unmasked rows; ``"mask"`` treats
            them as masked rows (TRL marks a response that no reward function scored with NaN).

    Traits — what a caller (a trainer integration, the simulation) may rely on without knowing
    the estimator; read them instead of guessing from an estimator's name or options:

    * :attr:`uses_prior` (class attribute);
    * :attr:`carries_state` (per instance: whether earlier calls change later advantages);
    * :attr:`uses_clusters` (per instance: EBPO reads clusters only with ``per_cluster=True``);
    * :attr:`uses_token_counts` (per instance: REINFORCE++ reads them only with
      ``whiten="tokens"``);
    * :attr:`uses_prompt_keys` (per instance: SPO's per-prompt tracker reads them).

    Thread-safe: a call holds the estimator's lock, and so do the state methods of the estimators
    that keep state (concurrent calls are serialised; see the module docstring).
    """

    name: ClassVar[str] = ""
    #: The baseline shrinks each group toward an empirical-Bayes prior over prompts (EBPO's μ, σ²,
    #: τ² fitted to the group means, over the run or the batch): even a group with a single
    #: response gets a baseline from it, and the metrics report the prior (``prior_mean``,
    #: ``shrinkage_mean``). False for baselines built from the group's other responses (GRPO,
    #: RLOO, REINFORCE++; JSPO and JSPO++ mix a leave-one-out mean, which a lone response lacks,
    #: with the other prompts' mean).
    uses_prior: ClassVar[bool] = False
    #: True when ``_compute`` itself validates its outputs with
    #: :func:`~ebpo.estimators.validation.check_outputs` (a stateful
    #: estimator must, before it commits its state); ``_result`` then does not check them again
    checks_own_outputs: ClassVar[bool] = False
    #: options renamed since a release, old name -> new name: an unknown option of an old name
    #: is refused with the new one (:func:`~ebpo.estimators.registry.make_estimator`)
    renamed_options: ClassVar[dict[str, str]] = {}
    #: the keys :meth:`_saved_state` writes, ``steps`` first; empty: the estimator keeps no state.
    #: Declared, so that a load checks a state's keys without serialising the current one
    state_keys: ClassVar[tuple[str, ...]] = ()
    _state_lock: threading.RLock

    def __getstate__(self) -> dict[str, Any]:
        # A lock cannot be copied or pickled: copies (deepcopy, pickle) get one of their own.
        with self._state_lock:
            state = dict(self.__dict__)
        del state["_state_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._state_lock = threading.RLock()

    def __init__(self, *, eps: float = 1e-6, nan_policy: str = "raise") -> None:
        self._state_lock = threading.RLock()  # first: a subclass's __init__ may call reset()
        self.eps = check_positive("eps", eps)
        self.nan_policy = check_choice("nan_policy", nan_policy, NAN_POLICIES)

    @property
    def uses_clusters(self) -> bool:
        """Whether this estimator reads ``clusters`` (it then requires them); the others accept
        and ignore them. False here; EBPO: its ``per_cluster`` option."""
        return False

    @property
    def uses_token_counts(self) -> bool:
        """Whether this estimator reads ``token_counts`` (it then requires them); the others
        accept and ignore them. False here; REINFORCE++: its ``whiten="tokens"`` option."""
        return False

    @property
    def uses_prompt_keys(self) -> bool:
        """Whether this estimator reads ``prompt_keys`` (it then requires them); the others accept
        and ignore them. False here; SPO: True."""
        return False

    @property
    def carries_state(self) -> bool:
        """Whether, with these options, a later call's advantages depend on the state earlier
        calls left (what a resumed run loses without its checkpointed state). Here: whether it
        keeps a state (:attr:`state_keys`); EBPO: not with ``prior="batch"``; JSPO++: not with
        ``smooth_coef=0``."""
        return bool(self.state_keys)

    @property
    def decays_per_call(self) -> bool:
        """Whether the state forgets at a rate counted in calls (EBPO's ``prior="ema"`` half-life,
        JSPO++'s smoothing): a trainer that calls the estimator several times a step changes what
        the option means. False here."""
        return False

    #: ``(low, high)`` when the rewards must lie in that range (EBPO-BB: a success rate in
    #: [0, 1]); None: any finite reward
    reward_range: ClassVar[tuple[float, float] | None] = None

    # ------------------------------------------------------------------ contract
    def __call__(
        self,
        rewards: Any,
        group_ids: Any,
        *,
        mask: Any = None,
        clusters: Any = None,
        token_counts: Any = None,
        prompt_keys: Any = None,
        update: bool = True,
    ) -> AdvantageResult:
        """Advantages for one batch. ``update=False`` leaves every running statistic untouched.

        ``token_counts``: the number of tokens of each response (verl: ``response_mask.sum(-1)``),
        read only by estimators whose :attr:`uses_token_counts` is True. ``prompt_keys``: one
        hashable key per row naming its prompt, the same on every step (rows of a group share it;
        str, bytes, int or tuples of them), read only by estimators whose
        :attr:`uses_prompt_keys` is True. Thread-safe: see the module docstring.
        """
        batch = self.prepare(
            rewards,
            group_ids,
            mask=mask,
            clusters=clusters,
            token_counts=token_counts,
            prompt_keys=prompt_keys,
        )
        with self._state_lock:  # read, compute and commit the state as one step
            baseline, advantage, shrinkage, metrics = self._compute(batch, update=update)
        return self._result(batch, baseline, advantage, shrinkage, metrics)

    def _compute(
        self, batch: Batch, *, update: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, float]]:
        """Return per-row ``(baseline, advantage, shrinkage, extra_metrics)`` in float64."""
        raise NotImplementedError

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state (plain Python numbers): ``{"estimator": name}`` for a stateless
        estimator; one that keeps state adds ``"options"`` (:meth:`options`) and what its
        :meth:`_saved_state` returns (the keys :attr:`state_keys`, ``"steps"`` first)."""
        if not self.state_keys:
            return {"estimator": self.name}
        with self._state_lock:
            return {"estimator": self.name, "options": self.options(), **self._saved_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state from :meth:`state_dict` (a JSON round trip allowed).

        Refuses (ValueError naming the key, state unchanged) a state of another estimator, a key
        :meth:`state_dict` does not write (at any level), options a constructor refuses or that
        differ from this estimator's in one of :meth:`_state_options` (those that define what the
        statistics mean), a step count that is not an integer in [0, 2**53], and whatever
        :meth:`_restored_state` finds that no run writes. Options saved under an old name
        (:attr:`renamed_options`) load under the new one.
        """
        check_state_owner(self.name, state)
        if not self.state_keys:  # stateless: the name and nothing else
            try:
                check_state_keys("", state, ("estimator",))
            except ValueError as error:
                raise ValueError(f"invalid {self.name} state: {error}") from error
            return
        if isinstance(state.get("options"), Mapping):
            state = {
                **state,
                "options": current_option_names(state["options"], self.renamed_options),
            }
        check_saved_options(self, state, self._state_options())
        try:
            check_state_keys("", state, ("estimator", "options", *self.state_keys))
            if "steps" not in state:
                raise ValueError("missing key 'steps' (the calls that updated the state)")
            restored = self._restored_state(state, check_step_count(state["steps"]))
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"invalid {self.name} state: {error}") from error
        with self._state_lock:
            for attribute, value in restored.items():
                setattr(self, attribute, value)

    def reset(self) -> None:
        """Forget all running statistics."""

    def _saved_state(self) -> dict[str, Any]:
        """What a stateful estimator saves beyond its name and options, under the keys
        :attr:`state_keys` (JSON-serialisable; the lock is held)."""
        return {}

    def _restored_state(self, state: Mapping[str, Any], steps: int) -> dict[str, Any]:
        """The attributes to set from a saved ``state`` (its keys and options already checked,
        ``steps`` its valid step count). Raise ValueError for any value no run writes: nothing is
        set unless every check passes."""
        return {}

    def _state_options(self) -> tuple[str, ...]:
        """The options whose values define what the saved statistics mean: a state saved under
        other values is refused. None here."""
        return ()

    def options(self) -> dict[str, Any]:
        """The options this estimator was built with, as a state records them (``"options"`` of
        :meth:`state_dict`): every keyword of the constructor but ``nan_policy`` (how bad input
        is handled, not what a statistic means)."""
        return {k: getattr(self, k) for k in type(self).option_defaults() if k != "nan_policy"}

    @classmethod
    def option_defaults(cls) -> dict[str, Any]:
        """The options of this estimator with their defaults: the keyword-only parameters of its
        constructor (the one place options are declared)."""
        return {
            p.name: p.default
            for p in inspect.signature(cls.__init__).parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY
        }

    def __repr__(self) -> str:
        options = ", ".join(
            f"{k}={getattr(self, k)!r}" for k in type(self).option_defaults() if hasattr(self, k)
        )
        return f"{type(self).__name__}({options})"

    # ------------------------------------------------------------------ input
    def prepare(
        self,
        rewards: Any,
        group_ids: Any,
        *,
        mask: Any = None,
        clusters: Any = None,
        token_counts: Any = None,
        prompt_keys: Any = None,
    ) -> Batch:
        """Validate the inputs and compute the group structure. Raises ValueError on bad input."""
        reward_tensor, out_dtype, out_device = as_reward_tensor(rewards)
        n = reward_tensor.numel()
        if n == 0:
            raise ValueError("rewards is empty: expected at least one response")
        check_length("group_ids", group_ids, n)
        valid = torch.ones(n, dtype=torch.bool) if mask is None else as_mask(mask, n)
        finite = torch.isfinite(reward_tensor)
        if not bool(finite.all()):
            valid = self._drop_nan_rows(reward_tensor, valid)
            inf_rows = torch.isinf(reward_tensor) & valid
            if inf_rows.any():
                rows = inf_rows.nonzero().flatten()[:5].tolist()
                raise ValueError(
                    f"rewards must be finite; got inf on unmasked rows (first: {rows})"
                )
        if mask is not None or not bool(finite.all()):
            # Padding rows may hold anything: zero them so that weighted sums stay finite.
            reward_tensor = torch.where(valid, reward_tensor, torch.zeros_like(reward_tensor))
        weight = None if mask is None and bool(finite.all()) else valid.to(torch.float64)
        self._check_rewards(reward_tensor, valid)

        group_index, uniques = factorize(group_ids)
        num_groups = len(uniques)
        count, mean, variance = group_moments(reward_tensor, group_index, weight, num_groups)
        check_finite_statistics(reward_tensor, uniques, mean, variance)

        self._check_required_inputs(clusters, token_counts, prompt_keys)
        cluster_index = cluster_labels = counts = keys = None
        if clusters is not None:
            cluster_index, cluster_labels = group_clusters(clusters, group_index, valid, num_groups)
        if token_counts is not None:
            counts = as_token_counts(token_counts, n, valid)
        if prompt_keys is not None:
            keys = group_prompt_keys(prompt_keys, group_index, valid, num_groups)
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
            token_counts=counts,
            prompt_keys=keys,
            out_dtype=out_dtype,
            out_device=out_device,
        )

    def _check_required_inputs(self, clusters: Any, token_counts: Any, prompt_keys: Any) -> None:
        """Every input this estimator reads (its traits say which) must be given; the message
        names the options that make it read one."""
        for argument, given, needed, why in (
            ("clusters", clusters, self.uses_clusters, "it keeps one prior per cluster"),
            ("token_counts", token_counts, self.uses_token_counts, "it weighs responses by "
             "their tokens: pass the number of tokens of each response"),
            ("prompt_keys", prompt_keys, self.uses_prompt_keys, "it tracks each prompt across "
             "steps: pass one stable key per response, e.g. its prompt text"),
        ):  # fmt: skip
            if given is None and needed:
                defaults = type(self).option_defaults()
                chosen = [
                    f"{k}={v!r}" for k, v in self.options().items() if defaults.get(k, v) != v
                ]
                named = f"{self.name!r}" + (f" with {', '.join(chosen)}" if chosen else "")
                raise ValueError(f"{argument} is required by estimator {named} ({why})")

    def _drop_nan_rows(self, rewards: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """``valid`` without the rows whose reward is NaN under ``nan_policy="mask"``; under
        ``"raise"``, a NaN on an unmasked row is an error."""
        nan_rows = torch.isnan(rewards) & valid
        if not nan_rows.any():
            return valid
        if self.nan_policy == "mask":
            return valid & ~nan_rows
        rows = nan_rows.nonzero().flatten()[:5].tolist()
        raise ValueError(
            f"rewards contains NaN on unmasked rows (first: {rows}); mask them, or build "
            "the estimator with nan_policy='mask' to ignore them"
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
        advantage, baseline, shrinkage = (
            masked(t, batch.weight) for t in (advantage, baseline, shrinkage)
        )
        if not self.checks_own_outputs:
            check_outputs(batch, advantages=advantage, baselines=baseline, shrinkage=shrinkage)
        metrics = common_metrics(batch, advantage)
        metrics.update(extra_metrics)
        overflowed = sorted(k for k, v in metrics.items() if not math.isfinite(v))
        if overflowed:
            raise ValueError(
                f"the statistics {overflowed} of this batch overflow float64; rescale the rewards"
            )

        def out(t: torch.Tensor) -> torch.Tensor:
            return t.to(dtype=batch.out_dtype, device=batch.out_device)

        return AdvantageResult(out(advantage), out(baseline), out(shrinkage), metrics)
