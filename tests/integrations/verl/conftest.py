"""Shared helpers for the verl plug-in tests: verl-shaped batches, a clean estimator store, and the
check of ``ebpo replay`` on a CPU run's rollout dump against what the run trained with."""

from __future__ import annotations

import json
import math
import uuid

import numpy as np
import pytest
import torch

pytest.importorskip("verl")

from ebpo.integrations.verl.state import STORE  # noqa: E402


@pytest.fixture(scope="session")
def warm_start_cache(tmp_path_factory):
    """One warm-start cache for the CPU fit modules (v1 and legacy train the same tiny model):
    under the session's base directory, which pytest-xdist's workers share, so the model is
    trained once (the cache's lock makes a second worker wait and load it)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if base.name.startswith("popen-gw") else base
    path = shared / "verl-warm-start-cache"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture(autouse=True)
def clean_store():
    """Every test starts and ends with an empty process-wide store."""
    STORE.clear()
    yield STORE
    STORE.clear()


def verl_batch(
    group_sizes: list[int],
    *,
    length: int = 7,
    padding: int = 3,
    seed: int = 0,
    continuous: bool = False,
    step: int = 0,
):
    """A DataProto as verl builds it for one step, plus the reference view of it.

    Groups of uneven sizes, fresh uuid-like uids per step, rows shuffled (as after
    ``_balance_batch``), random response lengths, the outcome reward on the last response token,
    and ``padding`` rows (uid ``pad_i``, all-zero mask and reward) at random positions.

    Returns ``(data, rewards, uids, valid)`` where ``rewards``/``uids`` are per row and ``valid``
    marks the non-padding rows.
    """
    from verl import DataProto

    rng = np.random.default_rng(seed)
    uids, rewards = [], []
    for size in group_sizes:
        rate = rng.uniform()
        uid = str(
            uuid.UUID(int=int(rng.integers(1 << 62)) + step)
        )  # verl: fresh uuid4 per prompt per step
        for _ in range(size):
            uids.append(uid)
            rewards.append(float(rng.uniform(-1, 2)) if continuous else float(rng.uniform() < rate))
    uids += [f"pad_{i}" for i in range(padding)]
    rewards += [0.0] * padding
    n = len(uids)
    valid = np.array([True] * (n - padding) + [False] * padding)
    lengths = rng.integers(1, length + 1, size=n)
    lengths[~valid] = 0
    order = rng.permutation(n)
    uids = np.array(uids, dtype=object)[order]
    rewards = np.array(rewards)[order]
    valid, lengths = valid[order], lengths[order]

    mask = torch.zeros(n, length)
    token_rewards = torch.zeros(n, length)
    for i in range(n):
        mask[i, : lengths[i]] = 1.0
        if lengths[i]:
            token_rewards[i, lengths[i] - 1] = rewards[i]
    data = DataProto.from_dict(
        tensors={"token_level_rewards": token_rewards, "response_mask": mask},
        non_tensors={"uid": uids},
    )
    return data, rewards, uids, valid


# ---------------------------------------------------------------------- replaying a CPU run's dump
def group_pairs(labels, rewards, advantages) -> dict[str, list[tuple[float, float]]]:
    """Each group's (reward, advantage) pairs, sorted: the group as a multiset, whatever the order
    of its rows (within a group, equal rewards get equal advantages)."""
    out: dict[str, list[tuple[float, float]]] = {}
    for label, reward, advantage in zip(labels, rewards.tolist(), advantages.tolist(), strict=True):
        out.setdefault(str(label), []).append((float(reward), float(advantage)))
    return {label: sorted(pairs) for label, pairs in out.items()}


def trained_pairs(trace, per_session: bool = False) -> dict[str, list[tuple[float, float]]]:
    """:func:`group_pairs` of the rows the actor was updated with at one step (a ``StepTrace``),
    by verl's uid; verl's padding rows and empty responses (masked out of the estimator) left
    out. verl broadcasts one advantage over a response's tokens: the mean over its mask is it.
    ``per_session``: one row per (uid, session) — the first; a multi-output session's outputs
    share its reward and advantage (checked by the smoke)."""
    tokens = trace.response_mask.sum(dim=-1)
    real = ~trace.padding & (tokens > 0)
    if per_session:
        seen = set()
        for row, session in enumerate(zip(trace.uids, trace.session_ids, strict=True)):
            if real[row] and session in seen:
                real[row] = False
            seen.add(session)
    advantages = trace.advantages.sum(dim=-1) / tokens.clamp(min=1)
    uids = [uid for uid, keep in zip(trace.uids, real.tolist(), strict=True) if keep]
    return group_pairs(uids, trace.rewards[real], advantages[real])


def same_state(got, want, rel: float = 1e-12) -> bool:
    """Two ``state_dict()`` trees equal: the same keys, strings and integers; floats to ``rel``
    (a replay sums a step's groups in another order than the trainer did)."""
    if isinstance(want, dict):
        return (
            isinstance(got, dict)
            and got.keys() == want.keys()
            and all(same_state(got[k], want[k], rel) for k in want)
        )
    if isinstance(want, list):
        return (
            isinstance(got, list)
            and len(got) == len(want)
            and all(same_state(g, w, rel) for g, w in zip(got, want, strict=True))
        )
    if isinstance(want, float) and isinstance(got, float):
        return math.isclose(got, want, rel_tol=rel, abs_tol=rel)
    return type(got) is type(want) and got == want


def replay_the_runs_dump(
    run, variant: str, out_dir, *, by_uid: bool, per_session: bool = False
) -> dict:
    """``ebpo replay`` (the command, as the smoke's summary prints it) on the rollout dump verl's
    own writer made during ``run`` (``trainer.rollout_data_dir``), with ``--estimators variant`` —
    the variant the run trained with. Checks, step by step, that the replay's groups hold the
    rewards and the ``variant`` advantages the actor was updated with (each group as a multiset;
    ``by_uid``: the v1 dump's groups carry verl's uid, matched one to one; otherwise groups by
    prompt text, matched by their rewards), to 1e-6 (verl keeps float32), and that the replay's
    final state is the run's estimator state (``per_session``: the run's sessions had several
    outputs; one row of each is compared, :func:`trained_pairs`). Returns ``replay.json``."""
    from ebpo.analysis.replay.engine import Replay
    from ebpo.analysis.replay.sources import Source
    from ebpo.cli import main

    dump = run.rollout_dir
    out = out_dir / "replay"
    assert main(["replay", str(dump), "--output-dir", str(out), "--estimators", variant]) == 0
    report = json.loads((out / "replay.json").read_text())
    assert report["summary"]["steps"] == len(run.trace)

    replay = Replay([variant])
    traces = {trace.step: trace for trace in run.trace}
    batches = list(Source([str(dump)], "verl").steps())
    assert [batch.step for batch in batches] == sorted(traces)
    signal = 0
    for batch in batches:
        replay.step(batch)
        labels = batch.group_labels.to_pylist()
        replayed = group_pairs(
            [labels[g] for g in batch.group_index.tolist()],
            batch.rewards,
            replay.last_results[variant].advantages,
        )
        trained = trained_pairs(traces[batch.step], per_session)
        if by_uid:
            assert replayed.keys() == trained.keys(), batch.step
            pairs = [(replayed[uid], trained[uid]) for uid in trained]
        else:
            assert len(replayed) == len(trained), batch.step
            pairs = list(zip(sorted(replayed.values()), sorted(trained.values()), strict=True))
        for got, want in pairs:
            assert [r for r, _ in got] == [r for r, _ in want], batch.step
            assert [a for _, a in got] == pytest.approx([a for _, a in want], abs=1e-6), batch.step
            signal += sum(abs(a) > 1e-3 for _, a in want)
    assert signal > 0  # the comparison saw real advantages
    (entry,) = run.estimator_state["estimators"]
    assert same_state(replay.estimators[variant].state_dict(), entry["state"])
    assert same_state(report["estimators"][variant]["final_state"], entry["state"])
    return report


def assert_smoke_passed(smoke, *expected: str) -> None:
    """Every check of a smoke report passed (the failures listed if not), and the checks named
    ``expected`` (substrings of their names) were among them."""
    failed = [f"{check.name}: {check.detail}" for check in smoke.checks if not check.ok]
    assert not failed, "\n".join(failed)
    names = " | ".join(check.name for check in smoke.checks)
    missing = [what for what in expected if what not in names]
    assert not missing, missing


def assert_trained_on_core_advantages(run, calls: int) -> None:
    """Reference: the core estimator of ``run``'s saved state replayed on the rewards and groups
    verl's loop produced (both ranks' rows, padding rows excluded), call after call so that its
    state carries across steps (one call a step; with verl's sub-steps one per sub-step, in
    verl's order), broadcast over the response tokens: the plug-in inside verl must have handed
    the actor exactly that (``calls`` calls in all), nothing to verl's padding rows, and the
    replay ends in the state the run saved."""
    from ebpo.estimators import make_estimator

    entry = run.estimator_state["estimators"][0]
    reference = make_estimator(entry["name"], **entry["options"])
    assert [t.step for t in run.trace] == [1, 2, 3, 4]
    made = nonzero = 0
    for trace in run.trace:
        every = ~trace.padding & (trace.response_mask.sum(dim=-1) > 0)
        assert every.sum() < len(every)  # verl added padding rows for the 2 ranks
        for rows in trace.sub_step_rows():
            uids = np.array(trace.uids, dtype=object)[rows.numpy()]
            result = reference(trace.rewards[rows], uids, mask=every[rows])
            advantages = result.advantages.to(trace.advantages.dtype).unsqueeze(-1)
            expected = advantages * trace.response_mask[rows]
            torch.testing.assert_close(trace.advantages[rows], expected, rtol=0, atol=1e-6)
            made += 1
        assert torch.all(trace.advantages[trace.padding] == 0)
        nonzero += int(trace.advantages.abs().max() > 0)
    assert made == calls
    assert nonzero >= 1  # the comparison saw real signal
    assert reference.state_dict() == entry["state"]


# ---------------------------------------------------------------------- a verl trainer on the stack
def verl_trainer(config):
    """A stand-in for verl's trainer: ``advantages(data, batch_keys=None)`` is a method of a
    ``verl.trainer.*`` class holding ``config`` and ``global_steps`` and a local ``metrics`` dict
    (what the plug-in looks for on the stack; kept as ``self.metrics``), calling verl's own
    ``compute_advantage`` with ``config.algorithm`` — or, given the rows' TransferQueue keys
    ``{uid}_{session}_{output}``, ``compute_advantage_for_multi_trajectories`` with them, as
    verl's v1 trainer does for multi-output agent loops."""
    from verl.trainer.ppo.ray_trainer import compute_advantage
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    namespace = {
        "__name__": "verl.trainer.ppo.fake_trainer",
        "compute_advantage": compute_advantage,
        "multi": compute_advantage_for_multi_trajectories,
    }
    exec(
        "class Trainer:\n"
        "    def __init__(self, config):\n"
        "        self.config, self.global_steps = config, 1\n"
        "    def advantages(self, data, batch_keys=None):\n"
        "        metrics = self.metrics = {}\n"
        "        algo = self.config.algorithm\n"
        "        options = {'adv_estimator': algo.adv_estimator, 'config': algo}\n"
        "        if batch_keys is None:\n"
        "            out = compute_advantage(data, **options)\n"
        "        else:\n"
        "            out = multi(data, batch_keys=batch_keys, **options)\n"
        "        return out.batch['advantages']\n",
        namespace,
    )
    return namespace["Trainer"](config)
