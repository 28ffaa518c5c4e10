"""Experiment 3, the bandit: a many-armed contextual bandit standing in for RLVR, trained by
REINFORCE with each estimator's advantages.

:class:`BanditConfig` describes it, :func:`make_bandit` draws an instance, :func:`data_stream`
orders its prompts (shuffled, by topic, by difficulty) and :func:`run_bandit` trains a policy on it
and records learning curves and what the estimator's prior did. The studies built on it live in
:mod:`ebpo.lab.simulation.sweeps`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from ebpo.estimators import AdvantageResult
from ebpo.lab.simulation.common import check_group_size, seeded_generator, zero_signal_frac
from ebpo.lab.simulation.specs import build_estimator
from ebpo.utils.checks import check_choice, check_positive_int

__all__ = ["ORDERS", "Bandit", "BanditConfig", "data_stream", "make_bandit", "run_bandit"]


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
        for name in (
            "num_prompts",
            "num_answers",
            "num_correct",
            "num_topics",
            "feature_dim",
            "prompts_per_step",
        ):
            check_positive_int(name, getattr(self, name))
        if not 0 <= self.false_positive_rate < 1:
            raise ValueError(
                f"false_positive_rate must be in [0, 1), got {self.false_positive_rate}"
            )
        if self.num_heldout < 0:
            raise ValueError(f"num_heldout must be >= 0, got {self.num_heldout}")
        if self.num_correct >= self.num_answers:
            raise ValueError(
                f"num_correct must be < num_answers, got {self.num_correct} >= {self.num_answers}"
            )
        if self.num_prompts % self.prompts_per_step:
            raise ValueError(
                f"num_prompts ({self.num_prompts}) must be a multiple of prompts_per_step "
                f"({self.prompts_per_step}) so batches never straddle epochs"
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
    gen = seeded_generator(seed, 3, 0)
    k, d, a = config.num_topics, config.feature_dim, config.num_answers
    low, high = config.initial_logit_range
    topic_logit = torch.linspace(low, high, k, dtype=torch.float64)[
        torch.randperm(k, generator=gen)
    ]
    embeddings = torch.randn(k, d, generator=gen, dtype=torch.float64)
    teacher = torch.randn(d, a, generator=gen, dtype=torch.float64)

    def prompts(n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        topic = torch.arange(n) % k  # balanced topics
        topic = topic[torch.randperm(n, generator=gen)]
        features = embeddings[topic] + config.feature_noise * torch.randn(
            n, d, generator=gen, dtype=torch.float64
        )
        features = features / features.norm(dim=1, keepdim=True)
        # without shared parameters there is no structure to share: random correct answers
        score = (
            features @ teacher
            if config.shared
            else torch.rand(n, a, generator=gen, dtype=torch.float64)
        )
        top = score.topk(config.num_correct, dim=1).indices
        correct = torch.zeros(n, a, dtype=torch.bool).scatter_(1, top, True)
        offset = topic_logit[topic] + config.within_topic_spread * torch.randn(
            n, generator=gen, dtype=torch.float64
        )
        logits = torch.where(correct, offset[:, None], torch.zeros(n, a, dtype=torch.float64))
        return logits, correct, topic, features

    train = prompts(config.num_prompts)
    heldout = prompts(config.num_heldout)
    return Bandit(config, *train, heldout[0], heldout[1], heldout[3], topic_logit)


#: The orders in which :func:`data_stream` can present the training prompts.
ORDERS = ("shuffled", "topic", "difficulty")


def data_stream(bandit: Bandit, steps: int, order: str, generator: torch.Generator) -> torch.Tensor:
    """``[steps, M]`` prompt indices: consecutive epochs over the training prompts.

    ``"shuffled"``: a fresh random permutation per epoch. ``"topic"``: prompts grouped by topic
    (topics in a random order, drawn once; prompts shuffled within a topic each epoch), as the
    paper's EBPO-topic stream. ``"difficulty"``: easy to hard by initial success rate (EBPO-diff).
    """
    check_choice("order", order, ORDERS)
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
    check_group_size(group_size)
    check_positive_int("steps", steps)
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a positive finite number, got {lr!r}")
    est = build_estimator(estimator)
    gen = seeded_generator(seed, 4, 0)
    stream = data_stream(bandit, steps, order, gen)
    policy = _Policy.start(bandit)
    m, g = bandit.config.prompts_per_step, group_size
    group_ids = torch.arange(m).repeat_interleave(g)
    # Only estimators that read clusters (per-cluster priors) get the topics: skipping them
    # elsewhere saves the label check.
    pass_clusters = est.uses_clusters
    out = {
        k: np.full(steps, np.nan)
        for k in ("reward", "zero_signal", "shrinkage", "prior_error", "theta_var")
    }
    train_acc, held_acc = np.zeros(steps + 1), np.zeros(steps + 1)
    for t in range(steps):
        all_theta = _success(policy.logits(slice(None)), bandit.correct)
        train_acc[t], held_acc[t] = float(all_theta.mean()), policy.heldout_acc()
        idx = stream[t]
        probs = torch.softmax(policy.logits(idx), dim=-1)
        answers, rewards = _sample_rewards(bandit, idx, probs, g, gen)
        clusters = bandit.topic[idx].repeat_interleave(g) if pass_clusters else None
        keys = idx.repeat_interleave(g) if est.uses_prompt_keys else None  # SPO: the prompt
        res = est(rewards.flatten(), group_ids, clusters=clusters, prompt_keys=keys)
        adv = res.advantages.double().view(m, g)
        policy.reinforce(idx, probs, answers, adv, lr)
        _record_step(out, t, rewards, adv, all_theta[idx], res if est.uses_prior else None)
    train_acc[steps] = float(_success(policy.logits(slice(None)), bandit.correct).mean())
    held_acc[steps] = policy.heldout_acc()
    return {"train_acc": train_acc, "heldout_acc": held_acc, **out}


@dataclass
class _Policy:
    """The bandit's trainable policy: logits ``L0 + table (+ φ·shared when config.shared)``."""

    bandit: Bandit
    table: torch.Tensor  # [P, A] per-prompt logits
    shared: torch.Tensor  # [d, A] shared by all prompts through their features

    @classmethod
    def start(cls, bandit: Bandit) -> _Policy:
        config = bandit.config
        return cls(
            bandit,
            torch.zeros_like(bandit.initial_logits),
            torch.zeros(config.feature_dim, config.num_answers, dtype=torch.float64),
        )

    def logits(self, rows: torch.Tensor | slice) -> torch.Tensor:
        out = self.bandit.initial_logits[rows] + self.table[rows]
        return out + self.bandit.features[rows] @ self.shared if self.bandit.config.shared else out

    def heldout_acc(self) -> float:
        """Exact mean success over the held-out prompts (NaN without shared parameters)."""
        bandit = self.bandit
        if not bandit.config.shared or bandit.config.num_heldout == 0:
            return float("nan")
        return float(
            _success(
                bandit.heldout_initial_logits + bandit.heldout_features @ self.shared,
                bandit.heldout_correct,
            ).mean()
        )

    def reinforce(
        self,
        idx: torch.Tensor,
        probs: torch.Tensor,
        answers: torch.Tensor,
        adv: torch.Tensor,
        lr: float,
    ) -> None:
        """One REINFORCE step on the ``[M, G]`` answers with advantages ``adv``."""
        m, g = adv.shape
        # ∇ of (1/(MG)) Σ Â log π(a) w.r.t. the logits of each prompt.
        grad = (
            torch.zeros_like(probs).scatter_add_(1, answers, adv) - adv.sum(1, keepdim=True) * probs
        )
        grad /= m * g
        self.table.index_add_(0, idx, lr * grad)  # prompts within a batch are distinct
        if self.bandit.config.shared:
            self.shared += lr * (self.bandit.features[idx].T @ grad)


