"""The report of ``ebpo simulate``: Markdown tables of the experiments' rows and the four sections
of ``results.md`` (each runs its experiment, renders its tables and, if asked, writes its plots).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ebpo.lab.simulation.bandit import BanditConfig
from ebpo.lab.simulation.baseline import ORACLE, baseline_quality
from ebpo.lab.simulation.saturation import penalty_curve, saturation
from ebpo.lab.simulation.specs import accepts_normalize, reports_shrinkage
from ebpo.lab.simulation.sweeps import PRIOR_VARIANTS, learning_rate_study, prior_study
from ebpo.utils.plotting import plot_lines, plot_panels

__all__ = [
    "bandit_section",
    "baseline_section",
    "format_value",
    "markdown_table",
    "priors_section",
    "saturation_section",
]


def markdown_table(
    rows: Iterable[Mapping[str, Any]],
    columns: Sequence[str],
    *,
    headers: Sequence[str] | None = None,
    digits: int = 4,
) -> str:
    """A GitHub Markdown table of ``rows`` restricted to ``columns`` (floats to ``digits`` significant)."""
    headers = list(columns if headers is None else headers)
    if len(headers) != len(columns):
        raise ValueError(f"headers has {len(headers)} entries but columns has {len(columns)}")
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join("---" for _ in headers) + " |"]
    for row in rows:
        lines.append(
            "| " + " | ".join(format_value(row.get(c, ""), digits) for c in columns) + " |"
        )
    return "\n".join(lines)


def format_value(value: Any, digits: int = 4) -> str:
    """A table cell: floats to ``digits`` significant digits, NaN as ``–``, anything else as text."""
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        return f"{value:.{digits}g}"
    return str(value)


def baseline_section(size: Mapping[str, Any], seed: int, out_dir: Path, plots: bool) -> str:
    """Section 1 of ``results.md``: :func:`baseline_quality` run with ``size`` (its keyword
    arguments); the MSE table, the shrinkage table and, if ``plots``, ``baseline_mse.png``."""
    rows = baseline_quality(seed=seed, progress=True, **size)
    estimators = [e for e in dict.fromkeys(r["estimator"] for r in rows)]
    mse = _mse_table(rows, estimators)
    cols = ["scenario", "G", "σ²/G", "(1−S)σ²/G", "oracle z", *estimators]
    text = [
        "## 1. Baseline quality (Theorem 3.3)\n",
        "MSE of each estimator's baseline against the true success rate θ (lower is better). "
        "`σ²/G` is the group mean's risk (GRPO), `(1−S)σ²/G` Theorem 3.3's risk of the shrinkage baseline "
        "with the true prior; `oracle_eb` is that baseline simulated (it should match: `oracle z` is its "
        "deviation from the closed form in Monte-Carlo standard errors). The estimators "
        "must estimate the prior (ebpo: paper defaults, pooled σ² and raw τ²; ebpo_within: within σ² and "
        "corrected τ²).\n",
        markdown_table(mse, cols, digits=3),
        "\nShrinkage S (mean weight on the prior) against the optimum of Theorem 3.3, fraction of groups "
        "with zero signal, and variance of the advantages.\n",
    ]
    table = _shrinkage_table(rows, mse, estimators)
    text.append(markdown_table(table, list(table[0]), digits=3))
    if plots:
        png = _plot_baseline_mse(rows, estimators, out_dir)
        text.append(f"\n![baseline MSE]({png.name})")
    return "\n".join(text) + "\n"


def _mse_table(rows: list[dict[str, Any]], estimators: list[str]) -> list[dict[str, Any]]:
    """One row per (scenario, G): each estimator's MSE, the closed forms ``σ²/G`` and ``(1−S)σ²/G``,
    and the oracle's Monte-Carlo z-score against Theorem 3.3."""
    mse = _pivot(rows, "mse", estimators)
    for row in mse:
        ref = next(r for r in rows if r["scenario"] == row["scenario"] and r["G"] == row["G"])
        row["σ²/G"] = ref["group_mean_mse"]
        row["(1−S)σ²/G"] = ref["thm33_mse"]
        oracle = next(
            (
                r
                for r in rows
                if r["scenario"] == row["scenario"]
                and r["G"] == row["G"]
                and r["estimator"] == ORACLE
            ),
            None,
        )
        if oracle is not None:  # Monte-Carlo z-score of the oracle against the closed form
            row["oracle z"] = (oracle["mse"] - oracle["thm33_mse"]) / oracle["mse_se"]
    return mse


