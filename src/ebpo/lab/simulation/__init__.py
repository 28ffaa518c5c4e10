"""Simulation lab for ``ebpo simulate``: see, rather than take on faith, when EBPO helps.

No language model is involved; every experiment is a function returning plain Python data (lists
of row dictionaries, NumPy arrays) so that ``ebpo bench``, the docs and the tests can reuse them.

Experiments
-----------
* :func:`baseline_quality` — prompt success rates ``θ ~`` a Beta mixture, Bernoulli rewards, groups
  of ``G``. For every estimator: MSE of its baseline against ``θ``, the fraction of groups with no
  signal and the variance of the advantages, next to Theorem 3.3's Bayes risk
  ``R(w) = (1 − w)²σ²/G + w²τ²``, minimised at ``w = S`` with ``R(S) = (1 − S)σ²/G``.
* :func:`saturation` — all-zero ("saturated failure") groups: which estimators still give them a
  signal (Theorem 3.2: EBPO's raw advantage is ``−S·μ``), and what batch normalisation does to it
  (centring turns the penalty into ``−S·r̄_batch``: it only exists relative to the rest of the batch).
* :func:`run_bandit` and the studies built on it (:func:`learning_rate_study`,
  :func:`prior_study`) — a many-armed contextual bandit trained by REINFORCE with each estimator's
  advantages: learning curves per estimator and ``G`` at each estimator's own best learning rate
  (chosen on validation seeds) and at an equal one; history / batch / EMA priors on a policy that
  improves; topic-ordered vs shuffled data vs per-cluster priors (Proposition 3.8).

Estimators are named by *specs*: a key of :data:`ESTIMATOR_SPECS` (e.g. ``"ebpo_ema"``) or
``"<registered name>[:option=value,...]"`` (e.g. ``"ebpo:prior=ema,half_life=5"``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ebpo.estimators import AdvantageEstimator, make_estimator
from ebpo.estimators.functional import empirical_bayes_baseline, shrinkage_factor

__all__ = [
    "BetaMixture",
    "SCENARIOS",
    "ESTIMATOR_SPECS",
    "BanditConfig",
    "Bandit",
    "parse_estimator_spec",
    "build_estimator",
    "mixture_moments",
    "theorem_3_3",
    "sample_success_rates",
    "baseline_quality",
    "saturation",
    "penalty_curve",
    "make_bandit",
    "data_stream",
    "run_bandit",
    "learning_rate_study",
    "prior_study",
    "markdown_table",
]


# ----------------------------------------------------------------------------- scenarios
@dataclass(frozen=True)
class BetaMixture:
    """A mixture of Beta distributions for prompt success rates: ``Σ_j w_j · Beta(a_j, b_j)``."""

    weights: tuple[float, ...]
    alphas: tuple[float, ...]
    betas: tuple[float, ...]

    def __post_init__(self) -> None:
        if not (len(self.weights) == len(self.alphas) == len(self.betas)) or not self.weights:
            raise ValueError("weights, alphas and betas must be non-empty and of equal length")
        if any(w < 0 for w in self.weights) or not math.isclose(sum(self.weights), 1.0, rel_tol=1e-9):
            raise ValueError(f"weights must be non-negative and sum to 1, got {self.weights}")
        if any(a <= 0 for a in self.alphas) or any(b <= 0 for b in self.betas):
            raise ValueError("alphas and betas must be positive")


#: The four prompt-difficulty distributions of issue #7.
SCENARIOS: dict[str, BetaMixture] = {
    "easy": BetaMixture((1.0,), (6.0,), (2.0,)),  # mean 0.75
    "hard": BetaMixture((1.0,), (1.0,), (7.0,)),  # mean 0.125, many all-zero groups
    "mixed": BetaMixture((1.0,), (2.0,), (2.0,)),  # mean 0.5, broad
    "bimodal": BetaMixture((0.5, 0.5), (0.5, 6.0), (6.0, 0.5)),  # mostly solved or mostly failed
}

#: Named estimator configurations used by the experiments (name -> (registry name, options)).
ESTIMATOR_SPECS: dict[str, tuple[str, dict[str, Any]]] = {
    "grpo": ("grpo", {}),
    "dr_grpo": ("dr_grpo", {}),
    "rloo": ("rloo", {}),
    "reinforce_pp": ("reinforce_pp_baseline", {}),
    "jspo": ("jspo", {}),
    "ebpo": ("ebpo", {}),  # paper Algorithm 1: history prior, pooled σ², raw τ², batch normalisation
    # authors' released code (μ = mean of the group means; equal to the mean reward here, where
    # every group has G responses)
    "ebpo_batch": ("ebpo", {"prior": "batch", "prior_mean": "group_means"}),
    "ebpo_ema": ("ebpo", {"prior": "ema", "half_life": 10.0}),
    "ebpo_within": ("ebpo", {"within_variance": "within", "tau2": "corrected"}),
    "ebpo_center": ("ebpo", {"normalize": "center"}),
    "ebpo_none": ("ebpo", {"normalize": "none"}),
    "ebpo_bb": ("ebpo_bb", {}),
}


def parse_estimator_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``"ebpo_ema"`` or ``"ebpo:prior=ema,half_life=5"`` -> ``(registry name, options)``.

    Option values are parsed as int, float, ``true``/``false`` or left as strings.
    """
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"estimator spec must be a non-empty string, got {spec!r}")
    if spec in ESTIMATOR_SPECS:
        name, options = ESTIMATOR_SPECS[spec]
        return name, dict(options)
    name, _, rest = spec.partition(":")
    options: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"estimator spec {spec!r}: expected option=value, got {item!r}")
        options[key.strip()] = _parse_value(value.strip())
    return name, options


