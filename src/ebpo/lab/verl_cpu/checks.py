"""The smoke's checks (each a :class:`~ebpo.lab.verl_cpu.settings.Check`) on the runs it made.

For either trainer: run A trained every step with validation first, scored by ebpo's
``compute_score``; verl's file and console loggers carry the ``<estimator>/*`` metrics at every
step; the step-``save_step`` checkpoint holds the actor, ``data.pt`` and the estimator state; the
resumed run B repeats A's later steps exactly (``torch.equal``, ``==``): prompts, rewards,
advantages, metrics, final estimator state; both runs dumped every step's rollouts
(``trainer.rollout_data_dir``: what ``ebpo replay`` reads); with ``ebpo_topic`` the prompts come
in topic blocks and the resumed dataloader continues mid-epoch.

For verl's default path (v1) also: the classes that ran are verl's ``TaskRunnerV1`` and
``PPOTrainerSync`` methods with TransferQueue up (:func:`v1_path_checks`); both data-parallel
ranks trained, verl's padding rows reached the estimator's input and were left out of it
(:func:`data_parallel_checks`); the rollout server generated with the actor's weights
(``training/rollout_probs_diff_max``); everything listened on 127.0.0.1 and nothing was left
running (:func:`process_checks`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ebpo.integrations.verl.state import STATE_FILENAME
from ebpo.lab.verl_cpu.settings import Check, EstimatorRun, SmokeSettings
from ebpo.lab.verl_cpu.shared import assets
from ebpo.lab.verl_cpu.shared.results import METRICS_LOG, RunResult, read_manifest
from ebpo.lab.verl_cpu.shared.worker import CHECKPOINT_FILE

__all__ = [
    "ADVANTAGE_MODULE",
    "contiguous_blocks",
    "curriculum_checks",
    "data_parallel_checks",
    "process_checks",
    "reference_policy_checks",
    "resume_checks",
    "resume_source_check",
    "rollout_dump_check",
    "run_a_checks",
    "v1_path_checks",
]

ADVANTAGE_MODULE = "ebpo.integrations.verl.advantage"
#: largest |log π_rollout − log π_actor| that still means "the same weights" (float32 noise)
WEIGHT_SYNC_TOLERANCE = 1e-4
#: largest |KL| at step 1 that still means "the actor is the reference" (float32 noise)
KL_AT_START = 1e-7


def prefixed(metrics: dict[str, Any], prefix: str) -> dict[str, Any]:
    return {key: value for key, value in metrics.items() if key.startswith(prefix + "/")}


def run_a_checks(settings: SmokeSettings, run: EstimatorRun, a: RunResult) -> list[Check]:
    # verl's own estimators log nothing of theirs: there the actor's metrics stand for them
    prefix = run.registry_name if run.ours else "actor"
    steps = list(range(1, settings.steps + 1))
    val = a.metrics.get(0, {})
    reward_keys = [k for k in val if k.startswith("val-") and k.split("/")[-2] == "unscorable"]
    logged = [s for s in steps if prefixed(a.metrics.get(s, {}), prefix)]
    console = Path(a.console).read_text() if a.console and Path(a.console).is_file() else ""
    in_console = [s for s in steps if f"step:{s} - " in console and f" - {prefix}/" in console]
    folder = Path(a.run_dir) / "checkpoints" / f"global_step_{settings.save_step}"
    files = [folder / "actor" / CHECKPOINT_FILE, folder / "data.pt"]
    files += [folder / STATE_FILENAME] if run.ours else []
    advantages = [float(t.advantages.abs().max()) for t in a.trace]
    found = [
        Check(
            f"{run.name}: fit() trained {settings.steps} steps",
            [t.step for t in a.trace] == steps,
            f"steps {[t.step for t in a.trace]} (the whole run, start-up and validation included: "
            f"{a.seconds:.1f} s); max |advantage| per step "
            + ", ".join(f"{x:.3f}" for x in advantages),
        ),
        Check(
            f"{run.name}: validation before training, scored by ebpo's compute_score",
            bool(val) and bool(reward_keys),
            f"step 0: {len(val)} validation metrics, compute_score's extra keys: {reward_keys}",
        ),
        Check(
            f"{run.name}: verl's file logger has {prefix}/* at every step",
            logged == steps,
            f"steps {logged} of {steps} in {Path(a.run_dir) / METRICS_LOG} (e.g. "
            f"{sorted(prefixed(a.metrics.get(steps[-1], {}), prefix))[:3]})",
        ),
        Check(
            f"{run.name}: checkpoint at step {settings.save_step} (actor, dataloader"
            + (", estimator state)" if run.ours else ")"),
            all(f.is_file() for f in files),
            ", ".join(f"{f.relative_to(folder)}{'' if f.is_file() else ' MISSING'}" for f in files),
        ),
        Check(
            f"{run.name}: the rewards reached the estimator",
            any(x > 0 for x in advantages),
            "some advantage is non-zero"
            if any(x > 0 for x in advantages)
            else "every advantage is 0 (no reward variance: nothing compared)",
        ),
    ]
    if run.ours:
        found.append(
            Check(
                f"{run.name}: the trainer's `metrics` dict reached from the estimator (console too)",
                not a.console or in_console == steps,
                f"steps {in_console} in {a.console}" if a.console else "console shown (--verbose)",
            )
        )
    return found


def reference_policy_checks(
    settings: SmokeSettings, run: EstimatorRun, a: RunResult, b: RunResult
) -> list[Check]:
    """With verl's KL loss (``actor.use_kl_loss``): the CPU worker computed reference log-probs
    and the KL term at every step, with the run's coefficient. The reference is the initial
    policy, frozen: the KL is 0 at step 1 (one PPO mini-batch a step, so the first update starts
    from the initial weights) and positive once the actor has moved (a reference that followed
    the actor would stay at 0); the resumed run rebuilt the same reference (equal KL)."""
    steps = list(range(1, settings.steps + 1))
    kl = [a.metrics.get(s, {}).get("actor/kl_loss") for s in steps]
    coef = {a.metrics.get(s, {}).get("actor/kl_coef") for s in steps}
    want = float(next(o.split("=", 1)[1] for o in reversed(run.overrides) if "kl_loss_coef=" in o))
    after = list(range(settings.save_step + 1, settings.steps + 1))
    resumed = [b.metrics.get(s, {}).get("actor/kl_loss") for s in after]
    logged_kl = [x for x in kl if x is not None]
    logged = len(logged_kl) == len(kl)
    moved = (
        logged and abs(logged_kl[0]) <= KL_AT_START and all(x > KL_AT_START for x in logged_kl[1:])
    )
    return [
        Check(
            f"{run.name}: reference log-probs and verl's KL loss at every step (coefficient {want})",
            logged and coef == {want},
            "actor/kl_loss per step: "
            + ", ".join("missing" if x is None else f"{x:.3e}" for x in kl)
            + f"; actor/kl_coef {sorted(c for c in coef if c is not None)}",
        ),
        Check(
            f"{run.name}: the reference is the frozen initial policy (KL 0 at step 1, > 0 after)",
            moved,
            f"step 1: {kl[0]}, later steps: {kl[1:]}",
        ),
        Check(
            f"{run.name}: the resumed run computed the same KL (the same reference)",
            logged and resumed == kl[settings.save_step :],
            f"resumed {resumed}, uninterrupted {kl[settings.save_step :]}",
        ),
    ]


def rollout_dump_check(run: EstimatorRun, result: RunResult, what: str) -> Check:
    """verl wrote its rollout dump (``trainer.rollout_data_dir``): ``{step}.jsonl`` for exactly
    the steps the run trained, each with one line per row the actor trained on (verl's padding
    rows included). What the lines hold is ``ebpo replay``'s business (tested there)."""
    directory = result.rollout_dir
    found = sorted(int(p.stem) for p in directory.glob("*.jsonl") if p.stem.isdigit())
    rows = {t.step: int(t.advantages.shape[0]) for t in result.trace}
    lines = {step: _count_lines(directory / f"{step}.jsonl") for step in found}
    ok = bool(rows) and found == sorted(rows) and all(lines[s] == rows[s] for s in found)
    files = f"{found[0]}.jsonl … {found[-1]}.jsonl ({len(found)} files)" if found else "no files"
    return Check(
        f"{run.name} ({what}): verl dumped its rollouts at every step (trainer.rollout_data_dir)",
        ok,
        f"{directory}: {files}, lines per file {sorted(set(lines.values()))}; the actor trained "
        f"steps {_span(sorted(rows))}, rows per step {sorted(set(rows.values()))}"
        + ("" if ok else f"; lines per step {lines}, rows per step {rows}"),
    )