def _shrinkage_table(
    rows: list[dict[str, Any]],
    mse: list[dict[str, Any]],
    estimators: list[str],
) -> list[dict[str, Any]]:
    """One row per (scenario, G) of ``mse``: the optimal S, each estimator's mean S, the
    zero-signal fraction of GRPO and EBPO and the advantage variance of GRPO, RLOO and EBPO."""
    shrink_estimators = [e for e in estimators if e != ORACLE and reports_shrinkage(e)]
    table = []
    for row in mse:
        sel = [r for r in rows if r["scenario"] == row["scenario"] and r["G"] == row["G"]]
        out = {"scenario": row["scenario"], "G": row["G"], "S*": sel[0]["optimal_shrinkage"]}
        out.update(
            {
                f"S {r['estimator']}": r["shrinkage"]
                for r in sel
                if r["estimator"] in shrink_estimators
            }
        )
        out.update(
            {
                f"zero-signal {r['estimator']}": r["zero_signal_frac"]
                for r in sel
                if r["estimator"] in ("grpo", "ebpo")
            }
        )
        out.update(
            {
                f"var(A) {r['estimator']}": r["adv_var"]
                for r in sel
                if r["estimator"] in ("grpo", "rloo", "ebpo")
            }
        )
        table.append(out)
    return table


def _plot_baseline_mse(rows: list[dict[str, Any]], estimators: list[str], out_dir: Path) -> Path:
    """``baseline_mse.png``: MSE against G, one panel per scenario, with Theorem 3.3's curve."""
    panels = {}
    for scenario in dict.fromkeys(r["scenario"] for r in rows):
        sel = [r for r in rows if r["scenario"] == scenario]
        gs = sorted({r["G"] for r in sel})
        series = {
            e: (gs, [_find(sel, "mse", G=g, estimator=e) for g in gs])
            for e in estimators
            if e != ORACLE
        }
        series["Thm 3.3 (1−S)σ²/G"] = (gs, [_find(sel, "thm33_mse", G=g) for g in gs])
        panels[scenario] = series
    return plot_panels(
        out_dir / "baseline_mse.png",
        panels,
        xlabel="G (responses per prompt)",
        ncols=2,
        title="Baseline MSE vs θ",
        logy=True,
    )


def saturation_section(size: Mapping[str, Any], seed: int, out_dir: Path, plots: bool) -> str:
    """Section 2: :func:`saturation` run with ``size``; if ``plots``, :func:`penalty_curve` as
    ``saturation_penalty.png``."""
    rows = saturation(seed=seed, progress=True, **size)
    cols = [
        "scenario", "estimator", "failed_frac", "failed_signal_frac", "failed_adv", "failed_raw",
        "predicted_raw", "predicted_centred", "allfail_signal_frac", "allfail_adv",
    ]  # fmt: skip
    headers = [
        "scenario", "estimator", "all-zero groups", "… with signal", "their Â", "raw r−V",
        "Thm 3.2 −Sμ", "−S·r̄_batch", "all-fail batch: signal", "all-fail Â",
    ]  # fmt: skip
    text = [
        f"## 2. Saturated failure (Theorem 3.2, Corollary 3.5), G = {size['group_size']}\n",
        "All-zero groups: the fraction that still gets a non-zero advantage, the mean advantage of their "
        "responses (after the estimator's normalisation) and before it (`raw r−V`), Theorem 3.2's `−S·μ_glob`, "
        "and `−S·r̄_batch`, which is what centring leaves of it (the batch mean of the raw advantages is "
        "`S(r̄_batch − μ)`). Last two columns: one extra batch in which every group fails, after the "
        "history above — batch normalisation (`ebpo`, `ebpo_center`, `ebpo_bb`) gives it no signal at all; "
        "only `ebpo_none` keeps the penalty.\n",
        markdown_table(rows, cols, headers=headers, digits=3),
    ]
    if plots:
        png = _plot_penalty_curve(size, seed, out_dir)
        text.append(f"\n![saturation penalty]({png.name})")
    return "\n".join(text) + "\n"


