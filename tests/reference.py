"""Slow, obviously-correct reference implementations of every estimator.

Plain Python over dictionaries of groups, one group at a time, straight from the formulas in
shared/spec/EBPO.md. The vectorised estimators in ``ebpo`` must agree with these.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict


def valid_groups(rewards, group_ids, mask):
    """id -> list of (row, reward) over valid rows, in order of first appearance."""
    groups = defaultdict(list)
    for row, (r, g) in enumerate(zip(rewards, group_ids, strict=True)):
        if mask is None or mask[row]:
            groups[g].append((row, float(r)))
    return groups


def stdev_or_one(values):
    return statistics.stdev(values) if len(values) >= 2 else 1.0


def normalize(raw, valid_rows, mode, eps):
    out = [0.0] * len(raw)
    values = [raw[i] for i in valid_rows]
    if mode == "none":
        for i in valid_rows:
            out[i] = raw[i]
        return out
    if not values:
        return out
    mean = sum(values) / len(values)
    std = stdev_or_one(values)
    for i in valid_rows:
        out[i] = raw[i] - mean if mode == "center" else (raw[i] - mean) / (std + eps)
    return out


def grpo(rewards, group_ids, mask=None, scale="group", eps=1e-6):
    n = len(rewards)
    adv, base = [0.0] * n, [0.0] * n
    groups = valid_groups(rewards, group_ids, mask)
    all_valid = [r for rows in groups.values() for _, r in rows]
    batch_std = stdev_or_one(all_valid)
    for rows in groups.values():
        values = [r for _, r in rows]
        if len(values) == 1:
            mean, std = 0.0, 1.0
        else:
            mean, std = statistics.fmean(values), statistics.stdev(values)
        for row, r in rows:
            base[row] = mean
            if scale == "group":
                adv[row] = (r - mean) / (std + eps)
            elif scale == "batch":
                adv[row] = (r - mean) / (batch_std + eps)
            else:
                adv[row] = r - mean
    return adv, base


def rloo(rewards, group_ids, mask=None):
    n = len(rewards)
    adv, base = [0.0] * n, [0.0] * n
    for rows in valid_groups(rewards, group_ids, mask).values():
        for row, r in rows:
            others = [x for other_row, x in rows if other_row != row]
            base[row] = statistics.fmean(others) if others else 0.0
            adv[row] = r - base[row]
    return adv, base


def reinforce_pp(rewards, group_ids, mask=None, eps=1e-6):
    n = len(rewards)
    raw, base = [0.0] * n, [0.0] * n
    valid_rows = []
    for rows in valid_groups(rewards, group_ids, mask).values():
        mean = statistics.fmean([r for _, r in rows]) if len(rows) > 1 else 0.0
        for row, r in rows:
            base[row] = mean
            raw[row] = r - mean
            valid_rows.append(row)
    return normalize(raw, sorted(valid_rows), "batch", eps), base


def reinforce_pp_tokens(rewards, group_ids, token_counts, mask=None):
    """REINFORCE++ as verl: group baseline, then verl's ``masked_whiten`` over the TOKENS, written
    out literally — each response repeated once per token, the constant 1e-8 where verl has it."""
    n = len(rewards)
    raw, base = [0.0] * n, [0.0] * n
    for rows in valid_groups(rewards, group_ids, mask).values():
        mean = statistics.fmean([r for _, r in rows]) if len(rows) > 1 else 0.0
        for row, r in rows:
            base[row] = mean
            raw[row] = r - mean
    valid_rows = [i for i in range(n) if mask is None or mask[i]]
    tokens = [raw[i] for i in valid_rows for _ in range(int(token_counts[i]))]
    out = [0.0] * n
    if not tokens:
        return out, base
    mean = sum(tokens) / (len(tokens) + 1e-8)
    var = sum((t - mean) ** 2 for t in tokens) / (len(tokens) + 1e-8)
    var = var * len(tokens) / (len(tokens) - 1) if len(tokens) > 1 else 0.0
    for i in valid_rows:
        out[i] = (raw[i] - mean) / math.sqrt(var + 1e-8)
    return out, base


def jspo(rewards, group_ids, mask=None, eps=1e-6, lambda_form="released_code"):
    """JSPO (Zeng et al., 2025) on any batch, one prompt at a time: the formula of the authors'
    released code (see :func:`authors_jspo` for the code itself, defined only on equal blocks of
    m ≥ 2 responses) extended with our conventions (not derived from our vectorised code):

        λ_i = v_{−i} / (v_{−i} + s_{−i} + 1e-6)          (lambda_form="released_code")
        λ_i = ((K−1)/K) · v_{−i} / (v_{−i} + s_{−i} + 1e-6)  ("project_page", K = number of prompts)
        b_{i,k} = (1 − λ_i)·(mean of group i without response k) + λ_i·μ_{−i},   A = r − b

    over the other prompts j ≠ i: μ_{−i} = mean of their means, s_{−i} = population variance of
    their means (project page eq. 7; the released code's mean of the other prompts' responses is
    the same on equal blocks), v_{−i} = mean of (unbiased variance_j / m_j). Our documented
    conventions where that is undefined: prompts with one response are left out of v (no
    variance), and their baseline is μ_{−i} (λ reported as 1); with no other prompt λ = 0 and a
    singleton's baseline is 0 (the released code gives NaN).
    """
    n = len(rewards)
    adv, base, lam_out = [0.0] * n, [0.0] * n, [0.0] * n
    groups = valid_groups(rewards, group_ids, mask)
    num_prompts = len(groups)
    for prompt, rows in groups.items():
        others = [
            [r for _, r in other_rows] for other, other_rows in groups.items() if other != prompt
        ]
        if not others:
            lam, others_mean = 0.0, 0.0
        elif len(rows) == 1:
            lam, others_mean = (
                1.0,
                statistics.fmean([statistics.fmean(values) for values in others]),
            )
        else:
            means = [statistics.fmean(values) for values in others]
            others_mean = statistics.fmean(means)
            s = statistics.pvariance(means)
            noises = [
                statistics.variance(values) / len(values) for values in others if len(values) >= 2
            ]
            v = statistics.fmean(noises) if noises else 0.0
            lam = v / (v + s + eps)
            if lambda_form == "project_page":
                lam *= (num_prompts - 1) / num_prompts
        for row, r in rows:
            loo_values = [x for other_row, x in rows if other_row != row]
            loo = statistics.fmean(loo_values) if loo_values else 0.0
            base[row] = (1 - lam) * loo + lam * others_mean
            adv[row] = r - base[row]
            lam_out[row] = lam
    return adv, base, lam_out


# ---------------------------------------------------------------------- the JSPO authors' code, ported
# Zeng, Zhou, Arora, Zanette, JSPO-Official (github.com/guanning03/JSPO-Official, commit 6071c3b),
# code/verl/trainer/ppo/core_algos.py: compute_jspo_outcome_advantage and
# compute_jspo_plus_plus_outcome_advantage, called by their ray_trainer.compute_advantage with
# epsilon = 1e-6 (the default; not passed) and js_smooth_coef = algorithm.js_smooth_coef (0.0 by
# default, 0.99 in their run scripts). Written here from reading them, one row or prompt at a time.
#
# What their functions assume, and these ports with them: ``index`` (the uid per row) is only used
# to COUNT the prompts n; the batch of bs rows is cut by position into n consecutive blocks of
# m = bs // n responses (verl repeats each prompt's rows contiguously, and their trainer balances
# the batch only after the advantages). Every prompt must have the same m ≥ 2 responses (they
# assert m ≥ 2; a batch not divisible into n equal blocks fails to reshape). Rows have no validity
# mask: ``response_mask`` [bs, T] only multiplies the per-row advantage onto the tokens.
# Everything here is float64 (their tensors are float32 in verl).


def _blocks(scores, index):
    n = len(set(index))
    m = len(scores) // n
    if m < 2 or m * n != len(scores):
        raise ValueError(
            f"the authors' function needs {n} equal blocks of >= 2 rows, got {len(scores)} rows"
        )
    return [[float(x) for x in scores[p * m : (p + 1) * m]] for p in range(n)], m


def _on_tokens(per_row, response_mask):
    return [[a * float(t) for t in row] for a, row in zip(per_row, response_mask, strict=True)]


def authors_jspo(scores, index, response_mask, eps=1e-6):
    """JSPO as the authors' ``compute_jspo_outcome_advantage`` computes it.

    For response k of prompt i, from the OTHER prompts j ≠ i only: v = mean_j (unbiased var_j / m),
    s = mean_j (mean_j − mean of those means)², λ = v / (v + s + eps); the shrinkage target is the
    mean of every response of the other prompts (equal blocks: the mean of their means); the
    baseline is (1 − λ)·(mean of prompt i's other responses) + λ·target; A[k, t] = (r − b)·mask.
    With a single prompt their code falls back to that prompt's own v and s for λ, but the target is
    the mean of an empty selection: NaN, and so is every advantage (reproduced).

    Returns ``(advantages [bs][T], λ [bs], v [bs], s [bs])`` (lists).
    """
    blocks, m = _blocks(scores, index)
    n = len(blocks)
    adv, lam_rows, v_rows, s_rows = [], [], [], []
    for p, block in enumerate(blocks):
        others = [b for q, b in enumerate(blocks) if q != p]
        pool = others if others else blocks  # their fallback statistics when no other prompt exists
        means = [statistics.fmean(b) for b in pool]
        centre = statistics.fmean(means)
        v = statistics.fmean([statistics.variance(b) / m for b in pool])
        s = statistics.fmean([(x - centre) ** 2 for x in means])
        lam = v / (v + s + eps)
        target = statistics.fmean([x for b in others for x in b]) if others else math.nan
        for k, r in enumerate(block):
            loo = (sum(block) - block[k]) / (m - 1)
            adv.append(r - ((1 - lam) * loo + lam * target))
            lam_rows.append(lam)
            v_rows.append(v)
            s_rows.append(s)
    assert len(adv) == n * m
    return _on_tokens(adv, response_mask), lam_rows, v_rows, s_rows


#: the x-axis span W&B's "time weighted EMA" smoothing scales its decay by (authors' constant)
TIME_WEIGHTED_EMA_SPAN = 1642.65


def time_weighted_ema(values, coef):
    """The authors' smoothing of a history (their ``wandb_tw_ema``: W&B's time-weighted EMA), written
    as explicit weights rather than as a recursion: with w = min(sqrt(max(coef, 0)), 0.999) and
    d_i = w ** (SPAN / (i − 1)) for the i-th value (1-based, i ≥ 2), value k of n weighs
    Π_{i=k+1..n} d_i; the result is the weighted mean. NaN for an empty history."""
    if not values:
        return math.nan
    w = min(math.sqrt(max(float(coef), 0.0)), 0.999)
    decay = [1.0] + [w ** (TIME_WEIGHTED_EMA_SPAN / (i - 1)) for i in range(2, len(values) + 1)]
    weights = [1.0] * len(
        values
    )  # weights[k] = Π_{i>k} decay[i], filled from the newest value back
    for k in range(len(values) - 2, -1, -1):
        weights[k] = weights[k + 1] * decay[k + 1]
    return math.fsum(wk * y for wk, y in zip(weights, values, strict=True)) / math.fsum(weights)


def authors_jspo_plus_plus(scores, index, response_mask, history, smooth_coef=0.0, eps=1e-6):
    """One call of the authors' ``compute_jspo_plus_plus_outcome_advantage``.

    One λ and one target for the whole batch (no leave-one-prompt-out): target = mean of all
    rewards, v = mean over prompts of (unbiased var / m), s = mean over prompts of (prompt mean −
    target)², λ = v / (v + s + eps). ``history`` (a list, mutated: their module-level lists) gets
    (λ, target) appended on every call; when ``smooth_coef`` > 0 the λ and target used are the
    :func:`time_weighted_ema` of the whole history, this call included. Baseline (1 − λ)·(mean of
    the prompt's other responses) + λ·target; A[k, t] = (r − b)·mask.

    Returns ``(advantages [bs][T], λ used, v, s)``.
    """
    blocks, m = _blocks(scores, index)
    means = [statistics.fmean(b) for b in blocks]
    target = statistics.fmean([x for b in blocks for x in b])
    v = statistics.fmean([statistics.variance(b) / m for b in blocks])
    s = statistics.fmean([(x - target) ** 2 for x in means])
    lam = v / (v + s + eps)
    history.append((lam, target))
    if smooth_coef > 0:
        lam = time_weighted_ema([h[0] for h in history], smooth_coef)
        target = time_weighted_ema([h[1] for h in history], smooth_coef)
    adv = []
    for block in blocks:
        for k, r in enumerate(block):
            loo = (sum(block) - block[k]) / (m - 1)
            adv.append(r - ((1 - lam) * loo + lam * target))
    return _on_tokens(adv, response_mask), lam, v, s


class ReferenceJSPOPlusPlus:
    """``jspo_plus_plus`` as we define it on every batch (uneven groups, padding rows, singletons),
    from the formulas, one prompt at a time, the whole (λ, μ) history kept in a list.

    Over the prompts with a valid response: μ = mean of the group means, s = population variance
    of the group means, v = mean of (unbiased var / m_j) over prompts with m_j ≥ 2 (0 if none);
    λ_t = v / (v + s + eps). Smoothed as the authors do when ``smooth_coef`` > 0. A prompt with one
    valid response has no leave-one-out mean: its baseline is μ (reported λ = 1). A batch with no
    valid row adds nothing to the history. Equal to :func:`authors_jspo_plus_plus` when every
    prompt has the same number of responses (the mean of the means is then the mean of all).
    """

    def __init__(self, smooth_coef=0.0, eps=1e-6):
        self.smooth_coef, self.eps = smooth_coef, eps
        self.history = []

    def __call__(self, rewards, group_ids, mask=None, update=True):
        n = len(rewards)
        adv, base, lam_rows = [0.0] * n, [0.0] * n, [0.0] * n
        groups = valid_groups(rewards, group_ids, mask)
        if not groups:
            return adv, base, lam_rows, None
        values = [[r for _, r in rows] for rows in groups.values()]
        means = [statistics.fmean(x) for x in values]
        mu = statistics.fmean(means)
        s = statistics.pvariance(means)
        noises = [statistics.variance(x) / len(x) for x in values if len(x) >= 2]
        v = statistics.fmean(noises) if noises else 0.0
        history = self.history + [(v / (v + s + self.eps), mu)]
        lam, target = history[-1]
        if self.smooth_coef > 0:
            lam = time_weighted_ema([h[0] for h in history], self.smooth_coef)
            target = time_weighted_ema([h[1] for h in history], self.smooth_coef)
        for rows in groups.values():
            for row, r in rows:
                others = [x for other_row, x in rows if other_row != row]
                weight = lam if others else 1.0
                base[row] = (1 - weight) * (
                    statistics.fmean(others) if others else 0.0
                ) + weight * target
                adv[row] = r - base[row]
                lam_rows[row] = weight
        if update:
            self.history = history
        return adv, base, lam_rows, {"v": v, "s": s, "lambda": lam, "mean": target}


def authors_ebpo_batch(rewards, group_ids, mask=None, norm_adv_by_std=True, eps=1e-6):
    """A port, written from the description of the EBPO authors' verl function (issue #10 item 2,
    shared/spec/EBPO.md), of one call of their estimator: statistics of the current batch only.

    μ = mean of the group means; σ² = population variance of every reward; τ² = population
    variance of the group means; S_m = (σ²/n_m)/(σ²/n_m + τ²), 1 if that denominator ≤ eps;
    V_m = (1 − S_m)·r̄_m + S_m·μ; a = r − V; Â = (a − mean a)/(std a + eps) (unbiased std), or
    a − mean a when ``norm_adv_by_std`` is False. Padding rows (mask 0) are dropped.
    """
    groups = valid_groups(rewards, group_ids, mask)
    if not groups:
        return [0.0] * len(rewards)
    means = {g: statistics.fmean([r for _, r in rows]) for g, rows in groups.items()}
    all_rewards = [r for rows in groups.values() for _, r in rows]
    mu = statistics.fmean(means.values())
    sigma2 = statistics.pvariance(all_rewards)
    tau2 = statistics.pvariance(list(means.values()))
    raw = [0.0] * len(rewards)
    for g, rows in groups.items():
        noise = sigma2 / len(rows)
        s = noise / (noise + tau2) if noise + tau2 > eps else 1.0
        for row, r in rows:
            raw[row] = r - ((1 - s) * means[g] + s * mu)
    valid_rows = sorted(row for rows in groups.values() for row, _ in rows)
    return normalize(raw, valid_rows, "batch" if norm_adv_by_std else "center", eps)


class ReferenceEBPO:
    """EBPO with every observation kept in lists; statistics recomputed from scratch each call.

    ``ema``: an observation made ``k`` steps before the current one weighs ``γ**k``.
    """

    def __init__(
        self,
        prior="history",
        half_life=50.0,
        within_variance="pooled",
        tau2_mode="raw",
        normalize="batch",
        per_cluster=False,
        min_cluster_groups=8,
        eps=1e-6,
        beta_binomial=False,
        warmup_groups=8,
        prior_mean_from="rewards",
    ):
        self.prior, self.half_life, self.within_variance = prior, half_life, within_variance
        self.prior_mean = prior_mean_from
        self.tau2, self.normalize, self.eps = tau2_mode, normalize, eps
        self.per_cluster, self.min_cluster_groups = per_cluster, min_cluster_groups
        self.beta_binomial, self.warmup_groups = beta_binomial, warmup_groups
        self.history = []  # (step, cluster, kind, value)
        self.step = 0

    def _weighted(self, kind, step_now, cluster=None):
        gamma = 0.5 ** (1 / self.half_life) if self.prior == "ema" else 1.0
        items = [
            (gamma ** (step_now - s), v)
            for s, c, k, v in self.history
            if k == kind and (cluster is None or c == cluster)
        ]
        total = sum(w for w, _ in items)
        if total == 0:
            return 0.0, 0.0, 0.0
        mean = sum(w * v for w, v in items) / total
        var = sum(w * (v - mean) ** 2 for w, v in items) / total
        return total, mean, var

    def _params(self, step_now, cluster=None):
        _, mu, pooled = self._weighted("reward", step_now, cluster)
        count_means, means_mean, tau2 = self._weighted("group_mean", step_now, cluster)
        _, within_mean, _ = self._weighted("group_var", step_now, cluster)
        sigma2 = pooled if self.within_variance == "pooled" else within_mean
        if self.prior_mean == "group_means":
            mu = means_mean
        return mu, sigma2, tau2, means_mean, count_means

    def __call__(self, rewards, group_ids, mask=None, clusters=None, update=True):
        saved = (list(self.history), self.step)
        if self.prior == "batch":
            self.history = []
        groups = valid_groups(rewards, group_ids, mask)
        step_now = self.step + 1
        for _g, rows in groups.items():
            values = [r for _, r in rows]
            cluster = clusters[rows[0][0]] if clusters is not None else None
            for r in values:
                self.history.append((step_now, cluster, "reward", r))
            self.history.append((step_now, cluster, "group_mean", statistics.fmean(values)))
            if len(values) >= 2:
                self.history.append((step_now, cluster, "group_var", statistics.variance(values)))
        n = len(rewards)
        raw, base, shrink = [0.0] * n, [0.0] * n, [0.0] * n
        valid_rows = []
        for _g, rows in groups.items():
            values = [r for _, r in rows]
            size = len(values)
            mu, sigma2, tau2, means_mean, count_means = self._params(step_now)
            if self.per_cluster:
                cluster = clusters[rows[0][0]]
                c_params = self._params(step_now, cluster)
                if c_params[4] >= self.min_cluster_groups:
                    mu, sigma2, tau2, means_mean, count_means = c_params
            if self.beta_binomial:
                alpha = beta = 1.0
                m, v = means_mean, tau2
                if (
                    count_means >= self.warmup_groups
                    and 0 < m < 1
                    and 0 < v < m * (1 - m) * (1 - 1e-9)
                ):
                    c = m * (1 - m) / v - 1
                    alpha, beta = m * c, (1 - m) * c
                s = (alpha + beta) / (alpha + beta + size)
                target = alpha / (alpha + beta)
            else:
                if self.tau2 == "corrected":
                    tau2 = max(tau2 - sigma2 / size, 0.0)
                denominator = sigma2 / size + tau2
                s = (sigma2 / size) / denominator if denominator > self.eps else 1.0
                target = mu
            baseline = (1 - s) * statistics.fmean(values) + s * target
            for row, r in rows:
                base[row], raw[row], shrink[row] = baseline, r - baseline, s
                valid_rows.append(row)
        adv = normalize(raw, sorted(valid_rows), self.normalize, self.eps)
        if update and groups:
            self.step = step_now
            if self.prior == "batch":
                self.history = []
        else:
            self.history, self.step = saved
        return adv, base, shrink, raw


def two_pass_moments(values):
    if not values:
        return 0, 0.0, 0.0
    mean = math.fsum(values) / len(values)
    return len(values), mean, math.fsum((v - mean) ** 2 for v in values)