def _span(steps: list[int]) -> str:
    """``1-47`` for consecutive steps, else the list."""
    if steps and steps == list(range(steps[0], steps[-1] + 1)):
        return f"{steps[0]}-{steps[-1]}"
    return str(steps)


def _count_lines(path: Path) -> int:
    with open(path, encoding="utf-8") as handle:
        return sum(1 for line in handle if line.strip())


def _saved_state(result: RunResult, step: int) -> Any:
    path = Path(result.run_dir) / "checkpoints" / f"global_step_{step}" / STATE_FILENAME
    return json.loads(path.read_text()) if path.is_file() else None


def resume_checks(
    settings: SmokeSettings, run: EstimatorRun, a: RunResult, b: RunResult
) -> list[Check]:
    import torch  # heavy optional import

    prefixes = run.metric_prefixes or (run.registry_name,)
    after = list(range(settings.save_step + 1, settings.steps + 1))
    by_step_a = {t.step: t for t in a.trace}
    by_step_b = {t.step: t for t in b.trace}
    same: dict[str, list[int]] = {"prompts": [], "rewards": [], "advantages": [], "metrics": []}
    for step in after:
        ta, tb = by_step_a.get(step), by_step_b.get(step)
        if ta is None or tb is None:
            continue
        if ta.prompt_ids == tb.prompt_ids and ta.session_ids == tb.session_ids:
            same["prompts"].append(step)
        if torch.equal(ta.rewards, tb.rewards):
            same["rewards"].append(step)
        if torch.equal(ta.advantages, tb.advantages):
            same["advantages"].append(step)
        ma = {k: v for p in prefixes for k, v in prefixed(a.metrics.get(step, {}), p).items()}
        mb = {k: v for p in prefixes for k, v in prefixed(b.metrics.get(step, {}), p).items()}
        if ma and ma == mb:
            same["metrics"].append(step)
    saved = [_saved_state(r, settings.steps) for r in (a, b)]
    nonzero = [s for s in after if s in by_step_a and bool(by_step_a[s].advantages.abs().max() > 0)]
    found = [
        Check(
            f"{run.name}: resumed run trained steps {after} only",
            [t.step for t in b.trace] == after,
            f"steps {[t.step for t in b.trace]} (the whole run, start-up included: {b.seconds:.1f} s)",
        ),
        *(
            Check(
                f"{run.name}: resumed steps {after} have the same {what} (exact)",
                steps == after,
                f"equal at steps {steps}"
                + (f"; non-zero advantages at steps {nonzero}" if what == "advantages" else ""),
            )
            for what, steps in same.items()
        ),
    ]
    if run.ours:
        found.append(
            Check(
                f"{run.name}: same estimator state at the end (in memory and in global_step_{settings.steps})",
                a.estimator_state == b.estimator_state
                and saved[0] is not None
                and saved[0] == saved[1],
                f"{len(a.estimator_state.get('estimators', []))} estimator(s); "
                f"saved states {'equal' if saved[0] is not None and saved[0] == saved[1] else 'DIFFER'}",
            )
        )
    return found