def _parse_value(text: str) -> Any:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def build_estimator(spec: str) -> AdvantageEstimator:
    """A fresh estimator for ``spec`` (see :func:`parse_estimator_spec`); ValueError if unknown."""
    name, options = parse_estimator_spec(spec)
    return make_estimator(name, **options)


# ----------------------------------------------------------------------------- theory
def mixture_moments(mixture: BetaMixture) -> dict[str, float]:
    """Exact moments of ``θ`` under a Beta mixture.

    ``μ = E[θ]``, ``τ² = Var(θ)`` (between-prompt variance) and ``σ² = E[θ(1 − θ)]`` (the expected
    within-prompt Bernoulli variance), using ``E[θ] = a/(a+b)`` and ``E[θ²] = a(a+1)/((a+b)(a+b+1))``
    per component.
    """
    w = np.asarray(mixture.weights)
    a = np.asarray(mixture.alphas)
    b = np.asarray(mixture.betas)
    m1 = float((w * a / (a + b)).sum())
    m2 = float((w * a * (a + 1) / ((a + b) * (a + b + 1))).sum())
    return {"mu": m1, "tau2": m2 - m1 * m1, "sigma2": m1 - m2}


def theorem_3_3(mixture: BetaMixture, group_size: int) -> dict[str, float]:
    """Theorem 3.3's predictions for groups of ``G`` Bernoulli rewards.

    ``S = (σ²/G)/(σ²/G + τ²)``; ``MSE(r̄) = σ²/G`` (GRPO's baseline); ``MSE(V_S) = (1 − S)σ²/G``
    (the Bayes risk of the shrinkage baseline with the TRUE prior parameters); the leave-one-out
    mean (RLOO) has ``σ²/(G − 1)``. Exact here because ``E[r̄ − θ | θ] = 0`` kills the cross term.
    """
    _check_group_size(group_size)
    moments = mixture_moments(mixture)
    noise = moments["sigma2"] / group_size
    s = noise / (noise + moments["tau2"])
    return {
        **moments,
        "shrinkage": s,
        "mse_group_mean": noise,
        "mse_shrinkage": (1 - s) * noise,
        "mse_leave_one_out": moments["sigma2"] / (group_size - 1) if group_size > 1 else math.inf,
    }


def sample_success_rates(mixture: BetaMixture, shape: Sequence[int], generator: torch.Generator) -> torch.Tensor:
    """``θ`` of the given shape drawn from the mixture (float64)."""
    weights = torch.tensor(mixture.weights, dtype=torch.float64)
    n = int(np.prod(shape))
    component = torch.multinomial(weights, n, replacement=True, generator=generator)
    alpha = torch.tensor(mixture.alphas, dtype=torch.float64)[component]
    beta = torch.tensor(mixture.betas, dtype=torch.float64)[component]
    # Beta via two Gammas; torch's Gamma sampler has no generator argument, so draw from a seeded
    # NumPy generator derived from ours to stay reproducible.
    rng = np.random.default_rng(int(torch.randint(0, 2**62, (1,), generator=generator)))
    x = rng.gamma(alpha.numpy())
    y = rng.gamma(beta.numpy())
    theta = torch.from_numpy(x / (x + y))
    return theta.reshape(tuple(shape))


# ----------------------------------------------------------------------------- experiment 1
BASELINE_ESTIMATORS = ("grpo", "rloo", "jspo", "ebpo", "ebpo_batch", "ebpo_within", "ebpo_bb")


