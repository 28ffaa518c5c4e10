"""`EBPOConfig`: TRL's `GRPOConfig` plus the options of EBPO and of the baselines TRL lacks.

Everything TRL already has (``num_generations``, ``loss_type``, ``epsilon`` / ``epsilon_high``,
``beta``, ``mask_truncated_completions``, ...) keeps its TRL name and meaning. The fields below add:

- the advantage estimator (any name of :func:`ebpo.available_estimators`) and its options;
- DAPO's zero-variance group filtering and soft overlong punishment;
- Clip-Cov (Cui et al., "The Entropy Mechanism of RL for Reasoning LMs"), mirroring verl's
  ``compute_policy_loss_clip_cov``;
- data ordering (curriculum) and the dataset column that names each prompt's cluster.

Every option is validated in ``__post_init__`` before TRL's own post-init runs, so a bad value raises
a ``ValueError`` naming the field before anything is built.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trl import GRPOConfig

import ebpo
from ebpo.curriculum import ORDERS
from ebpo.estimators import AdvantageEstimator, import_estimator_modules
from ebpo.integrations.trl.aggregation import AGGREGATIONS
from ebpo.integrations.trl.batch_advantages import FILTER_METRICS
from ebpo.integrations.trl.config_checks import check_trl_values
from ebpo.integrations.trl.estimator_settings import (
    resolve_estimator,
    scale_rewards_name,
    trl_estimator_kwargs,
)
from ebpo.integrations.trl.paper_methods import preset_fields
from ebpo.utils.structured_input import parse_json

__all__ = ["DATA_ORDERS", "FILTER_GROUPS_METRICS", "EBPOConfig", "EBPOConfigMixin", "make_config"]

if TYPE_CHECKING:
    from trl import GRPOConfig as _GRPOConfig  # what the mixin is mixed into, for the type checker
else:
    _GRPOConfig = object

#: accepted values of ``EBPOConfig.data_order``: those of ``ebpo.curriculum.order_indices``
DATA_ORDERS = ORDERS
#: accepted values of ``EBPOConfig.filter_groups_metric``
FILTER_GROUPS_METRICS = FILTER_METRICS


@dataclass(init=False, repr=False, eq=False)
class EBPOConfigMixin(_GRPOConfig):
    """The fields and checks EBPO adds to a ``GRPOConfig`` class: mixed in before TRL's own
    (:class:`EBPOConfig`) or before the one Unsloth puts in its place
    (:mod:`ebpo.integrations.unsloth`). Its ``__post_init__`` checks these fields, then runs the
    base class's."""

    # ------------------------------------------------------------------ advantage estimator
    advantage_estimator: str = field(
        default="ebpo",
        metadata={
            "help": "The advantage estimator applied to the rewards of the whole generation batch (gathered from "
            "all processes), in place of TRL's own advantages. Default 'ebpo': the paper's Algorithm 1 (running "
            "history prior, batch normalisation). 'grpo' is exactly TRL's GRPO (group mean, divided by std + 1e-4 "
            "as scale_rewards says; with dr_grpo settings, Dr. GRPO). One of the estimators "
            + ", ".join(map(repr, ebpo.available_estimators()))
            + " (a name such as 'ebpo_batch' fixes options; estimator_options given too win), or your own "
            "(import its module with estimator_module). The estimator's `state_dict()` (EBPO's running prior, "
            "JSPO++'s smoothing) is saved with every checkpoint and restored on resume."
        },
    )
    # Redeclared from GRPOConfig (default "group" there) so that an explicit setting can be told apart.
    scale_rewards: str | None = field(
        default=None,
        metadata={
            "help": "TRL's reward scaling ('group', 'batch', 'none'; true / false mean 'group' / 'none'). Default "
            "unset: the estimator decides ('grpo': group, as TRL; 'ebpo': batch normalisation). Set, it keeps "
            "TRL's meaning: 'grpo' / 'dr_grpo' take it as their scale; 'ebpo' / 'ebpo_bb' map 'batch' to their "
            "batch normalisation and 'none' (unscaled, e.g. Dr. GRPO recipes) to normalize='center' (centred, "
            "no std division); a value the estimator cannot honour ('group' with 'ebpo', any scaling with "
            "'rloo' / 'jspo') is an error naming both settings, never ignored."
        },
    )
    estimator_options: dict[str, Any] | str | None = field(
        default=None,
        metadata={
            "help": "Keyword arguments for `ebpo.make_estimator(advantage_estimator, ...)`, as a dict or a JSON "
            'string (e.g. \'{"prior": "ema", "half_life": 20}\'). `nan_policy` defaults to \'mask\' so that '
            "completions no reward function scored (TRL marks them NaN) are left out of the statistics."
        },
    )
    estimator_module: str | None = field(
        default=None,
        metadata={
            "help": "Your own estimator: a module (my_pkg.my_est) or .py file that registers it with "
            "`@ebpo.register_estimator(name)`, imported before advantage_estimator is read (several: "
            "comma-separated). Then --advantage_estimator name."
        },
    )

    # ------------------------------------------------------------------ DAPO
    filter_zero_variance_groups: bool = field(
        default=False,
        metadata={
            "help": "DAPO's group filtering: during training, drop from the loss (mask out) every group whose "
            "rewards all agree, and groups with no scored completion. DAPO's dynamic sampling would generate more "
            "prompts until the batch is full; this trainer filters WITHOUT resampling, so the effective batch "
            "shrinks. The estimator still sees these groups (they feed the running prior). Which reward decides is "
            "`filter_groups_metric`."
        },
    )
    filter_groups_metric: str = field(
        default="accuracy",
        metadata={
            "help": "What DAPO's group filtering compares within a group: 'accuracy' (default) is the weighted sum of "
            "the user's reward functions only, without the soft overlong punishment, as DAPO and verl filter on the "
            "verifier's accuracy (verl's `algorithm.filter_groups.metric=acc`); 'reward' is the full reward the "
            "estimator sees (overlong punishment included, after `multi_objective_aggregation`)."
        },
    )
    overlong_buffer_ratio: float = field(
        default=0.0,
        metadata={
            "help": "DAPO's soft overlong punishment: the last `overlong_buffer_ratio * max_completion_length` "
            "tokens form a buffer; a completion ending in it gets a penalty growing linearly from 0 to "
            "-`overlong_penalty_factor` (TRL's `get_soft_overlong_punishment`, added as an extra reward function). "
            "A completion that every one of the user's reward functions returned None for stays unscored (no "
            "penalty, no advantage, not in the statistics). 0 disables it. The paper's setup (buffer 4096 of 8192 "
            "tokens) is 0.5."
        },
    )
    overlong_penalty_factor: float = field(
        default=1.0,
        metadata={"help": "Weight of the soft overlong punishment (DAPO and the paper use 1.0)."},
    )

    # ------------------------------------------------------------------ Clip-Cov (EntropyMech)
    clip_cov_ratio: float = field(
        default=0.0,
        metadata={
            "help": "Clip-Cov (Cui et al., 2025): in each micro-batch, among the completion tokens that the PPO "
            "clip leaves alone and whose centred covariance (logp - mean logp) * (A - mean A) lies strictly "
            "between `clip_cov_lb` and `clip_cov_ub`, pick max(int(ratio * #tokens), 1) at random and detach their "
            "gradient (verl's `compute_policy_loss_clip_cov`). 0 disables it; Cui et al. use 2e-4."
        },
    )
    clip_cov_lb: float = field(
        default=1.0,
        metadata={
            "help": "Clip-Cov: lower bound of the covariance window (exclusive; Cui et al.: 1)."
        },
    )
    clip_cov_ub: float = field(
        default=5.0,
        metadata={
            "help": "Clip-Cov: upper bound of the covariance window (exclusive; Cui et al.: 5)."
        },
    )

    # ------------------------------------------------------------------ data order and clusters
    data_order: str = field(
        default="shuffle",
        metadata={
            "help": "Order of the training prompts: 'shuffle' (TRL's default sampler), 'topic', 'difficulty' "
            "(easy to hard) or 'topic_then_difficulty'. Any order but 'shuffle' reorders `train_dataset` with "
            "`ebpo.curriculum.order_indices` using its `topic` / `difficulty` columns and turns "
            "`shuffle_dataset` off, as in the paper's EBPO-topic and EBPO-diff."
        },
    )
    cluster_column: str | None = field(
        default=None,
        metadata={
            "help": "Dataset column whose value (e.g. a topic) is passed to the estimator as each completion's "
            "cluster, for per-cluster priors (`estimator_options={'per_cluster': True}` with 'ebpo'/'ebpo_bb', "
            "or the 'ebpo_cluster' preset): required when the estimator's `uses_clusters` is True."
        },
    )

    def __post_init__(self) -> None:
        # Our fields first, so that a bad value fails before TRL / transformers set anything up.
        import_estimator_modules(self.estimator_module)
        estimator = self._resolve_estimator()
        self._check_groups_and_dapo()
        self._check_clip_cov()
        self._check_data_and_clusters(estimator)
        self._check_reward_handling()
        if self.data_order != "shuffle":
            # A curriculum is an order; TRL's sampler would shuffle it away.
            self.shuffle_dataset = False
        check_trl_values(self)  # what TRL would refuse (or misuse) only once training runs
        super().__post_init__()
        # Handed to the trainer by build_estimator(): built once per trainer, not twice.
        self._ebpo_estimator = (self._estimator_recipe(), estimator)

    def _resolve_estimator(self) -> AdvantageEstimator:
        """An estimator name becomes its registered estimator and options; ``scale_rewards`` maps to the
        estimator's option that means the same, or is refused (see :mod:`.estimator_settings`).
        Returns the estimator these settings build (``make_estimator`` raises ValueError naming an
        unknown option or a bad value)."""
        name = self.advantage_estimator
        self.advantage_estimator, self.estimator_options = resolve_estimator(
            name, parse_estimator_options(self.estimator_options)
        )
        self.scale_rewards = scale_rewards_name(self.scale_rewards)
        try:
            kwargs = self.estimator_kwargs
        except ValueError as error:
            if name == self.advantage_estimator:
                raise
            raise ValueError(
                f"{error} (advantage_estimator {name!r} is {self.advantage_estimator!r} "
                f"with {self.estimator_options})"
            ) from None
        return ebpo.make_estimator(self.advantage_estimator, **kwargs)

    def _check_groups_and_dapo(self) -> None:
        """The group size, DAPO's group filter and its soft overlong punishment."""
        if self.num_generations is not None and self.num_generations < 2:
            raise ValueError(
                "num_generations must be at least 2 (a group needs two completions to compare), "
                f"got {self.num_generations}"
            )
        if not isinstance(self.filter_zero_variance_groups, bool):
            raise ValueError(
                f"filter_zero_variance_groups must be True or False, got {self.filter_zero_variance_groups!r}"
            )
        _check_number(
            "overlong_buffer_ratio", self.overlong_buffer_ratio, low=0.0, high=1.0, high_open=True
        )
        _check_number("overlong_penalty_factor", self.overlong_penalty_factor, low=0.0)
        if self.overlong_buffer_ratio > 0 and not self.max_completion_length:
            raise ValueError(
                "overlong_buffer_ratio > 0 needs max_completion_length (the buffer is a fraction of it)"
            )

    def _check_clip_cov(self) -> None:
        """Clip-Cov's ratio and window, and the TRL settings it cannot work with."""
        _check_number("clip_cov_ratio", self.clip_cov_ratio, low=0.0, high=1.0)
        _check_number("clip_cov_lb", self.clip_cov_lb)
        _check_number("clip_cov_ub", self.clip_cov_ub)
        if self.clip_cov_lb >= self.clip_cov_ub:
            raise ValueError(
                f"clip_cov_lb ({self.clip_cov_lb}) must be below clip_cov_ub ({self.clip_cov_ub})"
            )
        if self.clip_cov_ratio > 0 and self.importance_sampling_level != "token":
            raise ValueError(
                "clip_cov_ratio > 0 needs importance_sampling_level='token' (Clip-Cov acts on single tokens), "
                f"got {self.importance_sampling_level!r}"
            )
        if self.clip_cov_ratio > 0 and getattr(self, "use_liger_kernel", False):
            raise ValueError(
                "clip_cov_ratio > 0 is not supported with use_liger_kernel=True (Liger fuses the loss)"
            )

    def _check_data_and_clusters(self, estimator: AdvantageEstimator) -> None:
        """The data order, and a cluster column wherever the estimator reads clusters."""
        if self.data_order not in DATA_ORDERS:
            raise ValueError(
                f"data_order must be one of {list(DATA_ORDERS)}, got {self.data_order!r}"
            )
        if self.cluster_column is not None and (
            not isinstance(self.cluster_column, str) or not self.cluster_column
        ):
            raise ValueError(
                f"cluster_column must be a column name or None, got {self.cluster_column!r}"
            )
        if estimator.uses_clusters and self.cluster_column is None:
            raise ValueError(
                f"advantage_estimator={self.advantage_estimator!r} with estimator_options="
                f"{self.estimator_options} reads clusters (per-cluster priors) but cluster_column is "
                "None: name the dataset column holding each prompt's cluster (e.g. cluster_column='topic')"
            )

    def _check_reward_handling(self) -> None:
        """How the reward functions combine, and what DAPO's filter compares."""
        if self.multi_objective_aggregation not in AGGREGATIONS:
            raise ValueError(
                f"multi_objective_aggregation must be one of {list(AGGREGATIONS)}, "
                f"got {self.multi_objective_aggregation!r}"
            )
        if self.filter_groups_metric not in FILTER_GROUPS_METRICS:
            raise ValueError(
                f"filter_groups_metric must be one of {list(FILTER_GROUPS_METRICS)}, got {self.filter_groups_metric!r}"
            )

    def build_estimator(self) -> AdvantageEstimator:
        """The estimator of these settings, for one :class:`EBPOTrainer`: the one ``__post_init__``
        built to check them, the first time (unless a field it depends on changed since); a new
        one after that, so that two trainers of one configuration never share running statistics.
        Nothing of it stays on the configuration (``training_args.bin`` does not pickle it)."""
        built = self.__dict__.pop("_ebpo_estimator", None)
        if built is not None and built[0] == self._estimator_recipe():
            return built[1]
        return ebpo.make_estimator(self.advantage_estimator, **self.estimator_kwargs)

    def _estimator_recipe(self) -> str:
        """What the estimator is built from, as text (``1`` and ``1.0`` tell apart)."""
        return repr((self.advantage_estimator, self.estimator_kwargs))

    @property
    def estimator_kwargs(self) -> dict[str, Any]:
        """What :class:`EBPOTrainer` passes to ``ebpo.make_estimator``: ``estimator_options`` with
        TRL's conventions and ``scale_rewards`` mapped (:func:`.estimator_settings.trl_estimator_kwargs`:
        ``nan_policy='mask'``, TRL's eps 1e-4 for ``grpo`` / ``dr_grpo``, ``scale`` or ``normalize``)."""
        return trl_estimator_kwargs(
            self.advantage_estimator,
            parse_estimator_options(self.estimator_options),  # a dict once __post_init__ ran
            self.scale_rewards,
            self.multi_objective_aggregation,
        )