#: the line ebpo's checkpoint callback logs when it restores the state (integrations.verl.checkpoint)
RESTORED_LINE = "ebpo: restored estimator state from "
#: the line verl's v1 ``_load_checkpoint`` logs (INFO) with the folder it resumes from
VERL_RESUMING_LINE = "Resuming from "


def _folders_after(lines: list[str], marker: str, end: str) -> list[str]:
    """The distinct folders named after ``marker`` (up to ``end``) in ``lines``."""
    named = [line.split(marker, 1)[1].split(end, 1)[0].strip() for line in lines if marker in line]
    return sorted(set(named))


def resume_source_check(
    settings: SmokeSettings, run: EstimatorRun, a: RunResult, b: RunResult
) -> Check:
    """v1: the resumed run's ebpo callback restored the state from the folder verl resumed from —
    with ``resume_mode=auto``, the ``global_step_<save_step>`` folder in the resumed run's own
    relative ``checkpoints`` directory (verl's tracker file names it); with ``resume_path``, run
    A's. Both name it in the console: verl's ``_load_checkpoint`` ("Resuming from ...") and ebpo's
    callback; the steps B trained (:func:`resume_checks`) show that verl resumed there."""
    folder = f"global_step_{settings.save_step}"
    owner = b if settings.resume_mode == "auto" else a
    expected = str(Path(owner.run_dir) / "checkpoints" / folder)
    lines = Path(b.console).read_text(errors="replace").splitlines() if b.console else []
    verls = _folders_after(lines, VERL_RESUMING_LINE, ", setting global step")
    ebpos = _folders_after(lines, RESTORED_LINE, " (")
    how = (
        "trainer.resume_mode=auto, default_local_dir=checkpoints (relative), started in its run dir"
        if settings.resume_mode == "auto"
        else "trainer.resume_mode=resume_path"
    )
    return Check(
        f"{run.name}: the resumed run restored ebpo's state from the folder verl resumed from ({how})",
        verls == ebpos == [expected] and [t.step for t in b.trace][:1] == [settings.save_step + 1],
        f"verl resumed from {verls or 'nowhere'}, ebpo restored from {ebpos or 'nowhere'}; "
        f"expected {expected}",
    )


