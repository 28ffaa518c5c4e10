"""Shared helpers for the verl plug-in tests: verl-shaped batches and a clean estimator store."""

from __future__ import annotations

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
