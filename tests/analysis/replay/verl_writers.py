"""Rollout dumps written by verl 0.9.1's own code (tests only; needs the verl extra).

Both trainers' ``_log_rollout_data`` — what ``trainer.rollout_data_dir`` runs after every training
step — are called on a bare trainer object holding only what they read: a character tokenizer,
``global_steps`` and the dump executor (``_init_dump_executor``). They decode, sort and write the
files themselves (``_dump_generations`` → ``_write_generations``).

* v1 trainer (``PPOTrainerSync``, verl's default): the batch is a ``KVBatchMeta`` whose keys are
  ``{prompt uid}_{session}_{output}``; the rows come from TransferQueue (``tq.kv_batch_get``),
  for which a dictionary store stands in, returning what the real one holds per sample (jagged
  nested tensors for prompts, responses and rm_scores; the prompt uid; reward_model). Padding
  rows are made as verl's ``padding_utils`` makes them (uid ``pad`` + 32 hex digits, one EOS
  response token, zero scores).
* legacy trainer (``RayPPOTrainer``, ``trainer.use_v1=false``): the batch is a ``DataProto``.

A :class:`Prompt` lists its sessions, each the rewards of the session's outputs (one output for
single-turn rollouts; verl scores the session by its last).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import torch

EOS = 3


@dataclass(frozen=True)
class Prompt:
    uid: str
    text: str
    sessions: tuple[tuple[float, ...], ...]

    @property
    def rewards(self) -> list[float]:
        """One reward per session: its last output's."""
        return [outputs[-1] for outputs in self.sessions]


class CharTokenizer:
    """Token i is the character chr(i); 0 pads; EOS is special (skipped by decode)."""

    pad_token_id = 0
    eos_token_id = EOS

    def decode(self, ids: Any, skip_special_tokens: bool = True) -> str:
        skip = {0, EOS} if skip_special_tokens else {0}
        return "".join(chr(int(i)) for i in ids if int(i) not in skip)

    def batch_decode(self, rows: Any, skip_special_tokens: bool = True) -> list[str]:
        return [self.decode(row, skip_special_tokens) for row in rows]


def encode(text: str) -> torch.Tensor:
    return torch.tensor([ord(c) for c in text], dtype=torch.int64)


def _padded(rows: Sequence[torch.Tensor], value: float = 0) -> torch.Tensor:
    width = max(len(r) for r in rows)
    out = torch.full((len(rows), width), value, dtype=rows[0].dtype)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def _scores(length: int, reward: float) -> torch.Tensor:
    scores = torch.zeros(length, dtype=torch.float32)
    scores[-1] = reward  # verl puts the outcome reward on the last response token
    return scores


class TransferQueueStore:
    """What ``_log_rollout_data`` reads from TransferQueue: ``kv_batch_get`` by key."""

    def __init__(self) -> None:
        self.samples: dict[str, dict[str, Any]] = {}

    def kv_batch_get(self, keys, partition_id=None, select_fields=None):
        rows = [self.samples[key] for key in keys]

        def jagged(name: str) -> Any:
            return torch.nested.nested_tensor([row[name] for row in rows], layout=torch.jagged)

        return {
            "uid": np.array([row["uid"] for row in rows], dtype=object),
            "prompts": jagged("prompts"),
            "responses": jagged("responses"),
            "rm_scores": jagged("rm_scores"),
            "reward_model": np.array([row["reward_model"] for row in rows], dtype=object),
        }


def _padding_uid(step: int) -> str:
    return "pad" + hashlib.md5(f"padding {step}".encode()).hexdigest()


def write_v1(directory: Path, step: int, prompts: Sequence[Prompt], padding: int = 0) -> Path:
    """``directory/{step}.jsonl`` written by verl's v1 trainer (``PPOTrainerSync``)."""
    from transfer_queue import KVBatchMeta
    from verl.trainer.ppo.v1 import trainer_base
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    store = TransferQueueStore()
    keys: list[str] = []
    for prompt in prompts:
        for session, outputs in enumerate(prompt.sessions):
            for index, reward in enumerate(outputs):
                key = f"{prompt.uid}_{session}_{index}"
                response = encode(f"answer {reward} ({index})")
                store.samples[key] = {
                    "uid": prompt.uid,
                    "prompts": encode(prompt.text),
                    "responses": response,
                    "rm_scores": _scores(len(response), reward),
                    "reward_model": {"ground_truth": "42"},
                }
                keys.append(key)
    pad_uid = _padding_uid(step)
    for index in range(padding):  # as verl.trainer.ppo.padding_utils builds them
        key = f"{pad_uid}_{index}_0"
        store.samples[key] = {
            "uid": pad_uid,
            "prompts": torch.full((127,), EOS, dtype=torch.int64),
            "responses": torch.full((1,), EOS, dtype=torch.int64),
            "rm_scores": torch.zeros(1, dtype=torch.float32),
            "reward_model": {"ground_truth": "42"},
        }
        keys.append(key)
    random.Random(step).shuffle(keys)  # TransferQueue's order is not the dump's: verl sorts
    batch = KVBatchMeta(keys=keys, tags=[{} for _ in keys], partition_id="train")
    trainer = object.__new__(PPOTrainerSync)
    trainer.tokenizer = CharTokenizer()
    trainer.global_steps = step
    trainer._init_dump_executor()
    with mock.patch.object(trainer_base, "tq", store):
        trainer._log_rollout_data(batch, {}, str(directory))
    trainer._shutdown_dump_executor()
    return directory / f"{step}.jsonl"