def curriculum_checks(
    settings: SmokeSettings, run: EstimatorRun, files: dict[str, str], a: RunResult, b: RunResult
) -> list[Check]:
    """The prompts follow the topic order (ebpo's ``CurriculumSampler`` over the shuffled file for
    the legacy trainer, the topic-sorted file for v1) across the mid-epoch resume."""
    import pandas as pd  # heavy optional import

    from ebpo.integrations.verl.curriculum_sampler import CurriculumSampler

    frame = pd.read_parquet(assets.train_file(files, run.order))
    order = (
        CurriculumSampler(data_source=frame, order="topic", seed=0).indices(0)
        if run.curriculum_sampler
        else list(range(len(frame)))
    )
    ids = [str(frame["extra_info"][i]["id"]) for i in order]
    topic_of = {str(info["id"]): info["topic"] for info in frame["extra_info"]}
    # Compared step by step as sets: verl's balance_batch reorders the rows of a step by sequence
    # length, so the order inside a step depends on what the model wrote. Padding rows carry a
    # copy of a real row's data; they are left out.
    size = settings.batch_size
    steps_a = [
        {p for p, pad in zip(t.prompt_ids, t.padding.tolist(), strict=True) if not pad}
        for t in a.trace
    ]
    steps_b = [
        {p for p, pad in zip(t.prompt_ids, t.padding.tolist(), strict=True) if not pad}
        for t in b.trace
    ]
    # run B (resumed) starts with the sampler's batch number save_step (0-based)
    resumed_at = settings.save_step
    walked = steps_a == [set(ids[k * size : (k + 1) * size]) for k in range(len(steps_a))]
    topics = [topic_of[pid] for pid in ids[: len(steps_a) * size]]
    continued = steps_b == [
        set(ids[(resumed_at + k) * size : (resumed_at + k + 1) * size]) for k in range(len(steps_b))
    ]
    source = "ebpo's CurriculumSampler" if run.curriculum_sampler else "the topic-sorted file"
    return [
        Check(
            f"{run.name}: verl's dataloader walked {source} (topic order)",
            walked and contiguous_blocks(topics),
            f"topics of the prompts trained on: {' '.join(dict.fromkeys(topics))} "
            f"({len(steps_a)} steps of {size} prompts)",
        ),
        Check(
            f"{run.name}: the resumed dataloader continued mid-epoch where the checkpoint left it",
            continued,
            f"resumed at prompt {resumed_at * size} of {len(ids)} (epoch of {len(ids) // size} steps)",
        ),
    ]


