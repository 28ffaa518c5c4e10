"""``ebpo simulate``: the simulation lab (no language model, seconds to a couple of minutes).

Writes ``results.md`` (Markdown tables) and PNG plots to ``--output-dir`` and prints the tables.
The experiments themselves live in :mod:`ebpo.lab.simulation`; this module only chooses their sizes
(``--quick`` for CI), formats and plots them.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

EXPERIMENTS = ("baseline", "saturation", "bandit", "priors")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "simulate",
        help="simulated experiments: baseline quality, saturated failure, bandit learning",
        description=(
            "Simulated experiments showing when EBPO helps and when it does not: baseline MSE vs "
            "Theorem 3.3, signal on all-zero groups with/without batch normalisation, and a "
            "contextual-bandit policy trained by REINFORCE with each estimator (each at its own "
            "best learning rate, chosen on validation seeds). Reproducible by --seed."
        ),
    )
    parser.add_argument(
        "--experiments",
        default=",".join(EXPERIMENTS),
        help=f"comma-separated subset of {','.join(EXPERIMENTS)} (default: all)",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes (a few seconds; for CI)")
    parser.add_argument("--seed", type=int, default=0, help="base random seed (>= 0, default 0)")
    parser.add_argument("--output-dir", default="simulate-results", help="where results.md and the PNGs go")
    parser.add_argument(
        "--shared",
        action="store_true",
        help="bandit with shared parameters (prompt features; learning transfers between prompts) instead of a per-prompt table",
    )
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.set_defaults(func=run)
    return parser


def settings(quick: bool) -> dict[str, dict[str, Any]]:
    """Sizes of each experiment for the default and the ``--quick`` run."""
    if quick:
        return {
            "baseline": {"group_sizes": (2, 4, 32), "steps": 4, "prompts_per_step": 64, "estimators": ("grpo", "rloo", "ebpo", "ebpo_within")},
            "saturation": {"group_size": 4, "steps": 4, "prompts_per_step": 64},
            "bandit": {
                "estimators": ("grpo", "dr_grpo", "ebpo"),
                "group_sizes": (4,),
                "learning_rates": (30.0, 100.0, 300.0),
                "steps": 20,
                "validation": 1,
                "report": 2,
            },
            "priors": {"learning_rates": (30.0, 100.0, 300.0), "steps": 20, "validation": 1, "report": 2, "normalize": ("batch",)},
        }
    return {
        "baseline": {"group_sizes": (2, 4, 8, 16, 32), "steps": 15, "prompts_per_step": 256},
        "saturation": {"group_size": 4, "steps": 15, "prompts_per_step": 256},
        "bandit": {
            "estimators": ("grpo", "dr_grpo", "rloo", "reinforce_pp", "jspo", "ebpo", "ebpo_bb"),
            "group_sizes": (2, 4, 16),
            "learning_rates": (30.0, 100.0, 300.0, 1000.0, 3000.0),
            "steps": 50,
            "validation": 1,
            "report": 3,
        },
        "priors": {"learning_rates": (30.0, 100.0, 300.0, 1000.0), "steps": 50, "validation": 1, "report": 3, "normalize": ("batch", "none")},
    }


def check_args(args: argparse.Namespace) -> tuple[list[str], Path]:
    """(chosen experiments, output directory), checked before anything runs; ValueError naming the
    option otherwise (one line, exit 2)."""
    from ebpo.utils.files import check_output_path

    chosen = [e.strip() for e in str(args.experiments).split(",") if e.strip()]
    unknown = sorted(set(chosen) - set(EXPERIMENTS))
    if unknown or not chosen:
        raise ValueError(f"--experiments must be a comma-separated subset of {','.join(EXPERIMENTS)}, got {args.experiments!r}")
    if isinstance(args.seed, bool) or not isinstance(args.seed, int) or args.seed < 0:
        raise ValueError(f"--seed must be an integer >= 0, got {args.seed!r}")
    return chosen, check_output_path(args.output_dir, "--output-dir", kind="dir")


def run(args: argparse.Namespace) -> int:
    import time

    import torch

    from ebpo.lab import simulation as sim
    from ebpo.utils.files import atomic_write

    chosen, out_dir = check_args(args)
    # Small tensors: extra threads only add overhead on a shared machine.
    torch.set_num_threads(1)
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = not args.no_plots
    sizes = settings(args.quick)
    seed = int(args.seed)
    sections: list[str] = []
    start = time.perf_counter()
    timings: dict[str, float] = {}
    for name in EXPERIMENTS:
        if name not in chosen:
            continue
        t0 = time.perf_counter()
        size = {**sizes[name], "shared": bool(args.shared)} if name in ("bandit", "priors") else sizes[name]
        section = _SECTIONS[name](sim, size, seed, out_dir, plots)
        timings[name] = time.perf_counter() - t0
        sections.append(section)
        print(section, flush=True)
    wall = time.perf_counter() - start
    header = (
        "# ebpo simulate — results\n\n"
        f"Command: `ebpo simulate --experiments {','.join(chosen)} --seed {seed}{' --quick' if args.quick else ''}{' --shared' if args.shared else ''}` · "
        f"wall time {wall:.1f} s ({', '.join(f'{k} {v:.1f} s' for k, v in timings.items())}).\n"
        "See docs/simulation.md for what each experiment shows and how to read it.\n"
    )
    path = out_dir / "results.md"
    with atomic_write(path) as f:
        f.write(header + "\n" + "\n".join(sections))
    print(f"wrote {path} ({wall:.1f} s)")
    return 0


# ----------------------------------------------------------------------------- sections
def _baseline(sim, size: dict[str, Any], seed: int, out_dir: Path, plots: bool) -> str:
    rows = sim.baseline_quality(seed=seed, progress=True, **size)
    estimators = [e for e in dict.fromkeys(r["estimator"] for r in rows)]
    mse = _pivot(rows, "mse", estimators)
    for row in mse:
        ref = next(r for r in rows if r["scenario"] == row["scenario"] and r["G"] == row["G"])
        row["σ²/G"] = ref["group_mean_mse"]
        row["(1−S)σ²/G"] = ref["thm33_mse"]
        oracle = next((r for r in rows if r["scenario"] == row["scenario"] and r["G"] == row["G"] and r["estimator"] == "oracle_eb"), None)
        if oracle is not None:  # Monte-Carlo z-score of the oracle against the closed form
            row["oracle z"] = (oracle["mse"] - oracle["thm33_mse"]) / oracle["mse_se"]
    cols = ["scenario", "G", "σ²/G", "(1−S)σ²/G", "oracle z", *estimators]
    text = [
        "## 1. Baseline quality (Theorem 3.3)\n",
        "MSE of each estimator's baseline against the true success rate θ (lower is better). "
        "`σ²/G` is the group mean's risk (GRPO), `(1−S)σ²/G` Theorem 3.3's risk of the shrinkage baseline "
        "with the true prior; `oracle_eb` is that baseline simulated (it should match: `oracle z` is its "
        "deviation from the closed form in Monte-Carlo standard errors). The estimators "
        "must estimate the prior (ebpo: paper defaults, pooled σ² and raw τ²; ebpo_within: within σ² and "
        "corrected τ²).\n",
        sim.markdown_table(mse, cols, digits=3),
        "\nShrinkage S (mean weight on the prior) against the optimum of Theorem 3.3, fraction of groups "
        "with zero signal, and variance of the advantages.\n",
    ]
    shrink_estimators = [e for e in estimators if e.startswith("ebpo") or e == "jspo"]
    table = []
    for row in mse:
        sel = [r for r in rows if r["scenario"] == row["scenario"] and r["G"] == row["G"]]
        out = {"scenario": row["scenario"], "G": row["G"], "S*": sel[0]["optimal_shrinkage"]}
        out.update({f"S {r['estimator']}": r["shrinkage"] for r in sel if r["estimator"] in shrink_estimators})
        out.update({f"zero-signal {r['estimator']}": r["zero_signal_frac"] for r in sel if r["estimator"] in ("grpo", "ebpo")})
        out.update({f"var(A) {r['estimator']}": r["adv_var"] for r in sel if r["estimator"] in ("grpo", "rloo", "ebpo")})
        table.append(out)
    text.append(sim.markdown_table(table, list(table[0]), digits=3))
    if plots:
        from ebpo.utils.plotting import plot_panels

        panels = {}
        for scenario in dict.fromkeys(r["scenario"] for r in rows):
            sel = [r for r in rows if r["scenario"] == scenario]
            gs = sorted({r["G"] for r in sel})
            series = {e: (gs, [next(r["mse"] for r in sel if r["G"] == g and r["estimator"] == e) for g in gs]) for e in estimators if e != "oracle_eb"}
            series["Thm 3.3 (1−S)σ²/G"] = (gs, [next(r["thm33_mse"] for r in sel if r["G"] == g) for g in gs])
            panels[scenario] = series
        png = plot_panels(out_dir / "baseline_mse.png", panels, xlabel="G (responses per prompt)", ncols=2, title="Baseline MSE vs θ", logy=True)
        text.append(f"\n![baseline MSE]({png.name})")
    return "\n".join(text) + "\n"


def _saturation(sim, size: dict[str, Any], seed: int, out_dir: Path, plots: bool) -> str:
    rows = sim.saturation(seed=seed, progress=True, **size)
    cols = ["scenario", "estimator", "failed_frac", "failed_signal_frac", "failed_adv", "failed_raw", "predicted_raw", "predicted_centred", "allfail_signal_frac", "allfail_adv"]
    headers = ["scenario", "estimator", "all-zero groups", "… with signal", "their Â", "raw r−V", "Thm 3.2 −Sμ", "−S·r̄_batch", "all-fail batch: signal", "all-fail Â"]
    text = [
        f"## 2. Saturated failure (Theorem 3.2, Corollary 3.5), G = {size['group_size']}\n",
        "All-zero groups: the fraction that still gets a non-zero advantage, the mean advantage of their "
        "responses (after the estimator's normalisation) and before it (`raw r−V`), Theorem 3.2's `−S·μ_glob`, "
        "and `−S·r̄_batch`, which is what centring leaves of it (the batch mean of the raw advantages is "
        "`S(r̄_batch − μ)`). Last two columns: one extra batch in which every group fails, after the "
        "history above — batch normalisation (`ebpo`, `ebpo_center`, `ebpo_bb`) gives it no signal at all; "
        "only `ebpo_none` keeps the penalty.\n",
        sim.markdown_table(rows, cols, headers=headers, digits=3),
    ]
    if plots:
        from ebpo.utils.plotting import plot_lines

        curve = sim.penalty_curve(group_size=size["group_size"], prompts_per_step=size["prompts_per_step"], seed=seed)
        mu = [r["mu"] for r in curve]
        series = {
            "Thm 3.2: −S·μ_glob": (mu, [r["predicted_raw"] for r in curve]),
            "raw (normalize=none)": (mu, [r["raw"] for r in curve]),
            "centred (= −S·r̄_batch)": (mu, [r["centred"] for r in curve]),
            "batch-normalised (default)": (mu, [r["normalised"] for r in curve]),
        }
        png = plot_lines(
            out_dir / "saturation_penalty.png",
            series,
            title=f"EBPO advantage of all-zero groups, θ ~ Beta(4μ, 4(1−μ)), G = {size['group_size']}",
            xlabel="μ (mean success rate)",
            ylabel="mean advantage",
        )
        text.append(f"\n![saturation penalty]({png.name})")
    return "\n".join(text) + "\n"


def _seeds(seed: int, size: dict[str, Any]) -> tuple[list[int], list[int]]:
    validation = [seed + 10_000 + i for i in range(size["validation"])]
    report = [seed + i for i in range(size["report"])]
    return validation, report


def _bandit(sim, size: dict[str, Any], seed: int, out_dir: Path, plots: bool) -> str:
    import numpy as np

    config = sim.BanditConfig(shared=size["shared"])
    validation, report = _seeds(seed, size)
    study = sim.learning_rate_study(
        config,
        estimators=size["estimators"],
        group_sizes=size["group_sizes"],
        learning_rates=size["learning_rates"],
        steps=size["steps"],
        validation_seeds=validation,
        report_seeds=report,
        progress=True,
    )
    rows, best, equal = study["rows"], study["best_lr"], study["equal_lr"]
    gs = list(size["group_sizes"])

    def cell(spec: str, g: int, lr: float, with_lr: bool) -> str:
        r = next(r for r in rows if r["split"] == "report" and r["estimator"] == spec and r["G"] == g and r["lr"] == lr)
        text = f"{r['final']:.3f} ± {r['final_se']:.3f}" if np.isfinite(r["final_se"]) else f"{r['final']:.3f}"
        return text + (f" (lr {lr:g})" if with_lr else "")

    fair = [{"estimator": e, **{f"G={g}": cell(e, g, best[(e, g)], True) for g in gs}} for e in size["estimators"]]
    same = [{"estimator": e, **{f"G={g}": cell(e, g, equal, False) for g in gs}} for e in size["estimators"]]
    grid = []
    for e in size["estimators"]:
        for g in gs:
            row = {"estimator": e, "G": g}
            for lr in size["learning_rates"]:
                val = next(r for r in rows if r["split"] == "validation" and r["estimator"] == e and r["G"] == g and r["lr"] == lr)
                row[f"lr {lr:g}"] = f"{val['final']:.3f}" + ("*" if best[(e, g)] == lr else "")
            grid.append(row)
    text = [
        f"## 3. Policy learning in a contextual bandit ({config.num_prompts} prompts, {config.num_answers} answers, "
        f"{config.num_topics} topics, {'shared parameters' if config.shared else 'per-prompt table'}, {size['steps']} steps of {config.prompts_per_step} prompts, G answers each)\n",
        f"Final expected success rate on the training prompts (mean of the last 10% of the curve, ± s.e. over report seeds {report}).\n",
        f"**Each estimator at its own best learning rate** (chosen on validation seeds {validation}, from {list(size['learning_rates'])}):\n",
        sim.markdown_table(fair, list(fair[0])),
        f"\n**All estimators at the same learning rate {equal:g}:**\n",
        sim.markdown_table(same, list(same[0])),
        "\nThe sweep on the validation seeds (final success; * = chosen):\n",
        sim.markdown_table(grid, list(grid[0])),
    ]
    if plots:
        from ebpo.utils.plotting import plot_panels

        panels, bands = {}, {}
        for title, pick in (("best lr", lambda e, g: best[(e, g)]), (f"lr {equal:g}", lambda e, g: equal)):
            for g in gs:
                key = f"G={g}, {title}"
                panels[key], bands[key] = {}, {}
                for e in size["estimators"]:
                    curves = study["curves"][(e, g, pick(e, g))]
                    x = list(range(curves.shape[1]))
                    mean = curves.mean(0)
                    se = curves.std(0, ddof=1) / np.sqrt(len(curves)) if len(curves) > 1 else np.zeros_like(mean)
                    panels[key][e] = (x, mean)
                    bands[key][e] = (mean - se, mean + se)
        png = plot_panels(out_dir / "bandit_learning_curves.png", panels, bands=bands, ncols=len(gs), title="Expected success on training prompts (± s.e.)")
        text.append(f"\n![bandit learning curves]({png.name})")
    return "\n".join(text) + "\n"


def _priors(sim, size: dict[str, Any], seed: int, out_dir: Path, plots: bool) -> str:
    import numpy as np

    config = sim.BanditConfig(shared=size["shared"])
    validation, report = _seeds(seed, size)
    text = [
        f"## 4. Priors and data order (Proposition 3.8), G = 4, {'shared parameters' if config.shared else 'per-prompt table'}\n",
        "History / batch / EMA (half-life 3 steps) priors on a policy that improves; topic-ordered vs shuffled "
        "stream; per-cluster (per-topic) priors. `prior error` = mean (μ_m − θ_m)² of the prior mean each group "
        "was shrunk toward against its current true success rate; `Var θ (batch)` is that error for a prior equal "
        "to the batch's own mean θ (Prop. 3.8: random order ≈ Var θ, topic order removes the between-topic part). "
        "With batch normalisation a single prior's mean cancels from the advantages (only S matters), so "
        "the same study is repeated with `normalize=none`.\n",
    ]
    for i, normalize in enumerate(size["normalize"]):
        # Non-EBPO rows do not depend on ``normalize``: run them once.
        variants = [v for v in sim.PRIOR_VARIANTS if i == 0 or v[1].startswith("ebpo")]
        study = sim.prior_study(
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
        for r in rows:
            r["lr"] = f"{r['lr']:g}"
            r["final ± se"] = f"{r['final']:.3f} ± {r['final_se']:.3f}" if np.isfinite(r["final_se"]) else f"{r['final']:.3f}"
        cols = ["variant", "lr", "final ± se", "prior_error", "theta_var", "shrinkage", "zero_signal"]
        headers = ["variant", "lr (val.)", "final success", "prior error", "Var θ (batch)", "mean S", "zero-signal groups"]
        note = "" if i == 0 else " (GRPO rows as above)"
        text += [f"\n**EBPO with normalize={normalize}{note}:**\n", sim.markdown_table(rows, cols, headers=headers, digits=3)]
        if plots:
            from ebpo.utils.plotting import plot_panels

            acc = {label: (list(range(c["train_acc"].shape[1])), c["train_acc"].mean(0)) for label, c in study["curves"].items()}
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


def _pivot(rows: list[dict[str, Any]], value: str, columns: list[str]) -> list[dict[str, Any]]:
    table: dict[tuple[str, int], dict[str, Any]] = {}
    for r in rows:
        key = (r["scenario"], r["G"])
        table.setdefault(key, {"scenario": r["scenario"], "G": r["G"]})[r["estimator"]] = r[value]
    return list(table.values())


_SECTIONS = {"baseline": _baseline, "saturation": _saturation, "bandit": _bandit, "priors": _priors}
