"""The estimator contract: :class:`AdvantageEstimator`. The :class:`~ebpo.estimators.batch.Batch`
it computes on and the :class:`~ebpo.estimators.batch.AdvantageResult` it returns live in
:mod:`ebpo.estimators.batch`.

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
the subclass's :meth:`AdvantageEstimator._compute`, then masks, checks and assembles the outputs
with the metrics every estimator reports (:mod:`ebpo.estimators.metrics`). Subclasses implement
``_compute`` and, if they keep state, ``state_dict`` / ``load_state_dict`` / ``reset``. A call
either completes or raises before any state changes.

**Threads.** A call is atomic with respect to the estimator's state: each estimator holds one
re-entrant lock (``self._state_lock``, a ``threading.RLock``) from the moment ``_compute`` reads
the state until it has committed the update. A subclass that keeps state takes the same lock in
its ``state_dict`` / ``load_state_dict`` / ``reset`` (``with self._state_lock:``), as EBPO and
JSPO++ do. Concurrent calls on one estimator are therefore serialised, not refused: the state
afterwards is the state of the same batches applied one at a time, in the order the calls took
the lock, and every call's result is the one that order gives. Input validation runs outside the
lock. Copies (``copy.deepcopy``, pickling) get a lock of their own.
"""

from __future__ import annotations

import inspect
import math
import threading
from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from ebpo.estimators.batch import AdvantageResult, Batch
from ebpo.estimators.functional import group_moments, masked
from ebpo.estimators.metrics import common_metrics
from ebpo.estimators.validation import (
    as_mask,
    as_reward_tensor,
    as_token_counts,
    check_finite_statistics,
    check_length,
    check_outputs,
    check_state_keys,
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
    #: :func:`~ebpo.estimators.validation.check_outputs` (a stateful estimator must, before it
    #: commits its state); ``_result`` then does not check them again
    checks_own_outputs: ClassVar[bool] = False
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
        calls left (what a resumed run loses without its checkpointed state). False here; EBPO:
        not with ``prior="batch"``; JSPO++: not with ``smooth_coef=0``."""
        return False

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

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state (plain Python numbers). Stateless estimators return their name."""
        return {"estimator": self.name}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state from :meth:`state_dict` (here: only the estimator's name, and nothing
        else). ValueError, state unchanged, for anything :meth:`state_dict` does not write."""
        self._check_state_owner(state)
        try:
            check_state_keys("", state, ("estimator",))
        except ValueError as error:
            raise ValueError(f"invalid {self.name} state: {error}") from error

    def reset(self) -> None:
        """Forget all running statistics."""

    def _check_state_owner(self, state: dict[str, Any]) -> None:
        if not isinstance(state, Mapping):
            raise ValueError(f"state must be a dict from state_dict(), got {type(state).__name__}")
        if state.get("estimator") != self.name:
            raise ValueError(
                f"state belongs to estimator {state.get('estimator')!r}, cannot load it into "
                f"{self.name!r}"
            )

    def _check_state_options(self, state: Mapping[str, Any], names: tuple[str, ...]) -> None:
        """Refuse a state saved under different values of the options ``names`` (those that define
        what the saved statistics mean), and one whose options hold a name or a value the
        constructor refuses (``eps: NaN``: no run saved it)."""
        saved = state.get("options")
        if not isinstance(saved, Mapping):
            raise ValueError(
                "state has no 'options' dict (expected the one state_dict() writes, with "
                f"{list(names)}); got {saved!r}"
            )
        try:  # the options our own state_dict() writes
            check_state_keys("options", saved, list(self.state_dict()["options"]))
        except ValueError as error:
            raise ValueError(f"invalid {self.name} state: {error}") from error
        constructor_options = type(self).option_defaults()
        for name, value in saved.items():
            if name not in constructor_options:  # recorded but fixed (ebpo_bb's prior_mean_from)
                continue
            try:  # the constructor's own check of the value (one option at a time: it names it)
                type(self)(**{name: value})
            except ValueError as error:
                raise ValueError(f"invalid {self.name} state: options.{name}: {error}") from error
        for name in names:
            ours = getattr(self, name)
            if name not in saved:
                raise ValueError(
                    f"state does not record option {name!r}; this estimator has {name}={ours!r}"
                )
            if saved[name] != ours:
                raise ValueError(
                    f"state was saved with {name}={saved[name]!r} but this estimator has "
                    f"{name}={ours!r}; build the estimator with {name}={saved[name]!r} to load it"
                )

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

        cluster_index = cluster_labels = None
        if clusters is not None:
            check_length("clusters", clusters, n)
            cluster_index, cluster_labels = group_clusters(clusters, group_index, valid, num_groups)
        elif self.uses_clusters:
            raise ValueError(
                "clusters is required when the estimator keeps per-cluster priors (per_cluster=True)"
            )
        counts = None
        if token_counts is not None:
            counts = as_token_counts(token_counts, n, valid)
        elif self.uses_token_counts:
            raise ValueError(
                f"token_counts is required by estimator {self.name!r} (it weighs responses by "
                "their tokens: REINFORCE++ with whiten='tokens', OPO): pass the number of tokens "
                "of each response"
            )
        keys = None
        if prompt_keys is not None:
            check_length("prompt_keys", prompt_keys, n)
            keys = group_prompt_keys(prompt_keys, group_index, valid, num_groups)
        elif self.uses_prompt_keys:
            raise ValueError(
                f"prompt_keys is required by estimator {self.name!r} (it tracks each prompt "
                "across steps): pass one stable key per response, e.g. its prompt text"
            )

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