#: prompts a step of the penalty curve: at μ = 0.95 about 0.3 % of G = 4 groups fail entirely, so
#: 5 steps of 1024 prompts hold some 16 all-zero groups; at the experiment's --quick size (64
#: prompts) μ = 0.85 had none, its point was NaN and every line broke between μ = 0.8 and 0.9
CURVE_PROMPTS = 1024


def _plot_penalty_curve(size: Mapping[str, Any], seed: int, out_dir: Path) -> Path:
    """``saturation_penalty.png``: :func:`penalty_curve` (at least :data:`CURVE_PROMPTS` prompts
    a step, whatever the experiment's size). A μ without any all-zero group has no point: it is
    left out of the lines (which join its neighbours) and named in the title."""
    curve = penalty_curve(
        group_size=size["group_size"],
        prompts_per_step=max(size["prompts_per_step"], CURVE_PROMPTS),
        seed=seed,
    )
    kept = [r for r in curve if math.isfinite(r["raw"])]
    mu = [r["mu"] for r in kept]
    series = {
        "Thm 3.2: −S·μ_glob": (mu, [r["predicted_raw"] for r in kept]),
        "raw (normalize=none)": (mu, [r["raw"] for r in kept]),
        "centred (= −S·r̄_batch)": (mu, [r["centred"] for r in kept]),
        "batch-normalised (default)": (mu, [r["normalised"] for r in kept]),
    }
    missing = [f"{r['mu']:.2f}" for r in curve if not math.isfinite(r["raw"])]
    note = f" (no all-zero group sampled at μ = {', '.join(missing)}: no point)" if missing else ""
    return plot_lines(
        out_dir / "saturation_penalty.png",
        series,
        title=f"EBPO advantage of all-zero groups, θ ~ Beta(4μ, 4(1−μ)), G = {size['group_size']}"
        + note,
        xlabel="μ (mean success rate)",
        ylabel="mean advantage",
    )


def _seeds(seed: int, size: Mapping[str, Any]) -> tuple[list[int], list[int]]:
    validation = [seed + 10_000 + i for i in range(size["validation"])]
    report = [seed + i for i in range(size["report"])]
    return validation, report


def bandit_section(size: Mapping[str, Any], seed: int, out_dir: Path, plots: bool) -> str:
    """Section 3: :func:`learning_rate_study` (``size``: ``estimators, group_sizes,
    learning_rates, steps``, the numbers of ``validation`` and ``report`` seeds, ``shared``); if
    ``plots``, ``bandit_learning_curves.png``."""
    config = BanditConfig(shared=size["shared"])
    validation, report = _seeds(seed, size)
    study = learning_rate_study(
        config,
        estimators=size["estimators"],
        group_sizes=size["group_sizes"],
        learning_rates=size["learning_rates"],
        steps=size["steps"],
        validation_seeds=validation,
        report_seeds=report,
        progress=True,
    )
    fair, same, grid = _bandit_tables(study, size)
    text = [
        f"## 3. Policy learning in a contextual bandit ({config.num_prompts} prompts, "
        f"{config.num_answers} answers, {config.num_topics} topics, {_parameters(config)}, "
        f"{size['steps']} steps of {config.prompts_per_step} prompts, G answers each)\n",
        "Final expected success rate on the training prompts (mean of the last 10% of the curve, "
        f"± s.e. over report seeds {report}).\n",
        f"**Each estimator at its own best learning rate** (chosen on validation seeds {validation}, "
        f"from {list(size['learning_rates'])}):\n",
        markdown_table(fair, list(fair[0])),
        *_edge_note(
            {f"{e} G={g}": lr for (e, g), lr in study["best_lr"].items()}, size["learning_rates"]
        ),
        f"\n**All estimators at the same learning rate {study['equal_lr']:g}:**\n",
        markdown_table(same, list(same[0])),
        "\nThe sweep on the validation seeds (final success; * = chosen):\n",
        markdown_table(grid, list(grid[0])),
    ]
    if plots:
        png = _plot_learning_curves(study, size, out_dir)
        text.append(f"\n![bandit learning curves]({png.name})")
    return "\n".join(text) + "\n"