def baseline_quality(
    *,
    scenarios: Mapping[str, BetaMixture] | None = None,
    group_sizes: Sequence[int] = (2, 4, 8, 16, 32),
    estimators: Sequence[str] = BASELINE_ESTIMATORS,
    steps: int = 20,
    prompts_per_step: int = 256,
    seed: int = 0,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Baseline MSE against the true success rate, zero-signal groups and advantage variance.

    For each scenario and ``G``, ``steps`` batches of ``prompts_per_step`` prompts are drawn once and
    fed to every estimator in order (common random numbers, so differences between rows are not
    sampling noise; running priors accumulate as in training). Rows also hold an ``oracle_eb`` entry:
    ``V = (1 − S)r̄ + S·μ`` with the TRUE ``μ, σ², τ²`` — Theorem 3.3 says its MSE is
    ``(1 − S)σ²/G`` exactly, whereas the estimators must estimate the prior (the paper's pooled σ²
    is ``μ(1 − μ) = σ² + τ²`` and raw τ² is ``τ² + σ²/G``, so their S differs from the optimum).

    Returns one row per (scenario, G, estimator) with keys ``scenario, G, estimator, mse, mse_se``
    (Monte-Carlo standard error over groups), ``predicted_mse`` (closed form where one exists: oracle,
    group mean, leave-one-out; NaN otherwise), ``thm33_mse, group_mean_mse, shrinkage`` (mean S, or
    JSPO's λ), ``optimal_shrinkage, zero_signal_frac, adv_var``.
    """
    scenarios = dict(SCENARIOS if scenarios is None else scenarios)
    _check_positive_int("steps", steps)
    _check_positive_int("prompts_per_step", prompts_per_step)
    for g in group_sizes:
        _check_group_size(g)
    for spec in estimators:
        build_estimator(spec)  # fail early on a bad spec
    rows: list[dict[str, Any]] = []
    configs = [(s, g) for s in scenarios for g in group_sizes]
    for index, (scenario, g) in enumerate(_progress(configs, progress, "baseline quality")):
        mixture = scenarios[scenario]
        theory = theorem_3_3(mixture, g)
        gen = _generator(seed, 1, index)
        theta = sample_success_rates(mixture, (steps, prompts_per_step), gen)
        rewards = (torch.rand((steps, prompts_per_step, g), generator=gen, dtype=torch.float64) < theta[..., None]).double()
        group_ids = torch.arange(prompts_per_step).repeat_interleave(g)
        theta_rows = theta.repeat_interleave(g, dim=1)  # [steps, M*G]

        oracle = empirical_bayes_baseline(
            rewards.mean(-1), theory["mu"], shrinkage_factor(theory["sigma2"], theory["tau2"], torch.tensor([float(g)], dtype=torch.float64), 1e-12)
        )
        oracle_err = ((oracle - theta) ** 2).flatten()
        rows.append(_baseline_row(scenario, g, "oracle_eb", oracle_err, theory["mse_shrinkage"], theory["shrinkage"], theory, float("nan"), float("nan")))

        for spec in estimators:
            est = build_estimator(spec)
            err, shrink, zero_signal, adv_var = [], [], [], []
            for t in range(steps):
                res = est(rewards[t].flatten(), group_ids)
                err.append((res.baselines.double() - theta_rows[t]) ** 2)
                shrink.append(float(res.shrinkage.double().mean()))
                zero_signal.append(_zero_signal_frac(res.advantages.double().view(prompts_per_step, g)))
                adv_var.append(float(res.advantages.double().var()))
            # Per-group errors (rows of a group share one baseline except for leave-one-out ones).
            per_group = torch.stack(err).view(steps, prompts_per_step, g).mean(-1).flatten()
            predicted = _predicted_mse(spec, theory)
            rows.append(
                _baseline_row(scenario, g, spec, per_group, predicted, float(np.mean(shrink)), theory, float(np.mean(zero_signal)), float(np.mean(adv_var)))
            )
    return rows


def _predicted_mse(spec: str, theory: Mapping[str, float]) -> float:
    name, _ = parse_estimator_spec(spec)
    if name in ("grpo", "dr_grpo", "reinforce_pp_baseline"):
        return theory["mse_group_mean"]
    if name == "rloo":
        return theory["mse_leave_one_out"]
    return float("nan")  # estimated priors: no closed form; compare with oracle_eb


def _baseline_row(scenario, g, estimator, errors, predicted, shrink, theory, zero_signal, adv_var) -> dict[str, Any]:
    errors = errors.double()
    return {
        "scenario": scenario,
        "G": g,
        "estimator": estimator,
        "mse": float(errors.mean()),
        "mse_se": float(errors.std() / math.sqrt(errors.numel())),
        "predicted_mse": predicted,
        "thm33_mse": theory["mse_shrinkage"],
        "group_mean_mse": theory["mse_group_mean"],
        "shrinkage": shrink,
        "optimal_shrinkage": theory["shrinkage"],
        "zero_signal_frac": zero_signal,
        "adv_var": adv_var,
    }


# ----------------------------------------------------------------------------- experiment 2
#: |advantage| below this counts as no signal. Centring a constant vector leaves rounding residue
#: of ~1e-17, which dividing by (std + eps) inflates to ~1e-11: that is not a signal.
SIGNAL_TOL = 1e-9

SATURATION_ESTIMATORS = ("grpo", "dr_grpo", "rloo", "jspo", "reinforce_pp", "ebpo", "ebpo_center", "ebpo_none", "ebpo_bb")


def saturation(
    *,
    scenarios: Mapping[str, BetaMixture] | None = None,
    group_size: int = 4,
    estimators: Sequence[str] = SATURATION_ESTIMATORS,
    steps: int = 20,
    prompts_per_step: int = 256,
    seed: int = 0,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Signal given to all-zero groups, with and without batch normalisation.

    Each scenario is run for ``steps`` batches; then one extra "all-fail" batch (every prompt has
    ``θ = 0``, e.g. a batch of impossible prompts) is fed with the prior built on that history.

    Row keys: ``scenario, estimator, failed_frac`` (all-zero groups / groups),
    ``failed_signal_frac`` (of those, fraction with a non-zero advantage), ``failed_adv`` (mean
    advantage of their responses, after normalisation), ``failed_raw`` (mean raw advantage
    ``r − V = −V``), ``predicted_raw`` (Theorem 3.2: ``−S·μ_glob``; only for EBPO),
    ``predicted_centred`` (after centring, ``−S·r̄_batch``), and the same signal fraction on the
    all-fail batch (``allfail_signal_frac``, ``allfail_adv``).

    Why centring changes the penalty: with equal group sizes S is the same for every group, so the
    batch mean of the raw advantages ``a = r − (1 − S)r̄_m − Sμ`` is ``S(r̄_batch − μ)``; an all-zero
    group's ``−Sμ`` becomes ``−Sμ − S(r̄_batch − μ) = −S·r̄_batch``. The prior mean μ cancels: the
    penalty is set by how well the REST of the batch did, and vanishes when the whole batch fails.
    """
    scenarios = dict(SCENARIOS if scenarios is None else scenarios)
    _check_group_size(group_size)
    _check_positive_int("steps", steps)
    _check_positive_int("prompts_per_step", prompts_per_step)
    g = group_size
    group_ids = torch.arange(prompts_per_step).repeat_interleave(g)
    rows: list[dict[str, Any]] = []
    configs = list(scenarios)
    for index, scenario in enumerate(_progress(configs, progress, "saturation")):
        gen = _generator(seed, 2, index)
        theta = sample_success_rates(scenarios[scenario], (steps, prompts_per_step), gen)
        rewards = (torch.rand((steps, prompts_per_step, g), generator=gen, dtype=torch.float64) < theta[..., None]).double()
        failed = rewards.sum(-1) == 0  # [steps, M]
        batch_mean = rewards.mean(dim=(1, 2))  # [steps]
        for spec in estimators:
            est = build_estimator(spec)
            adv_sum = raw_sum = pred_raw = pred_centred = 0.0
            n_failed = n_signal = 0
            for t in range(steps):
                res = est(rewards[t].flatten(), group_ids)
                rows_failed = failed[t].repeat_interleave(g)
                adv = res.advantages.double()
                n_failed += int(failed[t].sum())
                n_signal += int((adv.view(prompts_per_step, g).abs() > SIGNAL_TOL).any(-1)[failed[t]].sum())
                adv_sum += float(adv[rows_failed].sum())
                raw_sum += float((-res.baselines.double())[rows_failed].sum())
                s = res.shrinkage.double()[rows_failed]
                pred_raw += float((-s * res.metrics.get("prior_mean", float("nan"))).sum())
                pred_centred += float((-s * batch_mean[t]).sum())
            n_rows = max(n_failed * g, 1)
            allfail = est(torch.zeros(prompts_per_step * g, dtype=torch.float64), group_ids).advantages.double()
            is_ebpo = parse_estimator_spec(spec)[0] == "ebpo"
            rows.append(
                {
                    "scenario": scenario,
                    "G": g,
                    "estimator": spec,
                    "failed_frac": n_failed / (steps * prompts_per_step),
                    "failed_signal_frac": n_signal / max(n_failed, 1),
                    "failed_adv": adv_sum / n_rows,
                    "failed_raw": raw_sum / n_rows,
                    "predicted_raw": pred_raw / n_rows if is_ebpo else float("nan"),
                    "predicted_centred": pred_centred / n_rows if is_ebpo else float("nan"),
                    "allfail_signal_frac": float((allfail.view(prompts_per_step, g).abs() > SIGNAL_TOL).any(-1).double().mean()),
                    "allfail_adv": float(allfail.mean()),
                }
            )
    return rows


def penalty_curve(
    *,
    means: Sequence[float] = tuple(np.linspace(0.05, 0.95, 19)),
    concentration: float = 4.0,
    group_size: int = 4,
    steps: int = 5,
    prompts_per_step: int = 256,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Corollary 3.5 as a curve: the advantage of all-zero groups against the mean success rate.

    For each ``μ`` in ``means``, θ ~ Beta(μ·c, (1 − μ)·c) with ``c = concentration``; EBPO is run
    with ``normalize`` none / center / batch on the same rewards. Rows: ``mu, shrinkage`` (mean S
    on all-zero groups), ``predicted_raw`` (−S·μ_glob), ``raw``, ``centred``, ``normalised`` (mean
    advantage of all-zero groups' responses), ``failed_frac``.
    """
    _check_group_size(group_size)
    _check_positive_int("steps", steps)
    _check_positive_int("prompts_per_step", prompts_per_step)
    if not (isinstance(concentration, (int, float)) and concentration > 0):
        raise ValueError(f"concentration must be a positive number, got {concentration!r}")
    if any(not 0 < m < 1 for m in means):
        raise ValueError(f"means must lie strictly between 0 and 1, got {list(means)}")
    g = group_size
    group_ids = torch.arange(prompts_per_step).repeat_interleave(g)
    rows = []
    for index, mu in enumerate(means):
        mixture = BetaMixture((1.0,), (mu * concentration,), ((1 - mu) * concentration,))
        gen = _generator(seed, 5, index)
        theta = sample_success_rates(mixture, (steps, prompts_per_step), gen)
        rewards = (torch.rand((steps, prompts_per_step, g), generator=gen, dtype=torch.float64) < theta[..., None]).double()
        failed_rows = (rewards.sum(-1) == 0).repeat_interleave(g, dim=1)  # [steps, M*G]
        row: dict[str, Any] = {"mu": float(mu), "failed_frac": float(failed_rows.double().mean())}
        for label, mode in (("raw", "none"), ("centred", "center"), ("normalised", "batch")):
            est = make_estimator("ebpo", normalize=mode)
            adv, shrink, predicted = [], [], []
            for t in range(steps):
                res = est(rewards[t].flatten(), group_ids)
                f = failed_rows[t]
                adv.append(res.advantages.double()[f])
                shrink.append(res.shrinkage.double()[f])
                predicted.append(-res.shrinkage.double()[f] * res.metrics["prior_mean"])
            row[label] = float(torch.cat(adv).mean()) if failed_rows.any() else float("nan")
            if mode == "none":
                row["shrinkage"] = float(torch.cat(shrink).mean()) if failed_rows.any() else float("nan")
                row["predicted_raw"] = float(torch.cat(predicted).mean()) if failed_rows.any() else float("nan")
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------- bandit
@dataclass(frozen=True)
class BanditConfig:
    """A many-armed contextual bandit standing in for RLVR.

    Each prompt ``p`` is a softmax policy over ``num_answers`` candidate answers, of which
    ``num_correct`` are right (reward 1, else 0). Prompts belong to ``num_topics`` topics; topic
    ``k`` has a base difficulty: the correct answers' initial logit is ``c_k`` (evenly spaced over
    ``initial_logit_range``, assigned to topics in random order) plus ``N(0, within_topic_spread²)``
    per prompt, so the initial success rate ``θ_p ≈ n_c e^c / (n_c e^c + A − n_c)`` differs mostly
    between topics — the situation where a prior, and a per-topic prior, can matter.

    With ``shared=True`` the logits are ``L0_p + B_p + φ_p·U``: ``B`` is a per-prompt table and ``U``
    a ``[feature_dim, A]`` matrix shared by all prompts; features ``φ_p`` are the topic's embedding
    plus noise, and the correct answers are the top ``num_correct`` of ``φ_p·W*`` for a hidden
    ``W*``, so what is learnt on one prompt transfers to similar prompts (measured on
    ``num_heldout`` held-out prompts). With ``shared=False`` only the table is learnt.

    ``false_positive_rate`` is a noisy verifier: a wrong answer is rewarded 1 with this probability
    (independently per sample). Without it a per-prompt table is solved by locking in on the first
    rewarded answer, so the largest learning rate always wins and every estimator ties; with it,
    over-confident steps lock in on false positives, as in real RLVR. Reported success rates are
    the TRUE ones (probability of a correct answer), not the noisy rewards.
    """

    num_prompts: int = 192
    num_heldout: int = 128
    num_answers: int = 16
    num_correct: int = 1
    num_topics: int = 6
    initial_logit_range: tuple[float, float] = (-2.0, 3.0)
    within_topic_spread: float = 0.3
    shared: bool = False
    feature_dim: int = 8
    feature_noise: float = 0.1
    prompts_per_step: int = 32
    false_positive_rate: float = 0.05

    def __post_init__(self) -> None:
        for name in ("num_prompts", "num_answers", "num_correct", "num_topics", "feature_dim", "prompts_per_step"):
            _check_positive_int(name, getattr(self, name))
        if not 0 <= self.false_positive_rate < 1:
            raise ValueError(f"false_positive_rate must be in [0, 1), got {self.false_positive_rate}")
        if self.num_heldout < 0:
            raise ValueError(f"num_heldout must be >= 0, got {self.num_heldout}")
        if self.num_correct >= self.num_answers:
            raise ValueError(f"num_correct must be < num_answers, got {self.num_correct} >= {self.num_answers}")
        if self.num_prompts % self.prompts_per_step:
            raise ValueError(
                f"num_prompts ({self.num_prompts}) must be a multiple of prompts_per_step ({self.prompts_per_step}) so batches never straddle epochs"
            )
        if self.num_topics > self.num_prompts:
            raise ValueError(f"num_topics must be <= num_prompts, got {self.num_topics}")


@dataclass
class Bandit:
    """One drawn bandit instance (tensors over training prompts; ``heldout_*`` for held-out ones)."""

    config: BanditConfig
    initial_logits: torch.Tensor  # [P, A]
    correct: torch.Tensor  # [P, A] bool
    topic: torch.Tensor  # [P] int64
    features: torch.Tensor  # [P, d]
    heldout_initial_logits: torch.Tensor
    heldout_correct: torch.Tensor
    heldout_features: torch.Tensor
    topic_logit: torch.Tensor = field(default_factory=lambda: torch.zeros(0))  # [K] c_k


def make_bandit(config: BanditConfig, seed: int) -> Bandit:
    """Draw a bandit instance; the same ``(config, seed)`` gives the same instance."""
    gen = _generator(seed, 3, 0)
    k, d, a = config.num_topics, config.feature_dim, config.num_answers
    low, high = config.initial_logit_range
    topic_logit = torch.linspace(low, high, k, dtype=torch.float64)[torch.randperm(k, generator=gen)]
    embeddings = torch.randn(k, d, generator=gen, dtype=torch.float64)
    teacher = torch.randn(d, a, generator=gen, dtype=torch.float64)

    def prompts(n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        topic = torch.arange(n) % k  # balanced topics
        topic = topic[torch.randperm(n, generator=gen)]
        features = embeddings[topic] + config.feature_noise * torch.randn(n, d, generator=gen, dtype=torch.float64)
        features = features / features.norm(dim=1, keepdim=True)
        if config.shared:
            score = features @ teacher
        else:  # no structure to share: random correct answers
            score = torch.rand(n, a, generator=gen, dtype=torch.float64)
        top = score.topk(config.num_correct, dim=1).indices
        correct = torch.zeros(n, a, dtype=torch.bool).scatter_(1, top, True)
        offset = topic_logit[topic] + config.within_topic_spread * torch.randn(n, generator=gen, dtype=torch.float64)
        logits = torch.where(correct, offset[:, None], torch.zeros(n, a, dtype=torch.float64))
        return logits, correct, topic, features

    train = prompts(config.num_prompts)
    heldout = prompts(config.num_heldout)
    return Bandit(config, *train, heldout[0], heldout[1], heldout[3], topic_logit)


ORDERS = ("shuffled", "topic", "difficulty")


def data_stream(bandit: Bandit, steps: int, order: str, generator: torch.Generator) -> torch.Tensor:
    """``[steps, M]`` prompt indices: consecutive epochs over the training prompts.

    ``"shuffled"``: a fresh random permutation per epoch. ``"topic"``: prompts grouped by topic
    (topics in a random order, drawn once; prompts shuffled within a topic each epoch), as the
    paper's EBPO-topic stream. ``"difficulty"``: easy to hard by initial success rate (EBPO-diff).
    """
    _check_choice("order", order, ORDERS)
    p, m = bandit.config.num_prompts, bandit.config.prompts_per_step
    epochs = -(-steps * m // p)
    topic_rank = torch.randperm(bandit.config.num_topics, generator=generator)[bandit.topic]
    initial = _success(bandit.initial_logits, bandit.correct)
    chunks = []
    for _ in range(epochs):
        perm = torch.randperm(p, generator=generator)
        if order == "topic":
            perm = perm[torch.argsort(topic_rank[perm], stable=True)]
        elif order == "difficulty":
            perm = torch.argsort(-initial)
        chunks.append(perm)
    return torch.cat(chunks)[: steps * m].view(steps, m)


def _zero_signal_frac(advantages: torch.Tensor) -> float:
    """Fraction of groups (rows of ``[M, G]``) whose advantages are all below :data:`SIGNAL_TOL`."""
    return float((advantages.abs() <= SIGNAL_TOL).all(-1).double().mean())


def _success(logits: torch.Tensor, correct: torch.Tensor) -> torch.Tensor:
    """Exact success probability per prompt: ``Σ_{a correct} softmax(logits)_a``."""
    return (torch.softmax(logits, dim=-1) * correct).sum(-1)


def run_bandit(
    bandit: Bandit,
    estimator: str,
    *,
    group_size: int,
    lr: float,
    steps: int,
    order: str = "shuffled",
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Train the bandit's policy with REINFORCE and ``estimator``'s advantages.

    Each step takes the next ``M`` prompts of the stream, samples ``G`` answers per prompt, rewards
    the correct ones and ascends ``(1/(M·G)) Σ_{m,i} Â_{m,i} ∇ log π(a_{m,i} | p_m)``, where for a
    softmax ``∇_logits log π(a) = onehot(a) − π``; the gradient on the per-prompt table is added
    with ``index_add_`` and the shared matrix gets ``φᵀ·grad`` (no loop over prompts). Topics are
    passed as ``clusters`` to estimators built with ``per_cluster=true``.

    Returns arrays: ``train_acc`` and ``heldout_acc`` (``[steps + 1]``, exact expected success over
    all training / held-out prompts, before each step and at the end), per step ``reward``,
    ``zero_signal`` (fraction of groups with all-zero advantages), ``shrinkage`` (mean S),
    ``prior_error`` (mean ``(μ_m − θ_m)²`` of the prior mean each group was shrunk toward against
    its true current success rate; NaN for estimators without a prior) and ``theta_var`` (variance of
    ``θ`` within the batch: Proposition 3.8's prior error for a prior equal to the batch mean).
    """
    _check_group_size(group_size)
    _check_positive_int("steps", steps)
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a positive finite number, got {lr!r}")
    est = build_estimator(estimator)
    config = bandit.config
    gen = _generator(seed, 4, 0)
    stream = data_stream(bandit, steps, order, gen)
    m, g = config.prompts_per_step, group_size
    table = torch.zeros_like(bandit.initial_logits)
    shared = torch.zeros(config.feature_dim, config.num_answers, dtype=torch.float64)
    group_ids = torch.arange(m).repeat_interleave(g)
    name, options = parse_estimator_spec(estimator)
    has_prior = name.startswith("ebpo")
    # Only per-cluster priors read the topics; skipping them elsewhere saves the label check.
    pass_clusters = bool(options.get("per_cluster", False))

    def logits(rows: torch.Tensor | slice) -> torch.Tensor:
        out = bandit.initial_logits[rows] + table[rows]
        return out + bandit.features[rows] @ shared if config.shared else out

    def heldout_acc() -> float:
        if not config.shared or config.num_heldout == 0:
            return float("nan")
        return float(_success(bandit.heldout_initial_logits + bandit.heldout_features @ shared, bandit.heldout_correct).mean())

    out = {k: np.full(steps, np.nan) for k in ("reward", "zero_signal", "shrinkage", "prior_error", "theta_var")}
    train_acc, held_acc = np.zeros(steps + 1), np.zeros(steps + 1)
    for t in range(steps):
        all_theta = _success(logits(slice(None)), bandit.correct)
        train_acc[t], held_acc[t] = float(all_theta.mean()), heldout_acc()
        idx = stream[t]
        probs = torch.softmax(logits(idx), dim=-1)
        answers = torch.multinomial(probs, g, replacement=True, generator=gen)  # [M, G]
        right = bandit.correct[idx].gather(1, answers)
        lucky = torch.rand(answers.shape, generator=gen, dtype=torch.float64) < config.false_positive_rate
        rewards = (right | lucky).double()
        clusters = bandit.topic[idx].repeat_interleave(g) if pass_clusters else None
        res = est(rewards.flatten(), group_ids, clusters=clusters)
        adv = res.advantages.double().view(m, g)

        # ∇ of (1/(MG)) Σ Â log π(a) w.r.t. the logits of each prompt.
        grad = torch.zeros_like(probs).scatter_add_(1, answers, adv) - adv.sum(1, keepdim=True) * probs
        grad /= m * g
        table.index_add_(0, idx, lr * grad)  # prompts within a batch are distinct
        if config.shared:
            shared += lr * (bandit.features[idx].T @ grad)

        theta = all_theta[idx]
        out["reward"][t] = float(rewards.mean())
        out["zero_signal"][t] = _zero_signal_frac(adv)
        out["theta_var"][t] = float(theta.var(unbiased=False))
        if has_prior:
            s = res.shrinkage.double().view(m, g)[:, 0]
            v = res.baselines.double().view(m, g)[:, 0]
            out["shrinkage"][t] = float(s.mean())
            usable = s > 1e-9
            if usable.any():  # V = (1 − S)·r̄ + S·μ  =>  μ = (V − (1 − S)·r̄)/S
                prior_mean = (v - (1 - s) * rewards.mean(1))[usable] / s[usable]
                out["prior_error"][t] = float(((prior_mean - theta[usable]) ** 2).mean())
    train_acc[steps] = float(_success(logits(slice(None)), bandit.correct).mean())
    held_acc[steps] = heldout_acc()
    return {"train_acc": train_acc, "heldout_acc": held_acc, **out}


def _final(curve: np.ndarray, fraction: float = 0.1) -> float:
    """Mean of the last ``fraction`` of a learning curve (less noisy than its last point)."""
    k = max(1, int(round(len(curve) * fraction)))
    return float(np.mean(curve[-k:]))


def learning_rate_study(
    config: BanditConfig,
    *,
    estimators: Sequence[str],
    group_sizes: Sequence[int],
    learning_rates: Sequence[float],
    steps: int,
    validation_seeds: Sequence[int],
    report_seeds: Sequence[int],
    equal_lr: float | None = None,
    metric: str = "train_acc",
    progress: bool = False,
) -> dict[str, Any]:
    """Each estimator at its own best learning rate, and all at an equal one.

    Estimators scale advantages differently (group vs batch standardisation, none for Dr. GRPO,
    RLOO, JSPO), so one learning rate favours some of them. For every (estimator, G) all
    ``learning_rates`` are run on ``validation_seeds`` (different bandit instances and samples);
    the rate with the best final ``metric`` (mean of the last 10% of the curve) is then reported on
    ``report_seeds``, which played no part in the choice, together with the common rate ``equal_lr``
    (default: the middle of ``learning_rates``) for the equal-learning-rate table.

    Returns ``{"rows": [...], "curves": {(estimator, G, lr): [seeds, steps + 1]}, "best_lr":
    {(estimator, G): lr}, "equal_lr": lr}`` where rows hold ``estimator, G, lr, split, final,
    final_se, auc`` (auc: mean of the curve).
    """
    lrs = [float(x) for x in learning_rates]
    if len(lrs) < 1 or any(not (math.isfinite(x) and x > 0) for x in lrs):
        raise ValueError(f"learning_rates must be positive numbers, got {learning_rates!r}")
    if not validation_seeds or not report_seeds:
        raise ValueError("validation_seeds and report_seeds must be non-empty")
    if set(validation_seeds) & set(report_seeds):
        raise ValueError("validation_seeds and report_seeds must be disjoint (choose the learning rate on held-out seeds)")
    if metric not in ("train_acc", "heldout_acc"):
        raise ValueError(f"metric must be 'train_acc' or 'heldout_acc', got {metric!r}")
    equal = lrs[len(lrs) // 2] if equal_lr is None else float(equal_lr)
    for spec in estimators:
        build_estimator(spec)
    bandits = {s: make_bandit(config, s) for s in (*validation_seeds, *report_seeds)}
    curves: dict[tuple[str, int, float], np.ndarray] = {}
    rows: list[dict[str, Any]] = []

    def evaluate(spec: str, g: int, lr: float, split: str, seeds: Sequence[int]) -> None:
        stacked = np.stack([run_bandit(bandits[s], spec, group_size=g, lr=lr, steps=steps, seed=s)[metric] for s in seeds])
        finals = np.array([_final(c) for c in stacked])
        se = float(finals.std(ddof=1) / math.sqrt(len(finals))) if len(finals) > 1 else float("nan")
        rows.append({"estimator": spec, "G": g, "lr": lr, "split": split, "final": float(finals.mean()), "final_se": se, "auc": float(stacked.mean())})
        if split == "report":
            curves[(spec, g, lr)] = stacked

    best: dict[tuple[str, int], float] = {}
    configs = [(e, g) for e in estimators for g in group_sizes]
    for spec, g in _progress(configs, progress, "bandit lr sweep"):
        for lr in lrs:
            evaluate(spec, g, lr, "validation", validation_seeds)
        val = [r for r in rows if r["split"] == "validation" and r["estimator"] == spec and r["G"] == g]
        best[(spec, g)] = max(val, key=lambda r: r["final"])["lr"]
        # Only the chosen rate and the common one are run on the report seeds.
        for lr in dict.fromkeys((best[(spec, g)], equal)):
            evaluate(spec, g, lr, "report", report_seeds)
    return {"rows": rows, "curves": curves, "best_lr": best, "equal_lr": equal}


#: (label, estimator spec, data order) of the prior study.
PRIOR_VARIANTS: tuple[tuple[str, str, str], ...] = (
    ("grpo / shuffled", "grpo", "shuffled"),
    ("ebpo history / shuffled", "ebpo", "shuffled"),
    ("ebpo batch / shuffled", "ebpo_batch", "shuffled"),
    ("ebpo ema / shuffled", "ebpo:prior=ema,half_life=3", "shuffled"),
    ("ebpo per-cluster / shuffled", "ebpo:per_cluster=true", "shuffled"),
    ("ebpo history / topic", "ebpo", "topic"),
    ("ebpo batch / topic", "ebpo_batch", "topic"),
    ("ebpo ema / topic", "ebpo:prior=ema,half_life=3", "topic"),
    ("grpo / topic", "grpo", "topic"),
)


def prior_study(
    config: BanditConfig,
    *,
    variants: Sequence[tuple[str, str, str]] = PRIOR_VARIANTS,
    group_size: int = 4,
    learning_rates: Sequence[float],
    steps: int,
    validation_seeds: Sequence[int],
    report_seeds: Sequence[int],
    normalize: str | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Which prior, which data order: history / batch / EMA priors, topic-ordered vs shuffled data,
    per-cluster priors (Proposition 3.8).

    Proposition 3.8: a single prior's squared error against the prompts' success rates is, under a
    random order, ``Var(θ) = E_k[Var(θ | k)] + Var_k(μ_k)``; a topic-coherent stream lets the prior
    track ``μ_k`` and removes the second term — if the prior can follow (a batch or EMA prior; the
    history prior averages over all past topics). Per-cluster priors remove it without reordering.
    Each variant gets its own learning rate from ``learning_rates`` on ``validation_seeds``.
    ``normalize`` (if given) overrides the EBPO variants' normalisation: with ``"batch"`` or
    ``"center"`` and equal group sizes a single prior's mean cancels out of the advantages (only S
    matters), so the prior's accuracy only shows in the gradient with ``"none"`` or per-cluster
    priors.

    Returns ``{"rows": [...], "curves": {label: {key: [seeds, T]}}, "best_lr": {label: lr}}``; rows
    hold ``variant, lr, final, final_se, prior_error, theta_var, shrinkage, zero_signal``.
    """
    _check_group_size(group_size)
    variants = [(label, _with_normalize(spec, normalize), order) for label, spec, order in variants]
    for _, spec, order in variants:
        build_estimator(spec)
        _check_choice("order", order, ORDERS)
    bandits = {s: make_bandit(config, s) for s in (*validation_seeds, *report_seeds)}
    rows, curves, best = [], {}, {}
    for label, spec, order in _progress(variants, progress, "bandit priors"):
        scores = {}
        for lr in learning_rates:
            runs = [run_bandit(bandits[s], spec, group_size=group_size, lr=lr, steps=steps, order=order, seed=s) for s in validation_seeds]
            scores[lr] = float(np.mean([_final(r["train_acc"]) for r in runs]))
        lr = max(scores, key=scores.get)
        best[label] = lr
        runs = [run_bandit(bandits[s], spec, group_size=group_size, lr=lr, steps=steps, order=order, seed=s) for s in report_seeds]
        stacked = {k: np.stack([r[k] for r in runs]) for k in runs[0]}
        curves[label] = stacked
        finals = np.array([_final(c) for c in stacked["train_acc"]])
        rows.append(
            {
                "variant": label,
                "estimator": spec,
                "order": order,
                "lr": lr,
                "final": float(finals.mean()),
                "final_se": float(finals.std(ddof=1) / math.sqrt(len(finals))) if len(finals) > 1 else float("nan"),
                "prior_error": float(np.nanmean(stacked["prior_error"])) if np.isfinite(stacked["prior_error"]).any() else float("nan"),
                "theta_var": float(np.mean(stacked["theta_var"])),
                "shrinkage": float(np.nanmean(stacked["shrinkage"])) if np.isfinite(stacked["shrinkage"]).any() else float("nan"),
                "zero_signal": float(np.mean(stacked["zero_signal"])),
            }
        )
    return {"rows": rows, "curves": curves, "best_lr": best}


def _with_normalize(spec: str, normalize: str | None) -> str:
    if normalize is None or not parse_estimator_spec(spec)[0].startswith("ebpo"):
        return spec
    name, options = parse_estimator_spec(spec)
    options["normalize"] = normalize
    return name + ":" + ",".join(f"{k}={v}" for k, v in options.items())


# ----------------------------------------------------------------------------- tables
def markdown_table(
    rows: Iterable[Mapping[str, Any]], columns: Sequence[str], *, headers: Sequence[str] | None = None, digits: int = 4
) -> str:
    """A GitHub Markdown table of ``rows`` restricted to ``columns`` (floats to ``digits`` significant)."""
    headers = list(columns if headers is None else headers)
    if len(headers) != len(columns):
        raise ValueError(f"headers has {len(headers)} entries but columns has {len(columns)}")
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join("---" for _ in headers) + " |"]
    for row in rows:
        lines.append("| " + " | ".join(_format(row.get(c, ""), digits) for c in columns) + " |")
    return "\n".join(lines)


def _format(value: Any, digits: int = 4) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        return f"{value:.{digits}g}"
    return str(value)


# ----------------------------------------------------------------------------- helpers
def _generator(seed: int, *stream: int) -> torch.Generator:
    """An independent, reproducible torch generator for ``(seed, stream...)``."""
    state = np.random.SeedSequence([int(seed) & 0xFFFFFFFF, *stream]).generate_state(2, dtype=np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


def _progress(items: Sequence[Any], enabled: bool, desc: str) -> Iterable[Any]:
    if not enabled:
        return items
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, leave=False)


def _check_group_size(g: Any) -> None:
    if isinstance(g, bool) or not isinstance(g, (int, np.integer)) or g < 2:
        raise ValueError(f"group_size must be an integer >= 2, got {g!r}")


def _check_positive_int(argument: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{argument} must be a positive integer, got {value!r}")


def _check_choice(argument: str, value: Any, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ValueError(f"{argument} must be one of {list(choices)}, got {value!r}")