@dataclass
class EBPOConfig(EBPOConfigMixin, GRPOConfig):
    r"""Configuration of :class:`ebpo.integrations.trl.EBPOTrainer`: a ``trl.GRPOConfig`` with the
    fields of :class:`EBPOConfigMixin`.

    Use :func:`ebpo.integrations.trl.make_config` to start from a preset that reproduces one of the
    paper's methods (``grpo``, ``dr_grpo``, ``dapo``, ``entropy_mech``, ``rloo``, ``jspo``, ``ebpo``,
    ``ebpo_bb``, ``ebpo_batch``) or trains any estimator of ``ebpo.available_estimators()``.
    docs/trl.md describes how TRL's options carry over.
    """

    _VALID_DICT_FIELDS = GRPOConfig._VALID_DICT_FIELDS + ["estimator_options"]


def make_config(preset: str, **overrides: Any) -> EBPOConfig:
    """An :class:`EBPOConfig` for ``preset`` (a key of :data:`.paper_methods.PRESETS`, or any
    estimator name of :func:`ebpo.estimators.available_estimators`).

    ``overrides`` are EBPOConfig fields and win over the preset's values; ``estimator_options``
    (dict, JSON string or None) is merged into the preset's, key by key, so that
    ``make_config("ebpo_batch", estimator_options={"normalize": "center"})`` keeps the batch prior
    (and so does ``estimator_options=None``).

    Raises:
        ValueError: unknown preset (the message lists presets and estimators), or any
            invalid field.
    """
    base = preset_fields(preset)
    if "estimator_options" in overrides:
        # None adds nothing: it must not erase the preset's own options (ebpo_batch's prior)
        given = parse_estimator_options(overrides["estimator_options"])
        merged = {**base.get("estimator_options", {}), **given}
        overrides = {**overrides, "estimator_options": merged}
    return EBPOConfig(**{**base, **overrides})


def parse_estimator_options(value: Any) -> dict[str, Any]:
    """``estimator_options`` as a dict: None → ``{}``, a JSON object string parsed; else ValueError."""
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = parse_json(value)  # size, depth and repeated keys bounded
        except ValueError as error:
            raise ValueError(
                f"estimator_options must be a dict or a JSON object string; {error}"
            ) from error
    if not isinstance(value, dict):
        raise ValueError(f"estimator_options must be a dict, got {type(value).__name__}")
    return dict(value)


def _check_number(
    argument: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    high_open: bool = False,
) -> None:
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    ok = ok and (low is None or value >= low)
    ok = ok and (high is None or (value < high if high_open else value <= high))
    if not ok:
        bounds = (
            f" in [{low}, {high}{')' if high_open else ']'}"
            if high is not None
            else (f" >= {low}" if low is not None else "")
        )
        raise ValueError(f"{argument} must be a finite number{bounds}, got {value!r}")