def _bandit_tables(
    study: Mapping[str, Any], size: Mapping[str, Any]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """``(at each estimator's best rate, all at the equal rate, the validation sweep)`` of
    :func:`learning_rate_study`'s results."""
    rows, best, equal = study["rows"], study["best_lr"], study["equal_lr"]
    gs = list(size["group_sizes"])

    def cell(spec: str, g: int, lr: float, with_lr: bool) -> str:
        r = _find_row(rows, split="report", estimator=spec, G=g, lr=lr)
        text = _mean_se(r["final"], r["final_se"])
        return text + (f" (lr {lr:g})" if with_lr else "")

    fair = [
        {"estimator": e, **{f"G={g}": cell(e, g, best[(e, g)], True) for g in gs}}
        for e in size["estimators"]
    ]
    same = [
        {"estimator": e, **{f"G={g}": cell(e, g, equal, False) for g in gs}}
        for e in size["estimators"]
    ]
    grid = []
    for e in size["estimators"]:
        for g in gs:
            row = {"estimator": e, "G": g}
            for lr in size["learning_rates"]:
                val = _find_row(rows, split="validation", estimator=e, G=g, lr=lr)
                row[f"lr {lr:g}"] = f"{val['final']:.3f}" + ("*" if best[(e, g)] == lr else "")
            grid.append(row)
    return fair, same, grid


def _plot_learning_curves(study: Mapping[str, Any], size: Mapping[str, Any], out_dir: Path) -> Path:
    """``bandit_learning_curves.png``: mean ± s.e. over report seeds, one panel per G at the best
    and at the equal learning rate."""
    best, equal = study["best_lr"], study["equal_lr"]
    gs = list(size["group_sizes"])
    panels: dict[str, Any] = {}
    bands: dict[str, Any] = {}
    for title, pick in (
        ("best lr", lambda e, g: best[(e, g)]),
        (f"lr {equal:g}", lambda e, g: equal),
    ):
        for g in gs:
            key = f"G={g}, {title}"
            panels[key], bands[key] = {}, {}
            for e in size["estimators"]:
                curves = study["curves"][(e, g, pick(e, g))]
                x = list(range(curves.shape[1]))
                mean = curves.mean(0)
                se = (
                    curves.std(0, ddof=1) / np.sqrt(len(curves))
                    if len(curves) > 1
                    else np.zeros_like(mean)
                )
                panels[key][e] = (x, mean)
                bands[key][e] = (mean - se, mean + se)
    return plot_panels(
        out_dir / "bandit_learning_curves.png",
        panels,
        bands=bands,
        ncols=len(gs),
        title="Expected success on training prompts (± s.e.)",
    )


def priors_section(size: Mapping[str, Any], seed: int, out_dir: Path, plots: bool) -> str:
    """Section 4: :func:`prior_study` for each ``normalize`` of ``size`` (also ``learning_rates,
    steps, validation, report, shared``); if ``plots``, ``bandit_priors_<normalize>.png``."""
    config = BanditConfig(shared=size["shared"])
    validation, report = _seeds(seed, size)
    text = [
        f"## 4. Priors and data order (Proposition 3.8), G = 4, {_parameters(config)}\n",
        "History / batch / EMA (half-life 3 steps) priors on a policy that improves; topic-ordered "
        "vs shuffled stream; per-cluster (per-topic) priors. `prior error` = mean (μ_m − θ_m)² of "
        "the prior mean each group was shrunk toward against its current true success rate; "
        "`Var θ (batch)` is that error for a prior equal to the batch's own mean θ (Prop. 3.8: "
        "random order ≈ Var θ, topic order removes the between-topic part). With batch "
        "normalisation a single prior's mean cancels from the advantages (only S matters), so the "
        "same study is repeated with `normalize=none`.\n",
    ]
    for i, normalize in enumerate(size["normalize"]):
        # Rows of estimators without a ``normalize`` option do not depend on it: run them once.
        variants = [v for v in PRIOR_VARIANTS if i == 0 or accepts_normalize(v[1])]
        study = prior_study(
            config,
            variants=variants,
            learning_rates=size["learning_rates"],
            steps=size["steps"],
            validation_seeds=validation,
            report_seeds=report,
            normalize=normalize,
            progress=True,
        )
        rows = study["rows"]
        edge = _edge_note({r["variant"]: r["lr"] for r in rows}, size["learning_rates"])
        for r in rows:
            r["lr"] = f"{r['lr']:g}"
            r["final ± se"] = _mean_se(r["final"], r["final_se"])
        cols = [
            "variant", "lr", "final ± se", "prior_error", "theta_var", "shrinkage", "zero_signal",
        ]  # fmt: skip
        headers = [
            "variant", "lr (val.)", "final success", "prior error", "Var θ (batch)", "mean S",
            "zero-signal groups",
        ]  # fmt: skip
        note = "" if i == 0 else " (GRPO rows as above)"
        text += [
            f"\n**EBPO with normalize={normalize}{note}:**\n",
            markdown_table(rows, cols, headers=headers, digits=3),
            *edge,
        ]
        if plots:
            acc = {
                label: (list(range(c["train_acc"].shape[1])), c["train_acc"].mean(0))
                for label, c in study["curves"].items()
            }
            err = {
                label: (list(range(c["prior_error"].shape[1])), np.nanmean(c["prior_error"], 0))
                for label, c in study["curves"].items()
                if np.isfinite(c["prior_error"]).any()
            }
            png = plot_panels(
                out_dir / f"bandit_priors_{normalize}.png",
                {"expected success (train)": acc, "prior error (μ − θ)²": err},
                ncols=2,
                title=f"Priors and data order, normalize={normalize}",
            )
            text.append(f"\n![priors {normalize}]({png.name})")
    return "\n".join(text) + "\n"


def _edge_note(chosen: Mapping[str, float], grid: Sequence[float]) -> list[str]:
    """A paragraph (as a one-item list; none when it does not apply) naming the estimators whose
    validation-chosen learning rate is the top or the bottom of the grid: their best rate may lie
    beyond it, and a table of them compares the grid's edge, not their optima."""
    rates = sorted({float(lr) for lr in grid})
    if len(rates) < 2 or not chosen:
        return []
    parts = []
    for edge, where, beyond in ((rates[-1], "top", "above"), (rates[0], "bottom", "below")):
        names = [name for name, lr in chosen.items() if float(lr) == edge]
        if not names:
            continue
        who = "every row" if len(names) == len(chosen) else ", ".join(names)
        parts.append(
            f"chosen at the {where} of the grid ({edge:g}): {who} — the best rate may lie {beyond} it"
        )
    if not parts:
        return []
    return [
        "\n**Learning rate at the edge of the grid:** "
        + "; ".join(parts)
        + ". These rows compare the estimators at the grid's edge, not at their own optima "
        "(`ebpo simulate --quick` has a 3-rate grid; the full run's is wider)."
    ]


def _parameters(config: BanditConfig) -> str:
    return "shared parameters" if config.shared else "per-prompt table"


def _mean_se(mean: float, se: float) -> str:
    """``mean ± se`` to three decimals; the mean alone when the s.e. is NaN (one seed)."""
    return f"{mean:.3f} ± {se:.3f}" if np.isfinite(se) else f"{mean:.3f}"


def _find_row(rows: list[dict[str, Any]], **match: Any) -> dict[str, Any]:
    """The first row whose entries equal ``match``."""
    return next(r for r in rows if all(r[k] == v for k, v in match.items()))


def _find(rows: list[dict[str, Any]], key: str, **match: Any) -> Any:
    """Entry ``key`` of :func:`_find_row`."""
    return _find_row(rows, **match)[key]


def _pivot(rows: list[dict[str, Any]], value: str, columns: list[str]) -> list[dict[str, Any]]:
    table: dict[tuple[str, int], dict[str, Any]] = {}
    for r in rows:
        key = (r["scenario"], r["G"])
        table.setdefault(key, {"scenario": r["scenario"], "G": r["G"]})[r["estimator"]] = r[value]
    return list(table.values())