def contiguous_blocks(topics: list[str]) -> bool:
    """Each topic appears in one contiguous block."""
    blocks = [t for i, t in enumerate(topics) if i == 0 or topics[i - 1] != t]
    return len(blocks) == len(set(blocks))


# ---------------------------------------------------------------------- v1 only
def v1_path_checks(run: EstimatorRun, a: RunResult, trace_dir: str) -> list[Check]:
    """The classes that ran are verl's: ``main_ppo``'s ``TaskRunnerV1``, ``PPOTrainerSync``'s
    own methods (an overridden ``fit`` or the legacy ``RayPPOTrainer`` fails here), TransferQueue."""
    manifest = read_manifest(trace_dir)
    methods = manifest.get("methods", {})
    foreign = {k: v for k, v in methods.items() if not v.startswith("verl.trainer.ppo.v1.")}
    runner = manifest.get("task_runner") or {}
    verl_runner = runner.get("class") == "TaskRunnerV1" and str(runner.get("file", "")).endswith(
        "verl/trainer/main_ppo.py"
    )
    bases = manifest.get("trainer_bases", [])
    sync = "verl.trainer.ppo.v1.trainer_sync.PPOTrainerSync"
    ok = (
        bool(methods)
        and not foreign
        and verl_runner
        and sync in bases
        and manifest.get("trainer_mode") == "sync"
        and manifest.get("use_v1") is True
        and manifest.get("transfer_queue_controller") is True
    )
    detail = (
        f"TaskRunner {runner.get('class')} of {runner.get('file')}; trainer "
        f"{manifest.get('trainer_class')} (a {sync}), mode "
        f"{manifest.get('trainer_mode')}; {len(methods) - len(foreign)} of {len(methods)} loop "
        f"methods verl's"
        + (f", NOT: {foreign}" if foreign else "")
        + f"; TransferQueue controller {'up' if manifest.get('transfer_queue_controller') else 'ABSENT'}"
        if manifest
        else f"no manifest in {trace_dir}"
    )
    return [
        Check(
            f"{run.name}: verl's default path ran (main_ppo → TaskRunnerV1 → TransferQueue → "
            "PPOTrainerSync.fit)",
            ok,
            detail,
        )
    ]