def _sample_rewards(
    bandit: Bandit, idx: torch.Tensor, probs: torch.Tensor, g: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """``([M, G] sampled answers, [M, G] float64 rewards)``: 1 for a correct answer, and for a wrong
    one with probability ``false_positive_rate`` (the noisy verifier)."""
    answers = torch.multinomial(probs, g, replacement=True, generator=gen)  # [M, G]
    right = bandit.correct[idx].gather(1, answers)
    lucky = (
        torch.rand(answers.shape, generator=gen, dtype=torch.float64)
        < bandit.config.false_positive_rate
    )
    return answers, (right | lucky).double()


def _record_step(
    out: dict[str, np.ndarray],
    t: int,
    rewards: torch.Tensor,
    adv: torch.Tensor,
    theta: torch.Tensor,
    res: AdvantageResult | None,
) -> None:
    """Step ``t``'s entries of ``out``; ``res`` is the estimator's result when it has a prior
    (None: shrinkage and prior error stay NaN)."""
    m, g = adv.shape
    out["reward"][t] = float(rewards.mean())
    out["zero_signal"][t] = zero_signal_frac(adv)
    out["theta_var"][t] = float(theta.var(unbiased=False))
    if res is None:
        return
    # The prior mean each group was shrunk toward is recovered from the baseline V = (1 − S)·r̄ + S·μ.
    s = res.shrinkage.double().view(m, g)[:, 0]
    v = res.baselines.double().view(m, g)[:, 0]
    out["shrinkage"][t] = float(s.mean())
    usable = s > 1e-9
    if usable.any():  # V = (1 − S)·r̄ + S·μ  =>  μ = (V − (1 − S)·r̄)/S
        prior_mean = (v - (1 - s) * rewards.mean(1))[usable] / s[usable]
        out["prior_error"][t] = float(((prior_mean - theta[usable]) ** 2).mean())
