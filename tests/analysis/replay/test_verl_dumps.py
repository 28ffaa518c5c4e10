"""Replaying dumps written by verl's own writers (``_log_rollout_data`` of the v1 and the legacy
trainer, see verl_writers.py): the groups verl's GRPO would form, the all-fail and all-pass counts
the synthetic run was built with, and advantages equal to the estimators run step by step on the
same rewards."""

from __future__ import annotations

import filecmp
from pathlib import Path

import numpy as np
import pytest
import torch

from ebpo.analysis.replay.engine import Replay
from ebpo.analysis.replay.sources import Source
from ebpo.estimators import make_estimator

pytest.importorskip("verl")
pytestmark = pytest.mark.verl

from tests.analysis.replay.verl_writers import (  # noqa: E402
    FIXTURE_STEPS,
    FIXTURES,
    synthetic_step,
    write_fixtures,
    write_legacy,
    write_v1,
)

#: step -> (prompts, all-fail groups, all-pass groups, two-output sessions, padding rows)
RUN = {
    step: (int(8 + step % 5), step % 4, (step * 3) % 5, step % 3, step % 3)
    for step in (1, 2, 3, 5, 8, 9, 10, 11, 12, 20)
}
ESTIMATORS = ["ebpo", "ebpo_within", "jspo_plus_plus", "ebpo_bb", "rloo"]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, dict]:
    """A 10-step run (steps 1..20, gaps included), written by both trainers' writers."""
    root = tmp_path_factory.mktemp("rollouts")
    rng = np.random.default_rng(7)
    prompts = {}
    for step, (n, fail, ok, multi, padding) in RUN.items():
        prompts[step] = synthetic_step(
            rng, step, prompts=n, group_size=4, all_fail=fail, all_pass=ok, multi_output=multi
        )
        write_v1(root / "v1", step, prompts[step], padding=padding)
        write_legacy(root / "legacy", step, prompts[step])
    return root, prompts


def test_the_fixtures_are_what_verl_writes(tmp_path):
    write_fixtures(tmp_path)
    for layout in ("v1", "legacy"):
        names = [f"{step}.jsonl" for step in FIXTURE_STEPS]
        match, mismatch, errors = filecmp.cmpfiles(
            FIXTURES / layout, tmp_path / layout, names, shallow=False
        )
        assert match == names, (mismatch, errors)


@pytest.mark.parametrize("layout", ["v1", "legacy"])
def test_counts_are_those_the_run_was_built_with(run, layout):
    root, prompts = run
    replay = Replay([])
    batches = list(Source([str(root / layout)], "verl").steps())
    assert [b.step for b in batches] == sorted(RUN)
    for batch in batches:
        n, fail, ok, multi, padding = RUN[batch.step]
        record = replay.step(batch)
        assert (record["groups"], record["responses"]) == (n, 4 * n)
        assert (record["all_fail_groups"], record["all_pass_groups"]) == (fail, ok)
        assert record["estimators"]["grpo"]["zero_signal_groups"] == fail + ok
        if layout == "v1":
            assert (batch.padding_rows, batch.merged_outputs) == (padding, multi)
            assert record["rows"] == 4 * n + multi + padding


@pytest.mark.parametrize("layout", ["v1", "legacy"])
def test_replayed_advantages_equal_the_estimators_run_step_by_step(run, layout):
    """Each estimator, fed the run's steps in order (rewards of each session's last output,
    grouped by prompt), gives every response the advantage the replay gave it; at the end its
    state is the replay's."""
    root, prompts = run
    replay = Replay(ESTIMATORS)
    references = {name: make_estimator(name) for name in replay.names}
    for batch in Source([str(root / layout)], "verl").steps():
        replay.step(batch)
        step_prompts = prompts[batch.step]
        rewards = torch.tensor([r for p in step_prompts for r in p.rewards], dtype=torch.float64)
        ids = [p.uid for p in step_prompts for _ in p.rewards]
        label = {p.uid: (p.uid if layout == "v1" else p.text) for p in step_prompts}
        labels = batch.group_labels.to_pylist()
        replay_ids = [labels[g] for g in batch.group_index.tolist()]
        for name, reference in references.items():
            expected = reference(rewards, ids).advantages
            got = replay.last_results[name].advantages
            for uid in label:
                want = sorted(expected[[i for i, u in enumerate(ids) if u == uid]].tolist())
                have = sorted(
                    got[[i for i, u in enumerate(replay_ids) if u == label[uid]]].tolist()
                )
                assert have == pytest.approx(want, rel=1e-12, abs=1e-12), (name, batch.step, uid)
    for name, reference in references.items():
        assert _flat(replay.estimators[name].state_dict()) == pytest.approx(
            _flat(reference.state_dict()), rel=1e-12
        ), name


def _flat(state, prefix=""):
    """The numbers of a state dict by path (the order of groups within a step may differ between
    the replay and the reference, so sums may differ in the last bits)."""
    if isinstance(state, dict):
        out = {}
        for key, value in state.items():
            out.update(_flat(value, f"{prefix}{key}."))
        return out
    return {prefix: state} if isinstance(state, int | float) and not isinstance(state, bool) else {}


def test_the_command_on_a_directory_verl_wrote(run, tmp_path, capsys):
    from ebpo.cli import main

    root, _ = run
    assert (
        main(["replay", str(root / "v1"), "--output-dir", str(tmp_path / "out"), "--no-plots"]) == 0
    )
    out = capsys.readouterr().out
    fail = sum(v[1] for v in RUN.values())
    ok = sum(v[2] for v in RUN.values())
    assert f"{fail} all-fail and {ok} all-pass groups" in out