def data_parallel_checks(settings: SmokeSettings, run: EstimatorRun, a: RunResult) -> list[Check]:
    """Both ranks trained; verl's padding rows were in the batch (as many as ``_balance_batch``
    adds: up to a multiple of the PPO mini-batch, ``batch_size × group_size`` rows, in each
    sub-step with ``parameter_sync_step`` > 1) and got no advantage; the estimator counted exactly
    the sessions and groups of each step (a session is one row with the single-turn loop, its
    final output with two outputs a session)."""
    import torch  # heavy optional import

    prefix = run.registry_name
    multiple = settings.batch_size * settings.group_size // settings.parameter_sync_step
    ranks_ok, padding, counted = [], [], []
    for t in a.trace:
        ranks_ok.append(set(t.ranks) == {0, 1})
        pad = t.padding
        padding.append(int(pad.sum()))
        real = ~pad & (t.response_mask.sum(dim=-1) > 0)
        zero = bool(torch.all(t.advantages[pad] == 0)) and bool(
            torch.all(t.response_mask[pad] == 0)
        )
        metrics = a.metrics.get(t.step, {})
        rows = [(u, s) for u, s, r in zip(t.uids, t.session_ids, real.tolist(), strict=True) if r]
        counted.append(
            zero
            and all(
                int(pad[part].sum()) == -int(real[part].sum()) % multiple
                for part in t.sub_step_rows()
            )
            and (
                not run.ours  # verl's own estimators log no counts
                or metrics.get(f"{prefix}/num_responses") == float(len(set(rows)))
                and metrics.get(f"{prefix}/num_groups") == float(len({u for u, _ in rows}))
            )
        )
    return [
        Check(
            f"{run.name}: the actor trained on 2 data-parallel CPU ranks (gloo)",
            bool(ranks_ok) and all(ranks_ok),
            f"rows per rank at step 1: {[a.trace[0].ranks.count(r) for r in (0, 1)] if a.trace else []}",
        ),
        Check(
            f"{run.name}: verl's padding rows reached the estimator's input and were left out of it",
            bool(counted) and all(counted) and any(n > 0 for n in padding),
            f"padding rows per step {padding} (up to a multiple of {multiple} rows); "
            + (
                f"{prefix}/num_responses = real sessions and {prefix}/num_groups = real groups"
                if run.ours
                else "zero advantages and masks on them"
            )
            + f" at {sum(counted)} of {len(counted)} steps",
        ),
    ]


def weight_sync_check(run: EstimatorRun, a: RunResult, steps: Sequence[int]) -> Check:
    if any(len(t.rollout_gaps) > 1 for t in a.trace):
        return sub_step_weight_sync_check(run, a)
    diffs = [a.metrics.get(s, {}).get("training/rollout_probs_diff_max") for s in steps]
    ok = all(d is not None and d < WEIGHT_SYNC_TOLERANCE for d in diffs)
    return Check(
        f"{run.name}: the rollout server sampled with the actor's weights (verl's weight sync)",
        ok,
        "max |log π_rollout − log π_actor| per step: "
        + ", ".join("missing" if d is None else f"{d:.1e}" for d in diffs),
    )


def process_checks(label: str, launches: Sequence[Any]) -> list[Check]:
    """Every listener of every run on 127.0.0.1; nothing left running; every run exited 0."""
    listeners = {x for launch in launches for x in launch.listeners}
    foreign = sorted({x for launch in launches for x in launch.foreign_listeners}, key=str)
    leftovers = [x for launch in launches for x in launch.leftovers]
    processes = sorted({x.process.removeprefix("ray::").split(".")[0] for x in listeners})
    return [
        Check(
            f"{label}: every socket the runs listened on is on 127.0.0.1",
            bool(listeners) and not foreign,
            f"{len(listeners)} listening sockets of {', '.join(processes)}"
            + (f"; NOT loopback: {foreign}" if foreign else ""),
        ),
        Check(
            f"{label}: nothing left running after the runs",
            not leftovers,
            "every process of the runs ended" if not leftovers else f"killed: {leftovers}",
        ),
    ]


def sub_step_weight_sync_check(run: EstimatorRun, a: RunResult) -> Check:
    """With verl's sub-steps the weights reach the server once a step: the first sub-batch was
    sampled with the actor's weights, the later ones with the weights before the step's earlier
    updates (verl's design), so only the first sub-step's gap must be float noise."""
    firsts = [t.rollout_gaps[0] if t.rollout_gaps else None for t in a.trace]
    ok = bool(firsts) and all(g is not None and g < WEIGHT_SYNC_TOLERANCE for g in firsts)
    return Check(
        f"{run.name}: the rollout server sampled with the actor's weights of the step's start "
        "(verl's weight sync, once a step)",
        ok,
        "max |log π_rollout − log π_old| per step and sub-step: "
        + "; ".join(
            ", ".join("missing" if g is None else f"{g:.1e}" for g in t.rollout_gaps)
            for t in a.trace
        ),
    )