def write_legacy(directory: Path, step: int, prompts: Sequence[Prompt]) -> Path:
    """``directory/{step}.jsonl`` written by verl's legacy ``RayPPOTrainer`` (one row per
    response: a session's last output)."""
    from verl.protocol import DataProto
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    rows = [(p, reward) for p in prompts for reward in p.rewards]
    random.Random(step).shuffle(rows)  # _balance_batch reorders rows
    responses = [encode(f"answer {reward}") for _, reward in rows]
    batch = DataProto.from_dict(
        tensors={
            "prompts": _padded([encode(p.text) for p, _ in rows]),
            "responses": _padded(responses),
            "token_level_scores": _padded(
                [_scores(len(r), w) for r, (_, w) in zip(responses, rows, strict=True)]
            ),
        },
        non_tensors={
            "uid": np.array([p.uid for p, _ in rows], dtype=object),
            "reward_model": np.array([{"ground_truth": "42"} for _ in rows], dtype=object),
        },
    )
    trainer = object.__new__(RayPPOTrainer)
    trainer.tokenizer = CharTokenizer()
    trainer.global_steps = step
    trainer._init_dump_executor()
    extra = {"acc": [reward > 0 for _, reward in rows]}  # a reward function's extra field
    trainer._log_rollout_data(batch, extra, {}, str(directory))
    trainer._shutdown_dump_executor()
    return directory / f"{step}.jsonl"


def synthetic_step(
    rng: np.random.Generator,
    step: int,
    *,
    prompts: int,
    group_size: int,
    all_fail: int,
    all_pass: int,
    multi_output: int = 0,
) -> list[Prompt]:
    """``prompts`` groups of ``group_size`` 0/1 rewards: exactly ``all_fail`` all-0 and
    ``all_pass`` all-1 groups, the others mixed; the first ``multi_output`` sessions of the mixed
    groups have two outputs, the first of which carries another reward (0.5: the replay must take
    the last one)."""
    out: list[Prompt] = []
    multi_left = multi_output
    for p in range(prompts):
        if p < all_fail:
            rewards = [0.0] * group_size
        elif p < all_fail + all_pass:
            rewards = [1.0] * group_size
        else:
            ones = int(rng.integers(1, group_size))  # at least one 0 and one 1
            rewards = [1.0] * ones + [0.0] * (group_size - ones)
        sessions = []
        for reward in rewards:
            if p >= all_fail + all_pass and multi_left:
                sessions.append((0.5, reward))
                multi_left -= 1
            else:
                sessions.append((reward,))
        uid = f"{step:04d}{p:04d}-0000-4000-8000-{int(rng.integers(0, 16**12)):012x}"
        out.append(
            Prompt(uid, f"Problem {p} of step {step}: what is {p} + {step}?", tuple(sessions))
        )
    return out


#: the steps of the checked-in dumps in tests/fixtures/replay (10 after 2: numeric order)
FIXTURE_STEPS = (1, 2, 10)
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "replay"


def fixture_prompts(step: int) -> list[Prompt]:
    """The prompts of the fixture's ``step``: 6 groups of 4, 2 all-fail, 1 all-pass, one
    two-output session."""
    rng = np.random.default_rng(step)
    return synthetic_step(
        rng, step, prompts=6, group_size=4, all_fail=2, all_pass=1, multi_output=1
    )


def write_fixtures(root: Path) -> None:
    """``root/v1/{step}.jsonl`` (2 padding rows a step) and ``root/legacy/{step}.jsonl``: what
    tests/fixtures/replay holds (regenerate with ``python -m tests.analysis.replay.verl_writers``)."""
    for step in FIXTURE_STEPS:
        write_v1(root / "v1", step, fixture_prompts(step), padding=2)
        write_legacy(root / "legacy", step, fixture_prompts(step))


if __name__ == "__main__":
    write_fixtures(FIXTURES)
